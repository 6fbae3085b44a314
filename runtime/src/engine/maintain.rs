//! The write engine's maintenance primitives: compaction, removal of old versions, and the
//! manifest rows of removed versions. What to remove, and when, is `crate::maintain`'s decision.

use lance::dataset::cleanup::CleanupPolicy;
use lance::dataset::optimize::{CompactionOptions, compact_files};
use lance::index::DatasetIndexExt;
use lance_index::optimize::OptimizeOptions;

use super::{Engine, EngineError, TableRef, WriteEngine};
use crate::manifest::Renewed;

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
    /// Files Lance could not delete (they stay, unreferenced, until a later pass after a week):
    /// a deleted row may still be in one.
    pub failed_deletes: u64,
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

/// Lance's own indices (fragment reuse, MemWAL) are kept by Lance, not by us.
fn is_system_index(name: &str) -> bool {
    name.starts_with("__")
}

impl WriteEngine {
    /// The keys of the table's Lance configuration that turn on Lance's own auto-cleanup (set
    /// by another writer, say pylance): with them, every commit — a compaction's too — may
    /// remove versions outside lake's retention and grace, leaving their manifest rows.
    pub async fn auto_cleanup_keys(&self, table: &TableRef) -> Result<Vec<String>, EngineError> {
        let dataset = self.engine.open(table, None).await?;
        let mut keys: Vec<String> = dataset
            .config()
            .keys()
            .filter(|k| k.starts_with("lance.auto_cleanup."))
            .cloned()
            .collect();
        keys.sort();
        Ok(keys)
    }

    /// Brings up to date every index of `table` with at least `unindexed_rows_threshold` rows it
    /// does not cover yet (appended since it was built), in one commit; returns their names.
    /// Unindexed rows are still found (by scanning them): this is about speed, not answers.
    pub async fn optimize_indices(
        &self,
        table: &TableRef,
        unindexed_rows_threshold: u64,
    ) -> Result<Vec<String>, EngineError> {
        let mut dataset = self.engine.open(table, None).await?;
        let indices = dataset
            .load_indices()
            .await
            .map_err(Engine::lance_err("list the indices of", table))?;
        let mut names: Vec<String> = indices
            .iter()
            .map(|i| i.name.clone())
            .filter(|n| !is_system_index(n))
            .collect();
        names.sort();
        names.dedup();
        let mut stale = Vec::new();
        for name in names {
            let stats = dataset
                .index_statistics(&name)
                .await
                .map_err(Engine::lance_err("read index statistics of", table))?;
            let unindexed = serde_json::from_str::<serde_json::Value>(&stats)
                .ok()
                .and_then(|s| {
                    s.get("num_unindexed_rows")
                        .and_then(serde_json::Value::as_u64)
                })
                .unwrap_or(0);
            if unindexed > 0 && unindexed >= unindexed_rows_threshold {
                stale.push(name);
            }
        }
        if stale.is_empty() {
            return Ok(stale);
        }
        let mut options = OptimizeOptions::append();
        options.index_names = Some(stale.clone());
        dataset
            .optimize_indices(&options)
            .await
            .map_err(Engine::lance_err("optimize the indices of", table))?;
        Ok(stale)
    }

    /// Rewrites small fragments into fragments of up to `target_rows_per_fragment` rows, and
    /// every fragment holding a deleted row (so deleted rows leave the data files), in one
    /// commit. Not under the table's commit lock: writes go on meanwhile, and Lance rebases the
    /// compaction on them; against a `DELETE` of the same fragments whichever commits second
    /// fails ([`is_conflict`]: the compaction is skipped; a delete is planned again).
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

    /// The table's finished versions (a listing) with their commit times: from the manifest
    /// rows, which say when they were written (one query), and for rows that do not say (those
    /// of Lance's own writers) from the manifests, read a few at a time.
    pub(super) async fn version_times(
        &self,
        table: &TableRef,
        dataset: &lance::Dataset,
    ) -> Result<Vec<VersionTime>, EngineError> {
        let finished = dataset
            .version_refs()
            .await
            .map_err(Engine::lance_err("list versions of", table))?;
        let rows: std::collections::HashMap<u64, Option<i64>> = self
            .manifests
            .committed_times(&self.engine.warehouse.manifest_base_uri(table))
            .await
            .map_err(EngineError::manifests(table))?
            .into_iter()
            .collect();
        let mut times: Vec<VersionTime> = finished
            .iter()
            .filter_map(|v| {
                let committed_ms = rows.get(&v.version).copied().flatten()?;
                Some(VersionTime {
                    version: v.version,
                    committed_ms,
                })
            })
            .collect();
        if times.len() < finished.len() {
            // Some rows do not say (Lance's own writers', or none at all): every manifest is read,
            // as Lance lists them (reading one through the commit handler would write a missing
            // row, stamped now).
            times = dataset
                .versions()
                .await
                .map_err(Engine::lance_err("list versions of", table))?
                .iter()
                .map(|v| VersionTime {
                    version: v.version,
                    committed_ms: rows
                        .get(&v.version)
                        .copied()
                        .flatten()
                        .unwrap_or_else(|| v.timestamp.timestamp_millis()),
                })
                .collect();
        }
        Ok(times)
    }

    /// Removes the versions `decide` picks from the table's versions (it returns the first
    /// version to keep; never past the latest), the files only they reference, and their
    /// manifest rows. Never the latest version, never a tagged one (a tag on a version to remove
    /// fails the removal, naming it, before anything is deleted). Files no manifest references
    /// are left alone unless a week old (Lance's rule: they may belong to a write in progress).
    ///
    /// Under the table's commit lock: a DROP and CREATE of the same name in this process cannot
    /// interleave with it. Only versions committed before the first one kept are removed (by
    /// number *and* commit time), so a table created again under the name since the versions
    /// were listed keeps every version. Only rows of versions removed here are deleted.
    ///
    /// Across processes, `lease` (the table's) keeps a `DROP TABLE` out: it is checked before
    /// files are removed and before rows are.
    pub async fn remove_versions(
        &self,
        table: &TableRef,
        lease: &Renewed,
        decide: impl FnOnce(&[VersionTime]) -> Option<u64>,
    ) -> Result<Removal, EngineError> {
        let _guard = self.lock(table).await;
        let dataset = self.engine.open(table, None).await?;
        let listed = self.version_times(table, &dataset).await?;
        let latest = dataset.version().version;
        let Some(cutoff) = decide(&listed).map(|c| c.min(latest)) else {
            return Ok(Removal::default());
        };
        let Some(first_kept) = listed.iter().find(|v| v.version >= cutoff).copied() else {
            return Ok(Removal::default());
        };
        let doomed: Vec<u64> = listed
            .iter()
            .filter(|v| v.version < cutoff && v.committed_ms < first_kept.committed_ms)
            .map(|v| v.version)
            .collect();
        if doomed.is_empty() {
            return Ok(Removal::default());
        }
        // Lance checks each manifest against this again, by the manifests' own commit times. A
        // row is written after its manifest: a manifest newer than its row is another table's
        // (created again under the name since the listing) or a clock behind; nothing goes.
        let first_kept_at = dataset
            .checkout_version(first_kept.version)
            .await
            .map_err(Engine::lance_err("read a version of", table))?
            .version()
            .timestamp;
        if first_kept_at.timestamp_millis() > first_kept.committed_ms {
            tracing::warn!(%table, version = first_kept.version, "a manifest is newer than its row; no version removed");
            return Ok(Removal::default());
        }
        let policy = CleanupPolicy {
            before_version: Some(cutoff),
            before_timestamp: Some(first_kept_at),
            versions: Some(doomed.iter().copied().collect()),
            error_if_tagged_old_versions: true,
            ..Default::default()
        };
        lease.check().map_err(|e| EngineError::lease(table, e))?;
        let stats = dataset
            .cleanup(policy)
            .execute()
            .await
            .map_err(Engine::lance_err("remove old versions of", table))?;
        let mut removal = Removal {
            versions_removed: stats.old_versions,
            bytes_removed: stats.bytes_removed,
            files_removed: stats.data_files_removed
                + stats.deletion_files_removed
                + stats.index_files_removed
                + stats.transaction_files_removed,
            failed_deletes: stats.failed_deletes,
            manifest_rows_removed: 0,
        };
        // Lance forgets a version only through a store that mints identities (ours does not):
        // the rows of the versions removed here (listed before, gone now) go here.
        // A listing only: reading every kept manifest again is not needed to know which remain.
        let still_listed: std::collections::HashSet<u64> = dataset
            .version_refs()
            .await
            .map_err(Engine::lance_err("list versions of", table))?
            .into_iter()
            .map(|v| v.version)
            .collect();
        let removed: Vec<u64> = doomed
            .into_iter()
            .filter(|v| !still_listed.contains(v))
            .collect();
        lease.check().map_err(|e| EngineError::lease(table, e))?;
        removal.manifest_rows_removed = self
            .manifests
            .delete_versions(&self.engine.warehouse.manifest_base_uri(table), &removed)
            .await
            .map_err(EngineError::manifests(table))? as u64;
        Ok(removal)
    }
}
