//! Table maintenance, the fourth authority: one pass over every table compacts small fragments
//! and every fragment holding deleted rows (a DELETE becomes erasure), then removes the versions
//! outside the retention with the files only they use and their manifest rows.
//!
//! Each table is its own unit: one that fails is reported and the pass goes on. A compaction
//! that loses to a concurrent write is skipped (the write wins; the next pass compacts).
//! Writes go on during a pass: Lance commits the compaction on top of them, and removal never
//! touches the latest version or a file no manifest references yet.

mod retention;
mod summary;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use retention::{Retention, cutoff};
pub use summary::{Outcome, PassSummary, TableSummary};

use crate::engine::{EngineError, TableRef, WriteEngine, is_conflict};

/// What one pass does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    pub retention: Retention,
    /// Compaction's target: fragments with fewer rows are merged up to this many.
    pub target_rows_per_fragment: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            retention: Retention {
                keep: DEFAULT_RETENTION,
                grace: DEFAULT_GRACE,
            },
            target_rows_per_fragment: DEFAULT_TARGET_ROWS,
        }
    }
}

/// Old versions stay a week by default (time travel, and Lance's own default).
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
/// Longer than the default query timeout (600 s), so no running query loses its version.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(15 * 60);
/// Lance's default fragment size.
pub const DEFAULT_TARGET_ROWS: usize = 1024 * 1024;

/// One pass over every table of `engine`'s warehouse.
pub async fn run(engine: &WriteEngine, options: Options) -> Result<PassSummary, EngineError> {
    let tables = engine.list_tables().await?;
    let mut summary = PassSummary::default();
    for table in tables {
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

/// One table: compaction, then removal of the versions outside the retention.
pub async fn maintain_table(
    engine: &WriteEngine,
    table: &TableRef,
    options: Options,
) -> TableSummary {
    let mut done = TableSummary::new(table.clone());
    match engine
        .compact_fragments(table, options.target_rows_per_fragment)
        .await
    {
        Ok(compaction) => done.compaction = compaction,
        // The table was dropped since the listing: nothing to maintain.
        Err(EngineError::NotFound(_)) => {
            done.outcome = Outcome::Gone;
            return done;
        }
        Err(e) if is_conflict(&e) => {
            tracing::info!(%table, error = %e, "compaction lost to a concurrent write; the next pass compacts");
            done.outcome = Outcome::CompactionSkipped(e.to_string());
        }
        Err(e) => {
            done.outcome = Outcome::Failed(e.to_string());
            return done;
        }
    }
    let versions = match engine.version_times(table).await {
        Ok(versions) => versions,
        Err(e) => {
            done.outcome = Outcome::Failed(e.to_string());
            return done;
        }
    };
    done.versions_before = versions.len();
    if let Some(cutoff) = cutoff(&versions, now_ms(), options.retention) {
        match engine.remove_versions_before(table, cutoff).await {
            Ok(removal) => done.removal = removal,
            Err(e) => done.outcome = Outcome::Failed(e.to_string()),
        }
    }
    done
}
