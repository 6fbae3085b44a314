//! TLS on both Flight endpoints (unless `spec.tls: Disabled`): a CA of the cluster's own signs
//! one serving certificate per role (a local lake's one pod: one carrying both roles' names).
//! The certificates and keys are random, so the plan holds only names, mounts and the names
//! each certificate must carry; reconcile draws them (`apply::tls`). The CA's key is discarded
//! once the certificates are signed, so nobody — not even the operator — can sign another
//! certificate this cluster's clients would trust.
//!
//! Certificates are valid for [`VALID_FOR`] and renewed [`RENEW_BEFORE`] their expiry: each
//! renewal is a new *generation* — a new CA and new certificates in a Secret of their own
//! ([`secret_name`]), the pods rolled onto it — so a renewal is also a CA rotation. The CA
//! ConfigMap's `ca.crt` holds the new CA and the ones before it (up to [`CA_BUNDLE`]), so
//! clients that re-read it trust old and new pods alike while they roll. Which generation is
//! current, and when it expires, is recorded on the ConfigMap ([`GENERATION`], [`EXPIRES`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use lake_common::plan::Role;

use super::workloads::meta_named;
use crate::crd::TlsMode;
use crate::render::workload_name;
use crate::validate::ValidatedCluster;

/// Where a role's pods see their certificate and key.
pub const TLS_DIR: &str = "/var/run/secrets/lake-tls";
/// The CA certificate's key in the Secret and in the public ConfigMap.
pub const CA_KEY: &str = "ca.crt";
/// The CA ConfigMap's annotation naming the current generation.
pub const GENERATION: &str = "lake.dev/tls-generation";
/// The CA ConfigMap's annotation saying when the current generation's certificates expire
/// (seconds since the Unix epoch).
pub const EXPIRES: &str = "lake.dev/tls-expires";
/// How long certificates are valid from their issue.
pub const VALID_FOR: std::time::Duration = std::time::Duration::from_secs(365 * 24 * 3600);
/// How long before their expiry they are renewed.
pub const RENEW_BEFORE: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 3600);
/// CA certificates `ca.crt` keeps: the current one and those before it.
pub const CA_BUNDLE: usize = 3;

/// The generation the CA ConfigMap records, and when its certificates expire (`None`: not
/// recorded, as by operators before renewal existed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Issued {
    pub generation: u32,
    pub expires: Option<u64>,
}

/// The generation to serve at `now` (seconds since the epoch): the issued one, or the next once
/// it is within [`RENEW_BEFORE`] of its expiry (or its expiry is unknown).
pub fn generation_to_serve(issued: Option<Issued>, now: u64) -> u32 {
    match issued {
        None => 0,
        Some(Issued {
            generation,
            expires: Some(expires),
        }) if now.saturating_add(RENEW_BEFORE.as_secs()) < expires => generation,
        Some(Issued { generation, .. }) => generation.saturating_add(1),
    }
}

/// The Secret's keys for the certificate and key named `stem` (a role, or `local`).
pub fn cert_key(stem: &str) -> (String, String) {
    (format!("{stem}.crt"), format!("{stem}.key"))
}

/// The files the runtime reads (`LAKE_TLS_CERT_FILE`, `LAKE_TLS_KEY_FILE`).
pub fn files() -> (String, String) {
    (format!("{TLS_DIR}/tls.crt"), format!("{TLS_DIR}/tls.key"))
}

/// The Secret holding every role's certificate and key, and the CA certificate, of the current
/// generation. Not `<name>-tls`: that is what cert-manager users commonly name their own
/// Secrets.
pub fn secret_name(cluster: &ValidatedCluster) -> String {
    match cluster.tls_generation {
        0 => format!("{}-lake-tls", cluster.name),
        n => format!("{}-lake-tls-{n}", cluster.name),
    }
}

/// The generation a Secret of `cluster` named `secret` holds (see [`secret_name`]).
pub fn generation_of(cluster: &ValidatedCluster, secret: &str) -> Option<u32> {
    let rest = secret.strip_prefix(&format!("{}-lake-tls", cluster.name))?;
    match rest {
        "" => Some(0),
        _ => rest.strip_prefix('-')?.parse().ok(),
    }
}

/// The ConfigMap publishing the CA certificate to clients.
pub fn ca_config_map_name(cluster: &ValidatedCluster) -> String {
    format!("{}-lake-ca", cluster.name)
}

/// The DNS names `role`'s Service answers to: what its certificate carries.
pub fn dns_names(cluster: &ValidatedCluster, role: Role) -> Vec<String> {
    let service = workload_name(cluster, role);
    let ns = &cluster.namespace;
    vec![
        service.clone(),
        format!("{service}.{ns}"),
        format!("{service}.{ns}.svc"),
        format!("{service}.{ns}.svc.cluster.local"),
    ]
}

/// What reconcile needs to issue the certificates.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TlsPlan {
    /// The generation whose Secret this is.
    pub generation: u32,
    pub secret: ObjectMeta,
    pub ca_config_map: ObjectMeta,
    /// Each certificate's stem (see [`cert_key`]) and the names it carries.
    pub certs: Vec<(String, Vec<String>)>,
}

pub fn tls(cluster: &ValidatedCluster) -> Option<TlsPlan> {
    (cluster.tls == TlsMode::Operator).then(|| TlsPlan {
        generation: cluster.tls_generation,
        // Both serve both roles; `meta_named` wants one for the component label.
        secret: meta_named(cluster, Role::Metadata, secret_name(cluster)),
        ca_config_map: meta_named(cluster, Role::Query, ca_config_map_name(cluster)),
        certs: match &cluster.local_volume {
            // One process serves both endpoints with one certificate.
            Some(_) => vec![(
                super::local::CERT_STEM.to_owned(),
                [Role::Query, Role::Metadata]
                    .into_iter()
                    .flat_map(|role| dns_names(cluster, role))
                    .collect(),
            )],
            None => [Role::Query, Role::Metadata]
                .into_iter()
                .map(|role| (role.to_string(), dns_names(cluster, role)))
                .collect(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generation_is_renewed_thirty_days_before_its_expiry() {
        let day = 24 * 3600;
        let now = 1_000 * day;
        let issued = |generation, expires| {
            Some(Issued {
                generation,
                expires,
            })
        };
        assert_eq!(generation_to_serve(None, now), 0);
        assert_eq!(
            generation_to_serve(issued(0, Some(now + 300 * day)), now),
            0
        );
        assert_eq!(generation_to_serve(issued(4, Some(now + 31 * day)), now), 4);
        assert_eq!(generation_to_serve(issued(4, Some(now + 29 * day)), now), 5);
        assert_eq!(generation_to_serve(issued(4, Some(now - day)), now), 5);
        // Issued before expiries were recorded: renewed now.
        assert_eq!(generation_to_serve(issued(0, None), now), 1);
    }
}
