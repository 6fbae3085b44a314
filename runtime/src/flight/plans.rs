//! Plans made by GetFlightInfo, kept for the DoGet that redeems their ticket.
//!
//! A client's GetFlightInfo plans its statement (it must, to report the schema); its DoGet then
//! runs the same plan instead of building a session and planning again. The ticket names the
//! kept plan by a random id inside its signed handle, and still carries the statement: a ticket
//! redeemed twice, after [`TTL`], or on a restarted process is planned again from its SQL. Kept
//! plans are bounded in number and age (a plan holds its tables' opened metadata).
//!
//! CancelFlightInfo cancels a planned statement by the same id: a DoGet streaming its rows ends
//! with CANCELLED (its work stops with the stream), and a kept plan not yet redeemed is dropped,
//! its DoGet refused.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow_flight::error::FlightError;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use futures::StreamExt;
use futures::stream::{AbortHandle, Abortable, BoxStream};
use tonic::Status;

/// How long a plan waits for its DoGet: clients redeem a ticket at once.
pub(super) const TTL: Duration = Duration::from_secs(30);
/// Plans kept at most, per endpoint.
pub(super) const CAPACITY: usize = 256;

#[derive(Default)]
pub(super) struct PlanCache {
    entries: Mutex<HashMap<u64, Kept>>,
    /// DoGets streaming a plan's rows, by plan id.
    running: Mutex<HashMap<u64, AbortHandle>>,
    /// Plans cancelled before their DoGet, until [`TTL`] has passed.
    cancelled: Mutex<HashMap<u64, Instant>>,
}

/// What CancelFlightInfo did to a planned statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cancel {
    /// It was running or waiting for its DoGet, and will not return rows.
    Cancelled,
    /// It is not running (finished, or never redeemed within [`TTL`]).
    NotCancellable,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
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

    /// The plan kept under `id`, once: a second redemption plans again. A cancelled plan is
    /// refused.
    pub(super) fn take(&self, id: u64) -> Result<Option<(SessionContext, LogicalPlan)>, Status> {
        {
            let mut cancelled = lock(&self.cancelled);
            cancelled.retain(|_, at| at.elapsed() < TTL);
            if cancelled.contains_key(&id) {
                return Err(Status::cancelled(
                    "the query was cancelled (CancelFlightInfo)",
                ));
            }
        }
        let mut entries = lock(&self.entries);
        let Some(kept) = entries.remove(&id) else {
            return Ok(None);
        };
        Ok((kept.at.elapsed() < TTL).then_some((kept.ctx, kept.plan)))
    }

    /// `rows`, the DoGet stream of plan `id`, cancellable until it ends or is dropped: once
    /// cancelled it stops (dropping the query's work) and ends with CANCELLED, never as if
    /// complete.
    pub(super) fn cancellable(
        self: &Arc<Self>,
        id: u64,
        rows: BoxStream<'static, Result<arrow::record_batch::RecordBatch, FlightError>>,
    ) -> BoxStream<'static, Result<arrow::record_batch::RecordBatch, FlightError>> {
        let (abort, registration) = AbortHandle::new_pair();
        lock(&self.running).insert(id, abort.clone());
        let running = Running {
            cache: Arc::clone(self),
            id,
        };
        let end = futures::stream::once(async move {
            let _running = running;
            abort.is_aborted()
        })
        .filter_map(|aborted| async move {
            aborted.then(|| {
                Err(FlightError::Tonic(Box::new(Status::cancelled(
                    "the query was cancelled (CancelFlightInfo)",
                ))))
            })
        });
        Abortable::new(rows, registration).chain(end).boxed()
    }

    /// Cancels plan `id`: its running DoGet, or its kept plan.
    pub(super) fn cancel(&self, id: u64) -> Cancel {
        if let Some(abort) = lock(&self.running).remove(&id) {
            abort.abort();
            return Cancel::Cancelled;
        }
        if lock(&self.entries).remove(&id).is_some() {
            lock(&self.cancelled).insert(id, Instant::now());
            return Cancel::Cancelled;
        }
        Cancel::NotCancellable
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.lock().unwrap().len()
    }
}

/// A DoGet of a kept plan, registered while its stream lives.
struct Running {
    cache: Arc<PlanCache>,
    id: u64,
}

impl Drop for Running {
    fn drop(&mut self) {
        lock(&self.cache.running).remove(&self.id);
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
        assert!(cache.take(id).unwrap().is_some());
        assert!(cache.take(id).unwrap().is_none());
        assert!(cache.take(id ^ 1).unwrap().is_none());
    }

    #[tokio::test]
    async fn a_cancelled_plan_is_refused_and_a_running_one_ends_cancelled() {
        let cache = Arc::new(PlanCache::default());
        let ctx = SessionContext::new();
        let waiting = cache.put(ctx.clone(), plan(&ctx).await);
        assert_eq!(cache.cancel(waiting), Cancel::Cancelled);
        match cache.take(waiting) {
            Err(refused) => assert_eq!(refused.code(), tonic::Code::Cancelled),
            Ok(kept) => panic!("a cancelled plan was redeemed: {}", kept.is_some()),
        }

        let running = 7;
        let rows = futures::stream::pending().boxed();
        let mut stream = cache.cancellable(running, rows);
        assert_eq!(cache.cancel(running), Cancel::Cancelled);
        match stream.next().await {
            Some(Err(FlightError::Tonic(status))) => {
                assert_eq!(status.code(), tonic::Code::Cancelled)
            }
            other => panic!("a cancelled stream ended with {other:?}"),
        }
        assert!(stream.next().await.is_none());
        drop(stream);
        assert_eq!(cache.cancel(running), Cancel::NotCancellable, "finished");
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
        assert!(
            cache.take(first).unwrap().is_none(),
            "the oldest plan was kept"
        );
    }
}
