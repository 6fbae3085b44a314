//! `RESTORE TABLE … TO VERSION n | TO TIMESTAMP t`: one new commit whose content is version n
//! (Lance's `Restore` operation), the versions in between kept for time travel.
//!
//! Held for its whole course — finding the version, reading its schema, committing — the table's
//! lease (a maintenance pass removing old versions holds it too, so the version found cannot go
//! before it is committed) and its in-process lock.

use std::sync::Arc;

use arrow::datatypes::{Schema as ArrowSchema, SchemaRef};
use lance::dataset::transaction::{Operation, Transaction};

use super::{DROP_WAIT, EngineError, TableRef, VersionTime, WriteEngine};
use crate::manifest::Renewed;

/// Which version a restore brings back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestoreTarget {
    Version(u64),
    /// The newest version committed at or before this time (nanoseconds since the epoch, UTC).
    Timestamp {
        nanos: i64,
    },
}

impl std::fmt::Display for RestoreTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Version(v) => write!(f, "version {v}"),
            Self::Timestamp { nanos } => write!(f, "{}", rfc3339(nanos.div_euclid(1_000_000))),
        }
    }
}

/// A restore in progress: the table's lease and lock, held until [`Restoring::finish`].
pub struct Restoring<'a> {
    engine: &'a WriteEngine,
    table: TableRef,
    lease: Renewed,
    _lock: tokio::sync::OwnedMutexGuard<()>,
}

/// The version a restore brings back, and its schema.
#[derive(Debug, Clone)]
pub struct RestorePoint {
    pub version: u64,
    pub schema: SchemaRef,
}

impl WriteEngine {
    /// Takes `table`'s lease (waiting up to [`DROP_WAIT`] for a maintenance pass) and lock for a
    /// restore.
    pub async fn restoring(&self, table: &TableRef) -> Result<Restoring<'_>, EngineError> {
        let holder = format!("RESTORE TABLE {table} ({})", crate::manifest::holder());
        let lease = self
            .table_lease(table, holder, crate::manifest::LEASE_TTL, DROP_WAIT)
            .await
            .map_err(|e| EngineError::lease(table, e))?
            .keep_renewed();
        Ok(Restoring {
            engine: self,
            table: table.clone(),
            lease,
            _lock: self.lock(table).await,
        })
    }
}

impl Restoring<'_> {
    /// The version `target` names, if the table still has it, and its schema.
    pub async fn point(&self, target: RestoreTarget) -> Result<RestorePoint, EngineError> {
        let table = &self.table;
        let latest = self.engine.engine.open(table, None).await?;
        let times = self.engine.version_times(table, &latest).await?;
        let version = pick(&times, target).ok_or_else(|| EngineError::NoSuchVersion {
            table: table.clone(),
            wanted: target.to_string(),
            kept: kept(&times),
        })?;
        let at = self.engine.engine.open(table, Some(version)).await?;
        Ok(RestorePoint {
            version,
            schema: Arc::new(ArrowSchema::from(at.schema())),
        })
    }

    /// Commits the restore of `version` (found by [`Restoring::point`]); returns the new
    /// version.
    pub async fn commit(&self, version: u64) -> Result<u64, EngineError> {
        let table = &self.table;
        // Lost (renewals failing for minutes): a maintenance pass may have removed the version.
        self.lease
            .check()
            .map_err(|e| EngineError::lease(table, e))?;
        let latest = self
            .engine
            .engine
            .open(table, None)
            .await?
            .version()
            .version;
        let transaction = Transaction::new(latest, Operation::Restore { version }, None);
        self.engine
            .commit_transaction(table, "restore", transaction, None)
            .await
    }

    /// Releases the lease (the lock goes with `self`).
    pub async fn finish(self) {
        self.lease.release().await;
    }
}

/// The version of `times` (the table's) that `target` names.
fn pick(times: &[VersionTime], target: RestoreTarget) -> Option<u64> {
    let found = match target {
        RestoreTarget::Version(v) => times.iter().find(|t| t.version == v),
        RestoreTarget::Timestamp { nanos } => {
            let ms = nanos.div_euclid(1_000_000);
            times
                .iter()
                .filter(|t| t.committed_ms <= ms)
                .max_by_key(|t| t.version)
        }
    };
    found.map(|t| t.version)
}

/// What a table keeps, for an error: its oldest and newest versions.
fn kept(times: &[VersionTime]) -> String {
    let oldest = times.iter().min_by_key(|t| t.version);
    let newest = times.iter().map(|t| t.version).max();
    match (oldest, newest) {
        (Some(o), Some(n)) => format!(
            "it keeps versions {} to {n}, the oldest committed {}",
            o.version,
            rfc3339(o.committed_ms)
        ),
        _ => "it keeps no version".into(),
    }
}

/// Milliseconds since the epoch as an RFC 3339 UTC time.
fn rfc3339(ms: i64) -> String {
    arrow::temporal_conversions::timestamp_ms_to_datetime(ms)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
        .unwrap_or_else(|| format!("{ms} ms after the epoch"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{NamespaceName, TableName};

    fn table() -> TableRef {
        TableRef::new(
            NamespaceName::parse("s").unwrap(),
            TableName::parse("t").unwrap(),
        )
    }

    #[test]
    fn a_restore_picks_the_version_or_the_newest_before_the_time() {
        let times = [
            VersionTime {
                version: 4,
                committed_ms: 4_000,
            },
            VersionTime {
                version: 5,
                committed_ms: 5_000,
            },
            VersionTime {
                version: 7,
                committed_ms: 7_000,
            },
        ];
        assert_eq!(pick(&times, RestoreTarget::Version(5)), Some(5));
        let at = |ms: i64| RestoreTarget::Timestamp {
            nanos: ms * 1_000_000,
        };
        assert_eq!(pick(&times, at(6_999)), Some(5));
        assert_eq!(pick(&times, at(7_000)), Some(7));
        assert_eq!(pick(&times, at(i64::MAX / 1_000_000)), Some(7));
        // Removed by maintenance (or never there): none, and the error says what is kept.
        for gone in [
            RestoreTarget::Version(2),
            RestoreTarget::Version(6),
            at(3_999),
        ] {
            assert_eq!(pick(&times, gone), None, "{gone}");
        }
        let e = EngineError::NoSuchVersion {
            table: table(),
            wanted: RestoreTarget::Version(2).to_string(),
            kept: kept(&times),
        }
        .to_string();
        assert!(e.contains("s.t has no version 2"), "{e}");
        assert!(e.contains("keeps versions 4 to 7"), "{e}");
        assert!(e.contains("1970-01-01T00:00:04.000Z"), "{e}");
        assert!(e.contains("retention"), "{e}");
    }
}
