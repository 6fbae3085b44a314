//! The policies step: the roles' inline policies, and taking this cluster's policy off roles the spec no longer names.

use super::*;
use crate::plan::iam::Identity;

/// Roles recorded in the previous status that the spec no longer names.
pub(super) fn dropped_roles(
    validated: &ValidatedCluster,
    previous: Option<&PoliciesStatus>,
) -> Vec<String> {
    let current: Vec<String> = validated
        .iam
        .iter()
        .flat_map(|iam| iam.named())
        .map(|(_, r)| plan::iam::role_name(r).to_ascii_lowercase())
        .collect();
    let mut dropped: Vec<String> = previous
        .into_iter()
        .flat_map(|p| [&p.query, &p.metadata, &p.maintenance])
        .flatten()
        .map(|p| p.role.clone())
        .filter(|r| !current.contains(&plan::iam::role_name(r).to_ascii_lowercase()))
        .collect();
    dropped.dedup_by_key(|r| plan::iam::role_name(r).to_ascii_lowercase());
    dropped
}

/// Takes this cluster's policy (by its name) off roles the spec no longer names: a grant
/// written for a role must not outlive the role's place in the spec. Reads first, so a
/// converged cluster writes nothing.
pub(super) async fn revoke(
    clients: &crate::aws::AwsClients,
    validated: &ValidatedCluster,
    roles: &[String],
) -> Result<(), ApplyError> {
    let name = plan::iam::policy_name(&validated.namespace, &validated.name);
    for role in roles {
        match apply::iam::current(&clients.iam, role, &name).await {
            Ok(Some(_)) => apply::iam::remove(&clients.iam, role, &name).await?,
            Ok(None) | Err(ApplyError::RoleNotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

pub(super) async fn policies_step(
    validated: &ValidatedCluster,
    clients: Option<&crate::aws::AwsClients>,
    policies: &[plan::RolePolicy],
    previous: Option<&PoliciesStatus>,
) -> (Check, Option<ApplyError>) {
    if let Some(clients) = clients {
        let dropped = dropped_roles(validated, previous);
        if let Err(e) = revoke(clients, validated, &dropped).await {
            return (
                Check::failed(POLICIES_READY, e.reason(), e.to_string()),
                Some(e),
            );
        }
    }
    let (Some(iam), Some(clients)) = (&validated.iam, clients) else {
        return (
            Check::ok(
                POLICIES_READY,
                "NotConfigured",
                "no spec.iam: no policies to manage",
            ),
            None,
        );
    };
    if !iam.manage {
        return (
            Check::ok(
                POLICIES_READY,
                "NotManaged",
                "spec.iam.manage is false: the policies are reported in status for someone else to attach",
            ),
            None,
        );
    }
    for policy in policies {
        if let Err(e) = apply::iam::ensure(&clients.iam, policy).await {
            return (
                Check::failed(POLICIES_READY, e.reason(), e.to_string()),
                Some(e),
            );
        }
    }
    (
        Check::ok(
            POLICIES_READY,
            "Applied",
            "every role's inline policy is in place",
        ),
        None,
    )
}

pub(super) fn policies_status(policies: &[plan::RolePolicy]) -> Option<PoliciesStatus> {
    let policy = |role| {
        policies
            .iter()
            .find(|p| p.role == role)
            .map(|p| PolicyStatus {
                role: p.role_arn.clone(),
                digest: p.digest.clone(),
                trust_policy: Some(p.trust_policy.to_string()),
            })
    };
    (!policies.is_empty()).then(|| PoliciesStatus {
        query: policy(Identity::Query),
        metadata: policy(Identity::Metadata),
        maintenance: policy(Identity::Maintenance),
    })
}
