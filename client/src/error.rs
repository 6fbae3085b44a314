//! What can go wrong in the SDK, with the endpoint, path or range it concerns.

use lake_common::stage::{StageDescriptorError, StagePathError};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("endpoint {0:?} is not a grpc:// or grpc+tls:// URL")]
    Endpoint(String),
    #[error("a grpc+tls:// endpoint needs the PEM certificate of the CA to trust")]
    NoCa,
    #[error("cannot connect to {endpoint}: {source}")]
    Connect {
        endpoint: String,
        #[source]
        source: tonic::transport::Error,
    },
    /// The server refused or failed: its gRPC code and message.
    #[error("{code:?}: {message}")]
    Server { code: tonic::Code, message: String },
    /// The Flight client failed (a bad message, a broken stream) without a gRPC status.
    #[error(transparent)]
    Flight(arrow_flight::error::FlightError),
    /// The store answered a ranged read with fewer bytes than the range.
    #[error("the store returned a short read of {path:?}")]
    ShortRead { path: String },
    #[error("stage discovery at {endpoint}: {detail}")]
    Discovery { endpoint: String, detail: String },
    #[error("stage discovery at {endpoint}: {source}")]
    Descriptor {
        endpoint: String,
        #[source]
        source: StageDescriptorError,
    },
    #[error("the query endpoint {0} advertises no metadata endpoint; writes need one")]
    NoMetadataEndpoint(String),
    /// Connected over TLS, the server advertised a place to send writes or stage bytes over a
    /// plaintext transport: refused before a token or a credential goes there.
    #[error(
        "{query_endpoint} was reached over TLS but advertises a plaintext {what} ({advertised}); \
         refusing to send tokens or data there"
    )]
    Downgrade {
        query_endpoint: String,
        what: &'static str,
        advertised: String,
    },
    #[error(transparent)]
    Path(#[from] StagePathError),
    #[error("no AWS credentials for the S3 stage: {0}")]
    Credentials(String),
    #[error("stage object {0:?} does not exist")]
    NotFound(String),
    #[error("range {start}..{end} of {path:?} is past its end ({size} bytes)")]
    RangePastEnd {
        path: String,
        start: u64,
        end: u64,
        size: u64,
    },
    #[error("range {start}..{end} of {path:?} is empty or reversed")]
    BadRange { path: String, start: u64, end: u64 },
    #[error("stage {op} {path:?}: {source}")]
    Store {
        op: &'static str,
        path: String,
        #[source]
        source: object_store::Error,
    },
    #[error("local file {path}: {source}")]
    LocalFile {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl From<arrow_flight::error::FlightError> for ClientError {
    fn from(e: arrow_flight::error::FlightError) -> Self {
        match e {
            arrow_flight::error::FlightError::Tonic(status) => Self::Server {
                code: status.code(),
                message: status.message().to_owned(),
            },
            other => Self::Flight(other),
        }
    }
}

impl From<tonic::Status> for ClientError {
    fn from(status: tonic::Status) -> Self {
        Self::Server {
            code: status.code(),
            message: status.message().to_owned(),
        }
    }
}
