//! validate: a `LakeCluster` → a [`ValidatedCluster`], or every error in the spec. Pure: no client.

use lake_common::plan::{
    AuthorityPlan, AuthorityRequest, PlanError, PlanErrors, PlanFields, StorageRequest,
};
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use serde::Serialize;

use crate::crd::{Approval, DeletionPolicy, LakeCluster, ServiceType, TlsMode};

/// A Kubernetes namespace name (an RFC 1123 label).
fn is_dns_label(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// The spec, checked and with every default filled in.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ValidatedCluster {
    pub name: String,
    pub namespace: String,
    /// The LakeCluster's uid, which markers carry; unknown until the API server assigns it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    pub authority: AuthorityPlan,
    pub query: QueryWorkload,
    pub metadata: MetadataWorkload,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iam: Option<IamRoles>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub migration: Option<Migration>,
    pub deletion_policy: DeletionPolicy,
    /// `spec.tables.deleteAdopted`: deletion also removes tables this cluster adopted.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub delete_adopted_tables: bool,
    pub paused: bool,
    pub tls: TlsMode,
    /// The PersistentVolumeClaim of a local (development) lake; `None` on S3.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_volume: Option<LocalVolume>,
}

/// The claim a local lake's one pod keeps its directory on.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalVolume {
    pub size: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
}

/// Query pods when `spec.query.replicas` is unset (S3; a local lake has exactly one pod).
const DEFAULT_QUERY_REPLICAS: i32 = 2;

/// A Kubernetes quantity as a claim's size: digits, an optional fraction, a binary or decimal
/// suffix (`500Mi`, `1.5Gi`, `10G`).
fn is_quantity(value: &str) -> bool {
    let number_end = value
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(value.len());
    let (number, suffix) = value.split_at(number_end);
    let mut parts = number.split('.');
    let whole = parts.next().unwrap_or_default();
    let fraction = parts.next();
    !whole.is_empty()
        && whole.chars().all(|c| c.is_ascii_digit())
        && fraction.is_none_or(|f| !f.is_empty())
        && parts.next().is_none()
        && [
            "", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "k", "M", "G", "T", "P", "E",
        ]
        .contains(&suffix)
        && number.chars().any(|c| c != '0' && c != '.')
}

/// A StorageClass name (an RFC 1123 subdomain).
fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(is_dns_label)
}

/// What a local lake's one pod (both roles, `lake local`) cannot honour.
fn check_local(spec: &crate::crd::LakeClusterSpec, errors: &mut Vec<PlanError>) {
    let Some(local) = &spec.storage.local else {
        return;
    };
    let one_pod = "local storage runs both roles in one pod (a development lake)";
    // The claim is mounted at the path: not over the root, the pod's /tmp or its Secrets.
    let path = std::path::Path::new(&local.path);
    let taken = ["/tmp", "/var/run/secrets"];
    if path == std::path::Path::new("/") || taken.iter().any(|t| path.starts_with(t)) {
        errors.push(PlanError::InvalidField {
            field: "spec.storage.local.path".into(),
            value: local.path.clone(),
            reason: "is where the pod keeps its root, its /tmp or its Secrets: choose a \
                     directory of its own, e.g. /var/lib/lake"
                .into(),
        });
    }
    if let Some(replicas) = spec.query.replicas.filter(|r| *r != 1) {
        errors.push(PlanError::InvalidField {
            field: "spec.query.replicas".into(),
            value: replicas.to_string(),
            reason: format!("{one_pod}: set 1 or leave it unset"),
        });
    }
    if spec.query.image != spec.metadata.image && !spec.query.image.trim().is_empty() {
        errors.push(PlanError::InvalidField {
            field: "spec.query.image".into(),
            value: spec.query.image.clone(),
            reason: format!(
                "{one_pod}, which runs spec.metadata.image ({:?}): set the same image",
                spec.metadata.image
            ),
        });
    }
    if spec.query.resources.is_some() {
        errors.push(PlanError::NotAllowed {
            field: "spec.query.resources".into(),
            reason: format!("{one_pod}: set its resources in spec.metadata.resources"),
        });
    }
    if !is_quantity(&local.size) {
        errors.push(PlanError::InvalidField {
            field: "spec.storage.local.size".into(),
            value: local.size.clone(),
            reason: "must be a Kubernetes quantity above zero, e.g. 10Gi or 500Mi".into(),
        });
    }
    if let Some(class) = local
        .storage_class_name
        .as_ref()
        .filter(|c| !is_dns_subdomain(c))
    {
        errors.push(PlanError::InvalidField {
            field: "spec.storage.local.storageClassName".into(),
            value: class.clone(),
            reason: "must be a StorageClass name: dot-separated parts of a-z, 0-9 and '-'".into(),
        });
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueryWorkload {
    pub replicas: i32,
    pub image: String,
    pub service_type: ServiceType,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub service_annotations: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetadataWorkload {
    pub image: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Namespaces whose pods may reach metadata, besides the query pods.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub client_namespaces: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IamRoles {
    pub query_role: String,
    pub metadata_role: String,
    pub manage: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Migration {
    pub source_table: String,
    pub approval: Approval,
}

/// The namespace a LakeCluster without one (e.g. a file given to `render`) is planned for.
pub const DEFAULT_NAMESPACE: &str = "default";

pub fn validate(cluster: &LakeCluster) -> Result<ValidatedCluster, PlanErrors> {
    let spec = &cluster.spec;
    let mut errors = Vec::new();
    let name = cluster.metadata.name.clone().unwrap_or_default();
    let namespace = cluster
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned());

    let storage = match (&spec.storage.s3, &spec.storage.local) {
        (Some(s3), None) => Some(StorageRequest::S3 {
            bucket: s3.bucket.clone(),
            prefix: s3.prefix.clone(),
            region: s3.region.clone(),
            endpoint: s3.endpoint.clone(),
        }),
        (None, Some(local)) => Some(StorageRequest::Local {
            path: local.path.clone(),
        }),
        (Some(_), Some(_)) => {
            errors.push(PlanError::NotAllowed {
                field: "spec.storage".into(),
                reason: "set exactly one of spec.storage.s3 or spec.storage.local, not both".into(),
            });
            None
        }
        (None, None) => {
            errors.push(PlanError::Missing {
                field: "spec.storage".into(),
                reason: "set exactly one of spec.storage.s3 or spec.storage.local".into(),
            });
            None
        }
    };

    let authority = storage.and_then(|storage| {
        let request = AuthorityRequest {
            // Default table names carry the namespace: two clusters of one name in two
            // namespaces must not default to the same tables.
            // `.` cannot appear in a namespace, so `<namespace>.<name>` is unambiguous
            // (`team`/`a-x` and `team-a`/`x` would share `team-a-x`).
            cluster_name: if name.is_empty() {
                String::new()
            } else {
                format!("{namespace}.{name}")
            },
            storage,
            registry_table: spec.tables.registry.clone(),
            manifest_table: spec.tables.manifest.clone(),
            legacy_table: spec.migration.as_ref().map(|m| m.source_table.clone()),
            dynamodb_endpoint: None,
        };
        AuthorityPlan::new(&request, &PlanFields::SPEC)
            .map_err(|e| errors.extend(e.0))
            .ok()
    });

    for (i, namespace) in spec.metadata.client_namespaces.iter().enumerate() {
        if !is_dns_label(namespace) {
            errors.push(PlanError::InvalidField {
                field: format!("spec.metadata.clientNamespaces[{i}]"),
                value: namespace.clone(),
                reason: "must be a namespace name: 1-63 characters of a-z, 0-9 and '-', starting and ending with a letter or digit".into(),
            });
        }
    }
    if let Some(replicas) = spec.query.replicas.filter(|r| *r < 1) {
        errors.push(PlanError::InvalidField {
            field: "spec.query.replicas".into(),
            value: replicas.to_string(),
            reason: "must be at least 1: a lake without a query replica serves no reads".into(),
        });
    }
    check_local(spec, &mut errors);
    for (field, image) in [
        ("spec.query.image", &spec.query.image),
        ("spec.metadata.image", &spec.metadata.image),
    ] {
        if image.trim().is_empty() {
            errors.push(PlanError::Missing {
                field: field.into(),
                reason: "the container image the workload runs".into(),
            });
        }
    }
    if let Some(iam) = &spec.iam {
        for (field, role) in [
            ("spec.iam.queryRole", &iam.query_role),
            ("spec.iam.metadataRole", &iam.metadata_role),
        ] {
            if role.trim().is_empty() {
                errors.push(PlanError::Missing {
                    field: field.into(),
                    reason: "an IAM role name or ARN".into(),
                });
            }
        }
        for (field, role) in [
            ("spec.iam.queryRole", &iam.query_role),
            ("spec.iam.metadataRole", &iam.metadata_role),
        ] {
            if !role.trim().is_empty()
                && let Err(reason) = crate::plan::iam::check_role(role)
            {
                errors.push(PlanError::InvalidField {
                    field: field.into(),
                    value: role.clone(),
                    reason,
                });
            }
        }
        // IAM role names are case-insensitive, and a role may be given by name or by ARN.
        let same_role = crate::plan::iam::role_name(&iam.query_role)
            .eq_ignore_ascii_case(crate::plan::iam::role_name(&iam.metadata_role));
        if !iam.query_role.trim().is_empty() && same_role {
            errors.push(PlanError::InvalidField {
                field: "spec.iam.queryRole".into(),
                value: iam.query_role.clone(),
                reason: format!(
                    "names the same IAM role as spec.iam.metadataRole ({:?}; role names are \
                     case-insensitive, given by name or ARN); query must run as its own \
                     read-only role",
                    iam.metadata_role
                ),
            });
        }
    }

    match authority {
        Some(authority) if errors.is_empty() => Ok(ValidatedCluster {
            name,
            namespace,
            uid: cluster.metadata.uid.clone(),
            authority,
            query: QueryWorkload {
                replicas: match spec.storage.local {
                    Some(_) => 1,
                    None => spec.query.replicas.unwrap_or(DEFAULT_QUERY_REPLICAS),
                },
                image: spec.query.image.clone(),
                service_type: spec
                    .query
                    .service
                    .as_ref()
                    .map(|s| s.type_)
                    .unwrap_or_default(),
                service_annotations: spec
                    .query
                    .service
                    .as_ref()
                    .map(|s| s.annotations.clone())
                    .unwrap_or_default(),
                resources: spec.query.resources.clone(),
            },
            metadata: MetadataWorkload {
                image: spec.metadata.image.clone(),
                resources: spec.metadata.resources.clone(),
                client_namespaces: spec.metadata.client_namespaces.clone(),
            },
            iam: spec.iam.as_ref().map(|iam| IamRoles {
                query_role: iam.query_role.clone(),
                metadata_role: iam.metadata_role.clone(),
                manage: iam.manage,
            }),
            migration: spec.migration.as_ref().map(|m| Migration {
                source_table: m.source_table.clone(),
                approval: m.approval,
            }),
            deletion_policy: spec.deletion_policy,
            delete_adopted_tables: spec.tables.delete_adopted,
            paused: spec.paused,
            tls: spec.tls,
            local_volume: spec.storage.local.as_ref().map(|local| LocalVolume {
                size: local.size.clone(),
                storage_class_name: local.storage_class_name.clone(),
            }),
        }),
        _ => Err(PlanErrors(errors)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(namespace: &str, query_role: &str, metadata_role: &str) -> LakeCluster {
        serde_yaml::from_str(&format!(
            r#"
apiVersion: lake.dev/v1alpha1
kind: LakeCluster
metadata: {{name: analytics, namespace: {namespace}}}
spec:
  storage: {{s3: {{bucket: acme-lake, prefix: wh, region: eu-west-1}}}}
  iam: {{queryRole: "{query_role}", metadataRole: "{metadata_role}"}}
  query: {{image: lake:1}}
  metadata: {{image: lake:1}}
"#
        ))
        .unwrap()
    }

    fn tables(c: &ValidatedCluster) -> (String, String) {
        match (c.authority.registry(), c.authority.manifests()) {
            (
                lake_common::plan::RegistryStore::DynamoDb { table: r },
                lake_common::plan::ManifestStore::DynamoDb { table: m },
            ) => (r.to_string(), m.to_string()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn same_name_in_two_namespaces_defaults_to_different_tables() {
        let a = validate(&cluster("team-a", "q", "m")).unwrap();
        let b = validate(&cluster("team-b", "q", "m")).unwrap();
        assert_eq!(
            tables(&a),
            (
                "team-a.analytics-registry".into(),
                "team-a.analytics-manifests".into()
            )
        );
        assert_ne!(tables(&a), tables(&b));
        // `-` may be in both parts, `.` in neither namespace: team/a-x and team-a/x differ.
        let mut c = cluster("team", "q", "m");
        c.metadata.name = Some("a-x".into());
        let mut d = cluster("team-a", "q", "m");
        d.metadata.name = Some("x".into());
        assert_ne!(
            tables(&validate(&c).unwrap()),
            tables(&validate(&d).unwrap())
        );
    }

    #[test]
    fn one_role_by_name_arn_or_case_is_refused() {
        for (q, m) in [
            ("lake", "lake"),
            ("lake", "arn:aws:iam::123456789012:role/lake"),
            ("arn:aws:iam::123456789012:role/team/Lake", "LAKE"),
        ] {
            let errors = validate(&cluster("data", q, m)).unwrap_err();
            assert!(
                errors
                    .iter()
                    .any(|e| e.to_string().contains("spec.iam.queryRole")),
                "{q} / {m}: {errors:?}"
            );
        }
        assert!(validate(&cluster("data", "lake-query", "lake-metadata")).is_ok());
    }

    #[test]
    fn role_arns_name_one_account_and_a_valid_role() {
        for bad in [
            "arn:aws:iam::*:role/lake-query",
            "arn:aws:iam::12345:role/lake-query",
            "arn:aws:iam::123456789012:user/lake-query",
            "arn:aws:iam::123456789012:role/",
            "arn:evil:iam::123456789012:role/lake-query",
            "lake/query",
            "lake query",
        ] {
            let errors = validate(&cluster("data", bad, "lake-metadata")).unwrap_err();
            assert!(
                errors
                    .iter()
                    .any(|e| e.to_string().contains("spec.iam.queryRole")),
                "{bad}: {errors:?}"
            );
        }
        let arn = "arn:aws:iam::123456789012:role/team/lake-query";
        assert!(validate(&cluster("data", arn, "lake-metadata")).is_ok());
    }

    fn local(extra_query: &str, local_extra: &str) -> LakeCluster {
        serde_yaml::from_str(&format!(
            r#"
apiVersion: lake.dev/v1alpha1
kind: LakeCluster
metadata: {{name: dev, namespace: data}}
spec:
  storage: {{local: {{path: /var/lib/lake{local_extra}}}}}
  query: {{image: lake:1{extra_query}}}
  metadata: {{image: lake:1}}
"#
        ))
        .unwrap()
    }

    fn fields(errors: &PlanErrors) -> Vec<String> {
        errors
            .iter()
            .map(|e| {
                e.to_string()
                    .split(':')
                    .next()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect()
    }

    #[test]
    fn a_local_lake_is_one_pod_with_a_claim() {
        let ok = validate(&local("", "")).unwrap();
        assert_eq!(ok.query.replicas, 1, "one pod serves both roles");
        assert_eq!(
            ok.local_volume,
            Some(LocalVolume {
                size: "1Gi".into(),
                storage_class_name: None
            })
        );
        assert!(
            validate(&local(
                ", replicas: 1",
                ", size: 1.5Gi, storageClassName: fast"
            ))
            .is_ok()
        );
        let s3 = validate(&cluster("data", "q", "m")).unwrap();
        assert_eq!(s3.query.replicas, 2, "the default on S3");
        assert_eq!(s3.local_volume, None);
    }

    #[test]
    fn what_one_local_pod_cannot_honour_is_refused_by_field() {
        for (query, storage, field) in [
            (", replicas: 2", "", "spec.query.replicas"),
            (", resources: {}", "", "spec.query.resources"),
            ("", ", size: 10", "ok"),
            ("", ", size: 0Gi", "spec.storage.local.size"),
            ("", ", size: 1GB", "spec.storage.local.size"),
            ("", ", size: '-1Gi'", "spec.storage.local.size"),
            ("", ", size: 1.Gi", "spec.storage.local.size"),
            (
                "",
                ", storageClassName: Fast_SSD",
                "spec.storage.local.storageClassName",
            ),
        ] {
            let result = validate(&local(query, storage));
            match field {
                "ok" => assert!(result.is_ok(), "{query}{storage}: {result:?}"),
                _ => {
                    let errors = result.expect_err(field);
                    assert!(
                        fields(&errors).iter().any(|f| f.contains(field)),
                        "{errors:?}"
                    );
                }
            }
        }
        for path in ["/", "/tmp/lake", "/var/run/secrets/lake"] {
            let mut over = local("", "");
            over.spec.storage.local.as_mut().unwrap().path = path.into();
            let errors = validate(&over).unwrap_err();
            assert!(
                fields(&errors)
                    .iter()
                    .any(|f| f.contains("spec.storage.local.path")),
                "{path}: {errors:?}"
            );
        }
        let mut other_image = local("", "");
        other_image.spec.query.image = "lake:2".into();
        let errors = validate(&other_image).unwrap_err();
        assert!(
            fields(&errors)
                .iter()
                .any(|f| f.contains("spec.query.image")),
            "{errors:?}"
        );
    }
}
