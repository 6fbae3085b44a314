//! Operators that repeat a row count what the copies take against the query's budget.
//!
//! DataFusion sizes batches in rows, not bytes, and copies values without asking a memory pool:
//! a join copies a row of one side into as many rows of a batch as it matches (a 1 MB value
//! `CROSS JOIN generate_series(1, 8192)` is one 8 GB batch), UNNEST repeats a row's other
//! columns once per element, a window function copies a value into every row of its partition
//! (`first_value(s) OVER ()`) and a running `array_agg`/`string_agg` grows with every row. An
//! allocation past the process's memory aborts it, whatever the budget says. So each input of
//! these operators passes through [`Guarded`], which measures its batches before the operator
//! sees them and refuses, with RESOURCE_EXHAUSTED naming the limit, what the operator would
//! build beyond the query's budget.

use std::fmt;
use std::sync::Arc;

use arrow::array::{Array, RecordBatch};
use arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryLimit, MemoryReservation};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::execution_plan::CardinalityEffect;
use datafusion::physical_plan::filter_pushdown::{
    ChildPushdownResult, FilterDescription, FilterPushdownPhase, FilterPushdownPropagation,
};
use datafusion::physical_plan::joins::{
    CrossJoinExec, HashJoinExec, NestedLoopJoinExec, PiecewiseMergeJoinExec, SortMergeJoinExec,
    SymmetricHashJoinExec,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::unnest::UnnestExec;
use datafusion::physical_plan::windows::{
    BoundedWindowAggExec, PlainAggregateWindowExpr, WindowAggExec, WindowExpr,
};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, Statistics,
};
use futures::StreamExt;
use tonic::Status;

mod widths;

const MIB: usize = 1024 * 1024;

/// Puts a [`Guarded`] under every input of an operator that repeats rows.
#[derive(Debug, Default)]
pub(super) struct BoundRepetition;

impl PhysicalOptimizerRule for BoundRepetition {
    fn name(&self) -> &str {
        "lake_bound_repetition"
    }

    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let Some(check) = check_for(&node) else {
                return Ok(Transformed::no(node));
            };
            let children = node
                .children()
                .into_iter()
                .map(|child| {
                    Arc::new(Guarded::new(Arc::clone(child), check.clone()))
                        as Arc<dyn ExecutionPlan>
                })
                .collect();
            Ok(Transformed::yes(node.with_new_children(children)?))
        })
        .map(|t| t.data)
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// What an operator would build from the batches it is given.
#[derive(Debug, Clone)]
enum Check {
    /// A join: any row of either side may fill a whole output batch.
    Join(&'static str),
    /// UNNEST of these columns: each row's other columns once per element.
    Unnest(Vec<(usize, usize)>),
    /// Window functions whose values vary in size.
    Window {
        /// Values copied into every row (`first_value(s)`), all of them held at once
        /// (`WindowAggExec` builds its whole partition) or batch by batch.
        copies: bool,
        materialized: bool,
        /// Aggregates whose value grows with the frame (`array_agg`, `string_agg`): the n-th
        /// row's value may hold the n rows before it.
        growing: Option<String>,
    },
}

fn check_for(node: &Arc<dyn ExecutionPlan>) -> Option<Check> {
    let join = |name| Some(Check::Join(name));
    if node.is::<CrossJoinExec>() {
        return join("a cross join");
    }
    if node.is::<NestedLoopJoinExec>() {
        return join("a nested-loop join");
    }
    if node.is::<HashJoinExec>()
        || node.is::<SortMergeJoinExec>()
        || node.is::<SymmetricHashJoinExec>()
        || node.is::<PiecewiseMergeJoinExec>()
    {
        return join("a join");
    }
    if let Some(unnest) = node.downcast_ref::<UnnestExec>() {
        let mut columns: Vec<(usize, usize)> = unnest
            .list_column_indices()
            .iter()
            .map(|l| (l.index_in_input_schema, l.depth))
            .collect();
        columns.sort_unstable();
        columns.dedup_by_key(|c| c.0);
        return Some(Check::Unnest(columns));
    }
    let (exprs, materialized) = if let Some(w) = node.downcast_ref::<WindowAggExec>() {
        (w.window_expr(), true)
    } else if let Some(w) = node.downcast_ref::<BoundedWindowAggExec>() {
        (w.window_expr(), false)
    } else {
        return None;
    };
    window_check(exprs, materialized)
}

fn window_check(exprs: &[Arc<dyn WindowExpr>], materialized: bool) -> Option<Check> {
    let mut copies = false;
    let mut growing = None;
    for expr in exprs {
        let Ok(field) = expr.field() else {
            // Unknown output: as if it grew.
            growing = Some(expr.name().to_owned());
            continue;
        };
        if field.data_type().primitive_width().is_some() || field.data_type() == &DataType::Boolean
        {
            continue;
        }
        // Aggregates that keep every value of their frame (`array_agg`, `string_agg`): the
        // n-th row's value holds the rows before it. Others (`max(s)`) copy one value.
        let aggregate = expr.as_any().is::<PlainAggregateWindowExpr>()
            || expr
                .as_any()
                .is::<datafusion::physical_expr::window::SlidingAggregateWindowExpr>();
        let name = expr.name().to_ascii_lowercase();
        let grows = ["array_agg", "string_agg", "listagg", "group_concat"]
            .iter()
            .any(|f| name.contains(f));
        if aggregate && grows {
            growing = Some(expr.name().to_owned());
        } else {
            copies = true;
        }
    }
    (copies || growing.is_some()).then_some(Check::Window {
        copies,
        materialized,
        growing,
    })
}

/// Passes its input's batches on once [`Check`] found what the operator above would build from
/// them within the query's budget.
#[derive(Debug)]
struct Guarded {
    input: Arc<dyn ExecutionPlan>,
    check: Check,
    properties: Arc<PlanProperties>,
}

impl Guarded {
    fn new(input: Arc<dyn ExecutionPlan>, check: Check) -> Self {
        let properties = Arc::new(PlanProperties::clone(input.properties()));
        Self {
            input,
            check,
            properties,
        }
    }
}

impl DisplayAs for Guarded {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "LakeRepetitionGuard: {:?}", self.check)
    }
}

impl ExecutionPlan for Guarded {
    fn name(&self) -> &str {
        "LakeRepetitionGuard"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match (children.pop(), children.is_empty()) {
            (Some(input), true) => Ok(Arc::new(Guarded::new(input, self.check.clone()))),
            _ => Err(DataFusionError::Internal(
                "LakeRepetitionGuard takes one input".into(),
            )),
        }
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input = self.input.execute(partition, Arc::clone(&context))?;
        let schema = input.schema();
        let pool = context.memory_pool();
        let limit = match pool.memory_limit() {
            MemoryLimit::Finite(limit) => limit,
            MemoryLimit::Infinite | MemoryLimit::Unknown => usize::MAX,
        };
        let mut measure = Measure {
            check: self.check.clone(),
            limit: i64::try_from(limit).unwrap_or(i64::MAX),
            batch_size: context.session_config().batch_size() as i64,
            rows: 0,
            bytes: 0,
            widest: 0,
            held: MemoryConsumer::new("lake: UNNEST output").register(pool),
        };
        let stream = input.map(move |batch| {
            let batch = batch?;
            measure.admit(&batch)?;
            Ok(batch)
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }

    fn partition_statistics(&self, partition: Option<usize>) -> Result<Arc<Statistics>> {
        self.input.partition_statistics(partition)
    }

    fn cardinality_effect(&self) -> CardinalityEffect {
        CardinalityEffect::Equal
    }

    /// Transparent to filters, so that a join's dynamic filters still reach its scans.
    fn gather_filters_for_pushdown(
        &self,
        _phase: FilterPushdownPhase,
        parent_filters: Vec<Arc<dyn PhysicalExpr>>,
        _config: &ConfigOptions,
    ) -> Result<FilterDescription> {
        FilterDescription::from_children(parent_filters, &self.children())
    }

    fn handle_child_pushdown_result(
        &self,
        _phase: FilterPushdownPhase,
        child_pushdown_result: ChildPushdownResult,
        _config: &ConfigOptions,
    ) -> Result<FilterPushdownPropagation<Arc<dyn ExecutionPlan>>> {
        Ok(FilterPushdownPropagation::if_all(child_pushdown_result))
    }
}

/// One stream's measure of what it passed on.
struct Measure {
    check: Check,
    limit: i64,
    batch_size: i64,
    rows: i64,
    bytes: i64,
    widest: i64,
    /// What UNNEST builds from the batch last passed on, held until the next one.
    held: MemoryReservation,
}

impl Measure {
    /// RESOURCE_EXHAUSTED as a status, not DataFusion's `ResourcesExhausted`: a nested-loop
    /// join takes that for its own reservation failing and executes its input again to spill it
    /// (which a repartitioned input cannot do: DataFusion panics).
    fn refused(&self, what: String, bytes: i64) -> DataFusionError {
        DataFusionError::External(Box::new(Status::resource_exhausted(format!(
            "{what}: {bytes} bytes; the query may hold {} MiB (LAKE_QUERY_MEMORY_LIMIT_MB)",
            self.limit as usize / MIB
        ))))
    }

    fn admit(&mut self, batch: &RecordBatch) -> Result<()> {
        let n = batch.num_rows();
        if n == 0 {
            return Ok(());
        }
        match &self.check {
            Check::Join(join) => {
                let widest = widest(batch);
                let batch_bytes = widest.saturating_mul(self.batch_size);
                if batch_bytes > self.limit {
                    return Err(self.refused(
                        format!(
                            "{join} may repeat a row of {widest} bytes into every row of a batch \
                             of {} rows",
                            self.batch_size
                        ),
                        batch_bytes,
                    ));
                }
            }
            Check::Unnest(lists) => {
                let output = unnest_output(batch, lists);
                let want = usize::try_from(output).unwrap_or(usize::MAX);
                if self.held.try_resize(want).is_err() {
                    return Err(self.refused(
                        format!("UNNEST would build from a batch of {n} rows"),
                        output,
                    ));
                }
            }
            Check::Window {
                copies,
                materialized,
                growing,
            } => {
                let each = widths::row_bytes(batch.columns().iter().map(|c| c.as_ref()), n);
                let widest = each.iter().copied().max().unwrap_or(0);
                self.rows = self.rows.saturating_add(n as i64);
                self.bytes = self.bytes.saturating_add(each.iter().sum());
                self.widest = self.widest.max(widest);
                // The rows one output may hold: the whole input (materialized), else the batch.
                let rows = if *materialized { self.rows } else { n as i64 };
                let copied = self.widest.saturating_mul(rows);
                if *copies && copied > self.limit {
                    return Err(self.refused(
                        format!(
                            "a window function may copy a value of {} bytes into each of {rows} \
                             rows",
                            self.widest
                        ),
                        copied,
                    ));
                }
                let grown = self.rows.saturating_mul(self.bytes);
                if let Some(name) = growing
                    && grown > self.limit
                {
                    return Err(self.refused(
                        format!(
                            "{name} may hold, in each of {} rows, the {} bytes before it",
                            self.rows, self.bytes
                        ),
                        grown,
                    ));
                }
            }
        }
        Ok(())
    }
}

/// What sending each row of `batch` copies: every column's values, each on its own (columns that share one
/// buffer — `SELECT s AS a, s AS b, …` — are each encoded, and cast, in full).
pub(super) fn wire_rows(batch: &RecordBatch) -> Vec<i64> {
    widths::row_bytes(batch.columns().iter().map(|c| c.as_ref()), batch.num_rows())
}

/// The widest row of `batch`, in bytes.
fn widest(batch: &RecordBatch) -> i64 {
    widths::row_bytes(batch.columns().iter().map(|c| c.as_ref()), batch.num_rows())
        .into_iter()
        .max()
        .unwrap_or(0)
}

/// What UNNEST of `lists` ((column, depth)) builds from `batch`: each row's other columns once
/// per row it unnests to (at least once), and the unnested elements.
fn unnest_output(batch: &RecordBatch, lists: &[(usize, usize)]) -> i64 {
    let n = batch.num_rows();
    let unnested = |i: &usize| lists.iter().any(|(c, _)| c == i);
    let others = widths::row_bytes(
        batch
            .columns()
            .iter()
            .enumerate()
            .filter(|(i, _)| !unnested(i))
            .map(|(_, c)| c.as_ref()),
        n,
    );
    let mut per_row = vec![0i64; n];
    let mut elements = 0i64;
    for (column, depth) in lists {
        if let Some(array) = batch.columns().get(*column) {
            widths::unnested_rows(array.as_ref(), *depth, &mut per_row);
            elements = elements.saturating_add(array.get_array_memory_size() as i64);
        }
    }
    others
        .iter()
        .zip(&per_row)
        .map(|(bytes, rows)| bytes.saturating_mul((*rows).max(1)))
        .fold(elements, i64::saturating_add)
}

#[cfg(test)]
mod tests;
