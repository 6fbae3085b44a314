//! Values an operator copies into every row, as counted calls.
//!
//! A constant folded while planning and an uncorrelated scalar subquery (a value of any size,
//! known only once it ran) are one value each; but where an operator needs a column of one — a
//! projection's output, a sort, grouping, partitioning or join key, a CASE's operand or result,
//! an aggregate's or a window function's argument or ordering, the probe of an IN list that is
//! not all constants — DataFusion copies it into each row of the batch, uncounted: a 10 MB
//! subquery value as an ORDER BY key over 8,192 rows asked for 80 GB and aborted the process.
//! Each such value becomes `lake_expand(v)`, a counted call that reserves the copy from the
//! statement's budget before it makes it. Comparisons, LIKE patterns, an all-constant IN list
//! and function arguments keep theirs as one value (a function is counted for what it is given,
//! see [`super::Growth`]) and are left alone.

use std::sync::Arc;

use arrow::datatypes::{DataType, FieldRef};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::expr::{Cast, ScalarFunction, TryCast};
use datafusion::logical_expr::{
    ColumnarValue, Expr, LogicalPlan, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, SortExpr, Volatility,
};

use super::{Budget, counted};

/// What a plan node does with its own expressions.
#[derive(Clone, Copy)]
pub(super) struct Node {
    /// It evaluates each into a column of its rows (a filter's predicate is one bit a row; a
    /// limit's bounds must stay constants).
    copies: bool,
    /// A node above finds its output columns by their names.
    names_its_output: bool,
}

impl Node {
    pub(super) fn of(node: &LogicalPlan) -> Self {
        use LogicalPlan as P;
        Self {
            copies: matches!(
                node,
                P::Projection(_)
                    | P::Sort(_)
                    | P::Aggregate(_)
                    | P::Window(_)
                    | P::Join(_)
                    | P::Distinct(_)
                    | P::Repartition(_)
            ),
            names_its_output: matches!(
                node,
                P::Projection(_) | P::Aggregate(_) | P::Window(_) | P::Distinct(_)
            ),
        }
    }
}

/// One of a node's own expressions with each large value it copies into rows counted.
pub(super) fn expand_values(
    node: Node,
    expr: Expr,
    large: usize,
    budget: &Budget,
) -> Result<Transformed<Expr>> {
    if !expr.exists(|e| Ok(is_large(e, large)))? {
        return Ok(Transformed::no(expr));
    }
    // A sort key is part of its window's or aggregate's name as it is displayed, and
    // `lake_expand` displays as itself: the node's output keeps the name its parent refers to.
    let name = node
        .names_its_output
        .then(|| expr.schema_name().to_string());
    let expr = if node.copies {
        expand_expression(expr, large, budget)
    } else {
        Transformed::no(expr)
    };
    expr.transform_data(|e| expand_copied_values(e, large, budget))?
        .map_data(|e| {
            Ok(match name {
                Some(name) if e.schema_name().to_string() != name => e.alias(name),
                _ => e,
            })
        })
}

/// One of a node's own expressions, if it is a large value, copied into its rows by a counted
/// call (keeping its name).
fn expand_expression(expr: Expr, large: usize, budget: &Budget) -> Transformed<Expr> {
    match expr {
        Expr::Alias(mut alias) if is_large(&alias.expr, large) => {
            alias.expr = Box::new(expand(*alias.expr, budget));
            Transformed::yes(Expr::Alias(alias))
        }
        e if is_large(&e, large) => Transformed::yes(expand(e, budget)),
        e => Transformed::no(e),
    }
}

/// Large values where an expression inside a node copies them once per row.
fn expand_copied_values(expr: Expr, large: usize, budget: &Budget) -> Result<Transformed<Expr>> {
    let wrap = |e: Box<Expr>, changed: &mut bool| -> Box<Expr> {
        if is_large(&e, large) {
            *changed = true;
            Box::new(expand(*e, budget))
        } else {
            e
        }
    };
    let wrap_all = |args: Vec<Expr>, changed: &mut bool| -> Vec<Expr> {
        args.into_iter()
            .map(|e| *wrap(Box::new(e), changed))
            .collect()
    };
    let wrap_keys = |keys: Vec<SortExpr>, changed: &mut bool| -> Vec<SortExpr> {
        keys.into_iter()
            .map(|mut key| {
                key.expr = *wrap(Box::new(key.expr), changed);
                key
            })
            .collect()
    };
    expr.transform_up(|e| {
        let mut changed = false;
        let e = match e {
            Expr::Case(mut c) => {
                c.expr = c.expr.map(|e| wrap(e, &mut changed));
                c.when_then_expr = c
                    .when_then_expr
                    .into_iter()
                    .map(|(when, then)| (when, wrap(then, &mut changed)))
                    .collect();
                c.else_expr = c.else_expr.map(|e| wrap(e, &mut changed));
                Expr::Case(c)
            }
            Expr::AggregateFunction(mut a) => {
                a.params.args = wrap_all(a.params.args, &mut changed);
                a.params.order_by = wrap_keys(a.params.order_by, &mut changed);
                Expr::AggregateFunction(a)
            }
            Expr::WindowFunction(mut w) => {
                w.params.args = wrap_all(w.params.args, &mut changed);
                w.params.partition_by = wrap_all(w.params.partition_by, &mut changed);
                w.params.order_by = wrap_keys(w.params.order_by, &mut changed);
                Expr::WindowFunction(w)
            }
            // An all-constant list is a set the probe's one value is looked up in; any other
            // list is compared with a column of the probe.
            Expr::InList(mut l) if !l.list.iter().all(|e| matches!(e, Expr::Literal(..))) => {
                l.expr = wrap(l.expr, &mut changed);
                Expr::InList(l)
            }
            other => other,
        };
        Ok(if changed {
            Transformed::yes(e)
        } else {
            Transformed::no(e)
        })
    })
}

/// A constant of at least `large` bytes, or an uncorrelated scalar subquery — cast or not (a
/// cast of one value is one value).
fn is_large(e: &Expr, large: usize) -> bool {
    match e {
        Expr::Literal(v, _) => v.size() >= large,
        Expr::ScalarSubquery(_) => true,
        Expr::Cast(Cast { expr, .. }) | Expr::TryCast(TryCast { expr, .. }) => {
            is_large(expr, large)
        }
        _ => false,
    }
}

/// `e` as a counted call that copies it into the batch's rows.
fn expand(e: Expr, budget: &Budget) -> Expr {
    Expr::ScalarFunction(ScalarFunction::new_udf(
        Arc::new(counted(
            Arc::new(ScalarUDF::new_from_impl(Expand::new())),
            budget,
        )),
        vec![e],
    ))
}

/// `lake_expand(v)`: the value `v` as an array of the batch's rows. What the operator would do
/// with it anyway, but as a call: counted against the budget before the copy is made. Volatile,
/// so that it is never folded back into a constant; named as `v`, so that a node above finds
/// the column it refers to.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct Expand {
    signature: Signature,
}

impl Expand {
    pub(super) fn new() -> Self {
        Self {
            signature: Signature::any(1, Volatility::Volatile),
        }
    }
}

fn one_argument() -> DataFusionError {
    DataFusionError::Internal("lake_expand takes one argument".into())
}

impl ScalarUDFImpl for Expand {
    fn name(&self) -> &str {
        "lake_expand"
    }
    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        match args {
            [arg] => Ok(arg.schema_name().to_string()),
            _ => Err(one_argument()),
        }
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        arg_types.first().cloned().ok_or_else(one_argument)
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        args.arg_fields.first().cloned().ok_or_else(one_argument)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        match args.args.into_iter().next() {
            Some(ColumnarValue::Scalar(value)) => {
                Ok(ColumnarValue::Array(value.to_array_of_size(rows)?))
            }
            Some(array) => Ok(array),
            None => Err(one_argument()),
        }
    }
}

#[cfg(test)]
mod tests {
    use datafusion::execution::SessionStateBuilder;
    use datafusion::execution::memory_pool::GreedyMemoryPool;
    use datafusion::prelude::SessionContext;

    use super::super::testing::{counted, run};
    use super::*;

    /// A value copied into rows through `lake_expand` gives what DataFusion gives without it:
    /// the same rows, the same column names.
    #[tokio::test]
    async fn copied_values_keep_their_results_and_names() {
        let lake = counted(
            SessionStateBuilder::new().with_default_features(),
            Arc::new(GreedyMemoryPool::new(1 << 30)),
        );
        let plain = SessionContext::new();
        for sql in [
            "SELECT (SELECT 'k') AS g, count(*) AS n FROM generate_series(1, 10) GROUP BY (SELECT 'k')",
            "SELECT (SELECT 'k'), count(*) AS n FROM generate_series(1, 10) GROUP BY (SELECT 'k')",
            "SELECT value FROM generate_series(1, 3) ORDER BY (SELECT 1), value DESC",
            "SELECT count(*) OVER (ORDER BY (SELECT 1), value) FROM generate_series(1, 3)",
            "SELECT CASE (SELECT 'a') WHEN 'a' THEN value END AS c FROM generate_series(1, 3)",
            "SELECT value FROM generate_series(1, 5) WHERE (SELECT 3) IN (value, value + 1, value + 2, value + 3)",
            "SELECT DISTINCT ON ((SELECT 1)) value FROM generate_series(1, 3) ORDER BY (SELECT 1), value",
        ] {
            let want = run(&plain, sql).await;
            assert!(!want.starts_with("error"), "{sql}: {want}");
            assert_eq!(run(&lake, sql).await, want, "{sql}");
        }
    }
}
