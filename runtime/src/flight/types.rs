//! The SQL types lake accepts in DDL, as GetXdbcTypeInfo reports them (JDBC `getTypeInfo`).

use arrow_flight::sql::metadata::{XdbcTypeInfo, XdbcTypeInfoData, XdbcTypeInfoDataBuilder};
use arrow_flight::sql::{Nullable, Searchable, XdbcDataType};

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

pub fn xdbc_type_info() -> XdbcTypeInfoData {
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
