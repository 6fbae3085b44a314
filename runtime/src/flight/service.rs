//! The Arrow Flight SQL service of both roles.
//!
//! Query serves reads only: every write (update, ingest, DDL) is refused with PERMISSION_DENIED
//! naming the metadata endpoint, before anything is planned against storage. Metadata serves the
//! same reads plus DDL and DML, each write one Lance commit.

use std::pin::Pin;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::sql::DoPutPreparedStatementResult;
use arrow_flight::sql::metadata::{SqlInfoData, XdbcTypeInfoData};
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionBeginTransactionRequest, ActionBeginTransactionResult,
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest,
    ActionCreatePreparedStatementResult, CommandGetCatalogs, CommandGetDbSchemas,
    CommandGetPrimaryKeys, CommandGetSqlInfo, CommandGetTableTypes, CommandGetTables,
    CommandGetXdbcTypeInfo, CommandPreparedStatementQuery, CommandPreparedStatementUpdate,
    CommandStatementIngest, CommandStatementQuery, CommandStatementUpdate, ProstMessageExt,
    SqlInfo, TicketStatementQuery,
};
use arrow_flight::{
    Action, ActionType, FlightDescriptor, FlightEndpoint, FlightInfo, IpcMessage, SchemaAsIpc,
    SchemaResult, Ticket,
};
use arrow_flight::{HandshakeRequest, HandshakeResponse};
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use futures::{Stream, StreamExt, TryStreamExt, stream};
use prost::Message;
use tonic::{Request, Response, Status, Streaming};

use lake_common::stage::{DESCRIBE_STAGE_ACTION, METADATA_ENDPOINT_ACTION};

use super::auth::Tokens;

use super::catalog::{CATALOG, LakeCatalog};
use super::handle::{Handle, HandleCodec, MAX_BATCH_PARAMS_BYTES, MAX_PARAMS_BYTES, params_to_ipc};
use super::limits::{Governor, Limits};
use super::plans::PlanCache;
use super::redact::Redactor;
use super::sql::{self, Planned, Write};
use super::wire::{to_wire, wire_schema};
use crate::catalog::{CatalogError, NamespaceName, TableName};
use crate::context::{ContextError, MetadataContext, QueryContext};
use crate::engine::{Engine, EngineError, TableRef};
use crate::stage::StageError;

/// The most bytes of one FlightData message.
const MAX_FLIGHT_DATA: usize = 2 * 1024 * 1024;

/// What a service serves.
#[derive(Debug, Clone)]
pub enum Role {
    Query {
        context: Arc<QueryContext>,
        /// Where clients are sent for writes.
        metadata_endpoint: Option<String>,
    },
    Metadata(Arc<MetadataContext>),
}

#[derive(Clone)]
pub struct LakeFlightSql {
    role: Role,
    sql_info: Arc<SqlInfoData>,
    type_info: Arc<XdbcTypeInfoData>,
    tokens: Option<Tokens>,
    /// Signs the handles this process gives out; refuses any other.
    handles: HandleCodec,
    /// Hides the server's paths from what clients are told.
    redactor: Redactor,
    /// Memory, time and concurrency limits of this endpoint's queries.
    governor: Governor,
    /// Plans GetFlightInfo made, for their DoGet.
    plans: Arc<PlanCache>,
}

impl std::fmt::Debug for LakeFlightSql {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LakeFlightSql")
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

type DoGetStream = Pin<Box<dyn Stream<Item = Result<arrow_flight::FlightData, Status>> + Send>>;

/// GetPrimaryKeys' result schema (Flight SQL spec). Lance tables have no primary keys.
fn primary_keys_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("catalog_name", DataType::Utf8, true),
        Field::new("db_schema_name", DataType::Utf8, true),
        Field::new("table_name", DataType::Utf8, false),
        Field::new("column_name", DataType::Utf8, false),
        Field::new("key_name", DataType::Utf8, true),
        Field::new("key_sequence", DataType::Int32, false),
    ]))
}

fn rows_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        "rows",
        DataType::Int64,
        false,
    )]))
}

fn engine_status(e: EngineError) -> Status {
    match e {
        EngineError::NotFound(t) => Status::not_found(format!("table {t} does not exist")),
        EngineError::AlreadyExists(t) => {
            Status::already_exists(format!("table {t} already exists"))
        }
        // A refusal that stopped the rows (a client gone quiet, an ingress limit) keeps its
        // code; anything else is the client's bad data.
        EngineError::Rows(e) => match e.as_ref() {
            datafusion::error::DataFusionError::External(inner) => {
                match inner.downcast_ref::<Status>() {
                    Some(status) => Status::new(
                        status.code(),
                        format!("the rows could not be written: {}", status.message()),
                    ),
                    None => Status::invalid_argument(format!("the rows could not be written: {e}")),
                }
            }
            _ => Status::invalid_argument(format!("the rows could not be written: {e}")),
        },
        other => Status::internal(other.to_string()),
    }
}

fn context_status(e: ContextError) -> Status {
    match e {
        ContextError::Catalog(CatalogError::NoSuchTable(ns, t)) => {
            Status::not_found(format!("table {ns}.{t} does not exist"))
        }
        ContextError::Catalog(CatalogError::NoSuchNamespace(ns)) => {
            Status::not_found(format!("schema {ns} does not exist"))
        }
        ContextError::Catalog(CatalogError::TableExists(ns, t)) => {
            Status::already_exists(format!("table {ns}.{t} already exists"))
        }
        ContextError::Catalog(CatalogError::NamespaceExists(ns)) => {
            Status::already_exists(format!("schema {ns} already exists"))
        }
        ContextError::Catalog(CatalogError::Name(e)) => Status::invalid_argument(e.to_string()),
        ContextError::Engine(e) => engine_status(*e),
        ContextError::Stage(StageError::NotFound(path)) => {
            Status::not_found(format!("nothing in the stage at {path:?}"))
        }
        ContextError::Load(e) => Status::invalid_argument(e.to_string()),
        other => Status::internal(other.to_string()),
    }
}

impl LakeFlightSql {
    pub fn new(role: Role, tokens: Option<Tokens>, limits: Limits) -> Self {
        let read_only = matches!(role, Role::Query { .. });
        let sql_info = Arc::new(super::info::sql_info(read_only));
        Self {
            role,
            sql_info,
            type_info: Arc::new(super::types::xdbc_type_info()),
            tokens,
            handles: HandleCodec::new(),
            redactor: Redactor::default(),
            governor: Governor::new(limits),
            plans: Arc::default(),
        }
        .with_redactor()
    }

    fn with_redactor(mut self) -> Self {
        if let crate::engine::Warehouse::Local(root) = self.engine().warehouse() {
            self.redactor = Redactor::for_data_dir(root);
        }
        self
    }

    pub(super) fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    fn engine(&self) -> &Engine {
        match &self.role {
            Role::Query { context, .. } => context.engine(),
            Role::Metadata(context) => context.engine().reader(),
        }
    }

    /// The metadata context, or PERMISSION_DENIED naming where writes go.
    fn writer(&self) -> Result<&MetadataContext, Status> {
        match &self.role {
            Role::Metadata(context) => Ok(context),
            Role::Query {
                metadata_endpoint, ..
            } => Err(Status::permission_denied(format!(
                "this is the read-only query endpoint; send writes to the metadata endpoint{}",
                metadata_endpoint
                    .as_deref()
                    .map(|e| format!(" {e}"))
                    .unwrap_or_default()
            ))),
        }
    }

    async fn session(&self) -> Result<SessionContext, Status> {
        sql::session(self.engine(), self.governor.query_pool()).await
    }

    /// Performs a write to completion, whatever the client does meanwhile: a deadline or a
    /// disconnect drops this call's future, so the write runs in a task of its own (a
    /// `CREATE TABLE … AS` stopped half-way left a registered table without a dataset).
    /// Returns affected rows.
    async fn write(&self, ctx: &SessionContext, write: Write) -> Result<i64, Status> {
        self.writer()?;
        // Writes count among the endpoint's running statements too; once admitted, a write
        // runs to completion.
        let slot = self.governor.admit()?;
        let (this, ctx) = (self.clone(), ctx.clone());
        tokio::spawn(async move {
            let _slot = slot;
            this.write_now(&ctx, write).await
        })
        .await
        .map_err(|e| Status::internal(format!("the write failed inside the server: {e}")))?
    }

    async fn write_now(&self, ctx: &SessionContext, write: Write) -> Result<i64, Status> {
        let metadata = self.writer()?;
        match write {
            Write::CreateSchema {
                namespace,
                if_not_exists,
            } => match metadata.registry().create_namespace(&namespace).await {
                Err(CatalogError::NamespaceExists(_)) if if_not_exists => Ok(0),
                other => other.map(|_| 0).map_err(|e| context_status(e.into())),
            },
            Write::CreateTable {
                table,
                schema,
                if_not_exists,
                rows,
            } => {
                // A `CREATE TABLE … AS SELECT` streams its rows into the first commit.
                let rows = match rows {
                    Some(plan) => stream_into(ctx, plan, &schema).await?,
                    None => crate::engine::rows_of(schema, Vec::new()),
                };
                match metadata.create_table_stream(&table, rows).await {
                    Err(ContextError::Catalog(CatalogError::TableExists(..))) if if_not_exists => {
                        Ok(0)
                    }
                    other => other.map(|(_, rows)| rows as i64).map_err(context_status),
                }
            }
            Write::DropTable { table, if_exists } => match metadata.drop_table(&table).await {
                Err(ContextError::Catalog(CatalogError::NoSuchTable(..))) if if_exists => Ok(0),
                other => other.map(|_| 0).map_err(context_status),
            },
            Write::Insert { table, rows } => {
                // A prepared INSERT redeemed without values still holds its placeholders.
                if !rows.get_parameter_types().map_err(sql::status)?.is_empty() {
                    return Err(super::bind::unbound());
                }
                let entry = metadata
                    .registry()
                    .get_table(&table.namespace, &table.table)
                    .await
                    .map_err(|e| context_status(e.into()))?;
                // Streamed from DataFusion into the one commit: memory stays bounded however
                // many rows the SELECT produces.
                let rows = stream_into(ctx, rows, &entry.schema).await?;
                let committed = metadata
                    .engine()
                    .append_stream(&table, rows)
                    .await
                    .map_err(engine_status)?;
                Ok(committed.rows as i64)
            }
            Write::Delete { table, predicate } => {
                let predicate = predicate.unwrap_or_else(|| "true".to_owned());
                let committed = metadata
                    .engine()
                    .delete(&table, &predicate)
                    .await
                    .map_err(engine_status)?;
                Ok(committed.rows as i64)
            }
            Write::CopyInto(copy) => metadata
                .copy_into(&copy.table, &copy.path, copy.format)
                .await
                .map(|rows| rows as i64)
                .map_err(context_status),
        }
    }

    /// Plans `sql`; writes are executed (metadata) or refused (query) right here.
    async fn statement_info(
        &self,
        handle: Handle,
        descriptor: FlightDescriptor,
    ) -> Result<FlightInfo, Status> {
        let ctx = self.session().await?;
        let (sql, params) = handle.clone().statement()?;
        let (schema, handle) = match sql::plan(&ctx, &sql, params).await? {
            Planned::Read(plan) => {
                let schema = wire_schema(plan.schema().as_arrow());
                let id = self.plans.put(ctx.clone(), plan);
                let statement = Box::new(handle);
                (schema, Handle::Planned { id, statement })
            }
            Planned::Write(write) => (rows_schema(), Handle::Done(self.write(&ctx, write).await?)),
        };
        let ticket = TicketStatementQuery {
            statement_handle: self.handles.encode(&handle).into(),
        };
        let endpoint =
            FlightEndpoint::new().with_ticket(Ticket::new(ticket.as_any().encode_to_vec()));
        FlightInfo::new()
            .try_with_schema(&schema)
            .map_err(|e| Status::internal(format!("cannot encode the schema: {e}")))
            .map(|info| info.with_endpoint(endpoint).with_descriptor(descriptor))
    }

    /// The schema GetFlightInfo would report for a query, without executing anything: a write
    /// is neither run nor (on query) allowed, so GetSchema can never change the lake.
    async fn statement_schema(&self, handle: Handle) -> Result<SchemaRef, Status> {
        let ctx = self.session().await?;
        let (sql, params) = handle.statement()?;
        match sql::plan(&ctx, &sql, params).await? {
            Planned::Read(plan) => Ok(wire_schema(plan.schema().as_arrow())),
            Planned::Write(_) => self.writer().map(|_| rows_schema()),
        }
    }

    /// GetSchema: the schema of a statement or prepared statement (planned, not run), or of a
    /// catalog command (the same schema its FlightInfo carries).
    pub(super) async fn schema(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<SchemaResult, Status> {
        use arrow_flight::sql::{Any, Command};
        let any = Any::decode(&*request.get_ref().cmd).map_err(|e| {
            Status::invalid_argument(format!("GetSchema needs a Flight SQL command: {e}"))
        })?;
        let command = Command::try_from(any).map_err(|e| {
            Status::invalid_argument(format!("GetSchema needs a Flight SQL command: {e}"))
        })?;
        let schema = match command {
            Command::CommandStatementQuery(query) => {
                self.statement_schema(Handle::Sql(query.query)).await?
            }
            Command::CommandPreparedStatementQuery(query) => {
                self.statement_schema(self.handles.decode(&query.prepared_statement_handle)?)
                    .await?
            }
            Command::CommandGetCatalogs(_)
            | Command::CommandGetDbSchemas(_)
            | Command::CommandGetTables(_)
            | Command::CommandGetTableTypes(_)
            | Command::CommandGetSqlInfo(_)
            | Command::CommandGetPrimaryKeys(_)
            | Command::CommandGetXdbcTypeInfo(_) => {
                let info = FlightService::get_flight_info(self, request)
                    .await?
                    .into_inner();
                return Ok(SchemaResult {
                    schema: info.schema,
                });
            }
            other => {
                return Err(Status::unimplemented(format!(
                    "GetSchema is not supported for {}",
                    other.type_url()
                )));
            }
        };
        SchemaResult::try_from(SchemaAsIpc::new(&schema, &Default::default()))
            .map_err(|e| Status::internal(format!("cannot encode the schema: {e}")))
    }

    async fn stream_handle(&self, handle: &[u8]) -> Result<Response<DoGetStream>, Status> {
        match self.handles.decode(handle)? {
            Handle::Done(rows) => {
                let schema = rows_schema();
                let batch = RecordBatch::try_new(
                    schema.clone(),
                    vec![Arc::new(arrow::array::Int64Array::from(vec![rows]))],
                )
                .map_err(|e| Status::internal(e.to_string()))?;
                Ok(Response::new(encode(
                    schema,
                    stream::iter([Ok(batch)]).boxed(),
                )))
            }
            handle => {
                // The plan GetFlightInfo made, or (redeemed before, expired, another process)
                // the statement planned again.
                // A planned statement is registered as running from here on, so a
                // CancelFlightInfo while it plans or executes still stops it.
                let (kept, run) = match &handle {
                    Handle::Planned { id, .. } => {
                        let (kept, run) = self.plans.start(*id)?;
                        (kept, Some(run))
                    }
                    _ => (None, None),
                };
                let (ctx, plan) = match kept {
                    Some(kept) => kept,
                    None => self.plan_read(handle).await?,
                };
                let unbound = plan.get_parameter_fields().map_err(sql::status)?;
                if !unbound.is_empty() {
                    let mut names: Vec<&String> = unbound.keys().collect();
                    names.sort();
                    return Err(Status::invalid_argument(format!(
                        "the statement has parameters {names:?} and none were bound: bind one \
                         row of values (a prepared statement's DoPut)"
                    )));
                }
                // A slot among the endpoint's running queries, held by the stream.
                let slot = self.governor.admit()?;
                let deadline = self.governor.limits.query_timeout;
                let schema = wire_schema(plan.schema().as_arrow());
                // EXPLAIN's text names table locations: the server's paths are hidden in it.
                let explain = matches!(plan, LogicalPlan::Explain(_) | LogicalPlan::Analyze(_));
                let redactor = self.redactor.clone();
                let frame = ctx.execute_logical_plan(plan).await.map_err(sql::status)?;
                // Dropping the response stream drops this DataFusion stream: the work stops.
                let batches = frame.execute_stream().await.map_err(sql::status)?;
                let target = schema.clone();
                let wire = batches
                    // The gRPC code of what failed (RESOURCE_EXHAUSTED, …), not INTERNAL.
                    .map_err(|e| arrow_flight::error::FlightError::Tonic(Box::new(sql::status(e))))
                    .and_then(move |batch| {
                        let target = target.clone();
                        let batch = if explain {
                            redactor.batch(batch)
                        } else {
                            batch
                        };
                        async move {
                            to_wire(batch, &target).map_err(arrow_flight::error::FlightError::from)
                        }
                    })
                    .boxed();
                let wire = match run {
                    Some(run) => PlanCache::cancellable(run, wire),
                    None => wire,
                };
                let wire = with_deadline(wire, deadline, slot);
                Ok(Response::new(encode(schema, wire)))
            }
        }
    }

    /// A statement handle's read, planned in a new session; a write is refused (it ran when
    /// GetFlightInfo planned it).
    async fn plan_read(&self, handle: Handle) -> Result<(SessionContext, LogicalPlan), Status> {
        let (sql, params) = handle.statement()?;
        let ctx = self.session().await?;
        match sql::plan(&ctx, &sql, params).await? {
            Planned::Read(plan) => Ok((ctx, plan)),
            Planned::Write(_) => Err(Status::invalid_argument(
                "a write cannot be fetched; it ran when planned",
            )),
        }
    }

    /// Bulk ingest (ADBC `adbc_ingest`): create, append, replace or create-append, one commit.
    async fn ingest(
        &self,
        metadata: &MetadataContext,
        command: CommandStatementIngest,
        data: PeekableFlightDataStream,
    ) -> Result<i64, Status> {
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
        let namespace = command
            .schema
            .as_deref()
            .ok_or_else(|| Status::invalid_argument("ingest needs a target schema (db_schema)"))
            .and_then(|s| {
                NamespaceName::parse(s).map_err(|e| Status::invalid_argument(e.to_string()))
            })?;
        let name = TableName::parse(&command.table)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let table = TableRef::new(namespace, name);
        let options = command.table_definition_options.unwrap_or_default();
        let (if_missing, if_exists) = (options.if_not_exist(), options.if_exists());

        let mut stream = FlightRecordBatchStream::new_from_flight_data(
            super::ingress::checked(data).map_err(arrow_flight::error::FlightError::from),
        );
        // The first batch brings the schema; the rest are read as the write goes.
        let first = stream
            .try_next()
            .await
            .map_err(|e| decode_status("bad ingest data", e))?;
        let schema = stream
            .schema()
            .cloned()
            .or_else(|| first.as_ref().map(RecordBatch::schema))
            .ok_or_else(|| Status::invalid_argument("ingest sent no schema"))?;
        let existing = match metadata
            .registry()
            .get_table(&table.namespace, &table.table)
            .await
        {
            Ok(entry) => Some(entry),
            Err(CatalogError::NoSuchTable(..)) => None,
            Err(e) => return Err(context_status(e.into())),
        };

        // Streamed into the one commit, whatever the mode: memory stays bounded whatever the
        // client sends. The table's lock is held while it streams, so a client that stops
        // sending fails its ingest after the endpoint's time limit instead of blocking the
        // table's other writes.
        let sent = futures::stream::iter(first.map(Ok)).chain(
            idle_limited(stream, self.governor.limits.query_timeout).map_err(|e| match e {
                arrow_flight::error::FlightError::Tonic(status) => {
                    datafusion::error::DataFusionError::External(Box::new(*status))
                }
                other => datafusion::error::DataFusionError::External(Box::new(other)),
            }),
        );
        let committed = match (existing, if_exists, if_missing) {
            (Some(entry), TableExistsOption::Append, _) => {
                // By name and lossless, the same rules as COPY INTO: reordered columns or a
                // value that does not fit are refused, never written as NULLs.
                crate::conform::check(&schema, &entry.schema).map_err(|problems| {
                    Status::invalid_argument(format!(
                        "the ingested rows do not match {table}: {}",
                        problems.join("; ")
                    ))
                })?;
                let target = entry.schema.clone();
                let rows = sent.and_then(move |batch| {
                    futures::future::ready(
                        crate::conform::cast_batch(batch, &target)
                            .map_err(datafusion::error::DataFusionError::from),
                    )
                });
                metadata
                    .engine()
                    .append_stream(
                        &table,
                        crate::engine::row_stream(entry.schema.clone(), rows),
                    )
                    .await
                    .map_err(engine_status)?
                    .rows
            }
            (Some(_), TableExistsOption::Replace, _) => {
                metadata
                    .replace_table(&table, crate::engine::row_stream(schema, sent))
                    .await
                    .map_err(context_status)?
                    .1
            }
            (Some(_), _, _) => {
                return Err(Status::already_exists(format!(
                    "table {table} already exists"
                )));
            }
            (None, _, TableNotExistOption::Create) => {
                metadata
                    .create_table_stream(&table, crate::engine::row_stream(schema, sent))
                    .await
                    .map_err(context_status)?
                    .1
            }
            (None, _, TableNotExistOption::Fail | TableNotExistOption::Unspecified) => {
                return Err(Status::not_found(format!("table {table} does not exist")));
            }
        };
        Ok(committed as i64)
    }

    fn metadata_info(
        schema: &Schema,
        ticket: Vec<u8>,
        descriptor: FlightDescriptor,
    ) -> Result<Response<FlightInfo>, Status> {
        let info = FlightInfo::new()
            .try_with_schema(schema)
            .map_err(|e| Status::internal(e.to_string()))?
            .with_endpoint(FlightEndpoint::new().with_ticket(Ticket::new(ticket)))
            .with_descriptor(descriptor);
        Ok(Response::new(info))
    }

    /// CancelFlightInfo: cancels the planned statement of each of the info's tickets.
    fn cancel_flight_info(
        &self,
        body: &[u8],
    ) -> Result<arrow_flight::CancelFlightInfoResult, Status> {
        use arrow_flight::sql::{Any, Command};
        let request = arrow_flight::CancelFlightInfoRequest::decode(body).map_err(|e| {
            Status::invalid_argument(format!(
                "CancelFlightInfo needs a CancelFlightInfoRequest: {e}"
            ))
        })?;
        let info = request
            .info
            .ok_or_else(|| Status::invalid_argument("CancelFlightInfo names no FlightInfo"))?;
        let mut status = arrow_flight::CancelStatus::NotCancellable;
        for endpoint in info.endpoint {
            let Some(ticket) = endpoint.ticket else {
                continue;
            };
            let command = Any::decode(&*ticket.ticket)
                .map_err(|e| Status::invalid_argument(format!("not a lake ticket: {e}")))
                .and_then(|any| {
                    Command::try_from(any)
                        .map_err(|e| Status::invalid_argument(format!("not a lake ticket: {e}")))
                })?;
            // Only a statement's ticket names something that runs.
            let Command::TicketStatementQuery(ticket) = command else {
                continue;
            };
            if let Handle::Planned { id, .. } = self.handles.decode(&ticket.statement_handle)?
                && self.plans.cancel(id) == super::plans::Cancel::Cancelled
            {
                status = arrow_flight::CancelStatus::Cancelled;
            }
        }
        Ok(arrow_flight::CancelFlightInfoResult {
            status: status as i32,
        })
    }

    async fn catalog(&self) -> Result<LakeCatalog, Status> {
        LakeCatalog::listed(self.engine())
            .await
            .map_err(engine_status)
    }
}

type FlightBatches =
    futures::stream::BoxStream<'static, Result<RecordBatch, arrow_flight::error::FlightError>>;

/// `stream`, ended with DEADLINE_EXCEEDED once `limit` has passed (dropping it stops the
/// query's work); `slot` is released when the stream ends or is dropped.
fn with_deadline(
    stream: FlightBatches,
    limit: std::time::Duration,
    slot: tokio::sync::OwnedSemaphorePermit,
) -> FlightBatches {
    let deadline = tokio::time::Instant::now() + limit;
    // The slot is released at the deadline even if the client never reads again (the stream
    // is only polled when it does): a watchdog takes it back.
    let slot = Arc::new(std::sync::Mutex::new(Some(slot)));
    let watchdog = {
        let slot = slot.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(deadline).await;
            slot.lock().unwrap_or_else(|p| p.into_inner()).take();
        })
    };
    let guard = AbortOnDrop(watchdog);
    stream::unfold(Some((stream, (slot, guard))), move |state| async move {
        let (mut stream, slot) = state?;
        tokio::select! {
            item = stream.next() => item.map(|item| (item, Some((stream, slot)))),
            () = tokio::time::sleep_until(deadline) => Some((
                Err(arrow_flight::error::FlightError::Tonic(Box::new(Status::deadline_exceeded(
                    format!(
                        "the query ran past its {} s limit (LAKE_QUERY_TIMEOUT_SECONDS) and was stopped",
                        limit.as_secs()
                    ),
                )))),
                None,
            )),
        }
    })
    .boxed()
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

/// Aborts a task when dropped (the stream ended or was dropped before its deadline).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A refusal from the transport or the ingress check keeps its code; anything else is the
/// client's bad data.
fn decode_status(what: &str, e: arrow_flight::error::FlightError) -> Status {
    match e {
        arrow_flight::error::FlightError::Tonic(status) => *status,
        other => Status::invalid_argument(format!("{what}: {other}")),
    }
}

/// The parameter batches a client sends with DoPut: every message checked before decoding, and
/// no more than `limit` bytes of them held.
async fn parameters(
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
        .map_err(|e| decode_status("bad parameters", e))?
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

fn encode(schema: SchemaRef, batches: FlightBatches) -> DoGetStream {
    FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .with_max_flight_data_size(MAX_FLIGHT_DATA)
        .build(batches)
        .map_err(Status::from)
        .boxed()
}

fn single(
    batch: Result<RecordBatch, arrow_flight::error::FlightError>,
    schema: SchemaRef,
) -> Response<DoGetStream> {
    Response::new(encode(schema, stream::iter([batch]).boxed()))
}

/// `plan`'s rows as a stream, each batch cast to `target` (see [`cast_to_table`]).
async fn stream_into(
    ctx: &SessionContext,
    plan: datafusion::logical_expr::LogicalPlan,
    target: &SchemaRef,
) -> Result<crate::engine::RowStream, Status> {
    let frame = ctx.execute_logical_plan(plan).await.map_err(sql::status)?;
    let batches = frame.execute_stream().await.map_err(sql::status)?;
    let table = target.clone();
    let cast = batches.and_then(move |batch| {
        let result = cast_to_table(batch, &table)
            .map_err(|s| datafusion::error::DataFusionError::Plan(s.message().to_owned()));
        futures::future::ready(result)
    });
    Ok(crate::engine::row_stream(target.clone(), cast))
}

/// Casts a plan's rows (which DataFusion has aligned to the table's columns) to the table's
/// schema, column by column; a mismatch is the client's error.
fn cast_to_table(batch: RecordBatch, target: &SchemaRef) -> Result<RecordBatch, Status> {
    if batch.num_columns() != target.fields().len() {
        return Err(Status::invalid_argument(format!(
            "the rows have {} columns, the table has {}",
            batch.num_columns(),
            target.fields().len()
        )));
    }
    // Not "safe": a value that does not fit is an error, never a silent NULL.
    let options = arrow::compute::CastOptions {
        safe: false,
        ..Default::default()
    };
    let columns = batch
        .columns()
        .iter()
        .zip(target.fields())
        .map(|(c, f)| arrow::compute::cast_with_options(c, f.data_type(), &options))
        .collect::<Result<Vec<_>, _>>()
        .and_then(|columns| RecordBatch::try_new(target.clone(), columns))
        .map_err(|e| Status::invalid_argument(format!("the rows do not match the table: {e}")))?;
    Ok(columns)
}

#[tonic::async_trait]
impl FlightSqlService for LakeFlightSql {
    type FlightService = LakeFlightSql;

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}

    /// Basic credentials (the password is a token) → `authorization: Bearer <token>`, as JDBC and
    /// ADBC expect. Without configured tokens, authentication is off and Handshake is a no-op.
    async fn do_handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<
        Response<Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>>,
        Status,
    > {
        let token = match &self.tokens {
            Some(tokens) => tokens.authenticate(request.metadata())?,
            None => String::new(),
        };
        let reply = HandshakeResponse {
            protocol_version: 0,
            payload: token.clone().into(),
        };
        let mut response: Response<
            Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>,
        > = Response::new(Box::pin(stream::iter([Ok(reply)])));
        if !token.is_empty() {
            let header = format!("Bearer {token}")
                .parse()
                .map_err(|_| Status::internal("the token is not a valid header value"))?;
            response.metadata_mut().insert("authorization", header);
        }
        Ok(response)
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        Ok(Response::new(
            self.statement_info(Handle::Sql(query.query), request.into_inner())
                .await?,
        ))
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.stream_handle(&ticket.statement_handle).await
    }

    async fn do_put_statement_update(
        &self,
        command: CommandStatementUpdate,
        _request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        self.writer()?;
        let ctx = self.session().await?;
        match sql::plan(&ctx, &command.query, None).await? {
            Planned::Write(write) => self.write(&ctx, write).await,
            Planned::Read(_) => Err(Status::invalid_argument(
                "this is a query; execute it as a query, not an update",
            )),
        }
    }

    async fn do_put_statement_ingest(
        &self,
        command: CommandStatementIngest,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        // Refused before a byte of data is read on the query endpoint.
        self.writer()?;
        // Like every write, it runs to completion in its own task (see `write`).
        let slot = self.governor.admit()?;
        let (this, data) = (self.clone(), request.into_inner());
        tokio::spawn(async move {
            let _slot = slot;
            let metadata = this.writer()?;
            this.ingest(metadata, command, data).await
        })
        .await
        .map_err(|e| Status::internal(format!("the ingest failed inside the server: {e}")))?
    }

    /// A prepared update: its statement with no values, one row or many. Every row of an
    /// `INSERT` is one write, one commit — what JDBC's `executeBatch` and ADBC's `executemany`
    /// send as one DoPut.
    async fn do_put_prepared_statement_update(
        &self,
        command: CommandPreparedStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        self.writer()?;
        let bound = parameters(request.into_inner(), MAX_BATCH_PARAMS_BYTES).await?;
        let rows = super::bind::rows_of(&bound)?;
        let (sql, params) = self
            .handles
            .decode(&command.prepared_statement_handle)?
            .statement()?;
        let ctx = self.session().await?;
        // Rows sent with the update are the ones to write; a handle's own row (bound by an
        // earlier DoPut, as ADBC does before `executemany`) counts only when none are sent.
        let planned = if rows.is_empty() {
            sql::plan(&ctx, &sql, params).await?
        } else {
            sql::plan_rows(&ctx, &sql, rows).await?
        };
        match planned {
            Planned::Write(write) => self.write(&ctx, write).await,
            Planned::Read(_) => Err(Status::invalid_argument(
                "this is a query; execute it as a query, not an update",
            )),
        }
    }

    /// Plans the statement to describe it: a query's result schema, or an empty one for a write
    /// (JDBC tells updates from queries by it), and the parameters' types.
    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        _request: Request<Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        let ctx = self.session().await?;
        let (schema, parameters) = match sql::plan(&ctx, &query.query, None).await? {
            Planned::Read(plan) => (
                wire_schema(plan.schema().as_arrow()),
                super::bind::parameter_schema(&plan)?,
            ),
            Planned::Write(write) => {
                self.writer()?;
                let parameters = match write.parameters() {
                    Some(plan) => super::bind::parameter_schema(plan)?,
                    None => None,
                };
                (Arc::new(Schema::empty()), parameters)
            }
        };
        let IpcMessage(dataset_schema) = SchemaAsIpc::new(&schema, &Default::default())
            .try_into()
            .map_err(|e: arrow::error::ArrowError| Status::internal(e.to_string()))?;
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle: self.handles.encode(&Handle::Sql(query.query)).into(),
            dataset_schema,
            parameter_schema: super::bind::schema_bytes(parameters)?,
        })
    }

    async fn do_put_prepared_statement_query(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        let (sql, _) = self
            .handles
            .decode(&query.prepared_statement_handle)?
            .statement()?;
        let batches = parameters(request.into_inner(), MAX_PARAMS_BYTES).await?;
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        let handle = match (rows, batches.into_iter().find(|b| b.num_rows() > 0)) {
            (0, _) | (_, None) => Handle::Sql(sql),
            (1, Some(batch)) => Handle::Bound {
                sql,
                params: params_to_ipc(&batch)?,
            },
            (n, _) => {
                return Err(Status::invalid_argument(format!(
                    "a query binds one row of parameters, got {n}"
                )));
            }
        };
        Ok(DoPutPreparedStatementResult {
            prepared_statement_handle: Some(self.handles.encode(&handle).into()),
        })
    }

    /// Flight-core session actions ADBC sends are tolerated; anything else is UNIMPLEMENTED.
    async fn do_action_fallback(
        &self,
        request: Request<Action>,
    ) -> Result<Response<<Self as FlightService>::DoActionStream>, Status> {
        match request.get_ref().r#type.as_str() {
            // Sessions are stateless here: CloseSessionResult { status: CLOSED } (field 1 = 1).
            "CloseSession" => {
                let result = arrow_flight::Result {
                    body: vec![0x08, 0x01].into(),
                };
                Ok(Response::new(Box::pin(stream::iter([Ok(result)]))))
            }
            DESCRIBE_STAGE_ACTION => {
                let descriptor = match &self.role {
                    Role::Query { context, .. } => context.stage(),
                    Role::Metadata(context) => context.stage().descriptor(),
                };
                let result = arrow_flight::Result {
                    body: descriptor.encode().into(),
                };
                Ok(Response::new(Box::pin(stream::iter([Ok(result)]))))
            }
            METADATA_ENDPOINT_ACTION => {
                let endpoint = match &self.role {
                    Role::Query {
                        metadata_endpoint, ..
                    } => metadata_endpoint.clone().unwrap_or_default(),
                    Role::Metadata(_) => String::new(),
                };
                let result = arrow_flight::Result {
                    body: endpoint.into_bytes().into(),
                };
                Ok(Response::new(Box::pin(stream::iter([Ok(result)]))))
            }
            "CancelFlightInfo" => {
                let result = self.cancel_flight_info(&request.get_ref().body)?;
                let result = arrow_flight::Result {
                    body: result.encode_to_vec().into(),
                };
                Ok(Response::new(Box::pin(stream::iter([Ok(result)]))))
            }
            other => Err(Status::unimplemented(format!(
                "action {other:?} is not supported"
            ))),
        }
    }

    async fn do_action_begin_transaction(
        &self,
        _query: ActionBeginTransactionRequest,
        _request: Request<Action>,
    ) -> Result<ActionBeginTransactionResult, Status> {
        Err(Status::unimplemented(
            "transactions are not supported: each statement commits on its own (autocommit)",
        ))
    }

    async fn list_custom_actions(&self) -> Option<Vec<Result<ActionType, Status>>> {
        let action = |name: &str, description: &str| {
            Ok(ActionType {
                r#type: name.into(),
                description: description.into(),
            })
        };
        Some(vec![
            action(
                "CloseSession",
                "Close the session (lake keeps no session state)",
            ),
            action(
                DESCRIBE_STAGE_ACTION,
                "The managed stage's location as a versioned JSON descriptor (never a credential)",
            ),
            action(
                METADATA_ENDPOINT_ACTION,
                "The metadata endpoint that takes writes (empty if none is configured)",
            ),
            action(
                "CancelFlightInfo",
                "Cancel the query of a FlightInfo: its DoGet ends with CANCELLED",
            ),
        ])
    }

    async fn do_action_close_prepared_statement(
        &self,
        _query: ActionClosePreparedStatementRequest,
        _request: Request<Action>,
    ) -> Result<(), Status> {
        Ok(())
    }

    async fn get_flight_info_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let handle = self.handles.decode(&query.prepared_statement_handle)?;
        Ok(Response::new(
            self.statement_info(handle, request.into_inner()).await?,
        ))
    }

    async fn do_get_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.stream_handle(&query.prepared_statement_handle).await
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder(&self.sql_info).schema();
        Self::metadata_info(
            &schema,
            query.as_any().encode_to_vec(),
            request.into_inner(),
        )
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let builder = query.into_builder(&self.sql_info);
        let schema = builder.schema();
        Ok(single(builder.build(), schema))
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder().schema();
        Self::metadata_info(
            &schema,
            query.as_any().encode_to_vec(),
            request.into_inner(),
        )
    }

    async fn do_get_catalogs(
        &self,
        query: CommandGetCatalogs,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let mut builder = query.into_builder();
        builder.append(CATALOG);
        let schema = builder.schema();
        Ok(single(builder.build(), schema))
    }

    async fn get_flight_info_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        Self::metadata_info(
            &schema,
            query.as_any().encode_to_vec(),
            request.into_inner(),
        )
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let catalog = self.catalog().await?;
        let mut builder = query.into_builder();
        for (ns, _) in catalog.tables() {
            builder.append(CATALOG, ns);
        }
        let schema = builder.schema();
        Ok(single(builder.build(), schema))
    }

    async fn get_flight_info_tables(
        &self,
        query: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        Self::metadata_info(
            &schema,
            query.as_any().encode_to_vec(),
            request.into_inner(),
        )
    }

    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let include_schema = query.include_schema;
        let catalog = self.catalog().await?;
        let mut builder = query.into_builder();
        for (ns, tables) in catalog.tables() {
            for table in tables {
                let table_schema = if include_schema {
                    let t = crate::engine::TableRef::new(
                        crate::catalog::NamespaceName::parse(ns)
                            .map_err(|e| Status::internal(e.to_string()))?,
                        table.clone(),
                    );
                    match self.engine().open(&t, None).await {
                        Ok(dataset) => {
                            super::types::described(&wire_schema(&Schema::from(dataset.schema())))
                        }
                        // Listed without columns: one unreadable dataset must not hide the rest.
                        Err(e) => {
                            tracing::warn!(table = %t, error = %e, "a table cannot be opened");
                            Arc::new(Schema::empty())
                        }
                    }
                } else {
                    Arc::new(Schema::empty())
                };
                builder
                    .append(CATALOG, ns, table.as_str(), "TABLE", &table_schema)
                    .map_err(|e| Status::internal(e.to_string()))?;
            }
        }
        let schema = builder.schema();
        Ok(single(builder.build(), schema))
    }

    async fn get_flight_info_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder(&self.type_info).schema();
        Self::metadata_info(
            &schema,
            query.as_any().encode_to_vec(),
            request.into_inner(),
        )
    }

    async fn do_get_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let builder = query.into_builder(&self.type_info);
        let schema = builder.schema();
        Ok(single(builder.build(), schema))
    }

    async fn get_flight_info_primary_keys(
        &self,
        query: CommandGetPrimaryKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        Self::metadata_info(
            &primary_keys_schema(),
            query.as_any().encode_to_vec(),
            request.into_inner(),
        )
    }

    async fn do_get_primary_keys(
        &self,
        _query: CommandGetPrimaryKeys,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let schema = primary_keys_schema();
        Ok(single(Ok(RecordBatch::new_empty(schema.clone())), schema))
    }

    async fn get_flight_info_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder().schema();
        Self::metadata_info(
            &schema,
            query.as_any().encode_to_vec(),
            request.into_inner(),
        )
    }

    async fn do_get_table_types(
        &self,
        query: CommandGetTableTypes,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let mut builder = query.into_builder();
        builder.append("TABLE");
        let schema = builder.schema();
        Ok(single(builder.build(), schema))
    }
}
