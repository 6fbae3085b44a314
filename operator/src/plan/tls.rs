//! TLS on both Flight endpoints (unless `spec.tls: Disabled`): a CA of the cluster's own signs
//! one serving certificate per role (a local lake's one pod: one carrying both roles' names). The certificates and keys are random, so the plan holds
//! only names, mounts and the names each certificate must carry; reconcile draws them once
//! (`apply::tls`). The CA's key is discarded once both certificates are signed, so nobody —
//! not even the operator — can sign another certificate this cluster's clients would trust.

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

/// The Secret's keys for the certificate and key named `stem` (a role, or `local`).
pub fn cert_key(stem: &str) -> (String, String) {
    (format!("{stem}.crt"), format!("{stem}.key"))
}

/// The files the runtime reads (`LAKE_TLS_CERT_FILE`, `LAKE_TLS_KEY_FILE`).
pub fn files() -> (String, String) {
    (format!("{TLS_DIR}/tls.crt"), format!("{TLS_DIR}/tls.key"))
}

/// The Secret holding every role's certificate and key, and the CA certificate. Not
/// `<name>-tls`: that is what cert-manager users commonly name their own Secrets.
pub fn secret_name(cluster: &ValidatedCluster) -> String {
    format!("{}-lake-tls", cluster.name)
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
    pub secret: ObjectMeta,
    pub ca_config_map: ObjectMeta,
    /// Each certificate's stem (see [`cert_key`]) and the names it carries.
    pub certs: Vec<(String, Vec<String>)>,
}

pub fn tls(cluster: &ValidatedCluster) -> Option<TlsPlan> {
    (cluster.tls == TlsMode::Operator).then(|| TlsPlan {
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
