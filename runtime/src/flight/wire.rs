//! What goes on the wire: plain Arrow types only. Dictionaries are hydrated and view types become
//! their plain equivalents, so every client can read every result, and the schema announced in
//! FlightInfo is exactly the schema of the DoGet stream.

use std::sync::Arc;

use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;

fn wire_type(t: &DataType) -> DataType {
    match t {
        DataType::Dictionary(_, value) => wire_type(value),
        DataType::Utf8View => DataType::Utf8,
        DataType::BinaryView => DataType::Binary,
        other => other.clone(),
    }
}

/// The wire form of a schema.
pub(super) fn wire_schema(schema: &Schema) -> SchemaRef {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_data_type(wire_type(f.data_type())))
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// Casts `batch` to `schema` (its wire form, whose fields may carry metadata the batch's lack).
pub(super) fn to_wire(batch: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, ArrowError> {
    let same_types = batch.num_columns() == schema.fields().len()
        && batch
            .columns()
            .iter()
            .zip(schema.fields())
            .all(|(column, field)| column.data_type() == field.data_type());
    if same_types {
        return RecordBatch::try_new(schema.clone(), batch.columns().to_vec());
    }
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(column, field)| cast(column, field.data_type()))
        .collect::<Result<Vec<_>, _>>()?;
    RecordBatch::try_new(schema.clone(), columns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{DictionaryArray, StringViewArray, types::Int32Type};

    #[test]
    fn views_and_dictionaries_become_plain_types() {
        let schema = Schema::new(vec![
            Field::new(
                "d",
                DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
                true,
            ),
            Field::new("v", DataType::Utf8View, true),
        ]);
        let batch = RecordBatch::try_new(
            Arc::new(schema.clone()),
            vec![
                Arc::new(DictionaryArray::<Int32Type>::from_iter(["a", "b", "a"])),
                Arc::new(StringViewArray::from(vec!["x", "y", "z"])),
            ],
        )
        .unwrap();
        let wire = wire_schema(&schema);
        assert_eq!(wire.field(0).data_type(), &DataType::Utf8);
        assert_eq!(wire.field(1).data_type(), &DataType::Utf8);
        let converted = to_wire(batch, &wire).unwrap();
        assert_eq!(converted.schema(), wire);
        assert_eq!(converted.num_rows(), 3);
    }
}
