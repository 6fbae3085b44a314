//! lake-operator: turns a `LakeCluster` into provisioned tables, IAM policies and workloads.
//!
//! The pipeline is validate → plan → apply → status. `validate` and `render` are pure (they take no
//! client), and back both reconcile and the offline `lake-operator render` dry-run.

pub mod allowlist;
pub mod apply;
pub mod aws;
pub mod controller;
pub mod crd;
pub mod leader;
pub mod metrics;
pub mod migration;
pub mod plan;
pub mod reconcile;
pub mod render;
pub mod status;
pub mod strict;
pub mod validate;
