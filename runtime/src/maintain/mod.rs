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
pub use crate::manifest::LEASE_TTL;
use crate::manifest::{LeaseError, Renewed, holder};

/// Why a pass did not run to its end (a table that fails is in the summary, not here).
#[derive(Debug, thiserror::Error)]
pub enum PassError {
    #[error("maintenance could not list the tables: {0}")]
    Listing(#[source] EngineError),
    #[error(transparent)]
    Lease(#[from] LeaseError),
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
    run_observed(engine, options, &|_| {}).await
}

/// [`run`], calling `on_table` as the work on each table starts (its lease held).
pub async fn run_observed(
    engine: &WriteEngine,
    options: Options,
    on_table: &(dyn Fn(&TableRef) + Send + Sync),
) -> Result<PassSummary, PassError> {
    let holder = holder();
    // Renewed in the background, so a long table does not let it lapse; a lost lease stops the
    // pass before its next table.
    let lease = engine
        .maintenance_lease(holder.clone(), LEASE_TTL)
        .await?
        .keep_renewed();
    let result = pass(engine, options, &holder, &lease, on_table).await;
    lease.release().await;
    result
}

async fn pass(
    engine: &WriteEngine,
    options: Options,
    holder: &str,
    lease: &Renewed,
    on_table: &(dyn Fn(&TableRef) + Send + Sync),
) -> Result<PassSummary, PassError> {
    let tables = engine.list_tables().await.map_err(PassError::Listing)?;
    let mut summary = PassSummary::default();
    for table in tables {
        if lease.is_lost() {
            return Err(lease.lost().into());
        }
        tracing::info!(%table, "maintaining the table");
        // The table's own lease, so a DROP TABLE of it waits until the table is done (and a
        // table being dropped waits for the next pass).
        let done = match engine
            .table_lease(
                &table,
                format!("a maintenance pass ({holder})"),
                LEASE_TTL,
                Duration::ZERO,
            )
            .await
        {
            Ok(table_lease) => {
                let table_lease = table_lease.keep_renewed();
                on_table(&table);
                let done = maintain_table(engine, &table, options, &table_lease).await;
                table_lease.release().await;
                done
            }
            Err(e @ LeaseError::Held { .. }) => {
                let mut busy = TableSummary::new(table.clone());
                busy.outcome = Outcome::Busy(e.to_string());
                busy
            }
            Err(e) => {
                let mut failed = TableSummary::new(table.clone());
                failed.outcome = Outcome::Failed(e.to_string());
                failed
            }
        };
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

/// One table, under its lease: compaction, index upkeep, then removal of the versions outside
/// the retention. Each step starts only while the lease is surely held: a `DROP TABLE` (and a
/// `CREATE` after it) may follow the moment it lapses.
async fn maintain_table(
    engine: &WriteEngine,
    table: &TableRef,
    options: Options,
    lease: &Renewed,
) -> TableSummary {
    let mut done = TableSummary::new(table.clone());
    let lost = |mut done: TableSummary, e: LeaseError| {
        done.outcome = Outcome::Failed(format!("{e}; the next pass goes on"));
        done
    };
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
    if let Err(e) = lease.check() {
        return lost(done, e);
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
    if let Err(e) = lease.check() {
        return lost(done, e);
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
        .remove_versions(table, lease, |versions| {
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
