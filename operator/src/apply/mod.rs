//! apply: make the world match a [`crate::plan::LakePlan`] — DynamoDB tables, IAM inline
//! policies, Kubernetes objects. Thin: observe, compare, write only what differs.

pub mod error;
pub mod iam;
pub mod maintenance;
pub mod selftest;
pub mod tables;
pub mod tls;
pub mod tokens;
pub mod workloads;

pub use error::ApplyError;
