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
//!     storage:
//!       - bucket: acme-lake                          # `*` allowed here too
//!         prefix: analytics                          # this prefix and everything below it; "" = the whole bucket
//!     tables: ["data.*"]                             # optional: DynamoDB table names; absent = any
//!     adopt: false                                   # may clusters adopt existing tables?
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use lake_common::plan::{PlanError, PlanErrors, RegistryStore, Storage};
use serde::Deserialize;

use crate::plan::iam::role_name;
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
    /// S3 locations the managed policies may grant.
    #[serde(default)]
    pub storage: Vec<StorageRule>,
    /// DynamoDB table names (`*` globs) the namespace's clusters may create or adopt; `None`:
    /// any name.
    #[serde(default)]
    pub tables: Option<Vec<String>>,
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

/// Refuses what `cluster` asks the operator to do beyond what the administrator allows its
/// namespace. Pure: reconcile calls it before any AWS request, `render --allowlist` offline.
pub fn admit(cluster: &ValidatedCluster, allowlist: &Allowlist) -> Result<(), PlanErrors> {
    let rules = allowlist.namespaces.get(&cluster.namespace);
    let origin = allowlist.origin();
    let ns = &cluster.namespace;
    let mut errors = Vec::new();
    let refuse = |field: &str, value: &str, what: String| PlanError::NotAllowed {
        field: field.to_owned(),
        reason: format!("{value:?} is outside what {origin} grants namespace {ns:?}; {what}"),
    };

    if let Some(tables) = rules.and_then(|r| r.tables.as_ref())
        && let RegistryStore::DynamoDb { table: registry } = cluster.authority.registry()
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
                for (field, role) in [
                    ("spec.iam.queryRole", &iam.query_role),
                    ("spec.iam.metadataRole", &iam.metadata_role),
                ] {
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
