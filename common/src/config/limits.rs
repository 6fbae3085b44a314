//! The resource limits of one runtime process (`LAKE_*_LIMIT_MB`, the query time limit, the
//! running-query bound, the disk its queries may spill to).

use super::{
    LAKE_MAX_CONCURRENT_QUERIES, LAKE_MEMORY_LIMIT_MB, LAKE_QUERY_MEMORY_LIMIT_MB,
    LAKE_QUERY_TIMEOUT_SECONDS, LAKE_SPILL_LIMIT_MB,
};

/// Resource limits of one runtime process; `None` leaves the runtime's default.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Limits {
    /// Memory all queries of the process may hold together (MiB).
    pub memory_mb: Option<u64>,
    /// Memory one query may hold (MiB).
    pub query_memory_mb: Option<u64>,
    /// How long one query may run (seconds).
    pub query_timeout_seconds: Option<u64>,
    /// Queries one endpoint runs at once.
    pub max_concurrent_queries: Option<u64>,
    /// Disk all queries of the process may spill to together (MiB).
    pub spill_mb: Option<u64>,
}

impl Limits {
    /// How long one query may run when `query_timeout_seconds` is unset: the runtime applies
    /// it, and the operator keeps the maintenance grace above it.
    pub const DEFAULT_QUERY_TIMEOUT_SECONDS: u64 = 600;

    pub(super) const VARS: [&'static str; 5] = [
        LAKE_MEMORY_LIMIT_MB,
        LAKE_QUERY_MEMORY_LIMIT_MB,
        LAKE_QUERY_TIMEOUT_SECONDS,
        LAKE_MAX_CONCURRENT_QUERIES,
        LAKE_SPILL_LIMIT_MB,
    ];

    pub(super) fn fields(&self) -> [Option<u64>; 5] {
        [
            self.memory_mb,
            self.query_memory_mb,
            self.query_timeout_seconds,
            self.max_concurrent_queries,
            self.spill_mb,
        ]
    }

    /// Every set limit is above 0 (a zero limit would refuse everything).
    pub fn fields_are_positive(&self) -> Result<(), &'static str> {
        for (name, value) in Self::VARS.into_iter().zip(self.fields()) {
            if value == Some(0) {
                return Err(name);
            }
        }
        Ok(())
    }

    pub(super) fn from_values(values: [Option<u64>; 5]) -> Self {
        let [
            memory_mb,
            query_memory_mb,
            query_timeout_seconds,
            max_concurrent_queries,
            spill_mb,
        ] = values;
        Self {
            memory_mb,
            query_memory_mb,
            query_timeout_seconds,
            max_concurrent_queries,
            spill_mb,
        }
    }
}
