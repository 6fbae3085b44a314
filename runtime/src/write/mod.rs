//! Every write of the metadata role, in one place: DDL (schemas, tables, `CREATE TABLE … AS`),
//! DML (`INSERT`, `DELETE`), bulk ingest (create, append, replace), `COPY INTO`, `RESTORE`,
//! indices and drop.
//!
//! The rules every write follows:
//! - **Conformance** ([`crate::conform`]): rows that bring their own schema (ingest, stage files)
//!   are matched to the table by name and only widened without loss; rows a SQL plan produced
//!   (already aligned to the table by the planner) are cast column by column. Either way a value
//!   that does not fit fails the write, never becomes a NULL.
//! - **Locks**: each commit takes its table's lock in the engine ([`crate::engine::WriteEngine`]);
//!   nothing here holds a lock across two commits.
//! - **Undo**: a table is registered first and its registration withdrawn if its dataset cannot
//!   be created; a replace restores the previous registration if its commit fails; a drop deletes
//!   the dataset before the registration, so a failed drop can be run again. Rows are streamed
//!   into one commit, so a failure while they arrive commits nothing.
//!
//! The Flight service decodes and authorises; it calls these methods and nothing else to write.

mod error;
mod ingest;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use futures::{StreamExt, TryStreamExt};
use lake_common::stage::StagePath;

use crate::catalog::{CatalogError, NamespaceName, TableEntry, new_entry};
use crate::context::MetadataContext;
use crate::engine::{IndexDefinition, RestoreTarget, Restoring, RowStream, TableRef};
use crate::stage::{self, FileFormat};

pub use error::WriteError;
pub use ingest::{IfExists, IfMissing, IngestMode};

impl MetadataContext {
    /// `CREATE SCHEMA`: registers a namespace; with `if_not_exists`, an existing one is no error.
    pub async fn create_namespace(
        &self,
        namespace: &NamespaceName,
        if_not_exists: bool,
    ) -> Result<(), WriteError> {
        match self.registry().create_namespace(namespace).await {
            Err(CatalogError::NamespaceExists(_)) if if_not_exists => Ok(()),
            other => other.map(|_| ()).map_err(WriteError::from),
        }
    }

    /// `DROP SCHEMA`: with `cascade`, each of its tables is dropped as `DROP TABLE` drops one
    /// (data first, then the registration), and the namespace last, so a failure part-way
    /// leaves a schema that can be dropped again; without it, a schema holding tables is
    /// refused, naming them. With `if_exists`, a schema that does not exist is no error.
    /// Isolated from a concurrent `CREATE TABLE` in the schema by the registry (see
    /// `Registry::drop_namespace`): the create fails, or the drop does, naming the table.
    pub async fn drop_namespace(
        &self,
        namespace: &NamespaceName,
        if_exists: bool,
        cascade: bool,
    ) -> Result<(), WriteError> {
        let registry = self.registry();
        if !registry.namespace_exists(namespace).await? {
            return match if_exists {
                true => Ok(()),
                false => Err(CatalogError::NoSuchNamespace(namespace.clone()).into()),
            };
        }
        let tables = registry.list_tables(namespace).await?;
        if !cascade && !tables.is_empty() {
            // Named, a few: the message travels in a gRPC header.
            let mut names: Vec<String> =
                tables.iter().take(10).map(|t| t.name.to_string()).collect();
            if tables.len() > names.len() {
                names.push(format!("and {} more", tables.len() - names.len()));
            }
            return Err(WriteError::SchemaNotEmpty {
                namespace: namespace.clone(),
                tables: names.join(", "),
            });
        }
        for entry in tables {
            let table = TableRef::new(namespace.clone(), entry.name.clone());
            self.drop_table_if(&table, true).await?;
        }
        match registry.drop_namespace(namespace).await {
            // A table created while the others were dropped keeps the schema (the tables
            // listed are gone): said so; DROP SCHEMA … CASCADE again finishes it.
            Err(CatalogError::NamespaceNotEmpty(_)) => Err(WriteError::SchemaNotEmpty {
                namespace: namespace.clone(),
                tables: "a table created while it was being dropped".into(),
            }),
            Err(CatalogError::NoSuchNamespace(_)) if if_exists => Ok(()),
            other => Ok(other?),
        }
    }

    /// Creates a table: registers it (a conditional write, so a concurrent create of the same
    /// name loses cleanly), then commits its dataset. If the dataset cannot be created, the
    /// registration is withdrawn, so nothing half-done is left.
    pub async fn create_table(
        &self,
        table: &TableRef,
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    ) -> Result<TableEntry, WriteError> {
        self.create_table_stream(table, crate::engine::rows_of(schema, batches))
            .await
            .map(|(entry, _)| entry)
    }

    /// `CREATE TABLE [IF NOT EXISTS] … [AS SELECT]`: the table with `schema`, its first commit
    /// holding the rows of `rows` (planned in `ctx`), if any. Returns the rows written.
    pub async fn create_table_as(
        &self,
        ctx: &SessionContext,
        table: &TableRef,
        schema: SchemaRef,
        rows: Option<LogicalPlan>,
        if_not_exists: bool,
    ) -> Result<u64, WriteError> {
        let rows = match rows {
            Some(plan) => planned_rows(ctx, plan, &schema).await?,
            None => crate::engine::rows_of(schema, Vec::new()),
        };
        match self.create_table_stream(table, rows).await {
            Err(WriteError::Catalog(CatalogError::TableExists(..))) if if_not_exists => Ok(0),
            other => other.map(|(_, rows)| rows),
        }
    }

    /// [`MetadataContext::create_table`] with the schema and rows of `rows`, streamed into the
    /// first commit (a `CREATE TABLE … AS SELECT`, an ingest of any size). Returns the
    /// registration and the rows written.
    pub async fn create_table_stream(
        &self,
        table: &TableRef,
        rows: RowStream,
    ) -> Result<(TableEntry, u64), WriteError> {
        let location = self.engine().warehouse().uri(table);
        let entry = new_entry(
            table.namespace.clone(),
            table.table.clone(),
            location,
            rows.schema(),
        );
        self.registry().create_table(&entry).await?;
        match self.engine().create_stream(table, rows).await {
            Ok(committed) => Ok((entry, committed.rows)),
            Err(e) => {
                if let Err(undo) = self
                    .registry()
                    .drop_table(&table.namespace, &table.table)
                    .await
                {
                    tracing::error!(%table, error = %undo, "could not withdraw the registration of a table whose dataset failed");
                }
                Err(e.into())
            }
        }
    }

    /// `INSERT INTO table …`: the rows of `rows` (planned in `ctx`) appended in one commit,
    /// streamed from DataFusion, so memory stays bounded however many rows the plan produces.
    /// Returns the rows written.
    pub async fn insert(
        &self,
        ctx: &SessionContext,
        table: &TableRef,
        rows: LogicalPlan,
    ) -> Result<u64, WriteError> {
        let entry = self
            .registry()
            .get_table(&table.namespace, &table.table)
            .await?;
        let rows = planned_rows(ctx, rows, &entry.schema).await?;
        Ok(self.engine().append_stream(table, rows).await?.rows)
    }

    /// `DELETE FROM table [WHERE predicate]`, one commit; finding the rows may take `limit`.
    /// Returns the rows deleted.
    pub async fn delete(
        &self,
        table: &TableRef,
        predicate: Option<datafusion::logical_expr::Expr>,
        limit: std::time::Duration,
    ) -> Result<u64, WriteError> {
        let committed = self.engine().delete(table, predicate, limit).await?;
        Ok(committed.rows)
    }

    /// Replaces a table's schema and rows (ADBC ingest `replace`) with those of `rows`, in one
    /// commit. The new data files are written first (under the table's lock), then the
    /// registration is updated, then the files are committed; if the commit fails, the previous
    /// registration is restored. A failure while the rows stream in changes nothing, and the
    /// registry and the dataset disagree at most for the commit itself. Returns the rows written.
    pub async fn replace_table(
        &self,
        table: &TableRef,
        rows: RowStream,
    ) -> Result<(TableEntry, u64), WriteError> {
        let previous = self
            .registry()
            .get_table(&table.namespace, &table.table)
            .await?;
        let mut next = previous.clone();
        next.schema = rows.schema();
        let staged = self.engine().stage_overwrite(table, rows).await?;
        self.registry().update_table(&next).await?;
        match self.engine().commit(staged).await {
            Ok(committed) => Ok((next, committed.rows)),
            Err(e) => {
                if let Err(undo) = self.registry().update_table(&previous).await {
                    tracing::error!(%table, error = %undo, "could not restore the registration of a table whose overwrite failed");
                }
                Err(e.into())
            }
        }
    }

    /// `COPY INTO`: loads the stage file at `path` (or every file under it) into `table` as one
    /// append commit. Every file is decoded and checked against the table's schema before
    /// anything is written, so a bad file commits nothing. Returns the rows loaded.
    pub async fn copy_into(
        &self,
        table: &TableRef,
        path: &StagePath,
        format: Option<FileFormat>,
    ) -> Result<u64, WriteError> {
        let entry = self
            .registry()
            .get_table(&table.namespace, &table.table)
            .await?;
        // Every file's schema and declared sizes are checked before a row is written, so a bad
        // file commits nothing; then the files are decoded as the write pulls them, read in
        // ranges (off the async workers), so memory holds a few batches, not the files.
        let mut files = Vec::new();
        for file in self.stage().files(path).await? {
            let ranged = self.stage().open_file(&file).await?;
            let schema = entry.schema.clone();
            let name = file.to_string();
            let shown = format
                .or_else(|| FileFormat::from_path(&file))
                .unwrap_or(FileFormat::Parquet);
            let opened =
                tokio::task::spawn_blocking(move || stage::batches(&file, ranged, format, &schema))
                    .await
                    .map_err(|_| stage::LoadError::Decode {
                        path: name,
                        format: shown,
                        message: "the decoder failed on the file's contents".into(),
                    })??;
            files.push(opened);
        }
        let rows = futures::stream::iter(files).map(decoded).flatten();
        let rows = crate::engine::row_stream(entry.schema.clone(), rows);
        Ok(self.engine().append_stream(table, rows).await?.rows)
    }

    /// `RESTORE TABLE … TO …`: one commit whose content is the version `to` names (the versions
    /// in between stay, for time travel). A version whose schema differs from the registration's
    /// (a replace came after it) is registered with it first, and the registration put back if
    /// the commit fails. Returns the new version.
    pub async fn restore_table(
        &self,
        table: &TableRef,
        to: RestoreTarget,
    ) -> Result<u64, WriteError> {
        // Fail early if it is not registered; read again once the table is held, as a replace
        // may change it while the restore waits for the lease.
        self.registry()
            .get_table(&table.namespace, &table.table)
            .await?;
        let restoring = self.engine().restoring(table).await?;
        let restored = match self
            .registry()
            .get_table(&table.namespace, &table.table)
            .await
        {
            Ok(previous) => self.restore_held(&restoring, &previous, to).await,
            Err(e) => Err(e.into()),
        };
        restoring.finish().await;
        restored
    }

    async fn restore_held(
        &self,
        restoring: &Restoring<'_>,
        previous: &TableEntry,
        to: RestoreTarget,
    ) -> Result<u64, WriteError> {
        let point = restoring.point(to).await?;
        let same = |a: &SchemaRef, b: &SchemaRef| {
            a.fields().len() == b.fields().len()
                && a.fields().iter().zip(b.fields()).all(|(x, y)| {
                    x.name() == y.name()
                        && x.data_type() == y.data_type()
                        && x.is_nullable() == y.is_nullable()
                })
        };
        let reregister = !same(&point.schema, &previous.schema);
        if reregister {
            let mut next = previous.clone();
            next.schema = point.schema.clone();
            self.registry().update_table(&next).await?;
        }
        match restoring.commit(point.version).await {
            Ok(version) => Ok(version),
            Err(e) => {
                if reregister && let Err(undo) = self.registry().update_table(previous).await {
                    let table = format!("{}.{}", previous.namespace, previous.name);
                    tracing::error!(%table, error = %undo, "could not restore the registration of a table whose restore failed");
                }
                Err(e.into())
            }
        }
    }

    /// `CREATE INDEX`: builds `index` on a registered table, one commit.
    pub async fn create_index(
        &self,
        table: &TableRef,
        index: &IndexDefinition,
        if_not_exists: bool,
    ) -> Result<(), WriteError> {
        self.registry()
            .get_table(&table.namespace, &table.table)
            .await?;
        Ok(self
            .engine()
            .create_index(table, index, if_not_exists)
            .await?)
    }

    /// `DROP INDEX`: one commit without the index.
    pub async fn drop_index(
        &self,
        table: &TableRef,
        name: &str,
        if_exists: bool,
    ) -> Result<(), WriteError> {
        self.registry()
            .get_table(&table.namespace, &table.table)
            .await?;
        Ok(self.engine().drop_index(table, name, if_exists).await?)
    }

    /// Drops a table: its files and manifest rows first (idempotent), then its registration, so
    /// a failure part-way leaves a table that can be dropped again. With `if_exists`, a table
    /// that is not registered is no error.
    pub async fn drop_table_if(&self, table: &TableRef, if_exists: bool) -> Result<(), WriteError> {
        match self.drop_table(table).await {
            Err(WriteError::Catalog(CatalogError::NoSuchTable(..))) if if_exists => Ok(()),
            other => other,
        }
    }

    /// [`MetadataContext::drop_table_if`] of a table that must exist.
    pub async fn drop_table(&self, table: &TableRef) -> Result<(), WriteError> {
        // Fail early, before deleting anything, if the table is not registered.
        self.registry()
            .get_table(&table.namespace, &table.table)
            .await?;
        self.engine().drop_table(table).await?;
        self.registry()
            .drop_table(&table.namespace, &table.table)
            .await?;
        Ok(())
    }
}

/// `plan`'s rows as a stream, each batch cast to `target` (the planner has aligned them to the
/// table's columns; see [`crate::conform::cast_planned`]).
async fn planned_rows(
    ctx: &SessionContext,
    plan: LogicalPlan,
    target: &SchemaRef,
) -> Result<RowStream, WriteError> {
    let state = ctx.state();
    let physical = state
        .create_physical_plan(&plan)
        .await
        .map_err(WriteError::Plan)?;
    // In the statement's runtime (its memory pool), not the session's.
    let task = crate::flight::task_context(&state).map_err(WriteError::Plan)?;
    let batches =
        datafusion::physical_plan::execute_stream(physical, task).map_err(WriteError::Plan)?;
    let table = target.clone();
    let cast = batches.and_then(move |batch| {
        futures::future::ready(
            crate::conform::cast_planned(batch, &table)
                .map_err(|e| datafusion::error::DataFusionError::Plan(e.to_string())),
        )
    });
    Ok(crate::engine::row_stream(target.clone(), cast))
}

/// A file's batches decoded on a blocking thread, two at a time ahead of the writer.
fn decoded(
    batches: stage::Batches,
) -> impl futures::Stream<Item = datafusion::error::Result<RecordBatch>> {
    let (tx, rx) = tokio::sync::mpsc::channel(2);
    tokio::task::spawn_blocking(move || {
        let decode = std::panic::AssertUnwindSafe(|| {
            for batch in batches {
                let batch =
                    batch.map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)));
                // The writer stopped (an error, a drop): stop decoding.
                if tx.blocking_send(batch).is_err() {
                    return;
                }
            }
        });
        // A decoder that panics on a hostile file must fail the write, not end the stream
        // early (which would commit the rows decoded so far).
        if std::panic::catch_unwind(decode).is_err() {
            let _ = tx.blocking_send(Err(datafusion::error::DataFusionError::Execution(
                "the file could not be decoded (the decoder failed on its contents)".into(),
            )));
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}
