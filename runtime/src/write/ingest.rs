//! Bulk ingest (ADBC `adbc_ingest`): rows that bring their own schema, into a table that may or
//! may not exist, as one commit whatever the mode.

use crate::catalog::CatalogError;
use crate::context::MetadataContext;
use crate::engine::{RowStream, TableRef};

use super::WriteError;

/// What an ingest does when the table exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IfExists {
    /// Append the rows (they must conform to the table's schema).
    Append,
    /// Replace the table's schema and rows.
    Replace,
    /// Refuse: the table must not exist.
    Fail,
}

/// What an ingest does when the table does not exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IfMissing {
    /// Create it with the rows' schema.
    Create,
    /// Refuse: the table must exist.
    Fail,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IngestMode {
    pub if_exists: IfExists,
    pub if_missing: IfMissing,
}

impl MetadataContext {
    /// Ingests `rows` into `table` as `mode` says, streamed into one commit: memory stays
    /// bounded whatever the client sends, and a failure while the rows arrive commits nothing.
    /// Returns the rows written.
    pub async fn ingest(
        &self,
        table: &TableRef,
        mode: IngestMode,
        rows: RowStream,
    ) -> Result<u64, WriteError> {
        let existing = match self
            .registry()
            .get_table(&table.namespace, &table.table)
            .await
        {
            Ok(entry) => Some(entry),
            Err(CatalogError::NoSuchTable(..)) => None,
            Err(e) => return Err(e.into()),
        };
        match (existing, mode.if_exists, mode.if_missing) {
            (Some(entry), IfExists::Append, _) => {
                // By name and lossless, the same rules as COPY INTO: reordered columns or a
                // value that does not fit are refused, never written as NULLs.
                crate::conform::check(&rows.schema(), &entry.schema).map_err(|problems| {
                    WriteError::Mismatch {
                        table: table.clone(),
                        problems,
                    }
                })?;
                let target = entry.schema.clone();
                let rows = futures::TryStreamExt::and_then(rows, move |batch| {
                    futures::future::ready(
                        crate::conform::cast_batch(batch, &target)
                            .map_err(datafusion::error::DataFusionError::from),
                    )
                });
                let rows = crate::engine::row_stream(entry.schema.clone(), rows);
                Ok(self.engine().append_stream(table, rows).await?.rows)
            }
            (Some(_), IfExists::Replace, _) => Ok(self.replace_table(table, rows).await?.1),
            (Some(_), IfExists::Fail, _) => {
                Err(CatalogError::TableExists(table.namespace.clone(), table.table.clone()).into())
            }
            (None, _, IfMissing::Create) => Ok(self.create_table_stream(table, rows).await?.1),
            (None, _, IfMissing::Fail) => {
                Err(CatalogError::NoSuchTable(table.namespace.clone(), table.table.clone()).into())
            }
        }
    }
}
