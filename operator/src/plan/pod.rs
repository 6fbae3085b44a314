//! The parts every lake pod is built of: security contexts, resources, probes, ports and
//! volumes.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, ContainerPort, EmptyDirVolumeSource, KeyToPath, PodSecurityContext, Probe,
    ResourceRequirements, SeccompProfile, SecretVolumeSource, SecurityContext, TCPSocketAction,
    Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::validate::ValidatedCluster;

/// The pod-template annotation that changes whenever a role's configuration does, so a config
/// change rolls the pods.
/// The user and group every lake container runs as (distroless `nonroot`).
const RUN_AS: i64 = 65532;

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

pub(crate) fn default_resources() -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".into(), Quantity("250m".into())),
            ("memory".into(), Quantity("512Mi".into())),
        ])),
        limits: Some(BTreeMap::from([("memory".into(), Quantity("2Gi".into()))])),
        ..Default::default()
    }
}

/// A TCP connect to the container's port named `port`.
pub(crate) fn tcp_probe(port: &str, period: i32, failures: i32) -> Probe {
    Probe {
        tcp_socket: Some(TCPSocketAction {
            port: IntOrString::String(port.into()),
            ..Default::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        ..Default::default()
    }
}

pub(crate) fn container_port(name: &str, port: u16) -> ContainerPort {
    ContainerPort {
        name: Some(name.into()),
        container_port: i32::from(port),
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}

/// The pod's writable `/tmp` (its root filesystem is read-only).
pub(crate) fn tmp_volume() -> (Volume, VolumeMount) {
    (
        Volume {
            name: "tmp".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        },
        VolumeMount {
            name: "tmp".into(),
            mount_path: "/tmp".into(),
            ..Default::default()
        },
    )
}

/// A Secret mounted read-only and readable by the pod's group only; with `items`, only those
/// keys, each at its path.
pub(crate) fn secret_volume(
    volume: &str,
    secret: String,
    mount_path: &str,
    items: Option<Vec<(String, &str)>>,
) -> (Volume, VolumeMount) {
    (
        Volume {
            name: volume.into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret),
                default_mode: Some(0o440),
                items: items.map(|items| {
                    items
                        .into_iter()
                        .map(|(key, path)| KeyToPath {
                            key,
                            path: path.into(),
                            ..Default::default()
                        })
                        .collect()
                }),
                ..Default::default()
            }),
            ..Default::default()
        },
        VolumeMount {
            name: volume.into(),
            mount_path: mount_path.into(),
            read_only: Some(true),
            ..Default::default()
        },
    )
}

/// The serving certificate and key named `stem` in the TLS Secret (it holds every
/// certificate), at [`super::tls::files`]; `None` with `spec.tls: Disabled`.
pub(crate) fn tls_volume(cluster: &ValidatedCluster, stem: &str) -> Option<(Volume, VolumeMount)> {
    (cluster.tls == crate::crd::TlsMode::Operator).then(|| {
        let (cert, key) = super::tls::cert_key(stem);
        secret_volume(
            "tls",
            super::tls::secret_name(cluster),
            super::tls::TLS_DIR,
            Some(vec![(cert, "tls.crt"), (key, "tls.key")]),
        )
    })
}
