//! A statement's tokens, read once: the depth check ([`super::depth`]) and the recognisers of
//! lake's own statements (COPY INTO, RESTORE TABLE, SHOW INDEXES) share them, and the table
//! names those statements carry.

use datafusion::sql::TableReference;
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use tonic::Status;

use crate::catalog::NamespaceName;
use crate::engine::TableRef;

/// `sql`'s tokens without whitespace (comments included); INVALID_ARGUMENT if it does not
/// tokenize.
pub(super) fn significant(sql: &str) -> Result<Vec<Token>, Status> {
    let mut tokens = Tokenizer::new(&GenericDialect {}, sql)
        .tokenize()
        .map_err(|e| Status::invalid_argument(format!("SQL error: {e}")))?;
    tokens.retain(|t| !matches!(t, Token::Whitespace(_)));
    Ok(tokens)
}

/// Whether `token` is `keyword`, unquoted.
pub(super) fn is_keyword(token: Option<&Token>, keyword: Keyword) -> bool {
    matches!(token, Some(Token::Word(w)) if w.keyword == keyword && w.quote_style.is_none())
}

/// The table named next in `it` (`[lake.][<schema>.]<table>`, identifiers as in SQL: unquoted
/// ones are lower-cased), a bare name resolving in the session's `chosen` schema as it does in
/// any statement; INVALID_ARGUMENT from `invalid` when no name follows.
pub(super) fn table_ref<'a>(
    it: &mut std::iter::Peekable<impl Iterator<Item = &'a Token>>,
    what: &str,
    chosen: Option<&NamespaceName>,
    invalid: fn(&str) -> Status,
) -> Result<TableRef, Status> {
    let mut parts = Vec::new();
    loop {
        match it.next() {
            Some(word @ Token::Word(_)) => parts.push(word.to_string()),
            _ => return Err(invalid(&format!("{what} needs a table name"))),
        }
        if parts.len() == 3 || it.peek() != Some(&&Token::Period) {
            break;
        }
        it.next();
    }
    // The same parsing and resolution as a table named in SELECT or INSERT.
    crate::flight::sql::table_ref(&TableReference::from(parts.join(".").as_str()), chosen)
}
