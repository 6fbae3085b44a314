//! Every write a client sends — a SQL update, a prepared update with its rows, a bulk ingest —
//! decoded, authorised and admitted here, then handed to [`crate::write`], which commits it.

use arrow::array::RecordBatch;
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::sql::server::PeekableFlightDataStream;
use arrow_flight::sql::{CommandPreparedStatementUpdate, CommandStatementIngest};
use datafusion::prelude::SessionContext;
use futures::future::BoxFuture;
use futures::{Stream, StreamExt, TryStreamExt, stream};
use tonic::Status;

use super::catalog::CATALOG;
use super::handle::MAX_BATCH_PARAMS_BYTES;
use super::options::SessionOptions;
use super::service::LakeFlightSql;
use super::sql::{self, Planned, Write};
use super::status;
use crate::catalog::{NamespaceName, TableName};
use crate::engine::TableRef;
use crate::write::{IfExists, IfMissing, IngestMode};

impl LakeFlightSql {
    /// Performs a write to completion, whatever the client does meanwhile: a deadline or a
    /// disconnect drops this call's future, so the write runs in a task of its own (a
    /// `CREATE TABLE … AS` stopped half-way left a registered table without a dataset).
    /// Returns affected rows.
    pub(super) async fn write(&self, ctx: &SessionContext, write: Write) -> Result<i64, Status> {
        self.writer()?;
        // Once admitted, a write runs to completion: its functions keep no deadline.
        super::bounded::run_to_completion(ctx);
        let (this, ctx) = (self.clone(), ctx.clone());
        self.to_completion(
            "write",
            Box::pin(async move { this.execute(&ctx, write).await }),
        )
        .await
    }

    /// Runs `work` in a task of its own under one of the endpoint's slots: writes count among
    /// its running statements too, and once admitted a write runs to completion.
    async fn to_completion(
        &self,
        what: &'static str,
        work: BoxFuture<'static, Result<i64, Status>>,
    ) -> Result<i64, Status> {
        let slot = self.governor.admit()?;
        detached(
            what,
            Box::pin(async move {
                let _slot = slot;
                work.await
            }),
        )
        .await
    }

    /// One planned write, committed by the write module.
    async fn execute(&self, ctx: &SessionContext, write: Write) -> Result<i64, Status> {
        let metadata = self.writer()?;
        let rows = match write {
            Write::CreateSchema {
                namespace,
                if_not_exists,
            } => metadata
                .create_namespace(&namespace, if_not_exists)
                .await
                .map(|()| 0),
            Write::CreateTable {
                table,
                schema,
                if_not_exists,
                rows,
            } => {
                metadata
                    .create_table_as(ctx, &table, schema, rows, if_not_exists)
                    .await
            }
            Write::DropTable { table, if_exists } => {
                metadata.drop_table_if(&table, if_exists).await.map(|()| 0)
            }
            Write::DropSchema {
                namespace,
                if_exists,
                cascade,
            } => metadata
                .drop_namespace(&namespace, if_exists, cascade)
                .await
                .map(|()| 0),
            Write::Insert { table, rows } => {
                // A prepared INSERT redeemed without values still holds its placeholders.
                if !rows.get_parameter_types().map_err(sql::status)?.is_empty() {
                    return Err(super::bind::unbound());
                }
                metadata.insert(ctx, &table, rows).await
            }
            Write::Delete { table, predicate } => {
                metadata
                    .delete(&table, predicate, self.governor.limits.query_timeout)
                    .await
            }
            Write::CopyInto(copy) => {
                metadata
                    .copy_into(&copy.table, &copy.path, copy.format)
                    .await
            }
            // No rows change hands: the table's content becomes that version's.
            Write::Restore(restore) => metadata
                .restore_table(&restore.table, restore.to)
                .await
                .map(|_| 0),
            Write::CreateIndex(index) => metadata
                .create_index(&index.table, &index.definition, index.if_not_exists)
                .await
                .map(|()| 0),
            Write::DropIndex {
                table,
                name,
                if_exists,
            } => metadata
                .drop_index(&table, &name, if_exists)
                .await
                .map(|()| 0),
        };
        rows.map(|rows| rows as i64).map_err(status::write)
    }

    /// A SQL update (CommandStatementUpdate): a write, never a query. Planned and run in a task
    /// of its own (see [`detached`]).
    pub(super) async fn update(
        &self,
        query: String,
        options: SessionOptions,
    ) -> Result<i64, Status> {
        self.writer()?;
        let this = self.clone();
        detached(
            "update",
            Box::pin(async move {
                let ctx = this.session(&options).await?;
                match this
                    .governor
                    .governed(sql::plan(&ctx, &query, None))
                    .await?
                {
                    Planned::Write(write) => this.write(&ctx, write).await,
                    Planned::Read(_) | Planned::BoundRead { .. } => Err(not_an_update()),
                }
            }),
        )
        .await
    }

    /// A prepared update: its statement with no values, one row or many. Every row of an
    /// `INSERT` is one write, one commit — what JDBC's `executeBatch` and ADBC's `executemany`
    /// send as one DoPut. Once its rows are read, planned and run in a task of its own.
    pub(super) async fn prepared_update(
        &self,
        command: CommandPreparedStatementUpdate,
        data: PeekableFlightDataStream,
        options: SessionOptions,
    ) -> Result<i64, Status> {
        self.writer()?;
        let bound = parameters(data, MAX_BATCH_PARAMS_BYTES).await?;
        let rows = super::bind::rows_of(&bound)?;
        let prepared = self.handles.decode(&command.prepared_statement_handle)?;
        // A prepared statement runs in the session it was prepared in.
        let options = prepared.options_or(options);
        let (sql, params) = prepared.statement()?;
        let this = self.clone();
        detached(
            "update",
            Box::pin(async move {
                let ctx = this.session(&options).await?;
                // Rows sent with the update are the ones to write; a handle's own row (bound by an
                // earlier DoPut, as ADBC does before `executemany`) counts only when none are sent.
                let planned = if rows.is_empty() {
                    this.governor
                        .governed(sql::plan(&ctx, &sql, params))
                        .await?
                } else {
                    this.governor
                        .governed(sql::plan_rows(&ctx, &sql, rows))
                        .await?
                };
                match planned {
                    Planned::Write(write) => this.write(&ctx, write).await,
                    Planned::Read(_) | Planned::BoundRead { .. } => Err(not_an_update()),
                }
            }),
        )
        .await
    }

    /// Bulk ingest (ADBC `adbc_ingest`). Refused before a byte of data is read on the query
    /// endpoint; like every write, it runs to completion in its own task (see `write`).
    pub(super) async fn ingest(
        &self,
        command: CommandStatementIngest,
        data: PeekableFlightDataStream,
        options: SessionOptions,
    ) -> Result<i64, Status> {
        self.writer()?;
        let this = self.clone();
        self.to_completion(
            "ingest",
            Box::pin(async move { this.ingest_now(command, data, &options).await }),
        )
        .await
    }

    async fn ingest_now(
        &self,
        command: CommandStatementIngest,
        data: PeekableFlightDataStream,
        options: &SessionOptions,
    ) -> Result<i64, Status> {
        let metadata = self.writer()?;
        let (table, mode) = ingest_target(&command, options)?;
        let mut stream = FlightRecordBatchStream::new_from_flight_data(
            super::ingress::checked(data).map_err(arrow_flight::error::FlightError::from),
        );
        // The first batch brings the schema; the rest are read as the write goes.
        let first = stream
            .try_next()
            .await
            .map_err(|e| status::decode("bad ingest data", e))?;
        let schema = stream
            .schema()
            .cloned()
            .or_else(|| first.as_ref().map(RecordBatch::schema))
            .ok_or_else(|| Status::invalid_argument("ingest sent no schema"))?;
        // The table's lock is held while the rows stream in, so a client that stops sending
        // fails its ingest after the endpoint's time limit instead of blocking the table's
        // other writes.
        let sent = stream::iter(first.map(Ok)).chain(
            idle_limited(stream, self.governor.limits.query_timeout).map_err(|e| match e {
                arrow_flight::error::FlightError::Tonic(status) => {
                    datafusion::error::DataFusionError::External(Box::new(*status))
                }
                other => datafusion::error::DataFusionError::External(Box::new(other)),
            }),
        );
        metadata
            .ingest(&table, mode, crate::engine::row_stream(schema, sent))
            .await
            .map(|rows| rows as i64)
            .map_err(status::write)
    }
}

/// Runs a statement the client sent to its end in a task of its own. A client that gives up (its
/// deadline, a disconnect) drops the call's future; were the statement planned in that future,
/// whether a write the client sent happens would depend on how far planning had got by then.
/// Planning is bounded by the endpoint's slots and time limit either way.
pub(super) async fn detached<T: Send + 'static>(
    what: &'static str,
    work: BoxFuture<'static, Result<T, Status>>,
) -> Result<T, Status> {
    tokio::spawn(work)
        .await
        .map_err(|e| Status::internal(format!("the {what} failed inside the server: {e}")))?
}

/// The table and mode an ingest command names, each checked.
/// The table an ingest writes: its `db_schema`, or the session's schema when it names none.
fn ingest_target(
    command: &CommandStatementIngest,
    options: &SessionOptions,
) -> Result<(TableRef, IngestMode), Status> {
    use arrow_flight::sql::{TableExistsOption, TableNotExistOption};
    if command.temporary || command.transaction_id.is_some() {
        return Err(Status::unimplemented(
            "temporary tables and transactions are not supported",
        ));
    }
    if let Some(catalog) = command.catalog.as_deref().filter(|c| *c != CATALOG) {
        return Err(Status::not_found(format!(
            "catalog {catalog:?} does not exist; lake serves {CATALOG:?}"
        )));
    }
    let namespace = match (command.schema.as_deref(), options.schema()) {
        (Some(s), _) => {
            NamespaceName::parse(s).map_err(|e| Status::invalid_argument(e.to_string()))?
        }
        (None, Some(chosen)) => chosen.clone(),
        (None, None) => {
            return Err(Status::invalid_argument(
                "ingest needs a target schema: db_schema, or the session's schema option",
            ));
        }
    };
    let name =
        TableName::parse(&command.table).map_err(|e| Status::invalid_argument(e.to_string()))?;
    let options = command.table_definition_options.unwrap_or_default();
    let mode = IngestMode {
        if_exists: match options.if_exists() {
            TableExistsOption::Append => IfExists::Append,
            TableExistsOption::Replace => IfExists::Replace,
            TableExistsOption::Fail | TableExistsOption::Unspecified => IfExists::Fail,
        },
        if_missing: match options.if_not_exist() {
            TableNotExistOption::Create => IfMissing::Create,
            TableNotExistOption::Fail | TableNotExistOption::Unspecified => IfMissing::Fail,
        },
    };
    Ok((TableRef::new(namespace, name), mode))
}

fn not_an_update() -> Status {
    Status::invalid_argument("this is a query; execute it as a query, not an update")
}

/// `stream`, failing with DEADLINE_EXCEEDED when the client sends nothing for `limit`.
fn idle_limited<S>(
    stream: S,
    limit: std::time::Duration,
) -> impl Stream<Item = Result<RecordBatch, arrow_flight::error::FlightError>> + Send
where
    S: Stream<Item = Result<RecordBatch, arrow_flight::error::FlightError>> + Send + Unpin,
{
    stream::unfold(Some(stream), move |state| async move {
        let mut stream = state?;
        match tokio::time::timeout(limit, stream.next()).await {
            Ok(item) => item.map(|item| (item, Some(stream))),
            Err(_) => Some((
                Err(arrow_flight::error::FlightError::Tonic(Box::new(
                    Status::deadline_exceeded(format!(
                        "the client sent nothing for {} s (LAKE_QUERY_TIMEOUT_SECONDS); the \
                         ingest was stopped and nothing was committed",
                        limit.as_secs()
                    )),
                ))),
                None,
            )),
        }
    })
}

/// The parameter batches a client sends with DoPut: every message checked before decoding, and
/// no more than `limit` bytes of them held.
pub(super) async fn parameters(
    data: PeekableFlightDataStream,
    limit: usize,
) -> Result<Vec<RecordBatch>, Status> {
    let mut stream = FlightRecordBatchStream::new_from_flight_data(
        super::ingress::checked(data).map_err(arrow_flight::error::FlightError::from),
    );
    let mut batches = Vec::new();
    let mut held = 0;
    while let Some(batch) = stream
        .try_next()
        .await
        .map_err(|e| status::decode("bad parameters", e))?
    {
        held += batch.get_array_memory_size();
        if held > limit {
            return Err(Status::invalid_argument(format!(
                "bound parameters exceed {limit} bytes: send fewer rows per batch"
            )));
        }
        batches.push(batch);
    }
    Ok(batches)
}
