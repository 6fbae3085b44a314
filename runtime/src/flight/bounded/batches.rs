//! Which statements may read their tables in large batches.
//!
//! The per-batch measures of this module and the guards beside it (a call's reservation, a
//! join's, UNNEST's and a window's, a cast's check of fixed-size rows against the budget over
//! 8,192 rows) are sized for batches of the statement's size. A statement known to build no more
//! from a batch than the batch holds may read 64Ki-row batches (`LargeScanBatches`); any other
//! reads Lance's 8,192. "Known" is an allowlist: a plan node, expression, function or aggregate
//! not named here keeps the small batches, and a new kind of expression must be classified
//! before lake builds.

use arrow::datatypes::DataType;
use datafusion::common::DFSchema;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::expr::{Cast, TryCast};
use datafusion::logical_expr::{BinaryExpr, Expr, ExprSchemable, LogicalPlan, Operator};

/// Whether `plan` may build, from one batch it reads, more than that batch.
pub(in crate::flight) fn builds_more_than_it_reads(plan: &LogicalPlan) -> bool {
    let mut builds = false;
    let _ = plan.apply_with_subqueries(|node| {
        builds = !node_builds_no_more(node);
        if !builds {
            // Casts to text are judged by what they render: the type of their input, in the
            // node's one input (a join's conditions and a scan's filters have none here).
            let inputs = node.inputs();
            let input = match inputs.as_slice() {
                [one] => Some(one.schema().as_ref()),
                _ => None,
            };
            node.apply_expressions(|e| {
                e.apply(|e| {
                    builds = !builds_no_more(e, input);
                    Ok(stop_if(builds))
                })
            })?;
        }
        Ok(stop_if(builds))
    });
    builds
}

fn stop_if(stop: bool) -> TreeNodeRecursion {
    if stop {
        TreeNodeRecursion::Stop
    } else {
        TreeNodeRecursion::Continue
    }
}

/// Plan nodes whose output rows are their input's (or fewer, or a join's, which DataFusion
/// cuts into batches of its configured size). UNNEST and windows are not: a row may become
/// many, or carry a frame's worth of values.
fn node_builds_no_more(node: &LogicalPlan) -> bool {
    matches!(
        node,
        LogicalPlan::TableScan(_)
            | LogicalPlan::Projection(_)
            | LogicalPlan::Filter(_)
            | LogicalPlan::Aggregate(_)
            | LogicalPlan::Sort(_)
            | LogicalPlan::Limit(_)
            | LogicalPlan::Join(_)
            | LogicalPlan::Union(_)
            | LogicalPlan::Distinct(_)
            | LogicalPlan::SubqueryAlias(_)
            | LogicalPlan::Subquery(_)
            | LogicalPlan::EmptyRelation(_)
            | LogicalPlan::Values(_)
    )
}

/// Scalar functions whose every row is bounded by their arguments' row (numbers, dates, a
/// substring, a length, one of their arguments). Not here, for instance: functions that grow
/// their input (`repeat`, `upper`, …), regular expressions (each distinct pattern compiled and
/// kept for the batch), and functions that return one value whatever the column they are given
/// (`arrow_typeof`), which the projection copies into every row.
const BOUNDED_FUNCTIONS: &[&str] = &[
    super::super::modulo::NAME,
    "abs",
    "acos",
    "acosh",
    "asin",
    "asinh",
    "atan",
    "atan2",
    "atanh",
    "cbrt",
    "ceil",
    "cos",
    "cosh",
    "cot",
    "degrees",
    "exp",
    "floor",
    "gcd",
    "isnan",
    "iszero",
    "lcm",
    "ln",
    "log",
    "log10",
    "log2",
    "nanvl",
    "pi",
    "power",
    "radians",
    "random",
    "round",
    "signum",
    "sin",
    "sinh",
    "sqrt",
    "tan",
    "tanh",
    "trunc",
    "coalesce",
    "nullif",
    "nvl",
    "nvl2",
    "greatest",
    "least",
    "character_length",
    "octet_length",
    "bit_length",
    "ascii",
    "starts_with",
    "ends_with",
    "strpos",
    "substr",
    "left",
    "right",
    "btrim",
    "ltrim",
    "rtrim",
    "date_part",
    "date_trunc",
    "date_bin",
    "make_date",
    "to_date",
    "to_timestamp",
    "to_timestamp_seconds",
    "to_timestamp_millis",
    "to_timestamp_micros",
    "to_timestamp_nanos",
    "to_unixtime",
    "from_unixtime",
    "now",
    "current_date",
    "current_time",
];

/// Aggregates that keep a fixed amount per group (or one of its values), reserved as they go.
/// Not here, for instance: `array_agg`, `string_agg` and `median` (every value of a group), and
/// `approx_distinct` (a 16 KiB sketch allocated for each new group before the aggregate
/// resizes its reservation: one batch of 65,536 new keys is 1 GiB).
const BOUNDED_AGGREGATES: &[&str] = &[
    "count",
    "sum",
    "min",
    "max",
    "avg",
    "bool_and",
    "bool_or",
    "bit_and",
    "bit_or",
    "bit_xor",
    "stddev",
    "stddev_pop",
    "var",
    "var_pop",
    "corr",
    "covar_samp",
    "covar_pop",
];

/// Whether a function called `name` (or one of its `aliases`) is on `list`.
fn listed(list: &[&str], name: &str, aliases: &[String]) -> bool {
    std::iter::once(name)
        .chain(aliases.iter().map(String::as_str))
        .any(|name| list.contains(&name))
}

/// Whether the expression node `e` (its children are checked on their own) builds, per row, no
/// more than a column's value, a small constant or a fixed-size result. `input` is the schema
/// its node reads, if it reads one.
fn builds_no_more(e: &Expr, input: Option<&DFSchema>) -> bool {
    match e {
        Expr::Column(_)
        | Expr::OuterReferenceColumn(..)
        | Expr::Alias(_)
        | Expr::Placeholder(_)
        | Expr::ScalarVariable(..)
        | Expr::Like(_)
        | Expr::SimilarTo(_)
        | Expr::Not(_)
        | Expr::IsNull(_)
        | Expr::IsNotNull(_)
        | Expr::IsTrue(_)
        | Expr::IsFalse(_)
        | Expr::IsUnknown(_)
        | Expr::IsNotTrue(_)
        | Expr::IsNotFalse(_)
        | Expr::IsNotUnknown(_)
        | Expr::Negative(_)
        | Expr::Between(_)
        | Expr::InList(_)
        | Expr::Exists(_)
        | Expr::InSubquery(_)
        | Expr::SetComparison(_) => true,
        // A constant is copied into every row of its batch (one under `EXPANDED_LITERAL_BYTES`
        // without a counted call).
        Expr::Literal(value, _) => value.size() <= 256,
        Expr::BinaryExpr(BinaryExpr { op, right, .. }) => match op {
            Operator::Eq
            | Operator::NotEq
            | Operator::Lt
            | Operator::LtEq
            | Operator::Gt
            | Operator::GtEq
            | Operator::Plus
            | Operator::Minus
            | Operator::Multiply
            | Operator::Divide
            | Operator::IntegerDivide
            | Operator::Modulo
            | Operator::And
            | Operator::Or
            | Operator::IsDistinctFrom
            | Operator::IsNotDistinctFrom
            | Operator::LikeMatch
            | Operator::ILikeMatch
            | Operator::NotLikeMatch
            | Operator::NotILikeMatch
            | Operator::BitwiseAnd
            | Operator::BitwiseOr
            | Operator::BitwiseXor
            | Operator::BitwiseShiftLeft
            | Operator::BitwiseShiftRight => true,
            // One pattern, compiled once; a column of patterns compiles and keeps each.
            Operator::RegexMatch
            | Operator::RegexIMatch
            | Operator::RegexNotMatch
            | Operator::RegexNotIMatch => matches!(right.as_ref(), Expr::Literal(..)),
            _ => false,
        },
        Expr::Cast(Cast { expr, field }) | Expr::TryCast(TryCast { expr, field }) => {
            flat_cast(expr, field.data_type(), input)
        }
        // The operators as lake counts them (see `patterns::operator_call`), as above; a LIKE
        // pattern's check returns the pattern.
        Expr::ScalarFunction(f) if super::patterns::is_operator(f.func.name()) => {
            matches!(f.args.get(1), Some(Expr::Literal(..)))
        }
        Expr::ScalarFunction(f) if super::patterns::is_like_pattern(&f.func) => true,
        Expr::ScalarFunction(f) => listed(BOUNDED_FUNCTIONS, f.func.name(), f.func.aliases()),
        Expr::AggregateFunction(f) => listed(BOUNDED_AGGREGATES, f.func.name(), f.func.aliases()),
        // A scalar subquery's value, of any size, is copied into the rows of whatever holds
        // it; a CASE's result is claimed after it ran; grouping sets build a row of group ids
        // per set; windows, UNNEST and lambdas build per row what their input does not bound.
        Expr::ScalarSubquery(_)
        | Expr::Case(_)
        | Expr::GroupingSet(_)
        | Expr::WindowFunction(_)
        | Expr::Unnest(_)
        | Expr::HigherOrderFunction(_)
        | Expr::Lambda(_)
        | Expr::LambdaVariable(_) => false,
        #[expect(deprecated)]
        Expr::Wildcard { .. } => false,
    }
}

/// Whether a cast of `expr` to `to` builds no more than it reads: to a fixed-width type, or to
/// text or bytes from a flat type (a list rendered as text is every element's text). A cast to
/// a nested or fixed-size binary type builds its whole batch uncounted (checked against the
/// budget over 8,192 rows).
fn flat_cast(expr: &Expr, to: &DataType, input: Option<&DFSchema>) -> bool {
    match to {
        DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Utf8View
        | DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView => input
            .and_then(|schema| expr.get_type(schema).ok())
            .is_some_and(|from| !from.is_nested()),
        DataType::Boolean | DataType::Null => true,
        to => to.primitive_width().is_some(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::execution::SessionStateBuilder;
    use datafusion::execution::memory_pool::GreedyMemoryPool;
    use datafusion::prelude::SessionContext;

    use super::super::testing::counted;
    use super::*;

    /// A plain DataFusion session, and one built as lake builds a statement's: every function
    /// counted, CASE and `||` rewritten to lake's calls, `%` by a constant as lake's function.
    fn sessions() -> [SessionContext; 2] {
        let builder = SessionStateBuilder::new()
            .with_default_features()
            .with_optimizer_rule(Arc::new(super::super::super::modulo::ConstantRemainder));
        [
            SessionContext::new(),
            counted(builder, Arc::new(GreedyMemoryPool::new(1 << 30))),
        ]
    }

    /// Statements that may build more from a batch than it holds are told from plain reads.
    #[tokio::test]
    async fn statements_that_build_more_than_they_read() {
        let long_constant = format!("SELECT a, '{}' FROM t", "x".repeat(4000));
        for ctx in sessions() {
            ctx.sql("CREATE TABLE t (a BIGINT, s VARCHAR, l BIGINT[], b BOOLEAN[])")
                .await
                .unwrap();
            for (sql, builds) in [
                ("SELECT a, s FROM t WHERE a % 7 = 0", false),
                ("SELECT count(*), sum(a) FROM t GROUP BY s", false),
                ("SELECT upper(s) FROM t", true),
                ("SELECT repeat(s, 3) FROM t", true),
                ("SELECT s || s FROM t", true),
                ("SELECT CASE WHEN a > 0 THEN s END FROM t", true),
                ("SELECT unnest(l) FROM t", true),
                ("SELECT sum(a) OVER (ORDER BY a) FROM t", true),
                (
                    "SELECT a FROM t WHERE a IN (SELECT length(repeat(s, 2)) FROM t)",
                    true,
                ),
                ("SELECT CAST(a AS VARCHAR), CAST(s AS BIGINT) FROM t", false),
                ("SELECT TRY_CAST(l AS BIGINT[]) FROM t", true),
                ("SELECT arrow_cast(s, 'FixedSizeBinary(16)') FROM t", true),
                ("SELECT a, 'short' FROM t", false),
                (&long_constant, true),
                ("SELECT count(*) FROM t GROUP BY CUBE(a, s)", true),
                (
                    "SELECT s FROM t WHERE a BETWEEN 1 AND 9 AND s LIKE 'x%' ORDER BY a LIMIT 3",
                    false,
                ),
                (
                    "SELECT t.a FROM t JOIN t AS u ON t.a = u.a UNION ALL SELECT 1",
                    false,
                ),
                ("SELECT length(s), abs(a) FROM t WHERE a IN (1, 2)", false),
                // Not known to build no more than it reads: a node not listed.
                (
                    "WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r WHERE n < 3) \
                     SELECT n FROM r",
                    true,
                ),
                // A scalar subquery's value is copied into every row, cast or not.
                ("SELECT a, (SELECT max(s) FROM t) FROM t", true),
                (
                    "SELECT a FROM t WHERE CAST((SELECT max(s) FROM t) AS BYTEA) IN \
                     (CAST(s AS BYTEA), CAST(s AS BYTEA), CAST(s AS BYTEA), CAST(s AS BYTEA))",
                    true,
                ),
                // One value from a column, copied into every row.
                ("SELECT arrow_typeof(l) FROM t", true),
                // A sketch for every new group.
                ("SELECT a, approx_distinct(s) FROM t GROUP BY a", true),
                // A pattern per row, compiled and kept; one constant pattern is fine.
                ("SELECT count(*) FROM t WHERE s ~ s", true),
                ("SELECT count(*) FROM t WHERE s ~ '^x'", false),
                ("SELECT count(*) FROM t WHERE s ~ 'x+'", false),
                ("SELECT count(*) FROM t WHERE s LIKE s", false),
                // A list rendered as text, every element of it; a list's null padding.
                ("SELECT CAST(b AS VARCHAR) FROM t", true),
                ("SELECT arrays_zip(b, l) FROM t", true),
            ] {
                let plan = ctx.sql(sql).await.unwrap().into_optimized_plan().unwrap();
                assert_eq!(builds_more_than_it_reads(&plan), builds, "{sql}");
            }
        }
    }
}
