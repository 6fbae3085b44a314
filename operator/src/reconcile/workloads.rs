//! The workloads step: the created-once Secrets (tokens, TLS), then every object, then the rollout.

use super::*;

pub(super) struct WorkloadsOutcome {
    pub(super) check: Check,
    pub(super) failure: Option<ApplyError>,
    /// The token Secrets, once they are known to exist.
    pub(super) tokens: Option<TokensStatus>,
    /// The TLS Secret and CA ConfigMap, once they are known to exist.
    pub(super) tls: Option<TlsStatus>,
}

/// What the workloads need that is drawn at random once and never applied again.
pub(super) struct CreatedOnce<'a> {
    pub(super) tokens: &'a [plan::TokenSecret],
    pub(super) tls: Option<&'a plan::tls::TlsPlan>,
}

impl WorkloadsOutcome {
    pub(super) fn waiting() -> Self {
        Self {
            check: Check::unknown(
                WORKLOADS_READY,
                "Waiting",
                "waiting for tables and policies",
            ),
            failure: None,
            tokens: None,
            tls: None,
        }
    }
    pub(super) fn migrating(m: &MigrationStatus) -> Self {
        Self {
            check: Check::failed(
                WORKLOADS_READY,
                "MigrationInProgress",
                format!(
                    "the workloads wait for the migration's cutover (phase {})",
                    m.phase
                ),
            ),
            failure: None,
            tokens: None,
            tls: None,
        }
    }
    pub(super) fn failed(e: ApplyError) -> Self {
        Self {
            check: Check::failed(WORKLOADS_READY, e.reason(), e.to_string()),
            failure: Some(e),
            tokens: None,
            tls: None,
        }
    }
}

/// Whether this pass must make sure a created-once Secret exists. The operator cannot read
/// Secrets, so it creates them (AlreadyExists means they are there) until the status records
/// them, and again whenever the workloads were not ready (a deleted Secret keeps new pods from
/// starting); a converged pass sends nothing.
pub(super) fn must_create(
    cluster: &LakeCluster,
    recorded: impl Fn(&LakeClusterStatus) -> bool,
) -> bool {
    let Some(status) = &cluster.status else {
        return true;
    };
    let workloads_ready = status
        .conditions
        .iter()
        .any(|c| c.type_ == WORKLOADS_READY && c.status == crate::crd::ConditionStatus::True);
    !recorded(status) || !workloads_ready
}

pub(super) async fn workloads_step(
    ctx: &Context,
    cluster: &LakeCluster,
    validated: &ValidatedCluster,
    objects: &[plan::Object],
    created_once: CreatedOnce<'_>,
) -> WorkloadsOutcome {
    if must_create(cluster, |s| s.tokens.is_some()) {
        match apply::tokens::ensure(&ctx.client, &validated.namespace, created_once.tokens).await {
            Err(e) => return WorkloadsOutcome::failed(e),
            Ok(created) if !created.is_empty() => {
                tracing::info!(cluster = %validated.name, ?created, "token Secrets created");
            }
            Ok(_) => {}
        }
    }
    let secret = |role| plan::tokens::secret_name(validated, role);
    let tokens = Some(TokensStatus {
        query_secret: secret(Role::Query),
        metadata_secret: secret(Role::Metadata),
    });
    let mut tls = None;
    if let Some(plan) = created_once.tls {
        let secret = plan::tls::secret_name(validated);
        // Until the status records the newest generation's Secret as the one served (a renewal
        // names a new one; one published ahead of the pods is checked on every pass, cheaply).
        let published = plan.secret.name.as_deref().unwrap_or_default();
        if must_create(cluster, |s| {
            s.tls.as_ref().is_some_and(|t| t.secret == published)
        }) {
            match apply::tls::ensure(&ctx.client, &validated.namespace, &validated.name, plan).await
            {
                Err(e) => return WorkloadsOutcome::failed(e),
                Ok(true) => {
                    tracing::info!(
                        cluster = %validated.name,
                        generation = plan.generation,
                        "TLS certificates issued"
                    );
                }
                Ok(false) => {}
            }
        }
        tls = Some(TlsStatus {
            secret,
            ca_config_map: plan::tls::ca_config_map_name(validated),
        });
    }
    match apply::workloads::ensure(&ctx.client, &validated.namespace, objects).await {
        Err(e) => return WorkloadsOutcome::failed(e),
        Ok(written) if !written.is_empty() => {
            tracing::info!(cluster = %validated.name, ?written, "applied");
        }
        Ok(_) => {}
    }
    let mut notes = Vec::new();
    let mut all_ready = true;
    for workload in plan::workloads::rollouts(validated) {
        match apply::workloads::rollout(&ctx.client, &validated.namespace, &workload).await {
            Ok((ready, note)) => {
                all_ready &= ready;
                notes.push(note);
            }
            // Reported in status like every other failure (not an early return past it).
            Err(e) => {
                return WorkloadsOutcome {
                    tokens,
                    tls,
                    ..WorkloadsOutcome::failed(e)
                };
            }
        }
    }
    WorkloadsOutcome {
        tokens,
        tls,
        check: if all_ready {
            Check::ok(WORKLOADS_READY, "Available", notes.join("; "))
        } else {
            Check::failed(WORKLOADS_READY, "RollingOut", notes.join("; "))
        },
        failure: None,
    }
}
