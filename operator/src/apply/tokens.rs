//! Token Secrets: created once, never read or overwritten. The operator may create Secrets but
//! not read them (`config/rbac`), so an existing Secret — the one it created, or a user's rotated
//! replacement — is recognised by the API server's AlreadyExists.

use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, PostParams};

use super::error::ApplyError;
use crate::plan::tokens::TokenSecret;

/// A random bearer token: 32 bytes from the OS, hex.
fn random_token() -> Result<String, ApplyError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|source| ApplyError::Random { source })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Creates each Secret that does not exist; returns the names created.
pub async fn ensure(
    client: &Client,
    namespace: &str,
    secrets: &[TokenSecret],
) -> Result<Vec<String>, ApplyError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut created = Vec::new();
    for secret in secrets {
        match api
            .create(&PostParams::default(), &secret.with_token(&random_token()?))
            .await
        {
            Ok(_) => created.push(secret.name().to_owned()),
            Err(kube::Error::Api(status)) if status.is_already_exists() => {}
            Err(source) => {
                return Err(ApplyError::Kube {
                    operation: "create",
                    kind: "Secret".into(),
                    name: secret.name().to_owned(),
                    source: Box::new(source),
                });
            }
        }
    }
    Ok(created)
}
