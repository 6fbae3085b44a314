//! Dereference (AWS reads): the roles' accounts, for the policy ARNs, before anything is planned.

use super::*;
use crate::plan::iam::Identity;

/// The roles' accounts: from their ARNs, else `GetRole`. Only for managed-or-reported IAM on
/// S3; anything else needs no lookup.
pub(super) async fn dereference(
    validated: &ValidatedCluster,
    clients: Option<&crate::aws::AwsClients>,
    ctx: &Context,
) -> Result<IamInputs, ApplyError> {
    let mut inputs = IamInputs {
        oidc_provider: ctx.oidc_provider.clone(),
        ..Default::default()
    };
    let (Some(iam), Some(clients)) = (&validated.iam, clients) else {
        return Ok(inputs);
    };
    let maintenance = iam
        .maintenance_role
        .as_ref()
        .filter(|_| validated.maintenance.is_some());
    let roles = [
        (Identity::Query, Some(&iam.query_role)),
        (Identity::Metadata, Some(&iam.metadata_role)),
        (Identity::Maintenance, maintenance),
    ];
    for (role, spec_role) in roles {
        let Some(spec_role) = spec_role else { continue };
        let account = match plan::iam::role_account(spec_role) {
            Some(account) => account.to_owned(),
            None => {
                let arn = apply::iam::role_arn(&clients.iam, spec_role).await?;
                apply::iam::account_of(&arn).ok_or_else(|| ApplyError::Aws {
                    operation: "GetRole",
                    resource: spec_role.clone(),
                    detail: format!("the role's ARN {arn:?} names no account"),
                    source: None,
                })?
            }
        };
        match role {
            Identity::Query => inputs.query_account = Some(account),
            Identity::Metadata => inputs.metadata_account = Some(account),
            Identity::Maintenance => inputs.maintenance_account = Some(account),
        }
    }
    Ok(inputs)
}
