//! The post-rollout check: one Job per role (maintenance's too, with `spec.maintenance`) that
//! runs `lake selftest` with the role's configuration and ServiceAccount (so its credentials),
//! named after the configuration's hash, the image and the IAM role so a change of any runs it
//! again. Pure: the Jobs as values.

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    ConfigMapEnvSource, Container, EnvFromSource, PodSpec, PodTemplateSpec,
};
use lake_common::plan::Role;
use sha2::{Digest, Sha256};

use super::iam::Identity;
use super::pod::{container_security, pod_security};
use super::workloads::{Component, config, config_hash, meta_named};
use crate::render::workload_name;
use crate::validate::ValidatedCluster;

/// The selftest Job of `identity`; `None` for maintenance without `spec.maintenance`.
pub fn job(cluster: &ValidatedCluster, identity: Identity) -> Option<Job> {
    let (config_hash, image, workload, component) = match identity {
        Identity::Query | Identity::Metadata => {
            let role = match identity {
                Identity::Query => Role::Query,
                _ => Role::Metadata,
            };
            let image = match role {
                Role::Query => &cluster.query.image,
                Role::Metadata => &cluster.metadata.image,
            };
            let (_, hash) = config(cluster, role);
            (
                hash,
                image,
                workload_name(cluster, role),
                Component::Role(role),
            )
        }
        Identity::Maintenance => {
            cluster.maintenance.as_ref()?;
            let data = super::maintenance::config(cluster)?;
            (
                config_hash(&data),
                &cluster.metadata.image,
                super::maintenance::name(cluster),
                Component::Maintenance,
            )
        }
    };
    // The role too: a new role is new credentials, whose rights the check exists to prove.
    let role = cluster
        .iam
        .as_ref()
        .and_then(|iam| iam.role(identity))
        .unwrap_or_default();
    let digest: String = Sha256::digest(format!("{config_hash}/{image}/{role}").as_bytes())
        .iter()
        .take(4)
        .map(|b| format!("{b:02x}"))
        .collect();
    Some(Job {
        metadata: meta_named(cluster, component, format!("{workload}-check-{digest}")),
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
    })
}

/// Every role's Job; none for a local lake (its stores are files only its one pod may open).
pub fn jobs(cluster: &ValidatedCluster) -> Vec<(Identity, Job)> {
    if cluster.local_volume.is_some() {
        return Vec::new();
    }
    [Identity::Query, Identity::Metadata, Identity::Maintenance]
        .into_iter()
        .filter_map(|identity| Some((identity, job(cluster, identity)?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(query_role: &str, maintenance_role: &str) -> ValidatedCluster {
        crate::validate::fixture::cloud(
            &format!(
                "queryRole: {query_role}, metadataRole: lake-metadata, maintenanceRole: \
                 {maintenance_role}"
            ),
            "  maintenance: {}",
        )
    }

    fn names(cluster: &ValidatedCluster) -> Vec<(Identity, String)> {
        jobs(cluster)
            .into_iter()
            .map(|(identity, job)| (identity, job.metadata.name.unwrap()))
            .collect()
    }

    /// A new role is new credentials: its check runs again, and only its own.
    #[test]
    fn a_changed_role_runs_its_check_again() {
        let before = names(&cluster("lake-query", "lake-maintenance"));
        assert_eq!(before.len(), 3, "{before:?}");
        let query = names(&cluster("lake-query-2", "lake-maintenance"));
        let maintenance = names(&cluster("lake-query", "lake-maintenance-2"));
        let changed = |after: &[(Identity, String)]| -> Vec<Identity> {
            before
                .iter()
                .zip(after)
                .filter(|(b, a)| b.1 != a.1)
                .map(|(b, _)| b.0)
                .collect()
        };
        assert_eq!(changed(&query), [Identity::Query]);
        assert_eq!(changed(&maintenance), [Identity::Maintenance]);
        assert_eq!(names(&cluster("lake-query", "lake-maintenance")), before);
    }
}
