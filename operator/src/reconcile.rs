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
    Condition, Endpoints, LakeCluster, LakeClusterStatus, PoliciesStatus, PolicyStatus,
    TableStatus, TablesStatus, TlsStatus, TokensStatus,
};
use crate::crd::{MigrationPhase, MigrationStatus};
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

/// The admitted spec, or the status that says why not (a terminal condition).
fn admitted(cluster: &LakeCluster, ctx: &Context) -> Result<ValidatedCluster, String> {
    let join = |errors: lake_common::plan::PlanErrors| {
        errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    };
    let validated = validate::validate(cluster).map_err(join)?;
    allowlist::admit(&validated, &ctx.allowlist).map_err(join)?;
    Ok(validated)
}

async fn apply_cluster(cluster: &LakeCluster, ctx: &Context) -> Result<Action, ReconcileError> {
    let generation = cluster.meta().generation;
    // validate + admit: pure; a refused spec never reaches AWS.
    let validated = match admitted(cluster, ctx) {
        Ok(v) => v,
        Err(message) => {
            let checks = [
                Check::failed(PLAN_VALID, "InvalidSpec", message),
                Check::unknown(TABLES_READY, "PlanInvalid", "the spec is invalid"),
                Check::unknown(POLICIES_READY, "PlanInvalid", "the spec is invalid"),
                Check::unknown(WORKLOADS_READY, "PlanInvalid", "the spec is invalid"),
            ];
            write_status(ctx, cluster, &checks, generation, Facts::default()).await?;
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
        ..Facts::default()
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
    let LakePlan {
        tables,
        policies,
        objects,
        tokens,
        tls,
    } = plan::plan(&validated, &inputs);
    facts.policies = policies_status(&policies);

    let may_adopt = ctx.allowlist.may_adopt(&validated.namespace);
    let tables = tables_step(clients.as_ref(), &tables, may_adopt).await;
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
    let failure = tables.failure.or(policies_check.1);
    // A migration copies into the tables before any workload is pointed at them.
    let ran = match (&failure, &validated.migration, clients.as_ref()) {
        (None, Some(spec), Some(clients)) => {
            Some(migration_step(ctx, cluster, &validated, spec, &clients.dynamodb).await)
        }
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
    let cut_over = migration.as_ref().is_none_or(|m| {
        matches!(
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
            if m.phase == MigrationPhase::CuttingOver && workloads.check.ok == Some(true) {
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
        .all(|c| c.ok == Some(true));
    // Once rolled out: the selftest Jobs (reported, not gating Ready).
    let self_test = if ready {
        self_test_step(ctx, &validated).await
    } else {
        None
    };
    let mut checks = vec![plan_valid, tables.check, policies_check.0, workloads.check];
    checks.extend(migration_check);
    checks.extend(self_test);
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

/// The roles' accounts: from their ARNs, else `GetRole`. Only for managed-or-reported IAM on
/// S3; anything else needs no lookup.
async fn dereference(
    validated: &ValidatedCluster,
    clients: Option<&crate::aws::AwsClients>,
    ctx: &Context,
) -> Result<IamInputs, ApplyError> {
    let mut inputs = IamInputs {
        oidc_provider: ctx.oidc_provider.clone(),
        ..Default::default()
    };
    let (Some(iam), Some(clients)) = (&validated.iam, clients) else {
        return Ok(inputs);
    };
    for (role, spec_role) in [
        (Role::Query, &iam.query_role),
        (Role::Metadata, &iam.metadata_role),
    ] {
        let account = match plan::iam::role_account(spec_role) {
            Some(account) => account.to_owned(),
            None => {
                let arn = apply::iam::role_arn(&clients.iam, spec_role).await?;
                apply::iam::account_of(&arn).ok_or_else(|| ApplyError::Aws {
                    operation: "GetRole",
                    resource: spec_role.clone(),
                    detail: format!("the role's ARN {arn:?} names no account"),
                })?
            }
        };
        match role {
            Role::Query => inputs.query_account = Some(account),
            Role::Metadata => inputs.metadata_account = Some(account),
        }
    }
    Ok(inputs)
}

/// What the tables step observed.
struct TablesOutcome {
    check: Check,
    applied: Vec<apply::tables::AppliedTable>,
    failure: Option<ApplyError>,
    /// False for a local lake: no tables, so none in status.
    has_tables: bool,
}

impl TablesOutcome {
    fn status(&self) -> Option<TablesStatus> {
        let table = |authority| {
            self.applied
                .iter()
                .find(|t| t.authority == authority)
                .map(|t| TableStatus {
                    name: t.name.clone(),
                    arn: t.arn.clone(),
                    adopted: t.adopted,
                })
        };
        (self.has_tables && !self.applied.is_empty()).then(|| TablesStatus {
            registry: table(lake_common::schema::Authority::Registry),
            manifest: table(lake_common::schema::Authority::Manifests),
        })
    }
}

async fn tables_step(
    clients: Option<&crate::aws::AwsClients>,
    tables: &[plan::DesiredTable],
    may_adopt: bool,
) -> TablesOutcome {
    let Some(clients) = clients.filter(|_| !tables.is_empty()) else {
        return TablesOutcome {
            check: Check::ok(
                TABLES_READY,
                "Embedded",
                "a local lake keeps its stores on disk",
            ),
            applied: Vec::new(),
            failure: None,
            has_tables: false,
        };
    };
    let mut applied = Vec::new();
    for table in tables {
        match apply::tables::ensure(&clients.dynamodb, table, may_adopt).await {
            Ok(t) => applied.push(t),
            Err(e) => {
                return TablesOutcome {
                    check: Check::failed(TABLES_READY, e.reason(), e.to_string()),
                    applied,
                    failure: Some(e),
                    has_tables: true,
                };
            }
        }
    }
    let names: Vec<&str> = applied.iter().map(|t| t.name.as_str()).collect();
    TablesOutcome {
        check: Check::ok(
            TABLES_READY,
            "Ready",
            format!("{} ready", names.join(" and ")),
        ),
        applied,
        failure: None,
        has_tables: true,
    }
}

/// Roles recorded in the previous status that the spec no longer names.
fn dropped_roles(validated: &ValidatedCluster, previous: Option<&PoliciesStatus>) -> Vec<String> {
    let current: Vec<String> = validated
        .iam
        .iter()
        .flat_map(|iam| [&iam.query_role, &iam.metadata_role])
        .map(|r| plan::iam::role_name(r).to_ascii_lowercase())
        .collect();
    let mut dropped: Vec<String> = previous
        .into_iter()
        .flat_map(|p| [&p.query, &p.metadata])
        .flatten()
        .map(|p| p.role.clone())
        .filter(|r| !current.contains(&plan::iam::role_name(r).to_ascii_lowercase()))
        .collect();
    dropped.dedup_by_key(|r| plan::iam::role_name(r).to_ascii_lowercase());
    dropped
}

/// Takes this cluster's policy (by its name) off roles the spec no longer names: a grant
/// written for a role must not outlive the role's place in the spec. Reads first, so a
/// converged cluster writes nothing.
async fn revoke(
    clients: &crate::aws::AwsClients,
    validated: &ValidatedCluster,
    roles: &[String],
) -> Result<(), ApplyError> {
    let name = plan::iam::policy_name(&validated.namespace, &validated.name);
    for role in roles {
        match apply::iam::current(&clients.iam, role, &name).await {
            Ok(Some(_)) => apply::iam::remove(&clients.iam, role, &name).await?,
            Ok(None) | Err(ApplyError::RoleNotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

async fn policies_step(
    validated: &ValidatedCluster,
    clients: Option<&crate::aws::AwsClients>,
    policies: &[plan::RolePolicy],
    previous: Option<&PoliciesStatus>,
) -> (Check, Option<ApplyError>) {
    if let Some(clients) = clients {
        let dropped = dropped_roles(validated, previous);
        if let Err(e) = revoke(clients, validated, &dropped).await {
            return (
                Check::failed(POLICIES_READY, e.reason(), e.to_string()),
                Some(e),
            );
        }
    }
    let (Some(iam), Some(clients)) = (&validated.iam, clients) else {
        return (
            Check::ok(
                POLICIES_READY,
                "NotConfigured",
                "no spec.iam: no policies to manage",
            ),
            None,
        );
    };
    if !iam.manage {
        return (
            Check::ok(
                POLICIES_READY,
                "NotManaged",
                "spec.iam.manage is false: the policies are reported in status for someone else to attach",
            ),
            None,
        );
    }
    for policy in policies {
        if let Err(e) = apply::iam::ensure(&clients.iam, policy).await {
            return (
                Check::failed(POLICIES_READY, e.reason(), e.to_string()),
                Some(e),
            );
        }
    }
    (
        Check::ok(
            POLICIES_READY,
            "Applied",
            "both inline policies are in place",
        ),
        None,
    )
}

fn policies_status(policies: &[plan::RolePolicy]) -> Option<PoliciesStatus> {
    let policy = |role| {
        policies
            .iter()
            .find(|p| p.role == role)
            .map(|p| PolicyStatus {
                role: p.role_arn.clone(),
                digest: p.digest.clone(),
                trust_policy: Some(p.trust_policy.to_string()),
            })
    };
    (!policies.is_empty()).then(|| PoliciesStatus {
        query: policy(Role::Query),
        metadata: policy(Role::Metadata),
    })
}

struct WorkloadsOutcome {
    check: Check,
    failure: Option<ApplyError>,
    /// The token Secrets, once they are known to exist.
    tokens: Option<TokensStatus>,
    /// The TLS Secret and CA ConfigMap, once they are known to exist.
    tls: Option<TlsStatus>,
}

/// What the workloads need that is drawn at random once and never applied again.
struct CreatedOnce<'a> {
    tokens: &'a [plan::TokenSecret],
    tls: Option<&'a plan::tls::TlsPlan>,
}

impl WorkloadsOutcome {
    fn waiting() -> Self {
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
    fn migrating(m: &MigrationStatus) -> Self {
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
    fn failed(e: ApplyError) -> Self {
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
fn must_create(cluster: &LakeCluster, recorded: impl Fn(&LakeClusterStatus) -> bool) -> bool {
    let Some(status) = &cluster.status else {
        return true;
    };
    let workloads_ready = status
        .conditions
        .iter()
        .any(|c| c.type_ == WORKLOADS_READY && c.status == "True");
    !recorded(status) || !workloads_ready
}

async fn workloads_step(
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
        if must_create(cluster, |s| s.tls.is_some()) {
            match apply::tls::ensure(&ctx.client, &validated.namespace, &validated.name, plan).await
            {
                Err(e) => return WorkloadsOutcome::failed(e),
                Ok(true) => {
                    tracing::info!(cluster = %validated.name, "TLS certificates issued");
                }
                Ok(false) => {}
            }
        }
        tls = Some(TlsStatus {
            secret: plan::tls::secret_name(validated),
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

/// Saves `status.migration` (merge patch, absent fields cleared) as the migration advances.
struct StatusCheckpoint {
    api: Api<LakeCluster>,
    name: String,
    /// The last status saved: what a pass that fails after it reports (not the stale one it
    /// started from).
    saved: Mutex<Option<MigrationStatus>>,
}

impl StatusCheckpoint {
    fn new(ctx: &Context, cluster: &LakeCluster) -> Self {
        Self {
            api: api(ctx, cluster),
            name: cluster.name_any(),
            saved: Mutex::default(),
        }
    }

    async fn write(&self, status: &MigrationStatus) -> Result<(), MigrationError> {
        let patch = json!({"status": {"migration": migration::patch_value(status)}});
        self.api
            .patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| MigrationError::Checkpoint {
                source: Box::new(e),
            })?;
        *self
            .saved
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(status.clone());
        Ok(())
    }

    fn saved(&self) -> Option<MigrationStatus> {
        self.saved
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl migration::Checkpoint for StatusCheckpoint {
    fn save<'a>(
        &'a self,
        status: &'a MigrationStatus,
    ) -> futures::future::BoxFuture<'a, Result<(), MigrationError>> {
        Box::pin(self.write(status))
    }
}

/// Advances the migration from the status the API server records (read afresh: the watch
/// cache may not hold the last pass's checkpoints yet), resuming where it stopped. On an error,
/// the status to report is the last one saved (or none: nothing changed).
async fn migration_step(
    ctx: &Context,
    cluster: &LakeCluster,
    validated: &ValidatedCluster,
    spec: &validate::Migration,
    dynamodb: &aws_sdk_dynamodb::Client,
) -> Result<MigrationStatus, (MigrationError, Option<MigrationStatus>)> {
    let current = api(ctx, cluster)
        .get_status(&cluster.name_any())
        .await
        .map_err(|e| {
            let e = MigrationError::Checkpoint {
                source: Box::new(e),
            };
            (e, None)
        })?;
    let previous = current.status.and_then(|s| s.migration).unwrap_or_default();
    let table = |authority| {
        plan::tables::tables(validated)
            .into_iter()
            .find(|t| t.authority == authority)
            .map(|t| t.name)
    };
    let (Some(registry), Some(manifest)) = (
        table(lake_common::schema::Authority::Registry),
        table(lake_common::schema::Authority::Manifests),
    ) else {
        return Ok(previous);
    };
    let tables = migration::Tables {
        source: spec.source_table.clone(),
        manifest,
        registry,
    };
    let consent = migration::Consent {
        approval: spec.approval,
        approved_digest: current
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(migration::APPROVE))
            .cloned(),
        lake: (validated.namespace.clone(), validated.name.clone()),
    };
    let checkpoint = StatusCheckpoint::new(ctx, cluster);
    migration::advance(dynamodb, &tables, &consent, previous, &checkpoint)
        .await
        .map_err(|e| (e, checkpoint.saved()))
}

fn migration_check(m: &MigrationStatus) -> Check {
    let message = m.message.clone().unwrap_or_default();
    match m.phase {
        MigrationPhase::Complete => Check::ok(MIGRATION_COMPLETE, "Complete", message),
        MigrationPhase::Failed => Check::failed(
            MIGRATION_COMPLETE,
            "MigrationFailed",
            format!(
                "failed in {}: {message}",
                m.failed_in.unwrap_or(MigrationPhase::Pending)
            ),
        ),
        phase => Check::failed(MIGRATION_COMPLETE, &phase.to_string(), message),
    }
}

/// Runs (once per configuration) and reads the selftest Jobs of both roles; `None` when the
/// cluster has none (a local lake).
async fn self_test_step(ctx: &Context, validated: &ValidatedCluster) -> Option<Check> {
    let jobs = plan::selftest::jobs(validated);
    if jobs.is_empty() {
        return None;
    }
    let mut outcomes = Vec::new();
    for (role, job) in jobs {
        let name = job.metadata.name.clone().unwrap_or_default();
        match apply::selftest::ensure(&ctx.client, &validated.namespace, &job).await {
            Ok(outcome) => outcomes.push((role, name, outcome)),
            Err(e) => return Some(Check::unknown(SELF_TEST_PASSED, e.reason(), e.to_string())),
        }
    }
    Some(match apply::selftest::summary(&outcomes) {
        (true, _, message) => Check::ok(SELF_TEST_PASSED, "Passed", message),
        (_, true, message) => Check::failed(SELF_TEST_PASSED, "SelfTestFailed", message),
        (_, _, message) => Check::unknown(SELF_TEST_PASSED, "Running", message),
    })
}

/// The checks of the current status (kept as they are while paused).
fn previous_checks(cluster: &LakeCluster) -> Vec<Check> {
    let previous = cluster
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let migrating = previous.iter().any(|c| c.type_ == MIGRATION_COMPLETE);
    [TABLES_READY, POLICIES_READY, WORKLOADS_READY]
        .into_iter()
        .chain(migrating.then_some(MIGRATION_COMPLETE))
        .map(|t| match previous.iter().find(|c| c.type_ == t) {
            Some(c) => Check {
                type_: t,
                ok: match c.status.as_str() {
                    "True" => Some(true),
                    "False" => Some(false),
                    _ => None,
                },
                reason: c.reason.clone(),
                message: c.message.clone(),
            },
            None => Check::unknown(t, "ReconciliationPaused", "not reconciled yet"),
        })
        .collect()
}

/// What a pass learned besides its conditions. Whatever it did not learn is absent from the
/// status it writes (the status is the truth of the last pass, not an accumulation).
#[derive(Default)]
struct Facts {
    endpoints: Option<Endpoints>,
    tables: Option<TablesStatus>,
    policies: Option<PoliciesStatus>,
    tokens: Option<TokensStatus>,
    tls: Option<TlsStatus>,
    /// `None`: kept as found (this pass did not run the migration).
    migration: Option<MigrationStatus>,
}

impl Facts {
    /// The facts of the current status, kept as they are (paused: nothing was observed).
    fn previous(cluster: &LakeCluster) -> Self {
        let status = cluster.status.clone().unwrap_or_default();
        Self {
            endpoints: status.endpoints,
            tables: status.tables,
            policies: status.policies,
            tokens: status.tokens,
            tls: status.tls,
            migration: status.migration,
        }
    }
}

/// An RFC 7386 merge patch turning `old` into `new`: members `new` lacks become `null` (a merge
/// patch of `new` alone would leave them in place).
fn merge_patch(old: &serde_json::Value, new: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut patch = serde_json::Map::new();
            for (k, v) in n {
                match o.get(k) {
                    Some(ov) if ov == v => {}
                    Some(ov) => {
                        patch.insert(k.clone(), merge_patch(ov, v));
                    }
                    None => {
                        patch.insert(k.clone(), v.clone());
                    }
                }
            }
            for k in o.keys().filter(|k| !n.contains_key(*k)) {
                patch.insert(k.clone(), Value::Null);
            }
            Value::Object(patch)
        }
        (_, n) => n.clone(),
    }
}

async fn write_status(
    ctx: &Context,
    cluster: &LakeCluster,
    checks: &[Check],
    generation: Option<i64>,
    facts: Facts,
) -> Result<(), ReconcileError> {
    let previous = cluster.status.clone().unwrap_or_default();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let conditions = status::conditions(&previous.conditions, checks, generation, &now);
    let next = LakeClusterStatus {
        observed_generation: generation,
        conditions,
        endpoints: facts.endpoints,
        tables: facts.tables,
        policies: facts.policies,
        tokens: facts.tokens,
        tls: facts.tls,
        migration: facts
            .migration
            .clone()
            .or_else(|| previous.migration.clone()),
    };
    let events: Vec<Condition> = status::transitions(&previous.conditions, &next.conditions)
        .into_iter()
        .cloned()
        .collect();
    if next == previous {
        return Ok(());
    }
    let to_json = |s: &LakeClusterStatus| serde_json::to_value(s).unwrap_or_default();
    let mut patch = merge_patch(&to_json(&previous), &to_json(&next));
    // The previous status comes from the watch cache, which may lag the last write: absent
    // top-level fields are sent as nulls whatever it says.
    if let Some(fields) = patch.as_object_mut() {
        for (field, absent) in [
            ("endpoints", next.endpoints.is_none()),
            ("tables", next.tables.is_none()),
            ("policies", next.policies.is_none()),
            ("tokens", next.tokens.is_none()),
            ("tls", next.tls.is_none()),
        ] {
            if absent {
                fields.insert(field.to_owned(), serde_json::Value::Null);
            }
        }
        // The checkpoints wrote it since the pass began: sent whole, with its absent fields.
        if let Some(m) = &next.migration {
            fields.insert("migration".to_owned(), migration::patch_value(m));
        }
    }
    api(ctx, cluster)
        .patch_status(
            &cluster.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": patch })),
        )
        .await
        .map_err(kube_error("status patch", cluster))?;
    for condition in events {
        let type_ = if condition.status == "False" {
            EventType::Warning
        } else {
            EventType::Normal
        };
        let note = format!(
            "{} is {}: {}",
            condition.type_, condition.status, condition.message
        );
        publish(ctx, cluster, type_, &condition.reason, note).await;
    }
    Ok(())
}

/// Publishes an Event on the LakeCluster; one that cannot be published never fails the pass.
async fn publish(
    ctx: &Context,
    cluster: &LakeCluster,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let event = Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note.chars().take(1000).collect()),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &cluster.object_ref(&())).await {
        tracing::warn!(error = %e, "could not publish an event");
    }
}

async fn ensure_finalizer(ctx: &Context, cluster: &LakeCluster) -> Result<(), ReconcileError> {
    if cluster.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(());
    }
    let mut finalizers = cluster.finalizers().to_vec();
    finalizers.push(FINALIZER.to_owned());
    // The resourceVersion makes this conditional: a concurrent change to the list conflicts
    // (and is retried) instead of being overwritten.
    let patch = json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": cluster.resource_version(),
    }});
    api(ctx, cluster)
        .patch(
            &cluster.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map_err(kube_error("finalizer add", cluster))?;
    Ok(())
}

/// Deletion: remove the cluster's inline policies (when managed), delete the tables that are
/// this cluster's when the deletion policy says so, then release the finalizer. Kubernetes
/// children go with their owner reference. Runs even when paused. An invalid spec keeps the
/// finalizer and says why: cleanup never silently skips.
async fn cleanup(cluster: &LakeCluster, ctx: &Context) -> Result<Action, ReconcileError> {
    if !cluster.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    let validated = match validate::validate(cluster) {
        Ok(v) => v,
        Err(errors) => {
            let message = format!(
                "deletion is blocked: cleanup needs a valid spec to know which policies and \
                 tables are this cluster's; fix the spec (it can still be edited), or remove the \
                 finalizer {FINALIZER} by hand to leave every table and policy in place. {}",
                errors
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            );
            let checks = [
                Check::failed(PLAN_VALID, "CleanupBlocked", message),
                Check::unknown(TABLES_READY, "Deleting", "the LakeCluster is being deleted"),
                Check::unknown(
                    POLICIES_READY,
                    "Deleting",
                    "the LakeCluster is being deleted",
                ),
                Check::unknown(
                    WORKLOADS_READY,
                    "Deleting",
                    "the LakeCluster is being deleted",
                ),
            ];
            write_status(
                ctx,
                cluster,
                &checks,
                cluster.meta().generation,
                Facts::previous(cluster),
            )
            .await?;
            return Ok(Action::await_change());
        }
    };
    if let (Storage::S3(_), Some(aws)) = (validated.authority.storage(), validated.authority.aws())
    {
        let clients = ctx.aws.clients(&aws.region).await;
        // Only the policy this cluster wrote (by its name) comes off: the spec's roles when it
        // manages them, and roles recorded in status that the spec no longer names.
        let previous = cluster.status.as_ref().and_then(|s| s.policies.as_ref());
        let mut roles = dropped_roles(&validated, previous);
        if let Some(iam) = validated.iam.as_ref().filter(|i| i.manage) {
            roles.extend([iam.query_role.clone(), iam.metadata_role.clone()]);
        }
        // IAM role names are case-insensitive; a role named by both spec and status once.
        roles.sort_by_key(|r| plan::iam::role_name(r).to_ascii_lowercase());
        roles.dedup_by_key(|r| plan::iam::role_name(r).to_ascii_lowercase());
        let name = plan::iam::policy_name(&validated.namespace, &validated.name);
        for role in roles {
            match apply::iam::remove(&clients.iam, &role, &name).await {
                Ok(()) | Err(ApplyError::RoleNotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if validated.deletion_policy == crate::crd::DeletionPolicy::Delete {
            for table in plan::tables::tables(&validated) {
                let outcome = apply::tables::delete_owned(
                    &clients.dynamodb,
                    &table,
                    validated.delete_adopted_tables,
                )
                .await?;
                if let apply::tables::TableDeletion::Kept { reason } = outcome {
                    tracing::warn!(cluster = %validated.name, table = %table.name, %reason, "table kept");
                    let note = format!("table {} was not deleted: {reason}", table.name);
                    publish(ctx, cluster, EventType::Warning, "TableKept", note).await;
                }
            }
        }
    }
    let finalizers: Vec<String> = cluster
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    api(ctx, cluster)
        .patch(
            &cluster.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": finalizers}})),
        )
        .await
        .map_err(kube_error("finalizer removal", cluster))?;
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::merge_patch;
    use serde_json::json;

    #[test]
    fn merge_patches_remove_what_the_new_status_lacks() {
        let old = json!({"tables": {"registry": {"name": "r"}}, "policies": {"query": {}},
                         "conditions": [1, 2], "endpoints": {"query": "q"}});
        let new = json!({"conditions": [1], "endpoints": {"query": "q"}});
        assert_eq!(
            merge_patch(&old, &new),
            json!({"tables": null, "policies": null, "conditions": [1]})
        );
        let nested = merge_patch(
            &json!({"tables": {"registry": {"name": "r"}, "manifest": {"name": "m"}}}),
            &json!({"tables": {"registry": {"name": "r"}}}),
        );
        assert_eq!(nested, json!({"tables": {"manifest": null}}));
    }
}
