//! Why a `lake` command failed (the binary's errors): each keeps the error that caused it.

use std::net::SocketAddr;
use std::path::PathBuf;

use lake_runtime::flight;

/// Why a command failed: each keeps the error that caused it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Failure {
    #[error("invalid LAKE_* configuration: {0}")]
    Config(#[source] lake_common::plan::PlanErrors),
    #[error("{0} (or its lake local flag) must be a whole number above 0")]
    NotPositive(&'static str),
    #[error(
        "lake local --token-file is gone (one token set let a read token write): give each \
         endpoint its own with --query-token-file and --metadata-token-file"
    )]
    OneTokenFile,
    #[error(
        "a token is in both --query-token-file and --metadata-token-file: a query token must \
         never be valid for writes"
    )]
    SharedToken,
    #[error(transparent)]
    Tokens(#[from] flight::TokenFileError),
    #[error(transparent)]
    Tls(#[from] flight::TlsError),
    #[error("distributed query: {0}")]
    Discovery(#[from] flight::DiscoveryError),
    #[error("cannot read the CA certificate: {0}")]
    Ca(#[source] std::io::Error),
    #[error("cannot read the SQL from standard input: {0}")]
    Stdin(#[source] std::io::Error),
    #[error("cannot {action} {}: {source}", path.display())]
    DataDir {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Context(#[from] lake_runtime::context::ContextError),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Serve(#[from] flight::ServeError),
    #[error(
        "lake serve needs LAKE_TOKEN_FILE (a file of bearer tokens, one per line), or \
         LAKE_AUTH=none to serve without authentication"
    )]
    NoAuth,
    #[error(
        "lake local would serve {0} without authentication: give --query-token-file and \
         --metadata-token-file, listen on a loopback address, or set LAKE_AUTH=none to serve \
         without authentication"
    )]
    ExposedWithoutTokens(std::net::SocketAddr),
    #[error("{0} selftest checks failed")]
    Selftest(usize),
    #[error("{} is not a lake data directory (no _lake in it)", .0.display())]
    NotALake(PathBuf),
    #[error(
        "the lake in {} is being served (lake local holds it): stop it first, or let it \
         maintain itself with --maintain-every-minutes",
        .0.display()
    )]
    LakeServed(PathBuf),
    #[error(
        "--grace-seconds {grace} is below the query timeout ({timeout} s): maintenance could \
         remove a version under a query still reading it; raise the grace or lower \
         --query-timeout-seconds"
    )]
    GraceBelowTimeout { grace: u64, timeout: u64 },
    #[error("{0}")]
    Maintain(#[source] Box<lake_runtime::maintain::PassError>),
    #[error("maintenance failed for {0} tables (see above)")]
    MaintainTables(usize),
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error(transparent)]
    Sql(#[from] lake_runtime::sql_client::SqlClientError),
    #[error(transparent)]
    Client(#[from] lake_client::ClientError),
    #[error(transparent)]
    WorkerIdentity(#[from] flight::IdentityError),
    #[error(transparent)]
    Worker(#[from] flight::WorkerError),
    #[error("cannot start query worker {index}: {source}")]
    WorkerStart {
        index: usize,
        #[source]
        source: std::io::Error,
    },
    #[error("query worker {index} did not say where it listens (it stopped, or took over 30 s)")]
    WorkerSilent { index: usize },
}

pub(crate) fn listen(addr: SocketAddr) -> impl FnOnce(std::io::Error) -> Failure {
    move |source| Failure::Listen { addr, source }
}
