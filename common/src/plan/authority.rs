//! From a request (table names, storage) to a validated [`AuthorityPlan`].

use std::path::Path;

use serde::Serialize;

use super::connection::{
    AwsTarget, MaintenanceConnectionPlan, ManifestStore, MetadataConnectionPlan,
    QueryConnectionPlan, RegistryStore,
};
use super::storage::{self, Storage, StorageFields, StorageRequest};
use super::{
    LOCAL_MANIFEST_FILE, LOCAL_META_DIR, LOCAL_REGISTRY_FILE, LegacyTableName, ManifestTableName,
    PlanError, PlanErrors, RegistryTableName, STAGE_DIR, TableNameError,
};

/// The names of the request's fields, as the user wrote them (spec paths or variable names).
#[derive(Debug, Clone, Copy)]
pub struct PlanFields {
    pub cluster_name: &'static str,
    pub registry: &'static str,
    pub manifest: &'static str,
    pub legacy: &'static str,
    pub tables: &'static str,
    pub storage: StorageFields,
}

impl PlanFields {
    /// Field paths of the `LakeCluster` resource.
    pub const SPEC: PlanFields = PlanFields {
        cluster_name: "metadata.name",
        registry: "spec.tables.registry",
        manifest: "spec.tables.manifest",
        legacy: "spec.migration.sourceTable",
        tables: "spec.tables",
        storage: StorageFields {
            bucket: "spec.storage.s3.bucket",
            prefix: "spec.storage.s3.prefix",
            region: "spec.storage.s3.region",
            endpoint: "spec.storage.s3.endpoint",
            path: "spec.storage.local.path",
        },
    };
}

/// What a user asked for, unvalidated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorityRequest {
    pub cluster_name: String,
    pub storage: StorageRequest,
    pub registry_table: Option<String>,
    pub manifest_table: Option<String>,
    pub legacy_table: Option<String>,
    /// DynamoDB endpoint override (emulators). Not part of the spec: the operator's own setting.
    pub dynamodb_endpoint: Option<String>,
}

/// The validated authority layout of one lake: where data, stage, registry and manifests live.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuthorityPlan {
    cluster_name: String,
    storage: Storage,
    warehouse: String,
    stage: String,
    registry: RegistryStore,
    manifests: ManifestStore,
    #[serde(skip_serializing_if = "Option::is_none")]
    legacy_table: Option<LegacyTableName>,
    #[serde(skip_serializing_if = "Option::is_none")]
    aws: Option<AwsTarget>,
}

/// Rejects a registry and a manifest table with the same name, naming both fields.
pub fn check_distinct(
    registry: &RegistryTableName,
    manifest: &ManifestTableName,
    registry_field: &str,
    manifest_field: &str,
) -> Result<(), PlanError> {
    if registry.as_str() == manifest.as_str() {
        return Err(PlanError::SameTable {
            registry_field: registry_field.to_owned(),
            manifest_field: manifest_field.to_owned(),
            table: registry.to_string(),
        });
    }
    Ok(())
}

/// An explicit name, or `<cluster>-<suffix>`; a derived name that breaks DynamoDB's rules is
/// reported as such, never truncated silently.
fn table_name<T>(
    explicit: Option<&str>,
    cluster: &str,
    suffix: &str,
    field: &str,
    parse: fn(&str, &str) -> Result<T, TableNameError>,
    errors: &mut Vec<PlanError>,
) -> Option<T> {
    let result = match explicit {
        Some(name) => parse(field, name).map_err(PlanError::from),
        None => {
            let default = format!("{cluster}-{suffix}");
            parse(field, &default).map_err(|e| PlanError::DerivedTableName {
                field: field.to_owned(),
                cluster: cluster.to_owned(),
                default,
                reason: match e {
                    TableNameError::Length { len, .. } => format!("{len} characters"),
                    TableNameError::Character { found, .. } => format!("contains {found:?}"),
                },
            })
        }
    };
    result.map_err(|e| errors.push(e)).ok()
}

impl AuthorityPlan {
    /// Validates `request`, returning every problem found. `fields` names what the user wrote.
    pub fn new(request: &AuthorityRequest, fields: &PlanFields) -> Result<Self, PlanErrors> {
        let mut errors = Vec::new();
        if request.cluster_name.is_empty() {
            errors.push(PlanError::Missing {
                field: fields.cluster_name.to_owned(),
                reason: "the cluster name derives the default table names".to_owned(),
            });
        }
        let storage = storage::validate(&request.storage, &fields.storage, &mut errors);
        let legacy = request.legacy_table.as_deref().and_then(|name| {
            LegacyTableName::parse(fields.legacy, name)
                .map_err(|e| errors.push(e.into()))
                .ok()
        });

        // Tables are checked whatever state the storage is in, so one pass reports everything.
        let (registry, manifests) = match &request.storage {
            StorageRequest::S3 { .. } => {
                let registry = table_name(
                    request.registry_table.as_deref(),
                    &request.cluster_name,
                    "registry",
                    fields.registry,
                    RegistryTableName::parse,
                    &mut errors,
                );
                let manifest = table_name(
                    request.manifest_table.as_deref(),
                    &request.cluster_name,
                    "manifests",
                    fields.manifest,
                    ManifestTableName::parse,
                    &mut errors,
                );
                if let (Some(r), Some(m)) = (&registry, &manifest)
                    && let Err(e) = check_distinct(r, m, fields.registry, fields.manifest)
                {
                    errors.push(e);
                }
                if let Some(legacy) = &legacy {
                    let targets = [
                        (fields.registry, registry.as_ref().map(|r| r.as_str())),
                        (fields.manifest, manifest.as_ref().map(|m| m.as_str())),
                    ];
                    for (field, name) in targets {
                        if name == Some(legacy.as_str()) {
                            errors.push(PlanError::LegacyAlias {
                                field: field.to_owned(),
                                legacy_field: fields.legacy.to_owned(),
                                table: legacy.to_string(),
                            });
                        }
                    }
                }
                (
                    registry.map(|table| RegistryStore::DynamoDb { table }),
                    manifest.map(|table| ManifestStore::DynamoDb { table }),
                )
            }
            StorageRequest::Local { path } => {
                if request.registry_table.is_some() || request.manifest_table.is_some() {
                    errors.push(PlanError::NotAllowed {
                        field: fields.tables.to_owned(),
                        reason: "it names DynamoDB tables, which only S3 storage uses; a local lake keeps its registry and manifests in embedded stores".to_owned(),
                    });
                }
                if request.legacy_table.is_some() {
                    errors.push(PlanError::NotAllowed {
                        field: fields.legacy.to_owned(),
                        reason: "a migration copies a lake v1 DynamoDB table into the split DynamoDB tables, which only S3 storage has".to_owned(),
                    });
                }
                let meta = Path::new(path).join(LOCAL_META_DIR);
                (
                    Some(RegistryStore::Embedded {
                        file: meta.join(LOCAL_REGISTRY_FILE),
                    }),
                    Some(ManifestStore::Embedded {
                        file: meta.join(LOCAL_MANIFEST_FILE),
                    }),
                )
            }
        };
        let aws = match &storage {
            Some(Storage::S3(s3)) => Some(AwsTarget {
                region: s3.region.clone(),
                dynamodb_endpoint: request.dynamodb_endpoint.clone(),
                s3_endpoint: s3.endpoint.clone(),
            }),
            _ => None,
        };

        match (storage, registry, manifests) {
            (Some(storage), Some(registry), Some(manifests)) if errors.is_empty() => {
                let (warehouse, stage) = match &storage {
                    Storage::S3(s3) => (s3.url(""), s3.url(STAGE_DIR)),
                    Storage::Local { path } => (display(path), display(&path.join(STAGE_DIR))),
                };
                Ok(Self {
                    cluster_name: request.cluster_name.clone(),
                    storage,
                    warehouse,
                    stage,
                    registry,
                    manifests,
                    legacy_table: legacy,
                    aws,
                })
            }
            _ => Err(PlanErrors(errors)),
        }
    }

    pub fn cluster_name(&self) -> &str {
        &self.cluster_name
    }
    pub fn storage(&self) -> &Storage {
        &self.storage
    }
    pub fn warehouse(&self) -> &str {
        &self.warehouse
    }
    pub fn stage(&self) -> &str {
        &self.stage
    }
    pub fn registry(&self) -> &RegistryStore {
        &self.registry
    }
    pub fn manifests(&self) -> &ManifestStore {
        &self.manifests
    }
    pub fn legacy_table(&self) -> Option<&LegacyTableName> {
        self.legacy_table.as_ref()
    }
    pub fn aws(&self) -> Option<&AwsTarget> {
        self.aws.as_ref()
    }

    /// The query role: manifests only, read-only, never provisions.
    pub fn query(&self) -> QueryConnectionPlan {
        QueryConnectionPlan::new(
            self.warehouse.clone(),
            self.stage.clone(),
            self.manifests.clone(),
            self.aws.clone(),
        )
    }

    /// The metadata role: registry and manifests.
    pub fn metadata(&self) -> MetadataConnectionPlan {
        MetadataConnectionPlan::new(
            self.warehouse.clone(),
            self.stage.clone(),
            self.registry.clone(),
            self.manifests.clone(),
            self.aws.clone(),
        )
    }

    /// The maintenance role: the warehouse and the manifest table, no registry. `None` for a
    /// local lake, which the process serving it maintains.
    pub fn maintenance(&self) -> Option<MaintenanceConnectionPlan> {
        match (&self.manifests, &self.aws) {
            (ManifestStore::DynamoDb { table }, Some(aws)) => Some(MaintenanceConnectionPlan::new(
                self.warehouse.clone(),
                table.clone(),
                aws.clone(),
            )),
            _ => None,
        }
    }
}

fn display(path: &Path) -> String {
    path.display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Access, Provisioning};

    fn cloud(registry: Option<&str>, manifest: Option<&str>) -> AuthorityRequest {
        AuthorityRequest {
            cluster_name: "analytics".into(),
            storage: StorageRequest::S3 {
                bucket: "acme-lake".into(),
                prefix: "analytics".into(),
                region: "eu-west-1".into(),
                endpoint: None,
            },
            registry_table: registry.map(Into::into),
            manifest_table: manifest.map(Into::into),
            legacy_table: None,
            dynamodb_endpoint: None,
        }
    }

    fn errors(request: &AuthorityRequest) -> Vec<PlanError> {
        AuthorityPlan::new(request, &PlanFields::SPEC)
            .expect_err("plan should fail")
            .0
    }

    #[test]
    fn cloud_manifest_table_alias_fails_before_connect() {
        // The plan is the only way to a connection plan, and it takes no client: an aliased
        // table never gets as far as a connection attempt.
        let errs = errors(&cloud(Some("shared"), Some("shared")));
        assert_eq!(
            errs,
            [PlanError::SameTable {
                registry_field: "spec.tables.registry".into(),
                manifest_field: "spec.tables.manifest".into(),
                table: "shared".into(),
            }]
        );
        let msg = errs[0].to_string();
        assert!(msg.contains("spec.tables.registry") && msg.contains("spec.tables.manifest"));

        // A default can alias an explicit name too: cluster "analytics" defaults its registry to
        // "analytics-registry".
        let errs = errors(&cloud(None, Some("analytics-registry")));
        assert!(
            matches!(&errs[..], [PlanError::SameTable { table, .. }] if table == "analytics-registry")
        );
    }

    #[test]
    fn cloud_storage_wiring_separates_registry_and_manifest_authority() {
        let plan = AuthorityPlan::new(&cloud(None, None), &PlanFields::SPEC).unwrap();
        assert_eq!(plan.warehouse(), "s3://acme-lake/analytics");
        assert_eq!(plan.stage(), "s3://acme-lake/analytics/_stage");

        let metadata = plan.metadata();
        assert_eq!(
            metadata.registry(),
            &RegistryStore::DynamoDb {
                table: RegistryTableName::parse("t", "analytics-registry").unwrap()
            }
        );
        assert_eq!(
            metadata.manifests(),
            &ManifestStore::DynamoDb {
                table: ManifestTableName::parse("t", "analytics-manifests").unwrap()
            }
        );
        assert_eq!(metadata.access(), Access::ReadWrite);
        assert_eq!(metadata.provisioning(), Provisioning::Never);

        let query = plan.query();
        assert_eq!(query.manifests(), metadata.manifests());
        assert_eq!(query.manifest_access(), Access::ReadOnly);
        assert_eq!(query.provisioning(), Provisioning::Never);
        // The query plan, as printed, holds no trace of the registry.
        let printed = serde_json::to_string(&query).unwrap();
        assert!(!printed.contains("registry"), "{printed}");
        assert!(printed.contains("analytics-manifests"), "{printed}");
    }

    #[test]
    fn defaults_derive_from_the_cluster_name_and_are_validated() {
        let mut long = cloud(None, None);
        long.cluster_name = "c".repeat(250);
        let errs = errors(&long);
        // 250 + "-registry" is 259 characters and 250 + "-manifests" is 260: both over 255.
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(
            errs.iter()
                .all(|e| matches!(e, PlanError::DerivedTableName { .. }))
        );
        assert!(
            errs[0]
                .to_string()
                .contains("set spec.tables.registry explicitly")
        );

        // Explicit names make the long cluster name fine.
        long.registry_table = Some("r-table".into());
        long.manifest_table = Some("m-table".into());
        assert!(AuthorityPlan::new(&long, &PlanFields::SPEC).is_ok());
    }

    #[test]
    fn legacy_table_cannot_be_a_target() {
        let mut request = cloud(Some("lake-v1-shared"), Some("m-table"));
        request.legacy_table = Some("lake-v1-shared".into());
        let errs = errors(&request);
        assert_eq!(
            errs[0].fields(),
            ["spec.tables.registry", "spec.migration.sourceTable"]
        );
        request.registry_table = Some("r-table".into());
        request.manifest_table = Some("lake-v1-shared".into());
        assert_eq!(
            errors(&request)[0].fields(),
            ["spec.tables.manifest", "spec.migration.sourceTable"]
        );
        request.manifest_table = Some("m-table".into());
        let plan = AuthorityPlan::new(&request, &PlanFields::SPEC).unwrap();
        assert_eq!(plan.legacy_table().unwrap().as_str(), "lake-v1-shared");
    }

    #[test]
    fn a_local_lake_has_nothing_to_migrate_into() {
        let mut request = cloud(None, None);
        request.storage = StorageRequest::Local {
            path: "/var/lib/lake".into(),
        };
        request.legacy_table = Some("lake-v1-shared".into());
        assert_eq!(errors(&request)[0].fields(), ["spec.migration.sourceTable"]);
    }

    #[test]
    fn all_errors_are_reported_at_once() {
        let mut request = cloud(Some("x"), Some("bad name"));
        request.storage = StorageRequest::S3 {
            bucket: "B".into(),
            prefix: String::new(),
            region: "eu-west-1".into(),
            endpoint: None,
        };
        let fields: Vec<String> = errors(&request)
            .iter()
            .flat_map(|e| {
                e.fields()
                    .into_iter()
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(
            fields,
            [
                "spec.storage.s3.bucket",
                "spec.tables.registry",
                "spec.tables.manifest"
            ]
        );
    }

    #[test]
    fn local_lake_uses_embedded_stores_in_separate_files() {
        let request = AuthorityRequest {
            cluster_name: "dev".into(),
            storage: StorageRequest::Local {
                path: "/var/lib/lake".into(),
            },
            registry_table: None,
            manifest_table: None,
            legacy_table: None,
            dynamodb_endpoint: None,
        };
        let plan = AuthorityPlan::new(&request, &PlanFields::SPEC).unwrap();
        assert_eq!(plan.stage(), "/var/lib/lake/_stage");
        let query = plan.query();
        assert_eq!(
            query.manifests(),
            &ManifestStore::Embedded {
                file: "/var/lib/lake/_lake/manifests.redb".into()
            }
        );
        assert_eq!(query.provisioning(), Provisioning::Never);
        assert!(!serde_json::to_string(&query).unwrap().contains("registry"));
        let metadata = plan.metadata();
        assert_eq!(
            metadata.registry(),
            &RegistryStore::Embedded {
                file: "/var/lib/lake/_lake/registry.redb".into()
            }
        );
        assert_eq!(metadata.provisioning(), Provisioning::CreateIfMissing);

        let with_tables = AuthorityRequest {
            manifest_table: Some("m-table".into()),
            ..request
        };
        assert_eq!(errors(&with_tables)[0].fields(), ["spec.tables"]);
    }
}
