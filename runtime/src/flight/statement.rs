//! Statements and prepared statements: planned for GetFlightInfo (a write runs there, on
//! metadata), described for GetSchema and CreatePreparedStatement, bound by a prepared query's
//! DoPut. The plan a read's GetFlightInfo made is started there or kept for its DoGet
//! (`plans.rs`, `fetch.rs`).

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::sql::server::PeekableFlightDataStream;
use arrow_flight::sql::{
    ActionCreatePreparedStatementRequest, ActionCreatePreparedStatementResult,
    CommandPreparedStatementQuery, ProstMessageExt, TicketStatementQuery,
};
use arrow_flight::{
    FlightDescriptor, FlightEndpoint, FlightInfo, IpcMessage, SchemaAsIpc, SchemaResult, Ticket,
};
use datafusion::prelude::SessionContext;
use prost::Message;
use tonic::{Request, Status};

use super::handle::{Handle, MAX_PARAMS_BYTES, params_to_ipc};
use super::options::SessionOptions;
use super::prepared::{ReadPlan, Statement};
use super::service::LakeFlightSql;
use super::sql::{self, Planned};

/// The result schema of a write: the rows it affected.
pub(super) fn rows_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        "rows",
        DataType::Int64,
        false,
    )]))
}

impl LakeFlightSql {
    /// Plans `sql`; writes are executed (metadata) or refused (query) right here.
    pub(super) async fn statement_info(
        &self,
        handle: Handle,
        descriptor: FlightDescriptor,
        options: SessionOptions,
    ) -> Result<FlightInfo, Status> {
        // A prepared statement runs in the session it was prepared in.
        let options = handle.options_or(options);
        let handle = handle.in_session(&options);
        let (sql, params) = handle.clone().statement()?;
        // Planned in a task of its own: a write the client sent is done, whenever it gives up.
        let this = self.clone();
        let (schema, handle) = super::update::detached(
            "statement",
            Box::pin(async move {
                let ctx = this.session(&options).await?;
                let planned = this
                    .governor
                    .governed(this.plan_statement(&ctx, &sql, params, &options))
                    .await?;
                Ok(match planned {
                    Statement::Read(plan) => {
                        let schema = super::types::result_schema(
                            plan.plan(),
                            sql::chosen_schema(&ctx).as_ref(),
                        );
                        // Executing from here while early starts hold under half the
                        // slots, else when its DoGet comes.
                        let id = match this.governor.admit_early() {
                            Some(slot) => this.start_early(ctx, plan, schema.clone(), slot),
                            None => this.plans.put(ctx, plan),
                        };
                        let statement = Box::new(handle);
                        (schema, Handle::Planned { id, statement })
                    }
                    Statement::Write(write) => {
                        (rows_schema(), Handle::Done(this.write(&ctx, write).await?))
                    }
                })
            }),
        )
        .await?;
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
    async fn statement_schema(
        &self,
        handle: Handle,
        options: &SessionOptions,
    ) -> Result<SchemaRef, Status> {
        let ctx = self.session(&handle.options_or(options.clone())).await?;
        let (sql, params) = handle.statement()?;
        match self
            .governor
            .governed(sql::plan(&ctx, &sql, params))
            .await?
        {
            Planned::Read(plan) | Planned::BoundRead { plan, .. } => Ok(
                super::types::result_schema(&plan, sql::chosen_schema(&ctx).as_ref()),
            ),
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
        let options = SessionOptions::from_metadata(request.metadata());
        let any = Any::decode(&*request.get_ref().cmd).map_err(|e| {
            Status::invalid_argument(format!("GetSchema needs a Flight SQL command: {e}"))
        })?;
        let command = Command::try_from(any).map_err(|e| {
            Status::invalid_argument(format!("GetSchema needs a Flight SQL command: {e}"))
        })?;
        let schema = match command {
            Command::CommandStatementQuery(query) => {
                self.statement_schema(Handle::Sql(query.query), &options)
                    .await?
            }
            Command::CommandPreparedStatementQuery(query) => {
                let handle = self.handles.decode(&query.prepared_statement_handle)?;
                self.statement_schema(handle, &options).await?
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

    /// A statement handle's read, planned in a new session; a write is refused (it ran when
    /// GetFlightInfo planned it). The caller holds a slot and keeps the deadline.
    pub(super) async fn plan_read(
        &self,
        handle: Handle,
        options: &SessionOptions,
    ) -> Result<(SessionContext, ReadPlan), Status> {
        let options = handle.options_or(options.clone());
        let ctx = self.session(&options).await?;
        let (sql, params) = handle.statement()?;
        match self.plan_statement(&ctx, &sql, params, &options).await? {
            Statement::Read(plan) => Ok((ctx, plan)),
            Statement::Write(_) => Err(Status::invalid_argument(
                "a write cannot be fetched; it ran when planned",
            )),
        }
    }

    /// Plans the statement to describe it: a query's result schema, or an empty one for a write
    /// (JDBC tells updates from queries by it), and the parameters' types.
    pub(super) async fn prepare(
        &self,
        query: ActionCreatePreparedStatementRequest,
        options: &SessionOptions,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        let ctx = self.session(options).await?;
        let planned = self
            .governor
            .governed(sql::plan(&ctx, &query.query, None))
            .await?;
        let (schema, parameters) = match planned {
            Planned::Read(plan) | Planned::BoundRead { plan, .. } => (
                super::types::result_schema(&plan, sql::chosen_schema(&ctx).as_ref()),
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
            prepared_statement_handle: self
                .handles
                .encode(&Handle::Sql(query.query).in_session(options))
                .into(),
            dataset_schema,
            parameter_schema: super::bind::schema_bytes(parameters)?,
        })
    }

    /// A prepared query's DoPut: its one row of parameters, bound into a new handle.
    pub(super) async fn bind_query(
        &self,
        query: CommandPreparedStatementQuery,
        data: PeekableFlightDataStream,
    ) -> Result<Handle, Status> {
        let prepared = self.handles.decode(&query.prepared_statement_handle)?;
        // The bound handle keeps the session the statement was prepared in.
        let options = prepared.options().unwrap_or_default();
        let sql = prepared.sql()?;
        let batches = super::update::parameters(data, MAX_PARAMS_BYTES).await?;
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        match (rows, batches.into_iter().find(|b| b.num_rows() > 0)) {
            (0, _) | (_, None) => Ok(Handle::Sql(sql).in_session(&options)),
            (1, Some(batch)) => Ok(Handle::Bound {
                sql,
                params: params_to_ipc(&batch)?,
            }
            .in_session(&options)),
            (n, _) => Err(Status::invalid_argument(format!(
                "a query binds one row of parameters, got {n}"
            ))),
        }
    }
}
