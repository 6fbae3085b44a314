//! Arrow Flight SQL endpoints of the query and metadata roles.

mod actions;
mod auth;
mod bind;
mod bounded;
mod call_deadline;
mod cancel;
mod catalog;
mod commands;
mod copy;
mod depth;
mod distributed;
mod do_get;
mod fetch;
mod handle;
mod index;
mod info;
mod ingress;
mod ipc;
mod limits;
mod modulo;
mod options;
mod plans;
mod prepared;
mod protocol;
mod redact;
mod repeat;
mod restore;
mod search;
mod service;
mod sql;
mod statement;
mod status;
mod surface;
mod tokens;
mod types;
mod update;
mod wire;

use std::net::SocketAddr;

use arrow_flight::flight_service_server::FlightServiceServer;
use tokio::net::TcpListener;

pub use auth::{TokenFileError, Tokens};
pub use distributed::{
    Candidates, DistributedSettings, Distribution, IdentityError, LOCAL_WORKER_NAME, Peers,
    WorkerError, WorkerIdentity, kubernetes, kubernetes::DiscoveryError, serve_worker,
};
/// Checks one client IPC message before it is decoded (for readers of client files).
pub(crate) use ingress::check_message_at as check_ipc_message_at;
pub use limits::{Limits, SpillDirError};
pub use service::{LakeFlightSql, Role};
pub(crate) use sql::task_context;

/// Inbound message limit on metadata: DoPut carries data, larger than tonic's 4 MiB default.
pub(crate) const MAX_DECODING: usize = 256 * 1024 * 1024;
/// Inbound message limit on query, which takes no data (commands and bound parameters only):
/// a large DoPut is refused before it is read into memory.
const MAX_DECODING_QUERY: usize = 4 * 1024 * 1024;

/// A bound listener, ready to serve.
pub struct Bound {
    listener: TcpListener,
    pub addr: SocketAddr,
}

/// Binds `addr` (port 0 picks a free port).
pub async fn bind(addr: SocketAddr) -> std::io::Result<Bound> {
    let listener = TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    Ok(Bound { listener, addr })
}

/// A PEM certificate chain and private key, read at start-up.
#[derive(Clone)]
pub struct Tls {
    identity: tonic::transport::Identity,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tls(..)")
    }
}

/// A TLS file that cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read {}: {source}", path.display())]
pub struct TlsError {
    path: std::path::PathBuf,
    #[source]
    source: std::io::Error,
}

impl Tls {
    pub fn from_files(cert: &std::path::Path, key: &std::path::Path) -> Result<Self, TlsError> {
        let read = |p: &std::path::Path| {
            std::fs::read(p).map_err(|source| TlsError {
                path: p.to_owned(),
                source,
            })
        };
        Ok(Self {
            identity: tonic::transport::Identity::from_pem(read(cert)?, read(key)?),
        })
    }
}

/// A stop request (SIGTERM or SIGINT) seen by every server of the process, and how long calls
/// in flight may take to finish after it.
#[derive(Clone)]
pub struct Shutdown {
    requested: tokio::sync::watch::Receiver<bool>,
    pub grace: std::time::Duration,
}

impl Shutdown {
    /// Watches SIGTERM (what Kubernetes sends a pod: the runtime is PID 1) and SIGINT.
    pub fn on_signals(grace: std::time::Duration) -> Self {
        let (tx, requested) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            let term = async {
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(mut term) => {
                        term.recv().await;
                    }
                    // Without a handler, only SIGINT stops the process gracefully.
                    Err(_) => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                () = term => {}
            }
            tracing::info!(
                ?grace,
                "stop requested: refusing new calls, draining calls in flight"
            );
            let _ = tx.send(true);
        });
        Self { requested, grace }
    }

    async fn requested(mut self) {
        let _ = self.requested.wait_for(|stop| *stop).await;
    }
}

/// Why an endpoint could not serve.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Spill(#[from] SpillDirError),
    #[error("the endpoint's SQL session could not be built: {0}")]
    Session(#[source] datafusion::error::DataFusionError),
    #[error("serving failed: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// The largest HTTP/2 frame a client may send (the protocol's default is 16 KiB).
const MAX_FRAME: u32 = 1024 * 1024;

/// Serves `role` on `bound` until `shutdown` is requested, then lets calls in flight finish for
/// its grace period; with `tokens`, every call must present one of them; with `tls`, only TLS
/// connections are accepted.
pub async fn serve(
    bound: Bound,
    role: Role,
    tokens: Option<Tokens>,
    tls: Option<Tls>,
    limits: Limits,
    shutdown: Shutdown,
) -> Result<(), ServeError> {
    use futures::FutureExt;
    // TCP_NODELAY on every accepted socket: without it Nagle's algorithm holds each response's
    // last small segment until the client's delayed ACK (~40 ms), so every RPC took ~44 ms on
    // loopback. (`Server::tcp_nodelay` only applies to listeners tonic binds itself.)
    let incoming =
        tonic::transport::server::TcpIncoming::from(bound.listener).with_nodelay(Some(true));
    let limit = match role {
        Role::Query { .. } => MAX_DECODING_QUERY,
        Role::Metadata(_) => MAX_DECODING,
    };
    let flight = std::sync::Arc::new(surface::LakeFlightService(LakeFlightSql::new(
        role,
        tokens.clone(),
        limits,
    )?));
    let service = do_get::Routes::new(
        FlightServiceServer::from_arc(flight.clone()).max_decoding_message_size(limit),
        flight,
        // A ticket holds at most a statement's SQL (1 MiB), never data: DoGet reads its request
        // whole, so it is held to the query role's limit on both roles.
        limit.min(MAX_DECODING_QUERY),
    );
    // HTTP/2 frames of up to 1 MiB instead of 16 KiB, and a receive window that grows with the
    // connection's bandwidth-delay product: a client's bulk upload (ingest, COPY's parameters)
    // is otherwise cut into thousands of frames and stalls on 64 KiB windows.
    let mut server = tonic::transport::Server::builder()
        .max_frame_size(MAX_FRAME)
        .http2_adaptive_window(Some(true));
    if let Some(tls) = tls {
        server =
            server.tls_config(tonic::transport::ServerTlsConfig::new().identity(tls.identity))?;
    }
    let drain = shutdown.clone().requested();
    let serving = match tokens {
        Some(tokens) => {
            let service =
                tonic::service::interceptor::InterceptedService::new(service, tokens.interceptor());
            server
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, drain)
                .boxed()
        }
        None => server
            .add_service(service)
            .serve_with_incoming_shutdown(incoming, drain)
            .boxed(),
    };
    let grace = shutdown.grace;
    let deadline = async move {
        shutdown.requested().await;
        tokio::time::sleep(grace).await;
    };
    tokio::select! {
        result = serving => Ok(result?),
        () = deadline => {
            tracing::warn!(?grace, "grace period over: stopping with calls still in flight");
            Ok(())
        }
    }
}
