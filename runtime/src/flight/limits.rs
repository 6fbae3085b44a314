//! Resource governance of one endpoint: a memory pool for the process and a cap per query (an
//! operator that cannot reserve spills or fails with RESOURCE_EXHAUSTED, instead of the
//! process running out of memory), a time limit per query (DEADLINE_EXCEEDED), and a bound on
//! the queries running at once (RESOURCE_EXHAUSTED for the next). Configured by the `LAKE_*`
//! limits (lake-common's `Limits`) or `lake local`'s flags; the defaults are below.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use datafusion::common::{DataFusionError, Result};
use datafusion::execution::memory_pool::{
    GreedyMemoryPool, MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation,
    TrackConsumersPool,
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::Status;

const MIB: usize = 1024 * 1024;

/// The limits in force, defaults applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    pub memory: usize,
    pub query_memory: usize,
    pub query_timeout: Duration,
    pub max_concurrent_queries: usize,
}

impl Limits {
    pub const DEFAULT_MEMORY_MB: u64 = 1024;
    pub const DEFAULT_QUERY_MEMORY_MB: u64 = 512;
    pub const DEFAULT_QUERY_TIMEOUT_SECONDS: u64 = 600;
    pub const DEFAULT_MAX_CONCURRENT_QUERIES: u64 = 32;

    pub fn resolve(configured: &lake_common::config::Limits) -> Self {
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
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self::resolve(&lake_common::config::Limits::default())
    }
}

/// What every query of one endpoint shares.
#[derive(Debug, Clone)]
pub(super) struct Governor {
    pool: Arc<dyn MemoryPool>,
    running: Arc<Semaphore>,
    pub(super) limits: Limits,
}

impl Governor {
    pub(super) fn new(limits: Limits) -> Self {
        let top = NonZeroUsize::new(3).unwrap_or(NonZeroUsize::MIN);
        Self {
            pool: Arc::new(TrackConsumersPool::new(
                GreedyMemoryPool::new(limits.memory),
                top,
            )),
            running: Arc::new(Semaphore::new(limits.max_concurrent_queries)),
            limits,
        }
    }

    /// A pool for one query: the process pool, capped at the per-query limit.
    pub(super) fn query_pool(&self) -> Arc<dyn MemoryPool> {
        Arc::new(QueryPool {
            shared: self.pool.clone(),
            limit: self.limits.query_memory,
            used: AtomicUsize::new(0),
        })
    }

    /// A running-query slot, held until the query's stream ends or is dropped.
    pub(super) fn admit(&self) -> Result<OwnedSemaphorePermit, Status> {
        self.running.clone().try_acquire_owned().map_err(|_| {
            Status::resource_exhausted(format!(
                "{} queries are already running on this endpoint (LAKE_MAX_CONCURRENT_QUERIES); \
                 retry when one has finished",
                self.limits.max_concurrent_queries
            ))
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

    #[test]
    fn a_query_is_capped_and_counts_against_the_process() {
        let governor = Governor::new(Limits {
            memory: 10 * MIB,
            query_memory: 6 * MIB,
            query_timeout: Duration::from_secs(1),
            max_concurrent_queries: 1,
        });
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
}
