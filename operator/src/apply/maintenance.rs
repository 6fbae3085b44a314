//! The maintenance CronJob's passes (its Jobs, read back), and the CronJob's removal when
//! `spec.maintenance` goes.

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams};

use super::error::ApplyError;
use crate::plan::tables::MANAGER;

/// One maintenance Job, as Kubernetes reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct Pass {
    pub job: String,
    pub created: Option<Time>,
    pub state: PassState,
}

#[derive(Debug, Clone, PartialEq)]
pub enum PassState {
    Running,
    Succeeded { at: Option<Time> },
    Failed { at: Option<Time> },
}

fn kube(operation: &'static str, kind: &str, name: &str) -> impl Fn(kube::Error) -> ApplyError {
    let (kind, name) = (kind.to_owned(), name.to_owned());
    move |source| ApplyError::Kube {
        operation,
        kind: kind.clone(),
        name: name.clone(),
        source: Box::new(source),
    }
}

fn state(job: &Job) -> PassState {
    let status = job.status.clone().unwrap_or_default();
    let finished = |type_: &str| {
        status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == type_ && c.status == "True")
            .map(|c| {
                c.last_transition_time
                    .clone()
                    .or(status.completion_time.clone())
            })
    };
    match (finished("Complete"), finished("Failed")) {
        (Some(at), _) => PassState::Succeeded { at },
        (None, Some(at)) => PassState::Failed { at },
        (None, None) => PassState::Running,
    }
}

/// The Jobs the CronJob `cron_job` started (by its controller reference: a Job that merely
/// carries the labels is not a pass), oldest first.
pub async fn passes(
    client: &Client,
    namespace: &str,
    cluster: &str,
    cron_job: &str,
) -> Result<Vec<Pass>, ApplyError> {
    let api: Api<Job> = Api::namespaced(client.clone(), namespace);
    let selector = format!(
        "app.kubernetes.io/instance={cluster},app.kubernetes.io/component={}",
        lake_common::config::MAINTENANCE_ROLE
    );
    let jobs = api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(kube("list", "Job", &selector))?;
    let mut passes: Vec<Pass> =
        jobs.items
            .iter()
            .filter(|job| {
                job.metadata.owner_references.iter().flatten().any(|o| {
                    o.kind == "CronJob" && o.name == cron_job && o.api_version == "batch/v1"
                })
            })
            .map(|job| Pass {
                job: job.metadata.name.clone().unwrap_or_default(),
                created: job.metadata.creation_timestamp.clone(),
                state: state(job),
            })
            .collect();
    passes.sort_by(|a, b| (&a.created, &a.job).cmp(&(&b.created, &b.job)));
    Ok(passes)
}

/// Deletes the CronJob `name` if it is this operator's (its manager label and the cluster's
/// owner reference); its running Job goes with it. Returns whether it deleted one.
pub async fn remove(
    client: &Client,
    namespace: &str,
    cluster_uid: Option<&str>,
    name: &str,
) -> Result<bool, ApplyError> {
    let api: Api<CronJob> = Api::namespaced(client.clone(), namespace);
    let Some(live) = api
        .get_opt(name)
        .await
        .map_err(kube("get", "CronJob", name))?
    else {
        return Ok(false);
    };
    let managed = live
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("app.kubernetes.io/managed-by"))
        .is_some_and(|m| m == MANAGER);
    let owned = live
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| Some(o.uid.as_str()) == cluster_uid && o.kind == "LakeCluster");
    if !(managed && owned) {
        return Ok(false);
    }
    api.delete(name, &DeleteParams::background())
        .await
        .map_err(kube("delete", "CronJob", name))?;
    Ok(true)
}
