//! Kubernetes objects: server-side apply (field manager `lake-operator`), but only for objects
//! whose live state lacks something the plan sets, so a converged cluster is never written.

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::error::ApplyError;
use crate::plan::Object;
use crate::plan::tables::MANAGER;
use crate::plan::workloads::Rollout;

/// Whether every field `desired` sets has the same value in `live` (the API server adds
/// defaults and status; those are not differences).
pub fn is_subset(desired: &Value, live: &Value) -> bool {
    match (desired, live) {
        (Value::Object(d), Value::Object(l)) => d.iter().all(|(k, v)| match l.get(k) {
            Some(lv) => v.is_null() || is_subset(v, lv),
            // The API server leaves out an empty list (a Role without rules).
            None => v.is_null() || v.as_array().is_some_and(Vec::is_empty),
        }),
        (Value::Array(d), Value::Array(l)) => {
            d.len() == l.len() && d.iter().zip(l).all(|(a, b)| is_subset(a, b))
        }
        (d, l) => d == l,
    }
}

async fn ensure_one<K>(client: &Client, namespace: &str, object: &K) -> Result<bool, ApplyError>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + Serialize
        + DeserializeOwned,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let name = object.meta().name.clone().unwrap_or_default();
    let kind = K::kind(&K::DynamicType::default()).into_owned();
    let error = |operation, source| ApplyError::Kube {
        operation,
        kind: kind.clone(),
        name: name.clone(),
        source: Box::new(source),
    };
    let desired = serde_json::to_value(object).unwrap_or_default();
    if let Some(live) = api.get_opt(&name).await.map_err(|e| error("get", e))? {
        let live = serde_json::to_value(&live).unwrap_or_default();
        if is_subset(&desired, &live) {
            return Ok(false);
        }
    }
    api.patch(
        &name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(object),
    )
    .await
    .map_err(|e| error("apply", e))?;
    Ok(true)
}

/// Placeholders the offline plan uses for what only reconcile can look up.
const PLACEHOLDERS: [&str; 2] = [
    crate::plan::iam::UNKNOWN_ACCOUNT,
    crate::plan::tables::UNKNOWN_UID,
];

/// Refuses the whole set if any object holds a placeholder: nothing partial reaches the API.
pub fn check_resolved(objects: &[Object]) -> Result<(), ApplyError> {
    for object in objects {
        let text = serde_json::to_string(object).unwrap_or_default();
        if let Some(placeholder) = PLACEHOLDERS.into_iter().find(|p| text.contains(p)) {
            return Err(ApplyError::Unresolved {
                kind: object.kind().to_owned(),
                name: object.name().to_owned(),
                placeholder,
            });
        }
    }
    Ok(())
}

/// Applies what differs; returns `kind/name` of every object written. Writes nothing if any
/// object is unresolved.
pub async fn ensure(
    client: &Client,
    namespace: &str,
    objects: &[Object],
) -> Result<Vec<String>, ApplyError> {
    check_resolved(objects)?;
    let mut written = Vec::new();
    for object in objects {
        let changed = match object {
            Object::ConfigMap(o) => ensure_one(client, namespace, o).await?,
            Object::ServiceAccount(o) => ensure_one(client, namespace, o).await?,
            Object::Deployment(o) => ensure_one(client, namespace, o).await?,
            Object::StatefulSet(o) => ensure_one(client, namespace, o).await?,
            Object::Service(o) => ensure_one(client, namespace, o).await?,
            Object::PodDisruptionBudget(o) => ensure_one(client, namespace, o).await?,
            Object::NetworkPolicy(o) => ensure_one(client, namespace, o).await?,
            Object::CronJob(o) => ensure_one(client, namespace, o).await?,
            Object::Role(o) => ensure_one(client, namespace, o).await?,
            Object::RoleBinding(o) => ensure_one(client, namespace, o).await?,
        };
        if changed {
            written.push(format!("{}/{}", object.kind(), object.name()));
        }
    }
    Ok(written)
}

async fn get<K>(client: &Client, namespace: &str, name: &str) -> Result<Option<K>, ApplyError>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + DeserializeOwned,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    api.get_opt(name).await.map_err(|source| ApplyError::Kube {
        operation: "get",
        kind: K::kind(&K::DynamicType::default()).into_owned(),
        name: name.to_owned(),
        source: Box::new(source),
    })
}

/// Counts of a rollout, as a Deployment or StatefulSet reports them.
struct Progress {
    generation: i64,
    observed: i64,
    want: i32,
    available: i32,
    updated: i32,
    /// A StatefulSet's pods all run its newest revision.
    on_latest_revision: bool,
}

fn summary(kind: &str, name: &str, p: &Progress) -> (bool, String) {
    let Progress {
        generation,
        observed,
        want,
        available,
        updated,
        on_latest_revision,
    } = *p;
    if observed < generation {
        return (false, format!("{kind} {name}: rollout not observed yet"));
    }
    if updated < want || available < want || !on_latest_revision {
        return (
            false,
            format!("{kind} {name}: {available}/{want} available, {updated} updated"),
        );
    }
    (true, format!("{kind} {name}: {available}/{want} available"))
}

/// Rollout state of one workload: (ready, human summary).
pub async fn rollout(
    client: &Client,
    namespace: &str,
    workload: &Rollout,
) -> Result<(bool, String), ApplyError> {
    let progress = match workload {
        Rollout::Deployment(name) => {
            let Some(deployment) = get::<Deployment>(client, namespace, name).await? else {
                return Ok((false, format!("Deployment {name} does not exist yet")));
            };
            let status = deployment.status.unwrap_or_default();
            (
                "Deployment",
                name,
                Progress {
                    generation: deployment.metadata.generation.unwrap_or_default(),
                    observed: status.observed_generation.unwrap_or_default(),
                    want: deployment.spec.replicas.unwrap_or(1),
                    available: status.available_replicas.unwrap_or_default(),
                    updated: status.updated_replicas.unwrap_or_default(),
                    on_latest_revision: true,
                },
            )
        }
        Rollout::StatefulSet(name) => {
            let Some(set) = get::<StatefulSet>(client, namespace, name).await? else {
                return Ok((false, format!("StatefulSet {name} does not exist yet")));
            };
            let status = set.status.unwrap_or_default();
            (
                "StatefulSet",
                name,
                Progress {
                    generation: set.metadata.generation.unwrap_or_default(),
                    observed: status.observed_generation.unwrap_or_default(),
                    want: set.spec.replicas.unwrap_or(1),
                    available: status.available_replicas.unwrap_or_default(),
                    updated: status.updated_replicas.unwrap_or_default(),
                    on_latest_revision: status.update_revision.is_some()
                        && status.current_revision == status.update_revision,
                },
            )
        }
    };
    let (kind, name, progress) = progress;
    Ok(summary(kind, name, &progress))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_added_by_the_server_are_not_differences() {
        let desired = json!({"spec": {"type": "ClusterIP", "ports": [{"port": 8815}]}});
        let live = json!({"spec": {"type": "ClusterIP", "clusterIP": "10.0.0.1",
                                    "ports": [{"port": 8815, "protocol": "TCP"}]},
                          "status": {}});
        assert!(is_subset(&desired, &live));
        let changed = json!({"spec": {"type": "LoadBalancer", "ports": [{"port": 8815}]}});
        assert!(!is_subset(&changed, &live));
        let more_ports = json!({"spec": {"ports": [{"port": 8815}, {"port": 1}]}});
        assert!(!is_subset(&more_ports, &live));
    }
}
