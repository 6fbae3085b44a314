//! What a bounded window operator holds while it runs.
//!
//! `BoundedWindowAggExec` keeps, in each open partition, the rows a frame still reaches back to
//! (`lag(s, 1000000)`, `ROWS BETWEEN 1000000 PRECEDING …`, a `RANGE` of values) and the rows
//! whose frames are not complete yet (`… AND 1000 FOLLOWING`, `lead`, a peer group), and emits
//! a row once every function has its value. None of it is counted in a memory pool. [`Held`]
//! replays that bookkeeping on the batches the operator is about to take, with DataFusion's own
//! frame arithmetic (`WindowFrameContext`, each function's `get_range` and `memoize`), so that
//! the guard can reserve what the operator will hold before it holds it.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, new_null_array};
use arrow::compute::{concat, partition};
use arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::PartitionEvaluator;
use datafusion::logical_expr::WindowFrameUnits;
use datafusion::logical_expr::window_state::{WindowAggState, WindowFrameContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::window::{SlidingAggregateWindowExpr, StandardWindowFunctionExpr};
use datafusion::physical_plan::windows::{
    PlainAggregateWindowExpr, StandardWindowExpr, WindowExpr,
};

/// One stream's replay of a window operator's buffers (partitions arrive one after another:
/// the operator's input is sorted on its `PARTITION BY` keys, or it has none).
pub(super) struct Held {
    partition_by: Vec<Arc<dyn PhysicalExpr>>,
    reaches: Vec<Reach>,
    /// The open partition's key.
    key: Option<Vec<ScalarValue>>,
    /// The open partition's rows still held, in the order they came.
    chunks: VecDeque<Chunk>,
    rows: usize,
    /// Of those, the rows already emitted (held only because a frame reaches back to them).
    emitted: usize,
    /// Everything the open partition was given (what a running `array_agg` may hold).
    partition_bytes: i64,
}

/// What taking one batch costs the operator.
pub(super) struct Step {
    /// Bytes it holds at once: the rows its frames reach and it waits on (twice: its partition
    /// buffer and its buffer of rows not yet emitted are copies of their own), and what its
    /// aggregates keep of them.
    pub held: i64,
    pub held_rows: usize,
    /// Rows it may emit in one batch: those not yet emitted (at the end of its input, or of a
    /// partition, all of them at once).
    pub waiting: usize,
    /// What a running `array_agg` may build for them: each such row's value holds its
    /// partition so far.
    pub grown: i64,
}

/// Rows of one input batch: their count, their bytes, the widest and the narrowest of them.
struct Chunk {
    rows: usize,
    bytes: i64,
    widest: i64,
    narrowest: i64,
}

/// What an aggregate's accumulator keeps besides the operator's rows.
#[derive(Clone, Copy)]
enum Keeps {
    /// A few values (`sum`, `count`, `max` of numbers, a running `max(s)`).
    Little,
    /// A copy of the frame's largest value beside each of its rows (a sliding `max(s)`).
    Clones,
    /// Every value of its frame (a sliding `median`, `array_agg`, `count(DISTINCT …)`).
    Frame,
    /// Every value of its partition so far (the same, running from `UNBOUNDED PRECEDING`).
    Partition,
}

/// Aggregates whose state does not grow with their frame (unless DISTINCT).
const LITTLE: &[&str] = &[
    "count",
    "sum",
    "avg",
    "mean",
    "min",
    "max",
    "bool_and",
    "bool_or",
    "bit_and",
    "bit_or",
    "bit_xor",
    "stddev",
    "stddev_pop",
    "stddev_samp",
    "var",
    "var_pop",
    "var_samp",
    "var_population",
    "var_sample",
    "covar",
    "covar_pop",
    "covar_samp",
    "corr",
];

/// The aggregate a window function runs, if it runs one (running or sliding).
pub(super) fn aggregate_of(expr: &dyn WindowExpr) -> Option<&AggregateFunctionExpr> {
    let any = expr.as_any();
    match (
        any.downcast_ref::<PlainAggregateWindowExpr>(),
        any.downcast_ref::<SlidingAggregateWindowExpr>(),
    ) {
        (Some(plain), _) => Some(plain.get_aggregate_expr()),
        (None, Some(sliding)) => Some(sliding.get_aggregate_expr()),
        (None, None) => None,
    }
}

fn keeps(expr: &dyn WindowExpr, unbounded_start: bool) -> Keeps {
    let Some(aggregate) = aggregate_of(expr) else {
        return Keeps::Little;
    };
    let name = aggregate.fun().name().to_ascii_lowercase();
    let fixed = expr.field().is_ok_and(|f| {
        f.data_type().primitive_width().is_some() || f.data_type() == &DataType::Boolean
    });
    if aggregate.is_distinct() || !LITTLE.contains(&name.as_str()) {
        if unbounded_start {
            Keeps::Partition
        } else {
            Keeps::Frame
        }
    } else if (name == "min" || name == "max") && !fixed && !unbounded_start {
        Keeps::Clones
    } else {
        Keeps::Little
    }
}

/// How far one window function reaches from each row, replayed as the operator computes it.
struct Reach {
    /// The function's own evaluator: its range (`lag`, `lead`) or its pruning (`first_value`),
    /// made afresh for each partition.
    function: Option<Arc<dyn StandardWindowFunctionExpr>>,
    evaluator: Option<Box<dyn PartitionEvaluator>>,
    causal: bool,
    /// `UNBOUNDED PRECEDING`: an aggregate keeps only its accumulator; a `first_value` keeps
    /// what its `memoize` keeps.
    unbounded_start: bool,
    aggregate: bool,
    /// Values of `ORDER BY` for `RANGE` and `GROUPS` frames, one per held row.
    order_by: Vec<Arc<dyn PhysicalExpr>>,
    keys: Vec<ArrayRef>,
    state: WindowAggState,
    template: WindowAggState,
    keeps: Keeps,
}

impl Held {
    pub(super) fn new(exprs: &[Arc<dyn WindowExpr>]) -> Result<Self> {
        let reaches = exprs
            .iter()
            .map(|e| Reach::new(e.as_ref()))
            .collect::<Result<_>>()?;
        Ok(Self {
            partition_by: exprs
                .first()
                .map(|e| e.partition_by().to_vec())
                .unwrap_or_default(),
            reaches,
            key: None,
            chunks: VecDeque::new(),
            rows: 0,
            emitted: 0,
            partition_bytes: 0,
        })
    }

    /// Takes `batch`, whose rows take `sizes` bytes each.
    pub(super) fn admit(&mut self, batch: &RecordBatch, sizes: &[i64]) -> Result<Step> {
        let n = batch.num_rows();
        let keys = self
            .partition_by
            .iter()
            .map(|e| e.evaluate(batch)?.into_array(n))
            .collect::<Result<Vec<_>>>()?;
        let segments: Vec<Range<usize>> = if keys.is_empty() {
            vec![Range { start: 0, end: n }]
        } else {
            partition(&keys)?.ranges()
        };
        let mut step = Step {
            held: 0,
            held_rows: 0,
            waiting: 0,
            grown: 0,
        };
        for segment in segments {
            if !keys.is_empty() {
                let key = keys
                    .iter()
                    .map(|k| ScalarValue::try_from_array(k, segment.start))
                    .collect::<Result<Vec<_>>>()?;
                if self.key.as_ref() != Some(&key) {
                    // The open partition ended: the operator emits what it had not (counted
                    // among `waiting` when its rows came).
                    self.reset()?;
                    self.key = Some(key);
                }
            }
            let rows = batch.slice(segment.start, segment.len());
            self.take(&rows, &sizes[segment])?;
            // Everything held counts until the operator prunes it after emitting.
            step.held = step.held.saturating_add(self.bytes());
            step.held_rows += self.rows;
            let waiting = self.rows - self.emitted;
            step.waiting += waiting;
            step.grown = step
                .grown
                .saturating_add((waiting as i64).saturating_mul(self.partition_bytes));
            self.emitted = self
                .reaches
                .iter()
                .map(|r| r.state.last_calculated_index)
                .min()
                .unwrap_or(self.rows);
            let prune = self
                .reaches
                .iter()
                .map(Reach::needed)
                .min()
                .unwrap_or(self.rows);
            self.prune(prune);
        }
        Ok(step)
    }

    fn take(&mut self, rows: &RecordBatch, sizes: &[i64]) -> Result<()> {
        let bytes = sizes.iter().copied().fold(0i64, i64::saturating_add);
        self.chunks.push_back(Chunk {
            rows: sizes.len(),
            bytes,
            widest: sizes.iter().copied().max().unwrap_or(0),
            narrowest: sizes.iter().copied().min().unwrap_or(0),
        });
        self.rows += sizes.len();
        self.partition_bytes = self.partition_bytes.saturating_add(bytes);
        for reach in &mut self.reaches {
            reach.take(rows, self.rows)?;
        }
        Ok(())
    }

    /// What the operator holds for the open partition (see [`Step::held`]), and this replay's
    /// own copy of the rows' `ORDER BY` values.
    fn bytes(&self) -> i64 {
        let rows = self
            .chunks
            .iter()
            .map(|c| c.bytes)
            .fold(0i64, i64::saturating_add);
        let widest = self.chunks.iter().map(|c| c.widest).max().unwrap_or(0);
        let kept = self.reaches.iter().map(|r| match r.keeps {
            Keeps::Little => 0,
            Keeps::Clones => widest.saturating_mul(self.rows as i64),
            Keeps::Frame => rows,
            Keeps::Partition => self.partition_bytes,
        });
        let keys = self
            .reaches
            .iter()
            .flat_map(|r| &r.keys)
            .map(|k| k.get_array_memory_size() as i64);
        kept.chain(keys)
            .fold(rows.saturating_mul(2), i64::saturating_add)
    }

    /// Drops the first `n` held rows, as the operator does once no function needs them.
    fn prune(&mut self, n: usize) {
        let mut left = n;
        while left > 0 {
            let Some(chunk) = self.chunks.front_mut() else {
                break;
            };
            if chunk.rows <= left {
                left -= chunk.rows;
                self.chunks.pop_front();
            } else {
                // What is left of a chunk takes at most its widest row per row, and at most
                // the chunk less its narrowest rows.
                chunk.rows -= left;
                let fewer = chunk
                    .bytes
                    .saturating_sub(chunk.narrowest.saturating_mul(left as i64));
                chunk.bytes = fewer.min(chunk.widest.saturating_mul(chunk.rows as i64));
                left = 0;
            }
        }
        self.rows -= n;
        self.emitted -= n;
        for reach in &mut self.reaches {
            reach.prune(n);
        }
    }

    fn reset(&mut self) -> Result<()> {
        self.chunks.clear();
        self.rows = 0;
        self.emitted = 0;
        self.partition_bytes = 0;
        for reach in &mut self.reaches {
            reach.reset()?;
        }
        Ok(())
    }
}

impl Reach {
    fn new(expr: &dyn WindowExpr) -> Result<Self> {
        let window_frame = Arc::clone(expr.get_window_frame());
        let function = expr
            .as_any()
            .downcast_ref::<StandardWindowExpr>()
            .map(|s| Arc::clone(s.get_standard_func_expr()));
        let evaluator = function
            .as_ref()
            .map(|f| f.create_evaluator())
            .transpose()?;
        let frame = evaluator.as_ref().is_none_or(|e| e.uses_window_frame());
        let causal = match &evaluator {
            Some(e) if !e.uses_window_frame() => e.is_causal(),
            _ => window_frame.is_causal(),
        };
        let order_by = if frame && window_frame.units != WindowFrameUnits::Rows {
            expr.order_by()
                .iter()
                .map(|o| Arc::clone(&o.expr))
                .collect()
        } else {
            Vec::new()
        };
        let mut state = WindowAggState::new(&DataType::Null)?;
        if frame {
            let sort_options = expr.order_by().iter().map(|o| o.options).collect();
            state.window_frame_ctx = Some(WindowFrameContext::new(
                Arc::clone(&window_frame),
                sort_options,
            ));
        }
        Ok(Self {
            function,
            evaluator,
            causal,
            unbounded_start: window_frame.start_bound.is_unbounded(),
            aggregate: expr.as_any().is::<PlainAggregateWindowExpr>(),
            keys: vec![],
            order_by,
            template: state.clone(),
            state,
            keeps: keeps(expr, window_frame.start_bound.is_unbounded()),
        })
    }

    /// Takes the next rows of the partition (`rows` in all now) and computes what it can, as
    /// `StandardWindowExpr` and the aggregate window expressions do.
    fn take(&mut self, batch: &RecordBatch, rows: usize) -> Result<()> {
        if !self.order_by.is_empty() {
            let mut keys = Vec::with_capacity(self.order_by.len());
            for (i, e) in self.order_by.iter().enumerate() {
                let new = e.evaluate(batch)?.into_array(batch.num_rows())?;
                keys.push(match self.keys.get(i) {
                    Some(old) if !old.is_empty() => concat(&[old.as_ref(), new.as_ref()])?,
                    _ => new,
                });
            }
            self.keys = keys;
        }
        let before = self.state.last_calculated_index;
        let groups = matches!(
            self.state.window_frame_ctx,
            Some(WindowFrameContext::Groups { .. })
        );
        if groups {
            // Its context learns the groups row by row: walked as the operator walks it.
            for idx in before..rows {
                if !self.compute(idx, rows)? {
                    break;
                }
            }
        } else {
            // A frame's end only moves forward with the row, so the first row still waiting
            // is found by bisection (the operator computes every row; this replay need not).
            // Each row found computable is where the next search starts (a RANGE frame's
            // bounds are searched forward from the last frame).
            let (mut lo, mut hi) = (before, rows);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if !self.compute(mid, rows)? {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
        }
        // Rows computed by the frame (else by the evaluator's `get_range`).
        let framed = self.state.window_frame_ctx.is_some();
        if framed && self.unbounded_start {
            if self.aggregate {
                // An accumulator that never retracts: the rows behind are not needed.
                let end = self.state.window_frame_range.end;
                self.state.window_frame_range.start = end.saturating_sub(1);
            } else if let Some(evaluator) = &mut self.evaluator {
                let computed = self.state.last_calculated_index - before;
                self.state.out_col = new_null_array(&DataType::Null, computed);
                evaluator.memoize(&mut self.state)?;
            }
        }
        Ok(())
    }

    /// The frame of row `idx` of the `rows` it was given (searched from the last one kept).
    fn range(&mut self, idx: usize, rows: usize) -> Result<Range<usize>> {
        let WindowAggState {
            window_frame_range,
            window_frame_ctx,
            ..
        } = &mut self.state;
        match (window_frame_ctx.as_mut(), &self.evaluator) {
            (Some(ctx), _) => ctx.calculate_range(&self.keys, window_frame_range, rows, idx),
            (None, Some(e)) => e.get_range(idx, rows),
            (None, None) => Ok(idx..idx + 1),
        }
    }

    /// Computes row `idx` (and so every row before it) unless it waits; whether it did.
    fn compute(&mut self, idx: usize, rows: usize) -> Result<bool> {
        let range = self.range(idx, rows)?;
        if !self.causal && range.end == rows {
            return Ok(false);
        }
        self.state.window_frame_range = range;
        self.state.last_calculated_index = idx + 1;
        Ok(true)
    }

    /// The first row it still needs, as the operator counts it.
    fn needed(&self) -> usize {
        self.state
            .window_frame_range
            .start
            .min(self.state.last_calculated_index)
    }

    fn prune(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        self.state.prune_state(n);
        for k in &mut self.keys {
            *k = k.slice(n, k.len() - n);
        }
    }

    fn reset(&mut self) -> Result<()> {
        self.state = self.template.clone();
        self.keys.clear();
        // A function's own state (what `first_value` found) belongs to its partition.
        self.evaluator = self
            .function
            .as_ref()
            .map(|f| f.create_evaluator())
            .transpose()?;
        Ok(())
    }
}
