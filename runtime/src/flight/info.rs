//! GetSqlInfo: what the server and its SQL dialect support — the ids JDBC's DatabaseMetaData reads
//! (it asks for all of them once and caches), plus the function lists, taken from DataFusion's own
//! registry so they are always the functions that actually run.

use arrow_flight::sql::SqlInfo;
use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::keywords::ALL_KEYWORDS;

/// `SqlSupportedCaseSensitivity::SqlCaseSensitivityLowercase`: unquoted names fold to lower case.
const LOWERCASE: i32 = 3;
/// `SqlSupportedCaseSensitivity::SqlCaseSensitivityCaseInsensitive` is not true of quoted names;
/// they keep their case and match exactly, which the protocol calls UNKNOWN.
const CASE_UNKNOWN: i32 = 0;
/// `SqlNullOrdering::SqlNullsSortedHigh`: NULLs sort as larger than any value (DataFusion's
/// NULLS LAST for ASC, FIRST for DESC).
const NULLS_SORTED_HIGH: i32 = 0;

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

pub(super) fn sql_info(read_only: bool) -> SqlInfoData {
    let ctx = SessionContext::new();
    let mut info = SqlInfoDataBuilder::new();
    info.append(SqlInfo::FlightSqlServerName, "lake");
    info.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
    info.append(SqlInfo::FlightSqlServerArrowVersion, "58");
    info.append(SqlInfo::FlightSqlServerReadOnly, read_only);
    info.append(SqlInfo::FlightSqlServerSql, true);
    info.append(SqlInfo::FlightSqlServerSubstrait, false);
    info.append(SqlInfo::FlightSqlServerTransaction, 0i32);
    // Cancel by closing the stream; there is no cancel action.
    info.append(SqlInfo::FlightSqlServerCancel, false);
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
    // build() only fails on inconsistent union types, impossible with the values above.
    info.build().expect("static SqlInfo is valid")
}

#[cfg(test)]
mod tests {
    use super::*;

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
