//! Conditions: computed from what reconcile observed, merged with the previous ones so a
//! condition's `lastTransitionTime` moves only when its status does. Pure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::crd::{Condition, ConditionStatus};

pub const PLAN_VALID: &str = "PlanValid";
pub const TABLES_READY: &str = "TablesReady";
pub const POLICIES_READY: &str = "PoliciesReady";
pub const WORKLOADS_READY: &str = "WorkloadsReady";
pub const READY: &str = "Ready";
/// `lake selftest` in each role's pod environment after a rollout: reported, not gating Ready
/// (on an AWS that enforces no IAM, query's selftest fails, and the lake still serves).
pub const SELF_TEST_PASSED: &str = "SelfTestPassed";
/// A `spec.migration` cut over (only reported with one). Gates Ready: a lake whose data is
/// still in the legacy table is not ready.
pub const MIGRATION_COMPLETE: &str = "MigrationComplete";

/// How the maintenance passes go (only reported with `spec.maintenance`): False once the last
/// finished pass failed. Not gating Ready: the lake serves while maintenance fails, and
/// deleted rows wait.
pub const MAINTAINED: &str = "Maintained";

/// The order conditions are reported in; Ready is always last.
pub const ORDER: [&str; 8] = [
    PLAN_VALID,
    TABLES_READY,
    POLICIES_READY,
    MIGRATION_COMPLETE,
    WORKLOADS_READY,
    SELF_TEST_PASSED,
    MAINTAINED,
    READY,
];

/// The checks Ready waits for.
const GATING: [&str; 5] = [
    PLAN_VALID,
    TABLES_READY,
    POLICIES_READY,
    MIGRATION_COMPLETE,
    WORKLOADS_READY,
];

/// One observation: a condition's type, status, reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub type_: &'static str,
    pub status: ConditionStatus,
    pub reason: String,
    pub message: String,
}

impl Check {
    pub fn ok(type_: &'static str, reason: &str, message: impl Into<String>) -> Self {
        Self {
            type_,
            status: ConditionStatus::True,
            reason: reason.into(),
            message: message.into(),
        }
    }
    pub fn failed(type_: &'static str, reason: &str, message: impl Into<String>) -> Self {
        Self {
            type_,
            status: ConditionStatus::False,
            reason: reason.into(),
            message: message.into(),
        }
    }
    pub fn unknown(type_: &'static str, reason: &str, message: impl Into<String>) -> Self {
        Self {
            type_,
            status: ConditionStatus::Unknown,
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// Ready from the other checks: True only when all are True; otherwise the first that is not.
pub fn ready(checks: &[Check]) -> Check {
    match checks
        .iter()
        .filter(|c| GATING.contains(&c.type_))
        .find(|c| c.status != ConditionStatus::True)
    {
        None => Check::ok(READY, "Ready", "tables, policies and workloads are ready"),
        Some(blocking) => {
            let reason = match blocking.type_ {
                PLAN_VALID => "PlanInvalid",
                TABLES_READY => "TablesNotReady",
                POLICIES_READY => "PoliciesNotReady",
                WORKLOADS_READY => "WorkloadsNotReady",
                MIGRATION_COMPLETE => "MigrationNotComplete",
                _ => "NotReady",
            };
            Check::failed(
                READY,
                reason,
                format!("{}: {}", blocking.type_, blocking.message),
            )
        }
    }
}

/// The new conditions: one per check, plus Ready last; unchanged statuses keep their time.
pub fn conditions(
    previous: &[Condition],
    checks: &[Check],
    generation: Option<i64>,
    now: &Time,
) -> Vec<Condition> {
    let mut all: Vec<Check> = checks.to_vec();
    all.retain(|c| c.type_ != READY);
    all.push(ready(&all));
    all.sort_by_key(|c| {
        ORDER
            .iter()
            .position(|t| *t == c.type_)
            .unwrap_or(ORDER.len())
    });
    all.into_iter()
        .map(|check| {
            let status = check.status;
            let last_transition_time = previous
                .iter()
                .find(|p| p.type_ == check.type_ && p.status == status)
                .and_then(|p| p.last_transition_time.clone())
                .or_else(|| Some(now.clone()));
            Condition {
                type_: check.type_.to_owned(),
                status,
                reason: check.reason,
                message: check.message,
                observed_generation: generation,
                last_transition_time,
            }
        })
        .collect()
}

/// Conditions whose status or reason changed (or that are new): what deserves an Event.
pub fn transitions<'a>(previous: &[Condition], current: &'a [Condition]) -> Vec<&'a Condition> {
    current
        .iter()
        .filter(|c| {
            !previous
                .iter()
                .any(|p| p.type_ == c.type_ && p.status == c.status && p.reason == c.reason)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn time(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap())
    }

    #[test]
    fn ready_is_last_and_true_only_when_everything_is() {
        let checks = [
            Check::ok(PLAN_VALID, "Valid", ""),
            Check::ok(TABLES_READY, "Ready", ""),
            Check::failed(
                POLICIES_READY,
                "RoleNotFound",
                "role lake-query does not exist",
            ),
            Check::ok(WORKLOADS_READY, "Available", ""),
        ];
        let conds = conditions(&[], &checks, Some(3), &time(10));
        assert_eq!(conds.last().unwrap().type_, READY);
        assert_eq!(conds.last().unwrap().status.as_str(), "False");
        assert!(conds.last().unwrap().message.contains("lake-query"));
        assert!(conds.iter().all(|c| c.observed_generation == Some(3)));
    }

    #[test]
    fn transition_times_move_only_with_the_status() {
        let first = conditions(
            &[],
            &[Check::ok(PLAN_VALID, "Valid", "")],
            Some(1),
            &time(10),
        );
        let again = conditions(
            &first,
            &[Check::ok(PLAN_VALID, "Valid", "")],
            Some(2),
            &time(20),
        );
        assert_eq!(again[0].last_transition_time, Some(time(10)));
        assert!(transitions(&first, &again).is_empty());
        let flipped = conditions(
            &again,
            &[Check::failed(PLAN_VALID, "InvalidSpec", "x")],
            Some(3),
            &time(30),
        );
        assert_eq!(flipped[0].last_transition_time, Some(time(30)));
        assert_eq!(
            transitions(&again, &flipped).len(),
            2,
            "PlanValid and Ready flipped"
        );
    }
}
