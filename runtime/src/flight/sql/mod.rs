//! SQL → what to do: a read (a DataFusion plan) or one of the writes the metadata role performs.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;
use datafusion::error::DataFusionError;
use datafusion::logical_expr::{DdlStatement, DmlStatement, LogicalPlan, WriteOp};
use datafusion::prelude::SessionContext;
use datafusion::sql::TableReference;
use datafusion::sql::parser::{DFParser, Statement as DFStatement};

use datafusion::common::ScalarValue;
use datafusion::sql::sqlparser::ast::{FromTable, Statement, TableFactor};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use tonic::Status;

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::logical_expr::dml::InsertOp;

use super::catalog::CATALOG;
use super::copy::CopyInto;
use super::index::CreateIndexStatement;
use super::options::SessionOptions;
use super::restore::Restore;
use crate::catalog::{NamespaceName, TableName};
use crate::engine::TableRef;

mod delete;
mod one_partition;
mod rewrite;
mod session;
#[cfg(test)]
pub(super) mod testing;
#[cfg(test)]
mod tests;

use rewrite::{binary_types_as_bytea, number_placeholders};
#[cfg(test)]
pub(in crate::flight) use session::physical_rules;
pub(crate) use session::task_context;
pub(super) use session::{MAX_TABLE_REFERENCES, Sessions, into_state, runtime_env};
use session::{enumerates_the_warehouse, list_the_warehouse};

/// A write, decided from SQL before anything is touched.
#[derive(Debug)]
pub(super) enum Write {
    CreateSchema {
        namespace: NamespaceName,
        if_not_exists: bool,
    },
    CreateTable {
        table: TableRef,
        schema: SchemaRef,
        if_not_exists: bool,
        /// `CREATE TABLE … AS SELECT`: the rows to load.
        rows: Option<LogicalPlan>,
    },
    DropTable {
        table: TableRef,
        if_exists: bool,
    },
    /// `DROP SCHEMA [IF EXISTS] s [CASCADE | RESTRICT]`.
    DropSchema {
        namespace: NamespaceName,
        if_exists: bool,
        cascade: bool,
    },
    Insert {
        table: TableRef,
        rows: LogicalPlan,
    },
    Delete {
        table: TableRef,
        /// The rows to delete, planned in the statement's session; `None` deletes every row.
        predicate: Option<datafusion::logical_expr::Expr>,
    },
    /// `COPY INTO` from the stage.
    CopyInto(CopyInto),
    /// `RESTORE TABLE … TO …`.
    Restore(Restore),
    /// `CREATE INDEX …`.
    CreateIndex(CreateIndexStatement),
    /// `DROP INDEX [IF EXISTS] name ON table`.
    DropIndex {
        table: TableRef,
        name: String,
        if_exists: bool,
    },
}

impl Write {
    /// The plan whose placeholders are this write's parameters, if it can have any.
    pub(super) fn parameters(&self) -> Option<&LogicalPlan> {
        match self {
            Write::Insert { rows, .. } => Some(rows),
            _ => None,
        }
    }
}

#[derive(Debug)]
pub(super) enum Planned {
    Read(LogicalPlan),
    /// A read with bound `values`, its parameters placeholders typed as them: bound once it is
    /// optimized (`prepared.rs`).
    BoundRead {
        plan: LogicalPlan,
        values: Vec<ScalarValue>,
    },
    Write(Write),
}

/// Maps DataFusion errors to the gRPC codes clients rely on.
pub(in crate::flight) fn status(e: DataFusionError) -> Status {
    let status = status_of(&e);
    // A status travels in an HTTP/2 trailer, which clients bound (an error chain with debug
    // renderings of transport errors overflowed one): a long message is cut, never the call.
    if status.message().len() > MAX_STATUS_MESSAGE {
        let mut end = MAX_STATUS_MESSAGE;
        while !status.message().is_char_boundary(end) {
            end -= 1;
        }
        return Status::new(
            status.code(),
            format!("{} … (cut)", &status.message()[..end]),
        );
    }
    status
}

/// The longest status message sent, in bytes.
const MAX_STATUS_MESSAGE: usize = 2048;

fn status_of(e: &DataFusionError) -> Status {
    match e {
        DataFusionError::Diagnostic(_, inner) => status_of(inner),
        DataFusionError::Shared(inner) => status_of(inner),
        DataFusionError::Collection(errors) if !errors.is_empty() => status_of(&errors[0]),
        DataFusionError::Context(context, inner) => {
            let inner = status_of(inner);
            Status::new(inner.code(), format!("{context}: {}", inner.message()))
        }
        DataFusionError::SQL(e, _) => Status::invalid_argument(format!("SQL error: {e}")),
        DataFusionError::Plan(msg) if msg.contains("not found") => Status::not_found(msg.clone()),
        DataFusionError::Plan(msg) => Status::invalid_argument(msg.clone()),
        DataFusionError::SchemaError(e, _) => Status::invalid_argument(e.to_string()),
        DataFusionError::NotImplemented(msg) => Status::unimplemented(msg.clone()),
        // The statement's values made a kernel fail (`1 / 0`, `CAST('x' AS INT)`, an
        // overflow): the client's to fix, not the server's.
        DataFusionError::ArrowError(e, _)
            if matches!(
                e.as_ref(),
                ArrowError::DivideByZero
                    | ArrowError::CastError(_)
                    | ArrowError::ParseError(_)
                    | ArrowError::ArithmeticOverflow(_)
                    | ArrowError::InvalidArgumentError(_)
            ) =>
        {
            Status::invalid_argument(e.to_string())
        }
        DataFusionError::Execution(msg) if msg.starts_with("Scalar subquery returned more") => {
            Status::invalid_argument(msg.clone())
        }
        // DataFusion names its own setting; the operator of a lake sets ours.
        DataFusionError::ResourcesExhausted(msg) if msg.contains("max_temp_directory_size") => {
            Status::resource_exhausted(format!(
                "the statement spilled more than the endpoint's disk budget \
                 (LAKE_SPILL_LIMIT_MB): {msg}"
            ))
        }
        DataFusionError::ResourcesExhausted(msg) => Status::resource_exhausted(msg.clone()),
        // A status over a transport error: a distributed statement's worker was lost (or could
        // not be reached) mid-statement. The statement stopped and its stream ends with this
        // error, so nothing partial was taken for an answer: the client may run it again.
        DataFusionError::External(inner)
            if inner
                .downcast_ref::<Status>()
                .is_some_and(|s| std::error::Error::source(s).is_some()) =>
        {
            Status::unavailable(format!(
                "a worker of this distributed statement was lost or could not be reached ({}); \
                 the statement was stopped; try again",
                inner.downcast_ref::<Status>().map_or("", Status::message)
            ))
        }
        // A refusal of our own (a function past the statement's deadline) keeps its code.
        DataFusionError::External(inner) if inner.downcast_ref::<Status>().is_some() => inner
            .downcast_ref::<Status>()
            .map_or_else(|| Status::internal(e.to_string()), Clone::clone),
        // … and so does one a distributed statement's worker made, which reaches this process
        // as the status's text.
        DataFusionError::External(inner) => match relayed(&inner.to_string()) {
            Some((_, message, true)) => Status::unavailable(format!(
                "a worker of this distributed statement was lost or could not be reached \
                 ({message}); the statement was stopped; try again"
            )),
            Some((code, message, false)) => Status::new(code, message),
            None => Status::internal(e.to_string()),
        },
        other => Status::internal(other.to_string()),
    }
}

/// A gRPC status as its `Display` renders it (`code: '<description>', message: "<message>"`,
/// then `, source: …` when a transport error is under it): the code, the message, and whether
/// it had a source.
fn relayed(text: &str) -> Option<(tonic::Code, String, bool)> {
    let rest = text.strip_prefix("code: '")?;
    let (description, rest) = rest.split_once('\'')?;
    // Never OK: a stream that ended with "success" would read as a whole answer.
    let code = (1..=16)
        .map(tonic::Code::from_i32)
        .find(|c| c.description() == description && *c != tonic::Code::Unknown)
        .unwrap_or(tonic::Code::Internal);
    let Some(quoted) = rest.strip_prefix(", message: \"") else {
        return Some((code, String::new(), rest.starts_with(", source: ")));
    };
    // The message is `{:?}`-quoted: read up to the closing quote, undoing the escapes.
    let mut message = String::new();
    let mut chars = quoted.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => {
                let sourced = quoted[at + 1..].starts_with(", source: ");
                return Some((code, message, sourced));
            }
            '\\' => match chars.next()?.1 {
                'n' => message.push('\n'),
                't' => message.push('\t'),
                'r' => message.push('\r'),
                other => message.push(other),
            },
            other => message.push(other),
        }
    }
    None
}

/// The schema the statement's session chose for unqualified table names (session options).
pub(in crate::flight) fn chosen_schema(ctx: &SessionContext) -> Option<NamespaceName> {
    // Read in place: `ctx.state()` would copy the session's function registries.
    ctx.state_ref()
        .read()
        .config()
        .get_extension::<SessionOptions>()
        .and_then(|options| options.schema().cloned())
}

/// The lake table `name` names: in lake's catalog, in its schema or else the session's
/// `chosen` schema.
pub(in crate::flight) fn table_ref(
    name: &TableReference,
    chosen: Option<&NamespaceName>,
) -> Result<TableRef, Status> {
    let (catalog, schema, table) = match name {
        TableReference::Full {
            catalog,
            schema,
            table,
        } => (
            Some(catalog.as_ref()),
            Some(schema.as_ref()),
            table.as_ref(),
        ),
        TableReference::Partial { schema, table } => (None, Some(schema.as_ref()), table.as_ref()),
        TableReference::Bare { table } => (None, None, table.as_ref()),
    };
    if let Some(catalog) = catalog.filter(|c| *c != CATALOG) {
        return Err(Status::not_found(format!(
            "catalog {catalog:?} does not exist; lake serves catalog {CATALOG:?}"
        )));
    }
    let namespace = match (schema, chosen) {
        (Some(schema), _) => {
            NamespaceName::parse(schema).map_err(|e| Status::invalid_argument(e.to_string()))?
        }
        (None, Some(chosen)) => chosen.clone(),
        (None, None) => {
            return Err(Status::invalid_argument(format!(
                "table {table:?} needs a schema: write <schema>.{table}, or choose the \
                 session's schema (session option \"schema\")"
            )));
        }
    };
    let table = TableName::parse(table).map_err(|e| Status::invalid_argument(e.to_string()))?;
    Ok(TableRef::new(namespace, table))
}

/// Refused on every endpoint: the managed stage is the only file interface.
fn outside_the_lake(what: &str) -> Status {
    Status::permission_denied(format!(
        "{what} outside the lake and is refused on every endpoint; the managed stage is the only \
         file interface (COPY INTO <table> FROM '<stage path>' to load, lake stage get to fetch)"
    ))
}

/// A read must not hold a write anywhere in its tree: EXPLAIN ANALYZE runs the plan it wraps,
/// and subqueries are plans too. Writes run only as top-level statements, where they are
/// classified (and refused on the query endpoint).
fn refuse_nested_writes(plan: &LogicalPlan) -> Result<(), Status> {
    let mut found: Option<Status> = None;
    let _ = plan.apply_with_subqueries(|node| {
        found = match node {
            LogicalPlan::Copy(_) => Some(outside_the_lake("COPY … TO writes files")),
            LogicalPlan::Ddl(DdlStatement::CreateExternalTable(_)) => {
                Some(outside_the_lake("CREATE EXTERNAL TABLE reads files"))
            }
            LogicalPlan::Ddl(_) | LogicalPlan::Dml(_) | LogicalPlan::Statement(_) => {
                Some(Status::permission_denied(
                    "a write or statement inside EXPLAIN ANALYZE or a subquery is refused: send \
                     writes as statements of their own to the metadata endpoint",
                ))
            }
            _ => None,
        };
        Ok(if found.is_some() {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    });
    found.map_or(Ok(()), Err)
}

/// `CREATE SCHEMA [lake.]<name>`: another catalog is an error, never silently dropped.
fn schema_name(name: &str) -> Result<NamespaceName, Status> {
    let parts: Vec<&str> = name.split('.').collect();
    let schema = match parts.as_slice() {
        [schema] => schema,
        [catalog, schema] if *catalog == CATALOG => schema,
        [catalog, _] => {
            return Err(Status::not_found(format!(
                "catalog {catalog:?} does not exist; lake serves catalog {CATALOG:?}"
            )));
        }
        _ => {
            return Err(Status::invalid_argument(format!(
                "{name:?} is not a schema name: write <schema> or {CATALOG}.<schema>"
            )));
        }
    };
    NamespaceName::parse(schema).map_err(|e| Status::invalid_argument(e.to_string()))
}

fn parse_one(sql: &str) -> Result<DFStatement, Status> {
    let mut statements = DFParser::parse_sql_with_dialect(sql, &GenericDialect {})
        .map_err(|e| Status::invalid_argument(e.to_string()))?;
    match (statements.pop_front(), statements.is_empty()) {
        (Some(statement), true) => Ok(statement),
        (None, _) => Err(Status::invalid_argument("empty SQL statement")),
        (Some(_), false) => Err(Status::invalid_argument("send one SQL statement at a time")),
    }
}

/// The longest SQL text accepted: checked before it is tokenized (tokens and the syntax tree
/// take many times the text's size, outside any memory pool).
pub(super) const MAX_SQL_BYTES: usize = 1024 * 1024;

/// Plans `sql` in `ctx`: a read, or a write (never executed here). `params` bind `?`/`$n`.
pub(super) async fn plan(
    ctx: &SessionContext,
    sql: &str,
    params: Option<Vec<ScalarValue>>,
) -> Result<Planned, Status> {
    if sql.len() > MAX_SQL_BYTES {
        return Err(Status::invalid_argument(format!(
            "the statement is {} bytes of SQL; at most {MAX_SQL_BYTES} are accepted (load data \
             with bulk ingest, bound parameters or COPY INTO)",
            sql.len()
        )));
    }
    // Tokenized once for the depth check and lake's own statements (DataFusion's parser
    // reads the text again).
    let tokens = super::tokens::significant(sql)?;
    super::depth::check(&tokens)?;
    let chosen = chosen_schema(ctx);
    if let Some(restore) = super::restore::parse(&tokens, chosen.as_ref()) {
        if params.is_some() {
            return Err(unbindable());
        }
        return restore.map(|r| Planned::Write(Write::Restore(r)));
    }
    if let Some(table) = super::index::show(&tokens, chosen.as_ref()) {
        if params.is_some() {
            return Err(unbindable());
        }
        return show_indexes(ctx, &table?).await.map(Planned::Read);
    }
    if let Some(copy) = super::copy::parse(&tokens, chosen.as_ref()) {
        if params.is_some() {
            return Err(unbindable());
        }
        return copy.map(|c| Planned::Write(Write::CopyInto(c)));
    }
    let mut statement = parse_one(sql)?;
    if let DFStatement::Statement(boxed) = &statement {
        let index = match boxed.as_ref() {
            Statement::CreateIndex(index) => Some(
                super::index::create(index, chosen.as_ref())
                    .map(|c| Planned::Write(Write::CreateIndex(c))),
            ),
            other => super::index::drop(other, chosen.as_ref()).map(|d| {
                d.map(|(table, name, if_exists)| {
                    Planned::Write(Write::DropIndex {
                        table,
                        name,
                        if_exists,
                    })
                })
            }),
        };
        if let Some(index) = index {
            if params.is_some() {
                return Err(unbindable());
            }
            return index;
        }
    }
    number_placeholders(&mut statement);
    binary_types_as_bytea(&mut statement);
    super::bounded::table_args::check(&statement)?;
    if enumerates_the_warehouse(&statement)? {
        list_the_warehouse(ctx).await?;
    }
    super::search::register_table_functions(ctx, &statement, chosen.as_ref()).await?;
    // DELETE: its predicate is planned here, in this session (see `delete.rs`).
    if let DFStatement::Statement(boxed) = &statement
        && let Statement::Delete(delete) = boxed.as_ref()
    {
        let tables = match &delete.from {
            FromTable::WithFromKeyword(t) | FromTable::WithoutKeyword(t) => t,
        };
        let [from] = tables.as_slice() else {
            return Err(Status::invalid_argument("DELETE takes exactly one table"));
        };
        let TableFactor::Table { name, .. } = &from.relation else {
            return Err(Status::invalid_argument("DELETE FROM must name a table"));
        };
        if params.is_some() {
            return Err(unbindable());
        }
        let table = table_ref(
            &TableReference::from(name.to_string().as_str()),
            chosen.as_ref(),
        )?;
        let predicate = match &delete.selection {
            Some(selection) => Some(delete::predicate(ctx, name, selection).await?),
            None => None,
        };
        return Ok(Planned::Write(Write::Delete { table, predicate }));
    }
    let plan = ctx
        .state()
        .statement_to_plan(statement)
        .await
        .map_err(status)?;
    super::depth::check_plan(&plan)?;
    // Every write path comes through here: values bind into an INSERT's rows, nowhere else.
    if let Some(values) = params {
        return match classify(sql, plan, chosen.as_ref())? {
            Planned::Write(Write::Insert { table, rows }) => Ok(Planned::Write(Write::Insert {
                table,
                rows: super::bind::bind_rows(rows, &[values])?,
            })),
            Planned::Write(_) => Err(unbindable()),
            // Not made by `classify`.
            bound @ Planned::BoundRead { .. } => Ok(bound),
            Planned::Read(read) => {
                refuse_nested_writes(&read)?;
                if super::prepared::binds_late(&read) {
                    Ok(Planned::BoundRead {
                        plan: super::prepared::typed_placeholders(read, &values).map_err(status)?,
                        values,
                    })
                } else {
                    Ok(Planned::Read(
                        read.with_param_values(values).map_err(status)?,
                    ))
                }
            }
        };
    }
    classify(sql, plan, chosen.as_ref())
}

/// The longest statement many rows of values may be bound to.
const MAX_BOUND_SQL: usize = 64 * 1024;

/// `SHOW INDEXES FROM table`: its indices, at the version a statement reads now, as rows.
async fn show_indexes(ctx: &SessionContext, table: &TableRef) -> Result<LogicalPlan, Status> {
    use arrow::array::{StringArray, UInt64Array};
    use arrow::datatypes::{DataType, Field, Schema};
    let reference = TableReference::partial(table.namespace.as_str(), table.table.as_str());
    let provider = ctx
        .table_provider(reference)
        .await
        .map_err(|_| Status::not_found(format!("table {table} does not exist")))?;
    let any: &dyn std::any::Any = provider.as_ref();
    let lake = any
        .downcast_ref::<super::distributed::LakeTable>()
        .ok_or_else(|| Status::invalid_argument(format!("{table} is not a lake table")))?;
    let listed = crate::engine::indices(table, &lake.dataset())
        .await
        .map_err(super::status::engine)?;
    let schema = Arc::new(Schema::new(vec![
        Field::new("index_name", DataType::Utf8, false),
        Field::new("columns", DataType::Utf8, false),
        Field::new("index_type", DataType::Utf8, false),
        Field::new("indexed_rows", DataType::UInt64, false),
        Field::new("unindexed_rows", DataType::UInt64, false),
    ]));
    let column = |f: &dyn Fn(&crate::engine::IndexListing) -> String| {
        StringArray::from_iter_values(listed.iter().map(f))
    };
    let batch = arrow::record_batch::RecordBatch::try_new(
        schema,
        vec![
            Arc::new(column(&|i| i.name.clone())),
            Arc::new(column(&|i| i.columns.join(","))),
            Arc::new(column(&|i| i.index_type.clone())),
            Arc::new(UInt64Array::from_iter_values(
                listed.iter().map(|i| i.indexed_rows),
            )),
            Arc::new(UInt64Array::from_iter_values(
                listed.iter().map(|i| i.unindexed_rows),
            )),
        ],
    )
    .map_err(|e| Status::internal(e.to_string()))?;
    ctx.read_batch(batch)
        .map(|frame| frame.into_unoptimized_plan())
        .map_err(status)
}

fn unbindable() -> Status {
    Status::unimplemented(
        "parameters bind only to INSERT and to queries; inline the values in this statement",
    )
}

/// Plans `sql` with `rows` of values bound: an `INSERT`, all of whose rows are one write (one
/// commit). Anything else binds one row at most (see [`plan`]).
pub(super) async fn plan_rows(
    ctx: &SessionContext,
    sql: &str,
    rows: Vec<Vec<ScalarValue>>,
) -> Result<Planned, Status> {
    // Rows may be bound into copies of the whole plan (`INSERT … SELECT`): a short statement.
    if rows.len() > 1 && sql.len() > MAX_BOUND_SQL {
        return Err(Status::invalid_argument(format!(
            "rows of values bind to a statement of at most {MAX_BOUND_SQL} bytes"
        )));
    }
    match plan(ctx, sql, None).await? {
        Planned::Write(Write::Insert { table, rows: input }) => Ok(Planned::Write(Write::Insert {
            table,
            rows: super::bind::bind_rows(input, &rows)?,
        })),
        Planned::Write(_) => Err(unbindable()),
        Planned::Read(_) | Planned::BoundRead { .. } => Err(Status::invalid_argument(format!(
            "a query binds one row of parameters, got {}",
            rows.len()
        ))),
    }
}

/// The logical plan of a statement as what to do with it.
fn classify(
    sql: &str,
    plan: LogicalPlan,
    chosen: Option<&NamespaceName>,
) -> Result<Planned, Status> {
    Ok(match plan {
        LogicalPlan::Copy(_) => return Err(outside_the_lake("COPY … TO writes files")),
        LogicalPlan::Ddl(DdlStatement::CreateExternalTable(_)) => {
            return Err(outside_the_lake("CREATE EXTERNAL TABLE reads files"));
        }
        LogicalPlan::Ddl(DdlStatement::CreateCatalogSchema(c)) => {
            Planned::Write(Write::CreateSchema {
                namespace: schema_name(&c.schema_name)?,
                if_not_exists: c.if_not_exists,
            })
        }
        LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(c)) if c.or_replace => {
            return Err(Status::unimplemented(
                "CREATE OR REPLACE TABLE is not supported: DROP TABLE, then CREATE TABLE",
            ));
        }
        LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(c)) if c.temporary => {
            return Err(Status::unimplemented(
                "CREATE TEMPORARY TABLE is not supported: every lake table is durable",
            ));
        }
        LogicalPlan::Dml(DmlStatement {
            op: WriteOp::Insert(op @ (InsertOp::Overwrite | InsertOp::Replace)),
            ..
        }) => {
            let clause = match op {
                InsertOp::Overwrite => "INSERT OVERWRITE",
                _ => "REPLACE INTO",
            };
            return Err(Status::unimplemented(format!(
                "{clause} is not supported (it would not append): DELETE, then INSERT INTO"
            )));
        }
        LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(c)) => {
            let schema: SchemaRef = Arc::new(c.input.schema().as_arrow().clone());
            let rows = match c.input.as_ref() {
                LogicalPlan::EmptyRelation(_) => None,
                _ => Some(c.input.as_ref().clone()),
            };
            Planned::Write(Write::CreateTable {
                table: table_ref(&c.name, chosen)?,
                schema,
                if_not_exists: c.if_not_exists,
                rows,
            })
        }
        LogicalPlan::Ddl(DdlStatement::DropCatalogSchema(d)) => {
            let schema = match &d.name {
                datafusion::common::SchemaReference::Bare { schema } => schema,
                datafusion::common::SchemaReference::Full { schema, catalog } => {
                    if catalog.as_ref() != CATALOG {
                        return Err(Status::not_found(format!(
                            "catalog {catalog:?} does not exist; lake serves catalog {CATALOG:?}"
                        )));
                    }
                    schema
                }
            };
            Planned::Write(Write::DropSchema {
                namespace: NamespaceName::parse(schema)
                    .map_err(|e| Status::invalid_argument(e.to_string()))?,
                if_exists: d.if_exists,
                cascade: d.cascade,
            })
        }
        LogicalPlan::Ddl(DdlStatement::DropTable(d)) => Planned::Write(Write::DropTable {
            table: table_ref(&d.name, chosen)?,
            if_exists: d.if_exists,
        }),
        LogicalPlan::Dml(DmlStatement {
            table_name,
            op: WriteOp::Insert(_),
            input,
            ..
        }) => Planned::Write(Write::Insert {
            table: table_ref(&table_name, chosen)?,
            rows: input.as_ref().clone(),
        }),
        LogicalPlan::Ddl(_) | LogicalPlan::Dml(_) => {
            return Err(Status::unimplemented(format!("not supported: {sql}")));
        }
        LogicalPlan::Statement(_) => {
            return Err(Status::unimplemented(format!("not supported: {sql}")));
        }
        read => {
            refuse_nested_writes(&read)?;
            Planned::Read(read)
        }
    })
}
