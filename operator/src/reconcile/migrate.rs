//! The migration step (`spec.migration`): advancing `crate::migration` from the status the API server records, its checkpoints saved as it goes.

use super::*;

/// Saves `status.migration` (merge patch, absent fields cleared) as the migration advances.
pub(super) struct StatusCheckpoint {
    pub(super) api: Api<LakeCluster>,
    pub(super) name: String,
    /// The last status saved: what a pass that fails after it reports (not the stale one it
    /// started from).
    pub(super) saved: Mutex<Option<MigrationStatus>>,
}

impl StatusCheckpoint {
    pub(super) fn new(ctx: &Context, cluster: &LakeCluster) -> Self {
        Self {
            api: api(ctx, cluster),
            name: cluster.name_any(),
            saved: Mutex::default(),
        }
    }

    pub(super) async fn write(&self, status: &MigrationStatus) -> Result<(), MigrationError> {
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

    pub(super) fn saved(&self) -> Option<MigrationStatus> {
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
pub(super) async fn migration_step(
    ctx: &Context,
    cluster: &LakeCluster,
    validated: &ValidatedCluster,
    spec: &validate::Migration,
    applied: &[apply::tables::AppliedTable],
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
    // The tables the tables step just made sure of.
    let table = |authority| {
        applied
            .iter()
            .find(|t| t.authority == authority)
            .map(|t| t.name.clone())
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

pub(super) fn migration_check(m: &MigrationStatus) -> Check {
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
