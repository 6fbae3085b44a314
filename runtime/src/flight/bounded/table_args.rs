//! A table function's arguments (`generate_series(1, <expr>)`) are simplified by DataFusion
//! while it resolves the function, constants folded with DataFusion's own kernels, before any
//! of lake's rules sees them: a regular expression or LIKE operator there is compiled
//! uncounted (`generate_series(1, CASE WHEN 'a' ~ repeat('\w', 1000000) …)` would parse 6 GB).
//! Such arguments are refused before the statement is planned; functions (`regexp_like`) are
//! the session's counted ones there too, and stay allowed.

use std::ops::ControlFlow;

use datafusion::sql::parser::{CopyToSource, Statement as DFStatement};
use datafusion::sql::sqlparser::ast::{BinaryOperator, Expr, TableFactor, Visit, Visitor};
use tonic::Status;

/// Refuses `statement` if a table function's argument matches a pattern with an operator.
pub(in crate::flight) fn check(statement: &DFStatement) -> Result<(), Status> {
    match visit(statement) {
        ControlFlow::Break(operator) => Err(Status::invalid_argument(format!(
            "a table function's arguments may not use {operator}: DataFusion evaluates them \
             outside the statement's memory budget (compute the value in a subquery, or use \
             regexp_like)"
        ))),
        ControlFlow::Continue(()) => Ok(()),
    }
}

/// Every query `statement` holds, however wrapped: DataFusion plans an EXPLAIN's statement (an
/// EXPLAIN of an EXPLAIN too) and a COPY's query before it refuses either.
fn visit(statement: &DFStatement) -> ControlFlow<&'static str> {
    match statement {
        DFStatement::Statement(s) => s.visit(&mut TableFunctions),
        DFStatement::Explain(e) => visit(&e.statement),
        DFStatement::CopyTo(copy) => match &copy.source {
            CopyToSource::Query(query) => query.visit(&mut TableFunctions),
            CopyToSource::Relation(_) => ControlFlow::Continue(()),
        },
        DFStatement::CreateExternalTable(_) | DFStatement::Reset(_) => ControlFlow::Continue(()),
    }
}

struct TableFunctions;

impl Visitor for TableFunctions {
    type Break = &'static str;

    fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<&'static str> {
        match factor {
            TableFactor::Table {
                args: Some(args), ..
            } => args.visit(&mut Patterns),
            TableFactor::Function { args, .. } => args.visit(&mut Patterns),
            TableFactor::TableFunction { expr, .. } => expr.visit(&mut Patterns),
            _ => ControlFlow::Continue(()),
        }
    }
}

struct Patterns;

impl Visitor for Patterns {
    type Break = &'static str;

    fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<&'static str> {
        let operator = match expr {
            Expr::Like { .. } => "LIKE",
            Expr::ILike { .. } => "ILIKE",
            Expr::SimilarTo { .. } => "SIMILAR TO",
            Expr::RLike { .. } => "RLIKE",
            Expr::BinaryOp { op, .. } => match op {
                BinaryOperator::PGRegexMatch => "~",
                BinaryOperator::PGRegexIMatch => "~*",
                BinaryOperator::PGRegexNotMatch => "!~",
                BinaryOperator::PGRegexNotIMatch => "!~*",
                BinaryOperator::PGLikeMatch => "~~",
                BinaryOperator::PGILikeMatch => "~~*",
                BinaryOperator::PGNotLikeMatch => "!~~",
                BinaryOperator::PGNotILikeMatch => "!~~*",
                _ => return ControlFlow::Continue(()),
            },
            _ => return ControlFlow::Continue(()),
        };
        ControlFlow::Break(operator)
    }
}

#[cfg(test)]
mod tests {
    use datafusion::sql::parser::DFParser;

    use super::*;

    fn checked(sql: &str) -> Result<(), Status> {
        let mut statements = DFParser::parse_sql(sql).unwrap();
        check(&statements.pop_front().unwrap())
    }

    #[test]
    fn pattern_operators_in_table_function_arguments_are_refused() {
        for (sql, operator) in [
            (
                "SELECT * FROM generate_series(1, CASE WHEN 'a' ~ 'b' THEN 2 ELSE 3 END)",
                "~",
            ),
            (
                "SELECT * FROM range(CASE WHEN 'a' LIKE 'b%' THEN 2 END)",
                "LIKE",
            ),
            (
                "EXPLAIN SELECT * FROM t JOIN generate_series(1, CASE WHEN 'a' ILIKE 'b' \
                 THEN 2 END) ON true",
                "ILIKE",
            ),
            (
                "SELECT * FROM (SELECT * FROM generate_series(1, CASE WHEN 'a' SIMILAR TO \
                 'b' THEN 2 END))",
                "SIMILAR TO",
            ),
            (
                "EXPLAIN EXPLAIN SELECT * FROM generate_series(1, CASE WHEN 'a' ~* 'b' THEN 2 END)",
                "~*",
            ),
            (
                "COPY (SELECT * FROM generate_series(1, CASE WHEN 'a' !~ 'b' THEN 2 END)) \
                 TO 'x.csv'",
                "!~",
            ),
            (
                "EXPLAIN COPY (SELECT * FROM range(CASE WHEN 'a' NOT LIKE 'b' THEN 2 END)) \
                 TO 'x.csv'",
                "LIKE",
            ),
        ] {
            let refused = checked(sql).unwrap_err();
            assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{sql}");
            assert!(
                refused
                    .message()
                    .contains(&format!("may not use {operator}:")),
                "{sql}: {refused}"
            );
        }
        // Elsewhere, and functions in the arguments, are planned as usual.
        for sql in [
            "SELECT * FROM generate_series(1, 3) WHERE CAST(value AS VARCHAR) ~ '1'",
            "SELECT * FROM generate_series(1, CASE WHEN regexp_like('a', 'b') THEN 2 END)",
            "SELECT * FROM t WHERE s LIKE 'a%'",
        ] {
            assert!(checked(sql).is_ok(), "{sql}");
        }
    }
}
