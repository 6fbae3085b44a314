//! A local lake in Kubernetes (`spec.storage.local`): a development mode. The embedded stores
//! are one process's files, so one StatefulSet pod runs both roles (`lake local`) on a
//! PersistentVolumeClaim of its own; a restarted or rescheduled pod finds its data on the same
//! claim. The roles' Services, token Secrets and endpoints are those of an S3 lake, so clients
//! cannot tell the difference; one certificate carries both Services' names. Pure builders.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::apps::v1::{
    StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy, StatefulSetSpec,
};
use k8s_openapi::api::core::v1::{
    Container, PersistentVolumeClaim, PersistentVolumeClaimSpec, PodSpec, PodTemplateSpec,
    ServiceAccount, Volume, VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use lake_common::config::default_port;
use lake_common::plan::Role;

use super::network::local_ingress;
use super::pod::{
    SPILL_DIR, container_port, container_security, default_resources, mebibytes, pod_security,
    resources_with_disk, secret_volume, spill_limit_mb, tcp_probe, tls_volume, tmp_size_mb,
    tmp_volume,
};
use super::workloads::{Component, Object, labels, meta_named, service};
use crate::crd::DeletionPolicy;
use crate::validate::{LocalVolume, ValidatedCluster};

/// The claim template's name: the pod's claim is `data-<name>-local-0`.
pub const DATA_VOLUME: &str = "data";
/// The certificate (in the TLS Secret) the one pod serves both endpoints with.
pub const CERT_STEM: &str = "local";

/// The StatefulSet, its ServiceAccount and its NetworkPolicy: `<name>-local`.
pub fn workload_name(cluster: &ValidatedCluster) -> String {
    format!("{}-local", cluster.name)
}

/// Where each role's token Secret is mounted (each endpoint checks its own tokens).
fn token_dir(role: Role) -> String {
    format!("{}/{role}", super::tokens::TOKEN_DIR)
}

/// What each endpoint's queries may hold together, and one query, MiB: two endpoints share the
/// container's memory limit, so each gets 40% of it (the rest for Lance's caches and the
/// process), one query at most 512 MiB of that. `None` without a readable limit.
fn memory_limits(cluster: &ValidatedCluster) -> Option<(u64, u64)> {
    let resources = cluster
        .metadata
        .resources
        .clone()
        .unwrap_or_else(default_resources);
    let limit = mebibytes(&resources.limits?.get("memory")?.0)?;
    let endpoint = (limit * 2 / 5).max(1);
    Some((endpoint, endpoint.min(512)))
}

/// `lake local` for both roles, on every interface, with each role's tokens, memory bounds that
/// fit both endpoints in the container, and (unless disabled) the one certificate.
fn args(cluster: &ValidatedCluster, path: &Path) -> Vec<String> {
    let token_file = |role| format!("{}/{}", token_dir(role), super::tokens::TOKEN_KEY);
    let mut args: Vec<String> = [
        "local",
        "--data",
        &path.display().to_string(),
        "--query-addr",
        &format!("0.0.0.0:{}", default_port(Role::Query)),
        "--metadata-addr",
        &format!("0.0.0.0:{}", default_port(Role::Metadata)),
        "--query-token-file",
        &token_file(Role::Query),
        "--metadata-token-file",
        &token_file(Role::Metadata),
    ]
    .map(str::to_owned)
    .to_vec();
    if let Some((endpoint, query)) = memory_limits(cluster) {
        args.extend([
            "--memory-limit-mb".into(),
            endpoint.to_string(),
            "--query-memory-limit-mb".into(),
            query.to_string(),
        ]);
    }
    // One `/tmp` for both endpoints: each spills within its share.
    let tmp = tmp_size_mb(&resources_with_disk(cluster.metadata.resources.clone()));
    args.extend([
        "--spill-dir".into(),
        SPILL_DIR.into(),
        "--spill-limit-mb".into(),
        spill_limit_mb(tmp, 2).to_string(),
    ]);
    if let Some(timeout) = cluster.query_timeout_seconds {
        args.extend(["--query-timeout-seconds".into(), timeout.to_string()]);
    }
    if cluster.tls == crate::crd::TlsMode::Operator {
        let (cert, key) = super::tls::files();
        args.extend(["--tls-cert".into(), cert, "--tls-key".into(), key]);
    }
    args
}

fn claim(volume: &LocalVolume) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(DATA_VOLUME.into()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: volume.storage_class_name.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".into(),
                    Quantity(volume.size.clone()),
                )])),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn stateful_set(cluster: &ValidatedCluster, path: &Path, volume: &LocalVolume) -> StatefulSet {
    let name = workload_name(cluster);
    let resources = resources_with_disk(cluster.metadata.resources.clone());
    let (volumes, mut mounts): (Vec<Volume>, Vec<VolumeMount>) = [
        Some(tmp_volume(tmp_size_mb(&resources))),
        Some(secret_volume(
            "query-tokens",
            super::tokens::secret_name(cluster, Role::Query),
            &token_dir(Role::Query),
            None,
        )),
        Some(secret_volume(
            "metadata-tokens",
            super::tokens::secret_name(cluster, Role::Metadata),
            &token_dir(Role::Metadata),
            None,
        )),
        tls_volume(cluster, CERT_STEM),
    ]
    .into_iter()
    .flatten()
    .unzip();
    // The claim comes from the template below; the pod only names where it is mounted.
    mounts.push(VolumeMount {
        name: DATA_VOLUME.into(),
        mount_path: path.display().to_string(),
        ..Default::default()
    });
    let mut pod_labels = labels(cluster, Component::Local);
    pod_labels.remove("app.kubernetes.io/managed-by");
    // The claim follows the lake's deletion policy; scaling never happens (one replica).
    let when_deleted = match cluster.deletion_policy {
        DeletionPolicy::Retain => "Retain",
        DeletionPolicy::Delete => "Delete",
    };
    StatefulSet {
        metadata: meta_named(cluster, Component::Local, name.clone()),
        spec: StatefulSetSpec {
            // One writer: a rolling update stops the old pod before the new one starts.
            replicas: Some(1),
            selector: LabelSelector {
                match_labels: Some(super::workloads::selector(cluster, Component::Local)),
                ..Default::default()
            },
            persistent_volume_claim_retention_policy: Some(
                StatefulSetPersistentVolumeClaimRetentionPolicy {
                    when_deleted: Some(when_deleted.into()),
                    when_scaled: Some("Retain".into()),
                },
            ),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(name),
                    security_context: Some(pod_security()),
                    containers: vec![Container {
                        name: "lake".into(),
                        image: Some(cluster.metadata.image.clone()),
                        args: Some(args(cluster, path)),
                        ports: Some(vec![
                            container_port("query", default_port(Role::Query)),
                            container_port("metadata", default_port(Role::Metadata)),
                        ]),
                        // `lake local` binds both ports before it serves either.
                        readiness_probe: Some(tcp_probe("query", 5, 3)),
                        liveness_probe: Some(tcp_probe("metadata", 10, 6)),
                        resources: Some(resources),
                        security_context: Some(container_security()),
                        volume_mounts: Some(mounts),
                        ..Default::default()
                    }],
                    volumes: Some(volumes),
                    ..Default::default()
                }),
            },
            volume_claim_templates: Some(vec![claim(volume)]),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Every object of a local lake, in apply order.
pub fn objects(cluster: &ValidatedCluster, path: &Path, volume: &LocalVolume) -> Vec<Object> {
    let name = workload_name(cluster);
    vec![
        // No IRSA: a local lake reaches no AWS.
        Object::ServiceAccount(ServiceAccount {
            metadata: meta_named(cluster, Component::Local, name.clone()),
            ..Default::default()
        }),
        Object::StatefulSet(stateful_set(cluster, path, volume)),
        Object::Service(service(cluster, Role::Query, Component::Local, "query")),
        Object::Service(service(
            cluster,
            Role::Metadata,
            Component::Local,
            "metadata",
        )),
        Object::NetworkPolicy(local_ingress(
            cluster,
            meta_named(cluster, Component::Local, name),
        )),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::LakeCluster;

    fn local(spec_extra: &str) -> ValidatedCluster {
        let cluster: LakeCluster = serde_yaml::from_str(&format!(
            r#"
apiVersion: lake.dev/v1alpha1
kind: LakeCluster
metadata: {{name: dev, namespace: data, uid: u-1}}
spec:
  storage: {{local: {{path: /var/lib/lake, size: 5Gi}}}}
  query: {{image: lake:1}}
  metadata: {{image: lake:1}}
{spec_extra}"#
        ))
        .unwrap();
        crate::validate::validate(&cluster).unwrap()
    }

    fn stateful_set_of(objects: &[Object]) -> &StatefulSet {
        objects
            .iter()
            .find_map(|o| match o {
                Object::StatefulSet(s) => Some(s),
                _ => None,
            })
            .expect("a StatefulSet")
    }

    #[test]
    fn one_pod_serves_both_roles_from_its_claim() {
        let cluster = local("");
        let objects = super::super::workloads::objects(&cluster, &[]);
        let kinds: Vec<&str> = objects.iter().map(Object::kind).collect();
        assert_eq!(
            kinds,
            [
                "ServiceAccount",
                "StatefulSet",
                "Service",
                "Service",
                "NetworkPolicy"
            ],
            "no Deployment, ConfigMap or PodDisruptionBudget"
        );
        let set = &stateful_set_of(&objects).spec;
        assert_eq!(set.replicas, Some(1));
        let claim = &set.volume_claim_templates.as_ref().unwrap()[0];
        assert_eq!(claim.metadata.name.as_deref(), Some(DATA_VOLUME));
        let requests = claim.spec.as_ref().unwrap().resources.clone().unwrap();
        assert_eq!(requests.requests.unwrap()["storage"].0, "5Gi");
        let pod = set.template.spec.as_ref().unwrap();
        let container = &pod.containers[0];
        let args = container.args.clone().unwrap();
        assert_eq!(args[0], "local");
        let after = |flag: &str| {
            let at = args.iter().position(|a| a == flag).unwrap();
            args[at + 1].clone()
        };
        assert_eq!(after("--data"), "/var/lib/lake");
        assert_eq!(
            after("--query-token-file"),
            "/var/run/secrets/lake/query/tokens"
        );
        assert_eq!(
            after("--metadata-token-file"),
            "/var/run/secrets/lake/metadata/tokens"
        );
        assert_eq!(after("--tls-cert"), "/var/run/secrets/lake-tls/tls.crt");
        let mounts = container.volume_mounts.clone().unwrap();
        assert!(
            mounts
                .iter()
                .any(|m| m.name == DATA_VOLUME && m.mount_path == "/var/lib/lake"),
            "{mounts:?}"
        );
        // Both Services select the one pod, each on its own port.
        for object in &objects {
            if let Object::Service(service) = object {
                let spec = service.spec.as_ref().unwrap();
                assert_eq!(
                    spec.selector.as_ref().unwrap()["app.kubernetes.io/component"],
                    "local"
                );
            }
        }
    }

    #[test]
    fn both_endpoints_fit_the_containers_memory() {
        assert_eq!(mebibytes("2Gi"), Some(2048));
        assert_eq!(mebibytes("512Mi"), Some(512));
        assert_eq!(mebibytes("1G"), Some(953));
        assert_eq!(mebibytes("1.5Gi"), Some(1536));
        assert_eq!(mebibytes("2e9"), Some(1907));
        assert_eq!(mebibytes("lots"), None);
        // The default 2Gi limit: 819 MiB per endpoint, 512 per query.
        assert_eq!(memory_limits(&local("")), Some((819, 512)));
        let mut small = local("");
        small.metadata.resources = Some(k8s_openapi::api::core::v1::ResourceRequirements {
            limits: Some(BTreeMap::from([(
                "memory".into(),
                Quantity("512Mi".into()),
            )])),
            ..Default::default()
        });
        assert_eq!(memory_limits(&small), Some((204, 204)));
        let objects = super::super::workloads::objects(&small, &[]);
        let args = stateful_set_of(&objects)
            .spec
            .template
            .spec
            .as_ref()
            .unwrap()
            .containers[0]
            .args
            .clone()
            .unwrap();
        let at = args.iter().position(|a| a == "--memory-limit-mb").unwrap();
        assert_eq!(args[at + 1], "204");
    }

    #[test]
    fn the_claim_follows_the_deletion_policy() {
        for (policy, expected) in [("Retain", "Retain"), ("Delete", "Delete")] {
            let cluster = local(&format!("  deletionPolicy: {policy}"));
            let objects = super::super::workloads::objects(&cluster, &[]);
            let retention = stateful_set_of(&objects)
                .spec
                .persistent_volume_claim_retention_policy
                .clone()
                .unwrap();
            assert_eq!(retention.when_deleted.as_deref(), Some(expected));
        }
    }

    #[test]
    fn metadata_is_closed_unless_client_namespaces_are_named() {
        let closed = local_ingress(&local(""), ObjectMeta::default());
        let rules = closed.spec.unwrap().ingress.unwrap();
        assert_eq!(rules.len(), 1, "only the query port: {rules:?}");
        assert_eq!(
            rules[0].ports.as_ref().unwrap()[0].port,
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(8815))
        );
        let mut with_clients = local("");
        with_clients.metadata.client_namespaces = vec!["etl".into()];
        let open = local_ingress(&with_clients, ObjectMeta::default());
        let rules = open.spec.unwrap().ingress.unwrap();
        assert_eq!(rules.len(), 2);
        assert!(
            rules[1].from.as_ref().is_some_and(|f| !f.is_empty()),
            "a metadata rule without peers would admit everyone: {rules:?}"
        );
    }

    #[test]
    fn one_certificate_carries_both_services_names() {
        let plan = super::super::tls::tls(&local("")).expect("TLS by default");
        assert_eq!(plan.certs.len(), 1);
        let (stem, names) = &plan.certs[0];
        assert_eq!(stem, CERT_STEM);
        for name in ["dev-query.data.svc", "dev-metadata.data.svc"] {
            assert!(names.iter().any(|n| n == name), "{name}: {names:?}");
        }
    }
}
