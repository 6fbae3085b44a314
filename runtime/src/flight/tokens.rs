//! A statement's tokens, read once: the depth check ([`super::depth`]) and the recognisers of
//! lake's own statements (COPY INTO, RESTORE TABLE, SHOW INDEXES) share them.

use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use tonic::Status;

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
