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
use std::sync::{Arc, Mutex};

use arrow::array::{Array, RecordBatch};
use arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryLimit, MemoryPool};
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
use datafusion::physical_plan::windows::{BoundedWindowAggExec, WindowAggExec, WindowExpr};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, InputOrderMode, PlanProperties, Statistics,
};
use futures::StreamExt;
use tonic::Status;

/// What an `ExecutionPlan` with one input that it passes on unchanged (`input`, `properties`
/// fields, and `fn with_input(&self, input) -> Self`) has in common with the others: its
/// properties, statistics and cardinality are its input's, and it passes every filter on to it,
/// so that a join's dynamic filters still reach its scans.
macro_rules! one_input_node {
    ($name:literal) => {
        fn name(&self) -> &str {
            $name
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
                (Some(input), true) => Ok(Arc::new(self.with_input(input))),
                _ => Err(DataFusionError::Internal(format!(
                    "{} takes one input",
                    $name
                ))),
            }
        }

        fn partition_statistics(&self, partition: Option<usize>) -> Result<Arc<Statistics>> {
            self.input.partition_statistics(partition)
        }

        fn cardinality_effect(&self) -> CardinalityEffect {
            CardinalityEffect::Equal
        }

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
    };
}

/// The query's memory budget: its pool's limit (none: unbounded).
fn pool_limit(pool: &Arc<dyn MemoryPool>) -> usize {
    match pool.memory_limit() {
        MemoryLimit::Finite(limit) => limit,
        MemoryLimit::Infinite | MemoryLimit::Unknown => usize::MAX,
    }
}

mod held;
mod keep;
mod widths;
mod wire;

pub(super) use wire::GuardNode;

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
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let batch_size = config.execution.batch_size.max(1);
        plan.transform_up(|node| guard(node, batch_size))
            .map(|t| t.data)
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `node` with a [`Guarded`] under each of its inputs and a [`keep::KeepReservation`] over it,
/// if it repeats rows; as it is otherwise.
fn guard(
    node: Arc<dyn ExecutionPlan>,
    batch_size: usize,
) -> Result<Transformed<Arc<dyn ExecutionPlan>>> {
    let wrap = |input, check, handoff| -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(Guarded::new(input, check, handoff)))
    };
    Ok(match guarded(&node, batch_size, &wrap)? {
        Some(Guarding {
            operator,
            handoff,
            claims,
        }) => Transformed::yes(Arc::new(keep::KeepReservation::new(
            operator, handoff, claims,
        ))),
        None => Transformed::no(node),
    })
}

/// An operator with its inputs guarded: what its [`keep::KeepReservation`] is made of.
struct Guarding {
    operator: Arc<dyn ExecutionPlan>,
    handoff: Arc<keep::Handoff>,
    claims: Option<keep::Output>,
}

/// How an operator's input is guarded: given the input, its check and the keeper's handoff.
type Wrap =
    dyn Fn(Arc<dyn ExecutionPlan>, Check, Arc<keep::Handoff>) -> Result<Arc<dyn ExecutionPlan>>;

/// Puts each input of `node` through `wrap` (with the check it needs and the handoff to the
/// operator's keeper), if `node` repeats rows.
fn guarded(
    node: &Arc<dyn ExecutionPlan>,
    batch_size: usize,
    wrap: &Wrap,
) -> Result<Option<Guarding>> {
    let Some(check) = check_for(node, batch_size) else {
        return Ok(None);
    };
    let handoff = Arc::new(keep::Handoff::default());
    // A cross or nested-loop join builds one output batch per row of its left (build)
    // side and batch of its right: the right side is passed on in slices of a batch.
    let slices_right = node.is::<CrossJoinExec>() || node.is::<NestedLoopJoinExec>();
    let children = node
        .children()
        .into_iter()
        .enumerate()
        .map(|(i, child)| {
            let check = match &check {
                Check::Join { name, rows, .. } => Check::Join {
                    name,
                    rows: *rows,
                    slice: slices_right && i == 1,
                },
                other => other.clone(),
            };
            wrap(Arc::clone(child), check, Arc::clone(&handoff))
        })
        .collect::<Result<Vec<_>>>()?;
    let claims = match &check {
        Check::Join { name, .. } => Some(keep::Output {
            operator: name,
            passed_on: 0,
        }),
        // Its input's columns, then its functions' values.
        Check::Window { .. } => Some(keep::Output {
            operator: "a window function",
            passed_on: node
                .children()
                .first()
                .map_or(0, |c| c.schema().fields().len()),
        }),
        Check::Unnest(_) => None,
    };
    Ok(Some(Guarding {
        operator: Arc::clone(node).with_new_children(children)?,
        handoff,
        claims,
    }))
}

/// What an operator would build from the batches it is given.
#[derive(Debug, Clone)]
enum Check {
    /// A join: any row of either side may fill a whole output batch of `rows` rows. With
    /// `slice`, the input is passed on in slices of at most `rows` rows (a cross join's output
    /// batch is one row of its left side repeated once per row of the right side's batch,
    /// however large that batch is). Only that side is sliced: a slice reports its parent's
    /// buffers, so a build side held in slices would count them several times over.
    Join {
        name: &'static str,
        rows: usize,
        slice: bool,
    },
    /// UNNEST of these columns (column, deepest depth, unnested at several depths): each row's
    /// other columns once per element.
    Unnest(Vec<(usize, usize, bool)>),
    /// A window operator: what it holds of its input, and what its functions copy.
    Window {
        holds: Holds,
        /// Values copied into every row it emits (`first_value(s)`).
        copies: bool,
        /// Aggregates whose value grows with the frame (`array_agg`, `string_agg`): the n-th
        /// row's value may hold the n rows before it.
        growing: Option<String>,
    },
}

/// What a window operator holds of its input before it emits.
#[derive(Clone)]
enum Holds {
    /// All of it (`WindowAggExec` builds whole partitions; a bounded one whose partitions
    /// arrive interleaved keeps each open, and one given string views keeps every data buffer
    /// they point into: `views`, counted by its buffers).
    Everything { views: bool },
    /// What its frames reach and what it waits for, partition by partition (replayed by
    /// [`held::Held`]).
    Frames(Arc<[Arc<dyn WindowExpr>]>),
}

/// Short, for `EXPLAIN`: the functions are the operator's own lines.
impl fmt::Debug for Holds {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Holds::Everything { views } => write!(f, "Everything {{ views: {views} }}"),
            Holds::Frames(exprs) => write!(f, "Frames({} functions)", exprs.len()),
        }
    }
}

fn check_for(node: &Arc<dyn ExecutionPlan>, batch_size: usize) -> Option<Check> {
    // Smaller join batches would admit wider rows, but the operators above (a filter, a
    // repartition) coalesce them back into batches of the statement's size.
    let join = |name| {
        Some(Check::Join {
            name,
            rows: batch_size,
            slice: false,
        })
    };
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
        // A column unnested at several depths repeats the others most at its deepest, and is
        // itself copied at every level above it (`unnest(c), unnest(unnest(c))` repeats `c`
        // once per element of `c`): it counts among the repeated columns too.
        columns.sort_unstable_by_key(|&(column, depth)| (column, std::cmp::Reverse(depth)));
        let mut lists: Vec<(usize, usize, bool)> = Vec::new();
        for (column, depth) in columns {
            match lists.last_mut() {
                Some(last) if last.0 == column => last.2 = true,
                _ => lists.push((column, depth, false)),
            }
        }
        return Some(Check::Unnest(lists));
    }
    if let Some(w) = node.downcast_ref::<WindowAggExec>() {
        let views = views(w.input());
        return Some(window_check(w.window_expr(), Holds::Everything { views }));
    }
    let w = node.downcast_ref::<BoundedWindowAggExec>()?;
    // Every bounded window operator may hold rows, whatever its functions return (`lag(s,
    // 1000000)`, `count(*) OVER (… AND 1000000 FOLLOWING)`). Its partitions come one after
    // another when its input is sorted on their keys; interleaved, each stays open.
    let interleaved = w
        .window_expr()
        .first()
        .is_some_and(|e| !e.partition_by().is_empty())
        && w.input_order_mode != InputOrderMode::Sorted;
    // It appends each batch to what it holds (`concat`), and a string or binary view array
    // appended keeps every data buffer of the arrays before it: rows it dropped keep their
    // batch's values alive to the end.
    let views = views(w.input());
    let holds = if interleaved || views {
        Holds::Everything { views }
    } else {
        Holds::Frames(w.window_expr().iter().cloned().collect())
    };
    Some(window_check(w.window_expr(), holds))
}

/// Whether `input`'s rows hold string or binary views.
fn views(input: &Arc<dyn ExecutionPlan>) -> bool {
    input
        .schema()
        .fields()
        .iter()
        .any(|f| holds_views(f.data_type()))
}

/// Whether `data_type` is or holds a string or binary view.
fn holds_views(data_type: &DataType) -> bool {
    matches!(data_type, DataType::Utf8View | DataType::BinaryView)
        || crate::nested::children(data_type)
            .into_iter()
            .any(holds_views)
}

fn window_check(exprs: &[Arc<dyn WindowExpr>], holds: Holds) -> Check {
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
        let grows = held::aggregate_of(expr.as_ref()).is_some_and(|a| {
            let name = a.fun().name().to_ascii_lowercase();
            ["array_agg", "string_agg", "listagg", "group_concat"].contains(&name.as_str())
        });
        if grows {
            growing = Some(expr.name().to_owned());
        } else {
            copies = true;
        }
    }
    Check::Window {
        holds,
        copies,
        growing,
    }
}

/// Passes its input's batches on once [`Check`] found what the operator above would build from
/// them within the query's budget.
#[derive(Debug)]
struct Guarded {
    input: Arc<dyn ExecutionPlan>,
    check: Check,
    /// Where its reservation goes to outlive its stream (the operator's [`keep::KeepReservation`]).
    handoff: Arc<keep::Handoff>,
    properties: Arc<PlanProperties>,
}

impl Guarded {
    fn new(input: Arc<dyn ExecutionPlan>, check: Check, handoff: Arc<keep::Handoff>) -> Self {
        let properties = Arc::new(PlanProperties::clone(input.properties()));
        Self {
            input,
            check,
            handoff,
            properties,
        }
    }
}

impl Guarded {
    fn with_input(&self, input: Arc<dyn ExecutionPlan>) -> Self {
        Guarded::new(input, self.check.clone(), Arc::clone(&self.handoff))
    }
}

impl DisplayAs for Guarded {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "LakeRepetitionGuard: {:?}", self.check)
    }
}

impl ExecutionPlan for Guarded {
    one_input_node!("LakeRepetitionGuard");

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input = self.input.execute(partition, Arc::clone(&context))?;
        let schema = input.schema();
        let pool = context.memory_pool();
        let limit = pool_limit(pool);
        let held = Arc::new(Mutex::new(
            MemoryConsumer::new(self.check.consumer()).register(pool),
        ));
        self.handoff.give(partition, &held);
        let mut measure = Measure {
            check: self.check.clone(),
            limit: i64::try_from(limit).unwrap_or(i64::MAX),
            rows: 0,
            bytes: 0,
            widest: 0,
            held,
            frames: match &self.check {
                Check::Window {
                    holds: Holds::Frames(exprs),
                    ..
                } => Some(held::Held::new(exprs)?),
                _ => None,
            },
        };
        let stream = input.flat_map(move |batch| {
            let passed = match batch.and_then(|batch| measure.admit(batch)) {
                Ok(slices) => slices.into_iter().map(Ok).collect(),
                Err(e) => vec![Err(e)],
            };
            futures::stream::iter(passed)
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }
}

/// One stream's measure of what it passed on.
struct Measure {
    check: Check,
    limit: i64,
    rows: i64,
    bytes: i64,
    widest: i64,
    /// What UNNEST builds from the batch last passed on (held until the next one), or what a
    /// window operator holds: kept until the operator's stream ends ([`keep`]).
    held: keep::Shared,
    /// A bounded window operator's buffers, replayed.
    frames: Option<held::Held>,
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

    /// `batch` as the operator above may take it (a join's in slices), or a refusal.
    fn admit(&mut self, batch: RecordBatch) -> Result<Vec<RecordBatch>> {
        let n = batch.num_rows();
        if n == 0 {
            return Ok(vec![batch]);
        }
        match &self.check {
            Check::Join { name, rows, slice } => {
                // Compared, not reserved: a join's output batches are claimed as they are built
                // ([`keep`]); this keeps any one of them inside the budget.
                let widest = widest(&batch);
                let rows = *rows as i64;
                let batch_bytes = widest.saturating_mul(rows);
                if batch_bytes > self.limit {
                    return Err(self.refused(
                        format!(
                            "{name} may repeat a row of {widest} bytes into every row of a batch \
                             of {rows} rows"
                        ),
                        batch_bytes,
                    ));
                }
                let rows = rows as usize;
                if *slice && n > rows {
                    return Ok((0..n)
                        .step_by(rows)
                        .map(|at| batch.slice(at, rows.min(n - at)))
                        .collect());
                }
            }
            Check::Unnest(lists) => {
                let output = unnest_output(&batch, lists);
                let want = usize::try_from(output).unwrap_or(usize::MAX);
                if !keep::resize(&self.held, want) {
                    return Err(self.refused(
                        format!("UNNEST would build from a batch of {n} rows"),
                        output,
                    ));
                }
            }
            Check::Window {
                holds,
                copies,
                growing,
            } => {
                let each = widths::row_bytes(batch.columns().iter().map(|c| c.as_ref()), n);
                let widest = each.iter().copied().max().unwrap_or(0);
                let mut given: i64 = each.iter().sum();
                if matches!(holds, Holds::Everything { views: true }) {
                    // Every data buffer the batch's views point into stays alive.
                    given = given.max(batch.get_array_memory_size() as i64);
                }
                self.rows = self.rows.saturating_add(n as i64);
                self.bytes = self.bytes.saturating_add(given);
                self.widest = self.widest.max(widest);
                // What the operator holds at once, the rows it may emit at once and what a
                // running `array_agg` may build for them.
                let (held, held_rows, emitted, grown) = match &mut self.frames {
                    Some(frames) => {
                        let step = frames.admit(&batch, &each)?;
                        (
                            step.held,
                            step.held_rows as i64,
                            step.waiting as i64,
                            step.grown,
                        )
                    }
                    None => (
                        self.bytes,
                        self.rows,
                        self.rows,
                        self.rows.saturating_mul(self.bytes),
                    ),
                };
                // What it holds is reserved; the values it copies into the rows it emits are
                // compared (so that no one output batch outgrows the budget) and claimed once
                // built, with its output ([`keep`]).
                let want = usize::try_from(held).unwrap_or(usize::MAX);
                if !keep::resize(&self.held, want) {
                    let what = if self.frames.is_some() {
                        format!(
                            "a window function holds {held_rows} rows of its input at once \
                             (rows its frames reach back to, or rows it waits on before it emits)"
                        )
                    } else {
                        format!(
                            "a window function holds its whole input until it emits, here {held_rows} rows"
                        )
                    };
                    return Err(self.refused(what, held));
                }
                let copied = self.widest.saturating_mul(emitted);
                if *copies && copied > self.limit {
                    return Err(self.refused(
                        format!(
                            "a window function may copy a value of {} bytes into each of {emitted} \
                             rows",
                            self.widest
                        ),
                        copied,
                    ));
                }
                if let Some(name) = growing
                    && grown > self.limit
                {
                    return Err(self.refused(
                        format!(
                            "{name} may hold, in each of {emitted} rows, the values of the rows \
                             before it"
                        ),
                        grown,
                    ));
                }
            }
        }
        Ok(vec![batch])
    }
}

impl Check {
    /// The name the memory pool knows a guard's reservation by.
    fn consumer(&self) -> &'static str {
        match self {
            Check::Join { .. } => "lake: join input",
            Check::Unnest(_) => "lake: UNNEST output",
            Check::Window { .. } => "lake: window input",
        }
    }
}

/// What sending each row of `batch` copies: every column's values, each on its own (columns that share one
/// buffer — `SELECT s AS a, s AS b, …` — are each encoded, and cast, in full).
pub(super) fn wire_rows(batch: &RecordBatch) -> Vec<i64> {
    widths::row_bytes(batch.columns().iter().map(|c| c.as_ref()), batch.num_rows())
}

/// What sending all of `batch` copies — the sum of [`wire_rows`] — when that needs no value per
/// row (see [`widths::total`]).
pub(super) fn wire_total(batch: &RecordBatch) -> Option<i64> {
    batch.columns().iter().try_fold(0i64, |sum, column| {
        Some(sum.saturating_add(widths::total(column.as_ref())?))
    })
}

/// The widest row of `batch`, in bytes.
fn widest(batch: &RecordBatch) -> i64 {
    widths::row_bytes(batch.columns().iter().map(|c| c.as_ref()), batch.num_rows())
        .into_iter()
        .max()
        .unwrap_or(0)
}

/// What UNNEST of `lists` ((column, depth, at several depths)) builds from `batch`: each row's other columns once
/// per row it unnests to (at least once), and the unnested elements.
fn unnest_output(batch: &RecordBatch, lists: &[(usize, usize, bool)]) -> i64 {
    let n = batch.num_rows();
    let unnested = |i: &usize| lists.iter().any(|(c, _, several)| c == i && !several);
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
    for (column, depth, _) in lists {
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
