//! The Kubernetes objects of a cluster: per role a ConfigMap (`LAKE_*`), a ServiceAccount, a
//! Deployment and a Service, plus a PodDisruptionBudget for query. Pure builders.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMap, ConfigMapEnvSource, Container, ContainerPort, EmptyDirVolumeSource,
    EnvFromSource, KeyToPath, PodSecurityContext, PodSpec, PodTemplateSpec, Probe,
    ResourceRequirements, SeccompProfile, SecretVolumeSource, SecurityContext, Service,
    ServiceAccount, ServicePort, ServiceSpec, TCPSocketAction, Volume, VolumeMount,
};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta, OwnerReference,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use lake_common::config::default_port;
use lake_common::plan::{Role, Storage};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::iam::RolePolicy;
use super::tables::MANAGER;
use crate::render::{runtime_config, workload_name};
use crate::validate::ValidatedCluster;

/// The pod-template annotation that changes whenever a role's configuration does, so a config
/// change rolls the pods.
pub const CONFIG_HASH: &str = "lake.dev/config-hash";
pub const IRSA_ANNOTATION: &str = "eks.amazonaws.com/role-arn";
const RUN_AS: i64 = 65532;

/// One object to apply.
// A handful per cluster, built once per reconcile: boxing would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Object {
    ConfigMap(ConfigMap),
    ServiceAccount(ServiceAccount),
    Deployment(Deployment),
    Service(Service),
    PodDisruptionBudget(PodDisruptionBudget),
    NetworkPolicy(NetworkPolicy),
}

impl Object {
    pub fn kind(&self) -> &'static str {
        match self {
            Object::ConfigMap(_) => "ConfigMap",
            Object::ServiceAccount(_) => "ServiceAccount",
            Object::Deployment(_) => "Deployment",
            Object::Service(_) => "Service",
            Object::PodDisruptionBudget(_) => "PodDisruptionBudget",
            Object::NetworkPolicy(_) => "NetworkPolicy",
        }
    }

    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            Object::ConfigMap(o) => &o.metadata,
            Object::ServiceAccount(o) => &o.metadata,
            Object::Deployment(o) => &o.metadata,
            Object::Service(o) => &o.metadata,
            Object::PodDisruptionBudget(o) => &o.metadata,
            Object::NetworkPolicy(o) => &o.metadata,
        }
    }

    pub fn metadata_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Object::ConfigMap(o) => &mut o.metadata,
            Object::ServiceAccount(o) => &mut o.metadata,
            Object::Deployment(o) => &mut o.metadata,
            Object::Service(o) => &mut o.metadata,
            Object::PodDisruptionBudget(o) => &mut o.metadata,
            Object::NetworkPolicy(o) => &mut o.metadata,
        }
    }

    pub fn name(&self) -> &str {
        self.metadata().name.as_deref().unwrap_or_default()
    }
}

pub fn labels(cluster: &ValidatedCluster, role: Role) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".into(), "lake".into()),
        ("app.kubernetes.io/instance".into(), cluster.name.clone()),
        ("app.kubernetes.io/component".into(), role.to_string()),
        ("app.kubernetes.io/managed-by".into(), MANAGER.into()),
    ])
}

fn selector(cluster: &ValidatedCluster, role: Role) -> BTreeMap<String, String> {
    let mut labels = labels(cluster, role);
    labels.remove("app.kubernetes.io/managed-by");
    labels
}

fn meta(cluster: &ValidatedCluster, role: Role) -> ObjectMeta {
    meta_named(cluster, role, workload_name(cluster, role))
}

/// Name, namespace, labels and the owner reference of one of `role`'s objects.
pub(crate) fn meta_named(cluster: &ValidatedCluster, role: Role, name: String) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(cluster.namespace.clone()),
        labels: Some(labels(cluster, role)),
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
    let canonical = serde_json::to_string(&data).unwrap_or_default();
    let hash: String = Sha256::digest(canonical.as_bytes())
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect();
    (data, hash)
}

/// Every lake pod: non-root (65532), RuntimeDefault seccomp; its volumes group-readable.
pub(crate) fn pod_security() -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(RUN_AS),
        run_as_group: Some(RUN_AS),
        fs_group: Some(RUN_AS),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Every lake container: no privilege escalation, a read-only root, no capabilities.
pub(crate) fn container_security() -> SecurityContext {
    SecurityContext {
        run_as_non_root: Some(true),
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn default_resources() -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".into(), Quantity("250m".into())),
            ("memory".into(), Quantity("512Mi".into())),
        ])),
        limits: Some(BTreeMap::from([("memory".into(), Quantity("2Gi".into()))])),
        ..Default::default()
    }
}

fn deployment(
    cluster: &ValidatedCluster,
    role: Role,
    config_hash: &str,
    image: &str,
    replicas: i32,
    resources: Option<ResourceRequirements>,
) -> Deployment {
    let port = i32::from(default_port(role));
    let name = workload_name(cluster, role);
    let probe = |period: i32, failures: i32| Probe {
        tcp_socket: Some(TCPSocketAction {
            port: IntOrString::String("flight".into()),
            ..Default::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        ..Default::default()
    };
    let mut volumes = vec![Volume {
        name: "tmp".into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    }];
    let mut mounts = vec![VolumeMount {
        name: "tmp".into(),
        mount_path: "/tmp".into(),
        ..Default::default()
    }];
    // The role's bearer tokens (LAKE_TOKEN_FILE), readable by the pod's group only.
    volumes.push(Volume {
        name: "tokens".into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(super::tokens::secret_name(cluster, role)),
            default_mode: Some(0o440),
            ..Default::default()
        }),
        ..Default::default()
    });
    mounts.push(VolumeMount {
        name: "tokens".into(),
        mount_path: super::tokens::TOKEN_DIR.into(),
        read_only: Some(true),
        ..Default::default()
    });
    if cluster.tls == crate::crd::TlsMode::Operator {
        // Only this role's certificate and key (the Secret holds both roles').
        let (cert, key) = super::tls::cert_key(role);
        volumes.push(Volume {
            name: "tls".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(super::tls::secret_name(cluster)),
                default_mode: Some(0o440),
                items: Some(vec![
                    KeyToPath {
                        key: cert,
                        path: "tls.crt".into(),
                        ..Default::default()
                    },
                    KeyToPath {
                        key,
                        path: "tls.key".into(),
                        ..Default::default()
                    },
                ]),
                ..Default::default()
            }),
            ..Default::default()
        });
        mounts.push(VolumeMount {
            name: "tls".into(),
            mount_path: super::tls::TLS_DIR.into(),
            read_only: Some(true),
            ..Default::default()
        });
    }
    if let Storage::Local { path } = cluster.authority.storage() {
        // A local lake keeps everything under one directory; in Kubernetes that is only good
        // for experiments (see docs/operator.md).
        volumes.push(Volume {
            name: "data".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        });
        mounts.push(VolumeMount {
            name: "data".into(),
            mount_path: path.display().to_string(),
            ..Default::default()
        });
    }
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
                    annotations: Some(BTreeMap::from([(
                        CONFIG_HASH.into(),
                        config_hash.to_owned(),
                    )])),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(name.clone()),
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
                        ports: Some(vec![ContainerPort {
                            name: Some("flight".into()),
                            container_port: port,
                            protocol: Some("TCP".into()),
                            ..Default::default()
                        }]),
                        readiness_probe: Some(probe(5, 3)),
                        liveness_probe: Some(probe(10, 6)),
                        resources: Some(resources.unwrap_or_else(default_resources)),
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

fn service(cluster: &ValidatedCluster, role: Role) -> Service {
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
            selector: Some(selector(cluster, role)),
            ports: Some(vec![ServicePort {
                name: Some("flight".into()),
                port: i32::from(default_port(role)),
                target_port: Some(IntOrString::String("flight".into())),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Every object of the cluster, in apply order (config and identity before the pods that use
/// them).
/// Who may connect to metadata (the writer): this cluster's query pods and the pods of the
/// namespaces `spec.metadata.clientNamespaces` names; nothing else, on any port.
fn metadata_ingress(cluster: &ValidatedCluster) -> NetworkPolicy {
    let mut from = vec![NetworkPolicyPeer {
        pod_selector: Some(LabelSelector {
            match_labels: Some(selector(cluster, Role::Query)),
            ..Default::default()
        }),
        ..Default::default()
    }];
    if !cluster.metadata.client_namespaces.is_empty() {
        from.push(NetworkPolicyPeer {
            namespace_selector: Some(LabelSelector {
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: "kubernetes.io/metadata.name".into(),
                    operator: "In".into(),
                    values: Some(cluster.metadata.client_namespaces.clone()),
                }]),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    NetworkPolicy {
        metadata: meta(cluster, Role::Metadata),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(selector(cluster, Role::Metadata)),
                ..Default::default()
            }),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(from),
                ports: Some(vec![NetworkPolicyPort {
                    port: Some(IntOrString::Int(i32::from(default_port(Role::Metadata)))),
                    protocol: Some("TCP".into()),
                    ..Default::default()
                }]),
            }]),
            ..Default::default()
        }),
    }
}

pub fn objects(cluster: &ValidatedCluster, policies: &[RolePolicy]) -> Vec<Object> {
    let mut objects = Vec::new();
    for role in [Role::Query, Role::Metadata] {
        let (data, hash) = config(cluster, role);
        objects.push(Object::ConfigMap(ConfigMap {
            metadata: meta(cluster, role),
            data: Some(data),
            ..Default::default()
        }));
        let mut sa_meta = meta(cluster, role);
        if let Some(policy) = policies.iter().find(|p| p.role == role) {
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
            cluster, role, &hash, image, replicas, resources,
        )));
        objects.push(Object::Service(service(cluster, role)));
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
    objects
}
