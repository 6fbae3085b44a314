//! The SQL types lake accepts in DDL, as GetXdbcTypeInfo reports them (JDBC `getTypeInfo`).

use std::collections::HashSet;
use std::sync::Arc;

use arrow::datatypes::{Field, Schema, SchemaRef};
use arrow_flight::sql::metadata::{XdbcTypeInfo, XdbcTypeInfoData, XdbcTypeInfoDataBuilder};
use arrow_flight::sql::{Nullable, Searchable, XdbcDataType};
use datafusion::common::TableReference;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::LogicalPlan;

use super::catalog::CATALOG;
use super::wire::wire_schema;
use crate::catalog::NamespaceName;

/// (SQL name, XDBC type, column size) of every type DataFusion maps to an Arrow type we store.
const TYPES: [(&str, XdbcDataType, Option<i32>); 11] = [
    ("BOOLEAN", XdbcDataType::XdbcBit, Some(1)),
    ("TINYINT", XdbcDataType::XdbcTinyint, Some(3)),
    ("SMALLINT", XdbcDataType::XdbcSmallint, Some(5)),
    ("INTEGER", XdbcDataType::XdbcInteger, Some(10)),
    ("BIGINT", XdbcDataType::XdbcBigint, Some(19)),
    ("REAL", XdbcDataType::XdbcReal, Some(7)),
    ("DOUBLE", XdbcDataType::XdbcDouble, Some(15)),
    ("VARCHAR", XdbcDataType::XdbcVarchar, None),
    ("VARBINARY", XdbcDataType::XdbcVarbinary, None),
    ("DATE", XdbcDataType::XdbcDate, Some(10)),
    ("TIMESTAMP", XdbcDataType::XdbcTimestamp, Some(29)),
];

pub(super) fn xdbc_type_info() -> XdbcTypeInfoData {
    let mut builder = XdbcTypeInfoDataBuilder::new();
    for (name, data_type, column_size) in TYPES {
        let quoted = matches!(
            data_type,
            XdbcDataType::XdbcVarchar | XdbcDataType::XdbcDate | XdbcDataType::XdbcTimestamp
        );
        let numeric = column_size.is_some() && !quoted && data_type != XdbcDataType::XdbcBit;
        builder.append(XdbcTypeInfo {
            type_name: name.into(),
            data_type,
            column_size,
            literal_prefix: quoted.then(|| "'".into()),
            literal_suffix: quoted.then(|| "'".into()),
            create_params: None,
            nullable: Nullable::NullabilityNullable,
            case_sensitive: data_type == XdbcDataType::XdbcVarchar,
            searchable: Searchable::Full,
            unsigned_attribute: numeric.then_some(false),
            fixed_prec_scale: false,
            auto_increment: numeric.then_some(false),
            local_type_name: Some(name.into()),
            minimum_scale: None,
            maximum_scale: None,
            sql_data_type: data_type,
            datetime_subcode: None,
            num_prec_radix: numeric.then_some(10),
            interval_precision: None,
        });
    }
    // The entries above are consistent by construction; build() only validates them.
    builder.build().expect("static XDBC type table is valid")
}

/// Field metadata keys Flight SQL clients read for a column (JDBC's `getColumns`).
const FLIGHT_SQL_KEYS: &str = "ARROW:FLIGHT:SQL:";
const TYPE_NAME: &str = "ARROW:FLIGHT:SQL:TYPE_NAME";
const PRECISION: &str = "ARROW:FLIGHT:SQL:PRECISION";
const SCALE: &str = "ARROW:FLIGHT:SQL:SCALE";
const CATALOG_NAME: &str = "ARROW:FLIGHT:SQL:CATALOG_NAME";
const SCHEMA_NAME: &str = "ARROW:FLIGHT:SQL:SCHEMA_NAME";
const TABLE_NAME: &str = "ARROW:FLIGHT:SQL:TABLE_NAME";

/// (SQL type name, precision, scale) of a column of `data_type`, as the DDL names it: precision is
/// JDBC's COLUMN_SIZE (digits of a number, characters of a date or timestamp), scale its
/// DECIMAL_DIGITS (a decimal's scale, a timestamp's fractional digits). `None` for a type no DDL
/// creates.
fn sql_type(
    data_type: &arrow::datatypes::DataType,
) -> Option<(&'static str, Option<i32>, Option<i32>)> {
    use arrow::datatypes::{DataType, TimeUnit};
    let size = |name: &str| {
        TYPES
            .iter()
            .find(|(n, _, _)| *n == name)
            .and_then(|(_, _, s)| *s)
    };
    Some(match data_type {
        DataType::Boolean => ("BOOLEAN", size("BOOLEAN"), None),
        DataType::Int8 => ("TINYINT", size("TINYINT"), Some(0)),
        DataType::Int16 => ("SMALLINT", size("SMALLINT"), Some(0)),
        DataType::Int32 => ("INTEGER", size("INTEGER"), Some(0)),
        DataType::Int64 => ("BIGINT", size("BIGINT"), Some(0)),
        DataType::Float32 => ("REAL", size("REAL"), None),
        DataType::Float64 => ("DOUBLE", size("DOUBLE"), None),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => ("VARCHAR", None, None),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => {
            ("VARBINARY", None, None)
        }
        DataType::Date32 | DataType::Date64 => ("DATE", size("DATE"), None),
        DataType::Timestamp(unit, _) => {
            let digits = match unit {
                TimeUnit::Second => 0,
                TimeUnit::Millisecond => 3,
                TimeUnit::Microsecond => 6,
                TimeUnit::Nanosecond => 9,
            };
            // `yyyy-mm-dd hh:mm:ss` and a point before any fractional digits.
            (
                "TIMESTAMP",
                Some(19 + digits + i32::from(digits > 0)),
                Some(digits),
            )
        }
        DataType::Decimal128(p, s) | DataType::Decimal256(p, s) => {
            ("DECIMAL", Some(i32::from(*p)), Some(i32::from(*s)))
        }
        _ => return None,
    })
}

/// `field` with its SQL type name, precision and scale in its metadata.
fn describe(field: &Field) -> Field {
    // Keys a client wrote into an ingested table's schema (or a stale result's) say nothing true.
    let mut metadata = field.metadata().clone();
    metadata.retain(|key, _| !key.starts_with(FLIGHT_SQL_KEYS));
    let Some((name, precision, scale)) = sql_type(field.data_type()) else {
        return field.clone().with_metadata(metadata);
    };
    metadata.insert(TYPE_NAME.into(), name.into());
    if let Some(p) = precision {
        metadata.insert(PRECISION.into(), p.to_string());
    }
    if let Some(s) = scale {
        metadata.insert(SCALE.into(), s.to_string());
    }
    field.clone().with_metadata(metadata)
}

/// `schema` with each column's SQL type name, precision and scale in its field metadata, as
/// GetTables reports a table's columns.
pub(super) fn described(schema: &Schema) -> SchemaRef {
    let fields: Vec<Field> = schema.fields().iter().map(|f| describe(f)).collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// The schema of a query's result as clients are told it (FlightInfo, a prepared statement's
/// dataset schema, the DoGet stream): the wire types, each column's SQL type, precision and
/// scale (JDBC's `ResultSetMetaData` reads them; a DECIMAL(10,2) read as 0/0 without), and for
/// a column read straight from a table, that table's catalog, schema (the session's `chosen`
/// one for an unqualified name) and name.
pub(super) fn result_schema(plan: &LogicalPlan, chosen: Option<&NamespaceName>) -> SchemaRef {
    // Tables by the name the statement gave them; a column qualified by an alias (`FROM s.t x`)
    // or by nothing matches none of them and names no table. A name that is also an alias (a
    // subquery or CTE named `t` around a scan of table `t`) may qualify computed columns: it
    // names no table either.
    let mut scanned: HashSet<TableReference> = HashSet::new();
    let mut aliases: HashSet<TableReference> = HashSet::new();
    let _ = plan.apply(|node| {
        match node {
            LogicalPlan::TableScan(scan)
                if scan.table_name.schema().is_some() || chosen.is_some() =>
            {
                scanned.insert(scan.table_name.clone());
            }
            LogicalPlan::SubqueryAlias(alias) => {
                aliases.insert(alias.alias.clone());
            }
            _ => {}
        }
        Ok(TreeNodeRecursion::Continue)
    });
    scanned.retain(|table| !aliases.contains(table));
    let wire = wire_schema(plan.schema().as_arrow());
    let fields: Vec<Field> = wire
        .fields()
        .iter()
        .zip(plan.schema().iter())
        .map(|(field, (qualifier, _))| {
            let field = describe(field);
            let Some(table) = qualifier.filter(|q| scanned.contains(*q)) else {
                return field;
            };
            let mut metadata = field.metadata().clone();
            metadata.insert(
                CATALOG_NAME.into(),
                table.catalog().unwrap_or(CATALOG).into(),
            );
            let schema = table.schema().or(chosen.map(NamespaceName::as_str));
            if let Some(schema) = schema {
                metadata.insert(SCHEMA_NAME.into(), schema.into());
            }
            // `t@v3` reads table t at a version.
            let name = table.table().split('@').next().unwrap_or_default();
            metadata.insert(TABLE_NAME.into(), name.into());
            field.with_metadata(metadata)
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, wire.metadata().clone()))
}

#[cfg(test)]
mod tests {
    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};

    #[test]
    fn columns_carry_their_sql_type_precision_and_scale() {
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("price", DataType::Decimal128(10, 2), true),
            Field::new("at", DataType::Timestamp(TimeUnit::Microsecond, None), true),
            Field::new("name", DataType::Utf8, true),
            Field::new("odd", DataType::Duration(TimeUnit::Second), true),
        ]);
        let described = super::described(&schema);
        let meta = |i: usize, key: &str| described.field(i).metadata().get(key).cloned();
        assert_eq!(meta(0, super::TYPE_NAME).as_deref(), Some("BIGINT"));
        assert_eq!(meta(0, super::PRECISION).as_deref(), Some("19"));
        assert_eq!(meta(1, super::PRECISION).as_deref(), Some("10"));
        assert_eq!(meta(1, super::SCALE).as_deref(), Some("2"));
        assert_eq!(meta(2, super::PRECISION).as_deref(), Some("26"));
        assert_eq!(meta(2, super::SCALE).as_deref(), Some("6"));
        assert_eq!(meta(3, super::TYPE_NAME).as_deref(), Some("VARCHAR"));
        assert_eq!(meta(3, super::PRECISION), None, "unbounded");
        assert!(
            described.field(4).metadata().is_empty(),
            "no SQL name is invented"
        );
    }

    #[tokio::test]
    async fn result_columns_name_their_table_unless_computed_or_aliased() {
        use datafusion::datasource::MemTable;
        use datafusion::prelude::SessionContext;
        use std::sync::Arc;
        let ctx = SessionContext::new();
        let schema = Arc::new(Schema::new(vec![Field::new(
            "price",
            DataType::Decimal128(10, 2),
            true,
        )]));
        let table = MemTable::try_new(schema, vec![vec![]]).unwrap();
        ctx.register_table("public.t", Arc::new(table)).unwrap();
        let described = |sql: &'static str| {
            let ctx = ctx.clone();
            async move {
                let plan = ctx.state().create_logical_plan(sql).await.unwrap();
                super::result_schema(&plan, None)
            }
        };
        let schema = described("SELECT price, price * 2 AS twice FROM public.t").await;
        let meta = |i: usize, key: &str| schema.field(i).metadata().get(key).cloned();
        assert_eq!(meta(0, super::TABLE_NAME).as_deref(), Some("t"));
        assert_eq!(meta(0, super::SCHEMA_NAME).as_deref(), Some("public"));
        assert_eq!(meta(0, super::CATALOG_NAME).as_deref(), Some("lake"));
        assert_eq!(meta(0, super::SCALE).as_deref(), Some("2"));
        assert_eq!(meta(1, super::TABLE_NAME), None, "a computed column");
        assert_eq!(meta(1, super::TYPE_NAME).as_deref(), Some("DECIMAL"));
        let aliased = described("SELECT x.price FROM public.t x").await;
        assert_eq!(aliased.field(0).metadata().get(super::TABLE_NAME), None);

        // In a session with a chosen schema, a subquery named like the table it reads: its
        // computed column is not the table's.
        let chosen = crate::catalog::NamespaceName::parse("public").unwrap();
        let in_session = |sql: &'static str| {
            let (ctx, chosen) = (ctx.clone(), chosen.clone());
            async move {
                let plan = ctx.state().create_logical_plan(sql).await.unwrap();
                super::result_schema(&plan, Some(&chosen))
            }
        };
        let bare = in_session("SELECT price FROM t").await;
        assert_eq!(
            bare.field(0)
                .metadata()
                .get(super::TABLE_NAME)
                .map(String::as_str),
            Some("t")
        );
        for sql in [
            "SELECT t.twice FROM (SELECT price * 2 AS twice FROM t) t",
            "WITH t AS (SELECT price * 2 AS twice FROM t) SELECT twice FROM t",
        ] {
            let shadowed = in_session(sql).await;
            assert_eq!(
                shadowed.field(0).metadata().get(super::TABLE_NAME),
                None,
                "{sql}"
            );
        }
    }

    /// An ingested table's schema may carry keys a client wrote (a result read back and
    /// ingested): they are not passed on as if lake said them.
    #[test]
    fn stale_flight_sql_keys_are_dropped() {
        let field = Field::new("c", DataType::Int32, true).with_metadata(
            [
                (super::TABLE_NAME.to_owned(), "elsewhere".to_owned()),
                ("mine".to_owned(), "kept".to_owned()),
            ]
            .into(),
        );
        let described = super::describe(&field);
        assert_eq!(described.metadata().get(super::TABLE_NAME), None);
        assert_eq!(
            described.metadata().get("mine").map(String::as_str),
            Some("kept")
        );
        assert_eq!(
            described
                .metadata()
                .get(super::TYPE_NAME)
                .map(String::as_str),
            Some("INTEGER")
        );
    }
}
