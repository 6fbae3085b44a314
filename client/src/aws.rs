//! S3 credentials for the stage from the AWS default credential chain (environment, profile,
//! web identity / IRSA, container and instance metadata), cached until shortly before expiry.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_config::BehaviorVersion;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use object_store::CredentialProvider;
use object_store::aws::AwsCredential;
use tokio::sync::Mutex;

use crate::ClientError;

/// Refresh this long before the credentials expire.
const REFRESH_BEFORE: Duration = Duration::from_secs(300);

#[derive(Debug)]
pub(crate) struct ChainCredentials {
    provider: SharedCredentialsProvider,
    cached: Mutex<Option<(Arc<AwsCredential>, Option<SystemTime>)>>,
}

impl ChainCredentials {
    pub(crate) async fn default_chain(region: &str) -> Result<Self, ClientError> {
        let config = aws_config::defaults(BehaviorVersion::latest())
            .region(aws_config::Region::new(region.to_owned()))
            .load()
            .await;
        let provider = config.credentials_provider().ok_or_else(|| {
            ClientError::Credentials("the AWS default credential chain is not configured".into())
        })?;
        Ok(Self {
            provider,
            cached: Mutex::new(None),
        })
    }
}

#[async_trait::async_trait]
impl CredentialProvider for ChainCredentials {
    type Credential = AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<AwsCredential>> {
        let mut cached = self.cached.lock().await;
        if let Some((credential, expiry)) = cached.as_ref() {
            let fresh = expiry.is_none_or(|at| {
                at.duration_since(SystemTime::now())
                    .is_ok_and(|left| left > REFRESH_BEFORE)
            });
            if fresh {
                return Ok(credential.clone());
            }
        }
        let provided = self.provider.provide_credentials().await.map_err(|e| {
            object_store::Error::Generic {
                store: "S3",
                source: Box::new(e),
            }
        })?;
        let credential = Arc::new(AwsCredential {
            key_id: provided.access_key_id().to_owned(),
            secret_key: provided.secret_access_key().to_owned(),
            token: provided.session_token().map(str::to_owned),
        });
        *cached = Some((credential.clone(), provided.expiry()));
        Ok(credential)
    }
}
