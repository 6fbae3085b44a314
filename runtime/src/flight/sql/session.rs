//! The DataFusion session of one statement: no object stores (SQL reaches only lake tables),
//! lake's catalog resolving tables by name, and the warehouse listed only for a statement that
//! enumerates it.

use std::sync::Arc;

use datafusion::catalog::{CatalogProviderList, MemoryCatalogProviderList};
use datafusion::error::DataFusionError;
use datafusion::execution::disk_manager::{DiskManager, DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::memory_pool::{MemoryLimit, MemoryPool, MemoryReservation};
use datafusion::execution::object_store::ObjectStoreRegistry;
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::execution::{SessionState, SessionStateBuilder, TaskContext};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::parser::Statement as DFStatement;
use tonic::Status;

use super::super::bounded::{Budget, StatementBudget};
use super::super::cancel::YieldAboveEveryOperator;
use super::super::catalog::{CATALOG, LakeCatalog};
use super::super::options::SessionOptions;
use super::super::repeat::BoundRepetition;
use super::super::search::{LakeSettings, NearestNeighbours, Unseal};
use super::status;
use crate::engine::Engine;

/// DataFusion's object-store registry in lake sessions: empty, and nothing can be added.
/// Lance tables bring their own store; DataFusion's default registry would serve `file://` to
/// `COPY … TO`, `CREATE EXTERNAL TABLE` and every file-reading path — the whole disk.
#[derive(Debug)]
struct NoObjectStores;

impl ObjectStoreRegistry for NoObjectStores {
    fn register_store(
        &self,
        _url: &url::Url,
        _store: Arc<dyn datafusion::object_store::ObjectStore>,
    ) -> Option<Arc<dyn datafusion::object_store::ObjectStore>> {
        None
    }

    fn get_store(
        &self,
        url: &url::Url,
    ) -> datafusion::error::Result<Arc<dyn datafusion::object_store::ObjectStore>> {
        Err(DataFusionError::Plan(format!(
            "{} is outside the lake: SQL reaches only lake tables (files go through the managed stage)",
            url.scheme()
        )))
    }
}

/// What one statement's operators run in: `memory` (its pool), the endpoint's `disk`, and no
/// object stores.
pub(in crate::flight) fn runtime_env(
    memory: Arc<dyn datafusion::execution::memory_pool::MemoryPool>,
    disk: Arc<DiskManager>,
) -> Result<Arc<datafusion::execution::runtime_env::RuntimeEnv>, DataFusionError> {
    let mut runtime = RuntimeEnvBuilder::new()
        .with_object_store_registry(Arc::new(NoObjectStores))
        .with_memory_pool(memory)
        // No disk manager of its own (DataFusion's default: the system temp directory, 100 GB
        // per statement): the endpoint's, with one budget for all statements.
        .with_disk_manager_builder(
            DiskManagerBuilder::default().with_mode(DiskManagerMode::Disabled),
        )
        .build()?;
    runtime.disk_manager = disk;
    Ok(Arc::new(runtime))
}

/// The physical optimizer's rules: DataFusion's (see [`super::one_partition`]); then the plans
/// searches keep as Lance made them put back in place (`Unseal`); then lake's own, over every
/// operator: bounds on what repeats rows, a yield point above each.
pub(in crate::flight) fn physical_rules() -> Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>> {
    let mut rules = super::one_partition::datafusion_rules();
    rules.push(Arc::new(Unseal));
    rules.push(Arc::new(BoundRepetition));
    rules.push(Arc::new(YieldAboveEveryOperator));
    rules
}

/// What every statement's session of one endpoint shares, built once: DataFusion's functions
/// (each wrapped to count against the budget of the statement that calls it), lake's rules and
/// functions, no object stores. Building it took a fifth of a `SELECT 1`'s server time when
/// every statement built its own (docs/performance.md); a statement's session is a copy.
pub(in crate::flight) struct Sessions {
    /// Holds no budget, no catalog and a runtime whose pool refuses every reservation: a path
    /// that used it instead of a statement's copy fails, never runs unbounded.
    shared: SessionState,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions").finish_non_exhaustive()
    }
}

impl Sessions {
    /// The sessions of an endpoint (`disk`: where the shared session would spill, though it
    /// runs nothing).
    pub(in crate::flight) fn new(disk: Arc<DiskManager>) -> Result<Self, DataFusionError> {
        let config = SessionConfig::new()
            .with_default_catalog_and_schema(CATALOG, "default")
            .with_create_default_catalog_and_schema(false)
            .with_information_schema(true)
            .with_option_extension(LakeSettings::default());
        let runtime = runtime_env(Arc::new(NoStatement::default()), disk)?;
        let mut builder = SessionStateBuilder::new()
            .with_config(config)
            .with_runtime_env(runtime)
            .with_default_features()
            .with_physical_optimizer_rules(physical_rules())
            .with_optimizer_rule(Arc::new(NearestNeighbours))
            .with_optimizer_rule(Arc::new(super::super::modulo::ConstantRemainder));
        // `contains_tokens(col, 'words')`: a filter Lance answers from the column's inverted
        // index.
        if let Some(functions) = builder.scalar_functions() {
            functions.push(Arc::new(super::super::search::contains_tokens()));
        }
        let shared = super::super::bounded::counting_session(builder).build();
        Ok(Self { shared })
    }

    /// The session of one statement over `engine`'s warehouse, catalog `lake`: its operators
    /// and its functions draw on `memory` (its pool), its spill files on `disk` (the
    /// endpoint's); its functions stop at `deadline` (`time_limit` after the statement was
    /// admitted).
    #[allow(clippy::too_many_arguments)]
    pub(in crate::flight) fn statement(
        &self,
        engine: &Engine,
        memory: Arc<dyn MemoryPool>,
        disk: Arc<DiskManager>,
        deadline: std::time::Instant,
        time_limit: std::time::Duration,
        options: &SessionOptions,
    ) -> Result<SessionContext, Status> {
        let budget = Budget::new(memory.clone(), deadline, time_limit);
        let runtime = runtime_env(memory, disk).map_err(status)?;
        let mut state = self.shared.clone();
        let config = state.config_mut();
        // Unqualified names resolve in the session's schema (see `options.rs`).
        config.options_mut().catalog.default_schema = options
            .schema()
            .map_or("default", |s| s.as_str())
            .to_owned();
        config.set_extension(Arc::new(options.clone()));
        config.set_extension(Arc::new(StatementRuntime(runtime)));
        config
            .options_mut()
            .extensions
            .insert(StatementBudget::of(budget));
        // The session's settings were checked when they were set and when their cookie was
        // read. They are lake's (`lake.*`, read by lake's rules): no DataFusion function reads
        // them, so none is refreshed as a DataFusion `SET` would (`with_updated_config`).
        for (name, value) in options.settings() {
            config
                .options_mut()
                .set(name, value)
                .map_err(|e| Status::invalid_argument(format!("session setting {name}: {e}")))?;
        }
        // Its start time, and its options for expressions planned outside a plan (a table
        // function's constant arguments).
        state.mark_start_execution();
        // A catalog list of its own: a copy shares the shared session's, and a statement that
        // lists the warehouse replaces its catalog.
        let catalogs = MemoryCatalogProviderList::new();
        catalogs.register_catalog(CATALOG.to_owned(), Arc::new(LakeCatalog::unlisted(engine)));
        state.register_catalog_list(Arc::new(catalogs));
        Ok(SessionContext::new_with_state(state))
    }
}

/// The state of the statement of `ctx`, to execute it: taken whole when nothing else holds the
/// context (a kept plan redeemed by its `DoGet`), else copied (as `SessionContext::state`
/// does: every function registry cloned); marked as starting now either way.
pub(in crate::flight) fn into_state(ctx: SessionContext) -> SessionState {
    let shared = ctx.state_ref();
    drop(ctx);
    let mut state = match Arc::try_unwrap(shared) {
        Ok(only) => only.into_inner(),
        Err(shared) => shared.read().clone(),
    };
    state.mark_start_execution();
    state
}

/// What a statement's operators run in (its memory pool), kept in its session's configuration:
/// a statement's session is a copy of a shared one, whose runtime it cannot replace.
#[derive(Debug)]
struct StatementRuntime(Arc<RuntimeEnv>);

/// Where the operators of the statement of `state` run: its own runtime. A session that is
/// not a statement's has none to give (the shared session's pool would refuse reservations but
/// not count what operators take without asking).
pub(crate) fn task_context(state: &SessionState) -> Result<Arc<TaskContext>, DataFusionError> {
    let runtime = state
        .config()
        .get_extension::<StatementRuntime>()
        .ok_or_else(|| {
            DataFusionError::Internal(
                "a plan was executed outside a statement: there is no memory pool to run it in"
                    .to_owned(),
            )
        })?;
    Ok(Arc::new(
        TaskContext::from(state).with_runtime(runtime.0.clone()),
    ))
}

/// The memory pool of the session statements share: it refuses every reservation, since no
/// statement's operators should run in it (see [`task_context`]).
#[derive(Debug, Default)]
struct NoStatement {
    grown: std::sync::atomic::AtomicUsize,
}

impl std::fmt::Display for NoStatement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl MemoryPool for NoStatement {
    fn name(&self) -> &str {
        "lake: no statement"
    }

    fn grow(&self, _reservation: &MemoryReservation, additional: usize) {
        self.grown
            .fetch_add(additional, std::sync::atomic::Ordering::Relaxed);
    }

    fn shrink(&self, _reservation: &MemoryReservation, shrink: usize) {
        self.grown
            .fetch_sub(shrink, std::sync::atomic::Ordering::Relaxed);
    }

    fn try_grow(
        &self,
        _reservation: &MemoryReservation,
        additional: usize,
    ) -> Result<(), DataFusionError> {
        Err(DataFusionError::Internal(format!(
            "{additional} bytes were asked of a session no statement owns: there is no memory \
             budget to count them against"
        )))
    }

    fn reserved(&self) -> usize {
        self.grown.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn memory_limit(&self) -> MemoryLimit {
        MemoryLimit::Finite(0)
    }
}

/// Distinct tables one statement may name: each is looked up in the manifest store while the
/// statement is planned, so the count is what a client could make the server do for nothing.
pub(in crate::flight) const MAX_TABLE_REFERENCES: usize = 256;

/// Whether a statement reads `information_schema`, directly or as a `SHOW` (only such a
/// statement needs the warehouse listed; one that cannot be resolved is listed too), after
/// refusing a statement naming more than [`MAX_TABLE_REFERENCES`] tables.
pub(super) fn enumerates_the_warehouse(statement: &DFStatement) -> Result<bool, Status> {
    match datafusion::sql::resolve::resolve_table_references(statement, true) {
        Ok((tables, _)) if tables.len() > MAX_TABLE_REFERENCES => {
            Err(Status::invalid_argument(format!(
                "the statement names {} tables; at most {MAX_TABLE_REFERENCES}",
                tables.len()
            )))
        }
        Ok((tables, _)) => Ok(tables.iter().any(|t| {
            t.schema() == Some(datafusion::catalog::information_schema::INFORMATION_SCHEMA)
        })),
        Err(_) => Ok(true),
    }
}

/// Replaces `ctx`'s catalog with one listing the warehouse as it is now.
pub(super) async fn list_the_warehouse(ctx: &SessionContext) -> Result<(), Status> {
    let Some(catalog) = ctx.catalog(CATALOG) else {
        return Ok(());
    };
    let catalog: Arc<dyn std::any::Any + Send + Sync> = catalog;
    let Ok(catalog) = catalog.downcast::<LakeCatalog>() else {
        return Ok(());
    };
    let listed = LakeCatalog::listed(catalog.engine())
        .await
        .map_err(|e| Status::unavailable(format!("cannot list the warehouse: {e}")))?;
    ctx.register_catalog(CATALOG, Arc::new(listed));
    Ok(())
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::Int64Array;

    use super::super::testing::Endpoint;
    use super::*;

    /// The first value of `sql` run as lake runs a read: planned in `ctx`, executed in its
    /// statement's runtime.
    async fn first_value(ctx: &SessionContext, sql: &str) -> Result<i64, DataFusionError> {
        let state = ctx.state();
        let plan = state.create_logical_plan(sql).await?;
        let physical = state.create_physical_plan(&plan).await?;
        let batches = datafusion::physical_plan::collect(physical, task_context(&state)?).await?;
        let values = batches
            .iter()
            .find(|b| b.num_rows() > 0)
            .and_then(|b| b.column(0).as_any().downcast_ref::<Int64Array>())
            .ok_or_else(|| DataFusionError::Internal(format!("{sql} gave {batches:?}")))?;
        Ok(values.value(0))
    }

    /// Statements made from one shared session, alive at once, each count against their own
    /// budget: the same calls refused in one fit in the other, before and after it.
    #[tokio::test]
    async fn statements_of_one_endpoint_count_against_their_own_budgets() {
        let endpoint = Endpoint::new();
        let statement = |bytes: usize| endpoint.statement(bytes);
        // Less than one sketch of `approx_distinct` (16 KiB, claimed three times over).
        let small = statement(32 * 1024);
        let large = statement(1024 * 1024 * 1024);
        // A scalar function (counted by the call) and a sketch (claimed by its accumulator).
        for (sql, value) in [
            (
                "SELECT CAST(length(repeat('x', 4000000)) AS BIGINT)",
                4_000_000,
            ),
            (
                "SELECT CAST(approx_distinct(v) AS BIGINT) FROM generate_series(1, 10) AS t(v)",
                10,
            ),
        ] {
            let refused = first_value(&small, sql).await;
            let counted = first_value(&large, sql).await;
            let refused_again = first_value(&small, sql).await;
            match counted {
                Ok(v) => assert_eq!(v, value, "{sql} in the large budget"),
                Err(e) => panic!("{sql} was refused in the large budget: {e}"),
            }
            for refused in [refused, refused_again] {
                match refused {
                    Err(e) => assert!(
                        e.to_string().contains("MiB"),
                        "{sql} in the small budget: {e}"
                    ),
                    Ok(v) => panic!("{sql} ran in the small budget: {v}"),
                }
            }
        }
    }

    /// A table function's arguments are folded while the SQL is planned, before any rule binds
    /// their calls: the call finds the statement's budget among the options it is made with.
    #[tokio::test]
    async fn table_function_arguments_count_against_the_statement() {
        let endpoint = Endpoint::new();
        let statement = |bytes: usize| endpoint.statement(bytes);
        let sql = "SELECT count(*) FROM generate_series(1, length(repeat('x', 4000000)) / 1000000)";
        match first_value(&statement(1024 * 1024 * 1024), sql).await {
            Ok(rows) => assert_eq!(rows, 4),
            Err(e) => panic!("{sql} was refused in a large budget: {e}"),
        }
        // Refused in a small one (DataFusion leaves the refused constant unfolded, and the
        // table function then refuses it as not a number).
        let e = first_value(&statement(32 * 1024), sql)
            .await
            .expect_err("a table function's argument past the budget");
        assert!(!e.to_string().contains("outside a statement"), "{e}");
    }

    /// A `DoGet` takes the state of the context its plan was kept with instead of copying it
    /// (the registries' names stay where they were), unless another holder of the context
    /// remains, which keeps its own.
    #[test]
    fn a_context_held_once_gives_its_state_whole() {
        let name_at = |state: &SessionState| {
            state
                .scalar_functions()
                .keys()
                .find(|k| k.as_str() == "abs")
                .map(|k| k.as_ptr() as usize)
        };
        let ctx = SessionContext::new();
        let before = name_at(&ctx.state_ref().read());
        assert!(before.is_some());
        assert_eq!(name_at(&into_state(ctx)), before);

        let ctx = SessionContext::new();
        let kept = ctx.clone();
        let before = name_at(&ctx.state_ref().read());
        assert_ne!(name_at(&into_state(ctx)), before);
        assert_eq!(name_at(&kept.state_ref().read()), before);
    }

    /// The shared session counts nothing of its own: a plan made in it, not in a statement's
    /// copy, is refused, and nothing runs in its runtime (an error, never an uncounted run).
    #[tokio::test]
    async fn the_shared_session_plans_and_runs_nothing() {
        let sessions = Endpoint::new().sessions;
        let shared = SessionContext::new_with_state(sessions.shared.clone());
        let refused = first_value(&shared, "SELECT length(repeat('x', 10))").await;
        let e = refused.expect_err("a call in the shared session");
        assert!(e.to_string().contains("outside a statement"), "{e}");
        let e = task_context(&sessions.shared).expect_err("a task of the shared session");
        assert!(e.to_string().contains("outside a statement"), "{e}");
    }
}
