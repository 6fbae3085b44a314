//! Which versions of a table maintenance may remove. Pure: the versions, the clock and the
//! policy in, the cutoff out.

use std::time::Duration;

use crate::engine::VersionTime;

/// How long old versions stay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// A version younger than this stays (time travel to it keeps working).
    pub keep: Duration,
    /// A version stays until this long after it stopped being the latest: a query that read
    /// it as the latest may still be running. Longer than the query timeout.
    pub grace: Duration,
}

/// The first version to keep: every version before it may be removed. A version may be removed
/// when it is not the latest, is older than `keep`, and was superseded more than `grace` ago
/// (its successor's commit time). Both conditions only grow true with age, so the removable
/// versions are always the oldest ones. `None`: nothing to remove.
pub fn cutoff(versions: &[VersionTime], now_ms: i64, retention: Retention) -> Option<u64> {
    let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    let kept_since = now_ms.saturating_sub(ms(retention.keep));
    let superseded_since = now_ms.saturating_sub(ms(retention.grace));
    let mut sorted = versions.to_vec();
    sorted.sort_by_key(|v| v.version);
    let mut first_kept = None;
    for pair in sorted.windows(2) {
        let (version, successor) = (pair[0], pair[1]);
        let removable =
            version.committed_ms <= kept_since && successor.committed_ms <= superseded_since;
        if !removable {
            break;
        }
        first_kept = Some(successor.version);
    }
    first_kept
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000;

    fn at(pairs: &[(u64, i64)]) -> Vec<VersionTime> {
        pairs
            .iter()
            .map(|&(version, minute)| VersionTime {
                version,
                committed_ms: minute * MIN,
            })
            .collect()
    }

    fn policy(keep_min: u64, grace_min: u64) -> Retention {
        Retention {
            keep: Duration::from_secs(keep_min * 60),
            grace: Duration::from_secs(grace_min * 60),
        }
    }

    #[test]
    fn the_latest_version_is_never_removed() {
        assert_eq!(cutoff(&at(&[(1, 0)]), 1000 * MIN, policy(0, 0)), None);
        assert_eq!(
            cutoff(&at(&[(1, 0), (2, 1), (3, 2)]), 1000 * MIN, policy(0, 0)),
            Some(3)
        );
    }

    #[test]
    fn versions_younger_than_keep_stay() {
        // now = 100; keep 30 min: versions committed after minute 70 stay.
        let versions = at(&[(1, 10), (2, 60), (3, 80), (4, 90)]);
        assert_eq!(cutoff(&versions, 100 * MIN, policy(30, 0)), Some(3));
    }

    #[test]
    fn a_version_stays_for_grace_after_it_was_superseded() {
        // Version 1 is old, but version 2 (which superseded it) is 5 minutes old: a query
        // that read version 1 as the latest may still run.
        let versions = at(&[(1, 0), (2, 95), (3, 99)]);
        assert_eq!(cutoff(&versions, 100 * MIN, policy(0, 10)), None);
        assert_eq!(cutoff(&versions, 106 * MIN, policy(0, 10)), Some(2));
        assert_eq!(cutoff(&versions, 110 * MIN, policy(0, 10)), Some(3));
    }

    #[test]
    fn removal_stops_at_the_first_version_to_keep() {
        // Version 2 is young; version 3 is old again (a clock step back): nothing after 2 goes.
        let versions = at(&[(1, 0), (2, 95), (3, 10), (4, 20)]);
        assert_eq!(cutoff(&versions, 100 * MIN, policy(30, 0)), Some(2));
    }

    #[test]
    fn unsorted_input_is_read_in_version_order() {
        let versions = at(&[(3, 2), (1, 0), (2, 1)]);
        assert_eq!(cutoff(&versions, 1000 * MIN, policy(0, 0)), Some(3));
    }

    #[test]
    fn no_versions_nothing_to_remove() {
        assert_eq!(cutoff(&[], 0, policy(0, 0)), None);
    }
}
