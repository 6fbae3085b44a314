//! Plans made by GetFlightInfo, kept for the DoGet that redeems their ticket.
//!
//! A client's GetFlightInfo plans its statement (it must, to report the schema); its DoGet then
//! runs the same plan instead of building a session and planning again. The ticket names the
//! kept plan by a random id inside its signed handle, and still carries the statement: a ticket
//! redeemed twice, after [`TTL`], or on a restarted process is planned again from its SQL. Kept
//! plans are bounded in number and age (a plan holds its tables' opened metadata).
//!
//! A read GetFlightInfo planned while most of the endpoint's slots were free is not only kept
//! but started ([`PlanCache::started`]): it executes while the client turns the FlightInfo into
//! a DoGet (GetFlightInfo is where Flight SQL executes a statement), and its first rows wait for
//! that DoGet. Only the first: the rest is computed as the DoGet reads, as for a plan started by
//! its DoGet. A started statement not redeemed within [`GRACE`] is stopped and its slot freed;
//! its ticket is then planned again like an expired one (a cancel still refuses it).
//!
//! CancelFlightInfo cancels a planned statement by the same id: a DoGet streaming its rows ends
//! with CANCELLED (its work stops with the stream), and a kept or started plan not yet redeemed
//! is dropped, its DoGet refused.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow::datatypes::SchemaRef;
use arrow_flight::error::FlightError;
use datafusion::prelude::SessionContext;
use futures::StreamExt;
use futures::stream::{AbortHandle, AbortRegistration, Abortable, BoxStream};
use tokio::sync::oneshot;
use tonic::Status;

use super::prepared::ReadPlan;

/// How long a plan waits for its DoGet: clients redeem a ticket at once.
pub(super) const TTL: Duration = Duration::from_secs(30);
/// Plans kept at most, per endpoint.
pub(super) const CAPACITY: usize = 256;
/// How long a started statement holds its slot and first rows for its DoGet (clients redeem
/// a ticket within milliseconds; one that only wanted the FlightInfo costs at most this).
pub(super) const GRACE: Duration = Duration::from_secs(2);

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
    waiting: Waiting,
}

/// What waits for a DoGet under a plan id.
pub(super) enum Waiting {
    /// The plan GetFlightInfo made, executed when its DoGet comes.
    Plan(SessionContext, Box<ReadPlan>),
    /// The statement GetFlightInfo started: its rows, the first computed (or being computed).
    Started(Started),
    /// A started statement whose DoGet did not come within [`GRACE`]: stopped; its DoGet plans
    /// it again, a cancel refuses that DoGet.
    Abandoned,
}

/// A statement executing since its GetFlightInfo.
pub(super) struct Started {
    /// The result schema GetFlightInfo reported.
    pub(super) schema: SchemaRef,
    /// Its rows once the first is ready; the sender is dropped if the statement stopped.
    first: oneshot::Receiver<Rows>,
}

impl Started {
    /// The statement's rows: the first when it is ready, then the rest as they are read.
    pub(super) fn rows(self) -> Rows {
        futures::stream::once(self.first)
            .flat_map(|rows| {
                rows.unwrap_or_else(|_| {
                    futures::stream::once(async {
                        Err(FlightError::Tonic(Box::new(Status::internal(
                            "the statement stopped before its rows were sent",
                        ))))
                    })
                    .boxed()
                })
            })
            .boxed()
    }
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

    /// Keeps `plan` (made in `ctx`) and returns its id.
    pub(super) fn put(&self, ctx: SessionContext, plan: ReadPlan) -> u64 {
        self.keep(Waiting::Plan(ctx, Box::new(plan)))
    }

    /// Keeps `rows`, a statement started by its GetFlightInfo, and returns its id. A task
    /// computes its first rows now and holds them (and the statement's slot) for its DoGet,
    /// for at most [`GRACE`] from now. A cancel, or the cache dropping the entry, stops it.
    pub(super) fn started(self: &Arc<Self>, schema: SchemaRef, rows: Rows) -> u64 {
        self.started_for(schema, rows, GRACE)
    }

    fn started_for(self: &Arc<Self>, schema: SchemaRef, mut rows: Rows, grace: Duration) -> u64 {
        let (mut ready, first) = oneshot::channel();
        let id = self.keep(Waiting::Started(Started { schema, first }));
        let cache = Arc::downgrade(self);
        tokio::spawn(async move {
            // Whether its DoGet may still come: until the grace is over or it came.
            let mut waiting = true;
            let grace = tokio::time::sleep(grace);
            tokio::pin!(grace);
            let first = loop {
                tokio::select! {
                    biased;
                    () = ready.closed() => return,
                    first = rows.next() => break first,
                    () = &mut grace, if waiting => {
                        // Redeemed while its first rows are computed: they are awaited.
                        if cache.upgrade().is_none_or(|cache| cache.abandon(id)) {
                            return;
                        }
                        waiting = false;
                    }
                }
            };
            let rows = futures::stream::iter(first).chain(rows).boxed();
            if ready.send(rows).is_err() || !waiting {
                return;
            }
            grace.await;
            if let Some(cache) = cache.upgrade() {
                cache.abandon(id);
            }
        });
        id
    }

    /// Stops plan `id` if it is still a started statement waiting for its DoGet: whether it
    /// did.
    fn abandon(&self, id: u64) -> bool {
        let mut state = self.lock();
        let Some(kept) = state.entries.get_mut(&id) else {
            return false;
        };
        if !matches!(kept.waiting, Waiting::Started(_)) {
            return false;
        }
        let stopped = std::mem::replace(&mut kept.waiting, Waiting::Abandoned);
        // Its stream's work (operators, spill files) is dropped outside the lock.
        drop(state);
        drop(stopped);
        true
    }

    /// Keeps `waiting` under a new id. Expired plans are dropped first; when full, the oldest
    /// goes.
    fn keep(&self, waiting: Waiting) -> u64 {
        let id = uuid::Uuid::new_v4().as_u64_pair().0;
        let now = Instant::now();
        let mut state = self.lock();
        // What goes is dropped after the lock is released: a started statement's stream may
        // hold operators and spill files.
        let mut gone: Vec<Kept> = state
            .entries
            .extract_if(|_, kept| now.duration_since(kept.at) >= TTL)
            .map(|(_, kept)| kept)
            .collect();
        if state.entries.len() >= CAPACITY
            && let Some(oldest) = state
                .entries
                .iter()
                .min_by_key(|(_, k)| k.at)
                .map(|(id, _)| *id)
        {
            gone.extend(state.entries.remove(&oldest));
        }
        state.entries.insert(id, Kept { at: now, waiting });
        drop(state);
        drop(gone);
        id
    }

    /// Starts the DoGet of plan `id`: what waits for it, once (a second redemption plans
    /// again), and its registration as running. A cancelled plan is refused.
    pub(super) fn start(self: &Arc<Self>, id: u64) -> Result<(Option<Waiting>, Run), Status> {
        let state = self.open(id)?;
        Ok(self.redeem(state, id))
    }

    /// Starts the DoGet of plan `id` if its GetFlightInfo started it: its rows and its
    /// registration as running (the statement holds its slot already). A kept plan stays for
    /// the DoGet's next step, after its admission; a cancelled plan is refused.
    pub(super) fn start_started(
        self: &Arc<Self>,
        id: u64,
    ) -> Result<Option<(Started, Run)>, Status> {
        let state = self.open(id)?;
        let started = state
            .entries
            .get(&id)
            .is_some_and(|kept| matches!(kept.waiting, Waiting::Started(_)));
        if !started {
            return Ok(None);
        }
        Ok(match self.redeem(state, id) {
            (Some(Waiting::Started(started)), run) => Some((started, run)),
            _ => None,
        })
    }

    /// The cache's state for a DoGet of plan `id`, unless that plan was cancelled.
    fn open(&self, id: u64) -> Result<std::sync::MutexGuard<'_, State>, Status> {
        let mut state = self.lock();
        state.trim();
        if state.cancelled.contains_key(&id) {
            return Err(Status::cancelled(
                "the query was cancelled (CancelFlightInfo)",
            ));
        }
        Ok(state)
    }

    /// Takes what waits for plan `id` and registers its run.
    fn redeem(
        self: &Arc<Self>,
        mut state: std::sync::MutexGuard<'_, State>,
        id: u64,
    ) -> (Option<Waiting>, Run) {
        let kept = state
            .entries
            .remove(&id)
            .filter(|kept| kept.at.elapsed() < TTL)
            .map(|kept| kept.waiting)
            .filter(|waiting| !matches!(waiting, Waiting::Abandoned));
        let (abort, registration) = AbortHandle::new_pair();
        state.runs += 1;
        let run = state.runs;
        state.running.insert(id, (run, abort.clone()));
        drop(state);
        (
            kept,
            Run {
                cache: Arc::clone(self),
                id,
                run,
                abort,
                registration: Some(registration),
            },
        )
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

    /// Cancels plan `id`: its running DoGet, or its kept, started or stopped plan.
    pub(super) fn cancel(&self, id: u64) -> Cancel {
        let mut state = self.lock();
        state.trim();
        if let Some((_, abort)) = state.running.remove(&id) {
            abort.abort();
            return Cancel::Cancelled;
        }
        if let Some(kept) = state.entries.remove(&id) {
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
            // A started statement stops when this drops it, outside the lock.
            drop(state);
            drop(kept);
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

    fn batch(n: i64) -> arrow::record_batch::RecordBatch {
        let column: arrow::array::ArrayRef = Arc::new(arrow::array::Int64Array::from(vec![n]));
        arrow::record_batch::RecordBatch::try_from_iter([("n", column)]).unwrap()
    }

    /// Rows that hold `slot` (like a statement's stream) and say when each is computed.
    fn rows_in(slot: &Arc<tokio::sync::Semaphore>, computed: &Arc<Mutex<Vec<i64>>>) -> Rows {
        let permit = slot.clone().try_acquire_owned().unwrap();
        let computed = computed.clone();
        futures::stream::iter([1, 2])
            .then(move |n| {
                let computed = computed.clone();
                async move {
                    computed.lock().unwrap().push(n);
                    Ok(batch(n))
                }
            })
            .chain(futures::stream::once(async move {
                drop(permit);
                Ok(batch(3))
            }))
            .boxed()
    }

    /// Rows that never come, holding `slot` until they are dropped.
    fn pending_in(slot: &Arc<tokio::sync::Semaphore>) -> Rows {
        let permit = slot.clone().try_acquire_owned().unwrap();
        futures::stream::pending()
            .map(move |batch| {
                let _held = &permit;
                batch
            })
            .boxed()
    }

    async fn until(what: &str, done: impl Fn() -> bool) {
        for _ in 0..500 {
            if done() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{what}: not within 5 s");
    }

    fn schema() -> SchemaRef {
        batch(0).schema()
    }

    #[tokio::test]
    async fn a_started_statement_computes_its_first_rows_before_its_doget() {
        let cache = Arc::new(PlanCache::default());
        let slot = Arc::new(tokio::sync::Semaphore::new(1));
        let computed = Arc::new(Mutex::new(Vec::new()));
        let id = cache.started(schema(), rows_in(&slot, &computed));
        until("the first rows computed", || {
            !computed.lock().unwrap().is_empty()
        })
        .await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            *computed.lock().unwrap(),
            [1],
            "only the first rows run ahead"
        );

        let (started, _run) = cache.start_started(id).unwrap().expect("started");
        let rows: Vec<i64> = started
            .rows()
            .map(|batch| {
                let batch = batch.unwrap();
                let n = batch
                    .column(0)
                    .as_any()
                    .downcast_ref::<arrow::array::Int64Array>();
                n.unwrap().value(0)
            })
            .collect()
            .await;
        assert_eq!(rows, [1, 2, 3]);
        assert_eq!(slot.available_permits(), 1, "the slot is back");
        assert!(cache.start_started(id).unwrap().is_none(), "redeemed twice");
        assert!(cache.start(id).unwrap().0.is_none(), "planned again");
    }

    #[tokio::test]
    async fn a_started_statement_not_redeemed_gives_back_its_slot() {
        let cache = Arc::new(PlanCache::default());
        let slot = Arc::new(tokio::sync::Semaphore::new(1));
        let computed = Arc::new(Mutex::new(Vec::new()));
        let grace = Duration::from_millis(100);
        let id = cache.started_for(schema(), rows_in(&slot, &computed), grace);
        until("the first rows computed", || {
            !computed.lock().unwrap().is_empty()
        })
        .await;
        assert_eq!(slot.available_permits(), 0, "held for its DoGet");
        until("the slot given back", || slot.available_permits() == 1).await;
        assert!(cache.start_started(id).unwrap().is_none());
        assert!(
            cache.start(id).unwrap().0.is_none(),
            "its DoGet plans again"
        );
        // Stopped, but still cancellable until the plan's TTL: its DoGet is then refused.
        let id = cache.started_for(schema(), rows_in(&slot, &computed), grace);
        until("the slot given back", || slot.available_permits() == 1).await;
        assert_eq!(cache.cancel(id), Cancel::Cancelled);
        assert_eq!(
            cache.start(id).err().map(|refused| refused.code()),
            Some(tonic::Code::Cancelled)
        );

        // Its first rows still being computed: the grace counts from its start.
        let id = cache.started_for(schema(), pending_in(&slot), grace);
        assert_eq!(slot.available_permits(), 0);
        until("the slot given back", || slot.available_permits() == 1).await;
        assert!(cache.start_started(id).unwrap().is_none());

        // Redeemed while its first rows are computed: the grace does not stop it.
        let (open, opened) = oneshot::channel::<()>();
        let slow = futures::stream::once(async move {
            let _ = opened.await;
        })
        .flat_map(move |()| rows_in(&slot, &computed))
        .boxed();
        let id = cache.started_for(schema(), slow, grace);
        let (started, _run) = cache.start_started(id).unwrap().expect("started");
        tokio::time::sleep(grace * 2).await;
        open.send(()).unwrap();
        let rows = started.rows().collect::<Vec<_>>().await;
        assert_eq!(rows.len(), 3, "{rows:?}");
        assert!(rows.iter().all(Result::is_ok), "{rows:?}");

        // A plan kept for its DoGet is not dropped so.
        let ctx = SessionContext::new();
        let kept = cache.put(ctx.clone(), plan(&ctx).await);
        assert!(!cache.abandon(kept));
        assert!(cache.start_started(kept).unwrap().is_none());
        assert!(matches!(
            cache.start(kept).unwrap().0,
            Some(Waiting::Plan(..))
        ));
    }

    #[tokio::test]
    async fn a_cancelled_started_statement_stops_and_is_refused() {
        let cache = Arc::new(PlanCache::default());
        let slot = Arc::new(tokio::sync::Semaphore::new(1));
        // Cancelled while it computes its first rows (a grace long past the test's wait).
        let id = cache.started_for(schema(), pending_in(&slot), Duration::from_secs(3600));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(slot.available_permits(), 0);
        assert_eq!(cache.cancel(id), Cancel::Cancelled);
        until("the statement stopped", || slot.available_permits() == 1).await;
        match cache.start_started(id) {
            Err(refused) => assert_eq!(refused.code(), tonic::Code::Cancelled),
            Ok(started) => panic!("a cancelled statement was redeemed: {}", started.is_some()),
        }

        // Cancelled while its DoGet streams it.
        let id = cache.started_for(schema(), pending_in(&slot), Duration::from_secs(3600));
        let (started, run) = cache.start_started(id).unwrap().expect("started");
        let mut rows = PlanCache::cancellable(run, started.rows());
        assert_eq!(cache.cancel(id), Cancel::Cancelled);
        match rows.next().await {
            Some(Err(FlightError::Tonic(status))) => {
                assert_eq!(status.code(), tonic::Code::Cancelled)
            }
            other => panic!("a cancelled stream ended with {other:?}"),
        }
        drop(rows);
        until("the statement stopped", || slot.available_permits() == 1).await;
    }

    #[tokio::test]
    async fn a_started_statement_pushed_out_of_the_cache_stops() {
        let cache = Arc::new(PlanCache::default());
        let slot = Arc::new(tokio::sync::Semaphore::new(1));
        let id = cache.started_for(schema(), pending_in(&slot), Duration::from_secs(3600));
        let ctx = SessionContext::new();
        for _ in 0..CAPACITY {
            cache.put(ctx.clone(), plan(&ctx).await);
        }
        until("the statement stopped", || slot.available_permits() == 1).await;
        assert!(cache.start_started(id).unwrap().is_none());
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
