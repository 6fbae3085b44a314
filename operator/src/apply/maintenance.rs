//! The maintenance CronJob's passes (its Jobs, read back), and the CronJob's removal when
//! `spec.maintenance` goes.

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
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

/// The Jobs the CronJob `cron_job` started (their controller reference names the live
/// CronJob's uid: a Job that merely carries the labels is not a pass), oldest first.
pub async fn passes(
    client: &Client,
    namespace: &str,
    cluster: &str,
    cron_job: &str,
) -> Result<Vec<Pass>, ApplyError> {
    let cron_jobs: Api<CronJob> = Api::namespaced(client.clone(), namespace);
    let Some(uid) = cron_jobs
        .get_opt(cron_job)
        .await
        .map_err(kube("get", "CronJob", cron_job))?
        .and_then(|c| c.metadata.uid)
    else {
        return Ok(Vec::new());
    };
    let api: Api<Job> = Api::namespaced(client.clone(), namespace);
    let selector = format!(
        "app.kubernetes.io/instance={cluster},app.kubernetes.io/component={}",
        lake_common::config::MAINTENANCE_ROLE
    );
    let jobs = api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(kube("list", "Job", &selector))?;
    let mut passes: Vec<Pass> = jobs
        .items
        .iter()
        .filter(|job| {
            job.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.kind == "CronJob" && o.uid == uid && o.controller == Some(true))
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

/// Deletes the maintenance CronJob `name` (its running Job goes with it), its ServiceAccount
/// (the one annotated with the maintenance role) and its ConfigMap, each only if it is this
/// operator's (its manager label and the cluster's owner reference). Returns what it deleted.
pub async fn remove(
    client: &Client,
    namespace: &str,
    cluster_uid: Option<&str>,
    name: &str,
) -> Result<Vec<String>, ApplyError> {
    let mut removed = Vec::new();
    if remove_one::<CronJob>(client, namespace, cluster_uid, name).await? {
        removed.push(format!("CronJob/{name}"));
    }
    if remove_one::<ServiceAccount>(client, namespace, cluster_uid, name).await? {
        removed.push(format!("ServiceAccount/{name}"));
    }
    if remove_one::<ConfigMap>(client, namespace, cluster_uid, name).await? {
        removed.push(format!("ConfigMap/{name}"));
    }
    Ok(removed)
}

async fn remove_one<K>(
    client: &Client,
    namespace: &str,
    cluster_uid: Option<&str>,
    name: &str,
) -> Result<bool, ApplyError>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
    K::DynamicType: Default,
{
    let kind = K::kind(&K::DynamicType::default()).into_owned();
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let Some(live) = api.get_opt(name).await.map_err(kube("get", &kind, name))? else {
        return Ok(false);
    };
    let meta = live.meta();
    let managed = meta
        .labels
        .as_ref()
        .and_then(|l| l.get("app.kubernetes.io/managed-by"))
        .is_some_and(|m| m == MANAGER);
    let owned = meta
        .owner_references
        .iter()
        .flatten()
        .any(|o| Some(o.uid.as_str()) == cluster_uid && o.kind == "LakeCluster");
    if !(managed && owned) {
        return Ok(false);
    }
    api.delete(name, &DeleteParams::background())
        .await
        .map_err(kube("delete", &kind, name))?;
    Ok(true)
}
