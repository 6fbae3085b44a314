//! `DELETE FROM t WHERE …`: the predicate is planned in the statement's own session — its
//! functions count against the statement's memory budget, as in a query — and handed to Lance
//! as an expression. Given SQL text, Lance planned and constant-folded it in a stock DataFusion
//! context of its own: `repeat(arrow_cast('x', 'LargeUtf8'), 2^45) = 'y'` aborted the process.

use std::sync::Arc;

use arrow::array::{RecordBatch, RecordBatchOptions};
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchema, ScalarValue};
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::logical_expr::{ColumnarValue, Expr, ExprSchemable, LogicalPlan};
use datafusion::optimizer::simplify_expressions::ExprSimplifier;
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::{Expr as SqlExpr, ObjectName};
use tonic::Status;

use super::super::bounded::{budget_in, count_calls};
use super::{parse_one, status};

/// The predicate of `DELETE FROM name WHERE selection`, planned against the table in `ctx`:
/// typed, constant-folded (under the statement's budget), its columns unqualified as Lance
/// names them.
pub(super) async fn predicate(
    ctx: &SessionContext,
    name: &ObjectName,
    selection: &SqlExpr,
) -> Result<Expr, Status> {
    // The same table resolution, types and functions as a query of the table.
    let select = parse_one(&format!("SELECT * FROM {name} WHERE {selection}"))?;
    let state = ctx.state();
    let plan = state.statement_to_plan(select).await.map_err(status)?;
    crate::flight::depth::check_plan(&plan)?;
    let plan = state
        .analyzer()
        .execute_and_check(plan, state.config_options(), |_, _| {})
        .map_err(status)?;
    let mut filter = None;
    plan.apply(|node| {
        if let LogicalPlan::Filter(f) = node {
            filter = Some((f.predicate.clone(), f.input.schema().clone()));
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .map_err(status)?;
    let Some((predicate, schema)) = filter else {
        return Err(Status::internal("a DELETE's predicate was planned away"));
    };
    if predicate
        .exists(|e| {
            Ok(matches!(
                e,
                Expr::Exists(_) | Expr::InSubquery(_) | Expr::ScalarSubquery(_)
            ))
        })
        .map_err(status)?
    {
        return Err(Status::unimplemented(
            "DELETE … WHERE with a subquery is not supported: delete by values or ranges",
        ));
    }
    let predicate = predicate
        .transform(|e| match e {
            Expr::Column(c) => Ok(Transformed::yes(Expr::Column(Column::new_unqualified(
                c.name,
            )))),
            other => Ok(Transformed::no(other)),
        })
        .map_err(status)?
        .data;
    let unqualified_schema = DFSchema::try_from(schema.as_arrow().clone()).map_err(status)?;
    let simplifier = ExprSimplifier::new(
        SimplifyContext::builder()
            .with_schema(Arc::new(unqualified_schema.clone()))
            .with_config_options(state.config_options().clone())
            .with_current_time()
            .build(),
    );
    let budget = budget_in(state.config_options())
        .ok_or_else(|| Status::internal("the session has no memory budget"))?;
    // Simplification may call functions DataFusion builds itself: counted too.
    let predicate = count_calls(predicate, budget, false).map_err(status)?.data;
    let predicate = simplifier.simplify(predicate).map_err(status)?;
    let predicate = count_calls(predicate, budget, true).map_err(status)?.data;
    fold_strictly(ctx, predicate, &unqualified_schema)
}

/// `predicate` with every constant part evaluated now, its errors returned. DataFusion's
/// simplifier leaves a constant whose evaluation fails (a function refused by the budget) for
/// execution to report, and Lance would report it as a string of its own: a refusal here
/// keeps its code (RESOURCE_EXHAUSTED).
fn fold_strictly(ctx: &SessionContext, predicate: Expr, schema: &DFSchema) -> Result<Expr, Status> {
    let one_row = RecordBatch::try_new_with_options(
        Arc::new(arrow::datatypes::Schema::empty()),
        vec![],
        &RecordBatchOptions::new().with_row_count(Some(1)),
    )
    .map_err(|e| status(e.into()))?;
    let empty = DFSchema::empty();
    predicate
        .transform_down(|e| {
            let constant = !matches!(e, Expr::Literal(..))
                && !e.any_column_refs()
                && !e.is_volatile()
                && !matches!(e, Expr::Placeholder(_));
            if !constant {
                return Ok(Transformed::no(e));
            }
            let physical = ctx.create_physical_expr(e, &empty)?;
            let value = match physical.evaluate(&one_row)? {
                ColumnarValue::Scalar(v) => v,
                ColumnarValue::Array(a) => ScalarValue::try_from_array(&a, 0)?,
            };
            Ok(Transformed::new(
                Expr::Literal(value, None),
                true,
                TreeNodeRecursion::Jump,
            ))
        })
        .map(|t| t.data)
        .map_err(status)
        .and_then(|e| {
            // The folded predicate still types against the table.
            e.get_type(schema).map_err(status)?;
            Ok(e)
        })
}
