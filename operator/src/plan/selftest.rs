//! The post-rollout check: one Job per role that runs `lake selftest` with the role's
//! configuration and ServiceAccount (so its credentials), named after the configuration's hash
//! and image so a change runs it again. Pure: the Jobs as values.

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    ConfigMapEnvSource, Container, EnvFromSource, PodSpec, PodTemplateSpec,
};
use lake_common::plan::Role;
use sha2::{Digest, Sha256};

use super::pod::{container_security, pod_security};
use super::workloads::{config, meta_named};
use crate::render::workload_name;
use crate::validate::ValidatedCluster;

/// The selftest Job of `role`.
pub fn job(cluster: &ValidatedCluster, role: Role) -> Job {
    let (_, config_hash) = config(cluster, role);
    let image = match role {
        Role::Query => &cluster.query.image,
        Role::Metadata => &cluster.metadata.image,
    };
    let digest: String = Sha256::digest(format!("{config_hash}/{image}").as_bytes())
        .iter()
        .take(4)
        .map(|b| format!("{b:02x}"))
        .collect();
    let workload = workload_name(cluster, role);
    Job {
        metadata: meta_named(cluster, role, format!("{workload}-check-{digest}")),
        spec: Some(JobSpec {
            backoff_limit: Some(0),
            template: PodTemplateSpec {
                metadata: None,
                spec: Some(PodSpec {
                    restart_policy: Some("Never".into()),
                    service_account_name: Some(workload.clone()),
                    security_context: Some(pod_security()),
                    containers: vec![Container {
                        name: "selftest".into(),
                        image: Some(image.clone()),
                        args: Some(vec!["selftest".into()]),
                        env_from: Some(vec![EnvFromSource {
                            config_map_ref: Some(ConfigMapEnvSource {
                                name: workload,
                                optional: Some(false),
                            }),
                            ..Default::default()
                        }]),
                        security_context: Some(container_security()),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Both roles' Jobs; none for a local lake (its stores are files only its one pod may open).
pub fn jobs(cluster: &ValidatedCluster) -> Vec<(Role, Job)> {
    if cluster.local_volume.is_some() {
        return Vec::new();
    }
    [Role::Query, Role::Metadata]
        .into_iter()
        .map(|role| (role, job(cluster, role)))
        .collect()
}
