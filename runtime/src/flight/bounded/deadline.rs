//! A statement's time limit, as its functions see it.
//!
//! The endpoint stops a statement at its deadline by dropping its future, which only lands when
//! the work yields. Constant folding while planning (`fold_strictly`, the simplifier) and one
//! function over a batch never yield: `levenshtein` of two 1 MB constants is 10^12 steps on one
//! of the endpoint's few workers. So every counted call first checks the deadline, and a call
//! whose own cost is known to be quadratic is refused above [`MAX_STEPS`].

use std::sync::Mutex;
use std::time::{Duration, Instant};

use datafusion::common::{DataFusionError, Result};
use tonic::Status;

/// The most steps one call of a quadratic function may take (a few seconds of one core).
pub(super) const MAX_STEPS: i64 = 4_000_000_000;

#[derive(Debug)]
pub(super) struct Deadline {
    at: Mutex<Instant>,
    limit: Duration,
}

impl Deadline {
    pub(super) fn new(at: Instant, limit: Duration) -> Self {
        Self {
            at: Mutex::new(at),
            limit,
        }
    }

    /// The statement runs again (a kept plan redeemed by DoGet): its time counts from `at`.
    pub(super) fn rearm(&self, at: Instant) {
        *self.at.lock().unwrap_or_else(|p| p.into_inner()) = at;
    }

    /// No deadline: the statement runs to completion (an admitted write).
    pub(super) fn lift(&self) {
        // A century from now: `Instant` has no "never".
        self.rearm(Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600));
    }

    /// Refuses a call of `function` once the statement is past its deadline.
    pub(super) fn check(&self, function: &str) -> Result<()> {
        let at = *self.at.lock().unwrap_or_else(|p| p.into_inner());
        if Instant::now() < at {
            return Ok(());
        }
        Err(DataFusionError::External(Box::new(
            Status::deadline_exceeded(format!(
                "the statement ran past its {} s limit (LAKE_QUERY_TIMEOUT_SECONDS) and was \
                 stopped before a call of {function}",
                self.limit.as_secs()
            )),
        )))
    }
}

/// Refuses a call of `function` that would take more than [`MAX_STEPS`].
pub(super) fn check_steps(function: &str, steps: i64) -> Result<()> {
    if steps > MAX_STEPS {
        return Err(DataFusionError::ResourcesExhausted(format!(
            "{function}() would take {steps} steps (the product of its arguments' lengths); at \
             most {MAX_STEPS} per call are allowed"
        )));
    }
    Ok(())
}
