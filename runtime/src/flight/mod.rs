//! Arrow Flight SQL endpoints of the query and metadata roles.

mod auth;
mod cancel;
mod catalog;
mod copy;
mod info;
mod service;
mod sql;
mod surface;
mod types;
mod wire;

use std::net::SocketAddr;

use arrow_flight::flight_service_server::FlightServiceServer;
use tokio::net::TcpListener;

pub use auth::{TokenFileError, Tokens};
pub use service::{LakeFlightSql, Role};

/// Inbound message limit: DoPut carries data, larger than tonic's 4 MiB default.
const MAX_DECODING: usize = 256 * 1024 * 1024;

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

impl Tls {
    pub fn from_files(cert: &std::path::Path, key: &std::path::Path) -> Result<Self, String> {
        let read = |p: &std::path::Path| {
            std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
        };
        Ok(Self {
            identity: tonic::transport::Identity::from_pem(read(cert)?, read(key)?),
        })
    }
}

/// Serves `role` on `bound` until `shutdown` completes; with `tokens`, every call must present
/// one of them; with `tls`, only TLS connections are accepted.
pub async fn serve(
    bound: Bound,
    role: Role,
    tokens: Option<Tokens>,
    tls: Option<Tls>,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    // TCP_NODELAY on every accepted socket: without it Nagle's algorithm holds each response's
    // last small segment until the client's delayed ACK (~40 ms), so every RPC took ~44 ms on
    // loopback. (`Server::tcp_nodelay` only applies to listeners tonic binds itself.)
    let incoming =
        tonic::transport::server::TcpIncoming::from(bound.listener).with_nodelay(Some(true));
    let service = FlightServiceServer::new(surface::LakeFlightService(LakeFlightSql::new(
        role,
        tokens.clone(),
    )))
    .max_decoding_message_size(MAX_DECODING);
    let mut server = tonic::transport::Server::builder();
    if let Some(tls) = tls {
        server =
            server.tls_config(tonic::transport::ServerTlsConfig::new().identity(tls.identity))?;
    }
    match tokens {
        Some(tokens) => {
            let service =
                tonic::service::interceptor::InterceptedService::new(service, tokens.interceptor());
            server
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, shutdown)
                .await
        }
        None => {
            server
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, shutdown)
                .await
        }
    }
}
