//! `COPY INTO [<schema>.]<table> FROM '<stage path>' [FILE_FORMAT = PARQUET|CSV|ARROW]`.
//!
//! DataFusion's parser knows only `COPY … TO`, so this statement is recognised from the token
//! stream before DataFusion sees the SQL. The path is a stage path (a file, or a folder whose
//! files are all loaded); the format defaults to the file extension.

use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::Token;
use lake_common::stage::StagePath;
use tonic::Status;

use super::tokens::{is_keyword, table_ref};
use crate::catalog::NamespaceName;
use crate::engine::TableRef;
use crate::stage::FileFormat;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct CopyInto {
    pub table: TableRef,
    pub path: StagePath,
    pub format: Option<FileFormat>,
}

const USAGE: &str =
    "COPY INTO [<schema>.]<table> FROM '<stage path>' [FILE_FORMAT = PARQUET|CSV|ARROW]";

/// `None` when `tokens` (a statement's, without whitespace) are not a `COPY INTO`; otherwise
/// the statement, or INVALID_ARGUMENT naming what is wrong with it.
pub(super) fn parse(
    tokens: &[Token],
    chosen: Option<&NamespaceName>,
) -> Option<Result<CopyInto, Status>> {
    let mut it = tokens.iter().peekable();
    if !(is_keyword(it.next(), Keyword::COPY) && is_keyword(it.peek().copied(), Keyword::INTO)) {
        return None;
    }
    it.next();
    Some(parse_rest(&mut it, chosen))
}

fn invalid(detail: &str) -> Status {
    Status::invalid_argument(format!("{detail}; the syntax is {USAGE}"))
}

fn parse_rest<'a>(
    it: &mut std::iter::Peekable<impl Iterator<Item = &'a Token>>,
    chosen: Option<&NamespaceName>,
) -> Result<CopyInto, Status> {
    let table = table_ref(it, "COPY INTO", chosen, invalid)?;
    if !is_keyword(it.next(), Keyword::FROM) {
        return Err(invalid("expected FROM after the table"));
    }
    let path = match it.next() {
        // A file, or a folder (a trailing `/` is fine).
        Some(Token::SingleQuotedString(p)) => StagePath::parse_prefix(p)
            .map_err(|e| Status::invalid_argument(e.to_string()))?
            .ok_or_else(|| invalid("FROM needs a stage path, not ''"))?,
        _ => return Err(invalid("FROM takes a quoted stage path")),
    };
    let mut format = None;
    if let Some(Token::Word(w)) = it.peek()
        && w.quote_style.is_none()
        && (w.value.eq_ignore_ascii_case("FILE_FORMAT") || w.keyword == Keyword::FORMAT)
    {
        it.next();
        if it.peek() == Some(&&Token::Eq) {
            it.next();
        }
        let name = match it.next() {
            Some(Token::Word(w)) => w.value.clone(),
            Some(Token::SingleQuotedString(s)) => s.clone(),
            _ => return Err(invalid("FILE_FORMAT needs PARQUET, CSV or ARROW")),
        };
        format = Some(
            name.parse()
                .map_err(|e: String| Status::invalid_argument(e))?,
        );
    }
    if it.peek() == Some(&&Token::SemiColon) {
        it.next();
    }
    if let Some(extra) = it.next() {
        return Err(invalid(&format!("unexpected {extra} at the end")));
    }
    Ok(CopyInto {
        table,
        path,
        format,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(sql: &str, chosen: Option<&NamespaceName>) -> Option<Result<CopyInto, Status>> {
        super::parse(&crate::flight::tokens::significant(sql).unwrap(), chosen)
    }

    fn ok(sql: &str) -> CopyInto {
        parse(sql, None).expect("a COPY INTO").expect("valid")
    }

    fn err(sql: &str) -> String {
        parse(sql, None)
            .expect("a COPY INTO")
            .unwrap_err()
            .message()
            .to_owned()
    }

    #[test]
    fn copy_into_statements_parse() {
        let c = ok("copy into sales.orders from 'in/orders.parquet'");
        assert_eq!(c.table.to_string(), "sales.orders");
        assert_eq!(c.path.as_str(), "in/orders.parquet");
        assert_eq!(c.format, None);
        let c = ok("COPY INTO sales.orders FROM 'in/' FILE_FORMAT = CSV;");
        assert_eq!(c.path.as_str(), "in");
        assert_eq!(c.format, Some(FileFormat::Csv));
        assert_eq!(
            ok("COPY INTO sales.orders FROM 'x' FORMAT 'arrow'").format,
            Some(FileFormat::Arrow)
        );
    }

    #[test]
    fn other_statements_are_not_copy_into() {
        assert!(parse("SELECT 1", None).is_none());
        assert!(parse("COPY sales.orders TO 'x.parquet'", None).is_none());
    }

    #[test]
    fn the_table_is_named_as_in_any_statement() {
        let chosen = NamespaceName::parse("sales").unwrap();
        let in_session = |sql: &str| parse(sql, Some(&chosen)).expect("a COPY INTO");
        let bare = in_session("COPY INTO orders FROM 'x'").expect("valid");
        assert_eq!(bare.table.to_string(), "sales.orders");
        let own = in_session("COPY INTO other.orders FROM 'x'").expect("valid");
        assert_eq!(own.table.to_string(), "other.orders");
        assert_eq!(
            ok("COPY INTO lake.Sales.\"orders\" FROM 'x'")
                .table
                .to_string(),
            "sales.orders"
        );
        let elsewhere = in_session("COPY INTO hive.sales.orders FROM 'x'").unwrap_err();
        assert_eq!(elsewhere.code(), tonic::Code::NotFound, "{elsewhere}");
        assert!(err("COPY INTO lake.b.c.d FROM 'x'").contains("expected FROM"));
        assert!(err("COPY INTO 'x' FROM 'y'").contains("needs a table name"));
    }

    #[test]
    fn bad_copy_into_names_the_problem() {
        assert!(err("COPY INTO orders FROM 'x'").contains("needs a schema"));
        assert!(
            err("COPY INTO sales.orders FROM '../etc/passwd'").contains("would leave the stage")
        );
        assert!(err("COPY INTO sales.orders FROM '/abs'").contains("absolute"));
        assert!(err("COPY INTO sales.orders FROM x").contains("quoted stage path"));
        assert!(
            err("COPY INTO sales.orders FROM 'x' FILE_FORMAT = XML")
                .contains("unknown file format")
        );
        assert!(err("COPY INTO sales.orders FROM 'x' WHERE 1").contains("unexpected"));
    }
}
