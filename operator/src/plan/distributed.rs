//! Distributed query (`spec.query.distributed`): every query pod is also a worker on
//! [`WORKER_PORT`], mutual TLS with a certificate the cluster's CA signed for
//! [`worker_name`] (client and server), found by its peers through the API — the headless
//! Service's EndpointSlices, or (`discovery: Pods`) the query pods themselves — and reachable
//! only from this cluster's query pods (a NetworkPolicy). docs/guides/distributed.md.

use k8s_openapi::api::core::v1::{
    ConfigMapProjection, ContainerPort, DownwardAPIProjection, DownwardAPIVolumeFile, KeyToPath,
    Lifecycle, LifecycleHandler, ObjectFieldSelector, ProjectedVolumeSource, Service,
    ServiceAccountTokenProjection, ServicePort, ServiceSpec, SleepAction, Volume, VolumeMount,
    VolumeProjection,
};
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyPeer};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role as RbacRole, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use lake_common::config::{DistributedConfig, WorkerPeers, default_port};
use lake_common::plan::Role;

use super::network::{ingress_policy, ingress_rule};
use super::workloads::{Object, meta_named, selector};
use crate::crd::Discovery;
use crate::render::workload_name;
use crate::validate::ValidatedCluster;

/// The worker port of every query pod.
pub const WORKER_PORT: u16 = 8817;
/// The worker certificate's stem in the TLS Secret (see `tls::cert_key`).
pub const CERT_STEM: &str = "worker";
/// Where a query pod's Kubernetes API identity is (a projected volume).
pub const KUBERNETES_DIR: &str = "/var/run/secrets/lake-kubernetes";
/// How long a stopping query pod keeps serving after it leaves discovery: its peers see it
/// go (not ready, terminating) and stop sending it stages before it stops listening.
pub const DRAIN_SECONDS: i64 = 10;
/// The longest grace period rendered (a day): a statement deadline beyond it does not hold a
/// stopping pod longer.
const MAX_GRACE_SECONDS: u64 = 24 * 3600;

/// The headless Service of the workers, and the name their certificate carries.
pub fn worker_name(cluster: &ValidatedCluster) -> String {
    format!("{}-workers", workload_name(cluster, Role::Query))
}

/// The names the worker certificate carries: the headless Service's.
pub fn dns_names(cluster: &ValidatedCluster) -> Vec<String> {
    let service = worker_name(cluster);
    let ns = &cluster.namespace;
    vec![
        service.clone(),
        format!("{service}.{ns}.svc"),
        format!("{service}.{ns}.svc.cluster.local"),
    ]
}

/// The query role's `LAKE_WORKER_*` configuration, when distributed.
pub fn config(cluster: &ValidatedCluster) -> Option<DistributedConfig> {
    let d = cluster.query.distributed.as_ref()?;
    let tls = |file: &str| format!("{}/{file}", super::tls::TLS_DIR);
    let peers = match d.discovery {
        Discovery::EndpointSlices => WorkerPeers::EndpointSlices {
            service: worker_name(cluster),
            port: WORKER_PORT,
        },
        Discovery::Pods => WorkerPeers::Pods {
            selector: selector(cluster, Role::Query)
                .into_iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(","),
            port: WORKER_PORT,
        },
    };
    Some(DistributedConfig {
        worker_addr: ([0, 0, 0, 0], WORKER_PORT).into(),
        cert_file: tls("worker.crt"),
        key_file: tls("worker.key"),
        ca_file: tls(super::tls::CA_KEY),
        worker_name: worker_name(cluster),
        peers,
        kubernetes_dir: Some(KUBERNETES_DIR.to_owned()),
        threshold_mb: d.threshold_mb,
        max_workers: d.max_workers,
        task_mb: d.task_mb,
    })
}

/// What a distributed query pod adds to its pod: the worker port, the worker certificate and
/// the CA (as items of the TLS volume), its API identity, and a drain before it stops.
pub(crate) struct PodParts {
    pub port: ContainerPort,
    pub tls_items: Vec<(String, &'static str)>,
    pub volume: (Volume, VolumeMount),
    pub lifecycle: Lifecycle,
    pub grace_seconds: i64,
}

pub(crate) fn pod_parts(cluster: &ValidatedCluster) -> Option<PodParts> {
    cluster.query.distributed.as_ref()?;
    let (cert, key) = super::tls::cert_key(CERT_STEM);
    let volume = Volume {
        name: "kubernetes".into(),
        projected: Some(ProjectedVolumeSource {
            default_mode: Some(0o440),
            sources: Some(vec![
                VolumeProjection {
                    service_account_token: Some(ServiceAccountTokenProjection {
                        path: "token".into(),
                        expiration_seconds: Some(3600),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                VolumeProjection {
                    config_map: Some(ConfigMapProjection {
                        name: "kube-root-ca.crt".into(),
                        items: Some(vec![KeyToPath {
                            key: "ca.crt".into(),
                            path: "ca.crt".into(),
                            ..Default::default()
                        }]),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                VolumeProjection {
                    downward_api: Some(DownwardAPIProjection {
                        items: Some(vec![DownwardAPIVolumeFile {
                            path: "namespace".into(),
                            field_ref: Some(ObjectFieldSelector {
                                field_path: "metadata.namespace".into(),
                                ..Default::default()
                            }),
                            ..Default::default()
                        }]),
                    }),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mount = VolumeMount {
        name: "kubernetes".into(),
        mount_path: KUBERNETES_DIR.into(),
        read_only: Some(true),
        ..Default::default()
    };
    Some(PodParts {
        port: super::pod::container_port("worker", WORKER_PORT),
        tls_items: vec![
            (cert, "worker.crt"),
            (key, "worker.key"),
            (super::tls::CA_KEY.to_owned(), super::tls::CA_KEY),
        ],
        volume: (volume, mount),
        lifecycle: Lifecycle {
            pre_stop: Some(LifecycleHandler {
                sleep: Some(SleepAction {
                    seconds: DRAIN_SECONDS,
                }),
                ..Default::default()
            }),
            ..Default::default()
        },
        // The drain, then the statements it coordinates (and the stages it runs) finish within
        // their deadline: the spec's, or the runtime's default.
        grace_seconds: DRAIN_SECONDS.saturating_add(
            i64::try_from(
                cluster
                    .query_timeout_seconds
                    .unwrap_or(lake_common::config::Limits::DEFAULT_QUERY_TIMEOUT_SECONDS)
                    .min(MAX_GRACE_SECONDS),
            )
            .unwrap_or(0),
        ),
    })
}

/// The objects of distributed query: the workers' headless Service, the query
/// ServiceAccount's Role to find them (no rules when distributed query is off, so turning it
/// off takes the permission away) and its binding, and the query pods' NetworkPolicy.
pub fn objects(cluster: &ValidatedCluster) -> Vec<Object> {
    let name = worker_name(cluster);
    let meta = || meta_named(cluster, Role::Query, name.clone());
    let discovery = cluster.query.distributed.as_ref().map(|d| d.discovery);
    let rule = |group: &str, resource: &str| PolicyRule {
        api_groups: Some(vec![group.into()]),
        resources: Some(vec![resource.into()]),
        verbs: vec!["list".into(), "watch".into()],
        ..Default::default()
    };
    let rules = match discovery {
        None => Vec::new(),
        Some(Discovery::EndpointSlices) => vec![rule("discovery.k8s.io", "endpointslices")],
        Some(Discovery::Pods) => vec![rule("", "pods")],
    };
    vec![
        Object::Service(Service {
            metadata: meta(),
            spec: Some(ServiceSpec {
                cluster_ip: Some("None".into()),
                selector: Some(selector(cluster, Role::Query)),
                // (Not `publishNotReadyAddresses: false`, the default: the API server leaves it
                // out, and a converged Service would be applied again every pass.)
                ports: Some(vec![ServicePort {
                    name: Some("worker".into()),
                    port: i32::from(WORKER_PORT),
                    target_port: Some(IntOrString::String("worker".into())),
                    protocol: Some("TCP".into()),
                    app_protocol: Some("grpc".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }),
        Object::Role(RbacRole {
            metadata: meta(),
            rules: Some(rules),
        }),
        Object::RoleBinding(RoleBinding {
            metadata: meta(),
            role_ref: RoleRef {
                api_group: Some("rbac.authorization.k8s.io".into()),
                kind: "Role".into(),
                name: name.clone(),
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".into(),
                name: workload_name(cluster, Role::Query),
                namespace: Some(cluster.namespace.clone()),
                ..Default::default()
            }]),
        }),
        Object::NetworkPolicy(query_ingress(cluster)),
    ]
}

/// Who may connect to the query pods: anyone to the Flight SQL port (clients), only this
/// cluster's query pods to the worker port; nothing else, on any port.
fn query_ingress(cluster: &ValidatedCluster) -> NetworkPolicy {
    let query_pods = NetworkPolicyPeer {
        pod_selector: Some(LabelSelector {
            match_labels: Some(selector(cluster, Role::Query)),
            ..Default::default()
        }),
        ..Default::default()
    };
    ingress_policy(
        cluster,
        meta_named(cluster, Role::Query, workload_name(cluster, Role::Query)),
        Role::Query.into(),
        vec![
            ingress_rule(default_port(Role::Query), None),
            ingress_rule(WORKER_PORT, Some(vec![query_pods])),
        ],
    )
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::Deployment;

    use super::*;
    use crate::validate::Distributed;

    fn cluster(discovery: Option<Discovery>) -> ValidatedCluster {
        let mut c = crate::validate::fixture::cloud("queryRole: q, metadataRole: m", "");
        c.query.distributed = discovery.map(|discovery| Distributed {
            threshold_mb: Some(0),
            max_workers: Some(8),
            task_mb: None,
            discovery,
        });
        c
    }

    fn objects_of(c: &ValidatedCluster) -> Vec<Object> {
        crate::plan::plan(c, &Default::default()).objects
    }

    fn query_deployment(objects: &[Object]) -> Deployment {
        objects
            .iter()
            .find_map(|o| match o {
                Object::Deployment(d) if o.name() == "analytics-query" => Some(d.clone()),
                _ => None,
            })
            .unwrap()
    }

    fn role_rules(objects: &[Object]) -> Vec<PolicyRule> {
        objects
            .iter()
            .find_map(|o| match o {
                Object::Role(r) => Some(r.rules.clone().unwrap_or_default()),
                _ => None,
            })
            .unwrap()
    }

    #[test]
    fn a_distributed_query_pod_is_a_worker_found_through_the_api() {
        let c = cluster(Some(Discovery::EndpointSlices));
        let objects = objects_of(&c);
        let config = crate::plan::workloads::config(&c, Role::Query).0;
        assert_eq!(
            config["LAKE_WORKERS"],
            "endpointslices:analytics-query-workers:8817"
        );
        assert_eq!(config["LAKE_WORKER_NAME"], "analytics-query-workers");
        assert_eq!(config["LAKE_KUBERNETES_DIR"], KUBERNETES_DIR);
        assert_eq!(config["LAKE_DISTRIBUTED_MAX_WORKERS"], "8");
        // Metadata is never a worker.
        let metadata = crate::plan::workloads::config(&c, Role::Metadata).0;
        assert!(!metadata.keys().any(|k| k.starts_with("LAKE_WORKER")));

        let pod = query_deployment(&objects).spec.template.spec.unwrap();
        assert_eq!(pod.automount_service_account_token, Some(false));
        assert_eq!(
            pod.termination_grace_period_seconds,
            Some(DRAIN_SECONDS + 600)
        );
        // A deadline past a day does not hold a stopping pod longer (nor overflow).
        let mut forever = c.clone();
        forever.query_timeout_seconds = Some(u64::MAX);
        let held = query_deployment(&objects_of(&forever))
            .spec
            .template
            .spec
            .unwrap();
        assert_eq!(
            held.termination_grace_period_seconds,
            Some(DRAIN_SECONDS + 24 * 3600)
        );
        let container = &pod.containers[0];
        let ports: Vec<_> = container
            .ports
            .iter()
            .flatten()
            .map(|p| p.container_port)
            .collect();
        assert_eq!(ports, [8815, i32::from(WORKER_PORT)]);
        let drain = container
            .lifecycle
            .as_ref()
            .and_then(|l| l.pre_stop.as_ref());
        assert_eq!(
            drain.and_then(|h| h.sleep.as_ref()).map(|s| s.seconds),
            Some(DRAIN_SECONDS)
        );
        let tls_items: Vec<String> = pod
            .volumes
            .iter()
            .flatten()
            .filter_map(|v| v.secret.as_ref().filter(|_| v.name == "tls"))
            .flat_map(|s| s.items.iter().flatten().map(|i| i.path.clone()))
            .collect();
        assert_eq!(
            tls_items,
            ["tls.crt", "tls.key", "worker.crt", "worker.key", "ca.crt"]
        );
        assert!(pod.volumes.iter().flatten().any(|v| v.name == "kubernetes"));

        let service = objects
            .iter()
            .find_map(|o| match o {
                Object::Service(s) if o.name() == "analytics-query-workers" => Some(s.clone()),
                _ => None,
            })
            .unwrap()
            .spec
            .unwrap();
        assert_eq!(service.cluster_ip.as_deref(), Some("None"));
        assert_eq!(service.publish_not_ready_addresses, None, "ready pods only");
        let rules = role_rules(&objects);
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].resources, Some(vec!["endpointslices".into()]));
        assert_eq!(rules[0].verbs, ["list", "watch"]);

        // The worker port admits this cluster's query pods only; the Flight port every client.
        let policy = objects
            .iter()
            .find_map(|o| match o {
                Object::NetworkPolicy(p) if o.name() == "analytics-query" => Some(p.clone()),
                _ => None,
            })
            .unwrap()
            .spec
            .unwrap();
        let rules = policy.ingress.unwrap();
        assert_eq!(rules.len(), 2);
        assert!(rules[0].from.is_none());
        let from = rules[1].from.as_ref().unwrap();
        assert_eq!(
            from[0].pod_selector.as_ref().unwrap().match_labels,
            Some(selector(&c, Role::Query))
        );
        assert!(from[0].namespace_selector.is_none());
    }

    #[test]
    fn discovery_by_pods_grants_pods_and_off_grants_nothing() {
        let pods = cluster(Some(Discovery::Pods));
        assert_eq!(
            crate::plan::workloads::config(&pods, Role::Query).0["LAKE_WORKERS"],
            "pods:8817:app.kubernetes.io/component=query,app.kubernetes.io/instance=analytics,\
             app.kubernetes.io/name=lake"
        );
        let rules = role_rules(&objects_of(&pods));
        assert_eq!(rules[0].resources, Some(vec!["pods".into()]));
        // Off: the Role stays, without rules (turning it off takes the permission away), and
        // the pods are as before.
        let off = cluster(None);
        let objects = objects_of(&off);
        assert!(role_rules(&objects).is_empty());
        let pod = query_deployment(&objects).spec.template.spec.unwrap();
        assert_eq!(pod.automount_service_account_token, None);
        assert!(pod.containers[0].lifecycle.is_none());
        assert!(
            !crate::plan::workloads::config(&off, Role::Query)
                .0
                .contains_key("LAKE_WORKERS")
        );
    }
}
