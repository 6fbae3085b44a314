//! Binding parameters: schemas, rows, limits.

use super::*;
use datafusion::prelude::SessionContext;

/// The input of `sql` (an `INSERT`'s rows; any other plan as it is) after `ddl` made its table.
async fn planned_after(ddl: &str, sql: &str) -> LogicalPlan {
    let ctx = SessionContext::new();
    ctx.sql(ddl).await.unwrap().collect().await.unwrap();
    match ctx.state().create_logical_plan(sql).await.unwrap() {
        LogicalPlan::Dml(dml) => dml.input.as_ref().clone(),
        other => other,
    }
}

async fn insert_input(sql: &str) -> LogicalPlan {
    planned_after("CREATE TABLE t (id BIGINT, name VARCHAR)", sql).await
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
            .contains("2 parameters and a row binds 1")
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
    // (each row's plan binds $1 and $2)
    assert!(
        bind_rows(input, &many)
            .unwrap_err()
            .message()
            .contains("at most")
    );
}

#[tokio::test]
async fn a_values_under_anything_but_projections_is_bound_row_by_row() {
    // Widening this VALUES to three equal rows would make DISTINCT insert one of them.
    let input =
        insert_input("INSERT INTO t SELECT DISTINCT x, y FROM (VALUES ($1, $2)) AS v(x, y)").await;
    let rows: Vec<_> = (1..=3).map(|_| row(1, Some("same"))).collect();
    let bound = bind_rows(input, &rows).unwrap();
    let mut unions = 0;
    bound
        .apply(|node| {
            if let LogicalPlan::Union(u) = node {
                unions += u.inputs.len();
            }
            Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
        })
        .unwrap();
    assert!(unions >= 2, "not bound row by row: {bound}");
}

#[tokio::test]
async fn a_row_must_bind_exactly_the_parameters() {
    let input = insert_input("INSERT INTO t VALUES ($1, $2)").await;
    let extra = vec![
        ScalarValue::Int64(Some(1)),
        ScalarValue::Utf8(None),
        ScalarValue::Int64(Some(9)),
    ];
    let refused = bind_rows(input, &[extra]).unwrap_err();
    assert!(
        refused.message().contains("2 parameters and a row binds 3"),
        "{refused}"
    );
}

#[test]
fn rows_of_refuses_what_would_expand() {
    use arrow::array::{ArrayRef, DictionaryArray, Int64Array, StringArray};
    use arrow::datatypes::Int32Type;
    let keys = arrow::array::Int32Array::from(vec![0; 10]);
    let dictionary: ArrayRef = std::sync::Arc::new(
        DictionaryArray::<Int32Type>::try_new(
            keys,
            std::sync::Arc::new(StringArray::from(vec!["x"])),
        )
        .unwrap(),
    );
    let batch = RecordBatch::try_from_iter([("$1", dictionary)]).unwrap();
    assert!(
        rows_of(&[batch])
            .unwrap_err()
            .message()
            .contains("bind plain values")
    );
    let empty = RecordBatch::try_new_with_options(
        std::sync::Arc::new(Schema::empty()),
        vec![],
        &arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(5)),
    )
    .unwrap();
    assert!(
        rows_of(&[empty])
            .unwrap_err()
            .message()
            .contains("no values")
    );
    let many: ArrayRef = std::sync::Arc::new(Int64Array::from(vec![1; MAX_BOUND_VALUES + 1]));
    let batch = RecordBatch::try_from_iter([("$1", many)]).unwrap();
    assert!(
        rows_of(&[batch])
            .unwrap_err()
            .message()
            .contains("send fewer rows")
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

#[tokio::test]
async fn a_searchs_query_vector_is_a_list_of_the_columns_element_type() {
    use arrow::datatypes::Field;
    use std::sync::Arc;
    let ctx = SessionContext::new();
    let item = Arc::new(Field::new("item", DataType::Float32, true));
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("emb", DataType::FixedSizeList(item, 3), true),
    ]));
    ctx.register_batch("v", RecordBatch::new_empty(schema))
        .unwrap();
    let types = |sql: &'static str| {
        let ctx = ctx.clone();
        async move {
            let plan = ctx.state().create_logical_plan(sql).await.unwrap();
            parameter_schema(&plan).unwrap().map(|s| {
                s.fields()
                    .iter()
                    .map(|f| f.data_type().clone())
                    .collect::<Vec<_>>()
            })
        }
    };
    let list = DataType::List(Arc::new(Field::new("item", DataType::Float32, true)));
    assert_eq!(
        types("SELECT id FROM v ORDER BY cosine_distance(emb, $1) LIMIT 3").await,
        Some(vec![list.clone()])
    );
    assert_eq!(
        types("SELECT id FROM v WHERE id > $2 ORDER BY inner_product($1, emb) DESC LIMIT 3").await,
        Some(vec![list, DataType::Int64])
    );
    assert_eq!(
        types("SELECT array_distance(emb, CAST(string_to_array($1, ',') AS FLOAT[])) FROM v").await,
        Some(vec![DataType::Utf8])
    );
    // Nothing says what `$1` is here.
    assert_eq!(types("SELECT array_distance($1, $2)").await, None);
}

async fn typed_input(sql: &str) -> LogicalPlan {
    let ddl = "CREATE TABLE n (i INT, s SMALLINT, r REAL, d DATE, at TIMESTAMP)";
    planned_after(ddl, sql).await
}

/// Go's `database/sql` sends every integer as int64 and every float as float64, and arrow-go's
/// driver fills only the declared type: narrow numbers are declared wide.
#[tokio::test]
async fn narrow_numbers_are_declared_wide_and_bound_back_narrow() {
    let input = typed_input("INSERT INTO n VALUES ($1, $2, $3, $4, $5)").await;
    let schema = parameter_schema(&input).unwrap().unwrap();
    let types: Vec<_> = schema
        .fields()
        .iter()
        .map(|f| f.data_type().clone())
        .collect();
    assert_eq!(
        types,
        [
            DataType::Int64,
            DataType::Int64,
            DataType::Float64,
            DataType::Date32,
            DataType::Timestamp(TimeUnit::Millisecond, None),
        ]
    );
    let row = vec![
        ScalarValue::Int64(Some(7)),
        ScalarValue::Int64(Some(-3)),
        ScalarValue::Float64(Some(0.5)),
        ScalarValue::Date32(Some(19_782)),
        ScalarValue::TimestampMillisecond(Some(1_709_209_696_000), None),
    ];
    let bound = bind_rows(input, &[row]).unwrap();
    assert_eq!(
        bound.schema().field(0).data_type(),
        &DataType::Int32,
        "{bound}"
    );
}

#[tokio::test]
async fn a_value_that_does_not_fit_is_refused_naming_its_parameter() {
    let input = typed_input("INSERT INTO n (i, s, r) VALUES ($1, $2, $3)").await;
    let row = |i: i64, s: i64, r: f64| {
        vec![
            ScalarValue::Int64(Some(i)),
            ScalarValue::Int64(Some(s)),
            ScalarValue::Float64(Some(r)),
        ]
    };
    let err = bind_rows(input.clone(), &[row(1 << 40, 1, 1.0)]).unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("parameter $1"), "{}", err.message());
    let err = bind_rows(input.clone(), &[row(1, 40_000, 1.0)]).unwrap_err();
    assert!(err.message().contains("parameter $2"), "{}", err.message());
    let err = bind_rows(input, &[row(1, 1, 1e300)]).unwrap_err();
    assert!(err.message().contains("parameter $3"), "{}", err.message());

    // A fraction into an integer, and digits beyond a decimal's scale, are not stored exactly.
    let err = bind_rows(
        typed_input("INSERT INTO n (i) VALUES ($1)").await,
        &[vec![ScalarValue::Float64(Some(1.5))]],
    )
    .unwrap_err();
    assert!(
        err.message().contains("not be stored exactly"),
        "{}",
        err.message()
    );
    // Text too large for a REAL, and a message that does not repeat a huge value.
    let err = bind_rows(
        typed_input("INSERT INTO n (r) VALUES ($1)").await,
        &[vec![ScalarValue::Utf8(Some("1e39".into()))]],
    )
    .unwrap_err();
    assert!(
        err.message().contains("out of the type's range"),
        "{}",
        err.message()
    );
    // Text with digits beyond a decimal's scale (Arrow would round it); -0.0 is 0.
    let decimal = || {
        planned_after(
            "CREATE TABLE m (d DECIMAL(10, 2), i BIGINT)",
            "INSERT INTO m VALUES ($1, $2)",
        )
    };
    let text = |s: &str| {
        vec![
            ScalarValue::Utf8(Some(s.into())),
            ScalarValue::Int64(Some(1)),
        ]
    };
    let err = bind_rows(decimal().await, &[text("1.2345")]).unwrap_err();
    assert!(
        err.message().contains("parameter $1") && err.message().contains("not be stored exactly"),
        "{}",
        err.message()
    );
    bind_rows(decimal().await, &[text("1.20")]).unwrap();
    let zero = vec![
        ScalarValue::Float64(Some(-0.0)),
        ScalarValue::Float64(Some(-0.0)),
    ];
    bind_rows(decimal().await, &[zero]).unwrap();
    let huge = "9".repeat(1 << 20);
    let err = bind_rows(
        typed_input("INSERT INTO n (i) VALUES ($1)").await,
        &[vec![ScalarValue::Utf8(Some(huge))]],
    )
    .unwrap_err();
    assert!(err.message().len() < 1000, "{} bytes", err.message().len());
}
