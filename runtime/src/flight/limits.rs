//! Resource governance of one endpoint: a memory pool for the process and a cap per query (an
//! operator that cannot reserve spills or fails with RESOURCE_EXHAUSTED, instead of the
//! process running out of memory), one disk budget for everything its queries spill, a time
//! limit per query (DEADLINE_EXCEEDED), and a bound on the statements running at once
//! (RESOURCE_EXHAUSTED for the next) — planning included. Configured by the `LAKE_*` limits
//! (lake-common's `Limits`) or `lake local`'s flags; the defaults are below.

use std::future::Future;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use datafusion::common::{DataFusionError, Result};
use datafusion::execution::disk_manager::{DiskManager, DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::memory_pool::{
    GreedyMemoryPool, MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation,
    TrackConsumersPool,
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tonic::Status;

const MIB: usize = 1024 * 1024;

/// The limits in force, defaults applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    pub memory: usize,
    pub query_memory: usize,
    pub query_timeout: Duration,
    pub max_concurrent_queries: usize,
    /// What all queries of the endpoint may spill to disk together, in bytes.
    pub spill: u64,
    /// Where they spill; `None`: the system temp directory.
    pub spill_dir: Option<PathBuf>,
}

impl Limits {
    pub const DEFAULT_MEMORY_MB: u64 = 1024;
    pub const DEFAULT_QUERY_MEMORY_MB: u64 = 512;
    pub const DEFAULT_QUERY_TIMEOUT_SECONDS: u64 =
        lake_common::config::Limits::DEFAULT_QUERY_TIMEOUT_SECONDS;
    pub const DEFAULT_MAX_CONCURRENT_QUERIES: u64 = 32;
    /// A sort or join larger than memory spills; 8 GiB unless the pod's volume says otherwise
    /// (DataFusion's own default, 100 GB per statement, would fill a node's disk).
    pub const DEFAULT_SPILL_MB: u64 = 8 * 1024;

    /// The limits `configured`, defaults applied; queries spill to `spill_dir`.
    pub fn resolve(configured: &lake_common::config::Limits, spill_dir: Option<PathBuf>) -> Self {
        let mb = |v: Option<u64>, default| {
            usize::try_from(v.unwrap_or(default))
                .unwrap_or(usize::MAX / MIB)
                .saturating_mul(MIB)
        };
        let memory = mb(configured.memory_mb, Self::DEFAULT_MEMORY_MB);
        Self {
            memory,
            // One query never gets more than the process has.
            query_memory: mb(configured.query_memory_mb, Self::DEFAULT_QUERY_MEMORY_MB).min(memory),
            query_timeout: Duration::from_secs(
                configured
                    .query_timeout_seconds
                    .unwrap_or(Self::DEFAULT_QUERY_TIMEOUT_SECONDS),
            ),
            max_concurrent_queries: usize::try_from(
                configured
                    .max_concurrent_queries
                    .unwrap_or(Self::DEFAULT_MAX_CONCURRENT_QUERIES),
            )
            .unwrap_or(usize::MAX),
            spill: configured
                .spill_mb
                .unwrap_or(Self::DEFAULT_SPILL_MB)
                .saturating_mul(MIB as u64),
            spill_dir,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self::resolve(&lake_common::config::Limits::default(), None)
    }
}

/// The spill directory cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("cannot spill to {}: {source} (LAKE_SPILL_DIR)", dir.display())]
pub struct SpillDirError {
    dir: PathBuf,
    #[source]
    source: DataFusionError,
}

/// A disk manager spilling into `limits.spill_dir` (the system's temporary directory if none),
/// up to `limits.spill` bytes.
fn disk_manager(limits: &Limits) -> Result<Arc<DiskManager>, SpillDirError> {
    let mode = match &limits.spill_dir {
        Some(dir) => DiskManagerMode::Directories(vec![dir.clone()]),
        None => DiskManagerMode::OsTmpDirectory,
    };
    DiskManagerBuilder::default()
        .with_mode(mode)
        .with_max_temp_directory_size(limits.spill)
        .build()
        .map(Arc::new)
        .map_err(|source| SpillDirError {
            dir: limits.spill_dir.clone().unwrap_or_else(std::env::temp_dir),
            source,
        })
}

/// What every query of one endpoint shares.
#[derive(Debug, Clone)]
pub(super) struct Governor {
    pool: Arc<dyn MemoryPool>,
    /// Every statement's spill files, counted against one budget (`Limits::spill`).
    disk: Arc<std::sync::Mutex<Arc<DiskManager>>>,
    running: Arc<Semaphore>,
    /// The share of `running` that reads started before their DoGet may hold (half).
    early: Arc<Semaphore>,
    pub(super) limits: Limits,
}

/// A statement's place among the endpoint's running statements, held until its stream ends
/// or is dropped; a read started before its DoGet also holds one of the half of them such
/// reads may take.
#[derive(Debug)]
pub(super) struct Slot {
    _running: OwnedSemaphorePermit,
    _early: Option<OwnedSemaphorePermit>,
}

impl Governor {
    pub(super) fn new(limits: Limits) -> Result<Self, SpillDirError> {
        let top = NonZeroUsize::new(3).unwrap_or(NonZeroUsize::MIN);
        let disk = disk_manager(&limits)?;
        Ok(Self {
            pool: Arc::new(TrackConsumersPool::new(
                GreedyMemoryPool::new(limits.memory),
                top,
            )),
            disk: Arc::new(std::sync::Mutex::new(disk)),
            running: Arc::new(Semaphore::new(limits.max_concurrent_queries)),
            early: Arc::new(Semaphore::new(limits.max_concurrent_queries / 2)),
            limits,
        })
    }

    /// The endpoint's disk manager: every statement's session spills through it.
    ///
    /// DataFusion's manager keeps counting a spill file's size once its write went past the
    /// limit (the file is gone, its bytes stay in the total): after a few refused spills, the
    /// endpoint could never spill again. So once no spill file is left, a manager that still
    /// counts bytes is replaced by a fresh one. (A statement that began before the swap spills
    /// through the old one, so for a while two budgets may be in use: bounded, and only after
    /// a refusal.)
    pub(super) fn disk(&self) -> Arc<DiskManager> {
        let mut disk = self.disk.lock().unwrap_or_else(|p| p.into_inner());
        let progress = disk.spilling_progress();
        if progress.active_files_count == 0 && progress.current_bytes > 0 {
            match disk_manager(&self.limits) {
                Ok(fresh) => *disk = fresh,
                Err(e) => tracing::warn!(error = %e, "could not renew the spill budget"),
            }
        }
        disk.clone()
    }

    /// When a statement admitted now must be done.
    pub(super) fn deadline(&self) -> Instant {
        Instant::now() + self.limits.query_timeout
    }

    /// Runs `work` (planning, describing, listing) in one of the endpoint's slots and under its
    /// time limit: what a statement makes the server do before its rows flow is governed too.
    pub(super) async fn governed<T>(
        &self,
        work: impl Future<Output = Result<T, Status>>,
    ) -> Result<T, Status> {
        let _slot = self.admit()?;
        self.until(self.deadline(), work).await
    }

    /// `work`, stopped with DEADLINE_EXCEEDED at `deadline`.
    pub(super) async fn until<T>(
        &self,
        deadline: Instant,
        work: impl Future<Output = Result<T, Status>>,
    ) -> Result<T, Status> {
        tokio::time::timeout_at(deadline, work)
            .await
            .unwrap_or_else(|_| Err(self.past_deadline()))
    }

    pub(super) fn past_deadline(&self) -> Status {
        Status::deadline_exceeded(format!(
            "the statement ran past its {} s limit (LAKE_QUERY_TIMEOUT_SECONDS) and was stopped",
            self.limits.query_timeout.as_secs()
        ))
    }

    /// A pool for one query: the process pool, capped at the per-query limit.
    pub(super) fn query_pool(&self) -> Arc<dyn MemoryPool> {
        Arc::new(QueryPool {
            shared: self.pool.clone(),
            limit: self.limits.query_memory,
            used: AtomicUsize::new(0),
        })
    }

    /// A slot for a read started before its DoGet asks for it (`plans.rs`): at most half the
    /// endpoint's slots are taken so (none of one), so reads a client never redeems hold at
    /// most half of them, each for at most `plans::GRACE`.
    pub(super) fn admit_early(&self) -> Option<Slot> {
        let early = self.early.clone().try_acquire_owned().ok()?;
        let running = self.running.clone().try_acquire_owned().ok()?;
        Some(Slot {
            _running: running,
            _early: Some(early),
        })
    }

    /// A running-query slot, held until the query's stream ends or is dropped.
    pub(super) fn admit(&self) -> Result<Slot, Status> {
        let running = self.running.clone().try_acquire_owned().map_err(|_| {
            Status::resource_exhausted(format!(
                "{} queries are already running on this endpoint (LAKE_MAX_CONCURRENT_QUERIES); \
                 retry when one has finished",
                self.limits.max_concurrent_queries
            ))
        })?;
        Ok(Slot {
            _running: running,
            _early: None,
        })
    }
}

/// One query's view of the process pool: every reservation counts against both.
#[derive(Debug)]
struct QueryPool {
    shared: Arc<dyn MemoryPool>,
    limit: usize,
    used: AtomicUsize,
}

impl std::fmt::Display for QueryPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "lake query pool ({} of {} bytes)",
            self.reserved(),
            self.limit
        )
    }
}

impl MemoryPool for QueryPool {
    fn name(&self) -> &str {
        "lake-query"
    }

    fn register(&self, consumer: &MemoryConsumer) {
        self.shared.register(consumer);
    }

    fn unregister(&self, consumer: &MemoryConsumer) {
        self.shared.unregister(consumer);
    }

    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        self.used.fetch_add(additional, Ordering::Relaxed);
        self.shared.grow(reservation, additional);
    }

    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        self.used.fetch_sub(shrink, Ordering::Relaxed);
        self.shared.shrink(reservation, shrink);
    }

    fn try_grow(&self, reservation: &MemoryReservation, additional: usize) -> Result<()> {
        let before = self.used.fetch_add(additional, Ordering::Relaxed);
        if before.saturating_add(additional) > self.limit {
            self.used.fetch_sub(additional, Ordering::Relaxed);
            return Err(DataFusionError::ResourcesExhausted(format!(
                "the query needs more than its {} MiB of memory (LAKE_QUERY_MEMORY_LIMIT_MB)",
                self.limit / MIB
            )));
        }
        if let Err(e) = self.shared.try_grow(reservation, additional) {
            self.used.fetch_sub(additional, Ordering::Relaxed);
            return Err(e);
        }
        Ok(())
    }

    fn reserved(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    fn memory_limit(&self) -> MemoryLimit {
        MemoryLimit::Finite(self.limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            memory: 10 * MIB,
            query_memory: 6 * MIB,
            query_timeout: Duration::from_secs(1),
            max_concurrent_queries: 1,
            spill: MIB as u64,
            spill_dir: None,
        }
    }

    #[test]
    fn a_query_is_capped_and_counts_against_the_process() {
        let governor = Governor::new(limits()).unwrap();
        let (a, b) = (governor.query_pool(), governor.query_pool());
        let ra = MemoryConsumer::new("a").register(&a);
        let rb = MemoryConsumer::new("b").register(&b);
        assert!(ra.try_grow(5 * MIB).is_ok());
        assert!(ra.try_grow(2 * MIB).is_err(), "over the query's 6 MiB");
        assert!(rb.try_grow(6 * MIB).is_err(), "over the process's 10 MiB");
        assert!(rb.try_grow(4 * MIB).is_ok());
        drop(ra);
        assert!(rb.try_grow(2 * MIB).is_ok(), "freed memory is reusable");
        let slot = governor.admit().unwrap();
        assert_eq!(
            governor.admit().unwrap_err().code(),
            tonic::Code::ResourceExhausted
        );
        drop(slot);
        assert!(governor.admit().is_ok());
    }

    /// Reads started before their DoGet take at most half the slots (none of one); the other
    /// half stays for statements admitted at their DoGet.
    #[test]
    fn early_starts_take_at_most_half_the_slots() {
        let one = Governor::new(limits()).unwrap();
        assert!(one.admit_early().is_none(), "the only slot was taken early");
        let governor = Governor::new(Limits {
            max_concurrent_queries: 5,
            ..limits()
        })
        .unwrap();
        let early: Vec<Slot> = std::iter::from_fn(|| governor.admit_early()).collect();
        assert_eq!(early.len(), 2);
        let rest: Vec<Slot> = std::iter::from_fn(|| governor.admit().ok()).collect();
        assert_eq!(rest.len(), 3, "admitted beside the early starts");
        drop(rest);
        assert!(
            governor.admit_early().is_none(),
            "past half, with slots free"
        );
        drop(early);
        assert!(
            governor.admit_early().is_some(),
            "their share is given back"
        );
    }

    /// Every statement's spill files count against one budget for the endpoint, in its spill
    /// directory: two statements cannot each spill the limit.
    #[test]
    fn spill_is_one_budget_per_endpoint() {
        let dir = tempfile::tempdir().unwrap();
        let governor = Governor::new(Limits {
            spill_dir: Some(dir.path().join("spill")),
            ..limits()
        })
        .unwrap();
        let (a, b) = (governor.disk(), governor.disk());
        assert!(Arc::ptr_eq(&a, &b));
        let write = |disk: &Arc<DiskManager>, bytes: usize| {
            let mut file = disk.create_tmp_file("test").unwrap();
            std::io::Write::write_all(&mut file.inner().as_file(), &vec![1u8; bytes]).unwrap();
            let used = file.update_disk_usage();
            (file, used)
        };
        let (first, used) = write(&a, 600 * 1024);
        assert!(used.is_ok());
        assert!(first.path().starts_with(dir.path().join("spill")));
        let (second, used) = write(&b, 600 * 1024);
        let err = used.unwrap_err();
        assert_eq!(
            super::super::sql::status(err).code(),
            tonic::Code::ResourceExhausted
        );
        drop(first);
        let (_third, used) = write(&b, 600 * 1024);
        assert!(
            used.is_err(),
            "the refused file still counts while it exists"
        );
        drop((second, _third));
        // DataFusion keeps counting the refused file's bytes: the next statement's manager
        // starts afresh once no spill file is left.
        let c = governor.disk();
        let (_fourth, used) = write(&c, 600 * 1024);
        assert!(used.is_ok(), "removed spill files free their share");
    }

    #[tokio::test]
    async fn planning_takes_a_slot_and_keeps_the_deadline() {
        let governor = Governor::new(limits()).unwrap();
        let held = governor.admit().unwrap();
        let refused = governor.governed(async { Ok(()) }).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        drop(held);
        let slow = governor
            .governed(async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                Ok(())
            })
            .await
            .unwrap_err();
        assert_eq!(slow.code(), tonic::Code::DeadlineExceeded);
        assert!(
            governor.admit().is_ok(),
            "the slot is back once planning stopped"
        );
    }
}
