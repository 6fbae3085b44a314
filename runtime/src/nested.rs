//! The types a nested Arrow type holds: what a check of "anywhere in the type" walks.

use arrow::datatypes::{DataType, Field};

/// The types `data_type` holds directly (a list's element, a struct's fields, a map's entries,
/// a dictionary's values, …); none for a flat type.
pub(crate) fn children(data_type: &DataType) -> Vec<&DataType> {
    match data_type {
        DataType::Dictionary(_, values) => vec![values.as_ref()],
        _ => fields(data_type)
            .into_iter()
            .map(Field::data_type)
            .collect(),
    }
}

/// The fields `data_type` holds directly, with their names and metadata (a dictionary's are
/// those its values hold); none for a flat type.
pub(crate) fn fields(data_type: &DataType) -> Vec<&Field> {
    match data_type {
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::ListView(f)
        | DataType::LargeListView(f)
        | DataType::FixedSizeList(f, _)
        | DataType::Map(f, _) => vec![f.as_ref()],
        DataType::Struct(fields) => fields.iter().map(AsRef::as_ref).collect(),
        DataType::Union(fields, _) => fields.iter().map(|(_, f)| f.as_ref()).collect(),
        DataType::Dictionary(_, values) => fields(values),
        DataType::RunEndEncoded(_, values) => vec![values.as_ref()],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::datatypes::{DataType, Field};

    use super::{children, fields};

    #[test]
    fn nested_types_name_what_they_hold() {
        let list = DataType::List(Arc::new(Field::new("item", DataType::Utf8View, true)));
        assert_eq!(children(&list), vec![&DataType::Utf8View]);
        let dict = DataType::Dictionary(Box::new(DataType::Int32), Box::new(list.clone()));
        assert_eq!(children(&dict), vec![&list]);
        assert!(children(&DataType::Int64).is_empty());
        let names: Vec<_> = fields(&dict).iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["item"]);
    }
}
