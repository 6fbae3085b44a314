//! Bound parameters: the schema a prepared statement advertises, and rows of values bound into
//! an `INSERT`'s input so that any number of rows is one write (one commit).

use std::collections::HashMap;

use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use arrow::record_batch::RecordBatch;
use datafusion::common::ScalarValue;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder, Values};
use tonic::Status;

/// Rows bound through an `INSERT … SELECT` (each row is a copy of the SELECT's plan).
pub(super) const MAX_SELECT_ROWS: usize = 100;
/// Values bound in one request (rows × parameters). Each becomes a literal of the plan, some
/// 350 bytes whatever its Arrow size (a dictionary or a constant column costs nothing on the
/// wire), so the count is bounded, not only the bytes: 200,000 values hold about 70 MB.
pub(super) const MAX_BOUND_VALUES: usize = 200_000;

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
    let inferred = infer::parameter_types(plan);
    let mut fields: Vec<(usize, Field)> = Vec::with_capacity(types.len());
    for (id, data_type) in types {
        let data_type = data_type.or_else(|| inferred.get(&id).cloned());
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
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_data_type(declared(f.data_type())))
        .collect();
    Ok(Some(Schema::new(fields)))
}

/// The type a parameter of `data_type` is declared as: one every client can fill, cast to
/// `data_type` (losslessly, or refused) when bound.
/// - Integers as BIGINT and REAL as DOUBLE: Go's `database/sql` hands the driver every integer
///   as `int64` and every float as `float64`, and arrow-go's driver fills only the declared
///   type ("invalid value type int64 for builder *array.Int32Builder"); JDBC fills any width.
/// - Timestamps in milliseconds: the JDBC driver (18.x) writes a bound timestamp's epoch
///   milliseconds into the vector whatever its unit.
fn declared(data_type: &DataType) -> DataType {
    match data_type {
        DataType::Int8 | DataType::Int16 | DataType::Int32 => DataType::Int64,
        DataType::Float16 | DataType::Float32 => DataType::Float64,
        DataType::Timestamp(_, tz) => DataType::Timestamp(TimeUnit::Millisecond, tz.clone()),
        other => other.clone(),
    }
}

/// Whether a parameter column of `data_type` is a plain value type (dictionary, view, run-end
/// and nested columns are refused: their wire size says nothing of what they expand to).
fn bindable(data_type: &DataType) -> bool {
    data_type.is_primitive()
        || matches!(
            data_type,
            DataType::Boolean
                | DataType::Utf8
                | DataType::LargeUtf8
                | DataType::Binary
                | DataType::LargeBinary
                | DataType::Date32
                | DataType::Date64
                | DataType::Decimal128(_, _)
                | DataType::Decimal256(_, _)
                | DataType::Null
        )
}

/// The rows of `batches`, each a row of values for `$1`, `$2`, … (column order). Refused before
/// anything is built: more than [`MAX_BOUND_VALUES`] values, no columns, a column of a type that
/// is not a plain value.
pub(super) fn rows_of(batches: &[RecordBatch]) -> Result<Vec<Vec<ScalarValue>>, Status> {
    let mut values = 0usize;
    for batch in batches.iter().filter(|b| b.num_rows() > 0) {
        if batch.num_columns() == 0 {
            return Err(bad("a row of parameters has no values"));
        }
        if let Some(field) = batch
            .schema()
            .fields()
            .iter()
            .find(|f| !bindable(f.data_type()))
        {
            return Err(bad(format!(
                "parameter {} is a {}: bind plain values",
                field.name(),
                field.data_type()
            )));
        }
        values = values.saturating_add(batch.num_rows().saturating_mul(batch.num_columns()));
        if values > MAX_BOUND_VALUES {
            return Err(bad(format!(
                "more than {MAX_BOUND_VALUES} values are bound: send fewer rows per batch, or \
                 load bulk data with ingest"
            )));
        }
    }
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

/// At most this much of a bound value or of a cast's error goes into a message (a 1 MiB string
/// bound to an INT must not make a 2 MiB status).
const SHOWN: usize = 100;

fn shown(text: impl std::fmt::Display) -> String {
    let text = text.to_string();
    match text.char_indices().nth(SHOWN) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// Whether `value` is an infinite float, or text that reads as one.
fn infinite(value: &ScalarValue) -> bool {
    match value {
        ScalarValue::Float16(Some(v)) => v.is_infinite(),
        ScalarValue::Float32(Some(v)) => v.is_infinite(),
        ScalarValue::Float64(Some(v)) => v.is_infinite(),
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => s.trim().parse::<f64>().is_ok_and(f64::is_infinite),
        _ => false,
    }
}

/// `value`, bound to parameter `id` of a write, as the type `data_type` of its column. Refused
/// when that loses the value: a number that does not come back the same (an integer out of
/// range, a fraction into an integer, digits beyond a decimal's scale), or a finite number that
/// a float column holds only as infinity. A float column's own rounding is not a loss.
fn typed(
    id: &str,
    value: &ScalarValue,
    data_type: Option<&DataType>,
) -> Result<ScalarValue, Status> {
    let Some(t) = data_type.filter(|t| value.data_type() != **t) else {
        return Ok(value.clone());
    };
    let refuse = |why: String| {
        Status::invalid_argument(format!(
            "parameter {id}: the value {} cannot be a {t}: {}",
            shown(value),
            shown(why)
        ))
    };
    let cast = value.cast_to(t).map_err(|e| refuse(e.to_string()))?;
    let from = value.data_type();
    let float = matches!(t, DataType::Float16 | DataType::Float32 | DataType::Float64);
    if float && infinite(&cast) && !infinite(value) {
        return Err(refuse("it is out of the type's range".into()));
    }
    if !float
        && from.is_numeric()
        && t.is_numeric()
        && !cast
            .cast_to(&from)
            .is_ok_and(|back| same_number(&back, value))
    {
        return Err(refuse("it would not be stored exactly".into()));
    }
    // Text into a decimal: Arrow rounds digits beyond the scale, so the text is read at the
    // widest scale too and both must agree.
    if matches!(
        from,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    ) && matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..))
    {
        let wide = DataType::Decimal256(76, 38);
        let exact = value.cast_to(&wide).ok();
        if exact.is_none() || cast.cast_to(&wide).ok() != exact {
            return Err(refuse("it would not be stored exactly".into()));
        }
    }
    Ok(cast)
}

/// Whether two numbers are the same value (a float's -0.0 is 0).
fn same_number(a: &ScalarValue, b: &ScalarValue) -> bool {
    match (a, b) {
        (ScalarValue::Float64(Some(x)), ScalarValue::Float64(Some(y))) => x == y,
        (ScalarValue::Float32(Some(x)), ScalarValue::Float32(Some(y))) => x == y,
        _ => a == b,
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
                match typed(&p.id, value, types.get(&p.id).and_then(Option::as_ref)) {
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

/// The one-row `VALUES` an `INSERT`'s input reads, if it reads nothing else: the input is that
/// `VALUES` under projections only (what `INSERT … VALUES (?, …)` plans to). Widening a `VALUES`
/// under anything else (an aggregate, `DISTINCT`, `LIMIT`) would change what the statement means.
fn values_row(input: &LogicalPlan) -> Option<&Values> {
    match input {
        LogicalPlan::Projection(p) => values_row(&p.input),
        LogicalPlan::Values(values) if values.values.len() == 1 => Some(values),
        _ => None,
    }
}

/// An `INSERT`'s input bound to every row of `rows`, one plan whatever the count: the one-row
/// `VALUES` of `INSERT … VALUES (?, …)` becomes a `VALUES` of all the rows; any other input
/// (`INSERT … SELECT … WHERE x = ?`) is bound row by row and the results united, for at most
/// [`MAX_SELECT_ROWS`] rows. Every row binds exactly the statement's parameters.
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
        return Err(unbound());
    }
    if let Some(row) = rows.iter().find(|r| r.len() != types.len()) {
        return Err(Status::invalid_argument(format!(
            "the statement has {} parameters and a row binds {} values",
            types.len(),
            row.len()
        )));
    }
    if let Some(values) = values_row(&input) {
        let template = &values.values[0];
        let all = rows
            .iter()
            .map(|row| {
                template
                    .iter()
                    .map(|e| substitute(e, row, &types))
                    .collect::<Result<Vec<_>, _>>()
            })
            .collect::<Result<Vec<_>, _>>()?;
        // A placeholder the plan could not type left its column untyped (Null): the schema is
        // then inferred from the values.
        let values = if types.values().all(Option::is_some) {
            LogicalPlan::Values(Values {
                schema: values.schema.clone(),
                values: all,
            })
        } else {
            LogicalPlanBuilder::values(all)
                .and_then(LogicalPlanBuilder::build)
                .map_err(|e| Status::invalid_argument(format!("bad bound parameters: {e}")))?
        };
        return replace_values(input, values);
    }
    if rows.len() > MAX_SELECT_ROWS {
        return Err(Status::invalid_argument(format!(
            "{} rows bound to an INSERT … SELECT; at most {MAX_SELECT_ROWS} (INSERT … VALUES takes more)",
            rows.len()
        )));
    }
    let mut united: Option<LogicalPlanBuilder> = None;
    for row in rows {
        let row = row
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let id = format!("${}", i + 1);
                typed(&id, v, types.get(&id).and_then(Option::as_ref))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let one = input
            .clone()
            .with_param_values(row)
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

/// `input` (projections over one `VALUES`) with that `VALUES` replaced by `values`; each
/// projection is rebuilt over its new input, so its schema follows.
fn replace_values(input: LogicalPlan, values: LogicalPlan) -> Result<LogicalPlan, Status> {
    match input {
        LogicalPlan::Projection(p) => {
            let inner = replace_values(p.input.as_ref().clone(), values)?;
            datafusion::logical_expr::Projection::try_new(p.expr, std::sync::Arc::new(inner))
                .map(LogicalPlan::Projection)
                .map_err(|e| Status::invalid_argument(format!("bad bound parameters: {e}")))
        }
        _ => Ok(values),
    }
}

/// A write whose parameters were given no values.
pub(super) fn unbound() -> Status {
    Status::invalid_argument("the statement has parameters and no row of values was bound")
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

mod infer;
#[cfg(test)]
mod tests;
