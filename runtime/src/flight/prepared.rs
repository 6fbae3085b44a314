//! Prepared reads, planned once: a prepared statement executed again and again with new values
//! (a search with a new vector each time) is parsed, resolved and optimized once per endpoint,
//! SQL, session settings and parameter types, not once per execution.
//!
//! A prepared read's parameters stay placeholders through DataFusion's optimizer, typed as the
//! values bound to them: the optimized plan holds for any values of those types, and each
//! execution binds its own into a copy ([`bind`]) — a search's vector into its nearest-neighbour
//! scan, its expressions simplified again with the values in them (a cast of the value folded,
//! a column's cast unwrapped, so a scan is given `id = 5`), every call to the statement's
//! budget, and the checks that read values (a large value copied into every row, a sketch's
//! size) made on the bound plan. The first execution takes the same path, so a plan kept or
//! not behaves the same; it binds as DataFusion does (every node's schema computed again), the
//! later ones in place ([`Binding`]) when that first binding left every schema as it was. A
//! plan is kept only if nothing in it
//! depends on when it was made (`now()`, `random()`) or on anything but lake tables, and used
//! only while every table it reads is at the version it was planned at.

use std::collections::HashMap;
#[cfg(test)]
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::catalog::default_table_source::source_as_provider;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, ParamValues, ScalarValue};
use datafusion::error::Result;
use datafusion::logical_expr::expr::{Placeholder, ScalarFunction};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{Expr, ExprSchemable, LogicalPlan, ReturnFieldArgs, Volatility};
use datafusion::optimizer::simplify_expressions::SimplifyExpressions;
use datafusion::optimizer::{OptimizerContext, OptimizerRule};
use datafusion::prelude::SessionContext;
use tonic::Status;

use super::bounded::{self, Budget};
use super::options::SessionOptions;
use super::service::LakeFlightSql;
use super::sql::{self, Planned, Write};
use crate::engine::{Engine, TableRef};

/// Prepared plans kept at most, per endpoint: each holds its tables' opened metadata.
pub(super) const CAPACITY: usize = 64;
/// The most memory the kept plans of an endpoint may hold, as [`weight`] estimates it: any
/// client may prepare statements (a megabyte of SQL plans into far more), and a query pod has
/// a memory limit.
pub(super) const MAX_WEIGHT: usize = 16 * 1024 * 1024;
/// The most one kept plan may weigh: a larger one is planned again for each execution.
pub(super) const MAX_PLAN_WEIGHT: usize = 1024 * 1024;
/// What a plan's node or expression is taken to hold, beyond its constants.
const NODE_BYTES: usize = 256;
/// What a field of a node's schema is taken to hold.
const FIELD_BYTES: usize = 128;
/// What a table's opened metadata is taken to hold, per fragment.
const FRAGMENT_BYTES: usize = 256;

/// A read as its DoGet receives it.
#[derive(Debug)]
pub(super) enum ReadPlan {
    /// To be optimized in the DoGet's session.
    Unoptimized(LogicalPlan),
    /// A prepared read, optimized with its values bound after.
    Optimized(LogicalPlan),
}

impl ReadPlan {
    pub(super) fn plan(&self) -> &LogicalPlan {
        match self {
            ReadPlan::Unoptimized(plan) | ReadPlan::Optimized(plan) => plan,
        }
    }
}

/// What a statement handle's SQL comes to.
#[derive(Debug)]
pub(super) enum Statement {
    Read(ReadPlan),
    Write(Write),
}

/// The optimized plans of prepared reads, by SQL, session and parameter types.
#[derive(Debug, Default)]
pub(super) struct PreparedPlans {
    entries: Mutex<HashMap<Key, Kept>>,
    /// Executions that used a kept plan.
    #[cfg(test)]
    hits: AtomicU64,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    sql: String,
    /// The session options, as their cookie (settings change plans).
    session: String,
    types: Vec<DataType>,
}

impl Key {
    fn new(sql: &str, options: &SessionOptions, values: &[ScalarValue]) -> Self {
        Self {
            sql: sql.to_owned(),
            session: options.header(),
            types: values.iter().map(ScalarValue::data_type).collect(),
        }
    }
}

#[derive(Debug)]
struct Kept {
    /// Optimized, its parameters placeholders, its calls bound to no statement.
    plan: LogicalPlan,
    tables: Vec<TableVersion>,
    used: Instant,
    /// Its [`weight`].
    weight: usize,
    /// How values are bound into it.
    binding: Binding,
}

/// A table at the version a plan reads.
#[derive(Debug, Clone, PartialEq)]
struct TableVersion {
    table: TableRef,
    /// The version the statement named (`t@v5`), which it reads whatever the latest is.
    pinned: Option<u64>,
    version: u64,
    /// When the version was committed: a table dropped and made again has versions of the
    /// same numbers.
    committed: u128,
    /// Its data files, for the [`weight`] of the metadata a kept plan holds open.
    fragments: usize,
}

impl TableVersion {
    fn of(table: &TableRef, pinned: Option<u64>, dataset: &lance::dataset::Dataset) -> Self {
        Self {
            table: table.clone(),
            pinned,
            version: dataset.version().version,
            committed: dataset.manifest().timestamp_nanos,
            fragments: dataset.manifest().fragments.len(),
        }
    }
}

impl PreparedPlans {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Kept>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The plan kept for `key`, if every table it reads is still at its version.
    async fn get(&self, key: &Key, engine: &Engine) -> Option<(LogicalPlan, Binding)> {
        let (plan, tables, binding) = {
            let mut entries = self.lock();
            let kept = entries.get_mut(key)?;
            kept.used = Instant::now();
            (kept.plan.clone(), kept.tables.clone(), kept.binding)
        };
        for read in &tables {
            let now = engine.open(&read.table, read.pinned).await.ok();
            if now
                .map(|dataset| TableVersion::of(&read.table, read.pinned, &dataset))
                .as_ref()
                != Some(read)
            {
                self.lock().remove(key);
                return None;
            }
        }
        #[cfg(test)]
        self.hits.fetch_add(1, Ordering::Relaxed);
        Some((plan, binding))
    }

    /// Keeps `optimized` (planned from `unoptimized`) for `key`, bound as `binding` says, if it
    /// may be kept.
    fn put(&self, key: Key, unoptimized: &LogicalPlan, optimized: &LogicalPlan, binding: Binding) {
        // An EXPLAIN holds the plan's text after every rule; it is not run often enough to keep.
        if !timeless(unoptimized)
            || matches!(optimized, LogicalPlan::Explain(_) | LogicalPlan::Analyze(_))
        {
            return;
        }
        let Some(tables) = lake_tables(optimized) else {
            return;
        };
        let weight = weight(&key, optimized, &tables);
        if weight > MAX_PLAN_WEIGHT {
            return;
        }
        let Ok(plan) = bounded::unbind(optimized.clone()) else {
            return;
        };
        let mut entries = self.lock();
        entries.remove(&key);
        // The least recently used go first, until the plan fits.
        while entries.len() >= CAPACITY
            || entries.values().map(|kept| kept.weight).sum::<usize>() + weight > MAX_WEIGHT
        {
            let Some(oldest) = entries
                .iter()
                .min_by_key(|(_, kept)| kept.used)
                .map(|(key, _)| key.clone())
            else {
                break;
            };
            entries.remove(&oldest);
        }
        entries.insert(
            key,
            Kept {
                plan,
                tables,
                used: Instant::now(),
                weight,
                binding,
            },
        );
    }

    #[cfg(test)]
    fn kept(&self) -> Vec<LogicalPlan> {
        self.lock().values().map(|kept| kept.plan.clone()).collect()
    }

    #[cfg(test)]
    fn bindings(&self) -> Vec<Binding> {
        self.lock().values().map(|kept| kept.binding).collect()
    }

    #[cfg(test)]
    fn weight(&self) -> usize {
        self.lock().values().map(|kept| kept.weight).sum()
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }

    #[cfg(test)]
    fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }
}

/// What keeping `plan` (for `key`, reading `tables`) holds in memory, estimated: its SQL, its
/// nodes, their schemas and expressions, its constants (the optimizer folds
/// `repeat('x', 1000000)` into a megabyte), and its tables' metadata.
fn weight(key: &Key, plan: &LogicalPlan, tables: &[TableVersion]) -> usize {
    let mut weight = key.sql.len() + key.session.len();
    let _ = plan.apply_with_subqueries(|node| {
        let fields = node.schema().fields().len();
        weight = weight
            .saturating_add(NODE_BYTES)
            .saturating_add(fields.saturating_mul(FIELD_BYTES));
        node.apply_expressions(|e| {
            e.apply(|e| {
                weight = weight.saturating_add(NODE_BYTES);
                if let Expr::Literal(value, _) = e {
                    weight = weight.saturating_add(value.size());
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    });
    tables.iter().fold(weight, |weight, table| {
        weight.saturating_add(table.fragments.saturating_mul(FRAGMENT_BYTES))
    })
}

/// Whether `plan` is the same whenever it is optimized: no call whose value depends on when
/// or how often it is made (`now()`, folded to a constant by the optimizer; `random()`).
fn timeless(plan: &LogicalPlan) -> bool {
    let mut timeless = true;
    let _ = plan.apply_with_subqueries(|node| {
        node.apply_expressions(|e| {
            e.apply(|e| {
                if varies(e) {
                    timeless = false;
                    return Ok(TreeNodeRecursion::Stop);
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    });
    timeless
}

/// Whether `e` is a call whose value depends on when or how often it is made.
pub(super) fn varies(e: &Expr) -> bool {
    matches!(e, Expr::ScalarFunction(f) if f.func.signature().volatility != Volatility::Immutable)
}

/// The lake tables `plan` reads, at their versions; `None` if it reads anything else (a view
/// of the catalog, a table function's rows), whose freshness no version tells.
fn lake_tables(plan: &LogicalPlan) -> Option<Vec<TableVersion>> {
    let mut tables = Vec::new();
    let mut other = false;
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            let read = source_as_provider(&scan.source).ok().and_then(|provider| {
                super::search::lake_table(provider.as_ref())
                    .map(|lake| TableVersion::of(lake.table(), lake.pinned(), &lake.dataset()))
            });
            match read {
                // A table read twice (a self-join) is checked once.
                Some(read) if tables.contains(&read) => {}
                Some(read) => tables.push(read),
                None => {
                    other = true;
                    return Ok(TreeNodeRecursion::Stop);
                }
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    (!other).then_some(tables)
}

/// `plan` with its placeholders typed as the `values` bound to them (whatever the SQL
/// planner inferred): the optimizer then coerces them as it would those values written in.
pub(super) fn typed_placeholders(plan: LogicalPlan, values: &[ScalarValue]) -> Result<LogicalPlan> {
    plan.transform_up_with_subqueries(|node| {
        node.map_expressions(|e| {
            e.transform_up(|e| match e {
                Expr::Placeholder(Placeholder { id, field }) => {
                    let value = id
                        .strip_prefix('$')
                        .and_then(|n| n.parse::<usize>().ok())
                        .and_then(|n| n.checked_sub(1))
                        .and_then(|i| values.get(i));
                    let field = match value {
                        Some(value) => Some(std::sync::Arc::new(Field::new(
                            id.as_str(),
                            value.data_type(),
                            true,
                        ))),
                        // No value for it: refused when the values are bound.
                        None => field,
                    };
                    Ok(Transformed::yes(Expr::Placeholder(Placeholder {
                        id,
                        field,
                    })))
                }
                other => Ok(Transformed::no(other)),
            })
        })
    })
    .map(|t| t.data)
}

/// Whether `plan` can be optimized before its values are bound: not with a placeholder in a
/// `LIMIT` or `OFFSET`, which the optimizer needs as numbers (a search's k).
pub(super) fn binds_late(plan: &LogicalPlan) -> bool {
    let mut late = true;
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::Limit(limit) = node
            && [&limit.skip, &limit.fetch].into_iter().flatten().any(|e| {
                e.exists(|e| Ok(matches!(e, Expr::Placeholder(_))))
                    .unwrap_or(true)
            })
        {
            late = false;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    late
}

/// How values are bound into a kept plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Binding {
    /// As DataFusion binds them: every node's schema computed again, every expression
    /// simplified again.
    Recompute,
    /// Only the expressions that hold a placeholder replaced and simplified, every node keeping
    /// its schema. DataFusion computes each node's schema again from its expressions' names and
    /// types, and a name is its expression as text: a search's vector, 128 numbers formatted
    /// and thrown away (a twentieth of a search's CPU with the simplifier's pass). Used for a
    /// plan whose schemas binding its first values left as they were (below).
    InPlace,
}

impl Binding {
    /// [`Binding::InPlace`] if binding `values` in place into `optimized` gives the schemas
    /// `bound` (bound as DataFusion binds) has, node for node: the same names and types, and
    /// nullable wherever `bound` is. The placeholders are typed as the values and a plan is
    /// kept per types, so later values give the same types; a kept schema may say a column
    /// can be null where a value makes it cannot.
    ///
    /// The trial replaces the placeholders only (the simplifier keeps names and types): it
    /// folds no constants, so the statement's budget holds nothing twice.
    fn for_plan(optimized: &LogicalPlan, values: Vec<ScalarValue>, bound: &LogicalPlan) -> Self {
        let values = ParamValues::from(values);
        match bind_in_place(optimized.clone(), &values, None) {
            Ok(Some(in_place)) if same_schemas(&schemas(&in_place), &schemas(bound)) => {
                Self::InPlace
            }
            _ => Self::Recompute,
        }
    }
}

/// The schema of each node of `plan`, subqueries' included, in one order.
fn schemas(plan: &LogicalPlan) -> Vec<datafusion::common::DFSchemaRef> {
    let mut schemas = Vec::new();
    let _ = plan.apply_with_subqueries(|node| {
        schemas.push(Arc::clone(node.schema()));
        Ok(TreeNodeRecursion::Continue)
    });
    schemas
}

/// Whether `kept` and `bound` name and type the same columns, `kept` nullable wherever `bound`
/// is.
fn same_schemas(
    kept: &[datafusion::common::DFSchemaRef],
    bound: &[datafusion::common::DFSchemaRef],
) -> bool {
    kept.len() == bound.len()
        && kept.iter().zip(bound).all(|(kept, bound)| {
            kept.fields().len() == bound.fields().len()
                && kept.iter().zip(bound.iter()).all(|((kq, kf), (bq, bf))| {
                    kq == bq
                        && kf.name() == bf.name()
                        && kf.data_type() == bf.data_type()
                        && (kf.is_nullable() || !bf.is_nullable())
                })
        })
}

/// `optimized` (its parameters placeholders) with `values` bound as `binding` says, made the
/// statement's whose settings are `options` and budget is `budget`.
fn bind(
    optimized: LogicalPlan,
    values: Vec<ScalarValue>,
    options: Arc<ConfigOptions>,
    budget: &Budget,
    binding: Binding,
) -> Result<LogicalPlan> {
    let values = ParamValues::from(values);
    let plan = super::search::bind_searches(optimized, &values, budget)?;
    let plan = match binding {
        Binding::Recompute => simplify(plan.replace_params_with_values(&values)?, options)?,
        Binding::InPlace => {
            let rule = SimplifyExpressions::new();
            let config = OptimizerContext::new_with_config_options(Arc::clone(&options));
            match bind_in_place(plan.clone(), &values, Some((&rule, &config)))? {
                Some(bound) => bound,
                // A value its function takes its type from: bound as DataFusion binds.
                None => simplify(plan.replace_params_with_values(&values)?, options)?,
            }
        }
    };
    bounded::bind_statement(plan, budget)
}

/// `plan` with its placeholders replaced by `values` and the expressions of the nodes that held
/// them simplified by `simplifier` (the others were when the plan was optimized); schemas kept.
/// `None` if a node's output types may be other than its schema says ([`types_hold`]).
fn bind_in_place(
    plan: LogicalPlan,
    values: &ParamValues,
    simplifier: Option<(&SimplifyExpressions, &OptimizerContext)>,
) -> Result<Option<LogicalPlan>> {
    let holds = |e: &Expr| e.exists(|e| Ok(matches!(e, Expr::Placeholder(_))));
    let mut types_changed = false;
    let bound = plan.transform_up_with_subqueries(|node| {
        let mut held = false;
        node.apply_expressions(|e| {
            held = holds(e)?;
            Ok(if held {
                TreeNodeRecursion::Stop
            } else {
                TreeNodeRecursion::Continue
            })
        })?;
        if !held {
            return Ok(Transformed::no(node));
        }
        let names = NamePreserver::new(&node);
        let node = node
            .map_expressions(|e| {
                if !holds(&e)? {
                    return Ok(Transformed::no(e));
                }
                let name = names.save(&e);
                let e = e.transform_up(|e| match e {
                    Expr::Placeholder(Placeholder { id, .. }) => {
                        let (value, metadata) =
                            values.get_placeholders_with_values(&id)?.into_inner();
                        Ok(Transformed::yes(Expr::Literal(value, metadata)))
                    }
                    other => Ok(Transformed::no(other)),
                })?;
                Ok(e.update_data(|e| name.restore(e)))
            })?
            .data;
        let node = match simplifier {
            Some((rule, config)) => rule.rewrite(node, config)?.data,
            None => node,
        };
        if types_hold(&node) {
            Ok(Transformed::yes(node))
        } else {
            types_changed = true;
            Ok(Transformed::new(node, true, TreeNodeRecursion::Stop))
        }
    })?;
    Ok((!types_changed).then_some(bound.data))
}

/// Whether `node`'s output types are what its schema says now that values are bound in it. A
/// scalar function may take its return type from a constant argument's value (`round(d, $1)`
/// has the scale `$1` says): each call given one is asked its type with and without it. Nodes
/// whose output is their inputs' columns hold; any other kind, or a call that cannot say, does
/// not.
fn types_hold(node: &LogicalPlan) -> bool {
    let input = match node {
        LogicalPlan::Projection(p) => &p.input,
        LogicalPlan::Aggregate(a) => &a.input,
        LogicalPlan::Window(w) => &w.input,
        LogicalPlan::Filter(_)
        | LogicalPlan::Sort(_)
        | LogicalPlan::TableScan(_)
        | LogicalPlan::Join(_)
        | LogicalPlan::Limit(_) => return true,
        _ => return false,
    };
    let schema = input.schema();
    let mut holds = true;
    let _ = node.apply_expressions(|e| {
        e.apply(|e| {
            if let Expr::ScalarFunction(call) = e
                && call.args.iter().any(|a| matches!(a, Expr::Literal(..)))
                && !typed_without_values(call, schema)
            {
                holds = false;
                return Ok(TreeNodeRecursion::Stop);
            }
            Ok(TreeNodeRecursion::Continue)
        })
    });
    holds
}

/// Whether `call` has the same return type given its constant arguments' values as without
/// them.
fn typed_without_values(call: &ScalarFunction, schema: &DFSchema) -> bool {
    let fields: Result<Vec<FieldRef>> = call
        .args
        .iter()
        .map(|a| {
            Ok(Arc::new(Field::new(
                "",
                a.get_type(schema)?,
                a.nullable(schema)?,
            )))
        })
        .collect();
    let Ok(fields) = fields else {
        return false;
    };
    let given: Vec<Option<&ScalarValue>> = call
        .args
        .iter()
        .map(|a| match a {
            Expr::Literal(value, _) => Some(value),
            _ => None,
        })
        .collect();
    let unknown = vec![None; call.args.len()];
    let typed = |scalar_arguments: &[Option<&ScalarValue>]| {
        call.func
            .return_field_from_args(ReturnFieldArgs {
                arg_fields: &fields,
                scalar_arguments,
            })
            .map(|f| f.data_type().clone())
    };
    matches!((typed(&given), typed(&unknown)), (Ok(a), Ok(b)) if a == b)
}

/// `plan` with its expressions simplified by DataFusion's simplifier, as the optimizer
/// simplifies constants written in: a table's scan is given `id = 5`, which an index serves,
/// not `id = CAST(5 AS BIGINT)` nor `CAST(id AS BIGINT) = 5`. The simplifier evaluates calls
/// of constants: `options` carry the statement's budget, which they count against.
fn simplify(plan: LogicalPlan, options: Arc<ConfigOptions>) -> Result<LogicalPlan> {
    let rule = SimplifyExpressions::new();
    let config = OptimizerContext::new_with_config_options(options);
    plan.transform_up_with_subqueries(|node| rule.rewrite(node, &config))
        .map(|t| t.data)
}

impl LakeFlightSql {
    /// Plans a statement handle's `sql` in `ctx` (a statement's session of this endpoint, with
    /// `options`) with its bound `params`.
    pub(super) async fn plan_statement(
        &self,
        ctx: &SessionContext,
        sql: &str,
        params: Option<Vec<ScalarValue>>,
        options: &SessionOptions,
    ) -> Result<Statement, Status> {
        self.prepared
            .plan(self.engine(), ctx, sql, params, options)
            .await
    }
}

impl PreparedPlans {
    /// Plans `sql` in `ctx` (a statement's session over `engine`, with `options`) with its
    /// bound `params`: a prepared read from its kept plan when the tables it reads have not
    /// moved, else planned, optimized and kept.
    pub(super) async fn plan(
        &self,
        engine: &Engine,
        ctx: &SessionContext,
        sql: &str,
        params: Option<Vec<ScalarValue>>,
        options: &SessionOptions,
    ) -> Result<Statement, Status> {
        let Some(values) = params else {
            return Ok(match sql::plan(ctx, sql, None).await? {
                Planned::Read(plan) => Statement::Read(ReadPlan::Unoptimized(plan)),
                Planned::BoundRead { plan, values } => Statement::Read(ReadPlan::Unoptimized(
                    plan.with_param_values(values).map_err(sql::status)?,
                )),
                Planned::Write(write) => Statement::Write(write),
            });
        };
        let settings = Arc::clone(ctx.state_ref().read().config_options());
        let budget = bounded::budget_in(&settings)
            .cloned()
            .ok_or_else(|| Status::internal("a statement's session has no budget"))?;
        let key = Key::new(sql, options, &values);
        if let Some((kept, binding)) = self.get(&key, engine).await {
            let plan = bind(kept, values, settings, &budget, binding).map_err(sql::status)?;
            return Ok(Statement::Read(ReadPlan::Optimized(plan)));
        }
        let (plan, values) = match sql::plan(ctx, sql, Some(values)).await? {
            Planned::BoundRead { plan, values } => (plan, values),
            Planned::Read(plan) => return Ok(Statement::Read(ReadPlan::Unoptimized(plan))),
            Planned::Write(write) => return Ok(Statement::Write(write)),
        };
        // Read in place: `ctx.state()` would copy the session's function registries.
        let optimized = ctx.state_ref().read().optimize(&plan);
        match optimized {
            Ok(optimized) => {
                let bound = bind(
                    optimized.clone(),
                    values.clone(),
                    Arc::clone(&settings),
                    &budget,
                    Binding::Recompute,
                );
                // Values the statement refuses leave nothing to compare with: kept all the same
                // (the next values may be good), bound as DataFusion binds.
                let binding = match &bound {
                    Ok(bound) => Binding::for_plan(&optimized, values, bound),
                    Err(_) => Binding::Recompute,
                };
                self.put(key, &plan, &optimized, binding);
                Ok(Statement::Read(ReadPlan::Optimized(
                    bound.map_err(sql::status)?,
                )))
            }
            // Not a plan DataFusion optimizes with placeholders in it: the values are bound
            // first, as in a statement written with them (an error of the statement's own
            // comes again there).
            Err(_) => Ok(Statement::Read(ReadPlan::Unoptimized(
                plan.with_param_values(values).map_err(sql::status)?,
            ))),
        }
    }
}

#[cfg(test)]
mod tests;
