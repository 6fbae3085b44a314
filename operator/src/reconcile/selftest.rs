//! The post-rollout selftest Jobs, reported in `SelfTestPassed`.

use super::*;

/// Runs (once per configuration) and reads the selftest Jobs of both roles; `None` when the
/// cluster has none (a local lake).
pub(super) async fn self_test_step(ctx: &Context, validated: &ValidatedCluster) -> Option<Check> {
    let jobs = plan::selftest::jobs(validated);
    if jobs.is_empty() {
        return None;
    }
    let mut outcomes = Vec::new();
    for (role, job) in jobs {
        let name = job.metadata.name.clone().unwrap_or_default();
        match apply::selftest::ensure(&ctx.client, &validated.namespace, &job).await {
            Ok(outcome) => outcomes.push((role, name, outcome)),
            Err(e) => return Some(Check::unknown(SELF_TEST_PASSED, e.reason(), e.to_string())),
        }
    }
    Some(match apply::selftest::summary(&outcomes) {
        (true, _, message) => Check::ok(SELF_TEST_PASSED, "Passed", message),
        (_, true, message) => Check::failed(SELF_TEST_PASSED, "SelfTestFailed", message),
        (_, _, message) => Check::unknown(SELF_TEST_PASSED, "Running", message),
    })
}
