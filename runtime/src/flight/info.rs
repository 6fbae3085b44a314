//! GetSqlInfo: what the server and its SQL dialect support — the ids JDBC's DatabaseMetaData reads
//! (it asks for all of them once and caches), plus the function lists, taken from DataFusion's own
//! registry so they are always the functions that actually run.

use std::collections::BTreeMap;

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, MapArray, RecordBatch, StructArray, UnionArray};
use arrow::compute::can_cast_types;
use arrow::datatypes::{
    DataType, FieldRef, Fields, IntervalUnit, Schema, SchemaRef, TimeUnit, UnionFields,
};
use arrow::error::ArrowError;
use arrow_flight::error::FlightError;
use arrow_flight::sql::CommandGetSqlInfo;
use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::{
    SqlInfo, SqlNullOrdering, SqlOuterJoinsSupportLevel, SqlSupportedCaseSensitivity,
    SqlSupportedElementActions, SqlSupportedGroupBy, SqlSupportedResultSetConcurrency,
    SqlSupportedResultSetType, SqlSupportedSubqueries, SqlSupportedTransaction, SqlSupportedUnions,
    SqlSupportsConvert, SqlTransactionIsolationLevel, SupportedSqlGrammar,
};
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::keywords::ALL_KEYWORDS;

use super::catalog::CATALOG;
use super::sql::{MAX_SQL_BYTES, MAX_TABLE_REFERENCES};
use crate::catalog::MAX_NAME_LEN;

/// `SqlSupportedCaseSensitivity::SqlCaseSensitivityLowercase`: unquoted names fold to lower case.
const LOWERCASE: i32 = SqlSupportedCaseSensitivity::SqlCaseSensitivityLowercase as i32;
/// `SqlSupportedCaseSensitivity::SqlCaseSensitivityCaseInsensitive` is not true of quoted names;
/// they keep their case and match exactly, which the protocol calls UNKNOWN.
const CASE_UNKNOWN: i32 = SqlSupportedCaseSensitivity::SqlCaseSensitivityUnknown as i32;
/// NULLs sort as larger than any value (DataFusion's NULLS LAST for ASC, FIRST for DESC).
const NULLS_SORTED_HIGH: i32 = SqlNullOrdering::SqlNullsSortedHigh as i32;
/// `SupportedAnsi92SqlGrammarLevel::Ansi92EntrySql` (not re-exported by arrow-flight).
const ANSI92_ENTRY: i32 = 0;

/// The set of `values` as the protocol's int32 bitmask (bit n for the enum value n).
fn bits(values: &[i32]) -> i32 {
    values.iter().fold(0, |mask, v| mask | (1 << v))
}

/// JDBC's "no limit, or not known": what lake answers for a limit it does not impose.
const NO_LIMIT: i64 = 0;

/// A representative Arrow type of each `SqlSupportsConvert` type: what lake stores for it.
fn convert_type(t: SqlSupportsConvert) -> DataType {
    use SqlSupportsConvert::*;
    match t {
        SqlConvertBigint => DataType::Int64,
        SqlConvertBinary | SqlConvertVarbinary => DataType::Binary,
        SqlConvertLongvarbinary => DataType::LargeBinary,
        SqlConvertBit => DataType::Boolean,
        SqlConvertChar | SqlConvertVarchar => DataType::Utf8,
        SqlConvertLongvarchar => DataType::LargeUtf8,
        SqlConvertDate => DataType::Date32,
        SqlConvertDecimal | SqlConvertNumeric => DataType::Decimal128(38, 10),
        SqlConvertFloat => DataType::Float64,
        SqlConvertReal => DataType::Float32,
        SqlConvertInteger => DataType::Int32,
        SqlConvertSmallint => DataType::Int16,
        SqlConvertTinyint => DataType::Int8,
        SqlConvertIntervalDayTime => DataType::Interval(IntervalUnit::DayTime),
        SqlConvertIntervalYearMonth => DataType::Interval(IntervalUnit::YearMonth),
        SqlConvertTime => DataType::Time64(TimeUnit::Microsecond),
        SqlConvertTimestamp => DataType::Timestamp(TimeUnit::Microsecond, None),
    }
}

/// `SQL_SUPPORTS_CONVERT`: for each type, the types `CAST` turns it into — Arrow's own cast
/// table, which is what DataFusion's CAST runs.
fn conversions() -> BTreeMap<i32, Vec<i32>> {
    let all: Vec<SqlSupportsConvert> = (0..)
        .map_while(|n| SqlSupportsConvert::try_from(n).ok())
        .collect();
    all.iter()
        .map(|&from| {
            let to = all
                .iter()
                .filter(|&&to| can_cast_types(&convert_type(from), &convert_type(to)))
                .map(|&to| to as i32)
                .collect();
            (from as i32, to)
        })
        .collect()
}

/// DataFusion's scalar functions whose documentation section is one of `sections`, sorted.
fn functions(ctx: &SessionContext, sections: &[&str]) -> Vec<String> {
    let state = ctx.state();
    let mut names: Vec<String> = state
        .scalar_functions()
        .iter()
        .filter(|(_, f)| {
            f.documentation()
                .is_some_and(|d| sections.contains(&d.doc_section.label))
        })
        .map(|(name, _)| name.clone())
        .collect();
    names.sort();
    names
}

/// The GetSqlInfo table, with its map type written the way the Flight SQL spec names it.
///
/// arrow-flight names the entries of `int32_to_int32_list_map` `keys` and `values`; the spec
/// and Arrow's Map convention say `key` and `value`, and the Java readers (the JDBC driver's
/// `supportsConvert`) look the entries up by those names: with arrow-flight's names every key
/// read as null, so `supportsConvert(from, to)` was always false.
pub(super) struct SqlInfoTable {
    data: SqlInfoData,
    schema: SchemaRef,
}

impl SqlInfoTable {
    pub(super) fn new(read_only: bool) -> Self {
        let data = sql_info(read_only);
        let empty = data.record_batch([]).expect("an empty SqlInfo batch");
        let schema = spec_map_names(empty)
            .expect("renaming map fields keeps the layout")
            .schema();
        Self { data, schema }
    }

    pub(super) fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// The rows of `query`'s ids (all of them when it names none).
    pub(super) fn batch(&self, query: CommandGetSqlInfo) -> Result<RecordBatch, ArrowError> {
        let batch = query
            .into_builder(&self.data)
            .build()
            .map_err(|e| match e {
                FlightError::Arrow(e) => e,
                other => ArrowError::ExternalError(Box::new(other)),
            })?;
        spec_map_names(batch)
    }
}

/// `batch` with every Map child of its union column named `entries { key, value }`.
fn spec_map_names(batch: RecordBatch) -> Result<RecordBatch, ArrowError> {
    let (schema, mut columns, _) = batch.into_parts();
    let mut fields: Vec<FieldRef> = schema.fields().iter().cloned().collect();
    for (field, column) in fields.iter_mut().zip(columns.iter_mut()) {
        let Some(union) = column.as_any().downcast_ref::<UnionArray>() else {
            continue;
        };
        let (union_fields, type_ids, offsets, children) = union.clone().into_parts();
        let children: Vec<ArrayRef> = children
            .into_iter()
            .map(rename_map)
            .collect::<Result<_, _>>()?;
        let union_fields = UnionFields::try_new(
            union_fields.iter().map(|(id, _)| id),
            union_fields.iter().zip(&children).map(|((_, f), child)| {
                f.as_ref().clone().with_data_type(child.data_type().clone())
            }),
        )?;
        let renamed = UnionArray::try_new(union_fields, type_ids, offsets, children)?;
        *field = Arc::new(
            field
                .as_ref()
                .clone()
                .with_data_type(renamed.data_type().clone()),
        );
        *column = Arc::new(renamed);
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
}

fn rename_map(child: ArrayRef) -> Result<ArrayRef, ArrowError> {
    let Some(map) = child.as_any().downcast_ref::<MapArray>() else {
        return Ok(child);
    };
    let (entries_field, offsets, entries, nulls, ordered) = map.clone().into_parts();
    let (entry_fields, columns, entry_nulls) = entries.into_parts();
    let names = ["key", "value"];
    let renamed: Fields = entry_fields
        .iter()
        .zip(names)
        .map(|(f, name)| f.as_ref().clone().with_name(name))
        .collect();
    let entries = StructArray::try_new(renamed.clone(), columns, entry_nulls)?;
    let entries_field = Arc::new(
        entries_field
            .as_ref()
            .clone()
            .with_name("entries")
            .with_data_type(DataType::Struct(renamed)),
    );
    Ok(Arc::new(MapArray::try_new(
        entries_field,
        offsets,
        entries,
        nulls,
        ordered,
    )?))
}

fn sql_info(read_only: bool) -> SqlInfoData {
    let ctx = SessionContext::new();
    let mut info = SqlInfoDataBuilder::new();
    info.append(SqlInfo::FlightSqlServerName, "lake");
    info.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
    info.append(SqlInfo::FlightSqlServerArrowVersion, "58");
    info.append(SqlInfo::FlightSqlServerReadOnly, read_only);
    info.append(SqlInfo::FlightSqlServerSql, true);
    info.append(SqlInfo::FlightSqlServerSubstrait, false);
    info.append(SqlInfo::FlightSqlServerSubstraitMinVersion, "");
    info.append(SqlInfo::FlightSqlServerSubstraitMaxVersion, "");
    info.append(
        SqlInfo::FlightSqlServerTransaction,
        SqlSupportedTransaction::None as i32,
    );
    // Cancel by closing the stream; there is no cancel action.
    info.append(SqlInfo::FlightSqlServerCancel, false);
    info.append(SqlInfo::FlightSqlServerBulkIngestion, !read_only);
    // Each ingest is one commit, but there are no client transactions around it.
    info.append(SqlInfo::FlightSqlServerIngestTransactionsSupported, false);
    // Prepared statement handles are self-contained (no server state), so they never expire.
    info.append(SqlInfo::FlightSqlServerStatementTimeout, 0i32);
    info.append(SqlInfo::FlightSqlServerTransactionTimeout, 0i32);
    info.append(SqlInfo::SqlDdlCatalog, false);
    info.append(SqlInfo::SqlDdlSchema, !read_only);
    info.append(SqlInfo::SqlDdlTable, !read_only);
    info.append(SqlInfo::SqlIdentifierCase, LOWERCASE);
    info.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
    info.append(SqlInfo::SqlQuotedIdentifierCase, CASE_UNKNOWN);
    info.append(SqlInfo::SqlAllTablesAreSelectable, true);
    info.append(SqlInfo::SqlNullOrdering, NULLS_SORTED_HIGH);
    info.append(SqlInfo::SqlKeywords, ALL_KEYWORDS);
    info.append(
        SqlInfo::SqlNumericFunctions,
        functions(&ctx, &["Math Functions"]),
    );
    info.append(
        SqlInfo::SqlStringFunctions,
        functions(
            &ctx,
            &[
                "String Functions",
                "Binary String Functions",
                "Regular Expression Functions",
            ],
        ),
    );
    info.append(
        SqlInfo::SqlSystemFunctions,
        functions(
            &ctx,
            &[
                "Conditional Functions",
                "Other Functions",
                "Hashing Functions",
            ],
        ),
    );
    info.append(
        SqlInfo::SqlDatetimeFunctions,
        functions(&ctx, &["Time and Date Functions"]),
    );
    info.append(SqlInfo::SqlSearchStringEscape, "\\");
    info.append(SqlInfo::SqlExtraNameCharacters, "");
    info.append(SqlInfo::SqlSupportsColumnAliasing, true);
    info.append(SqlInfo::SqlNullPlusNullIsNull, true);
    info.append(SqlInfo::SqlSupportsTableCorrelationNames, true);
    info.append(SqlInfo::SqlSupportsDifferentTableCorrelationNames, false);
    info.append(SqlInfo::SqlSupportsExpressionsInOrderBy, true);
    info.append(SqlInfo::SqlSupportsOrderByUnrelated, true);
    info.append(SqlInfo::SqlSupportsLikeEscapeClause, true);
    info.append(SqlInfo::SqlSupportsNonNullableColumns, true);
    info.append(SqlInfo::SqlSchemaTerm, "schema");
    info.append(SqlInfo::SqlCatalogTerm, "catalog");
    info.append(SqlInfo::SqlProcedureTerm, "procedure");
    info.append(SqlInfo::SqlCatalogAtStart, true);
    info.append(SqlInfo::SqlSelectForUpdateSupported, false);
    info.append(SqlInfo::SqlStoredProceduresSupported, false);
    info.append(SqlInfo::SqlTransactionsSupported, false);
    append_capabilities(&mut info, read_only);
    append_limits(&mut info);
    append_transactions(&mut info);
    // build() only fails on inconsistent union types, impossible with the values above.
    info.build().expect("static SqlInfo is valid")
}

/// What the dialect supports, as DataFusion plans it (each checked against a running lake when
/// this was written: every subquery form, UNION, GROUP BY a column not selected, FULL JOIN).
fn append_capabilities(info: &mut SqlInfoDataBuilder, read_only: bool) {
    info.append(SqlInfo::SqlSupportsConvert, conversions());
    info.append(
        SqlInfo::SqlSupportedGroupBy,
        bits(&[
            SqlSupportedGroupBy::SqlGroupByUnrelated as i32,
            SqlSupportedGroupBy::SqlGroupByBeyondSelect as i32,
        ]),
    );
    info.append(
        SqlInfo::SqlSupportedGrammar,
        bits(&[
            SupportedSqlGrammar::SqlMinimumGrammar as i32,
            SupportedSqlGrammar::SqlCoreGrammar as i32,
        ]),
    );
    info.append(SqlInfo::SqlAnsi92SupportedLevel, bits(&[ANSI92_ENTRY]));
    // No foreign keys, no check constraints.
    info.append(SqlInfo::SqlSupportsIntegrityEnhancementFacility, false);
    // A bitmask, as the JDBC driver reads it (the spec's text says ordinal).
    info.append(
        SqlInfo::SqlOuterJoinsSupportLevel,
        bits(&[
            SqlOuterJoinsSupportLevel::SqlLimitedOuterJoins as i32,
            SqlOuterJoinsSupportLevel::SqlFullOuterJoins as i32,
        ]),
    );
    // `CREATE INDEX i ON schema.table`; no procedures, no privileges in SQL.
    info.append(
        SqlInfo::SqlSchemasSupportedActions,
        if read_only {
            0
        } else {
            bits(&[SqlSupportedElementActions::SqlElementInIndexDefinitions as i32])
        },
    );
    info.append(SqlInfo::SqlCatalogsSupportedActions, 0i32);
    info.append(SqlInfo::SqlSupportedPositionedCommands, 0i32);
    info.append(
        SqlInfo::SqlSupportedSubqueries,
        bits(&[
            SqlSupportedSubqueries::SqlSubqueriesInComparisons as i32,
            SqlSupportedSubqueries::SqlSubqueriesInExists as i32,
            SqlSupportedSubqueries::SqlSubqueriesInIns as i32,
            SqlSupportedSubqueries::SqlSubqueriesInQuantifieds as i32,
        ]),
    );
    info.append(SqlInfo::SqlCorrelatedSubqueriesSupported, true);
    info.append(
        SqlInfo::SqlSupportedUnions,
        bits(&[
            SqlSupportedUnions::SqlUnion as i32,
            SqlSupportedUnions::SqlUnionAll as i32,
        ]),
    );
    // Results stream forward, read-only.
    info.append(
        SqlInfo::SqlSupportedResultSetTypes,
        bits(&[SqlSupportedResultSetType::SqlResultSetTypeForwardOnly as i32]),
    );
    let read_only_results =
        bits(&[SqlSupportedResultSetConcurrency::SqlResultSetConcurrencyReadOnly as i32]);
    info.append(
        SqlInfo::SqlSupportedConcurrenciesForResultSetUnspecified,
        read_only_results,
    );
    info.append(
        SqlInfo::SqlSupportedConcurrenciesForResultSetForwardOnly,
        read_only_results,
    );
    info.append(
        SqlInfo::SqlSupportedConcurrenciesForResultSetScrollSensitive,
        0i32,
    );
    info.append(
        SqlInfo::SqlSupportedConcurrenciesForResultSetScrollInsensitive,
        0i32,
    );
    // `executeBatch` of a prepared INSERT is one statement with many parameter rows.
    info.append(SqlInfo::SqlBatchUpdatesSupported, !read_only);
    info.append(SqlInfo::SqlSavepointsSupported, false);
    info.append(SqlInfo::SqlNamedParametersSupported, false);
    info.append(SqlInfo::SqlLocatorsUpdateCopy, false);
    info.append(SqlInfo::SqlStoredFunctionsUsingCallSyntaxSupported, false);
}

/// The limits lake enforces, and [`NO_LIMIT`] where it enforces none.
fn append_limits(info: &mut SqlInfoDataBuilder) {
    let name = MAX_NAME_LEN as i64;
    info.append(SqlInfo::SqlMaxTableNameLength, name);
    info.append(SqlInfo::SqlDbSchemaNameLength, name);
    info.append(SqlInfo::SqlMaxCatalogNameLength, CATALOG.len() as i64);
    info.append(SqlInfo::SqlMaxStatementLength, MAX_SQL_BYTES as i64);
    info.append(SqlInfo::SqlMaxTablesInSelect, MAX_TABLE_REFERENCES as i64);
    for unlimited in [
        SqlInfo::SqlMaxBinaryLiteralLength,
        SqlInfo::SqlMaxCharLiteralLength,
        SqlInfo::SqlMaxColumnNameLength,
        SqlInfo::SqlMaxColumnsInGroupBy,
        SqlInfo::SqlMaxColumnsInIndex,
        SqlInfo::SqlMaxColumnsInOrderBy,
        SqlInfo::SqlMaxColumnsInSelect,
        SqlInfo::SqlMaxColumnsInTable,
        SqlInfo::SqlMaxConnections,
        SqlInfo::SqlMaxCursorNameLength,
        SqlInfo::SqlMaxIndexLength,
        SqlInfo::SqlMaxProcedureNameLength,
        SqlInfo::SqlMaxRowSize,
        SqlInfo::SqlMaxStatements,
        SqlInfo::SqlMaxUsernameLength,
    ] {
        info.append(unlimited, NO_LIMIT);
    }
    info.append(SqlInfo::SqlMaxRowSizeIncludesBlobs, true);
}

/// No transactions: every statement commits on its own.
fn append_transactions(info: &mut SqlInfoDataBuilder) {
    let none = SqlTransactionIsolationLevel::SqlTransactionNone as i32;
    // int64, as the JDBC driver reads it (the spec's text says int32).
    info.append(SqlInfo::SqlDefaultTransactionIsolation, i64::from(none));
    info.append(
        SqlInfo::SqlSupportedTransactionsIsolationLevels,
        bits(&[none]),
    );
    info.append(SqlInfo::SqlDataDefinitionCausesTransactionCommit, false);
    info.append(SqlInfo::SqlDataDefinitionsInTransactionsIgnored, false);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JDBC driver 18.3 throws NullPointerException for any id it reads that is missing
    /// (DBeaver's connect called several): every id of the protocol has a value.
    #[test]
    fn every_sql_info_has_a_value() {
        let ids: Vec<u32> = (0..1000)
            .filter(|&n| SqlInfo::try_from(n).is_ok())
            .map(|n| n as u32)
            .collect();
        for read_only in [true, false] {
            let info = sql_info(read_only);
            let batch = info.record_batch(ids.clone()).expect("batch");
            let names = batch
                .column(0)
                .as_any()
                .downcast_ref::<arrow::array::UInt32Array>()
                .expect("info_name is uint32");
            let missing: Vec<_> = ids
                .iter()
                .filter(|id| !names.values().contains(id))
                .map(|&id| SqlInfo::try_from(id as i32).map(|i| i.as_str_name()))
                .collect();
            assert!(missing.is_empty(), "read_only {read_only}: {missing:?}");
        }
    }

    /// What the JDBC driver reads: a map whose entries are named `key` and `value`.
    #[test]
    fn the_convert_map_has_the_specs_field_names() {
        let table = SqlInfoTable::new(false);
        let batch = table
            .batch(CommandGetSqlInfo {
                info: vec![SqlInfo::SqlSupportsConvert as u32],
            })
            .expect("batch");
        assert_eq!(batch.schema(), table.schema());
        let union = batch
            .column(1)
            .as_any()
            .downcast_ref::<UnionArray>()
            .expect("union");
        let map = union.value(0);
        let map = map.as_any().downcast_ref::<MapArray>().expect("map");
        let entries = map.entries();
        assert_eq!(entries.column_names(), ["key", "value"]);
        assert!(map.value(0).len() > 0, "the map has entries");
    }

    #[test]
    fn conversions_are_arrows_casts() {
        use SqlSupportsConvert::*;
        let map = conversions();
        let to = |from: SqlSupportsConvert| &map[&(from as i32)];
        assert!(to(SqlConvertVarchar).contains(&(SqlConvertInteger as i32)));
        assert!(to(SqlConvertInteger).contains(&(SqlConvertVarchar as i32)));
        assert!(to(SqlConvertTimestamp).contains(&(SqlConvertDate as i32)));
        // Arrow has no cast from a date to a time of day.
        assert!(!to(SqlConvertDate).contains(&(SqlConvertTime as i32)));
    }

    #[test]
    fn function_lists_come_from_datafusion() {
        let ctx = SessionContext::new();
        let math = functions(&ctx, &["Math Functions"]);
        assert!(
            math.contains(&"abs".to_owned()) && math.contains(&"sqrt".to_owned()),
            "{math:?}"
        );
        let dates = functions(&ctx, &["Time and Date Functions"]);
        assert!(dates.contains(&"date_trunc".to_owned()), "{dates:?}");
        let strings = functions(&ctx, &["String Functions"]);
        assert!(strings.contains(&"lower".to_owned()), "{strings:?}");
    }
}
