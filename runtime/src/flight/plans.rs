//! Plans made by GetFlightInfo, kept for the DoGet that redeems their ticket.
//!
//! A client's GetFlightInfo plans its statement (it must, to report the schema); its DoGet then
//! runs the same plan instead of building a session and planning again. The ticket names the
//! kept plan by a random id inside its signed handle, and still carries the statement: a ticket
//! redeemed twice, after [`TTL`], or on a restarted process is planned again from its SQL. Kept
//! plans are bounded in number and age (a plan holds its tables' opened metadata).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;

/// How long a plan waits for its DoGet: clients redeem a ticket at once.
pub(super) const TTL: Duration = Duration::from_secs(30);
/// Plans kept at most, per endpoint.
pub(super) const CAPACITY: usize = 256;

#[derive(Default)]
pub(super) struct PlanCache {
    entries: Mutex<HashMap<u64, Kept>>,
}

struct Kept {
    at: Instant,
    ctx: SessionContext,
    plan: LogicalPlan,
}

impl std::fmt::Debug for PlanCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PlanCache(..)")
    }
}

impl PlanCache {
    /// Keeps `plan` (made in `ctx`) and returns its id. Expired plans are dropped first; when
    /// full, the oldest goes.
    pub(super) fn put(&self, ctx: SessionContext, plan: LogicalPlan) -> u64 {
        let id = uuid::Uuid::new_v4().as_u64_pair().0;
        let now = Instant::now();
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.retain(|_, kept| now.duration_since(kept.at) < TTL);
        if entries.len() >= CAPACITY
            && let Some(oldest) = entries.iter().min_by_key(|(_, k)| k.at).map(|(id, _)| *id)
        {
            entries.remove(&oldest);
        }
        entries.insert(id, Kept { at: now, ctx, plan });
        id
    }

    /// The plan kept under `id`, once: a second redemption plans again.
    pub(super) fn take(&self, id: u64) -> Option<(SessionContext, LogicalPlan)> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let kept = entries.remove(&id)?;
        (kept.at.elapsed() < TTL).then_some((kept.ctx, kept.plan))
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.lock().unwrap().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn plan(ctx: &SessionContext) -> LogicalPlan {
        ctx.state().create_logical_plan("SELECT 1").await.unwrap()
    }

    #[tokio::test]
    async fn a_plan_is_redeemed_once() {
        let cache = PlanCache::default();
        let ctx = SessionContext::new();
        let id = cache.put(ctx.clone(), plan(&ctx).await);
        assert!(cache.take(id).is_some());
        assert!(cache.take(id).is_none());
        assert!(cache.take(id ^ 1).is_none());
    }

    #[tokio::test]
    async fn the_cache_is_bounded() {
        let cache = PlanCache::default();
        let ctx = SessionContext::new();
        let first = cache.put(ctx.clone(), plan(&ctx).await);
        for _ in 0..CAPACITY + 10 {
            cache.put(ctx.clone(), plan(&ctx).await);
        }
        assert_eq!(cache.len(), CAPACITY);
        assert!(cache.take(first).is_none(), "the oldest plan was kept");
    }
}
