//! TLS: the cluster's CA and one serving certificate per role, drawn once per generation (see
//! `plan::tls`: a generation is renewed before it expires). Like the token Secrets, a
//! generation's Secret is created and never read (AlreadyExists says it is there); the CA's
//! certificate goes to a ConfigMap clients read, beside the CAs before it, in the same pass that
//! created the Secret. The CA's key is never stored.

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
use crate::plan::tls::{
    CA_BUNDLE, CA_KEY, CERTS, EXPIRES, GENERATION, Issued, TlsPlan, VALID_FOR, cert_key,
};

/// How far before their issue the certificates are already valid (clock skew between the
/// operator and the clients).
const SKEW: time::Duration = time::Duration::hours(1);
/// How long operators before renewal made certificates valid: the expiry of a CA ConfigMap
/// without the annotation (its creation is the issue).
const LEGACY_VALIDITY: std::time::Duration = std::time::Duration::from_secs(730 * 24 * 3600);

/// Seconds since the Unix epoch, now.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

fn validity(params: &mut CertificateParams) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - SKEW;
    params.not_after = now + VALID_FOR;
}

/// The PEM blocks of a bundle, in order.
fn pem_blocks(bundle: &str) -> Vec<String> {
    const END: &str = "-----END CERTIFICATE-----";
    bundle
        .split_inclusive(END)
        .map(str::trim)
        .filter(|b| b.starts_with("-----BEGIN CERTIFICATE-----") && b.ends_with(END))
        .map(|b| format!("{b}\n"))
        .collect()
}

/// `new` first, then the CAs of `previous` (a bundle), at most [`CA_BUNDLE`] in all.
fn bundle(new: &str, previous: Option<&str>) -> String {
    let mut blocks = pem_blocks(new);
    for block in previous.map(pem_blocks).unwrap_or_default() {
        if !blocks.contains(&block) {
            blocks.push(block);
        }
    }
    blocks.truncate(CA_BUNDLE);
    blocks.concat()
}

/// Whether the CA ConfigMap is this cluster's (owned by its LakeCluster).
fn ours(plan: &TlsPlan, cm: &ConfigMap) -> bool {
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
}

/// What the CA ConfigMap says was issued: `None` before the first issue, or when the ConfigMap
/// of that name is not this cluster's (`ensure` refuses it).
pub async fn issued(
    client: &Client,
    namespace: &str,
    plan: &TlsPlan,
) -> Result<Option<Issued>, ApplyError> {
    let ca_name = plan.ca_config_map.name.clone().unwrap_or_default();
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let published = config_maps
        .get_opt(&ca_name)
        .await
        .map_err(|source| ApplyError::Kube {
            operation: "get",
            kind: "ConfigMap".into(),
            name: ca_name.clone(),
            source: Box::new(source),
        })?;
    Ok(published.filter(|cm| ours(plan, cm)).map(|cm| {
        let annotation = |name: &str| {
            cm.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(name))
                .cloned()
                .unwrap_or_default()
        };
        // Published before renewal existed: its certificates were issued with it, for two years.
        let legacy = cm.metadata.creation_timestamp.as_ref().and_then(|t| {
            u64::try_from(t.0.as_second())
                .ok()
                .map(|s| s.saturating_add(LEGACY_VALIDITY.as_secs()))
        });
        let cas = cm
            .data
            .as_ref()
            .and_then(|d| d.get(CA_KEY))
            .map(|bundle| ca_validity(bundle))
            .unwrap_or_default();
        let newest = cas.first().copied().flatten();
        // Issued without the worker certificate the pods now need: renewed at once, as an
        // expiry brought forward is.
        let lacks_worker = lacks_worker(plan, &annotation(CERTS));
        Issued {
            generation: annotation(GENERATION).parse().unwrap_or(0),
            expires: match lacks_worker {
                true => Some(0),
                false => expiry(
                    annotation(EXPIRES).parse().ok(),
                    newest.map(|(_, not_after)| not_after),
                    legacy,
                ),
            },
            published: newest.map(|(not_before, _)| not_before.min(now())),
            before_expires: cas
                .get(1)
                .copied()
                .flatten()
                .map(|(_, not_after)| not_after),
        }
    }))
}

/// Whether the pods need the worker certificate and the generation the CA ConfigMap records
/// (its certificates: `certs`, as [`CERTS`] lists them) was issued without it.
fn lacks_worker(plan: &TlsPlan, certs: &str) -> bool {
    plan.needs_worker
        && !certs
            .split(',')
            .any(|stem| stem == crate::plan::distributed::CERT_STEM)
}

/// When the published generation's certificates expire. Anyone who may edit the ConfigMap can
/// write its annotation, so the annotation may bring renewal forward (`0` rotates at once) but
/// never past what the newest CA's certificate says: the serving certificates were issued with
/// it, for as long.
fn expiry(annotation: Option<u64>, newest_ca: Option<u64>, legacy: Option<u64>) -> Option<u64> {
    match (annotation, newest_ca) {
        (Some(a), Some(c)) => Some(a.min(c)),
        (Some(a), None) => Some(a),
        (None, Some(c)) => Some(c),
        (None, None) => legacy,
    }
}

/// The `notBefore` and `notAfter` (seconds since the epoch) of each certificate of a PEM
/// bundle, newest first, where it parses as one.
fn ca_validity(bundle: &str) -> Vec<Option<(u64, u64)>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(bundle.as_bytes())
        .map(|der| der.ok().and_then(|der| validity_of(&der)))
        .collect()
}

/// A DER certificate's `notBefore` and `notAfter`: `Certificate ::= SEQUENCE { tbsCertificate
/// SEQUENCE { [0] version OPTIONAL, serialNumber, signature, issuer, validity SEQUENCE {
/// notBefore, notAfter }, … }, signatureAlgorithm, signatureValue }` (RFC 5280).
fn validity_of(der: &[u8]) -> Option<(u64, u64)> {
    use yasna::Tag;
    let time = |r: yasna::BERReader| {
        let time = r.read_tagged_der()?;
        let parsed = match time.tag() {
            yasna::tags::TAG_UTCTIME => {
                yasna::models::UTCTime::parse(time.value()).map(|t| t.datetime().unix_timestamp())
            }
            yasna::tags::TAG_GENERALIZEDTIME => yasna::models::GeneralizedTime::parse(time.value())
                .map(|t| t.datetime().unix_timestamp()),
            _ => None,
        };
        parsed.ok_or_else(|| yasna::ASN1Error::new(yasna::ASN1ErrorKind::Invalid))
    };
    let (not_before, not_after) = yasna::parse_der(der, |r| {
        r.read_sequence(|r| {
            let validity = r.next().read_sequence(|r| {
                r.read_optional(|r| r.read_tagged(Tag::context(0), |r| r.read_der()))?;
                for _serial_signature_issuer in 0..3 {
                    r.next().read_der()?;
                }
                let validity = r
                    .next()
                    .read_sequence(|r| Ok((time(r.next())?, time(r.next())?)))?;
                // subject, subjectPublicKeyInfo, the optional unique ids and extensions.
                while r.read_optional(|r| r.read_der())?.is_some() {}
                Ok(validity)
            })?;
            r.next().read_der()?;
            r.next().read_der()?;
            Ok(validity)
        })
    })
    .ok()?;
    Some((
        u64::try_from(not_before).ok()?,
        u64::try_from(not_after).ok()?,
    ))
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
        // Workers connect to each other with the certificate they serve (mutual TLS).
        if stem == crate::plan::distributed::CERT_STEM {
            leaf.extended_key_usages
                .push(ExtendedKeyUsagePurpose::ClientAuth);
        }
        leaf.use_authority_key_identifier_extension = true;
        validity(&mut leaf);
        let key = KeyPair::generate()?;
        let cert = leaf.signed_by(&key, &issuer)?;
        let (cert_name, key_name) = cert_key(stem);
        data.insert(cert_name, ByteString(cert.pem().into_bytes()));
        data.insert(key_name, ByteString(key.serialize_pem().into_bytes()));
    }
    // As every bundle holds it (see `bundle`), so the Secret's and the ConfigMap's are the same.
    let ca_pem = pem_blocks(&ca_cert.pem()).concat();
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
        (Some(cm), _) if !ours(plan, cm) => return Err(not_published()),
        (Some(_), true) => return Ok(false),
        // The CA ConfigMap was deleted after the Secret was created: the CA is not recoverable
        // (its certificate is in the Secret, which the operator cannot read).
        (None, true) => return Err(not_published()),
        (_, false) => {}
    }
    let (ca_pem, data) = issue(plan, &format!("{namespace}/{cluster}"))
        .map_err(|source| ApplyError::Certificate { source })?;
    // The CAs before this one stay trusted while the pods roll onto the new generation. A CA
    // published for this same generation whose Secret was never created (a pass stopped between
    // the two) served nothing: it is replaced, not kept, so that repeated failures cannot push
    // the CA the running pods serve out of the bundle.
    let same_generation = published.as_ref().is_some_and(|cm| {
        cm.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(GENERATION))
            .is_some_and(|g| g == &plan.generation.to_string())
    });
    let previous = published
        .as_ref()
        .and_then(|cm| cm.data.as_ref())
        .and_then(|d| d.get(CA_KEY))
        .map(|bundle| {
            let blocks = pem_blocks(bundle);
            let skip = usize::from(same_generation);
            blocks[skip..].concat()
        });
    let mut metadata = plan.ca_config_map.clone();
    metadata.annotations = Some(BTreeMap::from([
        (GENERATION.to_owned(), plan.generation.to_string()),
        (
            EXPIRES.to_owned(),
            now().saturating_add(VALID_FOR.as_secs()).to_string(),
        ),
        (
            CERTS.to_owned(),
            plan.certs
                .iter()
                .map(|(stem, _)| stem.as_str())
                .collect::<Vec<_>>()
                .join(","),
        ),
    ]));
    let ca = ConfigMap {
        metadata,
        data: Some(BTreeMap::from([(
            CA_KEY.to_owned(),
            bundle(&ca_pem, previous.as_deref()),
        )])),
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
            generation: 0,
            secret: Default::default(),
            ca_config_map: Default::default(),
            certs: vec![
                (Role::Query.to_string(), vec!["dev-query.ns.svc".into()]),
                (
                    Role::Metadata.to_string(),
                    vec!["dev-metadata.ns.svc".into()],
                ),
                ("worker".into(), vec!["dev-query-workers".into()]),
            ],
            needs_worker: false,
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
                "query.key",
                "worker.crt",
                "worker.key"
            ]
        );
        assert!(
            String::from_utf8_lossy(&data["query.key"].0).contains("PRIVATE KEY"),
            "a PEM key"
        );
        // Only the worker certificate is a client's too (workers connect to each other).
        // (The DER encodings of the serverAuth and clientAuth purposes' OIDs.)
        let usages = |stem: &str| {
            use rustls::pki_types::CertificateDer;
            use rustls::pki_types::pem::PemObject;
            let der = CertificateDer::from_pem_slice(&data[&format!("{stem}.crt")].0).unwrap();
            let has = |oid: &[u8]| der.windows(oid.len()).any(|w| w == oid);
            (
                has(&[6, 8, 0x2b, 6, 1, 5, 5, 7, 3, 1]),
                has(&[6, 8, 0x2b, 6, 1, 5, 5, 7, 3, 2]),
            )
        };
        assert_eq!(usages("query"), (true, false));
        assert_eq!(usages("worker"), (true, true));
        // Two issues draw two CAs: nothing is derived from anything stored.
        let (other, _) = issue(&plan, "ns/dev").unwrap();
        assert_ne!(ca, other);
    }

    /// A generation issued before the worker certificate existed is renewed once distributed
    /// query needs it, and only then.
    #[test]
    fn a_generation_without_the_worker_certificate_is_renewed_when_it_is_needed() {
        let plan = |needs_worker| TlsPlan {
            generation: 0,
            secret: Default::default(),
            ca_config_map: Default::default(),
            certs: vec![],
            needs_worker,
        };
        assert!(lacks_worker(&plan(true), ""));
        assert!(lacks_worker(&plan(true), "query,metadata"));
        assert!(!lacks_worker(&plan(true), "query,metadata,worker"));
        assert!(!lacks_worker(&plan(false), "query,metadata"));
    }

    #[test]
    fn the_newest_ca_bounds_when_renewal_is_due() {
        let plan = TlsPlan {
            generation: 0,
            secret: Default::default(),
            ca_config_map: Default::default(),
            certs: vec![("query".into(), vec!["q".into()])],
            needs_worker: false,
        };
        let (ca, data) = issue(&plan, "ns/dev").unwrap();
        let newest = |bundle: &str| ca_validity(bundle).first().copied().flatten();
        let (issued, expires) = newest(&ca).unwrap();
        assert!(
            expires.abs_diff(now() + VALID_FOR.as_secs()) < 60,
            "{expires}"
        );
        assert!(
            issued.abs_diff(now() - SKEW.whole_seconds() as u64) < 60,
            "{issued}"
        );
        // A bundle's first certificate is its newest CA, the next the one before; a leaf
        // expires with it.
        let older = issue(&plan, "ns/dev").unwrap().0;
        let both = ca_validity(&bundle(&ca, Some(&older)));
        assert_eq!(both.len(), 2);
        assert_eq!(both[0].map(|v| v.1), Some(expires));
        assert!(both[1].is_some());
        let leaf = String::from_utf8(data["query.crt"].0.clone()).unwrap();
        assert!(newest(&leaf).unwrap().1.abs_diff(expires) < 60);
        assert!(ca_validity("not a certificate").is_empty());
        let garbage = "-----BEGIN CERTIFICATE-----\nMAMCAQE=\n-----END CERTIFICATE-----\n";
        assert_eq!(ca_validity(garbage), vec![None]);
        // The annotation may bring renewal forward, never past the certificate.
        assert_eq!(expiry(Some(u64::MAX), Some(expires), None), Some(expires));
        assert_eq!(expiry(Some(0), Some(expires), None), Some(0));
        assert_eq!(expiry(None, None, Some(7)), Some(7));
    }

    #[test]
    fn a_renewal_publishes_the_new_ca_beside_the_ones_before() {
        let plan = TlsPlan {
            generation: 0,
            secret: Default::default(),
            ca_config_map: Default::default(),
            certs: vec![("query".into(), vec!["q".into()])],
            needs_worker: false,
        };
        let cas: Vec<String> = (0..5).map(|_| issue(&plan, "ns/dev").unwrap().0).collect();
        let mut published = cas[0].clone();
        for ca in &cas[1..] {
            published = bundle(ca, Some(&published));
        }
        let blocks = pem_blocks(&published);
        assert_eq!(blocks.len(), CA_BUNDLE);
        assert_eq!(blocks[0], pem_blocks(&cas[4])[0], "the newest first");
        assert_eq!(blocks[1], pem_blocks(&cas[3])[0]);
        // Publishing the same CA again adds nothing.
        assert_eq!(
            pem_blocks(&bundle(&cas[4], Some(&published))).len(),
            CA_BUNDLE
        );
    }
}
