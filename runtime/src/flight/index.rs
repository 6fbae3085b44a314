//! Index DDL on the metadata endpoint (docs/guides/search.md):
//! `CREATE INDEX [IF NOT EXISTS] name ON s.t USING <type> (col) [WITH (option = value, …)]`,
//! `DROP INDEX [IF EXISTS] name ON s.t`, and `SHOW INDEXES FROM s.t` (a read, on either
//! endpoint). Each statement is checked here, completely, before anything reaches Lance: a bad
//! type, column or option is INVALID_ARGUMENT naming it.

use datafusion::sql::TableReference;
use datafusion::sql::sqlparser::ast::{
    CreateIndex, Expr, IndexType, ObjectName, ObjectType, Statement, Value,
};
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::Token;
use tonic::Status;

use super::tokens::{is_keyword, table_ref};
use crate::catalog::NamespaceName;
use crate::engine::{
    IndexDefinition, IndexKind, TableRef, TextOptions, VectorMetric, VectorOptions,
};

const CREATE_USAGE: &str = "CREATE INDEX [IF NOT EXISTS] <name> ON <schema>.<table> USING \
     BTREE|BITMAP|LABEL_LIST|INVERTED|IVF_FLAT|IVF_PQ|IVF_HNSW_SQ (<column>) [WITH (<option> = <value>, …)]";

fn invalid(detail: &str) -> Status {
    Status::invalid_argument(format!("{detail}; the syntax is {CREATE_USAGE}"))
}

/// The table `name` names, resolved as every statement's tables are.
fn table_of(name: &ObjectName, chosen: Option<&NamespaceName>) -> Result<TableRef, Status> {
    super::sql::table_ref(&TableReference::from(name.to_string().as_str()), chosen)
}

/// An index name: what Lance stores, so letters, digits and `_`, at most 128.
fn index_name(name: &str) -> Result<String, Status> {
    let ok = (1..=128).contains(&name.len())
        // A letter first: Lance's own indices start with `__` (dropping one would be harmful).
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(name.to_owned())
    } else {
        Err(Status::invalid_argument(format!(
            "index name {name:?}: letters, digits and _ only (at most 128), starting with a letter"
        )))
    }
}

/// `CREATE INDEX …` as lake runs it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct CreateIndexStatement {
    pub table: TableRef,
    pub definition: IndexDefinition,
    pub if_not_exists: bool,
}

pub(super) fn create(
    index: &CreateIndex,
    chosen: Option<&NamespaceName>,
) -> Result<CreateIndexStatement, Status> {
    let name = index
        .name
        .as_ref()
        .ok_or_else(|| invalid("an index needs a name"))?;
    let name = index_name(&name.to_string())?;
    let table = table_of(&index.table_name, chosen)?;
    let unsupported = [
        (index.unique, "UNIQUE"),
        (index.concurrently, "CONCURRENTLY"),
        (!index.include.is_empty(), "INCLUDE"),
        (index.nulls_distinct.is_some(), "NULLS [NOT] DISTINCT"),
        (index.predicate.is_some(), "WHERE"),
        (!index.index_options.is_empty(), "index options"),
        (!index.alter_options.is_empty(), "ALGORITHM/LOCK"),
    ];
    if let Some((_, what)) = unsupported.iter().find(|(set, _)| *set) {
        return Err(invalid(&format!("{what} is not supported")));
    }
    let kind = match &index.using {
        None => return Err(invalid("USING names the index type")),
        Some(IndexType::BTree) => IndexKind::BTree,
        Some(IndexType::Custom(ident)) => match ident.value.to_ascii_uppercase().as_str() {
            "BITMAP" => IndexKind::Bitmap,
            "LABEL_LIST" => IndexKind::LabelList,
            "INVERTED" => IndexKind::Inverted,
            "IVF_FLAT" => IndexKind::IvfFlat,
            "IVF_PQ" => IndexKind::IvfPq,
            "IVF_HNSW_SQ" => IndexKind::IvfHnswSq,
            other => return Err(invalid(&format!("unknown index type {other}"))),
        },
        Some(other) => return Err(invalid(&format!("unknown index type {other}"))),
    };
    let [column] = index.columns.as_slice() else {
        return Err(invalid("an index covers exactly one column"));
    };
    let column = match &column.column.expr {
        Expr::Identifier(ident) => ident.value.clone(),
        other => return Err(invalid(&format!("{other} is not a column"))),
    };
    let mut options = Vec::new();
    for option in &index.with {
        let Expr::BinaryOp { left, op, right } = option else {
            return Err(invalid(&format!(
                "WITH option {option}: write <option> = <value>"
            )));
        };
        let (Expr::Identifier(key), true) = (left.as_ref(), op.to_string() == "=") else {
            return Err(invalid(&format!(
                "WITH option {option}: write <option> = <value>"
            )));
        };
        let value = match right.as_ref() {
            Expr::Value(v) => match &v.value {
                Value::Number(n, _) => n.clone(),
                Value::SingleQuotedString(s) => s.clone(),
                other => other.to_string(),
            },
            Expr::Identifier(i) => i.value.clone(),
            other => other.to_string(),
        };
        options.push((key.value.to_ascii_lowercase(), value));
    }
    let (vector, text) = if kind == IndexKind::Inverted {
        (None, Some(text_options(&options)?))
    } else {
        (vector_options(kind, &options)?, None)
    };
    Ok(CreateIndexStatement {
        table,
        definition: IndexDefinition {
            name,
            column,
            kind,
            vector,
            text,
        },
        if_not_exists: index.if_not_exists,
    })
}

/// The options of an INVERTED index.
fn text_options(options: &[(String, String)]) -> Result<TextOptions, Status> {
    let mut text = TextOptions::default();
    for (key, value) in options {
        let flag = || match value.to_ascii_lowercase().as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(Status::invalid_argument(format!(
                "index option {key} = {value:?}: true or false"
            ))),
        };
        match key.as_str() {
            "stem" => text.stem = Some(flag()?),
            "remove_stop_words" => text.remove_stop_words = Some(flag()?),
            "lower_case" => text.lower_case = Some(flag()?),
            "with_position" => text.with_position = Some(flag()?),
            "max_token_length" => {
                text.max_token_length = Some(match value.parse::<usize>() {
                    Ok(0) => None,
                    Ok(n) if n <= 65_536 => Some(n),
                    _ => {
                        return Err(Status::invalid_argument(format!(
                            "index option {key} = {value:?}: a whole number from 1 to 65536, \
                             or 0 for no limit"
                        )));
                    }
                })
            }
            _ => {
                return Err(Status::invalid_argument(format!(
                    "index option {key}: not an option of an INVERTED index (it takes {})",
                    IndexKind::Inverted.options().join(", ")
                )));
            }
        }
    }
    Ok(text)
}

/// The options of a vector index (none for a scalar one: any given is refused, by name).
fn vector_options(
    kind: IndexKind,
    options: &[(String, String)],
) -> Result<Option<VectorOptions>, Status> {
    let bad = |key: &str, value: &str, why: &str| {
        Status::invalid_argument(format!("index option {key} = {value:?}: {why}"))
    };
    if !kind.is_vector() {
        if let Some((key, _)) = options.first() {
            return Err(Status::invalid_argument(format!(
                "index option {key}: a {kind} index takes no options"
            )));
        }
        return Ok(None);
    }
    let mut vector = VectorOptions::default();
    for (key, value) in options {
        let number = |max: usize| {
            value
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=max).contains(n))
                .ok_or_else(|| bad(key, value, &format!("a whole number from 1 to {max}")))
        };
        match key.as_str() {
            "metric" => {
                vector.metric = match value.to_ascii_lowercase().as_str() {
                    "l2" | "euclidean" => VectorMetric::L2,
                    "cosine" => VectorMetric::Cosine,
                    "dot" | "inner_product" => VectorMetric::Dot,
                    _ => return Err(bad(key, value, "one of l2, cosine, dot")),
                }
            }
            "num_partitions" => vector.num_partitions = Some(number(65_536)?),
            "num_sub_vectors" if kind == IndexKind::IvfPq => {
                vector.num_sub_vectors = Some(number(4_096)?)
            }
            "num_bits" if kind == IndexKind::IvfPq => {
                vector.num_bits = Some(match value.as_str() {
                    "4" => 4,
                    "8" => 8,
                    _ => return Err(bad(key, value, "4 or 8")),
                })
            }
            // Bounded: a build's time and memory grow with both.
            "m" if kind == IndexKind::IvfHnswSq => vector.m = Some(number(64)?),
            "ef_construction" if kind == IndexKind::IvfHnswSq => {
                vector.ef_construction = Some(number(1_000)?)
            }
            _ => {
                return Err(Status::invalid_argument(format!(
                    "index option {key}: not an option of a {kind} index (it takes {})",
                    kind.options().join(", ")
                )));
            }
        }
    }
    Ok(Some(vector))
}

/// `DROP INDEX [IF EXISTS] name ON s.t`, if `statement` is one.
pub(super) fn drop(
    statement: &Statement,
    chosen: Option<&NamespaceName>,
) -> Option<Result<(TableRef, String, bool), Status>> {
    let Statement::Drop {
        object_type: ObjectType::Index,
        if_exists,
        names,
        table,
        ..
    } = statement
    else {
        return None;
    };
    Some((|| {
        let usage = "the syntax is DROP INDEX [IF EXISTS] <name> ON <schema>.<table>";
        let [name] = names.as_slice() else {
            return Err(Status::invalid_argument(format!(
                "drop one index at a time; {usage}"
            )));
        };
        let table = table.as_ref().ok_or_else(|| {
            Status::invalid_argument(format!(
                "DROP INDEX needs its table (ON <schema>.<table>); {usage}"
            ))
        })?;
        Ok((
            table_of(table, chosen)?,
            index_name(&name.to_string())?,
            *if_exists,
        ))
    })())
}

/// `SHOW INDEXES FROM s.t` (or `SHOW INDEX`), if `tokens` (a statement's, without whitespace)
/// are one: the table, a bare name in the session's `chosen` schema.
pub(super) fn show(
    tokens: &[Token],
    chosen: Option<&NamespaceName>,
) -> Option<Result<TableRef, Status>> {
    let mut it = tokens.iter().peekable();
    if !is_keyword(it.next(), Keyword::SHOW) {
        return None;
    }
    if !matches!(it.next(), Some(Token::Word(w))
        if w.quote_style.is_none() && matches!(w.value.to_ascii_uppercase().as_str(), "INDEX" | "INDEXES"))
    {
        return None;
    }
    let usage = |detail: &str| {
        Status::invalid_argument(format!(
            "{detail}; the syntax is SHOW INDEXES FROM [<schema>.]<table>"
        ))
    };
    Some((|| {
        if !is_keyword(it.next(), Keyword::FROM) {
            return Err(usage("expected FROM"));
        }
        let table = table_ref(&mut it, "SHOW INDEXES", chosen, |d| {
            Status::invalid_argument(format!(
                "{d}; the syntax is SHOW INDEXES FROM [<schema>.]<table>"
            ))
        })?;
        if it.peek() == Some(&&Token::SemiColon) {
            it.next();
        }
        match it.next() {
            None => Ok(table),
            Some(extra) => Err(usage(&format!("unexpected {extra} at the end"))),
        }
    })())
}

#[cfg(test)]
mod tests {
    use datafusion::sql::parser::{DFParser, Statement as DFStatement};
    use datafusion::sql::sqlparser::dialect::GenericDialect;

    use super::*;

    fn show(sql: &str, chosen: Option<&NamespaceName>) -> Option<Result<TableRef, Status>> {
        super::show(&crate::flight::tokens::significant(sql).unwrap(), chosen)
    }

    fn statement(sql: &str) -> Statement {
        match DFParser::parse_sql_with_dialect(sql, &GenericDialect {})
            .unwrap()
            .pop_front()
            .unwrap()
        {
            DFStatement::Statement(s) => *s,
            other => panic!("{other:?}"),
        }
    }

    fn created(sql: &str) -> Result<CreateIndexStatement, Status> {
        match statement(sql) {
            Statement::CreateIndex(i) => create(&i, None),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn index_statements_parse() {
        let c = created("CREATE INDEX ids ON s.t USING BTREE (id)").unwrap();
        assert_eq!(c.table.to_string(), "s.t");
        assert_eq!(c.definition.kind, IndexKind::BTree);
        assert_eq!(c.definition.column, "id");
        assert_eq!(c.definition.vector, None);
        let c = created(
            "CREATE INDEX IF NOT EXISTS emb_idx ON s.t USING ivf_pq (emb) \
             WITH (metric = 'cosine', num_partitions = 16, num_sub_vectors = 8)",
        )
        .unwrap();
        assert!(c.if_not_exists);
        let v = c.definition.vector.unwrap();
        assert_eq!(v.metric, VectorMetric::Cosine);
        assert_eq!((v.num_partitions, v.num_sub_vectors), (Some(16), Some(8)));
        assert_eq!(
            drop(&statement("DROP INDEX IF EXISTS ids ON s.t"), None)
                .unwrap()
                .unwrap(),
            (c.table.clone(), "ids".to_owned(), true)
        );
        assert_eq!(
            show("show indexes from s.t", None).unwrap().unwrap(),
            c.table
        );
        assert!(show("SHOW TABLES", None).is_none());
        let chosen = NamespaceName::parse("s").unwrap();
        assert_eq!(
            show("SHOW INDEXES FROM t", Some(&chosen)).unwrap().unwrap(),
            c.table
        );
        let unchosen = show("SHOW INDEXES FROM t", None).unwrap().unwrap_err();
        assert!(
            unchosen.message().contains("session's schema"),
            "{unchosen}"
        );
    }

    #[test]
    fn bad_index_statements_name_what_is_wrong() {
        let err = |sql: &str| created(sql).unwrap_err().message().to_owned();
        assert!(err("CREATE INDEX i ON s.t (id)").contains("USING"));
        assert!(err("CREATE INDEX i ON s.t USING HASH (id)").contains("unknown index type"));
        assert!(err("CREATE INDEX i ON s.t USING BTREE (a, b)").contains("exactly one column"));
        assert!(err("CREATE INDEX i ON t USING BTREE (a)").contains("needs a schema"));
        assert!(
            err("CREATE INDEX i ON s.t USING BTREE (a) WITH (metric = 'l2')")
                .contains("index option metric")
        );
        let e = err("CREATE INDEX i ON s.t USING IVF_PQ (v) WITH (num_partitions = 0)");
        assert!(e.contains("num_partitions") && e.contains("1 to"), "{e}");
        let e = err("CREATE INDEX i ON s.t USING IVF_PQ (v) WITH (metric = 'hamming')");
        assert!(e.contains("metric") && e.contains("l2, cosine, dot"), "{e}");
        let e = err("CREATE INDEX i ON s.t USING IVF_FLAT (v) WITH (m = 16)");
        assert!(e.contains("index option m") && e.contains("metric"), "{e}");
        assert!(err("CREATE UNIQUE INDEX i ON s.t USING BTREE (a)").contains("UNIQUE"));
        let e = err("CREATE INDEX \"a-b\" ON s.t USING BTREE (a)");
        assert!(e.contains("index name"), "{e}");
        let e = drop(&statement("DROP INDEX __lance_frag_reuse ON s.t"), None)
            .unwrap()
            .unwrap_err();
        assert!(e.message().contains("index name"), "{e}");
        let e = drop(&statement("DROP INDEX i"), None).unwrap().unwrap_err();
        assert!(e.message().contains("ON <schema>.<table>"), "{e}");
    }
}
