//! Least-privilege IAM: one inline policy per workload role, and the IRSA trust policy to put on
//! each role.
//!
//! - query: `GetItem`/`Query` on the manifest table only; read objects under the warehouse
//!   prefix (which holds the stage); list the bucket under that prefix.
//! - metadata: the item operations it uses on the registry and manifest tables; read, write and
//!   delete objects under the warehouse prefix (`DROP TABLE` removes a table's files); list under
//!   it.
//! - maintenance (with `spec.maintenance`): read, put and batch-write (delete) rows of the
//!   manifest table, never the registry; read, write and delete objects under the warehouse
//!   prefix; list under it.
//!
//! No wildcard actions and no `Resource: "*"`. The query builder takes a [`ManifestTableArn`]
//! only, so a registry ARN cannot reach the query policy by mistake.

use lake_common::plan::{ManifestStore, RegistryStore, Role, S3Location, Storage};
use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::validate::ValidatedCluster;

/// Placeholders used when an input is only known at reconcile (offline render).
pub const UNKNOWN_ACCOUNT: &str = "<account-id>";
pub const UNKNOWN_OIDC: &str = "<oidc-provider>";

pub const QUERY_TABLE_ACTIONS: [&str; 2] = ["dynamodb:GetItem", "dynamodb:Query"];
pub const METADATA_TABLE_ACTIONS: [&str; 5] = [
    "dynamodb:BatchWriteItem",
    "dynamodb:DeleteItem",
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:Query",
];
/// What `lake maintain` does to the manifest table: reads the marker and versions, commits a
/// compaction (PutItem), removes the rows of removed versions (BatchWriteItem deletes).
pub const MAINTENANCE_TABLE_ACTIONS: [&str; 4] = [
    "dynamodb:BatchWriteItem",
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:Query",
];
pub const QUERY_OBJECT_ACTIONS: [&str; 1] = ["s3:GetObject"];
pub const METADATA_OBJECT_ACTIONS: [&str; 4] = [
    "s3:AbortMultipartUpload",
    "s3:DeleteObject",
    "s3:GetObject",
    "s3:PutObject",
];

/// What the plan needs from AWS that only reconcile can look up.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IamInputs {
    /// The account of each role (from its ARN or `GetRole`).
    pub query_account: Option<String>,
    pub metadata_account: Option<String>,
    pub maintenance_account: Option<String>,
    /// The cluster's OIDC provider, e.g. `oidc.eks.eu-west-1.amazonaws.com/id/EXAMPLE`.
    pub oidc_provider: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TableArn(String);

/// The manifest table's ARN: the only table the query role may touch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ManifestTableArn(TableArn);

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RegistryTableArn(TableArn);

impl TableArn {
    fn new(region: &str, account: &str, table: &str) -> Self {
        Self(format!("arn:aws:dynamodb:{region}:{account}:table/{table}"))
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Who runs as an IAM role: a serving workload, or the maintenance Job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Identity {
    Query,
    Metadata,
    Maintenance,
}

impl From<Role> for Identity {
    fn from(role: Role) -> Self {
        match role {
            Role::Query => Identity::Query,
            Role::Metadata => Identity::Metadata,
        }
    }
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Identity::Query => "query",
            Identity::Metadata => "metadata",
            Identity::Maintenance => lake_common::config::MAINTENANCE_ROLE,
        })
    }
}

/// One role's inline policy.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RolePolicy {
    pub role: Identity,
    pub role_name: String,
    pub role_arn: String,
    /// The inline policy's name on the role: one per cluster, so roles can serve several.
    pub policy_name: String,
    pub document: Value,
    /// SHA-256 of the canonical document.
    pub digest: String,
    /// The trust policy that lets the role's ServiceAccount assume it (IRSA).
    pub trust_policy: Value,
}

/// The role name from a name or an ARN (`arn:aws:iam::123:role/path/name` → `name`).
pub fn role_name(role: &str) -> &str {
    match role.strip_prefix("arn:") {
        Some(_) => role.rsplit('/').next().unwrap_or(role),
        None => role,
    }
}

fn valid_role_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+=,.@_-".contains(c))
}

/// A role as the spec may give it: an IAM role name, or a role ARN in one account
/// (`arn:<partition>:iam::<12 digits>:role/[path/]<name>`). Anything else (a `*` account, a user
/// ARN, another service) is refused: the account becomes part of the granted table ARNs.
pub fn check_role(role: &str) -> Result<(), String> {
    let Some(rest) = role.strip_prefix("arn:") else {
        return if valid_role_name(role) {
            Ok(())
        } else {
            Err("must be an IAM role name (1-64 of A-Z a-z 0-9 +=,.@_-) or a role ARN".into())
        };
    };
    let parts: Vec<&str> = rest.splitn(5, ':').collect();
    let ok = match parts.as_slice() {
        [partition, "iam", "", account, resource] => {
            ["aws", "aws-cn", "aws-us-gov"].contains(partition)
                && account.len() == 12
                && account.chars().all(|c| c.is_ascii_digit())
                && resource.strip_prefix("role/").is_some_and(|path| {
                    let name = path.rsplit('/').next().unwrap_or_default();
                    valid_role_name(name) && !path.contains("//") && !path.contains('*')
                })
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err("must be a role ARN arn:aws:iam::<12-digit account>:role/[path/]<name>".into())
    }
}

/// The account of a role ARN, if `role` is one.
pub fn role_account(role: &str) -> Option<&str> {
    let mut parts = role.strip_prefix("arn:")?.split(':');
    let (_partition, _service, _region, account) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    Some(account).filter(|a| !a.is_empty())
}

fn role_arn(role: &str, account: &str) -> String {
    if role.starts_with("arn:") {
        role.to_owned()
    } else {
        format!("arn:aws:iam::{account}:role/{role}")
    }
}

fn statement(sid: &str, actions: &[&str], resources: Vec<String>) -> Value {
    json!({"Sid": sid, "Effect": "Allow", "Action": actions, "Resource": resources})
}

fn objects_arn(s3: &S3Location) -> String {
    format!("arn:aws:s3:::{}/{}", s3.bucket, s3.key("*"))
}

fn list_statement(s3: &S3Location) -> Value {
    let mut list = json!({
        "Sid": "ListWarehouse",
        "Effect": "Allow",
        "Action": ["s3:ListBucket"],
        "Resource": [format!("arn:aws:s3:::{}", s3.bucket)],
    });
    // `wh/` and `wh/*`, never `wh`: S3 lists by string prefix, and `wh` lists `wh2/…` and
    // `wh-finance/…`, the keys of prefixes outside the warehouse.
    if !s3.prefix.is_empty() {
        list["Condition"] = json!({"StringLike": {"s3:prefix": [s3.key(""), s3.key("*")]}});
    }
    list
}

/// The query role's document: reads only, on the manifest table and the warehouse.
pub fn query_document(manifest: &ManifestTableArn, s3: &S3Location) -> Value {
    json!({
        "Version": "2012-10-17",
        "Statement": [
            statement("ReadManifests", &QUERY_TABLE_ACTIONS, vec![manifest.0.0.clone()]),
            statement("ReadWarehouse", &QUERY_OBJECT_ACTIONS, vec![objects_arn(s3)]),
            list_statement(s3),
        ]
    })
}

/// The metadata role's document: both tables and the warehouse, read and write.
pub fn metadata_document(
    registry: &RegistryTableArn,
    manifest: &ManifestTableArn,
    s3: &S3Location,
) -> Value {
    json!({
        "Version": "2012-10-17",
        "Statement": [
            statement(
                "WriteCatalog",
                &METADATA_TABLE_ACTIONS,
                vec![registry.0.0.clone(), manifest.0.0.clone()],
            ),
            statement("WriteWarehouse", &METADATA_OBJECT_ACTIONS, vec![objects_arn(s3)]),
            list_statement(s3),
        ]
    })
}

/// The maintenance role's document: the manifest table's rows (never the registry) and the
/// warehouse's objects, deletes included — but not the managed stage under it: users' staged
/// files are theirs, and no table lives there.
pub fn maintenance_document(manifest: &ManifestTableArn, s3: &S3Location) -> Value {
    let stage = format!(
        "arn:aws:s3:::{}/{}",
        s3.bucket,
        s3.key(&format!("{}/*", lake_common::plan::STAGE_DIR))
    );
    let mut deny = statement("NotTheStage", &METADATA_OBJECT_ACTIONS, vec![stage]);
    deny["Effect"] = json!("Deny");
    json!({
        "Version": "2012-10-17",
        "Statement": [
            statement("MaintainManifests", &MAINTENANCE_TABLE_ACTIONS, vec![manifest.0.0.clone()]),
            statement("MaintainWarehouse", &METADATA_OBJECT_ACTIONS, vec![objects_arn(s3)]),
            deny,
            list_statement(s3),
        ]
    })
}

fn trust_policy(account: &str, oidc: &str, namespace: &str, service_account: &str) -> Value {
    json!({
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow",
            "Principal": {"Federated": format!("arn:aws:iam::{account}:oidc-provider/{oidc}")},
            "Action": "sts:AssumeRoleWithWebIdentity",
            "Condition": {"StringEquals": {
                format!("{oidc}:sub"): format!("system:serviceaccount:{namespace}:{service_account}"),
                format!("{oidc}:aud"): "sts.amazonaws.com",
            }}
        }]
    })
}

/// A document's canonical form: statements sorted, every Action/Resource a sorted list.
/// Two documents that grant the same thing compare equal (IAM returns `"Action": "x"` for a
/// one-element list, and keeps no order).
pub fn canonical(document: &Value) -> Value {
    let mut document = document.clone();
    if let Some(statements) = document.get_mut("Statement") {
        if statements.is_object() {
            *statements = Value::Array(vec![statements.take()]);
        }
        if let Some(list) = statements.as_array_mut() {
            for s in list.iter_mut() {
                for key in ["Action", "NotAction", "Resource", "NotResource"] {
                    if let Some(v) = s.get_mut(key) {
                        let mut items: Vec<Value> = match v.take() {
                            Value::Array(items) => items,
                            one => vec![one],
                        };
                        items.sort_by_key(|i| i.to_string());
                        items.dedup();
                        *v = Value::Array(items);
                    }
                }
                if let Some(obj) = s.as_object_mut() {
                    // A Sid does not change what a statement grants.
                    obj.remove("Sid");
                }
            }
            list.sort_by_key(|s| s.to_string());
        }
    }
    document
}

/// Whether two policy documents grant the same.
pub fn same_policy(a: &Value, b: &Value) -> bool {
    canonical(a) == canonical(b)
}

pub fn digest(document: &Value) -> String {
    let bytes = canonical(document).to_string();
    let hash = Sha256::digest(bytes.as_bytes());
    hash.iter().map(|b| format!("{b:02x}")).collect()
}

/// IAM's limit on an inline policy name.
const POLICY_NAME_MAX: usize = 128;

/// The name of a cluster's inline policy on its roles: one per cluster, so a role can serve
/// several. Injective: a namespace is a DNS label (no `.`), so `lake.<namespace>.<name>` splits
/// at its second `.` (`lake-a-b`/`c` and `lake-a`/`b-c` used to collide). A name too long for
/// IAM keeps a readable head and ends in `@` and a digest of the whole (`@` appears in no
/// Kubernetes name, so it cannot collide with an untruncated one).
pub fn policy_name(namespace: &str, name: &str) -> String {
    let full = format!("lake.{namespace}.{name}");
    if full.len() <= POLICY_NAME_MAX {
        return full;
    }
    let hash = Sha256::digest(full.as_bytes());
    let hex: String = hash.iter().take(8).map(|b| format!("{b:02x}")).collect();
    // Kubernetes names are ASCII, but `render` reads any file: cut at a char boundary.
    let mut cut = POLICY_NAME_MAX - 1 - hex.len();
    while !full.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}@{hex}", &full[..cut])
}

/// The ServiceAccount name of an identity's workload.
pub fn service_account(cluster: &ValidatedCluster, identity: impl Into<Identity>) -> String {
    format!("{}-{}", cluster.name, identity.into())
}

/// Every role's policy (maintenance's with `spec.maintenance`), or none (no `spec.iam`, or local storage: no AWS at all).
pub fn policies(cluster: &ValidatedCluster, inputs: &IamInputs) -> Vec<RolePolicy> {
    let (Some(iam), Storage::S3(s3), Some(aws)) = (
        &cluster.iam,
        cluster.authority.storage(),
        cluster.authority.aws(),
    ) else {
        return Vec::new();
    };
    let (RegistryStore::DynamoDb { table: registry }, ManifestStore::DynamoDb { table: manifest }) =
        (cluster.authority.registry(), cluster.authority.manifests())
    else {
        return Vec::new();
    };
    let oidc = inputs.oidc_provider.as_deref().unwrap_or(UNKNOWN_OIDC);
    let account = |role: &str, known: &Option<String>| {
        role_account(role)
            .map(str::to_owned)
            .or_else(|| known.clone())
            .unwrap_or_else(|| UNKNOWN_ACCOUNT.to_owned())
    };
    let query_account = account(&iam.query_role, &inputs.query_account);
    let metadata_account = account(&iam.metadata_role, &inputs.metadata_account);
    // Tables live in the operator's own account, where it creates them: the metadata role's
    // account, which the allowlist pins to it (`allowlist::admit`).
    let manifest_arn = ManifestTableArn(TableArn::new(
        &aws.region,
        &metadata_account,
        manifest.as_str(),
    ));
    let registry_arn = RegistryTableArn(TableArn::new(
        &aws.region,
        &metadata_account,
        registry.as_str(),
    ));
    let policy_name = policy_name(&cluster.namespace, &cluster.name);
    let build = |role: Identity, spec_role: &str, account: &str, document: Value| RolePolicy {
        role,
        role_name: role_name(spec_role).to_owned(),
        role_arn: role_arn(spec_role, account),
        policy_name: policy_name.clone(),
        digest: digest(&document),
        document,
        trust_policy: trust_policy(
            account,
            oidc,
            &cluster.namespace,
            &service_account(cluster, role),
        ),
    };
    let mut policies = vec![
        build(
            Identity::Query,
            &iam.query_role,
            &query_account,
            query_document(&manifest_arn, s3),
        ),
        build(
            Identity::Metadata,
            &iam.metadata_role,
            &metadata_account,
            metadata_document(&registry_arn, &manifest_arn, s3),
        ),
    ];
    if let (Some(role), Some(_)) = (&iam.maintenance_role, &cluster.maintenance) {
        let account = account(role, &inputs.maintenance_account);
        policies.push(build(
            Identity::Maintenance,
            role,
            &account,
            maintenance_document(&manifest_arn, s3),
        ));
    }
    policies
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s3(prefix: &str) -> S3Location {
        S3Location {
            bucket: "acme".into(),
            prefix: prefix.into(),
            region: "eu-west-1".into(),
            endpoint: None,
        }
    }

    fn manifest() -> ManifestTableArn {
        ManifestTableArn(TableArn::new("eu-west-1", "123456789012", "t-manifests"))
    }

    #[test]
    fn query_policy_reads_the_manifest_table_and_warehouse_only() {
        let doc = query_document(&manifest(), &s3("prod"));
        let text = doc.to_string();
        assert!(!text.contains("\"*\""), "{text}");
        assert!(!text.contains("registry"), "{text}");
        for write in [
            "PutItem",
            "DeleteItem",
            "BatchWriteItem",
            "PutObject",
            "DeleteObject",
        ] {
            assert!(!text.contains(write), "query may {write}: {text}");
        }
        assert_eq!(
            doc["Statement"][0]["Resource"],
            json!(["arn:aws:dynamodb:eu-west-1:123456789012:table/t-manifests"])
        );
        assert_eq!(
            doc["Statement"][1]["Resource"],
            json!(["arn:aws:s3:::acme/prod/*"])
        );
        assert_eq!(
            doc["Statement"][2]["Condition"]["StringLike"]["s3:prefix"],
            json!(["prod/", "prod/*"])
        );
    }

    #[test]
    fn maintenance_policy_deletes_in_the_warehouse_and_manifests_only() {
        let doc = maintenance_document(&manifest(), &s3("prod"));
        let text = doc.to_string();
        assert!(!text.contains("\"*\""), "{text}");
        assert!(!text.contains("registry"), "{text}");
        assert!(
            !text.contains("DeleteTable") && !text.contains("Scan"),
            "{text}"
        );
        assert_eq!(
            doc["Statement"][0]["Resource"],
            json!(["arn:aws:dynamodb:eu-west-1:123456789012:table/t-manifests"])
        );
        assert!(
            doc["Statement"][1]["Action"]
                .to_string()
                .contains("s3:DeleteObject")
        );
        assert_eq!(
            doc["Statement"][1]["Resource"],
            json!(["arn:aws:s3:::acme/prod/*"])
        );
        assert_eq!(doc["Statement"][2]["Effect"], "Deny");
        assert_eq!(
            doc["Statement"][2]["Resource"],
            json!(["arn:aws:s3:::acme/prod/_stage/*"])
        );
    }

    /// `s3:prefix` is a string prefix of the listing: `wh` would list `wh2/…` and
    /// `wh-finance/…`. Every allowed listing prefix of both roles ends inside `wh/`.
    #[test]
    fn listing_stays_inside_the_prefix() {
        let s3 = s3("wh");
        let registry = RegistryTableArn(TableArn::new("eu-west-1", "123456789012", "t-registry"));
        for doc in [
            query_document(&manifest(), &s3),
            metadata_document(&registry, &manifest(), &s3),
            maintenance_document(&manifest(), &s3),
        ] {
            let lists: Vec<&Value> = doc["Statement"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|s| s["Action"].to_string().contains("s3:ListBucket"))
                .collect();
            assert_eq!(lists.len(), 1, "{doc}");
            let prefixes = lists[0]["Condition"]["StringLike"]["s3:prefix"]
                .as_array()
                .unwrap();
            assert!(!prefixes.is_empty());
            for p in prefixes {
                assert!(
                    p.as_str().unwrap().starts_with("wh/"),
                    "{p} lists outside wh/"
                );
            }
        }
    }

    #[test]
    fn policies_compare_semantically() {
        let a = query_document(&manifest(), &s3("p"));
        let mut b = a.clone();
        // Reordered statements and actions, a single action as a string, another Sid.
        let statements = b["Statement"].as_array_mut().unwrap();
        statements.reverse();
        statements[2]["Action"] = json!(["dynamodb:Query", "dynamodb:GetItem"]);
        statements[1]["Action"] = json!("s3:GetObject");
        statements[0]["Sid"] = json!("Other");
        assert!(same_policy(&a, &b));
        assert_eq!(digest(&a), digest(&b));
        let mut c = a.clone();
        c["Statement"][0]["Action"] = json!(["dynamodb:GetItem"]);
        assert!(!same_policy(&a, &c));
    }

    #[test]
    fn policy_names_never_collide() {
        assert_ne!(policy_name("a-b", "c"), policy_name("a", "b-c"));
        assert_eq!(policy_name("data", "analytics"), "lake.data.analytics");
        let long = "n".repeat(253);
        let a = policy_name("data", &long);
        let b = policy_name("data", &format!("{}m", "n".repeat(252)));
        assert!(a.len() <= 128 && b.len() <= 128, "{a}");
        assert_ne!(a, b);
        assert!(a.contains('@'));
        let allowed = |c: char| c.is_ascii_alphanumeric() || "+=,.@_-".contains(c);
        assert!(a.chars().all(allowed), "{a}");
    }

    #[test]
    fn role_names_and_accounts_come_from_arns() {
        assert_eq!(
            role_name("arn:aws:iam::123456789012:role/team/lake-query"),
            "lake-query"
        );
        assert_eq!(role_name("lake-query"), "lake-query");
        assert_eq!(
            role_account("arn:aws:iam::123456789012:role/lake-query"),
            Some("123456789012")
        );
        assert_eq!(role_account("lake-query"), None);
    }
}
