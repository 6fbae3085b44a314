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

use crate::apply::{self, ApplyError};
use crate::aws::AwsPool;
use crate::crd::{
    Condition, Endpoints, LakeCluster, LakeClusterStatus, PoliciesStatus, PolicyStatus,
    TableStatus, TablesStatus,
};
use crate::metrics::Metrics;
use crate::plan::{self, IamInputs, LakePlan};
use crate::render::{endpoint, workload_name};
use crate::status::{self, Check, PLAN_VALID, POLICIES_READY, TABLES_READY, WORKLOADS_READY};
use crate::validate::{self, ValidatedCluster};

pub const FINALIZER: &str = "lake.dev/cleanup";
/// How often a converged cluster is checked for drift.
const RESYNC: Duration = Duration::from_secs(300);
/// How soon a cluster that is still rolling out is looked at again.
const PROGRESS: Duration = Duration::from_secs(15);
const BACKOFF_BASE: Duration = Duration::from_secs(2);
const BACKOFF_MAX: Duration = Duration::from_secs(300);

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error(transparent)]
    Apply(#[from] ApplyError),
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

async fn apply_cluster(cluster: &LakeCluster, ctx: &Context) -> Result<Action, ReconcileError> {
    let generation = cluster.meta().generation;
    let validated = match validate::validate(cluster) {
        Ok(v) => v,
        Err(errors) => {
            let message = errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ");
            let checks = [
                Check::failed(PLAN_VALID, "InvalidSpec", message),
                Check::unknown(TABLES_READY, "PlanInvalid", "the spec is invalid"),
                Check::unknown(POLICIES_READY, "PlanInvalid", "the spec is invalid"),
                Check::unknown(WORKLOADS_READY, "PlanInvalid", "the spec is invalid"),
            ];
            write_status(ctx, cluster, &checks, generation, None).await?;
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
        write_status(ctx, cluster, &checks, generation, None).await?;
        return Ok(Action::await_change());
    }

    ensure_finalizer(ctx, cluster).await?;

    let clients = match (validated.authority.storage(), validated.authority.aws()) {
        (Storage::S3(_), Some(aws)) => Some(ctx.aws.clients(&aws.region).await),
        _ => None,
    };

    // Dereference: the roles' accounts (their ARNs carry them, else GetRole).
    let mut inputs = IamInputs {
        oidc_provider: ctx.oidc_provider.clone(),
        ..Default::default()
    };
    let mut policy_check = None;
    if let (Some(iam), Some(clients)) = (&validated.iam, &clients) {
        for (role, spec_role) in [
            (Role::Query, &iam.query_role),
            (Role::Metadata, &iam.metadata_role),
        ] {
            let account = match plan::iam::role_account(spec_role) {
                Some(account) => Ok(account.to_owned()),
                None => apply::iam::role_arn(&clients.iam, spec_role)
                    .await
                    .map(|arn| apply::iam::account_of(&arn).unwrap_or_default()),
            };
            match (account, role) {
                (Ok(a), Role::Query) => inputs.query_account = Some(a),
                (Ok(a), Role::Metadata) => inputs.metadata_account = Some(a),
                (Err(e), _) => {
                    policy_check = Some(Check::failed(POLICIES_READY, e.reason(), e.to_string()))
                }
            }
        }
    }
    let LakePlan {
        tables,
        policies,
        objects,
    } = plan::plan(&validated, &inputs);

    // Tables.
    let mut applied_tables = Vec::new();
    let mut failure: Option<ApplyError> = None;
    let tables_check = match &clients {
        None => Check::ok(
            TABLES_READY,
            "Embedded",
            "a local lake keeps its stores on disk",
        ),
        Some(clients) => {
            let mut check = Check::ok(TABLES_READY, "Ready", "");
            for table in &tables {
                match apply::tables::ensure(&clients.dynamodb, table).await {
                    Ok(applied) => applied_tables.push(applied),
                    Err(e) => {
                        check = Check::failed(TABLES_READY, e.reason(), e.to_string());
                        failure = Some(e);
                        break;
                    }
                }
            }
            if check.ok == Some(true) {
                check.message = format!(
                    "{} ready",
                    applied_tables
                        .iter()
                        .map(|t| t.name.as_str())
                        .collect::<Vec<_>>()
                        .join(" and ")
                );
            }
            check
        }
    };

    // Policies.
    let policies_check = match (&validated.iam, &clients, policy_check) {
        (_, _, Some(failed)) => failed,
        (None, _, _) | (_, None, _) => Check::ok(
            POLICIES_READY,
            "NotConfigured",
            "no spec.iam: no policies to manage",
        ),
        (Some(iam), Some(_), None) if !iam.manage => Check::ok(
            POLICIES_READY,
            "NotManaged",
            "spec.iam.manage is false: the policies are reported in status for someone else to attach",
        ),
        (Some(_), Some(clients), None) => {
            let mut check = Check::ok(
                POLICIES_READY,
                "Applied",
                "both inline policies are in place",
            );
            if failure.is_none() {
                for policy in &policies {
                    if let Err(e) = apply::iam::ensure(&clients.iam, policy).await {
                        check = Check::failed(POLICIES_READY, e.reason(), e.to_string());
                        failure = Some(e);
                        break;
                    }
                }
            } else {
                check = Check::unknown(POLICIES_READY, "Waiting", "waiting for the tables");
            }
            check
        }
    };

    // Workloads: only once the stores they point at exist.
    let workloads_check = if failure.is_some() {
        Check::unknown(
            WORKLOADS_READY,
            "Waiting",
            "waiting for tables and policies",
        )
    } else {
        match apply::workloads::ensure(&ctx.client, &validated.namespace, &objects).await {
            Err(e) => {
                let check = Check::failed(WORKLOADS_READY, e.reason(), e.to_string());
                failure = Some(e);
                check
            }
            Ok(written) => {
                if !written.is_empty() {
                    tracing::info!(cluster = %validated.name, ?written, "applied");
                }
                let mut notes = Vec::new();
                let mut all_ready = true;
                for role in [Role::Query, Role::Metadata] {
                    let (ready, note) = apply::workloads::rollout(
                        &ctx.client,
                        &validated.namespace,
                        &workload_name(&validated, role),
                    )
                    .await?;
                    all_ready &= ready;
                    notes.push(note);
                }
                if all_ready {
                    Check::ok(WORKLOADS_READY, "Available", notes.join("; "))
                } else {
                    Check::failed(WORKLOADS_READY, "RollingOut", notes.join("; "))
                }
            }
        }
    };

    let ready = [&tables_check, &policies_check, &workloads_check]
        .iter()
        .all(|c| c.ok == Some(true));
    let extra = StatusExtra {
        validated: &validated,
        tables: &applied_tables,
        policies: &policies,
    };
    write_status(
        ctx,
        cluster,
        &[plan_valid, tables_check, policies_check, workloads_check],
        generation,
        Some(extra),
    )
    .await?;
    match failure {
        Some(e) if e.is_terminal() => Ok(Action::await_change()),
        Some(e) => Err(e.into()),
        None if ready => Ok(Action::requeue(RESYNC)),
        None => Ok(Action::requeue(PROGRESS)),
    }
}

/// The checks of the current status (kept as they are while paused).
fn previous_checks(cluster: &LakeCluster) -> Vec<Check> {
    let previous = cluster
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    [TABLES_READY, POLICIES_READY, WORKLOADS_READY]
        .into_iter()
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

struct StatusExtra<'a> {
    validated: &'a ValidatedCluster,
    tables: &'a [apply::tables::AppliedTable],
    policies: &'a [plan::RolePolicy],
}

async fn write_status(
    ctx: &Context,
    cluster: &LakeCluster,
    checks: &[Check],
    generation: Option<i64>,
    extra: Option<StatusExtra<'_>>,
) -> Result<(), ReconcileError> {
    let previous = cluster.status.clone().unwrap_or_default();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let conditions = status::conditions(&previous.conditions, checks, generation, &now);
    let mut next = LakeClusterStatus {
        observed_generation: generation,
        conditions,
        ..previous.clone()
    };
    if let Some(extra) = extra {
        next.endpoints = Some(Endpoints {
            query: Some(endpoint(extra.validated, Role::Query)),
            metadata: Some(endpoint(extra.validated, Role::Metadata)),
        });
        let table = |authority| {
            extra
                .tables
                .iter()
                .find(|t| t.authority == authority)
                .map(|t| TableStatus {
                    name: t.name.clone(),
                    arn: t.arn.clone(),
                    adopted: t.adopted,
                })
        };
        if !extra.tables.is_empty() {
            next.tables = Some(TablesStatus {
                registry: table(lake_common::schema::Authority::Registry),
                manifest: table(lake_common::schema::Authority::Manifests),
            });
        }
        let policy = |role| {
            extra
                .policies
                .iter()
                .find(|p| p.role == role)
                .map(|p| PolicyStatus {
                    role: p.role_arn.clone(),
                    digest: p.digest.clone(),
                    trust_policy: Some(p.trust_policy.to_string()),
                })
        };
        if !extra.policies.is_empty() {
            next.policies = Some(PoliciesStatus {
                query: policy(Role::Query),
                metadata: policy(Role::Metadata),
            });
        }
    }
    let events: Vec<Condition> = status::transitions(&previous.conditions, &next.conditions)
        .into_iter()
        .cloned()
        .collect();
    if next == previous {
        return Ok(());
    }
    api(ctx, cluster)
        .patch_status(
            &cluster.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": next })),
        )
        .await
        .map_err(kube_error("status patch", cluster))?;
    let reference = cluster.object_ref(&());
    for condition in events {
        let event = Event {
            type_: if condition.status == "False" {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: condition.reason.clone(),
            note: Some(
                format!(
                    "{} is {}: {}",
                    condition.type_, condition.status, condition.message
                )
                .chars()
                .take(1000)
                .collect(),
            ),
            action: "Reconcile".into(),
            secondary: None,
        };
        // An event that cannot be published must not fail the reconcile.
        if let Err(e) = ctx.recorder.publish(&event, &reference).await {
            tracing::warn!(error = %e, "could not publish an event");
        }
    }
    Ok(())
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

/// Deletion: remove the cluster's inline policies (when managed), delete the tables when the
/// deletion policy says so, then release the finalizer. Kubernetes children go with their
/// owner reference. Runs even when paused.
async fn cleanup(cluster: &LakeCluster, ctx: &Context) -> Result<Action, ReconcileError> {
    if !cluster.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    if let Ok(validated) = validate::validate(cluster)
        && let (Storage::S3(_), Some(aws)) =
            (validated.authority.storage(), validated.authority.aws())
    {
        let clients = ctx.aws.clients(&aws.region).await;
        if let Some(iam) = validated.iam.as_ref().filter(|i| i.manage) {
            let policy_name = format!("lake-{}-{}", validated.namespace, validated.name);
            for role in [&iam.query_role, &iam.metadata_role] {
                match apply::iam::remove(&clients.iam, role, &policy_name).await {
                    Ok(()) | Err(ApplyError::RoleNotFound { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        if validated.deletion_policy == crate::crd::DeletionPolicy::Delete {
            for table in plan::tables::tables(&validated) {
                apply::tables::delete(&clients.dynamodb, &table.name).await?;
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
