//! TLS: the cluster's CA and one serving certificate per role, drawn once. Like the token
//! Secrets, the Secret is created and never read (AlreadyExists says it is there); the CA's
//! certificate goes to a ConfigMap clients read, in the same pass that created the Secret. The
//! CA's key is never stored.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use super::error::ApplyError;
use crate::plan::tables::MANAGER;
use crate::plan::tls::{CA_KEY, TlsPlan, cert_key};

/// How long the certificates are valid from their issue (two years), and how far before it
/// they already are (clock skew between the operator and the clients).
const VALID_FOR: time::Duration = time::Duration::days(730);
const SKEW: time::Duration = time::Duration::hours(1);

fn validity(params: &mut CertificateParams) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - SKEW;
    params.not_after = now + VALID_FOR;
}

/// The CA certificate (PEM) and the Secret's data: every role's certificate and key, and the CA.
fn issue(
    plan: &TlsPlan,
    cluster: &str,
) -> Result<(String, BTreeMap<String, ByteString>), rcgen::Error> {
    let mut ca = CertificateParams::new(Vec::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name
        .push(DnType::CommonName, format!("lake {cluster} CA"));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    validity(&mut ca);
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);
    let mut data = BTreeMap::new();
    for (stem, names) in &plan.certs {
        let mut leaf = CertificateParams::new(names.clone())?;
        leaf.distinguished_name
            .push(DnType::CommonName, names[0].clone());
        leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        leaf.use_authority_key_identifier_extension = true;
        validity(&mut leaf);
        let key = KeyPair::generate()?;
        let cert = leaf.signed_by(&key, &issuer)?;
        let (cert_name, key_name) = cert_key(stem);
        data.insert(cert_name, ByteString(cert.pem().into_bytes()));
        data.insert(key_name, ByteString(key.serialize_pem().into_bytes()));
    }
    let ca_pem = ca_cert.pem();
    data.insert(CA_KEY.to_owned(), ByteString(ca_pem.clone().into_bytes()));
    Ok((ca_pem, data))
}

/// Issues the certificates of `cluster` unless they exist; returns whether it issued them.
///
/// The operator cannot read Secrets, so the order is what keeps the published CA the one the
/// Secret's certificates are signed by: the CA goes to its ConfigMap first, the Secret is created
/// after, and a CA is published again only while no Secret exists (a dry-run create tells,
/// with the create permission alone). A pass stopped between the two leaves a published CA and
/// no Secret: the next one issues a new pair and publishes its CA before creating the Secret.
pub async fn ensure(
    client: &Client,
    namespace: &str,
    cluster: &str,
    plan: &TlsPlan,
) -> Result<bool, ApplyError> {
    let secret_name = plan.secret.name.clone().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let ca_name = plan.ca_config_map.name.clone().unwrap_or_default();
    let kube = |operation, kind: &str, name: &str| {
        let (kind, name) = (kind.to_owned(), name.to_owned());
        move |source| ApplyError::Kube {
            operation,
            kind,
            name,
            source: Box::new(source),
        }
    };
    let ours = |cm: &ConfigMap| {
        let uid = plan
            .ca_config_map
            .owner_references
            .iter()
            .flatten()
            .next()
            .map(|o| &o.uid);
        cm.metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| Some(&o.uid) == uid)
    };
    let not_published = || ApplyError::CaNotPublished {
        config_map: ca_name.clone(),
        secret: secret_name.clone(),
    };
    let placeholder = Secret {
        metadata: plan.secret.clone(),
        type_: Some("Opaque".into()),
        ..Default::default()
    };
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let secret_exists = match secrets.create(&dry_run, &placeholder).await {
        Ok(_) => false,
        Err(kube::Error::Api(status)) if status.is_already_exists() => true,
        Err(source) => return Err(kube("create (dry run)", "Secret", &secret_name)(source)),
    };
    let published =
        config_maps
            .get_opt(&ca_name)
            .await
            .map_err(kube("get", "ConfigMap", &ca_name))?;
    match (&published, secret_exists) {
        // A ConfigMap of that name that is not this cluster's is left alone.
        (Some(cm), _) if !ours(cm) => return Err(not_published()),
        (Some(_), true) => return Ok(false),
        // The CA ConfigMap was deleted after the Secret was created: the CA is not recoverable
        // (its certificate is in the Secret, which the operator cannot read).
        (None, true) => return Err(not_published()),
        (_, false) => {}
    }
    let (ca_pem, data) = issue(plan, &format!("{namespace}/{cluster}"))
        .map_err(|source| ApplyError::Certificate { source })?;
    let ca = ConfigMap {
        metadata: plan.ca_config_map.clone(),
        data: Some(BTreeMap::from([(CA_KEY.to_owned(), ca_pem)])),
        ..Default::default()
    };
    config_maps
        .patch(
            &ca_name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&ca),
        )
        .await
        .map_err(kube("apply", "ConfigMap", &ca_name))?;
    let secret = Secret {
        data: Some(data),
        ..placeholder
    };
    match secrets.create(&PostParams::default(), &secret).await {
        Ok(_) => Ok(true),
        // Created between the dry run and now (another writer): its CA is not the one just
        // published. Say so rather than serve a mismatch.
        Err(kube::Error::Api(status)) if status.is_already_exists() => Err(not_published()),
        Err(source) => Err(kube("create", "Secret", &secret_name)(source)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lake_common::plan::Role;

    #[test]
    fn each_role_gets_a_certificate_for_its_names_and_the_ca_signs_both() {
        let plan = TlsPlan {
            secret: Default::default(),
            ca_config_map: Default::default(),
            certs: vec![
                (Role::Query.to_string(), vec!["dev-query.ns.svc".into()]),
                (
                    Role::Metadata.to_string(),
                    vec!["dev-metadata.ns.svc".into()],
                ),
            ],
        };
        let (ca, data) = issue(&plan, "ns/dev").unwrap();
        assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"));
        let keys: Vec<&str> = data.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "ca.crt",
                "metadata.crt",
                "metadata.key",
                "query.crt",
                "query.key"
            ]
        );
        assert!(
            String::from_utf8_lossy(&data["query.key"].0).contains("PRIVATE KEY"),
            "a PEM key"
        );
        // Two issues draw two CAs: nothing is derived from anything stored.
        let (other, _) = issue(&plan, "ns/dev").unwrap();
        assert_ne!(ca, other);
    }
}
