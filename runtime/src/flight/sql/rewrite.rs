//! Rewrites of a parsed statement before DataFusion plans it: `?` placeholders numbered, and the
//! binary type names clients write planned as the one DataFusion knows.

use std::ops::ControlFlow;

use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::{Expr, Statement, Value, visit_expressions_mut};

/// The SQL names of a binary column (`VARBINARY`, `BINARY`, `BLOB`, as GetXdbcTypeInfo lists it and
/// JDBC tools write it) as the one DataFusion plans (`BYTEA`), in column definitions and casts.
pub(super) fn binary_types_as_bytea(statement: &mut DFStatement) {
    use datafusion::sql::sqlparser::ast::DataType as SqlType;
    fn plain(data_type: &mut SqlType) {
        if matches!(
            data_type,
            SqlType::Varbinary(_) | SqlType::Binary(_) | SqlType::Blob(_)
        ) {
            *data_type = SqlType::Bytea;
        }
    }
    let DFStatement::Statement(statement) = statement else {
        return;
    };
    if let Statement::CreateTable(create) = statement.as_mut() {
        for column in &mut create.columns {
            plain(&mut column.data_type);
        }
    }
    let _ = visit_expressions_mut(statement.as_mut(), |expr| {
        if let Expr::Cast { data_type, .. } = expr {
            plain(data_type);
        }
        ControlFlow::<()>::Continue(())
    });
}

/// Numbers `?` placeholders `$1`, `$2`, … in order (DataFusion binds positional parameters only).
pub(super) fn number_placeholders(statement: &mut DFStatement) {
    if let DFStatement::Statement(statement) = statement {
        let mut next = 0;
        let _ = visit_expressions_mut(statement.as_mut(), |expr| {
            if let Expr::Value(v) = expr
                && let Value::Placeholder(p) = &mut v.value
                && p == "?"
            {
                next += 1;
                *p = format!("${next}");
            }
            ControlFlow::<()>::Continue(())
        });
    }
}
