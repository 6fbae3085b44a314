//! The operator's AWS clients: per region, with an optional endpoint override (emulators),
//! optional static credentials and observers (tests count the writes); otherwise the default
//! credential chain (the operator's own IRSA role in a cluster).

use std::collections::HashMap;
use std::sync::Arc;

use aws_config::{BehaviorVersion, SdkConfig};
use aws_credential_types::Credentials;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::{Region, SharedInterceptor};
use tokio::sync::Mutex;

#[derive(Debug, Clone, Default)]
pub struct AwsSettings {
    /// One endpoint for DynamoDB, IAM and STS (an emulator); `None` is AWS.
    pub endpoint: Option<String>,
    pub credentials: Option<Credentials>,
    pub interceptors: Vec<SharedInterceptor>,
    /// Attempts per call (the SDK backs off between them, throttling included).
    pub max_attempts: Option<u32>,
}

/// DynamoDB, IAM and STS clients for one region.
#[derive(Debug, Clone)]
pub struct AwsClients {
    pub dynamodb: aws_sdk_dynamodb::Client,
    pub iam: aws_sdk_iam::Client,
    pub sts: aws_sdk_sts::Client,
}

/// Clients, built once per region and shared by every reconcile.
#[derive(Debug, Default)]
pub struct AwsPool {
    settings: AwsSettings,
    clients: Mutex<HashMap<String, AwsClients>>,
    /// The operator's own account, once asked.
    account: tokio::sync::OnceCell<String>,
}

/// The operator's own account could not be learned.
#[derive(Debug, thiserror::Error)]
#[error("cannot learn the operator's own AWS account (sts:GetCallerIdentity): {detail}")]
pub struct AccountError {
    detail: String,
}

impl AwsPool {
    pub fn new(settings: AwsSettings) -> Arc<Self> {
        Arc::new(Self {
            settings,
            clients: Mutex::default(),
            account: tokio::sync::OnceCell::new(),
        })
    }

    /// The account of the operator's own credentials (STS, asked once): the account its IAM
    /// writes act in and its tables are created in.
    pub async fn operator_account(&self, region: &str) -> Result<String, AccountError> {
        self.account
            .get_or_try_init(|| async {
                let sts = self.clients(region).await.sts;
                let identity =
                    sts.get_caller_identity()
                        .send()
                        .await
                        .map_err(|e| AccountError {
                            detail: aws_sdk_sts::error::DisplayErrorContext(e).to_string(),
                        })?;
                identity
                    .account
                    .filter(|a| a.len() == 12 && a.chars().all(|c| c.is_ascii_digit()))
                    .ok_or_else(|| AccountError {
                        detail: "the answer names no 12-digit account".into(),
                    })
            })
            .await
            .cloned()
    }

    pub async fn clients(&self, region: &str) -> AwsClients {
        let mut clients = self.clients.lock().await;
        if let Some(c) = clients.get(region) {
            return c.clone();
        }
        let sdk = self.sdk(region).await;
        let mut dynamodb = aws_sdk_dynamodb::config::Builder::from(&sdk);
        dynamodb.set_interceptors(self.settings.interceptors.iter().cloned());
        let mut iam = aws_sdk_iam::config::Builder::from(&sdk);
        iam.set_interceptors(self.settings.interceptors.iter().cloned());
        let mut sts = aws_sdk_sts::config::Builder::from(&sdk);
        sts.set_interceptors(self.settings.interceptors.iter().cloned());
        if let Some(endpoint) = &self.settings.endpoint {
            dynamodb = dynamodb.endpoint_url(endpoint);
            iam = iam.endpoint_url(endpoint);
            sts = sts.endpoint_url(endpoint);
        }
        let built = AwsClients {
            dynamodb: aws_sdk_dynamodb::Client::from_conf(dynamodb.build()),
            iam: aws_sdk_iam::Client::from_conf(iam.build()),
            sts: aws_sdk_sts::Client::from_conf(sts.build()),
        };
        clients.insert(region.to_owned(), built.clone());
        built
    }

    async fn sdk(&self, region: &str) -> SdkConfig {
        let attempts = self.settings.max_attempts.unwrap_or(5);
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .region(Region::new(region.to_owned()))
            .retry_config(RetryConfig::standard().with_max_attempts(attempts));
        if let Some(credentials) = &self.settings.credentials {
            loader = loader.credentials_provider(credentials.clone());
        }
        loader.load().await
    }
}
