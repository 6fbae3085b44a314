//! The write engine's maintenance primitives: compaction, removal of old versions, and the
//! manifest rows of removed versions. What to remove, and when, is `crate::maintain`'s decision.

use lance::dataset::cleanup::CleanupPolicy;
use lance::dataset::optimize::{CompactionOptions, compact_files};

use super::{Engine, EngineError, TableRef, WriteEngine};

/// A version and when it was committed (milliseconds since the Unix epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VersionTime {
    pub version: u64,
    pub committed_ms: i64,
}

/// What one compaction did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Compaction {
    pub fragments_before: usize,
    pub fragments_after: usize,
    /// Rows that were marked deleted and are now gone from the data files.
    pub deleted_rows_erased: u64,
    /// The version the compaction committed (`None`: nothing needed compacting).
    pub version: Option<u64>,
}

/// What one removal of old versions did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Removal {
    pub versions_removed: u64,
    pub bytes_removed: u64,
    pub files_removed: u64,
    pub manifest_rows_removed: u64,
}

/// Whether a Lance error is a commit that lost to another writer's (the other writer won; the
/// next pass tries again).
pub fn is_conflict(e: &EngineError) -> bool {
    matches!(
        e,
        EngineError::Lance {
            source: lance::Error::CommitConflict { .. }
                | lance::Error::RetryableCommitConflict { .. }
                | lance::Error::IncompatibleTransaction { .. }
                | lance::Error::TooMuchWriteContention { .. },
            ..
        }
    )
}

impl WriteEngine {
    /// The table's versions with their commit times, oldest first.
    pub async fn version_times(&self, table: &TableRef) -> Result<Vec<VersionTime>, EngineError> {
        let dataset = self.engine.open(table, None).await?;
        let versions = dataset
            .versions()
            .await
            .map_err(Engine::lance_err("list versions of", table))?;
        Ok(versions
            .into_iter()
            .map(|v| VersionTime {
                version: v.version,
                committed_ms: v.timestamp.timestamp_millis(),
            })
            .collect())
    }

    /// Rewrites small fragments into fragments of up to `target_rows_per_fragment` rows, and
    /// every fragment holding a deleted row (so deleted rows leave the data files), in one
    /// commit. Not under the table's commit lock: writes go on meanwhile, and Lance rebases the
    /// compaction on them (a write that touched the same fragments wins; see [`is_conflict`]).
    pub async fn compact_fragments(
        &self,
        table: &TableRef,
        target_rows_per_fragment: usize,
    ) -> Result<Compaction, EngineError> {
        let mut dataset = self.engine.open(table, None).await?;
        let fragments_before = dataset.count_fragments();
        let deleted_before = dataset
            .count_deleted_rows()
            .await
            .map_err(Engine::lance_err("count deleted rows of", table))?;
        let read_version = dataset.version().version;
        let options = CompactionOptions {
            target_rows_per_fragment,
            materialize_deletions: true,
            // Every fragment with a deleted row: deletion is erasure, not a mark.
            materialize_deletions_threshold: 0.0,
            ..Default::default()
        };
        compact_files(&mut dataset, options, None)
            .await
            .map_err(Engine::lance_err("compact", table))?;
        let version = dataset.version().version;
        if version == read_version {
            return Ok(Compaction {
                fragments_before,
                fragments_after: fragments_before,
                ..Default::default()
            });
        }
        let deleted_after = dataset
            .count_deleted_rows()
            .await
            .map_err(Engine::lance_err("count deleted rows of", table))?;
        Ok(Compaction {
            fragments_before,
            fragments_after: dataset.count_fragments(),
            deleted_rows_erased: deleted_before.saturating_sub(deleted_after) as u64,
            version: Some(version),
        })
    }

    /// Removes every version before `cutoff` (never the latest, never a tagged one: a tag on
    /// such a version fails the removal, naming it), the files only they reference, and then
    /// their manifest rows. Files no manifest references are left alone unless a week old
    /// (Lance's rule: they may belong to a write in progress).
    pub async fn remove_versions_before(
        &self,
        table: &TableRef,
        cutoff: u64,
    ) -> Result<Removal, EngineError> {
        let dataset = self.engine.open(table, None).await?;
        let policy = CleanupPolicy {
            before_version: Some(cutoff),
            error_if_tagged_old_versions: true,
            ..Default::default()
        };
        let stats = dataset
            .cleanup(policy)
            .execute()
            .await
            .map_err(Engine::lance_err("remove old versions of", table))?;
        // Lance forgets a version only through a store that mints identities (ours does not):
        // the rows of removed versions go here, below the oldest manifest left.
        let oldest = dataset
            .versions()
            .await
            .map_err(Engine::lance_err("list versions of", table))?
            .first()
            .map_or(dataset.version().version, |v| v.version);
        let rows = self
            .manifests
            .delete_versions_below(&self.engine.warehouse.manifest_base_uri(table), oldest)
            .await
            .map_err(|source| EngineError::Manifests {
                table: table.clone(),
                source,
            })?;
        Ok(Removal {
            versions_removed: stats.old_versions,
            bytes_removed: stats.bytes_removed,
            files_removed: stats.data_files_removed
                + stats.deletion_files_removed
                + stats.index_files_removed
                + stats.transaction_files_removed,
            manifest_rows_removed: rows as u64,
        })
    }
}
