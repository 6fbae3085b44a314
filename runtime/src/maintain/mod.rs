//! Table maintenance, the fourth authority: one pass over every table compacts small fragments
//! and every fragment holding deleted rows (a DELETE becomes erasure), brings up to date the
//! indices that lag behind, then removes the versions outside the retention with the files only
//! they use and their manifest rows.
//!
//! Each table is its own unit: one that fails is reported and the pass goes on. A compaction
//! that loses to a concurrent `DELETE` of the same fragments is skipped (the next pass
//! compacts); a `DELETE` that loses to it is planned again (`WriteEngine::delete`). Writes go on
//! during a pass: Lance commits the compaction on top of them, and removal never touches the
//! latest version or a file no manifest references yet.
//!
//! A pass holds the maintenance lease (a row of the manifest table, renewed while it runs):
//! a second pass, in this process or any other, is refused until the first ends.

mod retention;
mod summary;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use retention::{Retention, cutoff};
pub use summary::{Outcome, PassSummary, TableSummary};

use crate::engine::{EngineError, TableRef, WriteEngine, is_conflict};
use crate::manifest::LeaseError;

/// How long a pass holds the lease without renewing it: a pass killed mid-way (its pod
/// evicted) blocks the next one at most this long.
pub const LEASE_TTL: Duration = Duration::from_secs(300);

/// Why a pass did not run to its end (a table that fails is in the summary, not here).
#[derive(Debug, thiserror::Error)]
pub enum PassError {
    #[error("maintenance could not list the tables: {0}")]
    Listing(#[source] EngineError),
    #[error(transparent)]
    Lease(#[from] LeaseError),
}

/// Who holds the lease: the pod (its host name) and the process.
fn holder() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "a host".into());
    format!("{host}, pid {}, at {}", std::process::id(), now_ms())
}

/// What one pass does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    pub retention: Retention,
    /// Compaction's target: fragments with fewer rows are merged up to this many.
    pub target_rows_per_fragment: usize,
    /// An index is brought up to date once this many rows are not in it yet.
    pub index_unindexed_rows: u64,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            retention: Retention {
                keep: DEFAULT_RETENTION,
                grace: DEFAULT_GRACE,
            },
            target_rows_per_fragment: DEFAULT_TARGET_ROWS,
            index_unindexed_rows: DEFAULT_INDEX_UNINDEXED_ROWS,
        }
    }
}

/// Old versions stay a week by default (time travel, and Lance's own default).
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
/// Longer than the default query timeout (600 s), so no running query loses its version.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(15 * 60);
/// Lance's default fragment size.
pub const DEFAULT_TARGET_ROWS: usize = 1024 * 1024;
/// Rows an index may lag behind before a pass updates it (they are scanned meanwhile).
pub const DEFAULT_INDEX_UNINDEXED_ROWS: u64 = 100_000;

/// One pass over every table of `engine`'s warehouse.
pub async fn run(engine: &WriteEngine, options: Options) -> Result<PassSummary, PassError> {
    let lease = engine.maintenance_lease(holder(), LEASE_TTL).await?;
    let every = lease.renew_every();
    let lease = std::sync::Arc::new(tokio::sync::Mutex::new(lease));
    // Renewed in the background, so a long table does not let it lapse; a lost lease stops the
    // pass before its next table.
    let (lost_tx, lost) = tokio::sync::watch::channel(false);
    let renewing = {
        let lease = lease.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                match lease.lock().await.renew().await {
                    Ok(()) => {}
                    Err(LeaseError::Lost) => {
                        let _ = lost_tx.send(true);
                        return;
                    }
                    // A store error: tried again at the next renewal, within the lease's time.
                    Err(e) => tracing::warn!(error = %e, "the maintenance lease was not renewed"),
                }
            }
        })
    };
    let result = pass(engine, options, &lost).await;
    renewing.abort();
    let _ = renewing.await;
    // The renewal task is gone: the lease is this function's alone again.
    if let Ok(lease) = std::sync::Arc::try_unwrap(lease)
        && !*lost.borrow()
        && let Err(e) = lease.into_inner().release().await
    {
        tracing::warn!(error = %e, "the maintenance lease was not released; it expires unrenewed");
    }
    result
}

async fn pass(
    engine: &WriteEngine,
    options: Options,
    lost: &tokio::sync::watch::Receiver<bool>,
) -> Result<PassSummary, PassError> {
    let tables = engine.list_tables().await.map_err(PassError::Listing)?;
    let mut summary = PassSummary::default();
    for table in tables {
        if *lost.borrow() {
            return Err(LeaseError::Lost.into());
        }
        tracing::info!(%table, "maintaining the table");
        let done = maintain_table(engine, &table, options).await;
        tracing::info!(%table, outcome = %done, "maintained");
        summary.tables.push(done);
    }
    Ok(summary)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// One table: compaction, index upkeep, then removal of the versions outside the retention.
pub async fn maintain_table(
    engine: &WriteEngine,
    table: &TableRef,
    options: Options,
) -> TableSummary {
    let mut done = TableSummary::new(table.clone());
    match engine.auto_cleanup_keys(table).await {
        Ok(keys) if keys.is_empty() => {}
        Ok(keys) => {
            done.outcome = Outcome::Failed(format!(
                "the table is configured for Lance's own auto-cleanup ({}), which removes \
                 versions outside the retention and grace and leaves their manifest rows: \
                 remove those keys (pylance: dataset.delete_config_keys)",
                keys.join(", ")
            ));
            return done;
        }
        Err(e) => return failed_or_gone(done, e),
    }
    match engine
        .compact_fragments(table, options.target_rows_per_fragment)
        .await
    {
        Ok(compaction) => done.compaction = compaction,
        Err(e) if is_conflict(&e) => {
            tracing::info!(%table, error = %e, "compaction lost to a concurrent write; the next pass compacts");
            done.outcome = Outcome::CompactionSkipped(e.to_string());
        }
        Err(e) => return failed_or_gone(done, e),
    }
    match engine
        .optimize_indices(table, options.index_unindexed_rows)
        .await
    {
        Ok(names) => done.indices_optimized = names,
        Err(e) if is_conflict(&e) => {
            tracing::info!(%table, error = %e, "index update lost to a concurrent write; the next pass updates");
        }
        Err(e) => return failed_or_gone(done, e),
    }
    let mut listed = 0;
    let now = now_ms();
    let removal = engine
        .remove_versions(table, |versions| {
            listed = versions.len();
            cutoff(versions, now, options.retention)
        })
        .await;
    done.versions_before = listed;
    match removal {
        Ok(removal) => {
            done.removal = removal;
            if removal.failed_deletes > 0 {
                done.outcome = Outcome::Failed(format!(
                    "{} files of removed versions could not be deleted; they may hold deleted \
                     rows, and stay until a pass a week from now deletes them",
                    removal.failed_deletes
                ));
            }
        }
        Err(e) => return failed_or_gone(done, e),
    }
    done
}

/// A table dropped while its pass ran is gone, not failed.
fn failed_or_gone(mut done: TableSummary, e: EngineError) -> TableSummary {
    done.outcome = match e {
        EngineError::NotFound(_) => Outcome::Gone,
        e => Outcome::Failed(e.to_string()),
    };
    done
}
