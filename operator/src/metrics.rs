//! Reconcile metrics in the Prometheus text format: runs, failures by reason, durations.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds (seconds) of the duration histogram's buckets.
const BUCKETS: [f64; 8] = [0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0];

#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    reconciles: u64,
    failures: BTreeMap<String, u64>,
    buckets: [u64; BUCKETS.len()],
    duration_sum: f64,
    duration_count: u64,
}

impl Metrics {
    pub fn reconciled(&self, took: Duration) {
        let mut m = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        m.reconciles += 1;
        let secs = took.as_secs_f64();
        m.duration_sum += secs;
        m.duration_count += 1;
        for (i, bound) in BUCKETS.iter().enumerate() {
            if secs <= *bound {
                m.buckets[i] += 1;
            }
        }
    }

    pub fn failed(&self, reason: &str) {
        let mut m = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *m.failures.entry(reason.to_owned()).or_default() += 1;
    }

    pub fn reconciles(&self) -> u64 {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .reconciles
    }

    /// The exposition text served at `/metrics`.
    pub fn render(&self) -> String {
        let m = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out = String::new();
        out.push_str("# HELP lake_operator_reconciles_total Reconcile passes run.\n");
        out.push_str("# TYPE lake_operator_reconciles_total counter\n");
        out.push_str(&format!(
            "lake_operator_reconciles_total {}\n",
            m.reconciles
        ));
        out.push_str(
            "# HELP lake_operator_reconcile_errors_total Failed reconcile passes, by reason.\n",
        );
        out.push_str("# TYPE lake_operator_reconcile_errors_total counter\n");
        for (reason, n) in &m.failures {
            out.push_str(&format!(
                "lake_operator_reconcile_errors_total{{reason=\"{reason}\"}} {n}\n"
            ));
        }
        out.push_str("# HELP lake_operator_reconcile_duration_seconds Reconcile pass durations.\n");
        out.push_str("# TYPE lake_operator_reconcile_duration_seconds histogram\n");
        for (bound, n) in BUCKETS.iter().zip(m.buckets) {
            out.push_str(&format!(
                "lake_operator_reconcile_duration_seconds_bucket{{le=\"{bound}\"}} {n}\n"
            ));
        }
        out.push_str(&format!(
            "lake_operator_reconcile_duration_seconds_bucket{{le=\"+Inf\"}} {}\n",
            m.duration_count
        ));
        out.push_str(&format!(
            "lake_operator_reconcile_duration_seconds_sum {}\n",
            m.duration_sum
        ));
        out.push_str(&format!(
            "lake_operator_reconcile_duration_seconds_count {}\n",
            m.duration_count
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_counts_runs_failures_and_durations() {
        let m = Metrics::default();
        m.reconciled(Duration::from_millis(30));
        m.reconciled(Duration::from_secs(2));
        m.failed("AwsError");
        let text = m.render();
        assert!(
            text.contains("lake_operator_reconciles_total 2\n"),
            "{text}"
        );
        assert!(text.contains("lake_operator_reconcile_errors_total{reason=\"AwsError\"} 1\n"));
        assert!(text.contains("lake_operator_reconcile_duration_seconds_bucket{le=\"0.05\"} 1\n"));
        assert!(text.contains("lake_operator_reconcile_duration_seconds_bucket{le=\"5\"} 2\n"));
        assert!(text.contains("lake_operator_reconcile_duration_seconds_count 2\n"));
    }
}
