//! render: the offline dry-run of a `LakeCluster` — what the operator would provision (tables,
//! IAM policies, every Kubernetes object) and what each runtime role would be configured with.
//! Pure: the same plan reconcile applies, no client.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use lake_common::config::{Auth, RuntimeConfig, default_port};
use lake_common::plan::{Role, RolePlan};
use serde::Serialize;

use crate::plan::{DesiredTable, IamInputs, LakePlan, Object, RolePolicy, plan};
use crate::validate::ValidatedCluster;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RenderedPlan<'a> {
    pub cluster: &'a ValidatedCluster,
    pub roles: BTreeMap<Role, RenderedRole>,
    /// The DynamoDB tables (with markers) reconcile creates or adopts.
    pub tables: Vec<DesiredTable>,
    /// The inline policy (and IRSA trust policy) of each role.
    pub policies: Vec<RolePolicy>,
    /// Every Kubernetes object, as applied.
    pub objects: Vec<Object>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RenderedRole {
    /// The endpoint clients use, through the role's Service.
    pub endpoint: String,
    /// What the role may connect to.
    pub connection: RolePlan,
    /// The role's ConfigMap data (`LAKE_*`); none for a local lake, whose one pod runs
    /// `lake local` with flags (see its StatefulSet).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub config: BTreeMap<&'static str, String>,
}

/// The Service (and workload) name of `role` in `cluster`.
pub fn workload_name(cluster: &ValidatedCluster, role: Role) -> String {
    format!("{}-{}", cluster.name, role)
}

/// The in-cluster Flight SQL endpoint of `role`.
pub fn endpoint(cluster: &ValidatedCluster, role: Role) -> String {
    let scheme = match cluster.tls {
        crate::crd::TlsMode::Operator => "grpc+tls",
        crate::crd::TlsMode::Disabled => "grpc",
    };
    format!(
        "{scheme}://{}.{}.svc:{}",
        workload_name(cluster, role),
        cluster.namespace,
        default_port(role)
    )
}

pub fn runtime_config(cluster: &ValidatedCluster, role: Role) -> RuntimeConfig {
    let mut config = RuntimeConfig::for_role(
        &cluster.authority,
        role,
        cluster.uid.clone(),
        SocketAddr::from(([0, 0, 0, 0], default_port(role))),
        Some(endpoint(cluster, Role::Metadata)),
    );
    // Every pod requires bearer tokens: its role's Secret, mounted (plan::tokens).
    config.auth = Auth::Tokens(crate::plan::tokens::token_file());
    // Queries spill inside the pod's `/tmp`, within what its size limit leaves them.
    use crate::plan::pod::{SPILL_DIR, resources_with_disk, spill_limit_mb, tmp_size_mb};
    let resources = match role {
        Role::Query => cluster.query.resources.clone(),
        Role::Metadata => cluster.metadata.resources.clone(),
    };
    config.limits.query_timeout_seconds = cluster.query_timeout_seconds;
    config.spill_dir = Some(SPILL_DIR.to_owned());
    config.limits.spill_mb = Some(spill_limit_mb(
        tmp_size_mb(&resources_with_disk(resources)),
        1,
    ));
    if cluster.tls == crate::crd::TlsMode::Operator {
        config.tls = Some(crate::plan::tls::files());
    }
    if role == Role::Query && cluster.local_volume.is_none() {
        config.distributed = crate::plan::distributed::config(cluster);
    }
    config
}

pub fn render<'a>(cluster: &'a ValidatedCluster, inputs: &IamInputs) -> RenderedPlan<'a> {
    let roles = [Role::Query, Role::Metadata]
        .into_iter()
        .map(|role| {
            let config = runtime_config(cluster, role);
            let rendered = RenderedRole {
                endpoint: endpoint(cluster, role),
                config: match cluster.local_volume {
                    Some(_) => BTreeMap::new(),
                    None => config.to_vars(),
                },
                connection: config.plan,
            };
            (role, rendered)
        })
        .collect();
    let LakePlan {
        tables,
        policies,
        objects,
        // Secrets hold random tokens: reconcile creates them; offline users create their own
        // (docs/operator.md), so a render is the same every time.
        tokens: _,
        tls: _,
    } = plan(cluster, inputs);
    RenderedPlan {
        cluster,
        roles,
        tables,
        policies,
        objects,
    }
}
