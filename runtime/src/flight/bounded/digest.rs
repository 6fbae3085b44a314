//! The size a client may ask of a percentile sketch.
//!
//! `approx_percentile_cont(x, 0.5, 2147483647)` makes DataFusion's t-digest reserve capacity
//! for that many centroids (16 bytes each) the first time it merges values: 32 GiB for one
//! group, an allocation that aborts the process before any pool sees it. The number of
//! centroids is a constant of the statement, so it is checked while planning.

use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::Expr;
use datafusion::logical_expr::expr::{AggregateFunction, WindowFunction, WindowFunctionDefinition};

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

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    async fn plan(sql: &str) -> Result<()> {
        let ctx = SessionContext::new();
        let plan = ctx.state().create_logical_plan(sql).await?;
        let mut found = Ok(());
        use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
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
}
