//! validate: a `LakeCluster` → a [`ValidatedCluster`], or every error in the spec. Pure: no client.

use lake_common::plan::{
    AuthorityPlan, AuthorityRequest, PlanError, PlanErrors, PlanFields, StorageRequest,
};
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use serde::Serialize;

use crate::crd::{Approval, DeletionPolicy, LakeCluster, ServiceType, TlsMode};

mod local;
mod maintenance;
mod names;
#[cfg(test)]
mod tests;

/// Clusters for the tests of the modules that take a validated one.
#[cfg(test)]
pub(crate) mod fixture {
    /// Cluster `analytics` in namespace `data` on S3 (bucket `acme-lake`, prefix `wh`), with
    /// `spec.iam` = `{iam}` and `extra` (spec lines) after the rest.
    pub(crate) fn cloud(iam: &str, extra: &str) -> super::ValidatedCluster {
        let yaml = format!(
            r#"
apiVersion: lake.dev/v1alpha1
kind: LakeCluster
metadata: {{name: analytics, namespace: data}}
spec:
  storage: {{s3: {{bucket: acme-lake, prefix: wh, region: eu-west-1}}}}
  iam: {{{iam}}}
  query: {{image: lake:1}}
  metadata: {{image: lake:1}}
{extra}"#
        );
        super::validate(&serde_yaml::from_str(&yaml).unwrap()).unwrap()
    }
}

use local::check_local;
pub use maintenance::MaintenanceJob;
use maintenance::check_maintenance;
use names::is_dns_label;

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
    /// `spec.tables.reattachFrom`: the uid of the deleted cluster whose tables this one takes
    /// over (never this cluster's own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reattach_from: Option<String>,
    pub paused: bool,
    /// `spec.queryTimeoutSeconds`: the statement time limit of both endpoints.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub query_timeout_seconds: Option<u64>,
    pub tls: TlsMode,
    /// The generation of operator-issued certificates the pods mount (`plan::tls`): not part of
    /// the spec; reconcile reads it from the CA ConfigMap (0 for `render`).
    #[serde(skip_serializing_if = "is_zero")]
    pub tls_generation: u32,
    /// The newest generation whose CA and Secret must exist: the one the pods mount, or the next
    /// one, published ahead of them.
    #[serde(skip_serializing_if = "is_zero")]
    pub tls_publish: u32,
    /// The PersistentVolumeClaim of a local (development) lake; `None` on S3.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_volume: Option<LocalVolume>,
    /// `spec.maintenance`: the CronJob running `lake maintain`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<MaintenanceJob>,
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
    /// `spec.query.distributed`, when enabled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub distributed: Option<Distributed>,
}

/// Distributed query over the query pods (`spec.query.distributed`, enabled).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Distributed {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threshold_mb: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_workers: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_mb: Option<u64>,
    pub discovery: crate::crd::Discovery,
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maintenance_role: Option<String>,
    pub manage: bool,
}

impl IamRoles {
    /// Each role the spec names, with its field: the ones the operator writes policies on.
    pub fn named(&self) -> Vec<(&'static str, &String)> {
        let mut roles = vec![
            ("spec.iam.queryRole", &self.query_role),
            ("spec.iam.metadataRole", &self.metadata_role),
        ];
        roles.extend(
            self.maintenance_role
                .as_ref()
                .map(|r| ("spec.iam.maintenanceRole", r)),
        );
        roles
    }

    /// The role `identity` runs as, as the spec names it.
    pub fn role(&self, identity: crate::plan::iam::Identity) -> Option<&str> {
        use crate::plan::iam::Identity;
        match identity {
            Identity::Query => Some(&self.query_role),
            Identity::Metadata => Some(&self.metadata_role),
            Identity::Maintenance => self.maintenance_role.as_deref(),
        }
    }
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
    let distributed = check_distributed(spec, &mut errors);
    if let Some(from) = spec.tables.reattach_from.as_ref().filter(|f| !is_uid(f)) {
        errors.push(PlanError::InvalidField {
            field: "spec.tables.reattachFrom".into(),
            value: from.clone(),
            reason: "must be the uid of the deleted LakeCluster (its tables' \
                     lake.dev/cluster-uid tag), e.g. 0b3c5f3e-8a61-4c8e-9d2e-5f1b7a9c0d11"
                .into(),
        });
    }
    if spec.tables.reattach_from.is_some() && spec.storage.local.is_some() {
        errors.push(PlanError::NotAllowed {
            field: "spec.tables.reattachFrom".into(),
            reason: "a local lake keeps its stores in its own volume: there are no tables to \
                     take over"
                .into(),
        });
    }
    let query_timeout_seconds = match spec.query_timeout_seconds {
        None => None,
        Some(t) => match u64::try_from(t).ok().filter(|t| *t >= 1) {
            Some(t) => Some(t),
            None => {
                errors.push(PlanError::InvalidField {
                    field: "spec.queryTimeoutSeconds".into(),
                    value: t.to_string(),
                    reason: "must be at least 1".into(),
                });
                None
            }
        },
    };
    let maintenance = check_maintenance(spec, query_timeout_seconds, &mut errors);
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
                distributed,
            },
            metadata: MetadataWorkload {
                image: spec.metadata.image.clone(),
                resources: spec.metadata.resources.clone(),
                client_namespaces: spec.metadata.client_namespaces.clone(),
            },
            iam: spec.iam.as_ref().map(|iam| IamRoles {
                query_role: iam.query_role.clone(),
                metadata_role: iam.metadata_role.clone(),
                maintenance_role: iam.maintenance_role.clone(),
                manage: iam.manage,
            }),
            migration: spec.migration.as_ref().map(|m| Migration {
                source_table: m.source_table.clone(),
                approval: m.approval,
            }),
            deletion_policy: spec.deletion_policy,
            delete_adopted_tables: spec.tables.delete_adopted,
            reattach_from: spec
                .tables
                .reattach_from
                .clone()
                .filter(|from| Some(from) != cluster.metadata.uid.as_ref()),
            paused: spec.paused,
            query_timeout_seconds,
            tls: spec.tls,
            tls_generation: 0,
            tls_publish: 0,
            local_volume: spec.storage.local.as_ref().map(|local| LocalVolume {
                size: local.size.clone(),
                storage_class_name: local.storage_class_name.clone(),
            }),
            maintenance,
        }),
        _ => Err(PlanErrors(errors)),
    }
}

/// `spec.query.distributed`, if enabled and honourable: the worker port is mutual TLS with
/// the cluster's CA, and a local lake has one pod.
fn check_distributed(
    spec: &crate::crd::LakeClusterSpec,
    errors: &mut Vec<PlanError>,
) -> Option<Distributed> {
    let d = spec.query.distributed.as_ref().filter(|d| d.enabled)?;
    let before = errors.len();
    if spec.storage.local.is_some() {
        errors.push(PlanError::NotAllowed {
            field: "spec.query.distributed".into(),
            reason: "local storage runs one pod (a development lake): there is no other query \
                     pod to spread a statement over"
                .into(),
        });
    }
    if spec.tls != TlsMode::Operator {
        errors.push(PlanError::NotAllowed {
            field: "spec.query.distributed".into(),
            reason: "the worker port executes plans, so it is mutual TLS with the cluster's CA: \
                     it needs spec.tls: Operator"
                .into(),
        });
    }
    let mut not_negative = |field: &str, value: Option<i64>| match value.map(u64::try_from) {
        Some(Err(_)) => {
            errors.push(PlanError::InvalidField {
                field: format!("spec.query.distributed.{field}"),
                value: value.unwrap_or_default().to_string(),
                reason: "must be 0 or more".into(),
            });
            None
        }
        Some(Ok(mb)) => Some(mb),
        None => None,
    };
    let threshold_mb = not_negative("thresholdMb", d.threshold_mb);
    let task_mb = not_negative("taskMb", d.task_mb);
    let max_workers = match d.max_workers {
        Some(n) if !(1..=100).contains(&n) => {
            errors.push(PlanError::InvalidField {
                field: "spec.query.distributed.maxWorkers".into(),
                value: n.to_string(),
                reason: "must be from 1 to 100".into(),
            });
            None
        }
        n => n.and_then(|n| u64::try_from(n).ok()),
    };
    (errors.len() == before).then_some(Distributed {
        threshold_mb,
        max_workers,
        task_mb,
        discovery: d.discovery,
    })
}

/// A Kubernetes uid as the API server writes it: a lowercase UUID.
fn is_uid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups.iter().all(|g| {
            g.chars()
                .all(|c| c.is_ascii_digit() || matches!(c, 'a'..='f'))
        })
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}
