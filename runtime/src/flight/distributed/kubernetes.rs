//! Peers found through the Kubernetes API: the ready endpoints of the query role's headless
//! Service (its EndpointSlices), or the ready pods of a label selector, watched — a pod that
//! stops being ready, or starts terminating, leaves the candidates at once, before it stops.
//!
//! The API identity is the pod's own ServiceAccount token from a projected volume the operator
//! mounts (`token`, `ca.crt`, `namespace`); the API's address is the kubelet's
//! `KUBERNETES_SERVICE_HOST`/`KUBERNETES_SERVICE_PORT`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::{self, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Config};
use lake_common::config::WorkerPeers;
use url::Url;

#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error(
        "peers from the Kubernetes API need KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT \
         (the kubelet sets them in every pod)"
    )]
    NoApi,
    #[error("the Kubernetes API address {0:?} is not a URL")]
    Address(String),
    #[error("cannot read the pod's namespace from {}: {source}", path.display())]
    Namespace {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot reach the Kubernetes API: {0}")]
    Client(#[source] kube::Error),
    #[error("{0} are not found through the Kubernetes API")]
    NotKubernetes(WorkerPeers),
}

/// The candidates the watch keeps: read when the workers are checked.
#[derive(Clone)]
pub struct Found {
    kind: Kind,
    port: u16,
    /// Stops the watch when the last handle goes.
    _watching: Arc<super::Watching>,
}

#[derive(Clone)]
enum Kind {
    Slices(Store<EndpointSlice>),
    Pods(Store<Pod>),
}

impl std::fmt::Debug for Found {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Found")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

/// A client with the pod's API identity in `dir`, to the API the kubelet names.
pub fn client(dir: &Path) -> Result<Client, DiscoveryError> {
    let var = |name| std::env::var(name).map_err(|_| DiscoveryError::NoApi);
    let (host, port) = (
        var("KUBERNETES_SERVICE_HOST")?,
        var("KUBERNETES_SERVICE_PORT")?,
    );
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host
    };
    client_at(&format!("https://{host}:{port}"), dir)
}

/// A client with the API identity in `dir` (`token`, `ca.crt`, `namespace`), to `address`.
pub fn client_at(address: &str, dir: &Path) -> Result<Client, DiscoveryError> {
    let address = address.to_owned();
    let mut config = Config::new(
        address
            .parse()
            .map_err(|_| DiscoveryError::Address(address.clone()))?,
    );
    let namespace = dir.join("namespace");
    config.default_namespace = std::fs::read_to_string(&namespace)
        .map_err(|source| DiscoveryError::Namespace {
            path: namespace,
            source,
        })?
        .trim()
        .to_owned();
    config.root_cert_file = Some(dir.join("ca.crt"));
    // Re-read as the kubelet rotates it.
    config.auth_info.token_file = Some(dir.join("token").display().to_string());
    Client::try_from(config).map_err(DiscoveryError::Client)
}

/// Watches the peers `peers` names in the client's namespace.
pub fn watch(client: Client, peers: &WorkerPeers) -> Result<Found, DiscoveryError> {
    fn run<K>(api: Api<K>, labels: &str) -> (Store<K>, tokio::task::JoinHandle<()>)
    where
        K: kube::Resource<DynamicType = ()>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + Send
            + Sync
            + 'static,
    {
        let (reader, writer) = reflector::store();
        let stream = reflector(
            writer,
            watcher(api, watcher::Config::default().labels(labels)),
        )
        .default_backoff()
        .touched_objects();
        let task = tokio::spawn(stream.for_each(|event| async move {
            if let Err(e) = event {
                tracing::warn!(error = %e, "watching the workers in the Kubernetes API");
            }
        }));
        (reader, task)
    }
    let (kind, port, task) = match peers {
        WorkerPeers::EndpointSlices { service, port } => {
            let (store, task) = run(
                Api::<EndpointSlice>::default_namespaced(client),
                &format!("kubernetes.io/service-name={service}"),
            );
            (Kind::Slices(store), *port, task)
        }
        WorkerPeers::Pods { selector, port } => {
            let (store, task) = run(Api::<Pod>::default_namespaced(client), selector);
            (Kind::Pods(store), *port, task)
        }
        other => return Err(DiscoveryError::NotKubernetes(other.clone())),
    };
    Ok(Found {
        kind,
        port,
        _watching: Arc::new(super::Watching(task)),
    })
}

impl Found {
    /// The workers' URLs now: ready, not terminating.
    pub fn urls(&self) -> Vec<Url> {
        let addresses: Vec<String> = match &self.kind {
            Kind::Slices(store) => store
                .state()
                .iter()
                .flat_map(|s| ready_endpoints(s))
                .collect(),
            Kind::Pods(store) => store.state().iter().filter_map(|p| ready_pod(p)).collect(),
        };
        addresses
            .into_iter()
            .filter_map(|a| url(&a, self.port))
            .collect()
    }
}

/// The addresses of a slice's endpoints that are ready and not terminating (a missing `ready`
/// is ready, as the API documents).
fn ready_endpoints(slice: &EndpointSlice) -> Vec<String> {
    slice
        .endpoints
        .iter()
        .flatten()
        .filter(|e| {
            let conditions = e.conditions.as_ref();
            conditions.and_then(|c| c.ready) != Some(false)
                && conditions.and_then(|c| c.terminating) != Some(true)
        })
        .flat_map(|e| e.addresses.iter().cloned())
        .collect()
}

/// A pod's address if it is ready and not being deleted.
fn ready_pod(pod: &Pod) -> Option<String> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let status = pod.status.as_ref()?;
    let ready = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    ready.then(|| status.pod_ip.clone()).flatten()
}

fn url(address: &str, port: u16) -> Option<Url> {
    let ip: std::net::IpAddr = address.parse().ok()?;
    Url::parse(&format!("https://{}", std::net::SocketAddr::new(ip, port))).ok()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    #[test]
    fn only_ready_endpoints_that_are_not_terminating_are_workers() {
        let endpoint = |ip: &str, ready, terminating| Endpoint {
            addresses: vec![ip.into()],
            conditions: Some(EndpointConditions {
                ready,
                terminating,
                ..Default::default()
            }),
            ..Default::default()
        };
        let slice = EndpointSlice {
            endpoints: Some(vec![
                endpoint("10.0.0.1", Some(true), None),
                endpoint("10.0.0.2", Some(false), None),
                endpoint("10.0.0.3", Some(true), Some(true)),
                endpoint("10.0.0.4", None, Some(false)),
            ]),
            ..Default::default()
        };
        assert_eq!(ready_endpoints(&slice), ["10.0.0.1", "10.0.0.4"]);
        assert_eq!(
            url("fd00::1", 8817).map(String::from),
            Some("https://[fd00::1]:8817/".into())
        );
        assert_eq!(url("not-an-ip", 8817), None);
    }

    #[test]
    fn only_ready_pods_that_are_not_deleted_are_workers() {
        let pod = |ready: &str, deleting: bool| Pod {
            metadata: kube::api::ObjectMeta {
                deletion_timestamp: deleting.then(|| Time(Default::default())),
                ..Default::default()
            },
            status: Some(PodStatus {
                pod_ip: Some("10.0.0.9".into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: ready.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(ready_pod(&pod("True", false)).as_deref(), Some("10.0.0.9"));
        assert_eq!(ready_pod(&pod("False", false)), None);
        assert_eq!(ready_pod(&pod("True", true)), None);
    }
}
