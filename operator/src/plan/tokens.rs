//! Bearer tokens: one Secret per role, mounted into that role's pods and named by the role's
//! `LAKE_TOKEN_FILE`. Each role has its own Secret, so a query token is never valid on metadata.
//! The plan names the Secrets; the token itself is random, drawn when reconcile first creates
//! the Secret, and from then on the user's (rotation replaces the Secret's content; the operator
//! never reads or overwrites it — it holds no permission to read Secrets).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use lake_common::plan::Role;

use super::workloads::meta_named;
use crate::render::workload_name;
use crate::validate::ValidatedCluster;

/// Where a role's pods see their Secret.
pub const TOKEN_DIR: &str = "/var/run/secrets/lake";
/// The Secret's key, and so the file name under [`TOKEN_DIR`]: one token per line.
pub const TOKEN_KEY: &str = "tokens";

/// The file the runtime reads its tokens from.
pub fn token_file() -> String {
    format!("{TOKEN_DIR}/{TOKEN_KEY}")
}

/// The token Secret of `role`.
pub fn secret_name(cluster: &ValidatedCluster, role: Role) -> String {
    format!("{}-token", workload_name(cluster, role))
}

/// One role's token Secret, without its token.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TokenSecret {
    pub role: Role,
    pub metadata: ObjectMeta,
}

impl TokenSecret {
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// The Secret holding `token`.
    pub fn with_token(&self, token: &str) -> Secret {
        Secret {
            metadata: self.metadata.clone(),
            type_: Some("Opaque".into()),
            data: Some(BTreeMap::from([(
                TOKEN_KEY.to_owned(),
                ByteString(format!("{token}\n").into_bytes()),
            )])),
            ..Default::default()
        }
    }
}

pub fn token_secrets(cluster: &ValidatedCluster) -> Vec<TokenSecret> {
    [Role::Query, Role::Metadata]
        .into_iter()
        .map(|role| TokenSecret {
            role,
            metadata: meta_named(cluster, role, secret_name(cluster, role)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_holds_its_token_as_one_line_under_the_mounted_key() {
        let secret = TokenSecret {
            role: Role::Query,
            metadata: ObjectMeta {
                name: Some("dev-query-token".into()),
                ..Default::default()
            },
        }
        .with_token("abc");
        assert_eq!(secret.data.unwrap()[TOKEN_KEY].0, b"abc\n");
        assert_eq!(token_file(), "/var/run/secrets/lake/tokens");
    }
}
