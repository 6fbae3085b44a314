//! What the tests of this module's files share: a session built as lake builds a statement's,
//! and a statement's result as text.

use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::memory_pool::{GreedyMemoryPool, MemoryPool};
use datafusion::prelude::SessionContext;

use super::Budget;

/// A session of `builder` with every function counted against `pool` (and a minute to run),
/// made as lake makes a statement's: a copy of a shared session whose functions are bound to no
/// statement, given the statement's budget among its options.
pub(super) fn counted(builder: SessionStateBuilder, pool: Arc<dyn MemoryPool>) -> SessionContext {
    let shared = super::counting_session(builder).build();
    let mut state = shared.clone();
    state
        .config_mut()
        .options_mut()
        .extensions
        .insert(super::StatementBudget::of(budget_of(pool)));
    SessionContext::new_with_state(state)
}

/// A statement's budget of `bytes` (and a minute to run).
pub(super) fn budget(bytes: usize) -> Budget {
    budget_of(Arc::new(GreedyMemoryPool::new(bytes)))
}

fn budget_of(pool: Arc<dyn MemoryPool>) -> Budget {
    Budget::new(
        pool,
        Instant::now() + Duration::from_secs(60),
        Duration::from_secs(60),
    )
}

/// What `sql` gives in `ctx`: its rows as a table, or `error: …`.
pub(super) async fn run(ctx: &SessionContext, sql: &str) -> String {
    let result = match ctx.sql(sql).await {
        Ok(df) => df.collect().await,
        Err(e) => Err(e),
    };
    match result {
        Ok(batches) => pretty_format_batches(&batches)
            .map(|t| t.to_string())
            .unwrap_or_else(|e| e.to_string()),
        Err(e) => format!("error: {e}"),
    }
}
