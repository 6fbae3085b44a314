//! How deep a statement's expressions nest, measured on its tokens before anything parses or
//! plans it. `1+1+…+1` parses into a left-deep tree as deep as it is long, and DataFusion walks
//! such trees recursively in places its `recursive_protection` does not cover (rendering an
//! expression's column name, derived clones and drops): 300 terms overflowed a worker's stack
//! and aborted the process. The scan is iterative; the limit leaves a wide margin on the
//! runtime's worker stacks (see `main.rs`).

use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use tonic::Status;

/// The deepest expression accepted: operators chained in one expression plus parentheses.
pub(super) const MAX_EXPRESSION_DEPTH: usize = 2_000;

/// One parenthesis level: the operators of the current comma-separated item and the deepest
/// nested level inside it.
#[derive(Default)]
struct Level {
    operators: usize,
    nested: usize,
    deepest: usize,
}

impl Level {
    fn close_item(&mut self) {
        self.deepest = self.deepest.max(self.operators + self.nested);
        self.operators = 0;
        self.nested = 0;
    }
}

/// A token that joins two expressions into one deeper one: every operator-like punctuation
/// (sqlparser builds chains of them in a loop, not by recursion, so its recursion limit does
/// not see them) and the keywords of binary and postfix predicates (`IS NULL IS NULL …`).
fn is_operator(token: &Token) -> bool {
    match token {
        Token::Word(w) => matches!(
            w.keyword,
            Keyword::AND
                | Keyword::OR
                | Keyword::XOR
                | Keyword::NOT
                | Keyword::IS
                | Keyword::IN
                | Keyword::LIKE
                | Keyword::ILIKE
                | Keyword::SIMILAR
                | Keyword::BETWEEN
                | Keyword::COLLATE
                | Keyword::AT
                | Keyword::OVERLAPS
                | Keyword::REGEXP
                | Keyword::RLIKE
                | Keyword::ESCAPE
        ),
        // Subscripts chain (`a[1][1]…`): each `[` is a level of the chain, as well as a nest.
        Token::LBracket => true,
        Token::EOF
        | Token::Number(..)
        | Token::Char(_)
        | Token::Comma
        | Token::Whitespace(_)
        | Token::LParen
        | Token::RParen
        | Token::RBracket
        | Token::Period
        | Token::SemiColon
        | Token::Placeholder(_)
        | Token::LBrace
        | Token::RBrace => false,
        // Every string literal form is an operand.
        t if is_literal(t) => false,
        _ => true,
    }
}

fn is_literal(token: &Token) -> bool {
    matches!(
        token,
        Token::SingleQuotedString(_)
            | Token::DoubleQuotedString(_)
            | Token::TripleSingleQuotedString(_)
            | Token::TripleDoubleQuotedString(_)
            | Token::DollarQuotedString(_)
            | Token::SingleQuotedByteStringLiteral(_)
            | Token::DoubleQuotedByteStringLiteral(_)
            | Token::TripleSingleQuotedByteStringLiteral(_)
            | Token::TripleDoubleQuotedByteStringLiteral(_)
            | Token::SingleQuotedRawStringLiteral(_)
            | Token::DoubleQuotedRawStringLiteral(_)
            | Token::TripleSingleQuotedRawStringLiteral(_)
            | Token::TripleDoubleQuotedRawStringLiteral(_)
            | Token::NationalStringLiteral(_)
            | Token::EscapedStringLiteral(_)
            | Token::UnicodeStringLiteral(_)
            | Token::HexStringLiteral(_)
    ) || matches!(
        token,
        Token::QuoteDelimitedStringLiteral(..) | Token::NationalQuoteDelimitedStringLiteral(..)
    )
}

fn keyword(token: &Token, k: Keyword) -> bool {
    matches!(token, Token::Word(w) if w.keyword == k)
}

/// Where one list item or clause ends and the next begins: not part of an operator chain.
/// (`CASE … END` is a nesting level, not a separator: `CASE … END + CASE … END + …` chains.)
fn is_separator(token: &Token) -> bool {
    match token {
        Token::Comma | Token::SemiColon => true,
        Token::Word(w) => matches!(
            w.keyword,
            Keyword::SELECT
                | Keyword::FROM
                | Keyword::WHERE
                | Keyword::GROUP
                | Keyword::ORDER
                | Keyword::HAVING
                | Keyword::WHEN
                | Keyword::THEN
                | Keyword::ELSE
                | Keyword::ON
                | Keyword::JOIN
                | Keyword::LIMIT
                | Keyword::UNION
                | Keyword::VALUES
        ),
        _ => false,
    }
}

/// The nesting depth of `sql`'s expressions (an upper bound on their trees' depth).
pub(super) fn depth(sql: &str) -> Result<usize, Status> {
    let tokens = Tokenizer::new(&GenericDialect {}, sql)
        .tokenize()
        .map_err(|e| Status::invalid_argument(format!("SQL error: {e}")))?;
    let mut stack = vec![Level::default()];
    for token in &tokens {
        if matches!(token, Token::LBracket)
            && let Some(level) = stack.last_mut()
        {
            level.operators += 1;
        }
        match token {
            Token::LParen | Token::LBracket => stack.push(Level::default()),
            t if keyword(t, Keyword::CASE) => stack.push(Level::default()),
            t if (matches!(t, Token::RParen | Token::RBracket) || keyword(t, Keyword::END))
                && stack.len() > 1 =>
            {
                if let Some(mut inner) = stack.pop() {
                    inner.close_item();
                    if let Some(outer) = stack.last_mut() {
                        outer.nested = outer.nested.max(inner.deepest + 1);
                    }
                }
            }
            t if is_separator(t) => {
                if let Some(level) = stack.last_mut() {
                    level.close_item();
                }
            }
            t if is_operator(t) => {
                if let Some(level) = stack.last_mut() {
                    level.operators += 1;
                }
            }
            _ => {}
        }
    }
    // Unbalanced input: close what is open (the parser reports the error itself).
    let mut deepest = 0;
    while let Some(mut level) = stack.pop() {
        level.close_item();
        deepest = deepest.max(level.deepest);
        if let Some(outer) = stack.last_mut() {
            outer.nested = outer.nested.max(deepest + 1);
        }
    }
    Ok(deepest)
}

/// Refuses `sql` whose expressions nest deeper than [`MAX_EXPRESSION_DEPTH`].
pub(super) fn check(sql: &str) -> Result<(), Status> {
    let depth = depth(sql)?;
    if depth > MAX_EXPRESSION_DEPTH {
        return Err(Status::invalid_argument(format!(
            "the statement's expressions nest {depth} deep; at most {MAX_EXPRESSION_DEPTH} are \
             accepted (split the expression, or use IN (…) for long lists of alternatives)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_follows_chains_and_parentheses_not_widths() {
        let chain = |n: usize| format!("SELECT {}", vec!["1"; n].join("+"));
        let cases: Vec<(String, usize)> = vec![
            ("SELECT 1".into(), 0),
            (chain(10), 9),
            (
                "SELECT a + b, c + d + e FROM t WHERE x = 1 AND y = 2".into(),
                3,
            ),
            ("SELECT ((1 + 2) * 3)".into(), 4),
            (format!("SELECT x IN ({})", vec!["1"; 5000].join(", ")), 2),
            (
                "SELECT CASE WHEN a = 1 THEN 'x' WHEN a = 2 THEN 'y' ELSE 'z' END".into(),
                2,
            ),
            (format!("SELECT {}1{}", "(".repeat(30), ")".repeat(30)), 30),
            ("SELECT (1 + (2 + (3 + 4)))".into(), 6),
            ("SELECT (1 + 2".into(), 2),
        ];
        for (sql, want) in cases {
            assert_eq!(depth(&sql).unwrap(), want, "{}", &sql[..sql.len().min(60)]);
        }
    }

    #[test]
    fn chains_without_listed_operators_are_counted() {
        let n = 5_000;
        for sql in [
            format!("SELECT 1{}", " IS NULL".repeat(n)),
            format!("SELECT x{}", " IN (1)".repeat(n)),
            format!("SELECT a{}", "[1]".repeat(n)),
            format!(
                "SELECT {}",
                vec!["CASE WHEN true THEN 1 END"; n].join(" + ")
            ),
            format!("SELECT 'a'{}", " ~ 'b'".repeat(n)),
        ] {
            let d = depth(&sql).unwrap();
            assert!(d >= n, "{} counted {d}", &sql[..40]);
            assert!(check(&sql).is_err());
        }
    }

    #[test]
    fn deep_statements_are_refused_with_invalid_argument() {
        let deep = format!("SELECT {}", vec!["1"; 100_000].join("+"));
        let e = check(&deep).unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.message().contains("2000"), "{e}");
        let ok = format!("SELECT {}", vec!["1"; MAX_EXPRESSION_DEPTH + 1].join("+"));
        assert!(check(&ok).is_ok());
        assert!(check("SELECT 'unterminated").is_err());
    }
}
