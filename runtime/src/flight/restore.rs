//! `RESTORE TABLE [<schema>.]<table> TO VERSION <n>` and `… TO TIMESTAMP '<time>'`: one new
//! commit whose content is that version's (docs/guides/recovery.md).
//!
//! Not SQL DataFusion knows, so recognised from the token stream before DataFusion sees it, as
//! `COPY INTO` is.

use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::Token;
use tonic::Status;

use super::tokens::{is_keyword, table_ref};
use crate::catalog::NamespaceName;
use crate::engine::{RestoreTarget, TableRef};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Restore {
    pub table: TableRef,
    pub to: RestoreTarget,
}

const USAGE: &str = "RESTORE TABLE [<schema>.]<table> TO VERSION <n> | TO TIMESTAMP '<time>'";

fn invalid(detail: &str) -> Status {
    Status::invalid_argument(format!("{detail}; the syntax is {USAGE}"))
}

/// `None` when `tokens` (a statement's, without whitespace) are not a `RESTORE TABLE`;
/// otherwise the statement, or INVALID_ARGUMENT naming what is wrong with it.
pub(super) fn parse(
    tokens: &[Token],
    chosen: Option<&NamespaceName>,
) -> Option<Result<Restore, Status>> {
    let mut it = tokens.iter().peekable();
    let restore = matches!(it.next(), Some(Token::Word(w))
        if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("RESTORE"));
    if !(restore && is_keyword(it.peek().copied(), Keyword::TABLE)) {
        return None;
    }
    it.next();
    Some(parse_rest(&mut it, chosen))
}

fn parse_rest<'a>(
    it: &mut std::iter::Peekable<impl Iterator<Item = &'a Token>>,
    chosen: Option<&NamespaceName>,
) -> Result<Restore, Status> {
    let table = table_ref(it, "RESTORE TABLE", chosen, invalid)?;
    if !is_keyword(it.next(), Keyword::TO) {
        return Err(invalid("expected TO after the table"));
    }
    let to = match it.next() {
        Some(t) if is_keyword(Some(t), Keyword::VERSION) => match it.next() {
            Some(Token::Number(n, _)) => RestoreTarget::Version(
                n.parse()
                    .map_err(|_| invalid(&format!("VERSION {n} is not a version number")))?,
            ),
            _ => return Err(invalid("VERSION takes a version number")),
        },
        Some(t) if is_keyword(Some(t), Keyword::TIMESTAMP) => match it.next() {
            Some(Token::SingleQuotedString(time)) => {
                let nanos = arrow::compute::kernels::cast_utils::string_to_timestamp_nanos(time)
                    .map_err(|_| {
                        invalid(&format!(
                            "TIMESTAMP '{time}' is not a time: write e.g. \
                                 '2026-12-03T10:15:00Z' (UTC unless it names an offset)"
                        ))
                    })?;
                RestoreTarget::Timestamp { nanos }
            }
            _ => return Err(invalid("TIMESTAMP takes a quoted time")),
        },
        _ => return Err(invalid("expected VERSION or TIMESTAMP after TO")),
    };
    if it.peek() == Some(&&Token::SemiColon) {
        it.next();
    }
    if let Some(extra) = it.next() {
        return Err(invalid(&format!("unexpected {extra} at the end")));
    }
    Ok(Restore { table, to })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(sql: &str, chosen: Option<&NamespaceName>) -> Option<Result<Restore, Status>> {
        super::parse(&crate::flight::tokens::significant(sql).unwrap(), chosen)
    }

    fn ok(sql: &str) -> Restore {
        parse(sql, None).expect("a RESTORE").expect("valid")
    }

    fn err(sql: &str) -> String {
        parse(sql, None)
            .expect("a RESTORE")
            .unwrap_err()
            .message()
            .to_owned()
    }

    #[test]
    fn restore_statements_parse() {
        let r = ok("restore table sales.orders to version 3");
        assert_eq!(r.table.to_string(), "sales.orders");
        assert_eq!(r.to, RestoreTarget::Version(3));
        let r = ok("RESTORE TABLE sales.orders TO TIMESTAMP '2026-12-03T10:15:00Z';");
        assert_eq!(
            r.to,
            RestoreTarget::Timestamp {
                nanos: 1_796_292_900_000_000_000
            }
        );
        // Without an offset: UTC.
        assert_eq!(
            ok("RESTORE TABLE s.t TO TIMESTAMP '2026-12-03 10:15:00'").to,
            r.to
        );
    }

    #[test]
    fn other_statements_are_not_restore() {
        assert!(parse("SELECT 1", None).is_none());
        assert!(parse("RESTORE sales.orders", None).is_none());
        assert!(parse("\"RESTORE\" TABLE s.t TO VERSION 1", None).is_none());
    }

    #[test]
    fn bad_restore_names_the_problem() {
        assert!(err("RESTORE TABLE orders TO VERSION 1").contains("needs a schema"));
        assert!(err("RESTORE TABLE s.t VERSION 1").contains("expected TO"));
        assert!(err("RESTORE TABLE s.t TO VERSION x").contains("version number"));
        assert!(err("RESTORE TABLE s.t TO VERSION -1").contains("version number"));
        assert!(err("RESTORE TABLE s.t TO VERSION 99999999999999999999").contains("not a version"));
        assert!(err("RESTORE TABLE s.t TO TIMESTAMP 'yesterday'").contains("not a time"));
        assert!(err("RESTORE TABLE s.t TO 3").contains("VERSION or TIMESTAMP"));
        assert!(err("RESTORE TABLE s.t TO VERSION 1 AND MORE").contains("unexpected"));
    }
}
