//! Above an operator that repeats rows: what its guards reserved, kept until the operator has
//! emitted what it held, and the batch it last built.
//!
//! A window operator drops its input stream when that ends and only then, in the same poll,
//! computes what it still held: the guard's reservation of those rows would go with the guard's
//! stream. So each guard hands its reservation over to a [`KeepReservation`] above its operator,
//! which holds it through that poll: once every guard's stream is gone, the operator has taken
//! all its input and what it held goes out as output (a bounded window's last batch is slices of
//! the buffer it held), which whatever takes it reserves, so the kept reservations end with the
//! batch returned (or the stream).
//!
//! A join's or window's output batches are copies its guards only compared with the budget (one
//! batch cannot outgrow it): each, once built, is counted here until the next, so that another
//! operator of the statement finds that much less room meanwhile. Counted without a check: an
//! operator above that keeps the batch (a sort, a hash table) reserves it too, and a sort spills
//! only when its own reservation fails. The statement is refused once its pool holds more than
//! twice its budget, as for what expressions build ([`super::super::bounded`]).

use std::collections::HashMap;
use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll};

use datafusion::common::config::ConfigOptions;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryPool, MemoryReservation};
use datafusion::execution::{RecordBatchStream, SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::execution_plan::CardinalityEffect;
use datafusion::physical_plan::filter_pushdown::{
    ChildPushdownResult, FilterDescription, FilterPushdownPhase, FilterPushdownPropagation,
};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, Statistics,
};
use futures::Stream;
use tonic::Status;

const MIB: usize = 1024 * 1024;

/// A reservation the guard resizes and the keeper holds.
pub(super) type Shared = Arc<Mutex<MemoryReservation>>;

/// Grows or shrinks `reservation` to `bytes`; false if the pool refuses.
pub(super) fn resize(reservation: &Shared, bytes: usize) -> bool {
    reservation
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .try_resize(bytes)
        .is_ok()
}

/// The reservations an operator's guards made, by the partition they were executed for, until
/// its keeper takes them. Held weakly: one no keeper took (its guard ran after the keeper's stream
/// ended, or the plan is kept for another run) is released with its guard's stream, never kept by
/// the plan.
#[derive(Debug, Default)]
pub(super) struct Handoff {
    given: Mutex<HashMap<usize, Vec<Weak<Mutex<MemoryReservation>>>>>,
}

impl Handoff {
    pub(super) fn give(&self, partition: usize, reservation: &Shared) {
        self.given
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(partition)
            .or_default()
            .push(Arc::downgrade(reservation));
    }

    fn take(&self, partition: usize) -> impl Iterator<Item = Shared> + use<> {
        self.given
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&partition)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|weak| weak.upgrade())
    }
}

/// Above a guarded operator: holds its guards' reservations until its stream ends, and, when it
/// `claims`, its last output batch.
#[derive(Debug)]
pub(super) struct KeepReservation {
    input: Arc<dyn ExecutionPlan>,
    handoff: Arc<Handoff>,
    /// When its output batches are claimed: the operator, as a refusal names it.
    claims: Option<Output>,
    properties: Arc<PlanProperties>,
}

impl KeepReservation {
    pub(super) fn new(
        input: Arc<dyn ExecutionPlan>,
        handoff: Arc<Handoff>,
        claims: Option<Output>,
    ) -> Self {
        let properties = Arc::new(PlanProperties::clone(input.properties()));
        Self {
            input,
            handoff,
            claims,
            properties,
        }
    }
}

impl KeepReservation {
    fn with_input(&self, input: Arc<dyn ExecutionPlan>) -> Self {
        KeepReservation::new(input, Arc::clone(&self.handoff), self.claims)
    }
}

impl DisplayAs for KeepReservation {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        match self.claims {
            Some(_) => write!(f, "LakeKeepReservation: claims output"),
            None => write!(f, "LakeKeepReservation"),
        }
    }
}

impl ExecutionPlan for KeepReservation {
    one_input_node!("LakeKeepReservation");

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        // Guards execute with their operator (a hash join's build side with its first partition,
        // kept by that partition's keeper): most hand over here, any later one during a poll.
        let pool = context.memory_pool();
        let limit = super::pool_limit(pool);
        let claims = self.claims.map(|output| Claims {
            output,
            batch: MemoryConsumer::new(format!("lake: {}'s output", output.operator))
                .register(pool),
            pool: Arc::clone(pool),
            limit,
        });
        let input = self.input.execute(partition, context)?;
        Ok(Box::pin(Keeping {
            input,
            handoff: Arc::clone(&self.handoff),
            partition,
            kept: self.handoff.take(partition).collect(),
            claims,
        }))
    }
}

/// The operator's stream, and the reservations its guards handed over so far.
struct Keeping {
    input: SendableRecordBatchStream,
    handoff: Arc<Handoff>,
    partition: usize,
    kept: Vec<Shared>,
    claims: Option<Claims>,
}

/// What of an operator's output batches is its own.
#[derive(Debug, Clone, Copy)]
pub(super) struct Output {
    /// The operator, as a refusal names it.
    pub operator: &'static str,
    /// Its first columns are its input's, passed on (a window's): counted by its guard.
    pub passed_on: usize,
}

/// An operator's last output batch, counted until the next one (or its stream's end).
struct Claims {
    output: Output,
    batch: MemoryReservation,
    pool: Arc<dyn MemoryPool>,
    /// The query's budget.
    limit: usize,
}

impl Claims {
    /// Counts `batch` in place of the one before; refuses it if the query's pool now holds more
    /// than twice its budget.
    fn claim(&mut self, batch: &arrow::array::RecordBatch) -> Result<()> {
        let own =
            batch.project(&(self.output.passed_on..batch.num_columns()).collect::<Vec<_>>())?;
        let bytes: i64 = super::wire_total(&own).unwrap_or_else(|| {
            super::wire_rows(&own)
                .iter()
                .fold(0, |a, b| a.saturating_add(*b))
        });
        self.batch
            .resize(usize::try_from(bytes).unwrap_or(usize::MAX));
        let held = self.pool.reserved();
        if held > self.limit.saturating_mul(2) {
            return Err(DataFusionError::External(Box::new(
                Status::resource_exhausted(format!(
                    "a batch of the rows {} built ({bytes} bytes) leaves the query holding \
                     {held} bytes, more than twice its {} MiB (LAKE_QUERY_MEMORY_LIMIT_MB)",
                    self.output.operator,
                    self.limit / MIB
                )),
            )));
        }
        Ok(())
    }
}

impl Stream for Keeping {
    type Item = Result<arrow::array::RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        // Before and after: a guard executed during this poll may also end in it.
        let given = self.handoff.take(self.partition);
        self.kept.extend(given);
        let mut polled = self.input.as_mut().poll_next(cx);
        let given = self.handoff.take(self.partition);
        self.kept.extend(given);
        match &polled {
            Poll::Ready(None) => {
                self.kept.clear();
                self.claims = None;
            }
            Poll::Ready(Some(Ok(batch))) => {
                if let Some(Err(e)) = self.claims.as_mut().map(|c| c.claim(batch)) {
                    polled = Poll::Ready(Some(Err(e)));
                }
                // Every guard's stream is gone (only this keeper holds their reservations): what
                // they counted is in what goes out now.
                if self.kept.iter().all(|kept| Arc::strong_count(kept) == 1) {
                    self.kept.clear();
                }
            }
            Poll::Ready(Some(Err(_))) | Poll::Pending => {}
        }
        polled
    }
}

impl RecordBatchStream for Keeping {
    fn schema(&self) -> arrow::datatypes::SchemaRef {
        self.input.schema()
    }
}
