//! Bound parameters: the schema a prepared statement advertises, and rows of values bound into
//! an `INSERT`'s input so that any number of rows is one write (one commit).

use std::collections::HashMap;

use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use arrow::record_batch::RecordBatch;
use datafusion::common::ScalarValue;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder, Values};
use tonic::Status;

/// Rows bound through an `INSERT … SELECT` (each row plans the SELECT again); `VALUES` takes any
/// number.
pub(super) const MAX_SELECT_ROWS: usize = 1_000;

fn bad(e: impl std::fmt::Display) -> Status {
    Status::invalid_argument(format!("bad bound parameters: {e}"))
}

/// `$1`, `$2`, … → their position (0-based); `None` for a name that is not positional.
fn position(id: &str) -> Option<usize> {
    id.strip_prefix('$')?.parse::<usize>().ok()?.checked_sub(1)
}

/// The parameters of `plan` as a schema of fields `$1`, `$2`, … in order, each with the type
/// the plan infers (an `INSERT`'s column, the other side of a comparison). `None` when the plan
/// has none, or when a type cannot be inferred: clients then type the parameters from their
/// values (Go), and the server casts.
pub(super) fn parameter_schema(plan: &LogicalPlan) -> Result<Option<Schema>, Status> {
    let types = plan
        .get_parameter_types()
        .map_err(|e| Status::invalid_argument(format!("cannot type the parameters: {e}")))?;
    if types.is_empty() {
        return Ok(None);
    }
    let mut fields: Vec<(usize, Field)> = Vec::with_capacity(types.len());
    for (id, data_type) in types {
        let (Some(at), Some(data_type)) = (position(&id), data_type) else {
            return Ok(None);
        };
        fields.push((at, Field::new(id, data_type, true)));
    }
    fields.sort_by_key(|(at, _)| *at);
    // `$1 … $n` with none missing, or the positions would not match the client's columns.
    if fields.iter().enumerate().any(|(i, (at, _))| i != *at) {
        return Ok(None);
    }
    // Plain types, as results are sent: clients bind Utf8, not Utf8View.
    let schema = Schema::new(fields.into_iter().map(|(_, f)| f).collect::<Vec<_>>());
    let schema = super::wire::wire_schema(&schema);
    // Timestamps are asked for in milliseconds: the JDBC driver (18.x) writes a bound
    // timestamp's epoch milliseconds into the vector whatever its unit. Values of any unit are
    // cast to the column's on binding.
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Timestamp(_, tz) => f
                .as_ref()
                .clone()
                .with_data_type(DataType::Timestamp(TimeUnit::Millisecond, tz.clone())),
            _ => f.as_ref().clone(),
        })
        .collect();
    Ok(Some(Schema::new(fields)))
}

/// The rows of `batches`, each a row of values for `$1`, `$2`, … (column order).
pub(super) fn rows_of(batches: &[RecordBatch]) -> Result<Vec<Vec<ScalarValue>>, Status> {
    let mut rows = Vec::new();
    for batch in batches {
        for row in 0..batch.num_rows() {
            rows.push(
                batch
                    .columns()
                    .iter()
                    .map(|c| ScalarValue::try_from_array(c, row).map_err(bad))
                    .collect::<Result<Vec<_>, _>>()?,
            );
        }
    }
    Ok(rows)
}

/// `value` as the type `data_type` the plan expects for its placeholder.
fn typed(value: &ScalarValue, data_type: Option<&DataType>) -> Result<ScalarValue, Status> {
    match data_type {
        Some(t) if value.data_type() != *t => value.cast_to(t).map_err(|e| {
            Status::invalid_argument(format!("bound value {value} cannot be a {t}: {e}"))
        }),
        _ => Ok(value.clone()),
    }
}

/// `expr` with each placeholder replaced by its value in `row`.
fn substitute(
    expr: &Expr,
    row: &[ScalarValue],
    types: &HashMap<String, Option<DataType>>,
) -> Result<Expr, Status> {
    let mut failure = None;
    let bound = expr
        .clone()
        .transform_up(|e| match &e {
            Expr::Placeholder(p) => {
                let Some(value) = position(&p.id).and_then(|i| row.get(i)) else {
                    failure = Some(Status::invalid_argument(format!(
                        "no value is bound for {} ({} bound per row)",
                        p.id,
                        row.len()
                    )));
                    return Ok(Transformed::no(e));
                };
                match typed(value, types.get(&p.id).and_then(Option::as_ref)) {
                    Ok(value) => Ok(Transformed::yes(Expr::Literal(value, None))),
                    Err(status) => {
                        failure = Some(status);
                        Ok(Transformed::no(e))
                    }
                }
            }
            _ => Ok(Transformed::no(e)),
        })
        .map_err(|e| Status::internal(e.to_string()))?
        .data;
    failure.map_or(Ok(bound), Err)
}

/// An `INSERT`'s input bound to every row of `rows`: its one-row `VALUES` of placeholders
/// becomes a `VALUES` of all the rows (one plan, one stream, one commit, whatever the count). An
/// input of another shape (`INSERT … SELECT … WHERE x = ?`) is bound row by row and the results
/// united, for at most [`MAX_SELECT_ROWS`] rows.
pub(super) fn bind_rows(
    input: LogicalPlan,
    rows: &[Vec<ScalarValue>],
) -> Result<LogicalPlan, Status> {
    let types = input
        .get_parameter_types()
        .map_err(|e| Status::invalid_argument(format!("cannot type the parameters: {e}")))?;
    if types.is_empty() {
        return match rows {
            [] => Ok(input),
            _ => Err(Status::invalid_argument(
                "values were bound to a statement without parameters",
            )),
        };
    }
    if rows.is_empty() {
        return Err(Status::invalid_argument(
            "the statement has parameters and no row of values was bound",
        ));
    }
    let mut failure = None;
    let mut bound_values = false;
    let bound = input
        .clone()
        .transform_up(|node| match &node {
            LogicalPlan::Values(values) if values.values.len() == 1 && !bound_values => {
                let template = &values.values[0];
                let mut all = Vec::with_capacity(rows.len());
                for row in rows {
                    match template
                        .iter()
                        .map(|e| substitute(e, row, &types))
                        .collect::<Result<Vec<_>, _>>()
                    {
                        Ok(exprs) => all.push(exprs),
                        Err(status) => {
                            failure = Some(status);
                            return Ok(Transformed::no(node));
                        }
                    }
                }
                bound_values = true;
                Ok(Transformed::yes(LogicalPlan::Values(Values {
                    schema: values.schema.clone(),
                    values: all,
                })))
            }
            _ => Ok(Transformed::no(node)),
        })
        .map_err(|e| Status::internal(e.to_string()))?
        .data;
    if let Some(status) = failure {
        return Err(status);
    }
    let left = bound
        .get_parameter_types()
        .map_err(|e| Status::internal(e.to_string()))?;
    if left.is_empty() {
        return Ok(bound);
    }
    // Parameters outside a VALUES row: bind each row into the whole input and unite them.
    if rows.len() > MAX_SELECT_ROWS {
        return Err(Status::invalid_argument(format!(
            "{} rows bound to an INSERT … SELECT; at most {MAX_SELECT_ROWS} (INSERT … VALUES takes any number)",
            rows.len()
        )));
    }
    let mut united: Option<LogicalPlanBuilder> = None;
    for row in rows {
        let one = input
            .clone()
            .with_param_values(row.clone())
            .map_err(|e| Status::invalid_argument(format!("bad bound parameters: {e}")))?;
        united = Some(match united {
            None => LogicalPlanBuilder::from(one),
            Some(builder) => builder
                .union(one)
                .map_err(|e| Status::internal(e.to_string()))?,
        });
    }
    united
        .map(|b| b.build().map_err(|e| Status::internal(e.to_string())))
        .unwrap_or(Ok(input))
}

/// `schema` as the IPC bytes of a `parameter_schema` (empty when there is none).
pub(super) fn schema_bytes(schema: Option<Schema>) -> Result<bytes::Bytes, Status> {
    let Some(schema) = schema else {
        return Ok(bytes::Bytes::new());
    };
    let arrow_flight::IpcMessage(bytes) =
        arrow_flight::SchemaAsIpc::new(&schema, &Default::default())
            .try_into()
            .map_err(|e: arrow::error::ArrowError| Status::internal(e.to_string()))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    async fn insert_input(sql: &str) -> LogicalPlan {
        let ctx = SessionContext::new();
        ctx.sql("CREATE TABLE t (id BIGINT, name VARCHAR)")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let plan = ctx.state().create_logical_plan(sql).await.unwrap();
        match plan {
            LogicalPlan::Dml(dml) => dml.input.as_ref().clone(),
            other => panic!("not an insert: {other}"),
        }
    }

    fn row(id: i64, name: Option<&str>) -> Vec<ScalarValue> {
        vec![
            ScalarValue::Int64(Some(id)),
            ScalarValue::Utf8(name.map(str::to_owned)),
        ]
    }

    #[tokio::test]
    async fn an_insert_values_advertises_its_columns_types() {
        let input = insert_input("INSERT INTO t VALUES ($1, $2)").await;
        let schema = parameter_schema(&input).unwrap().unwrap();
        let fields: Vec<_> = schema
            .fields()
            .iter()
            .map(|f| (f.name().clone(), f.data_type().clone()))
            .collect();
        assert_eq!(
            fields,
            [
                ("$1".to_owned(), DataType::Int64),
                ("$2".to_owned(), DataType::Utf8)
            ]
        );
    }

    #[tokio::test]
    async fn many_rows_bind_into_one_values_plan() {
        let input = insert_input("INSERT INTO t VALUES ($1, $2)").await;
        let rows: Vec<_> = (0..3).map(|i| row(i, Some("x"))).collect();
        let bound = bind_rows(input, &rows).unwrap();
        assert!(bound.get_parameter_types().unwrap().is_empty());
        let mut values = None;
        bound
            .apply(|node| {
                if let LogicalPlan::Values(v) = node {
                    values = Some(v.values.len());
                }
                Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
            })
            .unwrap();
        assert_eq!(values, Some(3), "{bound}");
    }

    #[tokio::test]
    async fn values_are_cast_to_the_columns_types_and_nulls_kept() {
        let input = insert_input("INSERT INTO t VALUES ($1, $2)").await;
        let rows = vec![vec![ScalarValue::Int32(Some(7)), ScalarValue::Utf8(None)]];
        let bound = bind_rows(input, &rows).unwrap();
        let text = format!("{}", bound.display_indent());
        assert!(text.contains("Int64(7)"), "{text}");
        let short = bind_rows(
            insert_input("INSERT INTO t VALUES ($1, $2)").await,
            &[vec![ScalarValue::Int64(Some(1))]],
        );
        assert!(
            short
                .unwrap_err()
                .message()
                .contains("no value is bound for $2")
        );
        let uncastable = bind_rows(
            insert_input("INSERT INTO t VALUES ($1, $2)").await,
            &[vec![
                ScalarValue::Utf8(Some("x".into())),
                ScalarValue::Utf8(None),
            ]],
        );
        assert!(
            uncastable
                .unwrap_err()
                .message()
                .contains("cannot be a Int64")
        );
    }

    #[tokio::test]
    async fn an_insert_select_binds_row_by_row_up_to_its_limit() {
        let input = insert_input("INSERT INTO t SELECT $1, $2 WHERE $1 > 0").await;
        let rows: Vec<_> = (1..=2).map(|i| row(i, None)).collect();
        let bound = bind_rows(input.clone(), &rows).unwrap();
        assert!(bound.get_parameter_types().unwrap().is_empty());
        let many: Vec<_> = (0..=MAX_SELECT_ROWS as i64).map(|i| row(i, None)).collect();
        assert!(
            bind_rows(input, &many)
                .unwrap_err()
                .message()
                .contains("at most")
        );
    }

    #[tokio::test]
    async fn rows_without_parameters_or_parameters_without_rows_are_refused() {
        let plain = insert_input("INSERT INTO t VALUES (1, 'a')").await;
        assert!(bind_rows(plain.clone(), &[]).is_ok());
        assert!(bind_rows(plain, &[row(1, None)]).is_err());
        let with = insert_input("INSERT INTO t VALUES ($1, $2)").await;
        assert!(bind_rows(with, &[]).is_err());
    }
}
