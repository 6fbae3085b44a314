//! `spec.maintenance` and `spec.iam.maintenanceRole`: what the maintenance CronJob may run with.

use k8s_openapi::api::core::v1::ResourceRequirements;
use lake_common::config::Limits;
use lake_common::plan::PlanError;
use serde::Serialize;

use crate::crd::LakeClusterSpec;

/// The maintenance CronJob's settings, checked.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceJob {
    pub schedule: String,
    pub retention_seconds: u64,
    pub grace_seconds: u64,
    pub target_rows_per_fragment: u64,
    pub index_unindexed_rows: u64,
    pub deadline_seconds: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    pub suspend: bool,
}

/// The schedule macros a CronJob takes besides five fields.
const MACROS: [&str; 7] = [
    "@yearly",
    "@annually",
    "@monthly",
    "@weekly",
    "@daily",
    "@midnight",
    "@hourly",
];

const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// One value of a field: a number in `min..=max`, or a name (`JAN` is 1, `SUN` 0).
fn value(text: &str, min: u32, max: u32, names: &[&str], first: u32) -> Option<u32> {
    let n = match text.parse::<u32>() {
        Ok(n) => n,
        Err(_) => {
            let i = names.iter().position(|n| n.eq_ignore_ascii_case(text))?;
            first + u32::try_from(i).ok()?
        }
    };
    (min..=max).contains(&n).then_some(n)
}

/// One field of a schedule: a list of `*`, `?` (days only), `a`, `a-b`, each with an optional
/// `/step` — as the CronJob controller's parser takes them.
fn valid_field(
    field: &str,
    min: u32,
    max: u32,
    names: &[&str],
    first: u32,
    question: bool,
) -> bool {
    field.split(',').all(|item| {
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => match step.parse::<u32>() {
                Ok(s) if s >= 1 => (range, true),
                _ => return false,
            },
            None => (item, false),
        };
        match range {
            "*" => true,
            "?" => question && !step,
            _ => match range.split_once('-') {
                Some((a, b)) => matches!(
                    (value(a, min, max, names, first), value(b, min, max, names, first)),
                    (Some(a), Some(b)) if a <= b
                ),
                None => value(range, min, max, names, first).is_some(),
            },
        }
    })
}

/// A CronJob schedule: five fields (minute 0-59, hour 0-23, day of month 1-31, month 1-12 or
/// JAN-DEC, day of week 0-6 or SUN-SAT), or a macro. Checked here as the API server and the
/// CronJob controller would, so a typo is a refused spec, not a CronJob the API refuses.
fn valid_schedule(schedule: &str) -> bool {
    let schedule = schedule.trim();
    if MACROS.contains(&schedule) {
        return true;
    }
    match schedule.split_whitespace().collect::<Vec<_>>()[..] {
        [minute, hour, day, month, weekday] => {
            valid_field(minute, 0, 59, &[], 0, false)
                && valid_field(hour, 0, 23, &[], 0, false)
                && valid_field(day, 1, 31, &[], 0, true)
                && valid_field(month, 1, 12, &MONTHS, 1, false)
                && valid_field(weekday, 0, 7, &DAYS, 0, true)
        }
        _ => false,
    }
}

/// Every problem of the maintenance settings; the job when there are none.
pub(super) fn check_maintenance(
    spec: &LakeClusterSpec,
    query_timeout_seconds: Option<u64>,
    errors: &mut Vec<PlanError>,
) -> Option<MaintenanceJob> {
    let role = spec.iam.as_ref().and_then(|i| i.maintenance_role.as_ref());
    let Some(m) = &spec.maintenance else {
        if let Some(role) = role {
            errors.push(PlanError::NotAllowed {
                field: "spec.iam.maintenanceRole".into(),
                reason: format!(
                    "names {role:?} but spec.maintenance is not set: no Job would run as it, and \
                     the operator writes no grant nothing uses"
                ),
            });
        }
        return None;
    };
    let before = errors.len();
    if spec.storage.local.is_some() {
        errors.push(PlanError::NotAllowed {
            field: "spec.maintenance".into(),
            reason: "a local lake is one pod that holds its directory: it maintains itself \
                     (`lake local --maintain-every-minutes`); spec.maintenance runs a CronJob \
                     against S3 and DynamoDB"
                .into(),
        });
    }
    if let Some(iam) = &spec.iam {
        match &iam.maintenance_role {
            None => errors.push(PlanError::Missing {
                field: "spec.iam.maintenanceRole".into(),
                reason: "spec.maintenance runs as its own IAM role (it deletes objects and \
                         manifest rows, which neither serving role may)"
                    .into(),
            }),
            Some(role) => {
                if let Err(reason) = crate::plan::iam::check_role(role) {
                    errors.push(PlanError::InvalidField {
                        field: "spec.iam.maintenanceRole".into(),
                        value: role.clone(),
                        reason,
                    });
                }
                let name = crate::plan::iam::role_name(role);
                for (field, other) in [
                    ("spec.iam.queryRole", &iam.query_role),
                    ("spec.iam.metadataRole", &iam.metadata_role),
                ] {
                    if name.eq_ignore_ascii_case(crate::plan::iam::role_name(other)) {
                        errors.push(PlanError::InvalidField {
                            field: "spec.iam.maintenanceRole".into(),
                            value: role.clone(),
                            reason: format!(
                                "names the same IAM role as {field} ({other:?}): maintenance \
                                 runs as its own role"
                            ),
                        });
                    }
                }
            }
        }
    }
    if !valid_schedule(&m.schedule) {
        errors.push(PlanError::InvalidField {
            field: "spec.maintenance.schedule".into(),
            value: m.schedule.clone(),
            reason: "must be a CronJob schedule: five fields (minute hour day-of-month month \
                     day-of-week, e.g. \"0 * * * *\") or @hourly, @daily, @weekly, @monthly"
                .into(),
        });
    }
    let mut number = |field: &str, value: i64, min: u64, why: &str| -> u64 {
        match u64::try_from(value).ok().filter(|v| *v >= min) {
            Some(v) => v,
            None => {
                errors.push(PlanError::InvalidField {
                    field: format!("spec.maintenance.{field}"),
                    value: value.to_string(),
                    reason: format!("must be at least {min}{why}"),
                });
                0
            }
        }
    };
    let timeout = query_timeout_seconds.unwrap_or(Limits::DEFAULT_QUERY_TIMEOUT_SECONDS);
    let job = MaintenanceJob {
        schedule: m.schedule.trim().to_owned(),
        retention_seconds: number("retentionSeconds", m.retention_seconds, 0, ""),
        grace_seconds: number(
            "graceSeconds",
            m.grace_seconds,
            timeout,
            ": the statement timeout (spec.queryTimeoutSeconds, 600 when unset), or a query \
             still reading a removed version fails",
        ),
        target_rows_per_fragment: number(
            "targetRowsPerFragment",
            m.target_rows_per_fragment,
            1,
            "",
        ),
        index_unindexed_rows: number("indexUnindexedRows", m.index_unindexed_rows, 1, ""),
        deadline_seconds: number("deadlineSeconds", m.deadline_seconds, 60, ""),
        resources: m.resources.clone(),
        suspend: m.suspend,
    };
    (errors.len() == before).then_some(job)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_are_five_fields_or_a_macro() {
        for ok in [
            "0 * * * *",
            "*/15 2-4 * JAN,FEB MON-FRI",
            "@hourly",
            " @daily ",
            "5 0 ? * 0",
            "0-59/5 23 31 12 7",
        ] {
            assert!(valid_schedule(ok), "{ok}");
        }
        for bad in [
            "",
            "* * * *",
            "0 * * * * *",
            "@often",
            "0 * * * *; rm",
            "$(x) * * * *",
            "99 * * * *",
            "a b c d e",
            "0 24 * * *",
            "0 * 0 * *",
            "5-1 * * * *",
            "*/0 * * * *",
            "? * * * *",
            "0 * * FOO *",
        ] {
            assert!(!valid_schedule(bad), "{bad}");
        }
    }
}
