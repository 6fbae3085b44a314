//! What a maintenance pass did, per table: printed by `lake maintain`, one line per table.

use std::fmt;

use crate::engine::{Compaction, Removal, TableRef};

/// How one table's maintenance ended.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Outcome {
    #[default]
    Done,
    /// The compaction lost to a concurrent write (which won); old versions were still removed.
    CompactionSkipped(String),
    /// Dropped while the pass ran.
    Gone,
    /// Another process held the table's lease (a `DROP TABLE` of it): the next pass maintains
    /// it, if it is still there.
    Busy(String),
    Failed(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSummary {
    pub table: TableRef,
    pub compaction: Compaction,
    /// Indices brought up to date.
    pub indices_optimized: Vec<String>,
    /// Versions there were after the compaction, before removal.
    pub versions_before: usize,
    pub removal: Removal,
    pub outcome: Outcome,
}

impl TableSummary {
    pub fn new(table: TableRef) -> Self {
        Self {
            table,
            compaction: Compaction::default(),
            indices_optimized: Vec::new(),
            versions_before: 0,
            removal: Removal::default(),
            outcome: Outcome::Done,
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Done => write!(f, "ok"),
            Outcome::CompactionSkipped(why) => {
                write!(f, "compaction skipped (a concurrent write won: {why})")
            }
            Outcome::Gone => write!(f, "dropped during the pass"),
            Outcome::Busy(why) => write!(f, "skipped ({why})"),
            Outcome::Failed(why) => write!(f, "FAILED: {why}"),
        }
    }
}

impl fmt::Display for TableSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.compaction;
        let r = &self.removal;
        write!(
            f,
            "{}: {}; fragments {} -> {}, deleted rows erased {}; indices updated [{}]; \
             versions {} -> {} ({} removed, {} files, {} bytes, {} manifest rows)",
            self.table,
            self.outcome,
            c.fragments_before,
            c.fragments_after,
            c.deleted_rows_erased,
            self.indices_optimized.join(", "),
            self.versions_before,
            self.versions_before
                .saturating_sub(usize::try_from(r.versions_removed).unwrap_or(usize::MAX)),
            r.versions_removed,
            r.files_removed,
            r.bytes_removed,
            r.manifest_rows_removed,
        )
    }
}

/// Every table of one pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassSummary {
    pub tables: Vec<TableSummary>,
}

impl PassSummary {
    /// Tables whose maintenance failed.
    pub fn failed(&self) -> usize {
        self.tables
            .iter()
            .filter(|t| matches!(t.outcome, Outcome::Failed(_)))
            .count()
    }
}
