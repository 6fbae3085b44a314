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

/// A container's disk (its `/tmp`, where queries spill, and its logs) when its resources do not
/// say: without a limit, spilling queries could fill the node.
const DEFAULT_EPHEMERAL_MB: u64 = 10 * 1024;
/// What the container's logs and writable layers keep of its ephemeral storage.
const EPHEMERAL_HEADROOM_MB: u64 = 512;
/// Where the runtime spills, inside `/tmp`.
pub(crate) const SPILL_DIR: &str = "/tmp/spill";

/// MiB in a quantity (`2Gi`, `1.5Gi`, `512Mi`, `1G`, `2e9`, bytes); `None` for what it cannot
/// read.
pub(crate) fn mebibytes(quantity: &str) -> Option<u64> {
    let split = quantity
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(quantity.len());
    let (number, suffix) = quantity.split_at(split);
    let number: f64 = number.parse().ok()?;
    let scale: f64 = match suffix {
        "" => 1.0,
        "Ki" => 1024.0,
        "Mi" => 1024.0_f64.powi(2),
        "Gi" => 1024.0_f64.powi(3),
        "Ti" => 1024.0_f64.powi(4),
        "Pi" => 1024.0_f64.powi(5),
        "Ei" => 1024.0_f64.powi(6),
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        exponent if exponent.starts_with(['e', 'E']) => {
            10f64.powi(exponent[1..].parse::<i32>().ok()?)
        }
        _ => return None,
    };
    let mib = number * scale / 1024.0_f64.powi(2);
    (mib.is_finite() && mib >= 0.0).then_some(mib.min(u64::MAX as f64) as u64)
}

/// `mb` MiB as the API server writes it back (its canonical form: the largest binary suffix
/// that holds the value exactly, `1Gi` for 1024Mi), so a converged object compares equal.
pub(crate) fn mib_quantity(mb: u64) -> Quantity {
    let (mut value, mut suffix) = (mb, "Mi");
    for next in ["Gi", "Ti", "Pi"] {
        if value == 0 || value % 1024 != 0 {
            break;
        }
        value /= 1024;
        suffix = next;
    }
    Quantity(if value == 0 {
        "0".into()
    } else {
        format!("{value}{suffix}")
    })
}

/// What the pod's `/tmp` gets when the container's ephemeral-storage limit cannot be read.
const UNREADABLE_EPHEMERAL_MB: u64 = 1024;

/// `resources` (or the defaults) with an `ephemeral-storage` limit and request, unless they set
/// them: the kubelet then counts the pod's `/tmp` against the limit. A default never contradicts
/// what is set (a request above the limit is invalid).
pub(crate) fn resources_with_disk(resources: Option<ResourceRequirements>) -> ResourceRequirements {
    const KEY: &str = "ephemeral-storage";
    let mut resources = resources.unwrap_or_else(default_resources);
    let read = |map: &Option<BTreeMap<String, Quantity>>| {
        map.as_ref()
            .and_then(|m| m.get(KEY))
            .and_then(|q| mebibytes(&q.0))
    };
    let (limit, request) = (read(&resources.limits), read(&resources.requests));
    let limits = resources.limits.get_or_insert_with(BTreeMap::new);
    limits
        .entry(KEY.into())
        .or_insert_with(|| mib_quantity(DEFAULT_EPHEMERAL_MB.max(request.unwrap_or(0))));
    let requests = resources.requests.get_or_insert_with(BTreeMap::new);
    requests
        .entry(KEY.into())
        .or_insert_with(|| mib_quantity(1024.min(limit.unwrap_or(DEFAULT_EPHEMERAL_MB))));
    resources
}

/// What the pod's `/tmp` may hold, MiB: the container's ephemeral-storage limit less headroom
/// for its logs (a small size when the limit cannot be read: never more than the pod has).
pub(crate) fn tmp_size_mb(resources: &ResourceRequirements) -> u64 {
    let limit = resources
        .limits
        .as_ref()
        .and_then(|l| l.get("ephemeral-storage"))
        .map_or(Some(DEFAULT_EPHEMERAL_MB), |q| mebibytes(&q.0))
        .unwrap_or(UNREADABLE_EPHEMERAL_MB);
    limit.saturating_sub(EPHEMERAL_HEADROOM_MB).max(64)
}

/// What each of `endpoints` endpoints of a pod may spill, MiB: four fifths of its `/tmp`
/// between them (Lance's own temporary files use the rest), so queries are refused with
/// RESOURCE_EXHAUSTED before the kubelet evicts the pod.
pub(crate) fn spill_limit_mb(tmp_mb: u64, endpoints: u64) -> u64 {
    (tmp_mb * 4 / 5 / endpoints.max(1)).max(1)
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

/// The pod's writable `/tmp` (its root filesystem is read-only), of at most `size_mb`.
pub(crate) fn tmp_volume(size_mb: u64) -> (Volume, VolumeMount) {
    (
        Volume {
            name: "tmp".into(),
            empty_dir: Some(EmptyDirVolumeSource {
                size_limit: Some(mib_quantity(size_mb)),
                ..Default::default()
            }),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_are_written_in_the_api_servers_canonical_form() {
        for (mb, canonical) in [
            (100, "100Mi"),
            (1024, "1Gi"),
            (7680, "7680Mi"),
            (8192, "8Gi"),
            (1024 * 1024, "1Ti"),
            (0, "0"),
        ] {
            assert_eq!(mib_quantity(mb).0, canonical);
            assert_eq!(mebibytes(canonical), Some(mb), "{canonical}");
        }
    }
}
