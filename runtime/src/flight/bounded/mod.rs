//! Every scalar function of a statement runs against the statement's memory budget.
//!
//! A failed allocation aborts the process (Rust cannot recover from it), and no memory pool sees
//! a function's own buffers: `repeat(arrow_cast('x', 'LargeUtf8'), 2^45)` asked for 32 TiB, and
//! `array_to_string(range(100000), repeat('x', 100000))` for 10 GB, each passing any per-call
//! cap that is not tied to what the query already holds. So each function call is wrapped:
//! - before it runs, what it would produce is computed from its arguments for every function
//!   whose output can outgrow its input ([`Growth`]) and reserved from the query's pool: a call
//!   that does not fit what the query has left is refused with RESOURCE_EXHAUSTED;
//! - after it ran, the buffers it allocated are claimed in the query's pool for as long as they
//!   live (large scalars, e.g. constants folded while planning, for as long as the statement),
//!   so values that coexist — `concat(repeat(…), repeat(…), …)` — add up against the one budget
//!   the query's operators share.
//!
//! The SQL planner and some simplifications build calls from DataFusion's own function objects,
//! not the session's: an analyzer and an optimizer rule wrap whatever is left unwrapped. The
//! same rule makes a projection's large constant (`SELECT repeat('x', 2^27) FROM t`, folded into
//! one value while planning) a counted call, since a projection copies a constant once per row
//! ([`Expand`]).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow::array::{Array, ArrayRef, Int64Array};
use arrow::buffer::Buffer;
use arrow::datatypes::{DataType, FieldRef, IntervalUnit, TimeUnit};
use arrow::error::ArrowError;
use datafusion::common::config::{ConfigEntry, ConfigExtension, ConfigOptions, ExtensionOptions};
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryLimit, MemoryPool};
use datafusion::logical_expr::expr::{Cast, ScalarFunction, TryCast};
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Documentation, Expr, LogicalPlan, Operator, ReturnFieldArgs,
    ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};
use datafusion::optimizer::analyzer::AnalyzerRule;
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};
use datafusion::prelude::SessionContext;

pub(in crate::flight) use batches::builds_more_than_it_reads;
use claim::CaseResult;
use concat::ConcatOperator;
pub(in crate::flight) use concat::{operands, operator_column};
use deadline::Deadline;
use expand::Expand;

mod batches;
mod claim;
mod compile;
mod concat;
mod deadline;
mod expand;
mod patterns;
mod sketches;
pub(in crate::flight) mod table_args;
#[cfg(test)]
mod testing;

/// The largest value one call may produce, whatever the budget.
pub(super) const MAX_VALUE_BYTES: i64 = 256 * 1024 * 1024;
/// A constant above this size is copied into its rows through a counted call where an
/// expression would copy it once per row (below it, a batch of 8,192 rows holds at most 32 MiB
/// of it) …
const EXPANDED_LITERAL_BYTES: usize = 4 * 1024;
/// … and so is every constant above this size once the constants of one plan node add up to
/// more than [`EXPANDED_LITERAL_BYTES`] (10,000 columns of 4,000 bytes each are 40 MB a row).
const EXPANDED_AMONG_MANY_BYTES: usize = 256;
/// A function that multiplies nothing is still reserved for what it is given (scalars once per
/// row) when that is more than this: `substr(<1 MB constant>, col)` builds 8 GB for 8,192 rows.
const RESERVED_COPY_BYTES: i64 = 1024 * 1024;
/// What a scalar result costs, in times its size: the function's working copies while it is
/// made (a 200 MB `repeat` built, turned into an array, then into a scalar), and the plan's
/// copies of a constant folded while planning, as the optimizer rewrites it. Measured: one
/// folded 200 MB constant took the process from 130 MiB to 1,070 MiB.
const SCALAR_COPIES: i64 = 5;
/// The widest row a fixed-size type may have (`CAST(l AS BIGINT[2147483647])` is 16 GiB a row).
const MAX_FIXED_ROW_BYTES: i64 = 1024 * 1024;
/// The rows of a batch a cast builds at once (DataFusion's default batch size, which lake keeps).
const CAST_BATCH_ROWS: usize = 8192;
/// What one number takes as text in `array_to_string`, at most (`-9223372036854775808`, a
/// float's or a timestamp's longest rendering).
const NUMBER_TEXT_BYTES: i64 = 40;
const MIB: usize = 1024 * 1024;

/// One statement's memory budget, as its expressions see it.
#[derive(Debug, Clone)]
pub(super) struct Budget {
    pool: Arc<dyn MemoryPool>,
    /// Large scalar results (constants folded while planning), held until the statement ends.
    held: Arc<Mutex<datafusion::execution::memory_pool::MemoryReservation>>,
    deadline: Arc<Deadline>,
    /// What the statement's regular expressions hold compiled.
    measured: Arc<compile::Measured>,
}

impl Budget {
    /// The budget of a statement that may hold what `pool` allows and must be done by
    /// `deadline` (its `limit` after it was admitted).
    pub(super) fn new(pool: Arc<dyn MemoryPool>, deadline: Instant, limit: Duration) -> Self {
        let held = MemoryConsumer::new("lake: scalars").register(&pool);
        Self {
            pool,
            held: Arc::new(Mutex::new(held)),
            deadline: Arc::new(Deadline::new(deadline, limit)),
            measured: Arc::default(),
        }
    }

    /// The statement runs again from now (a kept plan redeemed): its time counts to `deadline`.
    pub(super) fn rearm(&self, deadline: Instant) {
        self.deadline.rearm(deadline);
    }

    fn limit(&self) -> usize {
        match self.pool.memory_limit() {
            MemoryLimit::Finite(limit) => limit,
            MemoryLimit::Infinite | MemoryLimit::Unknown => usize::MAX,
        }
    }

    fn refused(&self, function: &str, bytes: i64) -> DataFusionError {
        self.refused_as(function, bytes, 1)
    }

    /// [`Self::refused`] for `bytes` counted `copies` times over (a scalar: [`SCALAR_COPIES`]).
    fn refused_as(&self, function: &str, bytes: i64, copies: i64) -> DataFusionError {
        let counted = if copies > 1 {
            format!(
                ", a value counted {copies} times over (its working copies, and the plan's \
                 copies of a constant)"
            )
        } else {
            String::new()
        };
        DataFusionError::ResourcesExhausted(format!(
            "{} would produce {bytes} bytes{counted}; the query holds {} of its {} MiB \
             (LAKE_QUERY_MEMORY_LIMIT_MB) and at most {MAX_VALUE_BYTES} bytes per value are \
             allowed",
            shown(function),
            self.pool.reserved(),
            self.limit() / MIB
        ))
    }

    /// Reserves what a call of `function` will produce, for as long as it runs.
    fn reserve(
        &self,
        function: &str,
        bytes: i64,
        copies: i64,
    ) -> Result<datafusion::execution::memory_pool::MemoryReservation> {
        let reservation = MemoryConsumer::new(format!("lake: {function}()")).register(&self.pool);
        let want = usize::try_from(bytes.max(0).saturating_mul(copies)).unwrap_or(usize::MAX);
        reservation
            .try_grow(want)
            .map_err(|_| self.refused_as(function, bytes, copies))?;
        Ok(reservation)
    }

    /// Counts what `function` produced in `out` (buffers not among its arguments' `inputs`)
    /// against the budget for as long as it lives; refuses a result that took the query past
    /// its limit.
    fn claim(&self, function: &str, out: &ColumnarValue, inputs: &HashSet<usize>) -> Result<()> {
        match out {
            ColumnarValue::Array(array) => {
                let claims = ArrowPool(self.pool.clone());
                let mut fresh = Vec::new();
                buffers(&array.to_data(), &mut |b| {
                    if !inputs.contains(&(b.data_ptr().as_ptr() as usize)) {
                        fresh.push(b.clone());
                    }
                });
                for buffer in &fresh {
                    buffer.claim(&claims);
                }
            }
            // Scalars are constants folded while planning (they stay in the plan) or one value
            // of a call whose arguments were all scalars: counted, however small, for the rest
            // of the statement (49,000 folded constants of 1 MB each are 49 GB).
            ColumnarValue::Scalar(scalar) => {
                let size = scalar.size() as i64;
                let counted = size.saturating_mul(SCALAR_COPIES);
                let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
                held.try_grow(usize::try_from(counted).unwrap_or(usize::MAX))
                    .map_err(|_| self.refused_as(function, size, SCALAR_COPIES))?;
            }
        }
        // An array's buffers are claimed without a check against the budget itself: operators
        // that can spill (sort, aggregate) reserve the batches holding them too, and spill when
        // they see the claims. So the pool may hold up to twice the budget for one statement's
        // data; past that, the results no operator holds are what outgrew it.
        let held = self.pool.reserved();
        if held > self.limit().saturating_mul(2) {
            return Err(DataFusionError::ResourcesExhausted(format!(
                "the values {} made leave the query holding {held} bytes, more than twice its {} \
                 MiB (LAKE_QUERY_MEMORY_LIMIT_MB)",
                shown(function),
                self.limit() / MIB
            )));
        }
        Ok(())
    }
}

/// Where a statement's [`Budget`] is found: among its configuration options, which reach every
/// rule (analyzer, optimizer) and every function call made with the statement's options
/// (constants folded while a table function's arguments are resolved). A session shared by an
/// endpoint's statements holds none (a call that needs one is refused, see [`Counted`]); each
/// statement's copy of it holds its own. It cannot be set (`SET lake_budget.… = …` is refused)
/// and shows no entries (`SHOW ALL`).
#[derive(Debug, Clone, Default)]
pub(in crate::flight) struct StatementBudget(Option<Budget>);

impl StatementBudget {
    pub(in crate::flight) fn of(budget: Budget) -> Self {
        Self(Some(budget))
    }
}

impl ConfigExtension for StatementBudget {
    const PREFIX: &'static str = "lake_budget";
}

impl ExtensionOptions for StatementBudget {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
    fn cloned(&self) -> Box<dyn ExtensionOptions> {
        Box::new(self.clone())
    }
    fn set(&mut self, key: &str, _value: &str) -> Result<()> {
        Err(DataFusionError::Configuration(format!(
            "{}.{key} cannot be set: a statement's memory budget is the endpoint's \
             (LAKE_QUERY_MEMORY_LIMIT_MB)",
            Self::PREFIX
        )))
    }
    fn entries(&self) -> Vec<ConfigEntry> {
        Vec::new()
    }
}

/// The budget of the statement whose options are `options`, if it has one.
pub(in crate::flight) fn budget_in(options: &ConfigOptions) -> Option<&Budget> {
    options
        .extensions
        .get::<StatementBudget>()
        .and_then(|b| b.0.as_ref())
}

/// The budget of the statement whose options are `options`, or an internal error: every
/// statement's session has one, so a call without one was made outside any statement.
fn required_budget<'a>(options: &'a ConfigOptions, what: &str) -> Result<&'a Budget> {
    budget_in(options).ok_or_else(|| {
        DataFusionError::Internal(format!(
            "{what} ran outside a statement: there is no memory budget to count it against"
        ))
    })
}

/// How a call of `function` reads in a refusal: an operator as itself (`||`), a CASE as one, a
/// function with its parentheses.
fn shown(function: &str) -> String {
    match function {
        concat::NAME => function.to_owned(),
        _ if patterns::is_operator(function) => function.to_owned(),
        claim::NAME => "a CASE".to_owned(),
        _ => format!("{function}()"),
    }
}

/// Every buffer of `data`, its children's and null masks included.
fn buffers(data: &arrow::array::ArrayData, each: &mut impl FnMut(&Buffer)) {
    for buffer in data.buffers() {
        each(buffer);
    }
    if let Some(nulls) = data.nulls() {
        each(nulls.buffer());
    }
    for child in data.child_data() {
        buffers(child, each);
    }
}

/// The allocations of the arguments, by address: a result that hands one back allocated nothing.
fn argument_buffers(args: &[ColumnarValue]) -> HashSet<usize> {
    let mut seen = HashSet::new();
    let mut add = |array: &dyn Array| {
        buffers(&array.to_data(), &mut |b| {
            seen.insert(b.data_ptr().as_ptr() as usize);
        })
    };
    for arg in args {
        match arg {
            ColumnarValue::Array(a) => add(a.as_ref()),
            ColumnarValue::Scalar(ScalarValue::List(a)) => add(a.as_ref()),
            ColumnarValue::Scalar(ScalarValue::LargeList(a)) => add(a.as_ref()),
            ColumnarValue::Scalar(ScalarValue::FixedSizeList(a)) => add(a.as_ref()),
            ColumnarValue::Scalar(_) => {}
        }
    }
    seen
}

/// A claim in the query's pool for the life of one buffer (arrow's `pool` accounting).
#[derive(Debug)]
struct ArrowPool(Arc<dyn MemoryPool>);

#[derive(Debug)]
struct Claimed(datafusion::execution::memory_pool::MemoryReservation);

impl arrow_buffer::MemoryReservation for Claimed {
    fn size(&self) -> usize {
        self.0.size()
    }

    fn resize(&mut self, new_size: usize) {
        self.0.resize(new_size);
    }
}

impl arrow_buffer::MemoryPool for ArrowPool {
    fn reserve(&self, size: usize) -> Box<dyn arrow_buffer::MemoryReservation> {
        let reservation = MemoryConsumer::new("lake: expression results").register(&self.0);
        reservation.grow(size);
        Box::new(Claimed(reservation))
    }

    fn available(&self) -> isize {
        let limit = match self.0.memory_limit() {
            MemoryLimit::Finite(limit) => limit,
            _ => usize::MAX,
        };
        isize::try_from(limit.saturating_sub(self.0.reserved())).unwrap_or(isize::MAX)
    }

    fn used(&self) -> usize {
        self.0.reserved()
    }

    fn capacity(&self) -> usize {
        match self.0.memory_limit() {
            MemoryLimit::Finite(limit) => limit,
            _ => usize::MAX,
        }
    }
}

/// How a function's output grows with its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Growth {
    /// `repeat(s, n)`: `len(s) × n` bytes.
    Repeat,
    /// `lpad(s, n [, fill])`, `rpad`: `n` characters, up to 4 bytes each.
    Pad,
    /// `array_repeat(x, n)`: `n` copies of `x`.
    ArrayRepeat,
    /// `array_resize(a, n [, fill])`: `n` elements of `fill`.
    ArrayResize,
    /// `replace(s, from, to)`: every position of `s` may become `to`.
    Replace,
    /// `regexp_replace(s, pattern, replacement …)`: every position may become the replacement
    /// (and its group references copy parts of what matched).
    RegexpReplace,
    /// `regexp_match(s, pattern [, flags])`: each capture group (and the whole match) may copy
    /// all of `s`.
    RegexpMatch,
    /// `array_to_string(a, delimiter [, null])`: every element as text, each with a delimiter.
    ArrayToString,
    /// `array_replace*(a, from, to …)`: every element of `a` may become `to`.
    ArrayReplace,
    /// `range(…)`: one 8-byte element per step from start to stop.
    Range,
    /// `generate_series(…)`: `range` with its stop.
    Series,
    /// `concat_ws(sep, …)`: the arguments, with a separator between each.
    ConcatWs,
    /// `to_char(t, format)`: every row formatted, a format item as up to 16 times its text
    /// (`%+` is `2001-07-08T00:34:60.026490+09:30`).
    Format,
    /// Anything that copies its arguments at most `n` times over (`concat`, `array_concat`,
    /// `upper` (a character may grow to three bytes), …).
    Copies(i64),
    /// [`Expand`]: its argument, once per row.
    Expand,
    /// [`CaseResult`]: what its argument (a CASE) built, claimed after it ran.
    Claim,
    /// A regular expression operator ([`patterns::RegexOperator`]): a boolean per row, its
    /// pattern compiled once and counted on its own (`patterns::by_pattern`).
    Match,
}

const GROWTH: [(&str, Growth); 31] = [
    ("repeat", Growth::Repeat),
    ("lpad", Growth::Pad),
    ("rpad", Growth::Pad),
    ("array_repeat", Growth::ArrayRepeat),
    ("array_resize", Growth::ArrayResize),
    ("replace", Growth::Replace),
    ("regexp_replace", Growth::RegexpReplace),
    ("regexp_match", Growth::RegexpMatch),
    ("array_to_string", Growth::ArrayToString),
    ("array_replace", Growth::ArrayReplace),
    ("array_replace_n", Growth::ArrayReplace),
    ("array_replace_all", Growth::ArrayReplace),
    ("range", Growth::Range),
    ("generate_series", Growth::Series),
    ("concat_ws", Growth::ConcatWs),
    ("to_char", Growth::Format),
    ("concat", Growth::Copies(1)),
    ("array_concat", Growth::Copies(1)),
    ("array_append", Growth::Copies(1)),
    ("array_prepend", Growth::Copies(1)),
    ("make_array", Growth::Copies(1)),
    ("array_union", Growth::Copies(1)),
    ("overlay", Growth::Copies(1)),
    ("map", Growth::Copies(1)),
    ("make_map", Growth::Copies(1)),
    ("upper", Growth::Copies(3)),
    ("lower", Growth::Copies(3)),
    ("initcap", Growth::Copies(3)),
    ("translate", Growth::Copies(4)),
    ("encode", Growth::Copies(2)),
    // One element (and its offset) per character.
    ("string_to_array", Growth::Copies(16)),
];

fn growth_of(udf: &ScalarUDF) -> Option<Growth> {
    if udf.inner().is::<Expand>() {
        return Some(Growth::Expand);
    }
    if udf.inner().is::<ConcatOperator>() {
        return Some(Growth::Copies(1));
    }
    if udf.inner().is::<CaseResult>() {
        return Some(Growth::Claim);
    }
    if udf.inner().is::<patterns::RegexOperator>() {
        return Some(Growth::Match);
    }
    // The name, then each alias, looked up once: every session wraps every function, and
    // asking the function for its names once per table row was half of a session's cost.
    std::iter::once(udf.name())
        .chain(udf.aliases().iter().map(String::as_str))
        .find_map(|name| {
            GROWTH
                .iter()
                .find(|(known, _)| *known == name)
                .map(|(_, growth)| *growth)
        })
}

/// The statement of `ctx` runs again from now: its functions' time counts to `deadline`.
pub(super) fn rearm(ctx: &SessionContext, deadline: Instant) {
    // Read in place: `ctx.state()` would copy the session's function registries.
    if let Some(budget) = budget_in(ctx.state_ref().read().config_options()) {
        budget.rearm(deadline);
    }
}

/// The statement of `ctx` is a write, admitted: it runs to completion, its functions with no
/// deadline (a DELETE's search keeps its own).
pub(super) fn run_to_completion(ctx: &SessionContext) {
    if let Some(budget) = budget_in(ctx.state_ref().read().config_options()) {
        budget.deadline.lift();
    }
}

/// A session being built, shared by statements: each scalar function and sketch `builder`
/// holds wrapped to count against the budget of the statement that calls it, and the rules
/// that bind every call of a statement's plan to its budget (and count the calls the planner
/// builds around the registry). Each statement's copy of the session carries its budget as a
/// [`StatementBudget`] option.
pub(in crate::flight) fn counting_session(builder: SessionStateBuilder) -> SessionStateBuilder {
    wrapped(builder, None)
}

/// [`counting_session`] for one statement only: its functions are bound to `budget` as they
/// are registered (a distributed query's worker, whose plans arrive physical, past the rules).
pub(in crate::flight) fn counted_session(
    mut builder: SessionStateBuilder,
    budget: &Budget,
) -> SessionStateBuilder {
    builder
        .config()
        .get_or_insert_with(datafusion::prelude::SessionConfig::new)
        .options_mut()
        .extensions
        .insert(StatementBudget::of(budget.clone()));
    wrapped(builder, Some(budget))
}

fn wrapped(builder: SessionStateBuilder, budget: Option<&Budget>) -> SessionStateBuilder {
    let mut builder = builder
        .with_analyzer_rule(Arc::new(CountEveryFunction))
        .with_optimizer_rule(Arc::new(CountEveryFunction));
    if let Some(functions) = builder.scalar_functions() {
        for function in functions.iter_mut() {
            *function = Arc::new(wrap(function.clone(), budget.cloned()));
        }
    }
    if let Some(functions) = builder.aggregate_functions() {
        for function in functions.iter_mut() {
            *function = sketches::counted(function.clone(), budget);
        }
    }
    builder
}

/// What [`counted_session`] does, with lake's own functions added, for a distributed query's
/// worker: it decodes each call in a plan by the function's name, and these appear only in
/// plans, never in SQL.
pub(super) fn counted_worker_session(
    mut builder: SessionStateBuilder,
    budget: &Budget,
) -> SessionStateBuilder {
    let functions = builder.scalar_functions().get_or_insert_with(Vec::new);
    functions.extend([
        Arc::new(ScalarUDF::new_from_impl(CaseResult::new())),
        Arc::new(ScalarUDF::new_from_impl(ConcatOperator::new())),
        Arc::new(ScalarUDF::new_from_impl(Expand::new())),
        super::modulo::remainder(),
    ]);
    functions.extend(patterns::operators());
    counted_session(builder, budget)
}

fn counted(inner: Arc<ScalarUDF>, budget: &Budget) -> ScalarUDF {
    wrap(inner, Some(budget.clone()))
}

fn wrap(inner: Arc<ScalarUDF>, budget: Option<Budget>) -> ScalarUDF {
    let growth = growth_of(&inner);
    ScalarUDF::new_from_impl(Counted {
        inner,
        growth,
        budget,
    })
}

/// `expr` with every function call, and the `||` and regular expression operators, counted
/// against `budget` (the regular expression operators with a short literal pattern only once
/// the plan is optimized, `every`: see `patterns::operator_call`), and its LIKE patterns bounded.
pub(super) fn count_calls(expr: Expr, budget: &Budget, every: bool) -> Result<Transformed<Expr>> {
    expr.transform_up(|e| match e {
        // A call of the shared registry's function: bound to this statement.
        Expr::ScalarFunction(f) if unbound(&f).is_some() => {
            let bound = unbound(&f).map(|c| c.with_budget(Some(budget.clone())));
            Ok(match bound {
                Some(bound) => Transformed::yes(Expr::ScalarFunction(ScalarFunction::new_udf(
                    Arc::new(ScalarUDF::new_from_impl(bound)),
                    f.args,
                ))),
                None => Transformed::no(Expr::ScalarFunction(f)),
            })
        }
        Expr::AggregateFunction(f) => Ok(sketches::bind_aggregate(f, budget)),
        Expr::WindowFunction(w) => Ok(sketches::bind_window(*w, budget)),
        Expr::ScalarFunction(f) if !f.func.inner().is::<Counted>() => {
            Ok(Transformed::yes(Expr::ScalarFunction(
                ScalarFunction::new_udf(Arc::new(counted(f.func, budget)), f.args),
            )))
        }
        // A CASE already wrapped (the rules run more than once) is wrapped once.
        Expr::ScalarFunction(f)
            if is_case_result(&f)
                && f.args
                    .first()
                    .is_some_and(|a| matches!(a, Expr::ScalarFunction(g) if is_case_result(g))) =>
        {
            Ok(Transformed::yes(
                f.args
                    .into_iter()
                    .next()
                    .unwrap_or(Expr::Literal(ScalarValue::Null, None)),
            ))
        }
        Expr::Case(case) => {
            let claim = Arc::new(ScalarUDF::new_from_impl(CaseResult::new()));
            Ok(Transformed::yes(Expr::ScalarFunction(
                ScalarFunction::new_udf(Arc::new(counted(claim, budget)), vec![Expr::Case(case)]),
            )))
        }
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::StringConcat,
            right,
        }) => {
            let operator = Arc::new(ScalarUDF::new_from_impl(ConcatOperator::new()));
            Ok(Transformed::yes(Expr::ScalarFunction(
                ScalarFunction::new_udf(Arc::new(counted(operator, budget)), vec![*left, *right]),
            )))
        }
        e @ Expr::Like(_) => patterns::bounded_like(e, budget),
        e @ (Expr::BinaryExpr(_) | Expr::SimilarTo(_)) => {
            match patterns::operator_call(&e, every, budget) {
                Some((operator, args)) => Ok(Transformed::yes(Expr::ScalarFunction(
                    ScalarFunction::new_udf(Arc::new(counted(operator, budget)), args),
                ))),
                None => Ok(Transformed::no(e)),
            }
        }
        other => Ok(Transformed::no(other)),
    })
}

/// The wrapper of `f`'s function, if it is bound to no statement yet.
fn unbound(f: &ScalarFunction) -> Option<&Counted> {
    f.func
        .inner()
        .downcast_ref::<Counted>()
        .filter(|c| c.budget.is_none())
}

/// Whether `f` is the counted [`CaseResult`] around a CASE.
fn is_case_result(f: &ScalarFunction) -> bool {
    f.func
        .inner()
        .downcast_ref::<Counted>()
        .is_some_and(|c| c.growth == Some(Growth::Claim))
}

/// `plan` with every function call counted against `budget`; once it is optimized,
/// with every large value an operator copies into its rows counted too — not before, so that
/// DataFusion's rules may still drop a constant key (a volatile call is never dropped).
fn count_plan(
    plan: LogicalPlan,
    budget: &Budget,
    optimized: bool,
) -> Result<Transformed<LogicalPlan>> {
    plan.transform_up_with_subqueries(|node| {
        let mut constants = 0usize;
        for e in node.expressions() {
            e.apply(|e| {
                if let Expr::Literal(v, _) = e {
                    constants = constants.saturating_add(v.size());
                }
                if let Expr::Cast(Cast { field, .. }) | Expr::TryCast(TryCast { field, .. }) = e {
                    check_fixed_width(field.data_type(), budget)?;
                }
                sketches::check_sketch(e)?;
                Ok(TreeNodeRecursion::Continue)
            })?;
        }
        let large = if constants > EXPANDED_LITERAL_BYTES {
            EXPANDED_AMONG_MANY_BYTES
        } else {
            EXPANDED_LITERAL_BYTES
        };
        let kind = expand::Node::of(&node);
        node.map_expressions(|e| {
            let e = if optimized {
                expand::expand_values(kind, e, large, budget)?
            } else {
                Transformed::no(e)
            };
            e.transform_data(|e| count_calls(e, budget, optimized))
        })
    })
}

/// `plan` (optimized for another statement) with every call bound to no statement: what a
/// prepared statement keeps for its next execution, holding no budget of a statement that
/// ended.
pub(super) fn unbind(plan: LogicalPlan) -> Result<LogicalPlan> {
    plan.transform_up_with_subqueries(|node| node.map_expressions(unbind_calls))
        .map(|t| t.data)
}

/// `expr` with every call bound to no statement (see [`unbind`]).
pub(super) fn unbind_calls(expr: Expr) -> Result<Transformed<Expr>> {
    expr.transform_up(|e| match e {
        Expr::ScalarFunction(f) => {
            let unbound = f
                .func
                .inner()
                .downcast_ref::<Counted>()
                .filter(|c| c.budget.is_some())
                .map(|c| c.with_budget(None));
            Ok(match unbound {
                Some(unbound) => Transformed::yes(Expr::ScalarFunction(ScalarFunction::new_udf(
                    Arc::new(ScalarUDF::new_from_impl(unbound)),
                    f.args,
                ))),
                None => Transformed::no(Expr::ScalarFunction(f)),
            })
        }
        e @ (Expr::AggregateFunction(_) | Expr::WindowFunction(_)) => Ok(sketches::unbind(e)),
        other => Ok(Transformed::no(other)),
    })
}

/// Whether a call in `expr` is bound to a statement's budget.
#[cfg(test)]
pub(super) fn holds_a_budget(expr: &Expr) -> bool {
    expr.exists(|e| {
        Ok(matches!(e, Expr::ScalarFunction(f)
            if f.func.inner().downcast_ref::<Counted>().is_some_and(|c| c.budget.is_some())))
    })
    .unwrap_or(true)
}

/// `expr` (its calls bound to no statement, [`unbind_calls`]) made this statement's: every
/// call counted against `budget`.
pub(super) fn bind_calls(expr: Expr, budget: &Budget) -> Result<Expr> {
    count_calls(expr, budget, true).map(|t| t.data)
}

/// An optimized `plan` whose values were bound after it was optimized (a prepared statement's
/// kept plan) made this statement's: every call bound to `budget`, and what the values make of
/// it checked and counted as the optimizer's last pass would have (a large value an operator
/// copies into every row, a sketch's size).
pub(super) fn bind_statement(plan: LogicalPlan, budget: &Budget) -> Result<LogicalPlan> {
    count_plan(plan, budget, true).map(|t| t.data)
}

/// Refuses a cast to a type whose every row takes more than a batch's share of the budget (at
/// most [`MAX_FIXED_ROW_BYTES`]): a cast builds its whole batch, no function counts it.
fn check_fixed_width(data_type: &DataType, budget: &Budget) -> Result<()> {
    let most = i64::try_from(budget.limit() / CAST_BATCH_ROWS)
        .unwrap_or(i64::MAX)
        .min(MAX_FIXED_ROW_BYTES);
    match widest_fixed(data_type) {
        Some(width) if width > most => Err(DataFusionError::ResourcesExhausted(format!(
            "a cast to {data_type} takes {width} bytes in every row; at most {most} bytes per \
             value of a fixed-size type are allowed (a batch of {CAST_BATCH_ROWS} rows within \
             the query's {} MiB, LAKE_QUERY_MEMORY_LIMIT_MB)",
            budget.limit() / MIB
        ))),
        _ => Ok(()),
    }
}

/// The widest fixed-size value anywhere in `data_type` (`List(FixedSizeList(2^31, Int64))`
/// allocates one 16 GiB element per non-empty row).
fn widest_fixed(data_type: &DataType) -> Option<i64> {
    let nested = crate::nested::children(data_type)
        .into_iter()
        .filter_map(widest_fixed)
        .max();
    fixed_width(data_type).max(nested)
}

/// Binds every call of a statement's plan to the statement's budget, and wraps the calls that
/// reach a plan without passing through the session's registry.
#[derive(Debug)]
struct CountEveryFunction;

impl AnalyzerRule for CountEveryFunction {
    fn analyze(&self, plan: LogicalPlan, config: &ConfigOptions) -> Result<LogicalPlan> {
        let budget = required_budget(config, "a statement's plan")?;
        Ok(count_plan(plan, budget, false)?.data)
    }

    fn name(&self) -> &str {
        "lake_count_every_function"
    }
}

impl OptimizerRule for CountEveryFunction {
    fn name(&self) -> &str {
        "lake_count_every_function"
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        let options = config.options();
        let budget = required_budget(&options, "a statement's plan")?;
        count_plan(plan, budget, true)
    }
}

/// A function that failed on its arguments' values (`make_date(2024, 13, 1)`, `abs` of the
/// smallest BIGINT, `factorial(21)`) failed on the client's statement: INVALID_ARGUMENT naming
/// the function, not INTERNAL. Internal errors and refusals keep their kind.
fn failed_on_values(function: &str, e: DataFusionError) -> DataFusionError {
    let message = match &e {
        DataFusionError::Execution(message) => message.clone(),
        DataFusionError::ArrowError(arrow, _)
            if matches!(arrow.as_ref(), ArrowError::ComputeError(_)) =>
        {
            arrow.to_string()
        }
        // A pattern that does not compile (`regexp_replace` returns the `regex` crate's error
        // as it is).
        DataFusionError::External(error) if patterns::takes_pattern(function) => error.to_string(),
        _ => return e,
    };
    DataFusionError::External(Box::new(tonic::Status::invalid_argument(format!(
        "{function}: {message}"
    ))))
}

/// A function counted against a statement's budget: the one it is bound to (every call in a
/// statement's plan is, see [`count_calls`]: Lance plans the filters it is given with options
/// of its own), else the one among the options it is called with (a shared registry's
/// function, called while a table function's arguments are resolved). A call with neither is
/// refused.
#[derive(Debug)]
struct Counted {
    inner: Arc<ScalarUDF>,
    growth: Option<Growth>,
    budget: Option<Budget>,
}

impl Counted {
    /// The same call counted against `budget` (`None`: bound to no statement).
    fn with_budget(&self, budget: Option<Budget>) -> Self {
        Self {
            inner: self.inner.clone(),
            growth: self.growth,
            budget,
        }
    }

    fn budget(&self, options: &ConfigOptions) -> Result<Budget> {
        match &self.budget {
            Some(budget) => Ok(budget.clone()),
            None => required_budget(options, &shown(self.inner.name())).cloned(),
        }
    }
}

// Two wrappers are the same function when they wrap the same one, whichever budget they count
// against (one per statement: no plan outlives its statement's session).
impl PartialEq for Counted {
    fn eq(&self, other: &Self) -> bool {
        self.inner == other.inner && self.growth == other.growth
    }
}

impl Eq for Counted {}

impl std::hash::Hash for Counted {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.inner.hash(state);
        self.growth.hash(state);
    }
}

/// One value per row, without materialising a scalar once per row (a 200 MB scalar copied
/// for 8,192 rows was itself the allocation that aborted).
enum PerRow {
    Same(Option<i64>),
    Each(Int64Array),
}

impl PerRow {
    fn at(&self, row: usize) -> Option<i64> {
        match self {
            PerRow::Same(v) => *v,
            PerRow::Each(a) => (row < a.len() && !a.is_null(row)).then(|| a.value(row)),
        }
    }

    fn max(&self) -> i64 {
        match self {
            PerRow::Same(v) => v.unwrap_or(0),
            PerRow::Each(a) => arrow::compute::max(a).unwrap_or(0),
        }
    }
}

fn to_i64(array: &ArrayRef) -> Result<Int64Array> {
    let cast = arrow::compute::cast(array, &DataType::Int64)?;
    cast.as_any()
        .downcast_ref::<Int64Array>()
        .cloned()
        .ok_or_else(|| DataFusionError::Internal("cast to Int64 gave another type".into()))
}

/// Integers as they are (a value that is not one counts as none).
fn ints(value: &ColumnarValue) -> Result<PerRow> {
    Ok(match value {
        ColumnarValue::Scalar(s) => PerRow::Same(match s.cast_to(&DataType::Int64) {
            Ok(ScalarValue::Int64(v)) => v,
            _ => None,
        }),
        ColumnarValue::Array(a) => match to_i64(a) {
            Ok(ints) => PerRow::Each(ints),
            Err(_) => PerRow::Same(None),
        },
    })
}

/// The steps of an edit distance over each row's two strings, all rows together.
fn steps(args: &ScalarFunctionArgs, measure: fn(&ColumnarValue) -> Result<PerRow>) -> Result<i64> {
    let (Some(a), Some(b)) = (args.args.first(), args.args.get(1)) else {
        return Ok(0);
    };
    let (a, b) = (measure(a)?, measure(b)?);
    let rows = args.number_rows.max(1);
    Ok((0..rows)
        .map(|row| {
            let at = |p: &PerRow| p.at(row).unwrap_or(0).max(0);
            at(&a).saturating_mul(at(&b))
        })
        .fold(0i64, i64::saturating_add))
}

/// How many strings a match of each row's pattern may return: one per opening parenthesis (an
/// upper bound on its capture groups), or one for the whole match.
fn groups(pattern: &ColumnarValue) -> Result<PerRow> {
    let count = |p: &str| (p.matches('(').count() as i64).max(1);
    Ok(match pattern {
        ColumnarValue::Scalar(s) => match s.cast_to(&DataType::Utf8) {
            Ok(ScalarValue::Utf8(Some(p))) => PerRow::Same(Some(count(&p))),
            _ => PerRow::Same(None),
        },
        ColumnarValue::Array(a) => {
            let text = arrow::compute::cast(a, &DataType::Utf8)?;
            let text = text
                .as_any()
                .downcast_ref::<arrow::array::StringArray>()
                .ok_or_else(|| {
                    DataFusionError::Internal("cast to Utf8 gave another type".into())
                })?;
            PerRow::Each(text.iter().map(|p| p.map(count)).collect())
        }
    })
}

/// The bytes of each row's value: a string's or a binary's length, a number's width, a list of
/// numbers' elements times their width (anything else: the whole array, an upper bound).
fn sizes(value: &ColumnarValue) -> Result<PerRow> {
    use datafusion::common::ScalarValue as S;
    Ok(match value {
        ColumnarValue::Scalar(S::Utf8(v) | S::LargeUtf8(v) | S::Utf8View(v)) => {
            PerRow::Same(v.as_ref().map(|s| s.len() as i64))
        }
        ColumnarValue::Scalar(s) => PerRow::Same(Some(s.size() as i64)),
        ColumnarValue::Array(a) => match a.data_type() {
            DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
            | DataType::Binary
            | DataType::LargeBinary => {
                PerRow::Each(to_i64(&arrow::compute::kernels::length::length(a)?)?)
            }
            DataType::List(f) | DataType::LargeList(f)
                if f.data_type().primitive_width().is_some() =>
            {
                let width = f.data_type().primitive_width().unwrap_or(8) as i64;
                let counts = to_i64(&arrow::compute::kernels::length::length(a)?)?;
                PerRow::Each(
                    counts.unary::<_, arrow::datatypes::Int64Type>(|n| n.saturating_mul(width)),
                )
            }
            t => match t.primitive_width() {
                Some(width) => PerRow::Same(Some(width as i64)),
                // Any row's element is at most the whole array.
                None => PerRow::Same(Some(memory(a.as_ref()))),
            },
        },
    })
}

/// How many elements each row's list holds (anything else: one).
fn elements(value: &ColumnarValue) -> Result<PerRow> {
    let (array, scalar) = match value {
        ColumnarValue::Array(a) => (Arc::clone(a), false),
        ColumnarValue::Scalar(s) => (s.to_array_of_size(1)?, true),
    };
    if !matches!(
        array.data_type(),
        DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..)
    ) {
        return Ok(PerRow::Same(Some(1)));
    }
    let counts = to_i64(&arrow::compute::kernels::length::length(&array)?)?;
    Ok(if scalar {
        PerRow::Same((!counts.is_empty() && !counts.is_null(0)).then(|| counts.value(0)))
    } else {
        PerRow::Each(counts)
    })
}

/// The memory an array's rows take (its slice, not the buffers it shares with other slices).
fn memory(array: &dyn Array) -> i64 {
    let data = array.to_data();
    data.get_slice_memory_size()
        .unwrap_or_else(|_| array.get_array_memory_size()) as i64
}

/// The bytes every row of a fixed-size type takes (`None`: the type's rows vary).
fn fixed_width(data_type: &DataType) -> Option<i64> {
    match data_type {
        DataType::FixedSizeBinary(n) => Some(i64::from(*n).max(0)),
        DataType::FixedSizeList(field, n) => {
            // Variable-size elements take at least their offsets.
            let element = fixed_width(field.data_type()).unwrap_or(8).max(1);
            Some(i64::from(*n).max(0).saturating_mul(element))
        }
        t => t.primitive_width().map(|w| w as i64),
    }
}

/// What one argument takes, all rows together.
fn total_size(value: &ColumnarValue) -> i64 {
    match value {
        ColumnarValue::Scalar(s) => s.size() as i64,
        ColumnarValue::Array(a) => memory(a.as_ref()),
    }
}

/// The innermost values of a list (of lists …), counted.
fn leaves(value: &ColumnarValue) -> i64 {
    fn of(array: &dyn Array) -> i64 {
        use arrow::array::AsArray;
        match array.data_type() {
            DataType::List(_) => of(array.as_list::<i32>().values().as_ref()),
            DataType::LargeList(_) => of(array.as_list::<i64>().values().as_ref()),
            DataType::FixedSizeList(..) => of(array.as_fixed_size_list().values().as_ref()),
            _ => array.len() as i64,
        }
    }
    match value {
        ColumnarValue::Array(a) => of(a.as_ref()),
        ColumnarValue::Scalar(ScalarValue::List(a)) => of(a.as_ref()),
        ColumnarValue::Scalar(ScalarValue::LargeList(a)) => of(a.as_ref()),
        ColumnarValue::Scalar(ScalarValue::FixedSizeList(a)) => of(a.as_ref()),
        ColumnarValue::Scalar(_) => 1,
    }
}

/// The values of a `range`/`generate_series` argument as integers: numbers as they are, dates
/// and timestamps in nanoseconds.
fn series_bound(value: &ColumnarValue) -> Result<PerRow> {
    let as_nanos = |t: &DataType| {
        matches!(
            t,
            DataType::Date32 | DataType::Date64 | DataType::Timestamp(..)
        )
    };
    let data_type = value.data_type();
    if !as_nanos(&data_type) {
        return ints(value);
    }
    let nanos = DataType::Timestamp(TimeUnit::Nanosecond, None);
    let value = value.cast_to(&nanos, None)?;
    ints(&value.cast_to(&DataType::Int64, None)?)
}

/// The step an interval takes at least, in nanoseconds, signed as it goes: a month is 28 to 31
/// days, a day 23 to 25 hours (a daylight saving change). An interval whose parts pull both
/// ways (`1 month - 28 days`) may not move at all from some dates — DataFusion then loops
/// forever — and is refused.
fn step_nanos(value: &ColumnarValue) -> Result<PerRow> {
    const HOUR: i128 = 3600 * 1_000_000_000;
    // (months, days, nanoseconds) of an interval.
    let parts = |s: &ScalarValue| -> Option<(i128, i128, i128)> {
        match s {
            ScalarValue::IntervalMonthDayNano(Some(v)) => Some((
                i128::from(v.months),
                i128::from(v.days),
                i128::from(v.nanoseconds),
            )),
            ScalarValue::IntervalDayTime(Some(v)) => Some((
                0,
                i128::from(v.days),
                i128::from(v.milliseconds) * 1_000_000,
            )),
            ScalarValue::IntervalYearMonth(Some(months)) => Some((i128::from(*months), 0, 0)),
            _ => None,
        }
    };
    let of = |s: &ScalarValue| -> Result<Option<i64>> {
        let Some((months, days, nanos)) = parts(s) else {
            return Ok(None);
        };
        // The least a positive part adds and the most a negative part takes away, and the
        // other way round.
        let part = |n: i128, least: i128, most: i128| {
            if n >= 0 {
                (n * least, n * most)
            } else {
                (n * most, n * least)
            }
        };
        let (m_low, m_high) = part(months, 28 * 24 * HOUR, 31 * 24 * HOUR);
        let (d_low, d_high) = part(days, 23 * HOUR, 25 * HOUR);
        let (low, high) = (m_low + d_low + nanos, m_high + d_high + nanos);
        let step = if low > 0 {
            low
        } else if high < 0 {
            high
        } else if (months, days, nanos) == (0, 0, 0) {
            0
        } else {
            return Err(DataFusionError::Plan(format!(
                "the interval step {s} may not advance a series (its parts pull both ways); \
                 use a step whose parts share a sign"
            )));
        };
        Ok(Some(i64::try_from(step).unwrap_or(if step > 0 {
            i64::MAX
        } else {
            i64::MIN
        })))
    };
    Ok(match value {
        ColumnarValue::Scalar(s) => PerRow::Same(of(s)?),
        ColumnarValue::Array(a) if matches!(a.data_type(), DataType::Interval(_)) => {
            let steps: Int64Array = (0..a.len())
                .map(|i| match ScalarValue::try_from_array(a, i) {
                    Ok(s) => of(&s),
                    Err(_) => Ok(None),
                })
                .collect::<Result<_>>()?;
            PerRow::Each(steps)
        }
        ColumnarValue::Array(_) => PerRow::Same(None),
    })
}

/// How many elements `range(start, stop, step)` has (`inclusive`: `generate_series`).
fn series_len(start: i64, stop: i64, step: i64, inclusive: bool) -> i64 {
    if step == 0 {
        return 0;
    }
    let (start, stop, step) = (i128::from(start), i128::from(stop), i128::from(step));
    let span = stop - start;
    if span != 0 && (span > 0) != (step > 0) {
        return 0;
    }
    let whole = span / step;
    let n = if inclusive || span % step == 0 {
        whole + i128::from(inclusive)
    } else {
        whole + 1
    };
    i64::try_from(n.max(0)).unwrap_or(i64::MAX)
}

impl Counted {
    /// What a call would produce, in bytes, or `None` for a small call of a function that
    /// produces about as much as it is given (counted once it ran); every value of a
    /// multiplying function is checked against [`MAX_VALUE_BYTES`].
    fn predict(&self, args: &ScalarFunctionArgs, budget: &Budget) -> Result<Option<i64>> {
        let arg = |i: usize| args.args.get(i);
        let rows = args.number_rows.max(1);
        // Scalar arguments of a call that returns an array are copied into each of its rows.
        let copies = if args
            .args
            .iter()
            .any(|a| matches!(a, ColumnarValue::Array(_)))
        {
            rows as i64
        } else {
            1
        };
        let given = |value: &ColumnarValue| match value {
            ColumnarValue::Scalar(s) => (s.size() as i64).saturating_mul(copies),
            ColumnarValue::Array(a) => memory(a.as_ref()),
        };
        let all_given = || args.args.iter().map(given).fold(0i64, i64::saturating_add);
        let elements = |value: &ColumnarValue| match value {
            ColumnarValue::Scalar(_) => leaves(value).saturating_mul(copies),
            ColumnarValue::Array(_) => leaves(value),
        };
        // A fixed-size result (`arrow_cast(l, 'FixedSizeList(2147483647, Int64)')`) takes its
        // width in every row, whatever it is given.
        let fixed = match fixed_width(args.return_field.data_type()) {
            Some(width) if width > MAX_FIXED_ROW_BYTES => {
                return Err(budget.refused(self.inner.name(), width));
            }
            Some(width) => width.saturating_mul(rows as i64),
            None => 0,
        };
        let Some(growth) = self.growth else {
            // DataFusion's functions turn scalar arguments into arrays of the batch's rows
            // (`strpos(<1 MB constant>, col)` too): what that takes, beyond what one copy did.
            let broadcast = if copies > 1 {
                args.args
                    .iter()
                    .filter_map(|a| match a {
                        ColumnarValue::Scalar(s) => Some((s.size() as i64).saturating_mul(copies)),
                        ColumnarValue::Array(_) => None,
                    })
                    .fold(0i64, i64::saturating_add)
            } else {
                0
            };
            let total = broadcast.saturating_add(fixed);
            return Ok((total >= RESERVED_COPY_BYTES).then_some(total));
        };
        let modelled = match growth {
            Growth::Claim => return Ok(None),
            // Its pattern is counted on its own (`patterns::by_pattern`) and never copied; a
            // constant text matched against a column of patterns is, into every row.
            Growth::Match => {
                let copied = match (arg(0), arg(1)) {
                    (Some(ColumnarValue::Scalar(text)), Some(ColumnarValue::Array(_))) => {
                        (text.size() as i64).saturating_mul(rows as i64)
                    }
                    _ => 0,
                };
                return Ok((copied >= RESERVED_COPY_BYTES).then_some(copied));
            }
            Growth::Expand => arg(0)
                .map(total_size)
                .unwrap_or(0)
                .saturating_mul(rows as i64),
            Growth::Copies(n) => all_given().saturating_mul(n),
            Growth::ConcatWs => {
                let separator = arg(0).map(sizes).transpose()?.map_or(0, |d| d.max());
                let separators = separator
                    .saturating_mul(args.args.len() as i64)
                    .saturating_mul(copies);
                all_given().saturating_add(separators)
            }
            Growth::ArrayToString => {
                let elements = arg(0).map(elements).unwrap_or(0);
                let delimiter = arg(1).map(sizes).transpose()?.map_or(0, |d| d.max());
                let null = arg(2).map(sizes).transpose()?.map_or(0, |d| d.max());
                let each = delimiter.saturating_add(null.max(NUMBER_TEXT_BYTES)).max(1);
                let text = arg(0).map(given).unwrap_or(0);
                elements.saturating_mul(each).saturating_add(text)
            }
            Growth::ArrayReplace => {
                let elements = arg(0).map(elements).unwrap_or(0);
                let to = arg(2).map(sizes).transpose()?.map_or(0, |d| d.max()).max(8);
                let list = arg(0).map(given).unwrap_or(0);
                elements.saturating_mul(to).saturating_add(list)
            }
            _ => {
                let per_row = self.per_row(args)?;
                let mut total: i64 = 0;
                for row in 0..rows {
                    let bytes = self.bytes(&per_row, row);
                    if bytes > MAX_VALUE_BYTES {
                        return Err(budget.refused(self.inner.name(), bytes));
                    }
                    total = total.saturating_add(bytes);
                }
                total
            }
        };
        Ok(Some(modelled.saturating_add(fixed)))
    }

    /// The bytes row `row` of a per-row model would produce.
    fn bytes(&self, args: &[PerRow], row: usize) -> i64 {
        let at = |i: usize| args.get(i).and_then(|a| a.at(row)).unwrap_or(0).max(0);
        let signed =
            |i: usize, default: i64| args.get(i).and_then(|a| a.at(row)).unwrap_or(default);
        match self.growth {
            Some(Growth::Repeat) => at(0).saturating_mul(at(1)),
            Some(Growth::Pad) => at(1).saturating_mul(4),
            Some(Growth::Format) => at(1).saturating_mul(16).saturating_add(64),
            Some(Growth::ArrayRepeat) => at(1).saturating_mul(at(0).max(8)),
            Some(Growth::ArrayResize) => at(1).saturating_mul(at(2).max(8)),
            Some(Growth::Replace) => (at(0) + 1).saturating_mul(at(2).max(1)),
            // Group references copy parts of the matched text, whose total is at most `s`:
            // at most `(len(s) + 1) × len(replacement)` for the literals, as much again for
            // the references.
            Some(Growth::RegexpReplace) => {
                (at(0) + 1).saturating_mul(at(2).max(1)).saturating_mul(2)
            }
            // Each group is a string of at most `s` with its offset.
            Some(Growth::RegexpMatch) => (at(0) + 8).saturating_mul(at(1).max(1)),
            Some(growth @ (Growth::Range | Growth::Series)) => {
                let inclusive = growth == Growth::Series;
                // (start, stop, step); `range(stop)` starts at 0, the step defaults to 1.
                let (start, stop, step) = match args.len() {
                    1 => (0, signed(0, 0), 1),
                    2 => (signed(0, 0), signed(1, 0), 1),
                    _ => (signed(0, 0), signed(1, 0), signed(2, 1)),
                };
                series_len(start, stop, step, inclusive).saturating_mul(8)
            }
            _ => 0,
        }
    }

    fn per_row(&self, args: &ScalarFunctionArgs) -> Result<Vec<PerRow>> {
        let arg = |i: usize| args.args.get(i);
        let size_of = |i: usize| arg(i).map(sizes).transpose();
        let int_of = |i: usize| arg(i).map(ints).transpose();
        let none = || PerRow::Same(None);
        Ok(match self.growth {
            Some(Growth::Repeat | Growth::ArrayRepeat) => {
                vec![
                    size_of(0)?.unwrap_or_else(none),
                    int_of(1)?.unwrap_or_else(none),
                ]
            }
            Some(Growth::Pad) => vec![none(), int_of(1)?.unwrap_or_else(none)],
            Some(Growth::Format) => vec![none(), size_of(1)?.unwrap_or_else(none)],
            Some(Growth::ArrayResize) => vec![
                none(),
                int_of(1)?.unwrap_or_else(none),
                size_of(2)?.unwrap_or(PerRow::Same(Some(8))),
            ],
            Some(Growth::RegexpMatch) => vec![
                size_of(0)?.unwrap_or_else(none),
                arg(1).map(groups).transpose()?.unwrap_or_else(none),
            ],
            Some(Growth::Replace | Growth::RegexpReplace) => vec![
                size_of(0)?.unwrap_or_else(none),
                none(),
                size_of(2)?.unwrap_or_else(none),
            ],
            Some(Growth::Range | Growth::Series) => {
                let temporal = arg(0).is_some_and(|a| {
                    matches!(
                        a.data_type(),
                        DataType::Date32 | DataType::Date64 | DataType::Timestamp(..)
                    )
                });
                let mut bounds: Vec<PerRow> = args
                    .args
                    .iter()
                    .take(2)
                    .map(series_bound)
                    .collect::<Result<_>>()?;
                if let Some(step) = arg(2) {
                    bounds.push(match step.data_type() {
                        DataType::Interval(IntervalUnit::MonthDayNano)
                        | DataType::Interval(IntervalUnit::DayTime)
                        | DataType::Interval(IntervalUnit::YearMonth) => step_nanos(step)?,
                        _ if temporal => PerRow::Same(None),
                        _ => ints(step)?,
                    });
                }
                bounds
            }
            _ => Vec::new(),
        })
    }
}

impl ScalarUDFImpl for Counted {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }
    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        self.inner.inner().schema_name(args)
    }
    fn signature(&self) -> &Signature {
        self.inner.signature()
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.inner().return_type(arg_types)
    }
    fn with_updated_config(&self, config: &ConfigOptions) -> Option<ScalarUDF> {
        let updated = self.inner.inner().with_updated_config(config)?;
        Some(wrap(Arc::new(updated), self.budget.clone()))
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.inner.inner().return_field_from_args(args)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let name = self.inner.name();
        let budget = self.budget(&args.config_options)?;
        budget.deadline.check(name)?;
        match name {
            "levenshtein" => deadline::check_steps(name, steps(&args, sizes)?)?,
            // Every element of one list against every element of the other, row by row.
            "array_has_any" | "array_has_all" | "arrays_overlap" | "list_has_any"
            | "list_has_all" => deadline::check_steps(name, steps(&args, elements)?)?,
            _ => {}
        }
        // A CASE's result is what the CASE built: claimed whole.
        let inputs = if self.growth == Some(Growth::Claim) {
            HashSet::new()
        } else {
            argument_buffers(&args.args)
        };
        // A call of scalars makes a scalar: its working copies count too (see SCALAR_COPIES).
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let out = {
            // Held while the function runs (concurrent work of the query sees it), released
            // before its result is claimed in its place.
            let _running = match self.predict(&args, &budget)? {
                Some(bytes) => {
                    let copies = if scalar { SCALAR_COPIES } else { 1 };
                    Some(budget.reserve(name, bytes, copies)?)
                }
                None => None,
            };
            patterns::by_pattern(name, args, &budget, |args| {
                self.inner
                    .inner()
                    .invoke_with_args(args)
                    .map_err(|e| failed_on_values(name, e))
            })?
        };
        budget.claim(name, &out, &inputs)?;
        Ok(out)
    }
    /// The function's own simplification, counted as the statement's calls are:
    /// `regexp_like(s, p)` becomes `s ~ p`, whose pattern DataFusion would parse and compile
    /// uncounted.
    fn simplify(&self, args: Vec<Expr>, info: &SimplifyContext) -> Result<ExprSimplifyResult> {
        Ok(match self.inner.inner().simplify(args, info)? {
            ExprSimplifyResult::Simplified(e) => {
                let budget = self.budget(info.config_options())?;
                ExprSimplifyResult::Simplified(count_calls(e, &budget, false)?.data)
            }
            original => original,
        })
    }
    fn preimage(
        &self,
        args: &[Expr],
        lit_expr: &Expr,
        info: &SimplifyContext,
    ) -> Result<datafusion::logical_expr::preimage::PreimageResult> {
        self.inner.inner().preimage(args, lit_expr, info)
    }
    fn short_circuits(&self) -> bool {
        self.inner.inner().short_circuits()
    }
    fn conditional_arguments<'a>(
        &self,
        args: &'a [Expr],
    ) -> Option<(Vec<&'a Expr>, Vec<&'a Expr>)> {
        self.inner.inner().conditional_arguments(args)
    }
    fn evaluate_bounds(
        &self,
        input: &[&datafusion::logical_expr::interval_arithmetic::Interval],
    ) -> Result<datafusion::logical_expr::interval_arithmetic::Interval> {
        self.inner.inner().evaluate_bounds(input)
    }
    fn propagate_constraints(
        &self,
        interval: &datafusion::logical_expr::interval_arithmetic::Interval,
        inputs: &[&datafusion::logical_expr::interval_arithmetic::Interval],
    ) -> Result<Option<Vec<datafusion::logical_expr::interval_arithmetic::Interval>>> {
        self.inner.inner().propagate_constraints(interval, inputs)
    }
    fn output_ordering(
        &self,
        inputs: &[datafusion::logical_expr::sort_properties::ExprProperties],
    ) -> Result<datafusion::logical_expr::sort_properties::SortProperties> {
        self.inner.inner().output_ordering(inputs)
    }
    fn preserves_lex_ordering(
        &self,
        inputs: &[datafusion::logical_expr::sort_properties::ExprProperties],
    ) -> Result<bool> {
        self.inner.inner().preserves_lex_ordering(inputs)
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.inner().coerce_types(arg_types)
    }
    fn struct_field_mapping(
        &self,
        literal_args: &[Option<ScalarValue>],
    ) -> Option<datafusion::logical_expr::StructFieldMapping> {
        self.inner.inner().struct_field_mapping(literal_args)
    }
    fn documentation(&self) -> Option<&Documentation> {
        self.inner.inner().documentation()
    }
    fn placement(
        &self,
        args: &[datafusion::logical_expr::ExpressionPlacement],
    ) -> datafusion::logical_expr::ExpressionPlacement {
        self.inner.inner().placement(args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A function failing on the values it was given is the client's error (the status a
    /// statement gets is INVALID_ARGUMENT naming the function), over a column or constants.
    #[tokio::test]
    async fn functions_failing_on_their_values_are_invalid_argument() {
        let ctx = testing::counted(
            SessionStateBuilder::new().with_default_features(),
            Arc::new(datafusion::execution::memory_pool::GreedyMemoryPool::new(
                64 << 20,
            )),
        );
        for (sql, function) in [
            (
                "SELECT make_date(2024, 13 + value, 1) FROM generate_series(1, 2)",
                "make_date",
            ),
            ("SELECT make_date(2024, 13, 1)", "make_date"),
            (
                "SELECT abs(-9223372036854775807 - value) FROM generate_series(1, 2)",
                "abs",
            ),
            (
                "SELECT factorial(20 + value) FROM generate_series(1, 2)",
                "factorial",
            ),
            (
                "SELECT gcd(-9223372036854775807 - value, 0) FROM generate_series(1, 2)",
                "gcd",
            ),
        ] {
            let err = match ctx.sql(sql).await {
                Ok(frame) => frame.collect().await.expect_err(sql),
                Err(e) => e,
            };
            let status = crate::flight::sql::status(err);
            assert_eq!(
                status.code(),
                tonic::Code::InvalidArgument,
                "{sql}: {status:?}"
            );
            assert!(status.message().contains(function), "{sql}: {status:?}");
        }
    }

    /// A function of a shared registry called with no statement's budget bound to it nor among
    /// the options it is called with (a session without lake's rules, as a plan planned
    /// elsewhere would be) is refused when it runs, not run uncounted.
    #[tokio::test]
    async fn an_unbound_call_without_a_budget_is_refused() {
        let ctx = SessionContext::new();
        let repeat = datafusion::execution::FunctionRegistry::udf(&ctx, "repeat").unwrap();
        ctx.register_udf(wrap(repeat, None));
        let err = ctx
            .sql("SELECT repeat(s, 3) FROM (VALUES ('x'), ('y')) AS t(s)")
            .await
            .unwrap()
            .collect()
            .await
            .expect_err("an unbound call without a budget");
        assert!(
            err.to_string()
                .contains("repeat() ran outside a statement: there is no memory budget"),
            "{err}"
        );
    }

    #[test]
    fn series_lengths_follow_range_and_generate_series() {
        assert_eq!(series_len(0, 10, 1, false), 10);
        assert_eq!(series_len(0, 10, 1, true), 11);
        assert_eq!(series_len(0, 10, 3, false), 4);
        assert_eq!(series_len(0, 10, 3, true), 4);
        assert_eq!(series_len(10, 0, 1, false), 0);
        assert_eq!(series_len(10, 0, -2, true), 6);
        assert_eq!(series_len(0, i64::MAX, 1, true), i64::MAX);
        assert_eq!(series_len(0, 5, 0, true), 0);
    }

    /// Each function of a session's registry that the growth table names gets its growth,
    /// whether the table spells its name or an alias; others get none.
    #[test]
    fn growth_is_found_by_name_or_alias() {
        let state = SessionStateBuilder::new().with_default_features().build();
        let functions = state.scalar_functions();
        let mut missing = Vec::new();
        for (name, growth) in GROWTH {
            match functions
                .values()
                .find(|f| f.name() == name || f.aliases().iter().any(|a| a == name))
            {
                Some(function) => assert_eq!(growth_of(function), Some(growth), "{name}"),
                None => missing.push(name),
            }
        }
        // A function DataFusion renamed would lose its bound without this: only `make_map`
        // (not in this DataFusion's registry, kept should it come back) may be missing.
        assert_eq!(
            missing,
            ["make_map"],
            "growth table names no registered function"
        );
        // A function known by an alias the table spells (the table's names are canonical today).
        let aliased = functions["abs"].as_ref().clone().with_aliases(["repeat"]);
        assert_eq!(growth_of(&aliased), Some(Growth::Repeat));
        assert_eq!(growth_of(&functions["abs"]), None);
    }
}
