//! The post-rollout selftest Jobs: created once per configuration (their names carry its hash),
//! then read back for their outcome.

use crate::plan::iam::Identity;
use k8s_openapi::api::batch::v1::Job;
use kube::Client;
use kube::api::{Api, PostParams};

use super::error::ApplyError;

/// Where one role's selftest stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Running,
    Passed,
    Failed,
}

/// Creates `job` if it does not exist and reports how it stands.
pub async fn ensure(client: &Client, namespace: &str, job: &Job) -> Result<Outcome, ApplyError> {
    let api: Api<Job> = Api::namespaced(client.clone(), namespace);
    let name = job.metadata.name.clone().unwrap_or_default();
    let error = |operation| {
        let name = name.clone();
        move |source| ApplyError::Kube {
            operation,
            kind: "Job".into(),
            name,
            source: Box::new(source),
        }
    };
    let live = match api.get_opt(&name).await.map_err(error("get"))? {
        Some(live) => live,
        None => match api.create(&PostParams::default(), job).await {
            Ok(created) => created,
            Err(kube::Error::Api(s)) if s.is_already_exists() => return Ok(Outcome::Running),
            Err(source) => return Err(error("create")(source)),
        },
    };
    let condition = |type_: &str| {
        live.status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .any(|c| c.type_ == type_ && c.status == "True")
    };
    Ok(if condition("Complete") {
        Outcome::Passed
    } else if condition("Failed") {
        Outcome::Failed
    } else {
        Outcome::Running
    })
}

/// The roles' outcomes as one summary: (all passed, any failed, message).
pub fn summary(outcomes: &[(Identity, String, Outcome)]) -> (bool, bool, String) {
    let passed = outcomes.iter().all(|(_, _, o)| *o == Outcome::Passed);
    let failed: Vec<String> = outcomes
        .iter()
        .filter(|(_, _, o)| *o == Outcome::Failed)
        .map(|(role, job, _)| format!("the {role} selftest failed (kubectl logs job/{job})"))
        .collect();
    let message = if passed {
        let roles: Vec<String> = outcomes
            .iter()
            .map(|(role, _, _)| role.to_string())
            .collect();
        format!("lake selftest passed in every role ({})", roles.join(", "))
    } else if !failed.is_empty() {
        failed.join("; ")
    } else {
        "lake selftest is running".to_owned()
    };
    (passed, !failed.is_empty(), message)
}
