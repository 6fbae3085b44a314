//! The explicit search forms, named like Lance's own integrations:
//! `vector_search('s.t', <vector>, 'col', k [, '<options json>'])` (the table's columns and
//! `_distance`) and `fts('s.t', '<Lance FTS query JSON, or words>')` (the columns and `_score`).
//!
//! A table function is called while the statement is planned, without I/O: the tables a
//! statement searches are resolved first, through the statement's catalog like any table it
//! names ([`register`]), and the functions only look them up.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;

use arrow::array::RecordBatchOptions;
use arrow::datatypes::{DataType, Schema};
use arrow::record_batch::RecordBatch;
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::tree_node::TreeNode;
use datafusion::common::{DFSchema, ScalarValue, plan_err};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{ColumnarValue, Expr};
use datafusion::prelude::SessionContext;
use datafusion::sql::TableReference;
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::{
    FunctionArg, FunctionArgExpr, TableFactor, Value, Visit, Visitor,
};
use lance_index::scalar::FullTextSearchQuery;
use lance_index::scalar::inverted::query::{FtsQuery, MatchQuery};
use lance_linalg::distance::DistanceType;
use tonic::Status;

use super::rule::{MAX_K, query_vector};
use super::scored::{ScoredTable, Search};
use super::settings::{MAX_EF, MAX_NPROBES, MAX_REFINE_FACTOR};
use crate::catalog::NamespaceName;
use crate::flight::distributed::LakeTable;

const VECTOR_SEARCH: &str = "vector_search";
const FTS: &str = "fts";
/// The most candidates (k × refine_factor) one search may ask Lance for.
pub(super) const MAX_CANDIDATES: usize = 100_000;
/// Distinct tables one statement's searches may name: each is resolved before planning.
const MAX_SEARCHES: usize = 16;

/// The tables, by the name as written, that a statement's searches read.
type Tables = HashMap<String, Arc<LakeTable>>;

/// Resolves the tables `statement` passes to `vector_search` / `fts` (a bare name in the
/// session's `chosen` schema) and registers both functions in `ctx` (a name no table resolves
/// to is then the function's error).
pub(in crate::flight) async fn register(
    ctx: &SessionContext,
    statement: &DFStatement,
    chosen: Option<&NamespaceName>,
) -> Result<(), Status> {
    let names = searched_tables(statement);
    if names.len() > MAX_SEARCHES {
        return Err(Status::invalid_argument(format!(
            "the statement's searches name {} tables; at most {MAX_SEARCHES}",
            names.len()
        )));
    }
    let mut tables = Tables::new();
    for name in names {
        let reference = TableReference::from(name.as_str());
        // The same checks as a table named in FROM: a schema, lake's catalog, valid names.
        crate::flight::sql::table_ref(&reference, chosen)?;
        // A table that does not exist is the function's NOT_FOUND; any other failure (the
        // store, the authority) is said as it is.
        let provider = match ctx.table_provider(reference).await {
            Ok(provider) => provider,
            Err(DataFusionError::Plan(_)) => continue,
            Err(e) => return Err(crate::flight::sql::status(e)),
        };
        let any: Arc<dyn std::any::Any + Send + Sync> = provider;
        if let Ok(table) = any.downcast::<LakeTable>() {
            tables.insert(name, table);
        }
    }
    let tables = Arc::new(tables);
    ctx.register_udtf(
        VECTOR_SEARCH,
        Arc::new(VectorSearch {
            tables: tables.clone(),
        }),
    );
    ctx.register_udtf(FTS, Arc::new(FullText { tables }));
    Ok(())
}

/// The first argument of every `vector_search(…)` / `fts(…)` in FROM, when a string.
fn searched_tables(statement: &DFStatement) -> Vec<String> {
    struct Finder(Vec<String>);
    impl Visitor for Finder {
        type Break = ();
        fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<()> {
            if let TableFactor::Table {
                name,
                args: Some(args),
                ..
            } = factor
                && name.0.last().and_then(|p| p.as_ident()).is_some_and(|f| {
                    f.value.eq_ignore_ascii_case(VECTOR_SEARCH) || f.value.eq_ignore_ascii_case(FTS)
                })
                && let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(
                    datafusion::sql::sqlparser::ast::Expr::Value(v),
                ))) = args.args.first()
                && let Value::SingleQuotedString(table) = &v.value
            {
                self.0.push(table.clone());
            }
            ControlFlow::Continue(())
        }
    }
    let mut finder = Finder(Vec::new());
    let statement = match statement {
        DFStatement::Statement(s) => s.as_ref(),
        DFStatement::Explain(e) => match e.statement.as_ref() {
            DFStatement::Statement(s) => s.as_ref(),
            _ => return Vec::new(),
        },
        _ => return Vec::new(),
    };
    let _ = statement.visit(&mut finder);
    finder.0.sort();
    finder.0.dedup();
    finder.0
}

#[derive(Debug)]
struct VectorSearch {
    tables: Arc<Tables>,
}

#[derive(Debug)]
struct FullText {
    tables: Arc<Tables>,
}

fn table<'a>(function: &str, tables: &'a Tables, args: &[Expr]) -> Result<&'a LakeTable> {
    let name = string(function, "the table (e.g. 's.t')", args.first())?;
    tables
        .get(&name)
        .map(AsRef::as_ref)
        .ok_or_else(|| DataFusionError::Plan(format!("{function}: table {name} not found")))
}

fn string(function: &str, what: &str, arg: Option<&Expr>) -> Result<String> {
    match arg {
        Some(Expr::Literal(ScalarValue::Utf8(Some(s)) | ScalarValue::Utf8View(Some(s)), _)) => {
            Ok(s.clone())
        }
        _ => plan_err!("{function}: {what} is a string literal"),
    }
}

/// The value of a constant argument (`[0.1, 0.2]` is a function call until evaluated).
fn constant(args: &TableFunctionArgs<'_, '_>, expr: &Expr) -> Result<ScalarValue> {
    // A table function is called while the statement is planned, before values are bound.
    let bound_later = expr
        .exists(|e| Ok(matches!(e, Expr::Placeholder(_))))
        .unwrap_or(true);
    if bound_later || expr.any_column_refs() {
        return plan_err!(
            "vector_search takes literal arguments (a prepared statement binds its values after \
             table functions are called): use ORDER BY <distance>(col, $1) LIMIT k"
        );
    }
    let physical = args
        .session()
        .create_physical_expr(expr.clone(), &DFSchema::empty())?;
    let one_row = RecordBatch::try_new_with_options(
        Arc::new(Schema::empty()),
        vec![],
        &RecordBatchOptions::new().with_row_count(Some(1)),
    )?;
    match physical.evaluate(&one_row)? {
        ColumnarValue::Scalar(s) => Ok(s),
        ColumnarValue::Array(a) => ScalarValue::try_from_array(&a, 0),
    }
}

impl TableFunctionImpl for VectorSearch {
    fn call_with_args(&self, args: TableFunctionArgs<'_, '_>) -> Result<Arc<dyn TableProvider>> {
        let exprs = args.exprs();
        if !(4..=5).contains(&exprs.len()) {
            return plan_err!(
                "vector_search takes ('<schema>.<table>', <vector>, '<column>', k [, '<options>'])"
            );
        }
        let table = table(VECTOR_SEARCH, &self.tables, exprs)?;
        let dataset = table.dataset();
        let column = string(VECTOR_SEARCH, "the column", exprs.get(2))?;
        let Some(field) = dataset.schema().field(&column) else {
            return plan_err!("vector_search: column {column:?} does not exist");
        };
        let (element, dimension) = match field.data_type() {
            DataType::FixedSizeList(item, n) if item.data_type().is_floating() => {
                (item.data_type().clone(), n)
            }
            other => {
                return plan_err!(
                    "vector_search: {column:?} is {other}, not a vector (a fixed-size list of floats)"
                );
            }
        };
        let vector = constant(&args, &exprs[1])?;
        let Some(query) = query_vector(&vector, &element, dimension) else {
            return plan_err!(
                "vector_search: the query vector must be {dimension} finite numbers (column {column:?})"
            );
        };
        let k = match constant(&args, &exprs[3])? {
            ScalarValue::Int64(Some(k)) => usize::try_from(k).ok(),
            _ => None,
        }
        .filter(|k| (1..=MAX_K).contains(k));
        let Some(k) = k else {
            return plan_err!("vector_search: k is a whole number from 1 to {MAX_K}");
        };
        let options = match exprs.get(4) {
            Some(e) => Options::parse(&string(VECTOR_SEARCH, "the options (JSON)", Some(e))?)?,
            None => Options::default(),
        };
        // Lance holds k × refine_factor candidates, vectors included, outside the statement's
        // memory pool.
        let refine = options.refine_factor.map_or(1, |r| r as usize);
        if k.saturating_mul(refine) > MAX_CANDIDATES {
            return plan_err!(
                "vector_search: k × refine_factor = {} is more than {MAX_CANDIDATES} candidates",
                k.saturating_mul(refine)
            );
        }
        let search = Search::Nearest {
            column,
            query,
            k,
            metric: options.metric,
            nprobes: options.nprobes,
            refine_factor: options.refine_factor,
            ef: options.ef,
        };
        Ok(Arc::new(ScoredTable::new(dataset, table.schema(), search)))
    }
}

/// The most queries one FTS query may combine, and what each may ask of Lance: fuzzy matching
/// beyond two edits, or thousands of expansions per term, makes one statement enumerate much of
/// the index's vocabulary.
const MAX_FTS_CLAUSES: usize = 64;
const MAX_FUZZINESS: u32 = 2;
const MAX_EXPANSIONS: usize = 1_000;
const MAX_SLOP: u32 = 100;

/// Refuses an FTS query beyond [`MAX_FTS_CLAUSES`] clauses or the per-clause bounds.
fn bounded_fts(query: &FtsQuery) -> std::result::Result<(), String> {
    fn walk(query: &FtsQuery, clauses: &mut usize) -> std::result::Result<(), String> {
        *clauses += 1;
        if *clauses > MAX_FTS_CLAUSES {
            return Err(format!("more than {MAX_FTS_CLAUSES} clauses"));
        }
        let one_match = |m: &MatchQuery| {
            if m.fuzziness.is_some_and(|f| f > MAX_FUZZINESS) {
                return Err(format!("fuzziness is at most {MAX_FUZZINESS}"));
            }
            if m.max_expansions > MAX_EXPANSIONS {
                return Err(format!("max_expansions is at most {MAX_EXPANSIONS}"));
            }
            Ok(())
        };
        match query {
            FtsQuery::Match(m) => one_match(m),
            FtsQuery::Phrase(p) if p.slop > MAX_SLOP => Err(format!("slop is at most {MAX_SLOP}")),
            FtsQuery::Phrase(_) | FtsQuery::CombinedFields(_) => Ok(()),
            FtsQuery::Boost(b) => {
                walk(&b.positive, clauses)?;
                walk(&b.negative, clauses)
            }
            FtsQuery::MultiMatch(m) => {
                *clauses += m.match_queries.len();
                if *clauses > MAX_FTS_CLAUSES {
                    return Err(format!("more than {MAX_FTS_CLAUSES} clauses"));
                }
                m.match_queries.iter().try_for_each(one_match)
            }
            FtsQuery::Boolean(b) => b
                .should
                .iter()
                .chain(&b.must)
                .chain(&b.must_not)
                .try_for_each(|q| walk(q, clauses)),
        }
    }
    walk(query, &mut 0)
}

impl TableFunctionImpl for FullText {
    fn call_with_args(&self, args: TableFunctionArgs<'_, '_>) -> Result<Arc<dyn TableProvider>> {
        let exprs = args.exprs();
        if exprs.len() != 2 {
            return plan_err!("fts takes ('<schema>.<table>', '<query>')");
        }
        let table = table(FTS, &self.tables, exprs)?;
        let text = string(FTS, "the query (Lance's FTS JSON, or words)", exprs.get(1))?;
        let query = if text.trim_start().starts_with('{') {
            let parsed = lance_index::scalar::inverted::parser::from_json(&text)
                .map_err(|e| DataFusionError::Plan(format!("fts: the query: {e}")))?;
            bounded_fts(&parsed)
                .map_err(|e| DataFusionError::Plan(format!("fts: the query: {e}")))?;
            FullTextSearchQuery::new_query(parsed)
        } else {
            FullTextSearchQuery::new(text)
        };
        Ok(Arc::new(ScoredTable::new(
            table.dataset(),
            table.schema(),
            Search::FullText(query),
        )))
    }
}

/// `vector_search`'s options: `{"metric": "l2|cosine|dot", "nprobes": n, "refine_factor": n,
/// "ef": n}`.
#[derive(Debug, Default)]
struct Options {
    metric: Option<DistanceType>,
    nprobes: Option<usize>,
    refine_factor: Option<u32>,
    ef: Option<usize>,
}

impl Options {
    fn parse(json: &str) -> Result<Self> {
        let bad = |what: String| DataFusionError::Plan(format!("vector_search options: {what}"));
        let value: serde_json::Value =
            serde_json::from_str(json).map_err(|e| bad(format!("not JSON: {e}")))?;
        let Some(object) = value.as_object() else {
            return Err(bad("a JSON object, e.g. {\"nprobes\": 20}".into()));
        };
        let mut options = Self::default();
        for (key, value) in object {
            let number = |max: u64| {
                value
                    .as_u64()
                    .filter(|n| (1..=max).contains(n))
                    .ok_or_else(|| bad(format!("{key} is a whole number from 1 to {max}")))
            };
            match key.as_str() {
                "metric" => {
                    options.metric = Some(match value.as_str() {
                        Some("l2") => DistanceType::L2,
                        Some("cosine") => DistanceType::Cosine,
                        Some("dot") => DistanceType::Dot,
                        _ => return Err(bad("metric is \"l2\", \"cosine\" or \"dot\"".into())),
                    });
                }
                // The bounds of the session settings of the same names.
                "nprobes" => options.nprobes = usize::try_from(number(MAX_NPROBES)?).ok(),
                "refine_factor" => {
                    options.refine_factor = u32::try_from(number(MAX_REFINE_FACTOR)?).ok()
                }
                "ef" => options.ef = usize::try_from(number(MAX_EF)?).ok(),
                other => return Err(bad(format!("unknown option {other:?}"))),
            }
        }
        Ok(options)
    }
}

#[cfg(test)]
mod fts_bounds {
    use super::*;

    fn parsed(json: &str) -> FtsQuery {
        lance_index::scalar::inverted::parser::from_json(json).unwrap()
    }

    #[test]
    fn an_fts_query_is_bounded() {
        assert!(bounded_fts(&parsed(r#"{"match": {"column": "t", "terms": "tea"}}"#)).is_ok());
        let fuzzy = r#"{"match": {"column": "t", "terms": "tea", "fuzziness": 9}}"#;
        assert!(
            bounded_fts(&parsed(fuzzy))
                .unwrap_err()
                .contains("fuzziness")
        );
        let expanding = r#"{"match": {"column": "t", "terms": "tea", "max_expansions": 100000}}"#;
        assert!(
            bounded_fts(&parsed(expanding))
                .unwrap_err()
                .contains("max_expansions")
        );
        let clause = r#"{"match": {"column": "t", "terms": "tea"}}"#;
        let many = format!(
            r#"{{"boolean": {{"should": [{}]}}}}"#,
            vec![clause; 100].join(",")
        );
        assert!(bounded_fts(&parsed(&many)).unwrap_err().contains("clauses"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_checked_by_name() {
        let o =
            Options::parse(r#"{"metric": "cosine", "nprobes": 8, "refine_factor": 5}"#).unwrap();
        assert_eq!(o.metric, Some(DistanceType::Cosine));
        assert_eq!((o.nprobes, o.refine_factor, o.ef), (Some(8), Some(5), None));
        for (json, says) in [
            ("[]", "JSON object"),
            ("{", "not JSON"),
            (r#"{"metric": "hamming"}"#, "metric is"),
            (r#"{"nprobes": 0}"#, "nprobes is a whole number"),
            (r#"{"ef": -1}"#, "ef is a whole number"),
            // The session settings' bounds: a search's work grows with each.
            (
                r#"{"nprobes": 1025}"#,
                "nprobes is a whole number from 1 to 1024",
            ),
            (r#"{"refine_factor": 101}"#, "from 1 to 100"),
            (r#"{"ef": 10001}"#, "from 1 to 10000"),
            (r#"{"nope": 1}"#, "unknown option \"nope\""),
        ] {
            let err = Options::parse(json).unwrap_err().to_string();
            assert!(err.contains(says), "{json}: {err}");
        }
    }

    #[test]
    fn the_searched_tables_are_found_in_from() {
        let statement = datafusion::sql::parser::DFParser::parse_sql(
            "EXPLAIN SELECT * FROM vector_search('s.a', [1.0], 'e', 3) v \
             JOIN fts('s.b', 'fish') f ON v.id = f.id JOIN s.c ON true",
        )
        .unwrap()
        .pop_front()
        .unwrap();
        assert_eq!(searched_tables(&statement), ["s.a", "s.b"]);
    }
}
