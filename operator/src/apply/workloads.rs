//! Kubernetes objects: server-side apply (field manager `lake-operator`), but only for objects
//! whose live state lacks something the plan sets, so a converged cluster is never written.

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::error::ApplyError;
use crate::plan::Object;
use crate::plan::tables::MANAGER;

/// Whether every field `desired` sets has the same value in `live` (the API server adds
/// defaults and status; those are not differences).
pub fn is_subset(desired: &Value, live: &Value) -> bool {
    match (desired, live) {
        (Value::Object(d), Value::Object(l)) => d
            .iter()
            .all(|(k, v)| v.is_null() || l.get(k).is_some_and(|lv| is_subset(v, lv))),
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
            Object::Service(o) => ensure_one(client, namespace, o).await?,
            Object::PodDisruptionBudget(o) => ensure_one(client, namespace, o).await?,
            Object::NetworkPolicy(o) => ensure_one(client, namespace, o).await?,
        };
        if changed {
            written.push(format!("{}/{}", object.kind(), object.name()));
        }
    }
    Ok(written)
}

/// Rollout state of one Deployment: (ready, human summary).
pub async fn rollout(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<(bool, String), ApplyError> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let Some(deployment) = api.get_opt(name).await.map_err(|source| ApplyError::Kube {
        operation: "get",
        kind: "Deployment".into(),
        name: name.to_owned(),
        source: Box::new(source),
    })?
    else {
        return Ok((false, format!("Deployment {name} does not exist yet")));
    };
    let generation = deployment.metadata.generation.unwrap_or_default();
    let want = deployment.spec.replicas.unwrap_or(1);
    let status = deployment.status.unwrap_or_default();
    let observed = status.observed_generation.unwrap_or_default();
    let available = status.available_replicas.unwrap_or_default();
    let updated = status.updated_replicas.unwrap_or_default();
    if observed < generation {
        return Ok((
            false,
            format!("Deployment {name}: rollout not observed yet"),
        ));
    }
    if updated < want || available < want {
        return Ok((
            false,
            format!("Deployment {name}: {available}/{want} available, {updated} updated"),
        ));
    }
    Ok((
        true,
        format!("Deployment {name}: {available}/{want} available"),
    ))
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
