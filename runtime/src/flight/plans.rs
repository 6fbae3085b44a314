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
use datafusion::prelude::SessionContext;
use futures::StreamExt;
use futures::stream::{AbortHandle, AbortRegistration, Abortable, BoxStream};
use tonic::Status;

use super::prepared::ReadPlan;

/// How long a plan waits for its DoGet: clients redeem a ticket at once.
pub(super) const TTL: Duration = Duration::from_secs(30);
/// Plans kept at most, per endpoint.
pub(super) const CAPACITY: usize = 256;

#[derive(Default)]
pub(super) struct PlanCache {
    /// One lock over kept, running and cancelled plans: a cancel sees each plan in exactly one
    /// of them.
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    entries: HashMap<u64, Kept>,
    /// DoGets of a plan id that have started, each with its run number (a ticket redeemed twice
    /// runs twice) and the handle that aborts its stream.
    running: HashMap<u64, (u64, AbortHandle)>,
    /// Plans cancelled before their DoGet, until [`TTL`] has passed (at most [`CAPACITY`]).
    cancelled: HashMap<u64, Instant>,
    runs: u64,
}

impl State {
    fn trim(&mut self) {
        self.cancelled.retain(|_, at| at.elapsed() < TTL);
    }
}

struct Kept {
    at: Instant,
    ctx: SessionContext,
    plan: ReadPlan,
}

/// What CancelFlightInfo did to a planned statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cancel {
    /// It was running or waiting for its DoGet, and will not return rows.
    Cancelled,
    /// It is not running (finished, or never redeemed within [`TTL`]).
    NotCancellable,
}

/// A DoGet of plan `id`, registered from the moment it starts (before it plans or executes), so
/// a cancel at any point stops it; deregistered when dropped.
pub(super) struct Run {
    cache: Arc<PlanCache>,
    id: u64,
    run: u64,
    abort: AbortHandle,
    registration: Option<AbortRegistration>,
}

impl Drop for Run {
    fn drop(&mut self) {
        let mut state = self.cache.lock();
        if state
            .running
            .get(&self.id)
            .is_some_and(|(run, _)| *run == self.run)
        {
            state.running.remove(&self.id);
        }
    }
}

type Rows = BoxStream<'static, Result<arrow::record_batch::RecordBatch, FlightError>>;

impl std::fmt::Debug for PlanCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PlanCache(..)")
    }
}

impl PlanCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `plan` (made in `ctx`) and returns its id. Expired plans are dropped first; when
    /// full, the oldest goes.
    pub(super) fn put(&self, ctx: SessionContext, plan: ReadPlan) -> u64 {
        let id = uuid::Uuid::new_v4().as_u64_pair().0;
        let now = Instant::now();
        let mut state = self.lock();
        state
            .entries
            .retain(|_, kept| now.duration_since(kept.at) < TTL);
        if state.entries.len() >= CAPACITY
            && let Some(oldest) = state
                .entries
                .iter()
                .min_by_key(|(_, k)| k.at)
                .map(|(id, _)| *id)
        {
            state.entries.remove(&oldest);
        }
        state.entries.insert(id, Kept { at: now, ctx, plan });
        id
    }

    /// Starts the DoGet of plan `id`: the plan kept for it, once (a second redemption plans
    /// again), and its registration as running. A cancelled plan is refused.
    #[allow(clippy::type_complexity)]
    pub(super) fn start(
        self: &Arc<Self>,
        id: u64,
    ) -> Result<(Option<(SessionContext, ReadPlan)>, Run), Status> {
        let mut state = self.lock();
        state.trim();
        if state.cancelled.contains_key(&id) {
            return Err(Status::cancelled(
                "the query was cancelled (CancelFlightInfo)",
            ));
        }
        let kept = state
            .entries
            .remove(&id)
            .filter(|kept| kept.at.elapsed() < TTL)
            .map(|kept| (kept.ctx, kept.plan));
        let (abort, registration) = AbortHandle::new_pair();
        state.runs += 1;
        let run = state.runs;
        state.running.insert(id, (run, abort.clone()));
        drop(state);
        Ok((
            kept,
            Run {
                cache: Arc::clone(self),
                id,
                run,
                abort,
                registration: Some(registration),
            },
        ))
    }

    /// `rows`, the DoGet stream of `run`: once cancelled (even before this) it stops, dropping
    /// the query's work, and ends with CANCELLED, never as if complete.
    pub(super) fn cancellable(mut run: Run, rows: Rows) -> Rows {
        let Some(registration) = run.registration.take() else {
            return rows;
        };
        let abort = run.abort.clone();
        let end = futures::stream::once(async move {
            let _run = run;
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
        let mut state = self.lock();
        state.trim();
        if let Some((_, abort)) = state.running.remove(&id) {
            abort.abort();
            return Cancel::Cancelled;
        }
        if state.entries.remove(&id).is_some() {
            if state.cancelled.len() >= CAPACITY
                && let Some(oldest) = state
                    .cancelled
                    .iter()
                    .min_by_key(|(_, at)| **at)
                    .map(|(id, _)| *id)
            {
                state.cancelled.remove(&oldest);
            }
            state.cancelled.insert(id, Instant::now());
            return Cancel::Cancelled;
        }
        Cancel::NotCancellable
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn plan(ctx: &SessionContext) -> ReadPlan {
        ReadPlan::Unoptimized(ctx.state().create_logical_plan("SELECT 1").await.unwrap())
    }

    fn kept(cache: &Arc<PlanCache>, id: u64) -> bool {
        cache.start(id).unwrap().0.is_some()
    }

    #[tokio::test]
    async fn a_plan_is_redeemed_once() {
        let cache = Arc::new(PlanCache::default());
        let ctx = SessionContext::new();
        let id = cache.put(ctx.clone(), plan(&ctx).await);
        assert!(kept(&cache, id));
        assert!(!kept(&cache, id));
        assert!(!kept(&cache, id ^ 1));
    }

    #[tokio::test]
    async fn a_cancelled_plan_is_refused_and_a_running_one_ends_cancelled() {
        let cache = Arc::new(PlanCache::default());
        let ctx = SessionContext::new();
        let waiting = cache.put(ctx.clone(), plan(&ctx).await);
        assert_eq!(cache.cancel(waiting), Cancel::Cancelled);
        match cache.start(waiting) {
            Err(refused) => assert_eq!(refused.code(), tonic::Code::Cancelled),
            Ok((kept, _)) => panic!("a cancelled plan was redeemed: {}", kept.is_some()),
        }

        let running = cache.put(ctx.clone(), plan(&ctx).await);
        let (_, run) = cache.start(running).unwrap();
        let mut stream = PlanCache::cancellable(run, futures::stream::pending().boxed());
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
    async fn a_cancel_between_start_and_stream_still_cancels() {
        let cache = Arc::new(PlanCache::default());
        let ctx = SessionContext::new();
        let id = cache.put(ctx.clone(), plan(&ctx).await);
        let (_, run) = cache.start(id).unwrap();
        // The DoGet is planning or executing: nothing streams yet.
        assert_eq!(cache.cancel(id), Cancel::Cancelled);
        let mut stream = PlanCache::cancellable(run, futures::stream::pending().boxed());
        assert!(
            matches!(stream.next().await, Some(Err(_))),
            "it ran after its cancel"
        );
    }

    #[tokio::test]
    async fn a_second_run_of_a_ticket_is_not_deregistered_by_the_first() {
        let cache = Arc::new(PlanCache::default());
        let ctx = SessionContext::new();
        let id = cache.put(ctx.clone(), plan(&ctx).await);
        let (_, first) = cache.start(id).unwrap();
        let (_, second) = cache.start(id).unwrap();
        drop(first);
        let mut stream = PlanCache::cancellable(second, futures::stream::pending().boxed());
        assert_eq!(cache.cancel(id), Cancel::Cancelled);
        assert!(matches!(stream.next().await, Some(Err(_))));
    }

    #[tokio::test]
    async fn the_cache_is_bounded() {
        let cache = Arc::new(PlanCache::default());
        let ctx = SessionContext::new();
        let first = cache.put(ctx.clone(), plan(&ctx).await);
        for _ in 0..CAPACITY + 10 {
            cache.put(ctx.clone(), plan(&ctx).await);
        }
        assert_eq!(cache.len(), CAPACITY);
        assert!(!kept(&cache, first), "the oldest plan was kept");
        let cancelled: Vec<u64> = (0..CAPACITY + 10)
            .map(|_| {
                let id =
                    futures::executor::block_on(async { cache.put(ctx.clone(), plan(&ctx).await) });
                cache.cancel(id);
                id
            })
            .collect();
        assert!(
            cache.lock().cancelled.len() <= CAPACITY,
            "cancelled plans are bounded"
        );
        assert!(
            cancelled
                .iter()
                .any(|id| cache.lock().cancelled.contains_key(id))
        );
    }
}
