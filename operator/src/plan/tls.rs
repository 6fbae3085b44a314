//! TLS on both Flight endpoints (unless `spec.tls: Disabled`): a CA of the cluster's own signs
//! one serving certificate per role (a local lake's one pod: one carrying both roles' names).
//! The certificates and keys are random, so the plan holds only names, mounts and the names
//! each certificate must carry; reconcile draws them (`apply::tls`). The CA's key is discarded
//! once the certificates are signed, so nobody — not even the operator — can sign another
//! certificate this cluster's clients would trust.
//!
//! Certificates are valid for [`VALID_FOR`]; each renewal is a new *generation* — a new CA and
//! new certificates in a Secret of their own, published [`PUBLISH_BEFORE`] the served one
//! expires, the pods rolled onto it a month later ([`generations`]) — so a renewal is also a CA
//! rotation that clients learn of before it is served. The CA
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
/// The CA ConfigMap's annotation listing the certificates its generation issued (stems, comma
/// separated): a generation without one the cluster now needs (the worker certificate, when
/// distributed query is turned on) is renewed at once.
pub const CERTS: &str = "lake.dev/tls-certs";
/// How long certificates are valid from their issue.
pub const VALID_FOR: std::time::Duration = std::time::Duration::from_secs(365 * 24 * 3600);
/// How long before the served generation's expiry the next one is published: its CA joins
/// `ca.crt` and its Secret is created, while the pods keep serving the one before, so that
/// clients that read `ca.crt` now and then trust the next certificates before any pod serves
/// them.
pub const PUBLISH_BEFORE: std::time::Duration = std::time::Duration::from_secs(60 * 24 * 3600);
/// How long before their expiry the pods move onto the next generation (issued then, if it was
/// not published before: a forced rotation, or an operator that was not running).
pub const RENEW_BEFORE: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 3600);
/// CA certificates `ca.crt` keeps: the current one and those before it.
pub const CA_BUNDLE: usize = 3;

/// The newest generation the CA ConfigMap records, when its certificates expire (`None`: not
/// recorded, as by operators before renewal existed), when it was published (its CA's
/// `notBefore`) and when the generation before it expires (the next CA's `notAfter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Issued {
    pub generation: u32,
    pub expires: Option<u64>,
    pub published: Option<u64>,
    pub before_expires: Option<u64>,
}

/// The generation whose CA and Secret must exist, and the one the pods mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Generations {
    pub publish: u32,
    pub serve: u32,
}

/// The generations at `now` (seconds since the epoch), given what the CA ConfigMap records and
/// the generation the pods were last given (`serving`, from status).
///
/// The next generation is published [`PUBLISH_BEFORE`] the served one expires and served
/// [`PUBLISH_BEFORE`] − [`RENEW_BEFORE`] after that (or [`RENEW_BEFORE`] before the served
/// one expires, if that comes first), so clients have that long to read its CA. Within
/// [`RENEW_BEFORE`] of the newest generation's expiry (an expiry brought forward, `0` for a
/// suspected compromise), the next one is published and served at once.
pub fn generations(issued: Option<Issued>, serving: Option<u32>, now: u64) -> Generations {
    let at = |g| Generations {
        publish: g,
        serve: g,
    };
    let Some(Issued {
        generation: newest,
        expires,
        published,
        before_expires,
    }) = issued
    else {
        // Nothing recorded (a deleted CA ConfigMap forgets it): never below what the pods
        // were last given.
        return at(serving.unwrap_or(0));
    };
    let serving = serving.unwrap_or(newest);
    if serving > newest {
        return at(serving);
    }
    let due = |expires: Option<u64>, before: std::time::Duration| {
        expires.is_none_or(|e| now.saturating_add(before.as_secs()) >= e)
    };
    let lead = PUBLISH_BEFORE.saturating_sub(RENEW_BEFORE).as_secs();
    if due(expires, RENEW_BEFORE) {
        at(newest.saturating_add(1))
    } else if serving < newest {
        // Published ahead: served once clients had the lead to read its CA, or once the
        // generation served nears its own expiry (unknown unless it is the one just before).
        let served_expires = before_expires.filter(|_| serving.saturating_add(1) == newest);
        if published.is_none_or(|p| now >= p.saturating_add(lead))
            || due(served_expires, RENEW_BEFORE)
        {
            at(newest)
        } else {
            Generations {
                publish: newest,
                serve: serving,
            }
        }
    } else if due(expires, PUBLISH_BEFORE) {
        Generations {
            publish: newest.saturating_add(1),
            serve: serving,
        }
    } else {
        at(newest)
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

/// The Secret holding every role's certificate and key, and the CA certificate, of the
/// generation the pods serve. Not `<name>-tls`: that is what cert-manager users commonly name
/// their own Secrets.
pub fn secret_name(cluster: &ValidatedCluster) -> String {
    generation_secret_name(cluster, cluster.tls_generation)
}

/// The Secret of `generation`.
fn generation_secret_name(cluster: &ValidatedCluster, generation: u32) -> String {
    match generation {
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
    /// Its Secret (the pods may still mount the one before: see [`generations`]).
    pub secret: ObjectMeta,
    pub ca_config_map: ObjectMeta,
    /// Each certificate's stem (see [`cert_key`]) and the names it carries.
    pub certs: Vec<(String, Vec<String>)>,
    /// Whether the pods need the worker certificate (distributed query): a generation issued
    /// without it is renewed at once.
    pub needs_worker: bool,
}

pub fn tls(cluster: &ValidatedCluster) -> Option<TlsPlan> {
    (cluster.tls == TlsMode::Operator).then(|| TlsPlan {
        generation: cluster.tls_publish,
        // Both serve both roles; `meta_named` wants one for the component label.
        secret: meta_named(
            cluster,
            Role::Metadata,
            generation_secret_name(cluster, cluster.tls_publish),
        ),
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
            // The worker certificate too, distributed query or not, so turning it on later
            // needs no new generation.
            None => [Role::Query, Role::Metadata]
                .into_iter()
                .map(|role| (role.to_string(), dns_names(cluster, role)))
                .chain([(
                    super::distributed::CERT_STEM.to_owned(),
                    super::distributed::dns_names(cluster),
                )])
                .collect(),
        },
        needs_worker: cluster.query.distributed.is_some(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: u64 = 24 * 3600;

    fn issued(generation: u32, expires: Option<u64>, published: Option<u64>) -> Option<Issued> {
        Some(Issued {
            generation,
            expires,
            published,
            before_expires: None,
        })
    }

    fn gens(publish: u32, serve: u32) -> Generations {
        Generations { publish, serve }
    }

    #[test]
    fn a_generation_is_renewed_thirty_days_before_its_expiry() {
        let now = 1_000 * DAY;
        let at = |g| gens(g, g);
        assert_eq!(generations(None, None, now), at(0));
        // A deleted CA ConfigMap: the pods keep what they were given.
        assert_eq!(generations(None, Some(3), now), at(3));
        assert_eq!(
            generations(issued(0, Some(now + 300 * DAY), None), Some(0), now),
            at(0)
        );
        assert_eq!(
            generations(issued(4, Some(now + 29 * DAY), None), Some(4), now),
            at(5)
        );
        assert_eq!(
            generations(issued(4, Some(now - DAY), None), Some(4), now),
            at(5)
        );
        // Issued before expiries were recorded: renewed now.
        assert_eq!(generations(issued(0, None, None), None, now), at(1));
    }

    #[test]
    fn the_next_ca_is_published_a_month_before_the_pods_serve_it() {
        let now = 1_000 * DAY;
        // 59 days before expiry: published, not served.
        assert_eq!(
            generations(issued(4, Some(now + 59 * DAY), None), Some(4), now),
            gens(5, 4)
        );
        assert_eq!(
            generations(issued(4, Some(now + 61 * DAY), None), Some(4), now),
            gens(4, 4)
        );
        // Published 10 days ago (it expires in a year): still the one before served …
        let next = |before_expires| {
            Some(Issued {
                generation: 5,
                expires: Some(now + 355 * DAY),
                published: Some(now - 10 * DAY),
                before_expires,
            })
        };
        assert_eq!(
            generations(next(Some(now + 50 * DAY)), Some(4), now),
            gens(5, 4)
        );
        // … unless that one expires within 30 days (published late: a pass failed), or its
        // expiry is unknown …
        assert_eq!(
            generations(next(Some(now + 20 * DAY)), Some(4), now),
            gens(5, 5)
        );
        assert_eq!(generations(next(None), Some(4), now), gens(5, 5));
        assert_eq!(
            generations(next(Some(now + 50 * DAY)), Some(3), now),
            gens(5, 5)
        );
        // A CA that does not parse (an edited `ca.crt`) tells no publication date: served.
        let unreadable = issued(5, Some(now + 355 * DAY), None);
        assert_eq!(generations(unreadable, Some(4), now), gens(5, 5));
        // … and 30 days after its publication, it is.
        let next = issued(5, Some(now + 335 * DAY), Some(now - 30 * DAY));
        assert_eq!(generations(next, Some(4), now), gens(5, 5));
        // An expiry brought forward while it waits (a suspected compromise): the one after,
        // at once.
        let forced = issued(5, Some(0), Some(now - 10 * DAY));
        assert_eq!(generations(forced, Some(4), now), gens(6, 6));
        // Status ahead of the ConfigMap (it was replaced): never below what the pods have.
        assert_eq!(
            generations(issued(2, Some(now + 300 * DAY), None), Some(4), now),
            gens(4, 4)
        );
    }
}
