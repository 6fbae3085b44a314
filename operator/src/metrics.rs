//! Reconcile metrics (runs, failures by reason, durations), kept and encoded by
//! `prometheus-client` in the OpenMetrics text format.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Upper bounds (seconds) of the duration histogram's buckets.
const BUCKETS: [f64; 8] = [0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0];

/// The content type of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Reason {
    reason: String,
}

#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    reconciles: Counter,
    failures: Family<Reason, Counter>,
    durations: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let reconciles = Counter::default();
        let failures = Family::<Reason, Counter>::default();
        let durations = Histogram::new(BUCKETS);
        registry.register(
            "lake_operator_reconciles",
            "Reconcile passes run",
            reconciles.clone(),
        );
        registry.register(
            "lake_operator_reconcile_errors",
            "Failed reconcile passes, by reason",
            failures.clone(),
        );
        registry.register(
            "lake_operator_reconcile_duration_seconds",
            "Reconcile pass durations",
            durations.clone(),
        );
        Self {
            registry,
            reconciles,
            failures,
            durations,
        }
    }
}

impl Metrics {
    pub fn reconciled(&self, took: Duration) {
        self.reconciles.inc();
        self.durations.observe(took.as_secs_f64());
    }

    pub fn failed(&self, reason: &str) {
        self.failures
            .get_or_create(&Reason {
                reason: reason.to_owned(),
            })
            .inc();
    }

    pub fn reconciles(&self) -> u64 {
        self.reconciles.get()
    }

    /// The exposition text served at `/metrics`.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
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
        assert!(
            text.contains("lake_operator_reconcile_errors_total{reason=\"AwsError\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("lake_operator_reconcile_duration_seconds_bucket{le=\"0.05\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("lake_operator_reconcile_duration_seconds_bucket{le=\"5.0\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("lake_operator_reconcile_duration_seconds_count 2\n"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
