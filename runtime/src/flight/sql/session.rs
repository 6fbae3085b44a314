//! The DataFusion session of one statement: no object stores (SQL reaches only lake tables),
//! lake's catalog resolving tables by name, and the warehouse listed only for a statement that
//! enumerates it.

use std::sync::Arc;

use datafusion::error::DataFusionError;
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::disk_manager::{DiskManager, DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::object_store::ObjectStoreRegistry;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::parser::Statement as DFStatement;
use tonic::Status;

use super::super::bounded::Budget;
use super::super::cancel::YieldAboveEveryOperator;
use super::super::catalog::{CATALOG, LakeCatalog};
use super::super::options::SessionOptions;
use super::super::repeat::BoundRepetition;
use super::super::search::{LakeSettings, NearestNeighbours};
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

/// A DataFusion session over `engine`'s warehouse, catalog `lake`: its operators and its
/// functions draw on `memory` (one statement's pool), its spill files on the endpoint's `disk`;
/// its functions stop at `deadline` (`time_limit` after the statement was admitted).
pub(crate) async fn session(
    engine: &Engine,
    memory: Arc<dyn datafusion::execution::memory_pool::MemoryPool>,
    disk: Arc<DiskManager>,
    deadline: std::time::Instant,
    time_limit: std::time::Duration,
    options: &SessionOptions,
) -> Result<SessionContext, Status> {
    let budget = Budget::new(memory.clone(), deadline, time_limit);
    // Unqualified names resolve in the session's schema (see `options.rs`).
    let schema = options.schema().map_or("default", |s| s.as_str());
    let mut config = SessionConfig::new()
        .with_default_catalog_and_schema(CATALOG, schema)
        .with_extension(Arc::new(options.clone()))
        .with_create_default_catalog_and_schema(false)
        .with_information_schema(true)
        // What plans made outside the optimizer (a DELETE's predicate) count against.
        .with_extension(Arc::new(budget.clone()))
        .with_option_extension(LakeSettings::default());
    // The session's settings were checked when they were set and when their cookie was read.
    for (name, value) in options.settings() {
        config
            .options_mut()
            .set(name, value)
            .map_err(|e| Status::invalid_argument(format!("session setting {name}: {e}")))?;
    }
    let runtime = runtime_env(memory.clone(), disk).map_err(status)?;
    let mut builder = SessionStateBuilder::new()
        .with_config(config)
        .with_runtime_env(runtime)
        .with_default_features()
        .with_optimizer_rule(Arc::new(NearestNeighbours))
        .with_optimizer_rule(Arc::new(super::super::modulo::ConstantRemainder))
        .with_physical_optimizer_rule(Arc::new(BoundRepetition))
        .with_physical_optimizer_rule(Arc::new(YieldAboveEveryOperator));
    // `contains_tokens(col, 'words')`: a filter Lance answers from the column's inverted index.
    if let Some(functions) = builder.scalar_functions() {
        functions.push(Arc::new(super::super::search::contains_tokens()));
    }
    let state = super::super::bounded::counted_session(builder, &budget).build();
    let ctx = SessionContext::new_with_state(state);
    // Tables resolve when a statement names them; the warehouse is listed only for a
    // statement that enumerates it (see `plan`).
    ctx.register_catalog(CATALOG, Arc::new(LakeCatalog::unlisted(engine)));
    Ok(ctx)
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
