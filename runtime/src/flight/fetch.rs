//! DoGet: a statement's rows streamed to the client — under the endpoint's admission slot and
//! deadline, cancellable, each batch cast to its wire schema — or a write's affected rows.

use std::pin::Pin;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow_flight::Ticket;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::sql::{Any, Command};
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use futures::{Stream, StreamExt, TryStreamExt, stream};
use prost::Message as _;
use tonic::{Request, Response, Status};

use super::handle::Handle;
use super::ipc::{Message, Messages};
use super::limits::Slot;
use super::options::SessionOptions;
use super::plans::{PlanCache, Run, Started, Waiting};
use super::prepared::ReadPlan;
use super::service::LakeFlightSql;
use super::sql;
use super::statement::rows_schema;
use super::wire::to_wire;

pub(super) type DoGetStream =
    Pin<Box<dyn Stream<Item = Result<arrow_flight::FlightData, Status>> + Send>>;

pub(super) type FlightBatches =
    futures::stream::BoxStream<'static, Result<RecordBatch, FlightError>>;

impl LakeFlightSql {
    /// DoGet: a statement's rows as messages that reference their batches' buffers; any other
    /// ticket (the catalog commands) through arrow-flight's Flight SQL dispatch.
    pub(super) async fn messages(
        &self,
        request: Request<Ticket>,
    ) -> Result<Response<Messages>, Status> {
        let command = Any::decode(&*request.get_ref().ticket)
            .ok()
            .and_then(|any| Command::try_from(any).ok());
        let handle = match command {
            Some(Command::TicketStatementQuery(ticket)) => ticket.statement_handle,
            Some(Command::CommandPreparedStatementQuery(query)) => query.prepared_statement_handle,
            _ => {
                let response = FlightService::do_get(self, request).await?;
                return Ok(response.map(|data| data.map_ok(Message::whole).boxed()));
            }
        };
        let options = SessionOptions::from_metadata(request.metadata());
        self.fetch(&handle, &options).await
    }

    /// The rows of the statement `handle` names.
    pub(super) async fn fetch(
        &self,
        handle: &[u8],
        options: &SessionOptions,
    ) -> Result<Response<Messages>, Status> {
        match self.handles.decode(handle)? {
            Handle::Done(rows) => {
                let schema = rows_schema();
                let batch = RecordBatch::try_new(
                    schema.clone(),
                    vec![Arc::new(arrow::array::Int64Array::from(vec![rows]))],
                )
                .map_err(|e| Status::internal(e.to_string()))?;
                Ok(Response::new(super::ipc::encode(
                    schema,
                    stream::iter([Ok(batch)]).boxed(),
                )))
            }
            handle => self.fetch_read(handle, options).await,
        }
    }

    async fn fetch_read(
        &self,
        handle: Handle,
        options: &SessionOptions,
    ) -> Result<Response<Messages>, Status> {
        // A statement its GetFlightInfo started holds its slot and deadline already.
        if let Handle::Planned { id, .. } = &handle
            && let Some((started, run)) = self.plans.start_started(*id)?
        {
            return Ok(redeemed(started, run));
        }
        // The plan GetFlightInfo made, or (redeemed before, expired, another process) the
        // statement planned again. A planned statement is registered as running from here on,
        // so a CancelFlightInfo while it plans or executes still stops it.
        // A slot among the endpoint's running statements, held by the stream; planning again
        // runs in it, and the deadline counts from here. Taken first: a DoGet refused for want
        // of one leaves the kept plan for its retry.
        let slot = self.governor.admit()?;
        let deadline = self.governor.deadline();
        let (kept, run) = match &handle {
            Handle::Planned { id, .. } => {
                let (kept, run) = self.plans.start(*id)?;
                (kept, Some(run))
            }
            _ => (None, None),
        };
        let (ctx, plan, run) = match (kept, run) {
            (Some(Waiting::Started(started)), Some(run)) => return Ok(redeemed(started, run)),
            (Some(Waiting::Plan(ctx, plan)), run) => (ctx, *plan, run),
            (_, run) => {
                let (ctx, plan) = self
                    .governor
                    .until(deadline, self.plan_read(handle, options))
                    .await?;
                (ctx, plan, run)
            }
        };
        let (schema, wire) = self.rows(ctx, plan, deadline, slot).await?;
        let wire = match run {
            Some(run) => PlanCache::cancellable(run, wire),
            None => wire,
        };
        Ok(Response::new(super::ipc::encode(schema, wire)))
    }

    /// Starts `plan` (made in `ctx`, its rows of `schema`) now, in `slot`, for the DoGet of
    /// the ticket its GetFlightInfo returns; the id of the started statement (`plans.rs`).
    /// It is planned and executed in a task of its own; an error reaches that DoGet.
    pub(super) fn start_early(
        &self,
        ctx: SessionContext,
        plan: ReadPlan,
        schema: SchemaRef,
        slot: Slot,
    ) -> u64 {
        let deadline = self.governor.deadline();
        let this = self.clone();
        let rows = stream::once(async move { this.rows(ctx, plan, deadline, slot).await })
            .flat_map(|rows| match rows {
                Ok((_, rows)) => rows,
                Err(status) => stream::iter([Err(FlightError::Tonic(Box::new(status)))]).boxed(),
            })
            .boxed();
        self.plans.started(schema, rows)
    }

    /// The rows of `plan` (made in `ctx`) as they are sent, with their schema: executed in
    /// `slot` until `deadline`, each batch cast to its wire schema and cut to the query's
    /// budget. Dropping the stream stops the work and frees the slot.
    pub(super) async fn rows(
        &self,
        ctx: SessionContext,
        plan: ReadPlan,
        deadline: tokio::time::Instant,
        slot: Slot,
    ) -> Result<(SchemaRef, FlightBatches), Status> {
        // A kept plan's functions count their time from its execution.
        super::bounded::rearm(&ctx, deadline.into_std());
        let ctx = self.distribute(ctx, plan.plan());
        let unbound = plan.plan().get_parameter_fields().map_err(sql::status)?;
        if !unbound.is_empty() {
            let mut names: Vec<&String> = unbound.keys().collect();
            names.sort();
            return Err(Status::invalid_argument(format!(
                "the statement has parameters {names:?} and none were bound: bind one row of \
                 values (a prepared statement's DoPut)"
            )));
        }
        let limit = self.governor.limits.query_timeout;
        let schema = super::types::result_schema(plan.plan(), sql::chosen_schema(&ctx).as_ref());
        // EXPLAIN's text names table locations: the server's paths are hidden in it.
        let explain = matches!(
            plan.plan(),
            LogicalPlan::Explain(_) | LogicalPlan::Analyze(_)
        );
        let redactor = self.redactor().clone();
        // Dropping the response stream drops this DataFusion stream: the work stops.
        let batches = self
            .governor
            .until(deadline, async {
                // The session's state for the whole statement, taken from its context rather
                // than copied where nothing else holds it (a copy clones its registries).
                let mut state = sql::into_state(ctx);
                let optimized = match plan {
                    ReadPlan::Unoptimized(plan) => state.optimize(&plan).map_err(sql::status)?,
                    ReadPlan::Optimized(plan) => plan,
                };
                if !super::bounded::builds_more_than_it_reads(&optimized) {
                    state
                        .config_mut()
                        .set_extension(Arc::new(super::distributed::LargeScanBatches));
                }
                // A statement that only reads k rows from vector indices runs in one
                // partition: spreading k rows over workers costs more hand-offs than it saves.
                if super::search::reads_only_indexed_searches(&optimized)
                    .await
                    .map_err(sql::status)?
                {
                    state.config_mut().options_mut().execution.target_partitions = 1;
                }
                let physical = state
                    .query_planner()
                    .create_physical_plan(&optimized, &state)
                    .await
                    .map_err(sql::status)?;
                let task = sql::task_context(&state).map_err(sql::status)?;
                datafusion::physical_plan::execute_stream(physical, task).map_err(sql::status)
            })
            .await?;
        let target = schema.clone();
        let budget = self.governor.limits.query_memory;
        let wire = batches
            // The gRPC code of what failed (RESOURCE_EXHAUSTED, …), not INTERNAL.
            .map_err(|e| FlightError::Tonic(Box::new(sql::status(e))))
            .and_then(move |batch| {
                let batch = if explain {
                    redactor.batch(batch)
                } else {
                    batch
                };
                futures::future::ready(on_the_wire(batch, &target, budget))
            })
            .map_ok(|slices| stream::iter(slices.into_iter().map(Ok)))
            .try_flatten()
            .boxed();
        Ok((schema, with_deadline(wire, deadline, limit, slot)))
    }
}

/// The DoGet of a statement its GetFlightInfo started.
fn redeemed(started: Started, run: Run) -> Response<Messages> {
    let schema = started.schema.clone();
    Response::new(super::ipc::encode(
        schema,
        PlanCache::cancellable(run, started.rows()),
    ))
}

/// `batch` as it is sent, in slices (no copies) that each copy at most half the query's
/// `budget` when encoded and cast to `target`: each column counted on its own, since a batch
/// whose columns share one large value (`SELECT s AS a, s AS b, …`) held nothing new until it
/// was encoded. A single row past the budget is refused.
fn on_the_wire(
    batch: RecordBatch,
    target: &SchemaRef,
    budget: usize,
) -> Result<Vec<RecordBatch>, FlightError> {
    let budget = i64::try_from(budget).unwrap_or(i64::MAX);
    // A batch within half the budget as a whole goes out whole: no row of it is too large and
    // no slice would be cut. Most batches are, and fixed-width or offset columns are summed
    // without a pass over their rows (it was an eighth of a large read's CPU).
    if super::repeat::wire_total(&batch).is_some_and(|total| total <= budget / 2) {
        return Ok(vec![to_wire(batch, target)?]);
    }
    let rows = super::repeat::wire_rows(&batch);
    let mut slices = Vec::new();
    let (mut start, mut held) = (0usize, 0i64);
    for (i, bytes) in rows.iter().copied().enumerate() {
        if bytes > budget {
            return Err(FlightError::Tonic(Box::new(Status::resource_exhausted(
                format!(
                    "a result row takes {bytes} bytes to send (each column counted); the query \
                     may hold {} MiB (LAKE_QUERY_MEMORY_LIMIT_MB)",
                    budget >> 20
                ),
            ))));
        }
        if i > start && held.saturating_add(bytes) > budget / 2 {
            slices.push(to_wire(batch.slice(start, i - start), target)?);
            (start, held) = (i, 0);
        }
        held = held.saturating_add(bytes);
    }
    if start < batch.num_rows() || slices.is_empty() {
        slices.push(to_wire(
            batch.slice(start, batch.num_rows() - start),
            target,
        )?);
    }
    Ok(slices)
}

/// `stream`, ended with DEADLINE_EXCEEDED at `deadline` (`limit` after the statement was
/// admitted; dropping it stops the query's work); `slot` is released when the stream ends or is
/// dropped.
fn with_deadline(
    stream: FlightBatches,
    deadline: tokio::time::Instant,
    limit: std::time::Duration,
    slot: Slot,
) -> FlightBatches {
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
                Err(FlightError::Tonic(Box::new(Status::deadline_exceeded(format!(
                    "the query ran past its {} s limit (LAKE_QUERY_TIMEOUT_SECONDS) and was stopped",
                    limit.as_secs()
                ))))),
                None,
            )),
        }
    })
    .boxed()
}

/// Aborts a task when dropped (the stream ended or was dropped before its deadline).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `messages` as FlightData (for arrow-flight's Flight SQL dispatch, which wants them whole).
pub(super) fn flight_data(messages: Messages) -> DoGetStream {
    messages.map_ok(Message::into_flight_data).boxed()
}

/// One batch (or the error building it) as a DoGet response.
pub(super) fn single(
    batch: Result<RecordBatch, FlightError>,
    schema: SchemaRef,
) -> Response<DoGetStream> {
    Response::new(flight_data(super::ipc::encode(
        schema,
        stream::iter([batch]).boxed(),
    )))
}

#[cfg(test)]
mod tests {
    use arrow::array::{ArrayRef, Int64Array, ListArray, StringArray};
    use arrow::datatypes::Int64Type;

    use super::*;

    fn rows(slices: &[RecordBatch]) -> Vec<usize> {
        slices.iter().map(RecordBatch::num_rows).collect()
    }

    /// A batch within half the budget goes out whole; a larger one in slices that each copy at
    /// most half of it, whether its columns are summed at once (fixed widths, offsets) or row by
    /// row (lists); a row past the budget is refused.
    #[test]
    fn a_batch_is_sent_whole_or_in_slices_within_the_budget() {
        let ints: ArrayRef = Arc::new(Int64Array::from_iter_values(0..100));
        let text: ArrayRef = Arc::new(StringArray::from_iter_values((0..100).map(|_| "1234")));
        let lists: ArrayRef = Arc::new(ListArray::from_iter_primitive::<Int64Type, _, _>(
            (0..100).map(|i| Some(vec![Some(i)])),
        ));
        for column in [ints, text, lists] {
            // Every row of a column measures the same: 8 (ints), 4 + 4 (text), 8 + 4 (a list).
            let batch = RecordBatch::try_from_iter([("c", column)]).unwrap();
            let schema = batch.schema();
            let whole = on_the_wire(batch.clone(), &schema, 1 << 20).unwrap();
            assert_eq!(rows(&whole), vec![100], "{}", schema.field(0));
            let each: i64 = crate::flight::repeat::wire_rows(&batch)[0];
            let budget = (each * 20) as usize;
            let sliced = on_the_wire(batch.clone(), &schema, budget).unwrap();
            assert_eq!(rows(&sliced), vec![10; 10], "{}", schema.field(0));
            let refused = on_the_wire(batch, &schema, (each - 1) as usize);
            assert!(refused.is_err(), "{}", schema.field(0));
        }
    }
}
