//! How deep a statement's expressions nest, measured on its tokens before anything parses or
//! plans it. `1+1+…+1` parses into a left-deep tree as deep as it is long, and DataFusion walks
//! such trees recursively in places its `recursive_protection` does not cover (rendering an
//! expression's column name, derived clones and drops): 300 terms overflowed a worker's stack
//! and aborted the process. The scan is iterative; the limit leaves a wide margin on the
//! runtime's worker stacks (see `main.rs`).

use std::collections::HashMap;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::expr::{Exists, InSubquery, SetComparison};
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::Token;
use tonic::Status;

/// The deepest expression accepted: operators chained in one expression plus parentheses.
pub(super) const MAX_EXPRESSION_DEPTH: usize = 2_000;

/// The most relations one query chains: `UNION`s, `INTERSECT`s, `EXCEPT`s, `JOIN`s, tables
/// listed in a `FROM`, queries of a `WITH` list and nested queries. Each is a level of a
/// left-deep plan that DataFusion plans, optimizes and runs recursively, with much larger frames
/// than an expression's.
pub(super) const MAX_RELATION_CHAIN: usize = 500;

/// The most nodes a plan may have once every shared input is copied: a `WITH` query referenced
/// twice by the next, forty times over, is one plan of 2^40 nodes to the analyzer, which copies
/// shared inputs as it rewrites them.
pub(super) const MAX_PLAN_NODES: usize = 20_000;

/// One parenthesis level: the operators of the current comma-separated item and the deepest
/// nested level inside it; the relations chained at this level and the deepest nesting of the
/// whole level.
#[derive(Default)]
struct Level {
    operators: usize,
    nested: usize,
    deepest: usize,
    /// Relations chained at this level (not reset between list items).
    relations: usize,
    /// Inside a `FROM` list, where a comma joins one more relation.
    in_from: bool,
    /// The deepest chain of relations in a nested level.
    relation_depth: usize,
    /// The level is a query (a nested one is one more level of the plan).
    query: bool,
    /// Inside a `WITH` list, where a comma defines one more query the next may build on.
    in_with: bool,
}

impl Level {
    fn close_item(&mut self) {
        self.deepest = self.deepest.max(self.operators + self.nested);
        self.operators = 0;
        self.nested = 0;
    }

    /// Closes the level: the depth of its expressions, and of the relations it and its nested
    /// levels chain (each nested query is one level deeper in the plan).
    fn finish(&mut self) -> (usize, usize) {
        self.close_item();
        (self.deepest, self.relations + self.relation_depth)
    }
}

/// Keywords that chain one more relation onto a query.
fn chains_a_relation(token: &Token) -> bool {
    matches!(token, Token::Word(w) if matches!(
        w.keyword,
        Keyword::UNION | Keyword::INTERSECT | Keyword::EXCEPT | Keyword::MINUS | Keyword::JOIN
    ))
}

/// Keywords that end a `FROM` list.
fn ends_a_from_list(token: &Token) -> bool {
    matches!(token, Token::Word(w) if matches!(
        w.keyword,
        Keyword::WHERE
            | Keyword::GROUP
            | Keyword::HAVING
            | Keyword::ORDER
            | Keyword::LIMIT
            | Keyword::UNION
            | Keyword::INTERSECT
            | Keyword::EXCEPT
            | Keyword::SELECT
            | Keyword::WINDOW
            | Keyword::QUALIFY
    ))
}

/// How deep a statement nests: its expressions, and the relations its queries chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Depth {
    pub(super) expression: usize,
    pub(super) relations: usize,
    /// The plan steps its `WITH` queries make once each use is a copy (see [`cte_copies`]).
    pub(super) copies: u64,
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

/// How deep a statement of `tokens` nests (upper bounds on its trees' depths).
fn measure(tokens: &[Token]) -> Depth {
    let mut stack = vec![Level::default()];
    for token in tokens {
        if matches!(token, Token::LBracket)
            && let Some(level) = stack.last_mut()
        {
            level.operators += 1;
        }
        if let Some(level) = stack.last_mut() {
            if chains_a_relation(token) || (level.in_from && matches!(token, Token::Comma)) {
                level.relations += 1;
            }
            if level.in_with && matches!(token, Token::Comma) {
                level.relations += 1;
            }
            if keyword(token, Keyword::FROM) {
                level.in_from = true;
            } else if ends_a_from_list(token) {
                level.in_from = false;
            }
            if keyword(token, Keyword::WITH) {
                level.in_with = true;
                level.relations += 1;
            } else if keyword(token, Keyword::SELECT) {
                level.in_with = false;
                level.query = true;
            }
        }
        match token {
            Token::LParen | Token::LBracket => stack.push(Level::default()),
            t if keyword(t, Keyword::CASE) => stack.push(Level::default()),
            t if (matches!(t, Token::RParen | Token::RBracket) || keyword(t, Keyword::END))
                && stack.len() > 1 =>
            {
                if let Some(mut inner) = stack.pop() {
                    let (deepest, relations) = inner.finish();
                    if let Some(outer) = stack.last_mut() {
                        outer.nested = outer.nested.max(deepest + 1);
                        outer.relation_depth = outer
                            .relation_depth
                            .max(relations + usize::from(inner.query));
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
    let (mut deepest, mut relations) = (0, 0);
    while let Some(mut level) = stack.pop() {
        let query = level.query;
        let (d, r) = level.finish();
        deepest = deepest.max(d);
        relations = relations.max(r + usize::from(query && !stack.is_empty()));
        if let Some(outer) = stack.last_mut() {
            outer.nested = outer.nested.max(deepest + 1);
            outer.relation_depth = outer.relation_depth.max(relations);
        }
    }
    Depth {
        expression: deepest,
        relations,
        copies: cte_copies(tokens),
    }
}

/// An upper bound on the plan steps a statement's `WITH` queries make when each use of one is a
/// copy of its plan — as DataFusion's SQL planner makes them (it rewrites every referenced
/// query's plan, copying what it shares): `a{i+1} AS (SELECT … FROM a{i} UNION ALL SELECT …
/// FROM a{i})`, forty times, is 2^40 steps planned before any plan exists to count. Each query
/// of a `WITH` list counts one plus the copies of the queries it names; the largest count wins.
/// Any word spelled like a query's name counts as a use (an upper bound).
fn cte_copies(tokens: &[Token]) -> u64 {
    let word = |t: &Token| match t {
        Token::Word(w) => Some(w.value.to_lowercase()),
        _ => None,
    };
    let mut sizes: HashMap<String, u64> = HashMap::new();
    // The bodies being read: (name, parenthesis depth inside them, copies so far).
    let mut open: Vec<(String, usize, u64)> = Vec::new();
    // Parenthesis depths of the WITH lists being read.
    let mut lists: Vec<usize> = Vec::new();
    let (mut depth, mut main, mut largest) = (0usize, 1u64, 0u64);
    let mut name: Option<String> = None;
    let (mut expect_name, mut body_next) = (false, false);
    for (i, token) in tokens.iter().enumerate() {
        match token {
            t if keyword(t, Keyword::WITH) => {
                lists.push(depth);
                expect_name = true;
            }
            t if keyword(t, Keyword::RECURSIVE) && expect_name => {}
            Token::Word(_) if expect_name => {
                name = word(token);
                expect_name = false;
            }
            t if keyword(t, Keyword::AS) && name.is_some() => {
                // `AS [NOT] [MATERIALIZED] (`: the body follows.
                body_next = tokens[i + 1..]
                    .iter()
                    .find(|t| !keyword(t, Keyword::NOT) && !keyword(t, Keyword::MATERIALIZED))
                    .is_some_and(|t| matches!(t, Token::LParen));
            }
            Token::LParen => {
                depth += 1;
                if body_next {
                    body_next = false;
                    if let Some(n) = name.take() {
                        open.push((n, depth, 1));
                    }
                }
            }
            Token::RParen => {
                if open.last().is_some_and(|(_, d, _)| *d == depth)
                    && let Some((n, _, size)) = open.pop()
                {
                    largest = largest.max(size);
                    sizes.insert(n, size);
                }
                depth = depth.saturating_sub(1);
            }
            Token::Comma if lists.last() == Some(&depth) => expect_name = true,
            t if keyword(t, Keyword::SELECT) && lists.last() == Some(&depth) => {
                lists.pop();
            }
            _ => {
                if let Some(size) = word(token).and_then(|w| sizes.get(&w).copied()) {
                    match open.last_mut() {
                        Some((_, _, copies)) => *copies = copies.saturating_add(size),
                        None => main = main.saturating_add(size),
                    }
                }
            }
        }
    }
    largest.max(main)
}

/// Refuses a plan of more than [`MAX_PLAN_NODES`] nodes, counting a shared input (a `WITH`
/// query, a subquery) once per use. Runs on the planner's output, before the analyzer copies
/// anything; its recursion is as deep as the plan, which [`check`] bounded.
pub(super) fn check_plan(plan: &LogicalPlan) -> Result<(), Status> {
    fn nodes(plan: &LogicalPlan, seen: &mut HashMap<usize, usize>) -> usize {
        let at = std::ptr::from_ref(plan) as usize;
        if let Some(n) = seen.get(&at) {
            return *n;
        }
        let mut n: usize = 1;
        for input in plan.inputs() {
            n = n.saturating_add(nodes(input, seen));
            if n > MAX_PLAN_NODES {
                break;
            }
        }
        // Subqueries in expressions (their plans are shared like inputs).
        let _ = plan.apply_expressions(|e| {
            e.apply(|e| {
                if let Expr::Exists(Exists { subquery, .. })
                | Expr::InSubquery(InSubquery { subquery, .. })
                | Expr::SetComparison(SetComparison { subquery, .. })
                | Expr::ScalarSubquery(subquery) = e
                {
                    n = n.saturating_add(nodes(&subquery.subquery, seen));
                }
                Ok(if n > MAX_PLAN_NODES {
                    TreeNodeRecursion::Stop
                } else {
                    TreeNodeRecursion::Continue
                })
            })
        });
        seen.insert(at, n);
        n
    }
    let n = nodes(plan, &mut HashMap::new());
    if n > MAX_PLAN_NODES {
        return Err(too_many_steps());
    }
    Ok(())
}

fn too_many_steps() -> Status {
    Status::invalid_argument(format!(
        "the statement plans into more than {MAX_PLAN_NODES} steps once its shared queries \
         (WITH, subqueries) are counted at each use; split it into several statements"
    ))
}

/// Refuses a statement of `tokens` whose expressions nest deeper than
/// [`MAX_EXPRESSION_DEPTH`], or whose queries chain more than [`MAX_RELATION_CHAIN`] relations.
pub(super) fn check(tokens: &[Token]) -> Result<(), Status> {
    let Depth {
        expression,
        relations,
        copies,
    } = measure(tokens);
    if copies > MAX_PLAN_NODES as u64 {
        return Err(too_many_steps());
    }
    if expression > MAX_EXPRESSION_DEPTH {
        return Err(Status::invalid_argument(format!(
            "the statement's expressions nest {expression} deep; at most {MAX_EXPRESSION_DEPTH} \
             are accepted (split the expression, or use IN (…) for long lists of alternatives)"
        )));
    }
    if relations > MAX_RELATION_CHAIN {
        return Err(Status::invalid_argument(format!(
            "the statement chains {relations} relations (UNION, INTERSECT, EXCEPT, JOIN, FROM \
             lists); at most {MAX_RELATION_CHAIN} are accepted (split it into several \
             statements)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measure(sql: &str) -> Result<Depth, Status> {
        Ok(super::measure(&crate::flight::tokens::significant(sql)?))
    }

    /// What the statement `sql` passes through: its tokens, then the depth check.
    fn check(sql: &str) -> Result<(), Status> {
        super::check(&crate::flight::tokens::significant(sql)?)
    }

    /// The nesting depth of `sql`'s expressions (an upper bound on their trees' depth).
    fn depth(sql: &str) -> Result<usize, Status> {
        Ok(measure(sql)?.expression)
    }

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
    fn with_queries_count_a_copy_per_use() {
        let doubling = |n: usize| {
            format!(
                "WITH a0 AS (SELECT 1 AS x){} SELECT count(*) FROM a{n}",
                (1..=n)
                    .map(|i| format!(
                        ", a{i} AS (SELECT x FROM a{p} UNION ALL SELECT x FROM a{p})",
                        p = i - 1
                    ))
                    .collect::<String>()
            )
        };
        assert_eq!(measure(&doubling(3)).unwrap().copies, 16);
        assert!(check(&doubling(10)).is_ok());
        let e = check(&doubling(40)).unwrap_err();
        assert!(e.message().contains("steps"), "{e}");
        // Column lists, MATERIALIZED, nested WITH and a plain query.
        let sql = "WITH a(x) AS MATERIALIZED (SELECT 1), b AS (WITH c AS (SELECT * FROM a) \
                   SELECT * FROM c, c) SELECT * FROM b JOIN a ON true";
        // a = 1, c = 1 + a = 2, b = 1 + 2c = 5, main = 1 + b + a = 7.
        assert_eq!(measure(sql).unwrap().copies, 7);
        assert_eq!(measure("SELECT 1").unwrap().copies, 1);
    }

    #[test]
    fn chains_of_relations_are_counted() {
        let n = 2_000;
        let unions = vec!["SELECT 1"; n].join(" UNION ALL ");
        let joins = format!(
            "SELECT * FROM t0{}",
            (1..n)
                .map(|i| format!(" JOIN t{i} ON true"))
                .collect::<String>()
        );
        let commas = format!(
            "SELECT * FROM {}",
            (0..n)
                .map(|i| format!("t{i}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let nested = format!("{}SELECT 1{}", "(SELECT 1 UNION ".repeat(n), ")".repeat(n));
        // Queries of a WITH list each built on the one before, and derived tables in derived
        // tables: nothing chained at any one level, as deep a plan as they are many.
        let with = format!(
            "WITH a0 AS (SELECT 1 AS x){} SELECT * FROM a{}",
            (1..n)
                .map(|i| format!(", a{i} AS (SELECT x FROM a{})", i - 1))
                .collect::<String>(),
            n - 1
        );
        // (Half as many: as deep in parentheses, within the expression limit.)
        let derived = format!(
            "SELECT * FROM {}t{}",
            "(SELECT * FROM ".repeat(n / 2),
            ") AS d".repeat(n / 2)
        );
        for sql in [unions, joins, commas, nested, with, derived] {
            let d = measure(&sql).unwrap();
            assert!(d.relations >= n / 2, "{} counted {d:?}", &sql[..40]);
            let e = check(&sql).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument);
            assert!(e.message().contains("relations"), "{e}");
        }
        let few = ["SELECT a, b FROM t WHERE x IN (1, 2)"; 10].join(" UNION ");
        assert_eq!(measure(&few).unwrap().relations, 9);
        assert!(check(&few).is_ok());
        // A select list's commas chain nothing.
        let wide = format!("SELECT {} FROM t", vec!["a"; 5_000].join(", "));
        assert_eq!(measure(&wide).unwrap().relations, 0);
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
