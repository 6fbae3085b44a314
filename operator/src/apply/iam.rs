//! IAM: look up the roles (their accounts feed the plan), then put each role's inline policy
//! only when the document on the role grants something else.

use aws_sdk_iam::Client;
use serde_json::Value;

use super::error::{ApplyError, aws};
use crate::plan::RolePolicy;
use crate::plan::iam::{role_name, same_policy};

/// A role's ARN (`GetRole`), or RoleNotFound.
pub async fn role_arn(client: &Client, role: &str) -> Result<String, ApplyError> {
    let name = role_name(role);
    match client.get_role().role_name(name).send().await {
        Ok(out) => Ok(out.role().map(|r| r.arn().to_owned()).unwrap_or_default()),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_no_such_entity_exception()) =>
        {
            Err(ApplyError::RoleNotFound {
                role: name.to_owned(),
            })
        }
        Err(e) => Err(aws("GetRole", name, e)),
    }
}

/// The account part of a role ARN.
pub fn account_of(arn: &str) -> Option<String> {
    crate::plan::iam::role_account(arn).map(str::to_owned)
}

fn parse_document(text: &str) -> Option<Value> {
    // AWS returns documents URL-encoded; emulators may not.
    serde_json::from_str(text).ok().or_else(|| {
        let decoded = percent_encoding::percent_decode_str(text)
            .decode_utf8()
            .ok()?;
        serde_json::from_str(&decoded).ok()
    })
}

/// The inline policy `policy_name` now on `role` (a name or an ARN), if any.
pub async fn current(
    client: &Client,
    role: &str,
    policy_name: &str,
) -> Result<Option<Value>, ApplyError> {
    let role_name = role_name(role);
    match client
        .get_role_policy()
        .role_name(role_name)
        .policy_name(policy_name)
        .send()
        .await
    {
        Ok(out) => Ok(parse_document(out.policy_document())),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_no_such_entity_exception()) =>
        {
            Ok(None)
        }
        Err(e) => Err(aws("GetRolePolicy", role_name, e)),
    }
}

/// Puts `policy` on its role unless an equivalent document is already there. Returns whether
/// it wrote.
pub async fn ensure(client: &Client, policy: &RolePolicy) -> Result<bool, ApplyError> {
    if current(client, &policy.role_name, &policy.policy_name)
        .await?
        .is_some_and(|doc| same_policy(&doc, &policy.document))
    {
        return Ok(false);
    }
    client
        .put_role_policy()
        .role_name(&policy.role_name)
        .policy_name(&policy.policy_name)
        .policy_document(policy.document.to_string())
        .send()
        .await
        .map_err(|e| match e.as_service_error() {
            Some(s) if s.is_no_such_entity_exception() => ApplyError::RoleNotFound {
                role: policy.role_name.clone(),
            },
            _ => aws("PutRolePolicy", &policy.role_name, e),
        })?;
    Ok(true)
}

/// Removes the cluster's inline policy from a role (deletion); absent is fine.
pub async fn remove(client: &Client, role: &str, policy_name: &str) -> Result<(), ApplyError> {
    let name = role_name(role);
    match client
        .delete_role_policy()
        .role_name(name)
        .policy_name(policy_name)
        .send()
        .await
    {
        Ok(_) => Ok(()),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_no_such_entity_exception()) =>
        {
            Ok(())
        }
        Err(e) => Err(aws("DeleteRolePolicy", name, e)),
    }
}
