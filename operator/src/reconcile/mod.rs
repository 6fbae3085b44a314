//! The reconcile driver: `validate → plan → apply → status`.
//!
//! - validate (no client): a bad spec stops here — PlanValid=False naming the fields, no AWS
//!   call, no Kubernetes write but the status; it waits for the spec to change.
//! - dereference (AWS reads): the roles' accounts, for the policy ARNs.
//! - plan (no client): tables, policies, objects.
//! - apply (clients): tables, then policies, then objects; each writes only what differs.
//! - status last: conditions with observedGeneration, endpoints, tables, policy digests; Events
//!   on transitions only.
//!
//! `paused: true` stops every mutation (status still tells the truth); deletion is honoured
//! behind the `lake.dev/cleanup` finalizer whatever `paused` says.
//!
//! This file is the driver; each step is a file with its outcome type: `dereference`,
//! `tables`, `policies`, `migrate`, `workloads`, `selftest`, then `report` (status and Events);
//! `cleanup` is deletion.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource, ResourceExt};
use lake_common::plan::{Role, Storage};
use serde_json::json;

use crate::allowlist::{self, Allowlist};
use crate::apply::{self, ApplyError};
use crate::aws::AwsPool;
use crate::crd::{
    Condition, Endpoints, LakeCluster, LakeClusterStatus, MaintenanceStatus, PoliciesStatus,
    PolicyStatus, TableStatus, TablesStatus, TlsStatus, TokensStatus,
};
use crate::crd::{ConditionStatus, MigrationPhase, MigrationStatus};
use crate::metrics::Metrics;
use crate::migration::{self, MigrationError};
use crate::plan::{self, IamInputs, LakePlan};
use crate::render::endpoint;
use crate::status::{
    self, Check, MIGRATION_COMPLETE, PLAN_VALID, POLICIES_READY, SELF_TEST_PASSED, TABLES_READY,
    WORKLOADS_READY,
};
use crate::validate::{self, ValidatedCluster};

pub const FINALIZER: &str = "lake.dev/cleanup";
/// How often a converged cluster is checked for drift.
const RESYNC: Duration = Duration::from_secs(300);
/// How soon a cluster that is still rolling out is looked at again.
const PROGRESS: Duration = Duration::from_secs(15);
/// How soon a migration whose pass ended before its copy did goes on.
const MIGRATING: Duration = Duration::from_secs(1);
const BACKOFF_BASE: Duration = Duration::from_secs(2);
const BACKOFF_MAX: Duration = Duration::from_secs(300);

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error(transparent)]
    Apply(#[from] ApplyError),
    #[error("migration: {0}")]
    Migration(#[from] MigrationError),
    #[error(transparent)]
    Account(#[from] crate::aws::AccountError),
    #[error("Kubernetes {operation} of LakeCluster {name}: {source}")]
    Kube {
        operation: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
}

impl ReconcileError {
    pub fn reason(&self) -> &'static str {
        match self {
            ReconcileError::Apply(e) => e.reason(),
            ReconcileError::Migration(_) => "MigrationError",
            ReconcileError::Account(_) => "AwsError",
            ReconcileError::Kube { .. } => "KubernetesError",
        }
    }
}

/// What every reconcile shares.
pub struct Context {
    pub client: Client,
    pub aws: Arc<AwsPool>,
    /// For the IRSA trust policies in status.
    pub oidc_provider: Option<String>,
    pub metrics: Arc<Metrics>,
    /// What the administrator lets each namespace's clusters reach.
    pub allowlist: Allowlist,
    recorder: Recorder,
    /// Consecutive failures per cluster uid: exponential backoff, reset on success.
    failures: Mutex<HashMap<String, u32>>,
}

impl Context {
    pub fn new(
        client: Client,
        aws: Arc<AwsPool>,
        oidc_provider: Option<String>,
        metrics: Arc<Metrics>,
        allowlist: Allowlist,
    ) -> Arc<Self> {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: crate::plan::tables::MANAGER.into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        );
        Arc::new(Self {
            client,
            aws,
            oidc_provider,
            metrics,
            allowlist,
            recorder,
            failures: Mutex::default(),
        })
    }

    /// The delay before retrying `cluster` after a failure: 2 s doubling, capped at 5 min.
    pub fn backoff(&self, cluster: &LakeCluster) -> Duration {
        let uid = cluster.uid().unwrap_or_default();
        let mut failures = self
            .failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = failures.entry(uid).or_default();
        *n = n.saturating_add(1);
        BACKOFF_BASE
            .saturating_mul(2u32.saturating_pow(n.saturating_sub(1).min(16)))
            .min(BACKOFF_MAX)
    }

    fn succeeded(&self, cluster: &LakeCluster) {
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&cluster.uid().unwrap_or_default());
    }
}

fn api(ctx: &Context, cluster: &LakeCluster) -> Api<LakeCluster> {
    Api::namespaced(
        ctx.client.clone(),
        &cluster.namespace().unwrap_or_else(|| "default".into()),
    )
}

fn kube_error(
    operation: &'static str,
    cluster: &LakeCluster,
) -> impl Fn(kube::Error) -> ReconcileError {
    let name = cluster.name_any();
    move |source| ReconcileError::Kube {
        operation,
        name: name.clone(),
        source,
    }
}

/// One reconcile pass (the controller's entry point).
pub async fn reconcile(
    cluster: Arc<LakeCluster>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let started = Instant::now();
    let result = if cluster.meta().deletion_timestamp.is_some() {
        cleanup(&cluster, &ctx).await
    } else {
        apply_cluster(&cluster, &ctx).await
    };
    ctx.metrics.reconciled(started.elapsed());
    match &result {
        Ok(_) => ctx.succeeded(&cluster),
        Err(e) => ctx.metrics.failed(e.reason()),
    }
    result
}

/// The controller's error policy: back off per cluster, exponentially.
pub fn error_policy(
    cluster: Arc<LakeCluster>,
    error: &ReconcileError,
    ctx: Arc<Context>,
) -> Action {
    let delay = ctx.backoff(&cluster);
    tracing::warn!(cluster = %cluster.name_any(), %error, ?delay, "reconcile failed; retrying");
    Action::requeue(delay)
}

/// Whether a spec is admitted.
enum Admission {
    Admitted(Box<ValidatedCluster>),
    /// Invalid, or refused by the allowlist: a terminal condition, with why.
    Refused(String),
}

/// Validates and admits the spec. Pure but for the operator's own AWS account, asked of STS
/// once (and only for role ARNs the allowlist must pin): nothing about the cluster reaches AWS
/// before it is admitted.
async fn admitted(cluster: &LakeCluster, ctx: &Context) -> Result<Admission, ReconcileError> {
    let join = |errors: lake_common::plan::PlanErrors| {
        Admission::Refused(
            errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
        )
    };
    let validated = match validate::validate(cluster) {
        Ok(v) => v,
        Err(errors) => return Ok(join(errors)),
    };
    let account = match validated.authority.aws() {
        Some(aws) if allowlist::needs_operator_account(&validated, &ctx.allowlist) => {
            Some(ctx.aws.operator_account(&aws.region).await?)
        }
        _ => None,
    };
    Ok(
        match allowlist::admit(&validated, &ctx.allowlist, account.as_deref()) {
            Ok(()) => Admission::Admitted(Box::new(validated)),
            Err(errors) => join(errors),
        },
    )
}

async fn apply_cluster(cluster: &LakeCluster, ctx: &Context) -> Result<Action, ReconcileError> {
    let generation = cluster.meta().generation;
    // validate + admit: pure; a refused spec never reaches AWS.
    let admission = match admitted(cluster, ctx).await {
        Ok(admission) => admission,
        Err(e) => {
            let waiting = "waiting for the operator's own AWS account";
            let checks = [
                Check::unknown(PLAN_VALID, "Waiting", waiting),
                Check::unknown(TABLES_READY, "Waiting", waiting),
                Check::failed(POLICIES_READY, e.reason(), e.to_string()),
                Check::unknown(WORKLOADS_READY, "Waiting", waiting),
            ];
            write_status(
                ctx,
                cluster,
                &checks,
                generation,
                Facts::unobserved(cluster),
            )
            .await?;
            return Err(e);
        }
    };
    let validated = match admission {
        Admission::Admitted(v) => *v,
        Admission::Refused(message) => {
            let checks = [
                Check::failed(PLAN_VALID, "InvalidSpec", message),
                Check::unknown(TABLES_READY, "PlanInvalid", "the spec is invalid"),
                Check::unknown(POLICIES_READY, "PlanInvalid", "the spec is invalid"),
                Check::unknown(WORKLOADS_READY, "PlanInvalid", "the spec is invalid"),
            ];
            write_status(
                ctx,
                cluster,
                &checks,
                generation,
                Facts::unobserved(cluster),
            )
            .await?;
            // Terminal: nothing changes until the spec does.
            return Ok(Action::await_change());
        }
    };
    let plan_valid = Check::ok(PLAN_VALID, "Valid", "the spec is valid");

    if validated.paused {
        let mut checks = previous_checks(cluster);
        checks.retain(|c| c.type_ != PLAN_VALID && c.type_ != WORKLOADS_READY);
        checks.push(plan_valid);
        checks.push(Check::failed(
            WORKLOADS_READY,
            "ReconciliationPaused",
            "spec.paused is true: nothing is changed until it is false",
        ));
        write_status(ctx, cluster, &checks, generation, Facts::previous(cluster)).await?;
        return Ok(Action::await_change());
    }

    ensure_finalizer(ctx, cluster).await?;

    let clients = match (validated.authority.storage(), validated.authority.aws()) {
        (Storage::S3(_), Some(aws)) => Some(ctx.aws.clients(&aws.region).await),
        _ => None,
    };
    let mut facts = Facts {
        endpoints: Some(Endpoints {
            query: Some(endpoint(&validated, Role::Query)),
            metadata: Some(endpoint(&validated, Role::Metadata)),
        }),
        ..Facts::unobserved(cluster)
    };

    // Dereference: without the roles' accounts the plan would hold placeholders, so a failed
    // lookup stops the pass before anything is written.
    let inputs = match dereference(&validated, clients.as_ref(), ctx).await {
        Ok(inputs) => inputs,
        Err(e) => {
            let waiting = "waiting for the IAM roles to be looked up";
            let checks = [
                plan_valid,
                Check::unknown(TABLES_READY, "Waiting", waiting),
                Check::failed(POLICIES_READY, e.reason(), e.to_string()),
                Check::unknown(WORKLOADS_READY, "Waiting", waiting),
            ];
            write_status(ctx, cluster, &checks, generation, facts).await?;
            return Err(e.into());
        }
    };
    // The certificates' generations: the one the pods mount, and the next one once it is
    // published ahead of them (the workloads step issues it; see `plan::tls::generations`).
    let mut validated = validated;
    if let Some(tls) = plan::tls::tls(&validated) {
        match apply::tls::issued(&ctx.client, &validated.namespace, &tls).await {
            Ok(issued) => {
                let serving = cluster
                    .status
                    .as_ref()
                    .and_then(|s| s.tls.as_ref())
                    .and_then(|t| plan::tls::generation_of(&validated, &t.secret));
                let mut generations = plan::tls::generations(issued, serving, apply::tls::now());
                // Distributed query mounts the worker certificate, which only the newest
                // generation is known to carry (its CA ConfigMap lists it): a generation
                // published ahead is served now rather than pods wait on one without it.
                if validated.query.distributed.is_some() {
                    generations.serve = generations.publish;
                }
                validated.tls_generation = generations.serve;
                validated.tls_publish = generations.publish;
            }
            Err(e) => {
                let checks = [
                    plan_valid,
                    Check::failed(WORKLOADS_READY, e.reason(), e.to_string()),
                ];
                write_status(ctx, cluster, &checks, generation, facts).await?;
                return Err(e.into());
            }
        }
    }
    let LakePlan {
        tables,
        policies,
        objects,
        tokens,
        tls,
    } = plan::plan(&validated, &inputs);

    let may_adopt = ctx.allowlist.may_adopt(&validated.namespace);
    let holder = match &validated.reattach_from {
        Some(from) if clients.is_some() => tables::reattach_holder(&ctx.client, from).await,
        _ => Ok(None),
    };
    let tables = tables_step(clients.as_ref(), &tables, may_adopt, holder).await;
    facts.tables = tables.status();
    let policies_check = match &tables.failure {
        Some(_) => (
            Check::unknown(POLICIES_READY, "Waiting", "waiting for the tables"),
            None,
        ),
        None => {
            let previous = cluster.status.as_ref().and_then(|s| s.policies.as_ref());
            policies_step(&validated, clients.as_ref(), &policies, previous).await
        }
    };
    // The new roles are recorded once the old ones' grants were revoked (the policies step
    // ran through); until then the record of the old ones stays, so they are revoked later.
    if tables.failure.is_none() && policies_check.1.is_none() {
        facts.policies = policies_status(&policies);
    }
    let failure = tables.failure.or(policies_check.1);
    // A migration copies into the tables before any workload is pointed at them.
    let ran = match (&failure, &validated.migration, clients.as_ref()) {
        (None, Some(spec), Some(clients)) => Some(
            migration_step(
                ctx,
                cluster,
                &validated,
                spec,
                &tables.applied,
                &clients.dynamodb,
            )
            .await,
        ),
        _ => None,
    };
    // A pass that could not advance it (an AWS error, or the tables not ready) reports where it
    // stands — the last checkpoint it saved, else what the cluster recorded — and leaves
    // status.migration as the server has it unless it saved something newer.
    let recorded = || {
        validated.migration.as_ref().map(|_| {
            cluster
                .status
                .as_ref()
                .and_then(|s| s.migration.clone())
                .unwrap_or_default()
        })
    };
    let (mut migration, migration_error, mut advanced) = match ran {
        Some(Ok(m)) => (Some(m), None, true),
        Some(Err((e, Some(saved)))) => (Some(saved), Some(e), true),
        Some(Err((e, None))) => (recorded(), Some(e), false),
        None => (recorded(), None, false),
    };
    // Only a phase this pass bore out (`migration::advance` checks the status against the
    // operator's own record) points the workloads at the split tables; a status read back but
    // not checked (the step failed) does not.
    let cut_over = migration.as_ref().is_none_or(|m| {
        advanced
            && matches!(
                m.phase,
                MigrationPhase::CuttingOver | MigrationPhase::Complete
            )
    });
    // Workloads only once the stores they point at exist and their roles may reach them.
    let workloads = match (&failure, &migration) {
        (Some(_), _) => WorkloadsOutcome::waiting(),
        (None, Some(m)) if !cut_over => WorkloadsOutcome::migrating(m),
        (None, _) => {
            let created_once = CreatedOnce {
                tokens: &tokens,
                tls: tls.as_ref(),
            };
            workloads_step(ctx, cluster, &validated, &objects, created_once).await
        }
    };
    facts.tokens = workloads.tokens.clone();
    facts.tls = workloads.tls.clone();
    let failure = failure.or(workloads.failure);
    // Rolled out on the split tables: the cutover is complete.
    if let Some(m) = migration.take() {
        migration = Some(
            if m.phase == MigrationPhase::CuttingOver
                && workloads.check.status == ConditionStatus::True
            {
                let done = migration::complete(m);
                StatusCheckpoint::new(ctx, cluster).write(&done).await?;
                advanced = true;
                done
            } else {
                m
            },
        );
    }
    let migration_check = match &migration_error {
        Some(e) => Some(Check::failed(
            MIGRATION_COMPLETE,
            "MigrationError",
            e.to_string(),
        )),
        None => migration.as_ref().map(migration_check),
    };
    // Still going (a pass's copy budget ran out, or a verify to run): look again soon.
    let migrating = migration.as_ref().is_some_and(|m| {
        matches!(
            m.phase,
            MigrationPhase::Pending | MigrationPhase::Copying | MigrationPhase::Verifying
        )
    });
    facts.migration = migration.filter(|_| advanced);

    let ready = [&tables.check, &policies_check.0, &workloads.check]
        .into_iter()
        .chain(migration_check.as_ref())
        .all(|c| c.status == ConditionStatus::True);
    // Once rolled out: the selftest Jobs (reported, not gating Ready).
    let self_test = if ready {
        self_test_step(ctx, &validated).await
    } else {
        None
    };
    // The maintenance passes (reported, not gating Ready), once the workloads were applied.
    let maintenance = match &failure {
        None => maintenance_step(ctx, cluster, &validated).await,
        // Not looked at this pass: what the last one saw stays.
        Some(_) => validated
            .maintenance
            .as_ref()
            .and_then(|_| maintenance::previous(cluster)),
    };
    let mut checks = vec![plan_valid, tables.check, policies_check.0, workloads.check];
    checks.extend(migration_check);
    checks.extend(self_test);
    if let Some((status, check)) = maintenance {
        facts.maintenance = status;
        checks.push(check);
    }
    write_status(ctx, cluster, &checks, generation, facts).await?;
    if let (None, Some(e)) = (&failure, migration_error) {
        return Err(e.into());
    }
    match failure {
        Some(e) if e.is_terminal() => {
            // Not retried (it waits for a spec change), but counted like every failure.
            ctx.metrics.failed(e.reason());
            Ok(Action::await_change())
        }
        Some(e) => Err(e.into()),
        None if ready => Ok(Action::requeue(RESYNC)),
        None if migrating => Ok(Action::requeue(MIGRATING)),
        None => Ok(Action::requeue(PROGRESS)),
    }
}

mod cleanup;
mod dereference;
mod maintenance;
mod migrate;
mod policies;
mod report;
mod selftest;
mod tables;
mod workloads;

use cleanup::{cleanup, ensure_finalizer};
use dereference::dereference;
use maintenance::maintenance_step;
use migrate::{StatusCheckpoint, migration_check, migration_step};
use policies::{policies_status, policies_step};
use report::{Facts, previous_checks, write_status};
use selftest::self_test_step;
use tables::tables_step;
use workloads::{CreatedOnce, WorkloadsOutcome, workloads_step};
