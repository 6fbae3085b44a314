//! The maintenance authority's objects (`spec.maintenance`): a ConfigMap with the maintenance
//! role's `LAKE_*` (the warehouse and the manifest table, never the registry), a ServiceAccount
//! for its own IAM role, and a CronJob running `lake maintain` one pass at a time. Pure.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{CronJob, CronJobSpec, JobSpec, JobTemplateSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapEnvSource, Container, EnvFromSource, PodSpec, PodTemplateSpec,
    ServiceAccount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use lake_common::config::MaintenanceConfig;

use super::iam::{Identity, RolePolicy};
use super::pod::{container_security, pod_security, resources_with_disk, tmp_size_mb, tmp_volume};
use super::tables::UNKNOWN_UID;
use super::workloads::{
    CONFIG_HASH, Component, IRSA_ANNOTATION, Object, config_hash, labels, meta_named, selector,
};
use crate::validate::{MaintenanceJob, ValidatedCluster};

/// The name of the maintenance CronJob, its ConfigMap and its ServiceAccount.
pub fn name(cluster: &ValidatedCluster) -> String {
    format!("{}-{}", cluster.name, Identity::Maintenance)
}

/// The maintenance role's `LAKE_*` configuration; `None` for a local lake.
pub fn config(cluster: &ValidatedCluster) -> Option<BTreeMap<String, String>> {
    let uid = cluster
        .uid
        .clone()
        .unwrap_or_else(|| UNKNOWN_UID.to_owned());
    let config = MaintenanceConfig::for_plan(&cluster.authority, uid)?;
    Some(
        config
            .to_vars()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
    )
}

/// `lake maintain`'s flags for `job`'s settings.
pub fn args(job: &MaintenanceJob) -> Vec<String> {
    [
        ("--retention-seconds", job.retention_seconds),
        ("--grace-seconds", job.grace_seconds),
        ("--target-rows-per-fragment", job.target_rows_per_fragment),
        ("--index-unindexed-rows", job.index_unindexed_rows),
    ]
    .into_iter()
    .fold(vec!["maintain".to_owned()], |mut args, (flag, value)| {
        args.extend([flag.to_owned(), value.to_string()]);
        args
    })
}

fn cron_job(cluster: &ValidatedCluster, job: &MaintenanceJob, config_hash: String) -> CronJob {
    let name = name(cluster);
    let resources = resources_with_disk(job.resources.clone());
    let (tmp, tmp_mount) = tmp_volume(tmp_size_mb(&resources));
    let deadline = i64::try_from(job.deadline_seconds).unwrap_or(i64::MAX);
    CronJob {
        metadata: meta_named(cluster, Component::Maintenance, name.clone()),
        spec: CronJobSpec {
            schedule: job.schedule.clone(),
            suspend: Some(job.suspend),
            // One pass at a time: a pass still running when the next is due skips it.
            concurrency_policy: Some("Forbid".into()),
            // A pass missed by more than its own deadline (the controller was down) is
            // skipped rather than started late.
            starting_deadline_seconds: Some(deadline),
            successful_jobs_history_limit: Some(3),
            failed_jobs_history_limit: Some(3),
            job_template: JobTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels(cluster, Component::Maintenance)),
                    ..Default::default()
                }),
                spec: Some(JobSpec {
                    // A failed pass is not retried at once: the next schedule runs it again.
                    backoff_limit: Some(0),
                    active_deadline_seconds: Some(deadline),
                    template: PodTemplateSpec {
                        metadata: Some(ObjectMeta {
                            labels: Some(selector(cluster, Component::Maintenance)),
                            annotations: Some(BTreeMap::from([(CONFIG_HASH.into(), config_hash)])),
                            ..Default::default()
                        }),
                        spec: Some(PodSpec {
                            restart_policy: Some("Never".into()),
                            service_account_name: Some(name.clone()),
                            security_context: Some(pod_security()),
                            containers: vec![Container {
                                name: "maintain".into(),
                                image: Some(cluster.metadata.image.clone()),
                                args: Some(args(job)),
                                env_from: Some(vec![EnvFromSource {
                                    config_map_ref: Some(ConfigMapEnvSource {
                                        name,
                                        optional: Some(false),
                                    }),
                                    ..Default::default()
                                }]),
                                resources: Some(resources),
                                security_context: Some(container_security()),
                                volume_mounts: Some(vec![tmp_mount]),
                                ..Default::default()
                            }],
                            volumes: Some(vec![tmp]),
                            ..Default::default()
                        }),
                    },
                    ..Default::default()
                }),
            },
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The maintenance objects, in apply order; none without `spec.maintenance` or on local storage.
pub fn objects(cluster: &ValidatedCluster, policies: &[RolePolicy]) -> Vec<Object> {
    let (Some(job), Some(data)) = (&cluster.maintenance, config(cluster)) else {
        return Vec::new();
    };
    let name = name(cluster);
    let meta = || meta_named(cluster, Component::Maintenance, name.clone());
    let mut account = meta();
    if let Some(policy) = policies.iter().find(|p| p.role == Identity::Maintenance) {
        account.annotations = Some(BTreeMap::from([(
            IRSA_ANNOTATION.into(),
            policy.role_arn.clone(),
        )]));
    }
    let config_hash = config_hash(&data);
    vec![
        Object::ConfigMap(ConfigMap {
            metadata: meta(),
            data: Some(data),
            ..Default::default()
        }),
        Object::ServiceAccount(ServiceAccount {
            metadata: account,
            ..Default::default()
        }),
        Object::CronJob(cron_job(cluster, job, config_hash)),
    ]
}
