//! The administrator's allowlist: which IAM roles, S3 locations and DynamoDB tables the
//! LakeClusters of each namespace may have the operator act on.
//!
//! The operator writes inline policies with its own (broad) IAM rights. Without this check a
//! namespace user could name another team's role or bucket in a LakeCluster and have the
//! operator grant it (a confused deputy). The allowlist is read from a file the administrator
//! owns (`lake-operator run --allowlist FILE`, mounted from a ConfigMap in the operator's
//! namespace) and checked by [`admit`], a pure function of the validated spec, before any AWS
//! call. With no allowlist, the operator manages no IAM policy for anyone (`spec.iam.manage:
//! false` still works: someone else attaches the policies reported in status).
//!
//! ```yaml
//! namespaces:
//!   data:
//!     roles: [lake-query, lake-metadata, "data-*"]   # role names; `*` matches any run of characters
//!     accounts: []                                   # accounts of role ARNs; absent = the operator's own
//!     storage:
//!       - bucket: acme-lake                          # `*` allowed here too
//!         prefix: analytics                          # this prefix and everything below it; "" = the whole bucket
//!     tables: ["data.*"]                             # DynamoDB table names; absent = the namespace's default names
//!     migrationSources: []                           # v1 tables its clusters may migrate from; absent = none
//!     adopt: false                                   # may clusters adopt existing tables?
//! ```
//!
//! Everything a LakeCluster names is decided here before the operator touches, or even looks
//! at, it: a table outside the namespace's patterns is neither created, adopted nor described
//! (so status cannot tell a tenant whether it exists); a migration source must be listed; a
//! role ARN of another account is refused (the operator writes its policies on the role of that
//! name in its own account, and its tables live there too).

use std::collections::BTreeMap;
use std::path::Path;

use lake_common::plan::{PlanError, PlanErrors, RegistryStore, Storage};
use serde::Deserialize;

use crate::plan::iam::{role_account, role_name};
use crate::validate::ValidatedCluster;

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Allowlist {
    #[serde(default)]
    pub namespaces: BTreeMap<String, NamespaceRules>,
    /// Where the allowlist came from, for refusal messages.
    #[serde(skip)]
    source: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamespaceRules {
    /// IAM role names (case-insensitive, `*` globs) whose inline policies the operator may write.
    #[serde(default)]
    pub roles: Vec<String>,
    /// The accounts a role given as an ARN may be in; empty: the operator's own (asked of STS).
    /// The operator writes policies and creates tables in its own account, so list only
    /// accounts its credentials act in (e.g. where STS cannot be reached).
    #[serde(default)]
    pub accounts: Vec<String>,
    /// S3 locations the managed policies may grant.
    #[serde(default)]
    pub storage: Vec<StorageRule>,
    /// DynamoDB table names (`*` globs) the namespace's clusters may create or adopt; `None`:
    /// the names they get by default, `<namespace>.*`.
    #[serde(default)]
    pub tables: Option<Vec<String>>,
    /// lake v1 tables (`*` globs) the namespace's clusters may migrate from; none by default:
    /// the migration reads the source with the operator's own rights.
    #[serde(default, rename = "migrationSources")]
    pub migration_sources: Vec<String>,
    /// Whether the namespace's clusters may adopt existing tables (that they did not create and
    /// that hold no lake marker) — and so, with `spec.tables.deleteAdopted`, delete them.
    /// Off by default: a table with lake's key schema is not necessarily lake's (any Lance
    /// DynamoDB commit table has the manifest schema).
    #[serde(default)]
    pub adopt: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageRule {
    pub bucket: String,
    /// A key prefix: it and everything below it (by `/` segment). Empty: the whole bucket.
    #[serde(default)]
    pub prefix: String,
}

#[derive(Debug, thiserror::Error)]
pub enum AllowlistError {
    #[error("cannot read the allowlist {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the allowlist {path} is not valid: {source}")]
    Parse {
        path: String,
        #[source]
        source: serde_yaml::Error,
    },
}

impl Allowlist {
    pub fn load(path: &Path) -> Result<Self, AllowlistError> {
        let display = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| AllowlistError::Read {
            path: display.clone(),
            source,
        })?;
        Self::parse(&text, &display)
    }

    pub fn parse(text: &str, source: &str) -> Result<Self, AllowlistError> {
        let mut list: Allowlist = if text.trim().is_empty() {
            Allowlist::default()
        } else {
            serde_yaml::from_str(text).map_err(|e| AllowlistError::Parse {
                path: source.to_owned(),
                source: e,
            })?
        };
        list.source = Some(source.to_owned());
        Ok(list)
    }

    /// Whether `namespace`'s clusters may adopt existing tables.
    pub fn may_adopt(&self, namespace: &str) -> bool {
        self.namespaces.get(namespace).is_some_and(|r| r.adopt)
    }

    /// The DynamoDB table names (globs) `namespace`'s clusters may use: the listed ones, or the
    /// names they get by default, `<namespace>.*`.
    fn table_patterns(&self, namespace: &str) -> Vec<String> {
        self.namespaces
            .get(namespace)
            .and_then(|r| r.tables.clone())
            .unwrap_or_else(|| vec![format!("{namespace}.*")])
    }

    /// Whether `namespace`'s clusters may use the table `name` (create, adopt, describe,
    /// delete): nothing outside it is touched or looked up.
    pub fn admits_table(&self, namespace: &str, name: &str) -> bool {
        self.table_patterns(namespace).iter().any(|p| glob(p, name))
    }

    fn origin(&self) -> String {
        match &self.source {
            Some(s) => format!("the operator's allowlist ({s})"),
            None => "the operator's allowlist (none configured: lake-operator run --allowlist)"
                .to_owned(),
        }
    }
}

/// `*` matches any run of characters; everything else literally.
fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || !text.ends_with(last) || text.len() < first.len() + last.len() {
        return false;
    }
    // Both ends matched, so these are char boundaries.
    let mut rest = &text[first.len()..text.len() - last.len()];
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(i) => rest = &rest[i + middle.len()..],
            None => return false,
        }
    }
    true
}

/// Whether `prefix` is `allowed` or below it, by whole `/` segments (`wh` allows `wh/x`, not
/// `wh2`).
fn prefix_within(allowed: &str, prefix: &str) -> bool {
    let allowed = allowed.trim_matches('/');
    allowed.is_empty()
        || prefix == allowed
        || prefix
            .strip_prefix(allowed)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Whether `cluster` names a role by ARN with IAM managed on S3 and the allowlist lists no
/// accounts for its namespace: only then does [`admit`] need the operator's own account.
pub fn needs_operator_account(cluster: &ValidatedCluster, allowlist: &Allowlist) -> bool {
    let listed = allowlist
        .namespaces
        .get(&cluster.namespace)
        .is_some_and(|r| !r.accounts.is_empty());
    !listed
        && cluster.iam.as_ref().is_some_and(|iam| {
            iam.manage
                && matches!(cluster.authority.storage(), Storage::S3(_))
                && iam.named().iter().any(|(_, r)| role_account(r).is_some())
        })
}

/// Refuses what `cluster` asks the operator to do beyond what the administrator allows its
/// namespace. Pure: reconcile calls it before any AWS request about the cluster (with the
/// operator's own account, when [`needs_operator_account`]), `render --allowlist` offline.
pub fn admit(
    cluster: &ValidatedCluster,
    allowlist: &Allowlist,
    operator_account: Option<&str>,
) -> Result<(), PlanErrors> {
    let rules = allowlist.namespaces.get(&cluster.namespace);
    let origin = allowlist.origin();
    let ns = &cluster.namespace;
    let mut errors = Vec::new();
    let refuse = |field: &str, value: &str, what: String| PlanError::NotAllowed {
        field: field.to_owned(),
        reason: format!("{value:?} is outside what {origin} grants namespace {ns:?}; {what}"),
    };

    // By default, the names the namespace's clusters get when they name none.
    let tables = allowlist.table_patterns(ns);
    if let RegistryStore::DynamoDb { table: registry } = cluster.authority.registry()
        && let lake_common::plan::ManifestStore::DynamoDb { table: manifest } =
            cluster.authority.manifests()
    {
        for (field, name) in [
            ("spec.tables.registry", registry.as_str()),
            ("spec.tables.manifest", manifest.as_str()),
        ] {
            if !tables.iter().any(|p| glob(p, name)) {
                errors.push(refuse(
                    field,
                    name,
                    format!("table names must match one of {tables:?}"),
                ));
            }
        }
    }

    if let Some(migration) = &cluster.migration {
        let sources = rules
            .map(|r| r.migration_sources.as_slice())
            .unwrap_or_default();
        if !sources.iter().any(|p| glob(p, &migration.source_table)) {
            errors.push(refuse(
                "spec.migration.sourceTable",
                &migration.source_table,
                format!(
                    "migration sources must be listed by an administrator (migrationSources: \
                     {sources:?})"
                ),
            ));
        }
    }

    if cluster.delete_adopted_tables && !rules.is_some_and(|r| r.adopt) {
        errors.push(PlanError::NotAllowed {
            field: "spec.tables.deleteAdopted".to_owned(),
            reason: format!(
                "namespace {ns:?} may not adopt existing tables by {origin} (adopt: true), so it \
                 may not have them deleted either"
            ),
        });
    }

    let managed = cluster.iam.as_ref().filter(|iam| iam.manage);
    if let (Some(iam), Storage::S3(s3)) = (managed, cluster.authority.storage()) {
        match rules {
            None => errors.push(PlanError::NotAllowed {
                field: "spec.iam.manage".to_owned(),
                reason: format!(
                    "namespace {ns:?} has no entry in {origin}, so the operator writes no IAM policy \
                     for it; ask an administrator to allow its roles and buckets, or set \
                     spec.iam.manage: false and attach the policies reported in status yourself"
                ),
            }),
            Some(rules) => {
                for (field, role) in iam.named() {
                    if let Some(account) = role_account(role) {
                        let allowed: Vec<&str> = if rules.accounts.is_empty() {
                            operator_account.into_iter().collect()
                        } else {
                            rules.accounts.iter().map(String::as_str).collect()
                        };
                        if !allowed.contains(&account) {
                            errors.push(refuse(
                                field,
                                role,
                                match operator_account {
                                    _ if !rules.accounts.is_empty() => {
                                        format!("allowed accounts: {:?}", rules.accounts)
                                    }
                                    Some(own) => format!(
                                        "a role ARN must be in the operator's own account {own}, \
                                         where it writes the policy and creates the tables"
                                    ),
                                    None => "the operator's own account is not known here: name \
                                         the role without its ARN, or list its account under \
                                         accounts"
                                        .to_owned(),
                                },
                            ));
                            continue;
                        }
                    }
                    let name = role_name(role).to_ascii_lowercase();
                    if !rules
                        .roles
                        .iter()
                        .any(|p| glob(&p.to_ascii_lowercase(), &name))
                    {
                        errors.push(refuse(
                            field,
                            role,
                            format!("allowed roles: {:?}", rules.roles),
                        ));
                    }
                }
                let allowed = rules
                    .storage
                    .iter()
                    .any(|r| glob(&r.bucket, &s3.bucket) && prefix_within(&r.prefix, &s3.prefix));
                if !allowed {
                    let list: Vec<String> = rules
                        .storage
                        .iter()
                        .map(|r| format!("s3://{}/{}", r.bucket, r.prefix))
                        .collect();
                    errors.push(refuse(
                        "spec.storage.s3",
                        &format!("s3://{}/{}", s3.bucket, s3.prefix),
                        format!("allowed locations (and below): {list:?}"),
                    ));
                }
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(PlanErrors(errors))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_whole_strings() {
        for (p, t, ok) in [
            ("lake-query", "lake-query", true),
            ("lake-query", "lake-query2", false),
            ("data-*", "data-query", true),
            ("data-*", "xdata-query", false),
            ("*-query", "a-query", true),
            ("*-query", "a-query-x", false),
            ("a*b*c", "a-x-b-y-c", true),
            ("a*b*c", "a-x-c", false),
            ("ab*ba", "aba", false),
            ("*", "", true),
        ] {
            assert_eq!(glob(p, t), ok, "{p} vs {t}");
        }
    }

    #[test]
    fn prefixes_are_allowed_by_whole_segments() {
        assert!(prefix_within("wh", "wh"));
        assert!(prefix_within("wh", "wh/team"));
        assert!(!prefix_within("wh", "wh2"));
        assert!(!prefix_within("wh/team", "wh"));
        assert!(prefix_within("", "anything/below"));
        assert!(prefix_within("/wh/", "wh/x"));
    }

    fn cluster(extra: &str, query_role: &str) -> ValidatedCluster {
        crate::validate::fixture::cloud(
            &format!("queryRole: \"{query_role}\", metadataRole: lake-metadata"),
            extra,
        )
    }

    fn allowlist(rules: &str) -> Allowlist {
        Allowlist::parse(
            &format!(
                "namespaces:\n  data:\n    roles: [lake-query, lake-metadata]\n    storage: [{{bucket: acme-lake, prefix: wh}}]\n{rules}"
            ),
            "test",
        )
        .unwrap()
    }

    fn refused_fields(result: Result<(), PlanErrors>) -> Vec<String> {
        match result {
            Ok(()) => Vec::new(),
            Err(errors) => errors
                .iter()
                .map(|e| match e {
                    PlanError::NotAllowed { field, .. } => field.clone(),
                    other => other.to_string(),
                })
                .collect(),
        }
    }

    /// A role ARN of another account names the operator's own role of that name (the policy is
    /// written by name, in the operator's account): refused, and only by name or in the pinned
    /// account is it admitted.
    #[test]
    fn role_arns_are_admitted_in_the_pinned_account_only() {
        let own = "123456789012";
        let list = allowlist("");
        let foreign = cluster("", "arn:aws:iam::999999999999:role/lake-query");
        assert!(needs_operator_account(&foreign, &list));
        let refused = admit(&foreign, &list, Some(own)).unwrap_err().to_string();
        assert!(
            refused.contains("spec.iam.queryRole") && refused.contains(own),
            "{refused}"
        );
        // Without the operator's account (offline), an ARN is refused, never guessed.
        assert_eq!(
            refused_fields(admit(&foreign, &list, None)),
            ["spec.iam.queryRole"]
        );
        assert!(
            admit(
                &cluster("", "arn:aws:iam::123456789012:role/lake-query"),
                &list,
                Some(own)
            )
            .is_ok()
        );
        let by_name = cluster("", "lake-query");
        assert!(!needs_operator_account(&by_name, &list));
        assert!(admit(&by_name, &list, None).is_ok());
        // Accounts the administrator lists replace the lookup.
        let listed = allowlist("    accounts: ['999999999999']\n");
        assert!(!needs_operator_account(&foreign, &listed));
        assert!(admit(&foreign, &listed, None).is_ok());
        let other = cluster("", "arn:aws:iam::123456789012:role/lake-query");
        assert_eq!(
            refused_fields(admit(&other, &listed, Some(own))),
            ["spec.iam.queryRole"]
        );
    }

    /// The maintenance role is one more role the operator writes a policy on: listed, or refused.
    #[test]
    fn the_maintenance_role_is_admitted_like_the_others() {
        let with = |role: &str| {
            let yaml = format!(
                "apiVersion: lake.dev/v1alpha1\nkind: LakeCluster\nmetadata: {{name: analytics, namespace: data}}\nspec:\n  storage: {{s3: {{bucket: acme-lake, prefix: wh, region: eu-west-1}}}}\n  iam: {{queryRole: lake-query, metadataRole: lake-metadata, maintenanceRole: \"{role}\"}}\n  query: {{image: lake:1}}\n  metadata: {{image: lake:1}}\n  maintenance: {{}}\n"
            );
            crate::validate::validate(&serde_yaml::from_str(&yaml).unwrap()).unwrap()
        };
        assert_eq!(
            refused_fields(admit(&with("lake-maintenance"), &allowlist(""), None)),
            ["spec.iam.maintenanceRole"]
        );
        let listed = Allowlist::parse(
            "namespaces:\n  data:\n    roles: [lake-query, lake-metadata, lake-maintenance]\n    storage: [{bucket: acme-lake, prefix: wh}]\n",
            "test",
        )
        .unwrap();
        assert!(admit(&with("lake-maintenance"), &listed, None).is_ok());
        let foreign = with("arn:aws:iam::999999999999:role/lake-maintenance");
        assert!(needs_operator_account(&foreign, &listed));
        assert_eq!(
            refused_fields(admit(&foreign, &listed, Some("123456789012"))),
            ["spec.iam.maintenanceRole"]
        );
    }

    #[test]
    fn migration_sources_must_be_listed() {
        let migrating = cluster(
            "  migration: {sourceTable: lake-v1-shared, approval: Manual}\n",
            "lake-query",
        );
        assert_eq!(
            refused_fields(admit(&migrating, &allowlist(""), None)),
            ["spec.migration.sourceTable"]
        );
        assert_eq!(
            refused_fields(admit(&migrating, &Allowlist::default(), None)),
            ["spec.migration.sourceTable", "spec.iam.manage"]
        );
        let listed = allowlist("    migrationSources: ['lake-v1-*']\n");
        assert!(admit(&migrating, &listed, None).is_ok());
        let other = cluster(
            "  migration: {sourceTable: payments-ledger, approval: Manual}\n",
            "lake-query",
        );
        assert_eq!(
            refused_fields(admit(&other, &listed, None)),
            ["spec.migration.sourceTable"]
        );
    }

    /// Without `tables`, a namespace's clusters may use only the names they get by default:
    /// any other name — an existing table of another team, or a new one — is refused before
    /// the operator looks it up.
    #[test]
    fn tables_default_to_the_namespaces_own_names() {
        let defaults = cluster("", "lake-query");
        assert!(admit(&defaults, &allowlist(""), None).is_ok());
        let named = cluster(
            "  tables: {registry: payments-ledger, manifest: data.analytics-manifests}\n",
            "lake-query",
        );
        assert_eq!(
            refused_fields(admit(&named, &allowlist(""), None)),
            ["spec.tables.registry"]
        );
        assert_eq!(
            refused_fields(admit(&named, &Allowlist::default(), None)),
            ["spec.tables.registry", "spec.iam.manage"]
        );
        assert!(
            admit(
                &named,
                &allowlist("    tables: ['payments-*', 'data.*']\n"),
                None
            )
            .is_ok()
        );
    }

    #[test]
    fn unknown_fields_are_errors() {
        let e = Allowlist::parse("namespaces:\n  data:\n    rolez: [x]\n", "test").unwrap_err();
        assert!(e.to_string().contains("rolez"), "{e}");
        assert_eq!(
            Allowlist::parse("", "empty").unwrap().namespaces.len(),
            0,
            "an empty file allows nothing"
        );
    }
}
