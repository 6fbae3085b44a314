//! Conformance of incoming rows to a table's schema: the one set of rules every write follows.
//!
//! Rows that bring their own schema (COPY INTO from the stage, ADBC bulk ingest) are checked by
//! [`check`] and cast by [`cast_batch`]: columns matched **by name**, and a type accepted only
//! when it equals the table's or widens to it without loss (int32 → int64, float32 → float64,
//! the string and binary encodings, dictionaries of the type). Anything else is refused, naming
//! every offending column, before a row is written. Rows a SQL plan produced (`INSERT`,
//! `CREATE TABLE … AS`) are already aligned to the table by the planner and are cast by
//! [`cast_planned`]. Values are always cast with `safe: false`, so a value that does not fit is
//! an error, never a silent NULL.

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::compute::CastOptions;
use arrow::datatypes::{DataType, Schema, SchemaRef};
use arrow::error::ArrowError;

/// Every problem between the incoming schema and the table's, or none.
pub fn check(incoming: &Schema, table: &Schema) -> Result<(), Vec<String>> {
    let file = incoming;
    let mut problems = Vec::new();
    for field in table.fields() {
        match file.field_with_name(field.name()) {
            Err(_) => problems.push(format!("column {:?} is missing", field.name())),
            Ok(found) if !widens(found.data_type(), field.data_type()) => problems.push(format!(
                "column {:?} is {} in the data but {} in the table",
                field.name(),
                found.data_type(),
                field.data_type()
            )),
            Ok(_) => {}
        }
    }
    for field in file.fields() {
        if table.field_with_name(field.name()).is_err() {
            problems.push(format!("column {:?} is not in the table", field.name()));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// Whether values of `from` convert to `to` without loss.
pub fn widens(from: &DataType, to: &DataType) -> bool {
    use DataType::*;
    if from == to {
        return true;
    }
    let rank = |t: &DataType| match t {
        Int8 => Some((0, 1)),
        Int16 => Some((0, 2)),
        Int32 => Some((0, 3)),
        Int64 => Some((0, 4)),
        UInt8 => Some((1, 1)),
        UInt16 => Some((1, 2)),
        UInt32 => Some((1, 3)),
        UInt64 => Some((1, 4)),
        Float16 => Some((2, 1)),
        Float32 => Some((2, 2)),
        Float64 => Some((2, 3)),
        _ => None,
    };
    match (from, to) {
        (Dictionary(_, value), _) => widens(value, to),
        (Utf8 | LargeUtf8 | Utf8View, Utf8 | LargeUtf8 | Utf8View) => true,
        (Binary | LargeBinary | BinaryView, Binary | LargeBinary | BinaryView) => true,
        _ => match (rank(from), rank(to)) {
            // Same family, wider or equal; unsigned into a strictly wider signed integer.
            (Some((f, a)), Some((t, b))) if f == t => a <= b,
            (Some((1, a)), Some((0, b))) => a < b,
            _ => false,
        },
    }
}

/// `batch` with exactly `target`'s schema, columns taken by name (after [`check`]).
pub fn cast_batch(batch: RecordBatch, target: &SchemaRef) -> Result<RecordBatch, ArrowError> {
    // Not "safe": a value that does not fit is an error, never a silent null.
    let options = CastOptions {
        safe: false,
        ..Default::default()
    };
    let columns = target
        .fields()
        .iter()
        .map(|field| {
            let column = batch.column_by_name(field.name()).ok_or_else(|| {
                ArrowError::SchemaError(format!("column {:?} is missing", field.name()))
            })?;
            arrow::compute::cast_with_options(column, field.data_type(), &options)
        })
        .collect::<Result<Vec<_>, _>>()?;
    RecordBatch::try_new(Arc::clone(target), columns)
}

/// Why rows a SQL plan produced cannot be written to the table.
#[derive(Debug, thiserror::Error)]
pub enum PlannedMismatch {
    #[error("the rows have {found} columns, the table has {expected}")]
    Columns { found: usize, expected: usize },
    #[error("the rows do not match the table: {0}")]
    Values(#[source] ArrowError),
}

/// `batch`, produced by a SQL plan that the planner has aligned to the table's columns
/// (`INSERT`, `CREATE TABLE … AS`), cast to `target` column by column. Not "safe": a value
/// that does not fit is an error, never a silent null.
pub fn cast_planned(
    batch: RecordBatch,
    target: &SchemaRef,
) -> Result<RecordBatch, PlannedMismatch> {
    if batch.num_columns() != target.fields().len() {
        return Err(PlannedMismatch::Columns {
            found: batch.num_columns(),
            expected: target.fields().len(),
        });
    }
    let options = CastOptions {
        safe: false,
        ..Default::default()
    };
    batch
        .columns()
        .iter()
        .zip(target.fields())
        .map(|(c, f)| arrow::compute::cast_with_options(c, f.data_type(), &options))
        .collect::<Result<Vec<_>, _>>()
        .and_then(|columns| RecordBatch::try_new(Arc::clone(target), columns))
        .map_err(PlannedMismatch::Values)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::Field;

    #[test]
    fn only_lossless_conversions_widen() {
        use DataType::*;
        assert!(widens(&Int32, &Int64));
        assert!(widens(&UInt32, &Int64));
        assert!(!widens(&UInt64, &Int64));
        assert!(!widens(&Int64, &Int32));
        assert!(!widens(&Float64, &Float32));
        assert!(!widens(&Int32, &Float64));
        assert!(widens(&LargeUtf8, &Utf8));
        assert!(widens(&Dictionary(Box::new(Int32), Box::new(Utf8)), &Utf8));
        assert!(!widens(&Utf8, &Int64));
    }

    #[test]
    fn columns_match_by_name_not_position() {
        let table = Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Utf8, true),
        ]);
        let reordered = Schema::new(vec![
            Field::new("b", DataType::Utf8, true),
            Field::new("a", DataType::Int32, true),
        ]);
        assert!(check(&reordered, &table).is_ok());
        let narrowing = Schema::new(vec![
            Field::new("a", DataType::Float64, true),
            Field::new("b", DataType::Utf8, true),
        ]);
        let problems = check(&narrowing, &table).unwrap_err();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("\"a\""), "{problems:?}");
    }
}
