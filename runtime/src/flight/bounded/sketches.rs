//! Sketch aggregates: what a client may ask of one, and what one is counted for.
//!
//! `approx_percentile_cont(x, 0.5, 2147483647)` makes DataFusion's t-digest reserve capacity
//! for that many centroids (16 bytes each) the first time it merges values: 32 GiB for one
//! group, an allocation that aborts the process before any pool sees it. The number of
//! centroids is a constant of the statement, so it is checked while planning.
//!
//! A sketch keeps a fixed, large state per group (`approx_distinct` 16 KiB, even for a group of
//! one value) in an accumulator of its own, which DataFusion copies twice when a partial
//! aggregate hands its groups on (each state to a scalar, the scalars to an array) and once more
//! when the next aggregate merges them; an aggregate out of memory hands its groups on early or
//! spills them, and reads spilled states back 8,192 groups (128 MiB) at a time. DataFusion
//! counts an aggregate's accumulators only after each batch: a `GROUP BY` of a million groups
//! held four times its budget before it was refused. So each sketch claims [`STATE_COPIES`]
//! times its state from the query's pool as it is created (and as it grows), and reports none
//! of it to the aggregate: the statement is refused, with RESOURCE_EXHAUSTED, once its sketches
//! and their copies would pass the budget, never handed on or spilled because of them.

use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::datatypes::{DataType, FieldRef};
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::logical_expr::expr::{
    AggregateFunction, AggregateFunctionParams, WindowFunction, WindowFunctionDefinition,
    WindowFunctionParams,
};
use datafusion::logical_expr::function::{
    AccumulatorArgs, AggregateFunctionSimplification, StateFieldsArgs,
};
use datafusion::logical_expr::utils::AggregateOrderSensitivity;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Documentation, Expr, GroupsAccumulator, Operator,
    ReversedUDAF, SetMonotonicity, Signature, StatisticsArgs,
};

use super::Budget;

/// The aggregates whose every group keeps a sketch of a fixed size.
const SKETCHES: [&str; 4] = [
    "approx_distinct",
    "approx_median",
    "approx_percentile_cont",
    "approx_percentile_cont_with_weight",
];

/// How many times its own size a sketch is claimed for: the accumulator, and the scalar and
/// array a partial aggregate makes of it as it hands its groups on. The accumulator is dropped
/// (and its claim released) as its scalar is made, so the claim also covers the array while the
/// next aggregate, claiming its own sketches, merges it.
const STATE_COPIES: usize = 3;

/// `function`, claiming its sketches from `budget` if it is a sketch; with no budget, from the
/// budget its calls are bound to ([`bind_aggregate`]), refusing to run unbound.
pub(super) fn counted(function: Arc<AggregateUDF>, budget: Option<&Budget>) -> Arc<AggregateUDF> {
    if SKETCHES.contains(&function.name()) && !function.inner().is::<Sketch>() {
        Arc::new(AggregateUDF::new_from_impl(Sketch {
            claims: budget.map(|budget| Claims::of(&function, budget)),
            inner: function,
        }))
    } else {
        function
    }
}

/// `function` bound to `budget`, if it is a sketch bound to no statement yet.
fn bound(function: &AggregateUDF, budget: &Budget) -> Option<Arc<AggregateUDF>> {
    let sketch = function.inner().downcast_ref::<Sketch>()?;
    if sketch.claims.is_some() {
        return None;
    }
    Some(Arc::new(AggregateUDF::new_from_impl(Sketch {
        inner: sketch.inner.clone(),
        claims: Some(Claims::of(&sketch.inner, budget)),
    })))
}

/// `function` bound to no statement, if it is a sketch bound to one.
fn unbound(function: &AggregateUDF) -> Option<Arc<AggregateUDF>> {
    let sketch = function.inner().downcast_ref::<Sketch>()?;
    sketch.claims.as_ref()?;
    Some(Arc::new(AggregateUDF::new_from_impl(Sketch {
        inner: sketch.inner.clone(),
        claims: None,
    })))
}

/// An aggregate or window call, its sketch bound to no statement (a plan kept for the next
/// execution of a prepared statement, which binds it to its own budget).
pub(super) fn unbind(e: Expr) -> Transformed<Expr> {
    match e {
        Expr::AggregateFunction(f) => match unbound(&f.func) {
            Some(func) => Transformed::yes(Expr::AggregateFunction(AggregateFunction {
                func,
                params: f.params,
            })),
            None => Transformed::no(Expr::AggregateFunction(f)),
        },
        Expr::WindowFunction(w) => match &w.fun {
            WindowFunctionDefinition::AggregateUDF(func) => match unbound(func) {
                Some(func) => Transformed::yes(Expr::WindowFunction(Box::new(WindowFunction {
                    fun: WindowFunctionDefinition::AggregateUDF(func),
                    params: w.params,
                }))),
                None => Transformed::no(Expr::WindowFunction(w)),
            },
            WindowFunctionDefinition::WindowUDF(_) => Transformed::no(Expr::WindowFunction(w)),
        },
        other => Transformed::no(other),
    }
}

/// An aggregate call, its sketch bound to `budget` (a statement's copy of a shared session).
pub(super) fn bind_aggregate(f: AggregateFunction, budget: &Budget) -> Transformed<Expr> {
    match bound(&f.func, budget) {
        Some(func) => Transformed::yes(Expr::AggregateFunction(AggregateFunction {
            func,
            params: f.params,
        })),
        None => Transformed::no(Expr::AggregateFunction(f)),
    }
}

/// A window call, its sketch bound to `budget`.
pub(super) fn bind_window(w: WindowFunction, budget: &Budget) -> Transformed<Expr> {
    let func = match &w.fun {
        WindowFunctionDefinition::AggregateUDF(func) => bound(func, budget),
        WindowFunctionDefinition::WindowUDF(_) => None,
    };
    match func {
        Some(func) => Transformed::yes(Expr::WindowFunction(Box::new(WindowFunction {
            fun: WindowFunctionDefinition::AggregateUDF(func),
            params: w.params,
        }))),
        None => Transformed::no(Expr::WindowFunction(Box::new(w))),
    }
}

/// The most centroids a sketch may keep: 16 KB, what `approx_distinct` keeps per group.
/// DataFusion's default is 100.
pub(super) const MAX_CENTROIDS: u64 = 1_000;

/// Refuses a percentile sketch asked to keep more than [`MAX_CENTROIDS`] centroids.
pub(super) fn check_sketch(e: &Expr) -> Result<()> {
    let (name, args) = match e {
        Expr::AggregateFunction(AggregateFunction { func, params }) => (func.name(), &params.args),
        Expr::WindowFunction(w) => match w.as_ref() {
            WindowFunction {
                fun: WindowFunctionDefinition::AggregateUDF(func),
                params,
            } => (func.name(), &params.args),
            _ => return Ok(()),
        },
        _ => return Ok(()),
    };
    // The argument's position, counting the value a WITHIN GROUP orders by as the first.
    let position = match name {
        "approx_percentile_cont" => 2,
        "approx_percentile_cont_with_weight" => 3,
        _ => return Ok(()),
    };
    let Some(Expr::Literal(value, _)) = args.get(position) else {
        return Ok(());
    };
    let centroids = match value {
        ScalarValue::Int8(Some(n)) => i128::from(*n),
        ScalarValue::Int16(Some(n)) => i128::from(*n),
        ScalarValue::Int32(Some(n)) => i128::from(*n),
        ScalarValue::Int64(Some(n)) => i128::from(*n),
        ScalarValue::UInt8(Some(n)) => i128::from(*n),
        ScalarValue::UInt16(Some(n)) => i128::from(*n),
        ScalarValue::UInt32(Some(n)) => i128::from(*n),
        ScalarValue::UInt64(Some(n)) => i128::from(*n),
        _ => return Ok(()),
    };
    if centroids > i128::from(MAX_CENTROIDS) {
        return Err(DataFusionError::Plan(format!(
            "{name}'s number of centroids ({centroids}) is above the {MAX_CENTROIDS} a sketch \
             may keep (16 bytes each, per group)"
        )));
    }
    Ok(())
}

#[derive(Debug)]
struct Sketch {
    inner: Arc<AggregateUDF>,
    /// What its accumulators claim from, once bound to a statement.
    claims: Option<Claims>,
}

// Two wrappers are the same function when they wrap the same one, whichever budget they claim
// from (one per statement: no plan outlives its statement's session).
impl PartialEq for Sketch {
    fn eq(&self, other: &Self) -> bool {
        self.inner == other.inner
    }
}

impl Eq for Sketch {}

impl std::hash::Hash for Sketch {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.inner.hash(state);
    }
}

/// What the sketches of one function in a statement claim from its pool, together.
#[derive(Debug, Clone)]
struct Claims {
    reservation: Arc<MemoryReservation>,
    /// The query's budget, for the refusal.
    limit: usize,
}

impl Claims {
    fn of(function: &AggregateUDF, budget: &Budget) -> Self {
        let claims = MemoryConsumer::new(format!("lake: {} sketches", function.name()))
            .register(&budget.pool);
        Self {
            reservation: Arc::new(claims),
            limit: budget.limit(),
        }
    }
}

impl Sketch {
    fn of(&self) -> &dyn AggregateUDFImpl {
        self.inner.inner().as_ref()
    }

    fn claims(&self) -> Result<&Claims> {
        self.claims.as_ref().ok_or_else(|| {
            DataFusionError::Internal(format!(
                "{} ran outside a statement: there is no memory budget to count it against",
                self.name()
            ))
        })
    }
}

impl AggregateUDFImpl for Sketch {
    fn name(&self) -> &str {
        self.of().name()
    }

    fn aliases(&self) -> &[String] {
        self.of().aliases()
    }

    fn schema_name(&self, params: &AggregateFunctionParams) -> Result<String> {
        self.of().schema_name(params)
    }

    fn human_display(&self, params: &AggregateFunctionParams) -> Result<String> {
        self.of().human_display(params)
    }

    fn window_function_schema_name(&self, params: &WindowFunctionParams) -> Result<String> {
        self.of().window_function_schema_name(params)
    }

    fn display_name(&self, params: &AggregateFunctionParams) -> Result<String> {
        self.of().display_name(params)
    }

    fn window_function_display_name(&self, params: &WindowFunctionParams) -> Result<String> {
        self.of().window_function_display_name(params)
    }

    fn signature(&self) -> &Signature {
        self.of().signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.of().return_type(arg_types)
    }

    fn return_field(&self, arg_fields: &[FieldRef]) -> Result<FieldRef> {
        self.of().return_field(arg_fields)
    }

    fn is_nullable(&self) -> bool {
        self.of().is_nullable()
    }

    fn accumulator(&self, acc_args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Copies::claimed(
            self.of().accumulator(acc_args)?,
            self.name(),
            self.claims()?,
        )
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        self.of().state_fields(args)
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        self.of().groups_accumulator_supported(args)
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        self.of().create_groups_accumulator(args)
    }

    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Copies::claimed(
            self.of().create_sliding_accumulator(args)?,
            self.name(),
            self.claims()?,
        )
    }

    fn with_beneficial_ordering(
        self: Arc<Self>,
        beneficial_ordering: bool,
    ) -> Result<Option<Arc<dyn AggregateUDFImpl>>> {
        let ordered =
            Arc::clone(self.inner.inner()).with_beneficial_ordering(beneficial_ordering)?;
        Ok(ordered.map(|inner| {
            Arc::new(Sketch {
                inner: Arc::new(AggregateUDF::new_from_shared_impl(inner)),
                claims: self.claims.clone(),
            }) as Arc<dyn AggregateUDFImpl>
        }))
    }

    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        self.of().order_sensitivity()
    }

    fn simplify(&self) -> Option<AggregateFunctionSimplification> {
        self.of().simplify()
    }

    fn simplify_expr_op_literal(
        &self,
        agg_function: &AggregateFunction,
        arg: &Expr,
        op: Operator,
        lit: &Expr,
        arg_is_left: bool,
    ) -> Result<Option<Expr>> {
        self.of()
            .simplify_expr_op_literal(agg_function, arg, op, lit, arg_is_left)
    }

    fn reverse_expr(&self) -> ReversedUDAF {
        match self.of().reverse_expr() {
            ReversedUDAF::Reversed(reversed) if !reversed.inner().is::<Sketch>() => {
                ReversedUDAF::Reversed(Arc::new(AggregateUDF::new_from_impl(Sketch {
                    inner: reversed,
                    claims: self.claims.clone(),
                })))
            }
            other => other,
        }
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.of().coerce_types(arg_types)
    }

    fn is_descending(&self) -> Option<bool> {
        self.of().is_descending()
    }

    fn value_from_stats(&self, statistics_args: &StatisticsArgs) -> Option<ScalarValue> {
        self.of().value_from_stats(statistics_args)
    }

    fn default_value(&self, data_type: &DataType) -> Result<ScalarValue> {
        self.of().default_value(data_type)
    }

    fn supports_null_handling_clause(&self) -> bool {
        self.of().supports_null_handling_clause()
    }

    fn supports_within_group_clause(&self) -> bool {
        self.of().supports_within_group_clause()
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.of().documentation()
    }

    fn set_monotonicity(&self, data_type: &DataType) -> SetMonotonicity {
        self.of().set_monotonicity(data_type)
    }
}

/// A sketch's accumulator, holding its claim on the query's pool.
#[derive(Debug)]
struct Copies {
    inner: Box<dyn Accumulator>,
    name: String,
    claims: Claims,
    claimed: usize,
}

impl Copies {
    fn claimed(
        inner: Box<dyn Accumulator>,
        name: &str,
        claims: &Claims,
    ) -> Result<Box<dyn Accumulator>> {
        let mut copies = Self {
            inner,
            name: name.to_owned(),
            claims: claims.clone(),
            claimed: 0,
        };
        copies.claim()?;
        Ok(Box::new(copies))
    }

    /// Claims what the sketch and its copies take now.
    fn claim(&mut self) -> Result<()> {
        let want = self.inner.size().saturating_mul(STATE_COPIES);
        let reservation = &self.claims.reservation;
        if want > self.claimed {
            reservation.try_grow(want - self.claimed).map_err(|_| {
                DataFusionError::ResourcesExhausted(format!(
                    "{}'s sketches need more than the query's {} MiB \
                     (LAKE_QUERY_MEMORY_LIMIT_MB): each group keeps one of {} bytes, counted \
                     {STATE_COPIES} times (DataFusion copies it as it hands groups on); group \
                     by fewer values",
                    self.name,
                    self.claims.limit / (1024 * 1024),
                    self.inner.size()
                ))
            })?;
        } else {
            reservation.shrink(self.claimed - want);
        }
        self.claimed = want;
        Ok(())
    }
}

impl Drop for Copies {
    fn drop(&mut self) {
        self.claims.reservation.shrink(self.claimed);
    }
}

impl Accumulator for Copies {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.inner.update_batch(values)?;
        self.claim()
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        self.inner.evaluate()
    }

    /// Nothing: the sketch is claimed on its own, so that an aggregate never hands its groups
    /// on, or spills them, because of it.
    fn size(&self) -> usize {
        std::mem::size_of_val(self)
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        self.inner.state()
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.inner.merge_batch(states)?;
        self.claim()
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.inner.retract_batch(values)?;
        self.claim()
    }

    fn supports_retract_batch(&self) -> bool {
        self.inner.supports_retract_batch()
    }
}

#[cfg(test)]
mod tests {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion::execution::SessionStateBuilder;
    use datafusion::execution::memory_pool::{GreedyMemoryPool, MemoryPool};
    use datafusion::prelude::{SessionConfig, SessionContext};

    use super::super::testing::{counted, run};
    use super::*;

    async fn plan(sql: &str) -> Result<()> {
        let ctx = SessionContext::new();
        let plan = ctx.state().create_logical_plan(sql).await?;
        let mut found = Ok(());
        plan.apply_with_subqueries(|node| {
            for e in node.expressions() {
                e.apply(|e| {
                    if let Err(err) = check_sketch(e) {
                        found = Err(err);
                    }
                    Ok(TreeNodeRecursion::Continue)
                })?;
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        found
    }

    #[tokio::test]
    async fn sketch_sizes_are_bounded_in_every_form() {
        for sql in [
            "SELECT approx_percentile_cont(v, 0.5, 1001) FROM (VALUES (1.0)) t(v)",
            "SELECT approx_percentile_cont(0.5, 2147483647) WITHIN GROUP (ORDER BY v) \
             FROM (VALUES (1.0)) t(v)",
            "SELECT approx_percentile_cont_with_weight(v, 1, 0.5, 5000) FROM (VALUES (1.0)) t(v)",
            "SELECT approx_percentile_cont(v, 0.5, 100000) OVER () FROM (VALUES (1.0)) t(v)",
        ] {
            let err = plan(sql).await.expect_err(sql).to_string();
            assert!(err.contains("centroids"), "{sql}: {err}");
        }
        for sql in [
            "SELECT approx_percentile_cont(v, 0.5, 1000) FROM (VALUES (1.0)) t(v)",
            "SELECT approx_percentile_cont(v, 0.5) FROM (VALUES (1.0)) t(v)",
            "SELECT approx_percentile_cont(0.5, 200) WITHIN GROUP (ORDER BY v) \
             FROM (VALUES (1.0)) t(v)",
        ] {
            plan(sql).await.expect(sql);
        }
    }

    /// One partition: a t-digest's estimate depends on the order its parts merge in.
    fn config() -> SessionConfig {
        SessionConfig::new().with_target_partitions(1)
    }

    fn lake(pool: &Arc<dyn MemoryPool>) -> SessionContext {
        counted(
            SessionStateBuilder::new()
                .with_config(config())
                .with_default_features(),
            Arc::clone(pool),
        )
    }

    const ROWS: &str = "(SELECT value % 7 AS g, value AS v FROM generate_series(1, 5000))";

    /// Claimed on their own, sketches give what DataFusion gives: the same values under the
    /// same names, grouped, whole, ordered within a group and as window functions.
    #[tokio::test]
    async fn sketches_keep_their_results_and_names() {
        let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(256 << 20));
        let lake = lake(&pool);
        let plain = SessionContext::new_with_config(config());
        for sql in [
            "SELECT g, approx_distinct(v), approx_median(v), approx_percentile_cont(v, 0.9), \
             approx_percentile_cont_with_weight(v, g + 1, 0.5) FROM {ROWS} GROUP BY g ORDER BY g",
            "SELECT g, approx_percentile_cont(0.25, 50) WITHIN GROUP (ORDER BY v DESC) \
             FROM {ROWS} GROUP BY g ORDER BY g",
            "SELECT approx_distinct(v), approx_median(v) FROM {ROWS}",
            "SELECT g, v, approx_distinct(v) OVER (PARTITION BY g ORDER BY v) AS d, \
             approx_median(v) OVER (PARTITION BY g) AS m FROM {ROWS} ORDER BY g, v LIMIT 20",
        ] {
            let sql = sql.replace("{ROWS}", ROWS);
            let want = run(&plain, &sql).await;
            assert!(!want.starts_with("error"), "{sql}: {want}");
            assert_eq!(run(&lake, &sql).await, want, "{sql}");
            assert_eq!(pool.reserved(), 0, "{sql}: claims left behind");
        }
    }

    /// Each group's sketch is claimed as it is made: too many groups are refused before the
    /// aggregate holds them, naming the limit, and what was claimed is given back.
    #[tokio::test]
    async fn sketches_past_the_budget_are_refused() {
        let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(8 << 20));
        let lake = lake(&pool);
        let refused = run(
            &lake,
            "SELECT count(d) FROM (SELECT approx_distinct(value) AS d FROM \
             generate_series(1, 100000) GROUP BY value % 1000)",
        )
        .await;
        assert!(
            refused.contains("approx_distinct's sketches")
                && refused.contains("LAKE_QUERY_MEMORY_LIMIT_MB"),
            "{refused}"
        );
        assert_eq!(pool.reserved(), 0);
        let fits = run(
            &lake,
            "SELECT count(d) AS n FROM (SELECT approx_distinct(value) AS d FROM \
             generate_series(1, 100000) GROUP BY value % 100)",
        )
        .await;
        assert!(fits.contains("| 100 |"), "{fits}");
    }
}
