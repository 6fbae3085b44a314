//! Deletion behind the finalizer: the cluster's policies off its roles, its tables by the deletion policy, then the finalizer released.

use super::policies::dropped_roles;
use super::report::publish;
use super::*;

pub(super) async fn ensure_finalizer(
    ctx: &Context,
    cluster: &LakeCluster,
) -> Result<(), ReconcileError> {
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
pub(super) async fn cleanup(
    cluster: &LakeCluster,
    ctx: &Context,
) -> Result<Action, ReconcileError> {
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
            roles.extend(iam.named().into_iter().map(|(_, r)| r.clone()));
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
                // A name outside the allowlist (set after creation, say) is neither looked up
                // nor deleted: its Event must not tell the tenant whether it exists.
                if !ctx
                    .allowlist
                    .admits_table(&validated.namespace, table.name.as_str())
                {
                    let note = format!(
                        "table {} was not deleted: it is outside what the operator's allowlist \
                         grants this namespace",
                        table.name
                    );
                    publish(ctx, cluster, EventType::Warning, "TableKept", note).await;
                    continue;
                }
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
