//! Status last: the conditions and facts of a pass, written only when they changed, with Events on transitions.

use super::*;

/// The checks of the current status (kept as they are while paused).
pub(super) fn previous_checks(cluster: &LakeCluster) -> Vec<Check> {
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
                status: c.status,
                reason: c.reason.clone(),
                message: c.message.clone(),
            },
            None => Check::unknown(t, "ReconciliationPaused", "not reconciled yet"),
        })
        .collect()
}

/// The policies the cluster's status records (see [`Facts::unobserved`]).
pub(super) fn recorded_policies(cluster: &LakeCluster) -> Option<PoliciesStatus> {
    cluster.status.as_ref().and_then(|s| s.policies.clone())
}

/// What a pass learned besides its conditions. Whatever it did not learn is absent from the
/// status it writes (the status is the truth of the last pass, not an accumulation).
#[derive(Default)]
pub(super) struct Facts {
    pub(super) endpoints: Option<Endpoints>,
    pub(super) tables: Option<TablesStatus>,
    pub(super) policies: Option<PoliciesStatus>,
    pub(super) tokens: Option<TokensStatus>,
    pub(super) tls: Option<TlsStatus>,
    /// `None`: kept as found (this pass did not run the migration).
    pub(super) migration: Option<MigrationStatus>,
    pub(super) maintenance: Option<MaintenanceStatus>,
}

impl Facts {
    /// What a pass that observed nothing reports: only the policies the previous status
    /// recorded. They are the operator's record of the grants it wrote, which it revokes from
    /// roles the spec no longer names: dropping it before they were revoked would leave them
    /// in place for good.
    pub(super) fn unobserved(cluster: &LakeCluster) -> Self {
        Self {
            policies: recorded_policies(cluster),
            ..Self::default()
        }
    }

    /// The facts of the current status, kept as they are (paused: nothing was observed).
    pub(super) fn previous(cluster: &LakeCluster) -> Self {
        let status = cluster.status.clone().unwrap_or_default();
        Self {
            endpoints: status.endpoints,
            tables: status.tables,
            policies: status.policies,
            tokens: status.tokens,
            tls: status.tls,
            migration: status.migration,
            maintenance: status.maintenance,
        }
    }
}

/// An RFC 7386 merge patch turning `old` into `new`: members `new` lacks become `null` (a merge
/// patch of `new` alone would leave them in place).
pub(super) fn merge_patch(old: &serde_json::Value, new: &serde_json::Value) -> serde_json::Value {
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

pub(super) async fn write_status(
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
        maintenance: facts.maintenance,
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
            ("maintenance", next.maintenance.is_none()),
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
        let type_ = if condition.status == ConditionStatus::False {
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
pub(super) async fn publish(
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

#[cfg(test)]
mod tests {
    use super::merge_patch;
    use serde_json::json;

    #[test]
    pub(super) fn merge_patches_remove_what_the_new_status_lacks() {
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
