//! The controller shell of `lake-operator run`: a kube-runtime Controller over LakeClusters that
//! also watches the objects it owns, a metrics/health endpoint, and graceful shutdown on
//! SIGTERM/SIGINT (in-flight reconciles finish first).
//!
//! One replica: the metadata role's single-writer rule is enforced by the Deployment strategy,
//! and the operator itself runs with `replicas: 1` and `strategy: Recreate` (see
//! `config/manager/`) instead of leader election.

use std::net::SocketAddr;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::net::TcpListener;

use crate::aws::{AwsPool, AwsSettings};
use crate::crd::LakeCluster;
use crate::metrics::Metrics;
use crate::reconcile::{Context, error_policy, reconcile};

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot reach the Kubernetes API: {0}")]
    Client(#[source] kube::Error),
    #[error(
        "the LakeCluster CRD is not installed (or not readable): {0}; install it with \
         `kubectl apply -f crds/lakecluster.yaml` (or `kubectl apply -k config/default`)"
    )]
    NoCrd(#[source] kube::Error),
    #[error("cannot listen on {addr} for metrics: {source}")]
    Metrics {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Leader(#[from] crate::leader::LeaderError),
}

pub struct RunOptions {
    /// Watch one namespace; `None` watches all.
    pub namespace: Option<String>,
    pub metrics_addr: SocketAddr,
    pub aws: AwsSettings,
    pub oidc_provider: Option<String>,
    pub allowlist: crate::allowlist::Allowlist,
    /// Reconcile only while holding this Lease (several replicas); `None`: always (one replica).
    pub leader_election: Option<crate::leader::LeaderElection>,
}

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

pub async fn run(options: RunOptions) -> Result<(), RunError> {
    let client = Client::try_default().await.map_err(RunError::Client)?;
    let ns = options.namespace.as_deref();
    let clusters: Api<LakeCluster> = api(&client, ns);
    clusters
        .list(&kube::api::ListParams::default().limit(1))
        .await
        .map_err(RunError::NoCrd)?;

    let metrics = Arc::new(Metrics::default());
    let listener = TcpListener::bind(options.metrics_addr)
        .await
        .map_err(|source| RunError::Metrics {
            addr: options.metrics_addr,
            source,
        })?;
    tracing::info!(addr = %options.metrics_addr, "metrics and health on /metrics, /healthz");
    let server = tokio::spawn(serve_metrics(listener, metrics.clone()));

    // A standby serves /healthz while it waits, and reconciles nothing.
    let leadership = match options.leader_election {
        Some(election) => Some(election.acquire(client.clone()).await?),
        None => None,
    };

    let ctx = Context::new(
        client.clone(),
        AwsPool::new(options.aws),
        options.oidc_provider,
        metrics,
        options.allowlist,
    );
    let owned = watcher::Config::default().labels("app.kubernetes.io/managed-by=lake-operator");
    let controller = Controller::new(clusters, watcher::Config::default().any_semantic())
        .owns(api::<Deployment>(&client, ns), owned.clone())
        .owns(api::<StatefulSet>(&client, ns), owned.clone())
        .owns(api::<ConfigMap>(&client, ns), owned.clone())
        .owns(api::<Service>(&client, ns), owned.clone())
        .owns(api::<ServiceAccount>(&client, ns), owned.clone())
        .owns(api::<PodDisruptionBudget>(&client, ns), owned.clone())
        .owns(api::<NetworkPolicy>(&client, ns), owned.clone())
        .owns(api::<Job>(&client, ns), owned.clone())
        .owns(api::<CronJob>(&client, ns), owned)
        // A maintenance pass is a Job of the CronJob, not of the LakeCluster: its end is
        // found by the cluster's label.
        .watches(
            api::<Job>(&client, ns),
            watcher::Config::default().labels(&format!(
                "app.kubernetes.io/managed-by=lake-operator,app.kubernetes.io/component={}",
                lake_common::config::MAINTENANCE_ROLE
            )),
            |job| {
                let cluster = job.labels().get("app.kubernetes.io/instance")?.clone();
                Some(ObjectRef::<LakeCluster>::new(&cluster).within(&job.namespace()?))
            },
        )
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => tracing::debug!(cluster = %object.name, "reconciled"),
                Err(e) => tracing::debug!(error = %e, "reconcile did not complete"),
            }
        });
    let lost = match &leadership {
        Some(leadership) => tokio::select! {
            () = controller => None,
            lost = leadership.keep() => Some(lost),
        },
        None => {
            controller.await;
            None
        }
    };
    server.abort();
    if let Some(lost) = lost {
        return Err(lost.into());
    }
    if let Some(leadership) = leadership {
        leadership.step_down().await;
    }
    tracing::info!("stopped");
    Ok(())
}

/// Answers `GET /metrics` (OpenMetrics text) and `GET /healthz`, `/readyz`; anything else is
/// 404. One request per connection; a request head over 8 KiB, or one not complete within 5 s,
/// gets no answer and holds nothing but its own connection.
pub async fn serve_metrics(listener: TcpListener, metrics: Arc<Metrics>) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(std::time::Duration::from_secs(5))
        .max_buf_size(8 * 1024)
        .keep_alive(false);
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let metrics = metrics.clone();
        let service = hyper::service::service_fn(move |request| {
            let response = respond(&request, &metrics);
            async move { Ok::<_, std::convert::Infallible>(response) }
        });
        let connection = http.serve_connection(TokioIo::new(stream), service);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "a metrics request was not answered");
            }
        });
    }
}

fn respond<B>(
    request: &hyper::Request<B>,
    metrics: &Metrics,
) -> hyper::Response<http_body_util::Full<hyper::body::Bytes>> {
    use hyper::StatusCode;
    let (status, content_type, body) = match request.uri().path() {
        "/metrics" => (
            StatusCode::OK,
            crate::metrics::CONTENT_TYPE,
            metrics.render(),
        ),
        "/healthz" | "/readyz" => (StatusCode::OK, "text/plain", "ok\n".to_owned()),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found\n".to_owned(),
        ),
    };
    let mut response = hyper::Response::new(http_body_util::Full::new(body.into()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn an_oversized_or_stalled_request_gets_nothing_and_blocks_no_one() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve_metrics(listener, Arc::new(Metrics::default())));
        // A client that opens a request and never finishes it.
        let mut stalled = tokio::net::TcpStream::connect(addr).await.unwrap();
        stalled
            .write_all(b"GET /metrics HTTP/1.1\r\n")
            .await
            .unwrap();
        // A head past 8 KiB: closed without an answer.
        let mut big = tokio::net::TcpStream::connect(addr).await.unwrap();
        let head = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(9000));
        let _ = big.write_all(head.as_bytes()).await;
        let mut out = Vec::new();
        let _ = big.read_to_end(&mut out).await;
        assert!(
            !out.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&out)
        );
        // Others are still served meanwhile.
        let mut ok = tokio::net::TcpStream::connect(addr).await.unwrap();
        ok.write_all(b"GET /healthz HTTP/1.1\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        ok.read_to_string(&mut out).await.unwrap();
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        drop(stalled);
    }

    #[tokio::test]
    async fn a_request_in_several_segments_is_read_whole() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve_metrics(listener, Arc::new(Metrics::default())));
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        stream.write_all(b"GET /metr").await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        stream
            .write_all(b"ics HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        stream
            .write_all(b"Connection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        stream.read_to_string(&mut out).await.unwrap();
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        assert!(out.contains("lake_operator_reconciles_total 0"), "{out}");
    }

    #[tokio::test]
    async fn metrics_and_health_are_served() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let metrics = Arc::new(Metrics::default());
        metrics.reconciled(std::time::Duration::from_millis(5));
        tokio::spawn(serve_metrics(listener, metrics));
        let get = |path: &'static str| async move {
            let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            stream
                .write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
                .await
                .unwrap();
            let mut out = String::new();
            stream.read_to_string(&mut out).await.unwrap();
            out
        };
        let metrics = get("/metrics").await;
        assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
        assert!(
            metrics.contains("lake_operator_reconciles_total 1"),
            "{metrics}"
        );
        assert!(get("/healthz").await.starts_with("HTTP/1.1 200"));
        assert!(get("/nope").await.starts_with("HTTP/1.1 404"));
    }
}
