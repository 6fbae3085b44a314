//! The maintenance step: the CronJob's passes folded into `status.maintenance` and the
//! `Maintained` condition; the CronJob removed when `spec.maintenance` goes.

use super::*;
use crate::apply::maintenance::{Pass, PassState};
use crate::crd::{MaintenanceStatus, PassOutcome, PassStatus};
use crate::status::MAINTAINED;

/// What the passes say. Pure.
pub(super) fn fold(cron_job: &str, passes: &[Pass]) -> (MaintenanceStatus, Check) {
    let running = passes
        .iter()
        .rev()
        .find(|p| p.state == PassState::Running)
        .map(|p| p.job.clone());
    let finished: Vec<(&Pass, PassOutcome, &Option<Time>)> = passes
        .iter()
        .filter_map(|p| match &p.state {
            PassState::Running => None,
            PassState::Succeeded { at } => Some((p, PassOutcome::Succeeded, at)),
            PassState::Failed { at } => Some((p, PassOutcome::Failed, at)),
        })
        .collect();
    let failures = finished
        .iter()
        .rev()
        .take_while(|(_, outcome, _)| *outcome == PassOutcome::Failed)
        .count();
    let last = finished.last();
    let status = MaintenanceStatus {
        cron_job: cron_job.to_owned(),
        last_pass: last.map(|(p, outcome, at)| PassStatus {
            job: p.job.clone(),
            outcome: *outcome,
            finished_at: (*at).clone(),
        }),
        consecutive_failures: i32::try_from(failures).unwrap_or(i32::MAX),
        running,
    };
    let check = match last {
        None => Check::unknown(
            MAINTAINED,
            "NoPassYet",
            format!("no maintenance pass has finished yet (CronJob {cron_job})"),
        ),
        Some((p, PassOutcome::Succeeded, _)) => Check::ok(
            MAINTAINED,
            "PassSucceeded",
            format!("the last maintenance pass succeeded (Job {})", p.job),
        ),
        Some((p, PassOutcome::Failed, _)) => Check::failed(
            MAINTAINED,
            "PassFailed",
            format!(
                "the last {failures} maintenance pass(es) failed: deleted rows and old versions \
                 stay until one succeeds (kubectl logs job/{})",
                p.job
            ),
        ),
    };
    (status, check)
}

/// What the previous status said of maintenance: kept by a pass that could not look (so the
/// condition does not flap, nor its Event repeat).
pub(super) fn previous(cluster: &LakeCluster) -> Option<(Option<MaintenanceStatus>, Check)> {
    let status = cluster.status.as_ref()?;
    let condition = status.conditions.iter().find(|c| c.type_ == MAINTAINED)?;
    Some((
        status.maintenance.clone(),
        Check {
            type_: MAINTAINED,
            status: condition.status,
            reason: condition.reason.clone(),
            message: condition.message.clone(),
        },
    ))
}

/// Reads the passes of the cluster's CronJob, or removes a CronJob the spec no longer asks
/// for. `None` without `spec.maintenance`.
pub(super) async fn maintenance_step(
    ctx: &Context,
    cluster: &LakeCluster,
    validated: &ValidatedCluster,
) -> Option<(Option<MaintenanceStatus>, Check)> {
    let name = plan::maintenance::name(validated);
    if validated.maintenance.is_none() {
        return match apply::maintenance::remove(
            &ctx.client,
            &validated.namespace,
            validated.uid.as_deref(),
            &name,
        )
        .await
        {
            Ok(removed) => {
                if !removed.is_empty() {
                    tracing::info!(cluster = %validated.name, ?removed, "maintenance removed");
                }
                None
            }
            Err(e) => Some((None, Check::unknown(MAINTAINED, e.reason(), e.to_string()))),
        };
    }
    Some(
        match apply::maintenance::passes(&ctx.client, &validated.namespace, &validated.name, &name)
            .await
        {
            Ok(passes) => {
                let (status, check) = fold(&name, &passes);
                (Some(status), check)
            }
            Err(e) => (
                previous(cluster).and_then(|(status, _)| status),
                Check::unknown(MAINTAINED, e.reason(), e.to_string()),
            ),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pass(job: &str, state: PassState) -> Pass {
        Pass {
            job: job.into(),
            created: None,
            state,
        }
    }

    #[test]
    fn failures_count_back_to_the_last_success() {
        let (status, check) = fold("c", &[]);
        assert_eq!(check.status, ConditionStatus::Unknown);
        assert_eq!(status.last_pass, None);
        let (status, check) = fold(
            "c",
            &[
                pass("a", PassState::Failed { at: None }),
                pass("b", PassState::Succeeded { at: None }),
                pass("c1", PassState::Failed { at: None }),
                pass("c2", PassState::Failed { at: None }),
                pass("d", PassState::Running),
            ],
        );
        assert_eq!(check.status, ConditionStatus::False);
        assert_eq!(check.reason, "PassFailed");
        assert!(
            check.message.contains("last 2") && check.message.contains("job/c2"),
            "{}",
            check.message
        );
        assert_eq!(status.consecutive_failures, 2);
        assert_eq!(status.running.as_deref(), Some("d"));
        assert_eq!(status.last_pass.unwrap().job, "c2");
        let (status, check) = fold(
            "c",
            &[
                pass("a", PassState::Failed { at: None }),
                pass("b", PassState::Succeeded { at: None }),
            ],
        );
        assert_eq!(check.status, ConditionStatus::True);
        assert_eq!(status.consecutive_failures, 0);
    }
}
