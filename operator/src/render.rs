//! render: the offline dry-run of a `LakeCluster` — what the operator would provision and what
//! each runtime role would be configured with. Pure: the same code paths as reconcile, no client.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use lake_common::config::{RuntimeConfig, default_port};
use lake_common::plan::{Role, RolePlan};
use serde::Serialize;

use crate::validate::ValidatedCluster;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RenderedPlan<'a> {
    pub cluster: &'a ValidatedCluster,
    pub roles: BTreeMap<Role, RenderedRole>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RenderedRole {
    /// The endpoint clients use, through the role's Service.
    pub endpoint: String,
    /// What the role may connect to.
    pub connection: RolePlan,
    /// The role's ConfigMap data (`LAKE_*`).
    pub config: BTreeMap<&'static str, String>,
}

/// The Service (and workload) name of `role` in `cluster`.
pub fn workload_name(cluster: &ValidatedCluster, role: Role) -> String {
    format!("{}-{}", cluster.name, role)
}

/// The in-cluster Flight SQL endpoint of `role`.
pub fn endpoint(cluster: &ValidatedCluster, role: Role) -> String {
    format!(
        "grpc://{}.{}.svc:{}",
        workload_name(cluster, role),
        cluster.namespace,
        default_port(role)
    )
}

pub fn runtime_config(cluster: &ValidatedCluster, role: Role) -> RuntimeConfig {
    RuntimeConfig::for_role(
        &cluster.authority,
        role,
        cluster.uid.clone(),
        SocketAddr::from(([0, 0, 0, 0], default_port(role))),
        Some(endpoint(cluster, Role::Metadata)),
    )
}

pub fn render(cluster: &ValidatedCluster) -> RenderedPlan<'_> {
    let roles = [Role::Query, Role::Metadata]
        .into_iter()
        .map(|role| {
            let config = runtime_config(cluster, role);
            let rendered = RenderedRole {
                endpoint: endpoint(cluster, role),
                config: config.to_vars(),
                connection: config.plan,
            };
            (role, rendered)
        })
        .collect();
    RenderedPlan { cluster, roles }
}
