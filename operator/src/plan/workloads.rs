//! The Kubernetes objects of a cluster: per role a ConfigMap (`LAKE_*`), a ServiceAccount, a
//! Deployment and a Service, plus a PodDisruptionBudget for query. Pure builders.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy, StatefulSet};
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapEnvSource, Container, EnvFromSource, KeyToPath, PodSpec, PodTemplateSpec,
    ResourceRequirements, Service, ServiceAccount, ServicePort, ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use lake_common::config::default_port;
use lake_common::plan::{Role, Storage};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::iam::RolePolicy;
use super::tables::MANAGER;
use crate::render::{runtime_config, workload_name};
use crate::validate::ValidatedCluster;

use super::network::metadata_ingress;
use super::pod::{
    container_port, container_security, pod_security, resources_with_disk, secret_volume,
    tcp_probe, tls_volume, tmp_size_mb, tmp_volume,
};

/// The pod-template annotation that changes whenever a role's configuration does, so a config
/// change rolls the pods.
pub const CONFIG_HASH: &str = "lake.dev/config-hash";
pub const IRSA_ANNOTATION: &str = "eks.amazonaws.com/role-arn";
/// The pod-template annotation naming the IAM role a workload runs as. A pod gets its role's
/// credentials when it is admitted (from its ServiceAccount), so a changed role must roll the
/// pods, or they go on as the old role.
pub const ROLE_ANNOTATION: &str = "lake.dev/role-arn";

/// One object to apply.
// A handful per cluster, built once per reconcile: boxing would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Object {
    ConfigMap(ConfigMap),
    ServiceAccount(ServiceAccount),
    Deployment(Deployment),
    StatefulSet(StatefulSet),
    Service(Service),
    PodDisruptionBudget(PodDisruptionBudget),
    NetworkPolicy(NetworkPolicy),
    CronJob(CronJob),
    Role(k8s_openapi::api::rbac::v1::Role),
    RoleBinding(k8s_openapi::api::rbac::v1::RoleBinding),
}

impl Object {
    pub fn kind(&self) -> &'static str {
        match self {
            Object::ConfigMap(_) => "ConfigMap",
            Object::ServiceAccount(_) => "ServiceAccount",
            Object::Deployment(_) => "Deployment",
            Object::StatefulSet(_) => "StatefulSet",
            Object::Service(_) => "Service",
            Object::PodDisruptionBudget(_) => "PodDisruptionBudget",
            Object::NetworkPolicy(_) => "NetworkPolicy",
            Object::CronJob(_) => "CronJob",
            Object::Role(_) => "Role",
            Object::RoleBinding(_) => "RoleBinding",
        }
    }

    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            Object::ConfigMap(o) => &o.metadata,
            Object::ServiceAccount(o) => &o.metadata,
            Object::Deployment(o) => &o.metadata,
            Object::StatefulSet(o) => &o.metadata,
            Object::Service(o) => &o.metadata,
            Object::PodDisruptionBudget(o) => &o.metadata,
            Object::NetworkPolicy(o) => &o.metadata,
            Object::CronJob(o) => &o.metadata,
            Object::Role(o) => &o.metadata,
            Object::RoleBinding(o) => &o.metadata,
        }
    }

    pub fn metadata_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Object::ConfigMap(o) => &mut o.metadata,
            Object::ServiceAccount(o) => &mut o.metadata,
            Object::Deployment(o) => &mut o.metadata,
            Object::StatefulSet(o) => &mut o.metadata,
            Object::Service(o) => &mut o.metadata,
            Object::PodDisruptionBudget(o) => &mut o.metadata,
            Object::NetworkPolicy(o) => &mut o.metadata,
            Object::CronJob(o) => &mut o.metadata,
            Object::Role(o) => &mut o.metadata,
            Object::RoleBinding(o) => &mut o.metadata,
        }
    }

    pub fn name(&self) -> &str {
        self.metadata().name.as_deref().unwrap_or_default()
    }
}

/// What an object is part of (its `app.kubernetes.io/component`): a role's workload, the
/// one pod of a local lake that serves both, or the maintenance CronJob.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Component {
    Role(Role),
    Local,
    Maintenance,
}

impl From<Role> for Component {
    fn from(role: Role) -> Self {
        Component::Role(role)
    }
}

impl std::fmt::Display for Component {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Component::Role(role) => role.fmt(f),
            Component::Local => f.write_str("local"),
            Component::Maintenance => f.write_str(lake_common::config::MAINTENANCE_ROLE),
        }
    }
}

pub fn labels(
    cluster: &ValidatedCluster,
    component: impl Into<Component>,
) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".into(), "lake".into()),
        ("app.kubernetes.io/instance".into(), cluster.name.clone()),
        (
            "app.kubernetes.io/component".into(),
            component.into().to_string(),
        ),
        ("app.kubernetes.io/managed-by".into(), MANAGER.into()),
    ])
}

/// The labels that select `component`'s pods.
pub(crate) fn selector(
    cluster: &ValidatedCluster,
    component: impl Into<Component>,
) -> BTreeMap<String, String> {
    let mut labels = labels(cluster, component);
    labels.remove("app.kubernetes.io/managed-by");
    labels
}

pub(crate) fn meta(cluster: &ValidatedCluster, role: Role) -> ObjectMeta {
    meta_named(cluster, role, workload_name(cluster, role))
}

/// Name, namespace, labels and the owner reference of one of `component`'s objects.
pub(crate) fn meta_named(
    cluster: &ValidatedCluster,
    component: impl Into<Component>,
    name: String,
) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(cluster.namespace.clone()),
        labels: Some(labels(cluster, component)),
        owner_references: cluster.uid.as_ref().map(|uid| {
            vec![OwnerReference {
                api_version: "lake.dev/v1alpha1".into(),
                kind: "LakeCluster".into(),
                name: cluster.name.clone(),
                uid: uid.clone(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]
        }),
        ..Default::default()
    }
}

/// The role's `LAKE_*` configuration and its hash.
pub fn config(cluster: &ValidatedCluster, role: Role) -> (BTreeMap<String, String>, String) {
    let data: BTreeMap<String, String> = runtime_config(cluster, role)
        .to_vars()
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    let hash = config_hash(&data);
    (data, hash)
}

/// A short digest of a `LAKE_*` configuration, for the pod-template annotation that rolls
/// pods when it changes.
pub fn config_hash(data: &BTreeMap<String, String>) -> String {
    let canonical = serde_json::to_string(data).unwrap_or_default();
    Sha256::digest(canonical.as_bytes())
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn deployment(
    cluster: &ValidatedCluster,
    role: Role,
    config_hash: &str,
    role_arn: Option<&str>,
    image: &str,
    replicas: i32,
    resources: Option<ResourceRequirements>,
) -> Deployment {
    let name = workload_name(cluster, role);
    let resources = resources_with_disk(resources);
    // A distributed query pod: also a worker (its port, certificate, API identity, drain).
    let distributed = match role {
        Role::Query => super::distributed::pod_parts(cluster),
        Role::Metadata => None,
    };
    let mut tls = tls_volume(cluster, &role.to_string());
    if let (Some((volume, _)), Some(parts)) = (&mut tls, &distributed)
        && let Some(items) = volume.secret.as_mut().and_then(|s| s.items.as_mut())
    {
        items.extend(parts.tls_items.iter().map(|(key, path)| KeyToPath {
            key: key.clone(),
            path: (*path).to_owned(),
            ..Default::default()
        }));
    }
    // The role's bearer tokens (LAKE_TOKEN_FILE) and, with TLS, only its own certificate.
    let (volumes, mounts): (Vec<Volume>, Vec<VolumeMount>) = [
        Some(tmp_volume(tmp_size_mb(&resources))),
        Some(secret_volume(
            "tokens",
            super::tokens::secret_name(cluster, role),
            super::tokens::TOKEN_DIR,
            None,
        )),
        tls,
        distributed.as_ref().map(|p| p.volume.clone()),
    ]
    .into_iter()
    .flatten()
    .unzip();
    let ports = std::iter::once(container_port("flight", default_port(role)))
        .chain(distributed.as_ref().map(|p| p.port.clone()))
        .collect();
    let mut pod_labels = labels(cluster, role);
    pod_labels.remove("app.kubernetes.io/managed-by");
    Deployment {
        metadata: meta(cluster, role),
        spec: DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(selector(cluster, role)),
                ..Default::default()
            },
            // Metadata is the single writer: never two at once, even during a rollout.
            strategy: (role == Role::Metadata).then(|| DeploymentStrategy {
                type_: Some("Recreate".into()),
                ..Default::default()
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    annotations: Some(
                        [
                            (CONFIG_HASH, Some(config_hash)),
                            (ROLE_ANNOTATION, role_arn),
                        ]
                        .into_iter()
                        .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned())))
                        .collect(),
                    ),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(name.clone()),
                    // Only a distributed query pod talks to the API (its own projected token).
                    automount_service_account_token: distributed.as_ref().map(|_| false),
                    termination_grace_period_seconds: distributed.as_ref().map(|p| p.grace_seconds),
                    security_context: Some(pod_security()),
                    containers: vec![Container {
                        name: "lake".into(),
                        image: Some(image.to_owned()),
                        args: Some(vec!["serve".into()]),
                        env_from: Some(vec![EnvFromSource {
                            config_map_ref: Some(ConfigMapEnvSource {
                                name: name.clone(),
                                optional: Some(false),
                            }),
                            ..Default::default()
                        }]),
                        ports: Some(ports),
                        lifecycle: distributed.as_ref().map(|p| p.lifecycle.clone()),
                        readiness_probe: Some(tcp_probe("flight", 5, 3)),
                        liveness_probe: Some(tcp_probe("flight", 10, 6)),
                        resources: Some(resources),
                        security_context: Some(container_security()),
                        volume_mounts: Some(mounts),
                        ..Default::default()
                    }],
                    volumes: Some(volumes),
                    ..Default::default()
                }),
            },
            ..Default::default()
        },
        ..Default::default()
    }
}

/// `role`'s Service, in front of `component`'s pods (their port `target_port`).
pub(crate) fn service(
    cluster: &ValidatedCluster,
    role: Role,
    component: Component,
    target_port: &str,
) -> Service {
    let (type_, annotations) = match role {
        Role::Query => (
            format!("{:?}", cluster.query.service_type),
            cluster.query.service_annotations.clone(),
        ),
        Role::Metadata => ("ClusterIP".to_owned(), BTreeMap::new()),
    };
    let mut metadata = meta(cluster, role);
    if !annotations.is_empty() {
        metadata.annotations = Some(annotations);
    }
    Service {
        metadata,
        spec: Some(ServiceSpec {
            type_: Some(type_),
            selector: Some(selector(cluster, component)),
            ports: Some(vec![ServicePort {
                name: Some("flight".into()),
                port: i32::from(default_port(role)),
                target_port: Some(IntOrString::String(target_port.into())),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Every object of the cluster, in apply order (config and identity before the pods that use
/// them). A local lake is one StatefulSet pod instead ([`super::local`]).
pub fn objects(cluster: &ValidatedCluster, policies: &[RolePolicy]) -> Vec<Object> {
    if let (Storage::Local { path }, Some(volume)) =
        (cluster.authority.storage(), &cluster.local_volume)
    {
        return super::local::objects(cluster, path, volume);
    }
    // Distributed query's discovery (the query ServiceAccount's Role) before the pods that use it.
    let mut objects = super::distributed::objects(cluster);
    for role in [Role::Query, Role::Metadata] {
        let (data, hash) = config(cluster, role);
        objects.push(Object::ConfigMap(ConfigMap {
            metadata: meta(cluster, role),
            data: Some(data),
            ..Default::default()
        }));
        let mut sa_meta = meta(cluster, role);
        let policy = policies.iter().find(|p| p.role == role.into());
        if let Some(policy) = policy {
            sa_meta.annotations = Some(BTreeMap::from([(
                IRSA_ANNOTATION.into(),
                policy.role_arn.clone(),
            )]));
        }
        objects.push(Object::ServiceAccount(ServiceAccount {
            metadata: sa_meta,
            ..Default::default()
        }));
        let (image, replicas, resources) = match role {
            Role::Query => (
                &cluster.query.image,
                cluster.query.replicas,
                cluster.query.resources.clone(),
            ),
            Role::Metadata => (
                &cluster.metadata.image,
                1,
                cluster.metadata.resources.clone(),
            ),
        };
        objects.push(Object::Deployment(deployment(
            cluster,
            role,
            &hash,
            policy.map(|p| p.role_arn.as_str()),
            image,
            replicas,
            resources,
        )));
        objects.push(Object::Service(service(
            cluster,
            role,
            role.into(),
            "flight",
        )));
    }
    objects.push(Object::PodDisruptionBudget(PodDisruptionBudget {
        metadata: meta(cluster, Role::Query),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(selector(cluster, Role::Query)),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }));
    objects.push(Object::NetworkPolicy(metadata_ingress(cluster)));
    objects.extend(super::maintenance::objects(cluster, policies));
    objects
}

/// A workload whose rollout says whether the cluster's pods are up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rollout {
    Deployment(String),
    StatefulSet(String),
}

/// What must be rolled out: both roles' Deployments, or a local lake's StatefulSet.
pub fn rollouts(cluster: &ValidatedCluster) -> Vec<Rollout> {
    match &cluster.local_volume {
        Some(_) => vec![Rollout::StatefulSet(super::local::workload_name(cluster))],
        None => [Role::Query, Role::Metadata]
            .into_iter()
            .map(|role| Rollout::Deployment(workload_name(cluster, role)))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template_annotations(query_role: &str) -> Vec<(String, BTreeMap<String, String>)> {
        let cluster = crate::validate::fixture::cloud(
            &format!("queryRole: {query_role}, metadataRole: lake-metadata"),
            "",
        );
        let plan = crate::plan::plan(&cluster, &Default::default());
        plan.objects
            .into_iter()
            .filter_map(|o| match o {
                Object::Deployment(d) => Some((
                    d.metadata.name.unwrap(),
                    d.spec.template.metadata.unwrap().annotations.unwrap(),
                )),
                _ => None,
            })
            .collect()
    }

    /// Pods get their role's credentials when admitted: a new role rolls its Deployment (and
    /// only that one), though the configuration is the same.
    #[test]
    fn a_changed_role_rolls_its_pods() {
        let before = template_annotations("lake-query");
        let after = template_annotations("lake-query-2");
        assert_eq!(before.len(), 2);
        for ((name, b), (_, a)) in before.iter().zip(&after) {
            assert_eq!(b[CONFIG_HASH], a[CONFIG_HASH], "{name}");
            assert_eq!(name.ends_with("-query"), b != a, "{name}: {b:?} → {a:?}");
        }
        let query = &after.iter().find(|(n, _)| n.ends_with("-query")).unwrap().1;
        assert!(
            query[ROLE_ANNOTATION].ends_with(":role/lake-query-2"),
            "{query:?}"
        );
    }
}
