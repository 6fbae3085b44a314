//! Per-role connection plans: exactly what each runtime role may connect to, and how.
//!
//! The query role's plan has no registry at all (not even a name) and its manifest access is
//! read-only with no provisioning; that is fixed by the type, not by a flag someone could flip.

use std::fmt;
use std::path::PathBuf;

use serde::Serialize;

use super::{ManifestTableName, RegistryTableName};

/// The two roles of the `lake` runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Query,
    Metadata,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Query => "query",
            Role::Metadata => "metadata",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "query" => Ok(Role::Query),
            "metadata" => Ok(Role::Metadata),
            "maintenance" => Err(
                "is not served: `lake maintain` runs the maintenance role (without --data)"
                    .to_owned(),
            ),
            other => Err(format!(
                "{other:?} is not a role; expected query or metadata"
            )),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Access {
    ReadOnly,
    ReadWrite,
}

/// Whether a role may create a missing store. Cloud tables are provisioned by the operator only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Provisioning {
    Never,
    CreateIfMissing,
}

/// AWS connection settings shared by the stores of one plan. No credentials: those come from
/// the workload identity or the default credential chain at run time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AwsTarget {
    pub region: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dynamodb_endpoint: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s3_endpoint: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RegistryStore {
    DynamoDb { table: RegistryTableName },
    Embedded { file: PathBuf },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ManifestStore {
    DynamoDb { table: ManifestTableName },
    Embedded { file: PathBuf },
}

/// What the query role connects to: the warehouse (read), the stage, and the manifest store,
/// read-only. Built only by [`super::AuthorityPlan::query`] or from validated configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueryConnectionPlan {
    warehouse: String,
    stage: String,
    manifests: ManifestStore,
    manifest_access: Access,
    provisioning: Provisioning,
    #[serde(skip_serializing_if = "Option::is_none")]
    aws: Option<AwsTarget>,
}

impl QueryConnectionPlan {
    pub(crate) fn new(
        warehouse: String,
        stage: String,
        manifests: ManifestStore,
        aws: Option<AwsTarget>,
    ) -> Self {
        Self {
            warehouse,
            stage,
            manifests,
            manifest_access: Access::ReadOnly,
            provisioning: Provisioning::Never,
            aws,
        }
    }
    pub fn warehouse(&self) -> &str {
        &self.warehouse
    }
    pub fn stage(&self) -> &str {
        &self.stage
    }
    pub fn manifests(&self) -> &ManifestStore {
        &self.manifests
    }
    pub fn manifest_access(&self) -> Access {
        self.manifest_access
    }
    pub fn provisioning(&self) -> Provisioning {
        self.provisioning
    }
    pub fn aws(&self) -> Option<&AwsTarget> {
        self.aws.as_ref()
    }
}

/// What the metadata role connects to: registry and manifests, read-write, plus warehouse and
/// stage. It provisions only embedded (local) stores; cloud tables come from the operator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MetadataConnectionPlan {
    warehouse: String,
    stage: String,
    registry: RegistryStore,
    manifests: ManifestStore,
    access: Access,
    provisioning: Provisioning,
    #[serde(skip_serializing_if = "Option::is_none")]
    aws: Option<AwsTarget>,
}

impl MetadataConnectionPlan {
    pub(crate) fn new(
        warehouse: String,
        stage: String,
        registry: RegistryStore,
        manifests: ManifestStore,
        aws: Option<AwsTarget>,
    ) -> Self {
        let provisioning = match manifests {
            ManifestStore::Embedded { .. } => Provisioning::CreateIfMissing,
            ManifestStore::DynamoDb { .. } => Provisioning::Never,
        };
        Self {
            warehouse,
            stage,
            registry,
            manifests,
            access: Access::ReadWrite,
            provisioning,
            aws,
        }
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
    pub fn access(&self) -> Access {
        self.access
    }
    pub fn provisioning(&self) -> Provisioning {
        self.provisioning
    }
    pub fn aws(&self) -> Option<&AwsTarget> {
        self.aws.as_ref()
    }
}

/// The plan of one runtime process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum RolePlan {
    Query(QueryConnectionPlan),
    Metadata(MetadataConnectionPlan),
}

impl RolePlan {
    pub fn role(&self) -> Role {
        match self {
            RolePlan::Query(_) => Role::Query,
            RolePlan::Metadata(_) => Role::Metadata,
        }
    }
}

/// What the maintenance role connects to, in the cloud: the warehouse (read, write and delete:
/// compaction rewrites files, removal deletes those only removed versions use) and the manifest
/// table (read, write, and delete the rows of removed versions). No registry (it finds the tables
/// by listing the warehouse), no stage, no port. A local lake is maintained by the process that
/// holds its stores (`lake maintain --data`, `lake local --maintain-every-minutes`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MaintenanceConnectionPlan {
    warehouse: String,
    manifests: ManifestTableName,
    aws: AwsTarget,
}

impl MaintenanceConnectionPlan {
    pub(crate) fn new(warehouse: String, manifests: ManifestTableName, aws: AwsTarget) -> Self {
        Self {
            warehouse,
            manifests,
            aws,
        }
    }
    pub fn warehouse(&self) -> &str {
        &self.warehouse
    }
    pub fn manifests(&self) -> &ManifestTableName {
        &self.manifests
    }
    pub fn aws(&self) -> &AwsTarget {
        &self.aws
    }
}
