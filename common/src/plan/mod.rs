//! The authority plan: a pure function from what a user asked for (a `LakeCluster` spec, or the
//! runtime's `LAKE_*` configuration) to validated table names, storage, and per-role connection
//! plans. No I/O happens here, so every mistake is reported before any client is built.

mod authority;
mod connection;
pub(crate) mod storage;
mod table_name;

pub use authority::{AuthorityPlan, AuthorityRequest, PlanFields, check_distinct};
pub use connection::{
    Access, AwsTarget, MaintenanceConnectionPlan, ManifestStore, MetadataConnectionPlan,
    Provisioning, QueryConnectionPlan, RegistryStore, Role, RolePlan,
};
pub use storage::{S3Location, Storage, StorageFields, StorageRequest};
pub use table_name::{
    LegacyTableName, MAX_TABLE_NAME_LEN, MIN_TABLE_NAME_LEN, ManifestTableName, RegistryTableName,
    TableNameError,
};

/// Where the managed stage lives, relative to the warehouse root.
pub const STAGE_DIR: &str = "_stage";
/// Where a local lake keeps its embedded stores, relative to the data directory.
pub const LOCAL_META_DIR: &str = "_lake";
pub const LOCAL_REGISTRY_FILE: &str = "registry.redb";
pub const LOCAL_MANIFEST_FILE: &str = "manifests.redb";

/// One thing wrong with a plan. Each variant names the field(s) at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    TableName(#[from] TableNameError),
    #[error(
        "{field} is not set, and its default {default:?} (derived from the cluster name {cluster:?}) is not a valid DynamoDB table name: {reason}; set {field} explicitly"
    )]
    DerivedTableName {
        field: String,
        cluster: String,
        default: String,
        reason: String,
    },
    #[error(
        "{registry_field} and {manifest_field} both name the table {table:?}; the registry and the manifest authority need separate tables"
    )]
    SameTable {
        registry_field: String,
        manifest_field: String,
        table: String,
    },
    #[error(
        "{field} names {table:?}, which is the legacy shared table ({legacy_field}); a migration only reads it, so it cannot be a target"
    )]
    LegacyAlias {
        field: String,
        legacy_field: String,
        table: String,
    },
    #[error("{field}: {value:?} {reason}")]
    InvalidField {
        field: String,
        value: String,
        reason: String,
    },
    #[error("{field} is required: {reason}")]
    Missing { field: String, reason: String },
    #[error("{field} is not allowed: {reason}")]
    NotAllowed { field: String, reason: String },
}

impl PlanError {
    /// The fields this error is about, for conditions and tests.
    pub fn fields(&self) -> Vec<&str> {
        match self {
            Self::TableName(e) => vec![e.field()],
            Self::DerivedTableName { field, .. }
            | Self::InvalidField { field, .. }
            | Self::Missing { field, .. }
            | Self::NotAllowed { field, .. } => vec![field],
            Self::SameTable {
                registry_field,
                manifest_field,
                ..
            } => vec![registry_field, manifest_field],
            Self::LegacyAlias {
                field,
                legacy_field,
                ..
            } => vec![field, legacy_field],
        }
    }
}

/// Every error found in one pass, so a user fixes a spec in one round trip.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct PlanErrors(pub Vec<PlanError>);

impl PlanErrors {
    pub fn iter(&self) -> impl Iterator<Item = &PlanError> {
        self.0.iter()
    }
}
