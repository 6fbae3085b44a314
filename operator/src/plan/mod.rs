//! plan: a [`ValidatedCluster`] → everything the cluster needs, as a value: the DynamoDB tables
//! (key schemas, markers), the IAM policy documents and every Kubernetes object. Pure: no client.
//! Reconcile applies it; `lake-operator render` prints it.

pub mod distributed;
pub mod iam;
pub mod local;
pub mod maintenance;
mod network;
pub(crate) mod pod;
pub mod selftest;
pub mod tables;
pub mod tls;
pub mod tokens;
pub mod workloads;

use serde::Serialize;

pub use iam::{IamInputs, RolePolicy};
pub use tables::DesiredTable;
pub use tokens::TokenSecret;
pub use workloads::Object;

use crate::validate::ValidatedCluster;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LakePlan {
    pub tables: Vec<DesiredTable>,
    pub policies: Vec<RolePolicy>,
    pub objects: Vec<Object>,
    /// Created once (a random token), never applied again: not among `objects`.
    pub tokens: Vec<TokenSecret>,
    /// Issued once (random keys), like the tokens; `None` with `spec.tls: Disabled`.
    pub tls: Option<tls::TlsPlan>,
}

pub fn plan(cluster: &ValidatedCluster, inputs: &IamInputs) -> LakePlan {
    let policies = iam::policies(cluster, inputs);
    LakePlan {
        tables: tables::tables(cluster),
        objects: workloads::objects(cluster, &policies),
        tokens: tokens::token_secrets(cluster),
        tls: tls::tls(cluster),
        policies,
    }
}
