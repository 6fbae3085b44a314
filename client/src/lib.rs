//! lake-client: the Rust SDK of lake.
//!
//! `LakeClient::connect(query_endpoint)` is all a user needs. It asks the query endpoint once
//! where the managed stage is (`lake.stage.describe`: a versioned descriptor with no
//! credentials) and where writes go (`lake.metadata.endpoint`), then:
//! - runs SQL on query and streams Arrow record batches back;
//! - sends writes (DDL, INSERT, DELETE, `COPY INTO`, bulk ingest) to the metadata endpoint;
//! - moves stage files directly between this process and object storage (S3 with the AWS
//!   default credential chain, or the local directory of a local lake) — never through a server.
//!
//! ```no_run
//! # async fn demo() -> Result<(), lake_client::ClientError> {
//! use futures::TryStreamExt;
//! let lake = lake_client::LakeClient::connect("grpc://127.0.0.1:8815").await?;
//! lake.stage().put("in/orders.csv", "id,item\n1,tea\n".into()).await?;
//! lake.execute("COPY INTO sales.orders FROM 'in/orders.csv'").await?;
//! let batches: Vec<_> = lake.query("SELECT * FROM sales.orders").await?.try_collect().await?;
//! # Ok(()) }
//! ```

mod aws;
mod connection;
mod error;
mod stage;

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow_flight::Action;
use arrow_flight::sql::client::FlightSqlServiceClient;
use arrow_flight::sql::{CommandStatementIngest, TableDefinitionOptions};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use lake_common::stage::{DESCRIBE_STAGE_ACTION, METADATA_ENDPOINT_ACTION, StageDescriptor};
use object_store::ObjectStore;
use tonic::transport::Channel;

pub use connection::{ConnectOptions, flight_sql};
pub use error::ClientError;
pub use lake_common::stage::{StagePath, StagePathError};
pub use stage::{PART_SIZE, Stage, StageObject};

/// Record batches as they arrive from the server.
pub type RecordBatchStream = BoxStream<'static, Result<RecordBatch, ClientError>>;

/// How bulk ingest treats an existing table (ADBC's `adbc_ingest` modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IngestMode {
    /// Create the table; fail if it exists.
    Create,
    /// Append to the table; fail if it does not exist.
    Append,
    /// Replace the table's rows (and schema).
    Replace,
    /// Create the table if needed, then append.
    CreateAppend,
}

/// A connection to a lake through its query endpoint.
#[derive(Debug, Clone)]
pub struct LakeClient {
    query_endpoint: String,
    query: FlightSqlServiceClient<Channel>,
    metadata_endpoint: Option<String>,
    /// Connected on the first write, then reused.
    metadata: tokio::sync::OnceCell<FlightSqlServiceClient<Channel>>,
    options: ConnectOptions,
    descriptor: Option<StageDescriptor>,
    stage: Stage,
}

impl LakeClient {
    /// Connects to `query_endpoint` and discovers the stage and the metadata endpoint.
    pub async fn connect(query_endpoint: &str) -> Result<Self, ClientError> {
        Self::connect_with(query_endpoint, ConnectOptions::default()).await
    }

    /// [`LakeClient::connect`] with each role's token and/or a TLS CA.
    pub async fn connect_with(
        query_endpoint: &str,
        options: ConnectOptions,
    ) -> Result<Self, ClientError> {
        Self::open(query_endpoint, options, None).await
    }

    /// Connects to `query_endpoint` for SQL, with an explicit stage store instead of discovery
    /// (tests, embedding); writes still go to the metadata endpoint query advertises.
    pub async fn with_stage(
        query_endpoint: &str,
        store: Arc<dyn ObjectStore>,
        options: ConnectOptions,
    ) -> Result<Self, ClientError> {
        Self::open(query_endpoint, options, Some(store)).await
    }

    /// Connects; discovers the stage unless `store` is given, and always the metadata endpoint.
    /// Over TLS, neither may be plaintext: checked before any credential is loaded or sent.
    async fn open(
        query_endpoint: &str,
        options: ConnectOptions,
        store: Option<Arc<dyn ObjectStore>>,
    ) -> Result<Self, ClientError> {
        let mut query = connection::flight_sql(
            query_endpoint,
            options.query_token.as_deref(),
            options.tls_ca.as_deref(),
        )
        .await?;
        let metadata_endpoint = discover_metadata(&mut query, query_endpoint).await?;
        let tls = connection::is_tls(query_endpoint)?;
        let (descriptor, stage) = match store {
            Some(store) => {
                if tls {
                    no_downgrade(query_endpoint, metadata_endpoint.as_deref(), None)?;
                }
                (None, Stage::new(store, ""))
            }
            None => {
                let descriptor = discover_stage(&mut query, query_endpoint).await?;
                if tls {
                    no_downgrade(
                        query_endpoint,
                        metadata_endpoint.as_deref(),
                        Some(&descriptor),
                    )?;
                }
                let stage = Stage::from_descriptor(&descriptor).await?;
                (Some(descriptor), stage)
            }
        };
        Ok(Self {
            query_endpoint: query_endpoint.to_owned(),
            query,
            metadata_endpoint,
            metadata: tokio::sync::OnceCell::new(),
            options,
            descriptor,
            stage,
        })
    }

    /// The discovered descriptor (`None` for [`LakeClient::with_stage`]).
    pub fn stage_descriptor(&self) -> Option<&StageDescriptor> {
        self.descriptor.as_ref()
    }

    /// The managed stage: put, get, get_range, list, head, delete.
    pub fn stage(&self) -> &Stage {
        &self.stage
    }

    /// Where writes go, as query advertises it.
    pub fn metadata_endpoint(&self) -> Option<&str> {
        self.metadata_endpoint.as_deref()
    }

    /// Runs a read on the query endpoint; batches stream as the server sends them.
    pub async fn query(&self, sql: &str) -> Result<RecordBatchStream, ClientError> {
        let mut client = self.query.clone();
        let info = client.execute(sql.to_owned(), None).await?;
        let mut streams = Vec::new();
        for endpoint in info.endpoint {
            if let Some(ticket) = endpoint.ticket {
                streams.push(client.do_get(ticket).await?);
            }
        }
        Ok(futures::stream::iter(streams)
            .flatten()
            .map_err(ClientError::from)
            .boxed())
    }

    /// Runs a write (DDL, INSERT, DELETE, `COPY INTO`) on the metadata endpoint; returns the
    /// affected row count.
    pub async fn execute(&self, sql: &str) -> Result<i64, ClientError> {
        let mut metadata = self.metadata().await?;
        Ok(metadata.execute_update(sql.to_owned(), None).await?)
    }

    /// Bulk-ingests `batches` into `schema.table` on the metadata endpoint in one commit.
    pub async fn ingest(
        &self,
        schema: &str,
        table: &str,
        mode: IngestMode,
        batches: Vec<RecordBatch>,
    ) -> Result<i64, ClientError> {
        use arrow_flight::sql::{TableExistsOption, TableNotExistOption};
        let (if_not_exist, if_exists) = match mode {
            IngestMode::Create => (TableNotExistOption::Create, TableExistsOption::Fail),
            IngestMode::Append => (TableNotExistOption::Fail, TableExistsOption::Append),
            IngestMode::Replace => (TableNotExistOption::Fail, TableExistsOption::Replace),
            IngestMode::CreateAppend => (TableNotExistOption::Create, TableExistsOption::Append),
        };
        let command = CommandStatementIngest {
            table_definition_options: Some(TableDefinitionOptions {
                if_not_exist: if_not_exist.into(),
                if_exists: if_exists.into(),
            }),
            table: table.to_owned(),
            schema: Some(schema.to_owned()),
            catalog: None,
            temporary: false,
            transaction_id: None,
            options: Default::default(),
        };
        let mut metadata = self.metadata().await?;
        let stream = futures::stream::iter(batches.into_iter().map(Ok));
        Ok(metadata.execute_ingest(command, stream).await?)
    }

    async fn metadata(&self) -> Result<FlightSqlServiceClient<Channel>, ClientError> {
        let endpoint = self
            .metadata_endpoint
            .as_deref()
            .ok_or_else(|| ClientError::NoMetadataEndpoint(self.query_endpoint.clone()))?;
        // Channels are cheap to clone and multiplex calls; one connection serves every write.
        self.metadata
            .get_or_try_init(|| {
                connection::flight_sql(
                    endpoint,
                    self.options.metadata_token.as_deref(),
                    self.options.tls_ca.as_deref(),
                )
            })
            .await
            .cloned()
    }
}

/// Refuses, for a client that reached `query_endpoint` over TLS, a metadata endpoint or an S3
/// stage the server advertises over plaintext (a local stage has no transport).
fn no_downgrade(
    query_endpoint: &str,
    metadata: Option<&str>,
    stage: Option<&StageDescriptor>,
) -> Result<(), ClientError> {
    let downgrade = |what, advertised: &str| ClientError::Downgrade {
        query_endpoint: query_endpoint.to_owned(),
        what,
        advertised: advertised.to_owned(),
    };
    if let Some(metadata) = metadata
        && !connection::is_tls(metadata).unwrap_or(false)
    {
        return Err(downgrade("metadata endpoint", metadata));
    }
    if let Some(StageDescriptor {
        backend:
            lake_common::stage::StageBackend::S3 {
                endpoint: Some(endpoint),
                ..
            },
        ..
    }) = stage
        && !endpoint
            .get(..8)
            .is_some_and(|scheme| scheme.eq_ignore_ascii_case("https://"))
    {
        return Err(downgrade("stage", endpoint));
    }
    Ok(())
}

/// Runs a custom action and returns its single result: zero or several results are an error.
async fn single_result(
    client: &mut FlightSqlServiceClient<Channel>,
    endpoint: &str,
    action: &str,
) -> Result<Vec<u8>, ClientError> {
    let discovery = |detail: String| ClientError::Discovery {
        endpoint: endpoint.to_owned(),
        detail,
    };
    let results: Vec<arrow_flight::Result> = client
        .do_action(Action::new(action, ""))
        .await
        .map_err(|e| discovery(format!("{action} failed: {e}")))?
        .try_collect()
        .await
        .map_err(|e| discovery(format!("{action} failed: {e}")))?;
    match <[_; 1]>::try_from(results) {
        Ok([only]) => Ok(only.body.to_vec()),
        Err(results) => Err(discovery(format!(
            "{action} returned {} results; exactly one was expected",
            results.len()
        ))),
    }
}

async fn discover_stage(
    client: &mut FlightSqlServiceClient<Channel>,
    endpoint: &str,
) -> Result<StageDescriptor, ClientError> {
    let body = single_result(client, endpoint, DESCRIBE_STAGE_ACTION).await?;
    StageDescriptor::decode(&body).map_err(|source| ClientError::Descriptor {
        endpoint: endpoint.to_owned(),
        source,
    })
}

async fn discover_metadata(
    client: &mut FlightSqlServiceClient<Channel>,
    endpoint: &str,
) -> Result<Option<String>, ClientError> {
    let body = single_result(client, endpoint, METADATA_ENDPOINT_ACTION).await?;
    let text = String::from_utf8(body).map_err(|_| ClientError::Discovery {
        endpoint: endpoint.to_owned(),
        detail: "the metadata endpoint is not UTF-8".into(),
    })?;
    Ok(Some(text).filter(|t| !t.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lake_common::stage::StageBackend;

    fn s3(endpoint: Option<&str>) -> StageDescriptor {
        StageDescriptor {
            protocol_version: 1,
            backend: StageBackend::S3 {
                bucket: "b".into(),
                prefix: "p".into(),
                region: "r".into(),
                endpoint: endpoint.map(str::to_owned),
            },
        }
    }

    #[test]
    fn a_tls_client_refuses_plaintext_places_to_send_to() {
        let q = "grpc+tls://query:8815";
        assert!(no_downgrade(q, Some("grpc+tls://metadata:8816"), Some(&s3(None))).is_ok());
        assert!(no_downgrade(q, None, Some(&s3(Some("https://s3.example")))).is_ok());
        let e = no_downgrade(q, Some("grpc://metadata:8816"), None).unwrap_err();
        assert!(
            matches!(
                e,
                ClientError::Downgrade {
                    what: "metadata endpoint",
                    ..
                }
            ),
            "{e}"
        );
        let e = no_downgrade(q, None, Some(&s3(Some("http://127.0.0.1:5000")))).unwrap_err();
        assert!(
            matches!(e, ClientError::Downgrade { what: "stage", .. }),
            "{e}"
        );
        let local = StageDescriptor {
            backend: StageBackend::Local { root: "/x".into() },
            ..s3(None)
        };
        assert!(no_downgrade(q, None, Some(&local)).is_ok());
    }
}
