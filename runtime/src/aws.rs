//! AWS connections, configured explicitly: region, endpoint overrides and (optionally) static
//! credentials come from the plan or the caller, never from unrelated environment variables.
//! Credentials default to the AWS default chain (workload identity in pods).

use std::sync::Arc;
use std::time::Duration;

use aws_config::{BehaviorVersion, SdkConfig};
use aws_credential_types::Credentials;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::{Region, SharedInterceptor};
use lake_common::plan::AwsTarget;
use lance_io::object_store::providers::aws::AwsCredentialAdapter;
use object_store::aws::AmazonS3Builder;

#[derive(Debug, thiserror::Error)]
pub enum AwsError {
    #[error("no AWS credentials: none were given and the default credential chain found none")]
    NoCredentials,
    #[error("cannot configure S3 bucket {bucket:?}: {source}")]
    S3 {
        bucket: String,
        #[source]
        source: object_store::Error,
    },
}

/// Connection settings that are not part of a plan.
#[derive(Debug, Clone, Default)]
pub struct ConnectOptions {
    /// Static credentials (emulators, tests); `None` uses the AWS default credential chain.
    pub credentials: Option<Credentials>,
    /// Observers of every DynamoDB call (tests record which tables and actions a role uses).
    pub dynamodb_interceptors: Vec<SharedInterceptor>,
}

/// One AWS configuration shared by a process's DynamoDB and S3 clients.
#[derive(Debug, Clone)]
pub struct AwsConnection {
    target: AwsTarget,
    sdk: SdkConfig,
    interceptors: Vec<SharedInterceptor>,
}

impl AwsConnection {
    pub async fn new(target: &AwsTarget, options: &ConnectOptions) -> Self {
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .region(Region::new(target.region.clone()))
            .retry_config(RetryConfig::standard().with_max_attempts(8));
        if let Some(credentials) = &options.credentials {
            loader = loader.credentials_provider(credentials.clone());
        }
        Self {
            target: target.clone(),
            sdk: loader.load().await,
            interceptors: options.dynamodb_interceptors.clone(),
        }
    }

    pub fn target(&self) -> &AwsTarget {
        &self.target
    }

    /// A DynamoDB client: standard retries with backoff (throttling included), the plan's
    /// endpoint override if any.
    pub fn dynamodb(&self) -> aws_sdk_dynamodb::Client {
        let mut config = aws_sdk_dynamodb::config::Builder::from(&self.sdk);
        config.set_interceptors(self.interceptors.iter().cloned());
        if let Some(endpoint) = &self.target.dynamodb_endpoint {
            config = config.endpoint_url(endpoint);
        }
        aws_sdk_dynamodb::Client::from_conf(config.build())
    }

    fn credentials(&self) -> Result<Arc<dyn ProvideCredentials>, AwsError> {
        let provider: SharedCredentialsProvider = self
            .sdk
            .credentials_provider()
            .ok_or(AwsError::NoCredentials)?;
        Ok(Arc::new(provider))
    }

    /// An S3 object store for `bucket`, built without reading the environment (object_store's
    /// `from_env` would let variables such as `ENDPOINT` or `TOKEN` configure it).
    pub fn s3_store(&self, bucket: &str) -> Result<Arc<dyn object_store::ObjectStore>, AwsError> {
        let credentials = AwsCredentialAdapter::new(self.credentials()?, Duration::from_secs(60));
        let mut builder = AmazonS3Builder::new()
            .with_bucket_name(bucket)
            .with_region(&self.target.region)
            .with_credentials(Arc::new(credentials));
        if let Some(endpoint) = &self.target.s3_endpoint {
            builder = builder
                .with_endpoint(endpoint)
                .with_allow_http(endpoint.starts_with("http://"))
                .with_virtual_hosted_style_request(false);
        }
        let store = builder.build().map_err(|source| AwsError::S3 {
            bucket: bucket.to_owned(),
            source,
        })?;
        Ok(Arc::new(store))
    }
}
