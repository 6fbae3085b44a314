//! `LakeCluster.spec`: the resource users write. Field names are public API: extend, never rename.

// kube's `printcolumn(...)` repeats the same keys once per column by design.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::api::core::v1::ResourceRequirements;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use super::status::LakeClusterStatus;

/// A whole data lake: two DynamoDB tables (catalog registry, Lance manifests), least-privilege
/// IAM for two workload roles, and the query and metadata workloads over one storage location.
#[derive(CustomResource, KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "lake.dev",
    version = "v1alpha1",
    kind = "LakeCluster",
    plural = "lakeclusters",
    doc = "A least-privilege data lake: tables, IAM policies and Flight SQL workloads from one resource.",
    shortname = "lake",
    namespaced,
    status = "LakeClusterStatus",
    derive = "PartialEq",
    derive = "Default",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Query endpoint",
        type_ = "string",
        json_path = ".status.endpoints.query"
    ),
    printcolumn(
        name = "Migration",
        type_ = "string",
        json_path = ".status.migration.phase"
    ),
    printcolumn(
        name = "Copied",
        type_ = "integer",
        json_path = ".status.migration.copiedItems"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new(
    "!has(oldSelf.tables) || ((!has(oldSelf.tables.registry) || (has(self.tables) && has(self.tables.registry))) && (!has(oldSelf.tables.manifest) || (has(self.tables) && has(self.tables.manifest))))"
).message("spec.tables.registry and spec.tables.manifest cannot be removed once set"))]
#[x_kube(validation = Rule::new(
    "has(self.migration) == has(oldSelf.migration) && (!has(self.migration) || (self.migration.sourceTable == oldSelf.migration.sourceTable && self.migration.approval == oldSelf.migration.approval))"
).message("spec.migration is set when a LakeCluster is created and never changed: it cannot be added to a lake in use, removed, pointed at another table, or switched to another approval mode (docs/guides/migration.md)"))]
#[serde(rename_all = "camelCase")]
pub struct LakeClusterSpec {
    /// Where data and the managed stage live: exactly one of `s3` or `local`.
    pub storage: StorageSpec,
    /// DynamoDB table names; each defaults to `<namespace>.<name>-registry` /
    /// `<namespace>.<name>-manifests`.
    #[serde(default, skip_serializing_if = "TablesSpec::is_empty")]
    pub tables: TablesSpec,
    /// The IAM roles the query and metadata workloads run as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iam: Option<IamSpec>,
    /// The read-only query workload.
    pub query: QuerySpec,
    /// The metadata workload: the single writer.
    pub metadata: MetadataSpec,
    /// Copy a lake v1 shared table into the split tables, then cut over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration: Option<MigrationSpec>,
    /// What happens to the DynamoDB tables when the LakeCluster is deleted.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,
    /// Stop every mutation (AWS and Kubernetes); deletion is still honoured.
    #[serde(default)]
    pub paused: bool,
    /// How long one statement may run on either endpoint (seconds; 600 when unset). The
    /// maintenance grace must be at least this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub query_timeout_seconds: Option<i64>,
    /// TLS on both Flight endpoints: `Operator` (the default) issues a serving certificate per
    /// role from a CA of the cluster's own; `Disabled` serves plaintext and must be explicit.
    #[serde(default)]
    pub tls: TlsMode,
    /// Table maintenance (compaction, version retention, erasure of deleted rows): a CronJob
    /// running `lake maintain` in its own identity (`spec.iam.maintenanceRole`). S3 lakes only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<MaintenanceSpec>,
}

/// When and how `lake maintain` runs (docs/guides/maintenance.md: what each knob costs).
#[derive(KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceSpec {
    /// When passes start: a CronJob schedule (five fields, or `@hourly`, `@daily`, …).
    #[serde(default = "default_schedule")]
    pub schedule: String,
    /// Versions younger than this stay, for time travel (seconds; a week by default).
    #[serde(default = "default_retention")]
    pub retention_seconds: i64,
    /// How long a replaced version stays for the queries still reading it (seconds): at least
    /// the query timeout (600).
    #[serde(default = "default_grace")]
    pub grace_seconds: i64,
    /// Compaction merges smaller fragments up to this many rows.
    #[serde(default = "default_target_rows")]
    pub target_rows_per_fragment: i64,
    /// An index is brought up to date once this many rows are not in it yet.
    #[serde(default = "default_index_rows")]
    pub index_unindexed_rows: i64,
    /// A pass still running after this many seconds is stopped (the next one resumes).
    #[serde(default = "default_deadline")]
    pub deadline_seconds: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// No new passes while true (one running finishes).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,
}

fn default_schedule() -> String {
    "0 * * * *".into()
}
fn default_retention() -> i64 {
    604_800
}
fn default_grace() -> i64 {
    900
}
fn default_target_rows() -> i64 {
    1_048_576
}
fn default_index_rows() -> i64 {
    100_000
}
fn default_deadline() -> i64 {
    3_600
}

#[derive(JsonSchema, Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TlsMode {
    /// A CA of the cluster's own (its certificate in the ConfigMap `<name>-ca`, its key
    /// discarded) signs one serving certificate per role, in the Secret `<name>-tls`.
    #[default]
    Operator,
    /// Plaintext gRPC: only for a network that is private by other means.
    Disabled,
}

#[derive(KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq, Default)]
#[x_kube(validation = Rule::new("has(self.s3) != has(self.local)")
    .message("set exactly one of spec.storage.s3 or spec.storage.local"))]
#[x_kube(validation = Rule::new("has(self.local) == has(oldSelf.local)")
    .message("spec.storage cannot switch between s3 and local: the two run different workloads on different stores; create another LakeCluster"))]
pub struct StorageSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3StorageSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<LocalStorageSpec>,
}

#[derive(KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq)]
pub struct S3StorageSpec {
    #[schemars(length(min = 3, max = 63))]
    pub bucket: String,
    /// Key prefix inside the bucket; empty means the bucket root.
    #[serde(default)]
    pub prefix: String,
    pub region: String,
    /// An S3-compatible endpoint (e.g. an emulator or MinIO) instead of AWS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
}

/// A development lake in Kubernetes: one StatefulSet pod runs both roles (`lake local`) on a
/// PersistentVolumeClaim of its own.
#[derive(KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq)]
#[x_kube(validation = Rule::new("has(self.storageClassName) == has(oldSelf.storageClassName)")
    .message("spec.storage.local.storageClassName cannot be added or removed once the lake exists"))]
#[serde(rename_all = "camelCase")]
pub struct LocalStorageSpec {
    /// An absolute path: where the claim is mounted in the pod.
    pub path: String,
    /// The claim's size (a Kubernetes quantity, e.g. `10Gi`). Fixed once the claim exists.
    #[serde(default = "default_local_size")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.storage.local.size is fixed once set: resize the PersistentVolumeClaim itself"))]
    pub size: String,
    /// The claim's StorageClass; the cluster's default one when unset. Fixed once set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.storage.local.storageClassName is fixed once set"))]
    pub storage_class_name: Option<String>,
}

fn default_local_size() -> String {
    "1Gi".into()
}

#[derive(KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq, Default)]
#[x_kube(validation = Rule::new("!has(self.registry) || !has(self.manifest) || self.registry != self.manifest")
    .message("spec.tables.registry and spec.tables.manifest must name different tables"))]
#[serde(rename_all = "camelCase")]
pub struct TablesSpec {
    /// The catalog registry table (metadata only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 3, max = 255), regex(pattern = r"^[A-Za-z0-9_.-]+$"))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.tables.registry is immutable once set"))]
    pub registry: Option<String>,
    /// The Lance manifest table (written by metadata, read by query).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 3, max = 255), regex(pattern = r"^[A-Za-z0-9_.-]+$"))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.tables.manifest is immutable once set"))]
    pub manifest: Option<String>,
    /// With `deletionPolicy: Delete`, also delete tables this cluster adopted (that existed
    /// before it). Off by default: only tables the cluster created are deleted. Tables whose
    /// marker names another cluster are never deleted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub delete_adopted: bool,
    /// Takes over the tables a deleted LakeCluster left behind (`deletionPolicy: Retain`): the
    /// uid that cluster had (its tables' `lake.dev/cluster-uid` tag). Their markers and tags are
    /// rewritten to this cluster only if they name exactly that uid and no LakeCluster with it
    /// exists (docs/guides/recovery.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 36, max = 36),
        regex(pattern = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
    )]
    pub reattach_from: Option<String>,
}

impl TablesSpec {
    fn is_empty(&self) -> bool {
        self.registry.is_none()
            && self.manifest.is_none()
            && !self.delete_adopted
            && self.reattach_from.is_none()
    }
}

#[derive(KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct IamSpec {
    /// Role name or ARN for the query workload.
    pub query_role: String,
    /// Role name or ARN for the metadata workload.
    pub metadata_role: String,
    /// Role name or ARN for the maintenance Job; required with `spec.maintenance`, refused
    /// without it (no role holds a grant nothing uses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance_role: Option<String>,
    /// `false`: only report the policies in status; someone else attaches them.
    #[serde(default = "default_true")]
    pub manage: bool,
}

fn default_true() -> bool {
    true
}

#[derive(KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq, Default)]
pub struct QuerySpec {
    /// Query pods behind the query Service: 2 by default on S3; local storage runs one pod for
    /// both roles, so there it may only be 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub replicas: Option<i32>,
    pub image: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceSpec>,
    /// One statement spread over the query pods (docs/guides/distributed.md): every query pod
    /// is also a worker on a second port, mutual TLS with the cluster's CA (so `spec.tls:
    /// Operator`), reachable only from this cluster's query pods. S3 storage only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distributed: Option<DistributedSpec>,
}

#[derive(KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DistributedSpec {
    /// Whether statements are spread (the block alone turns it on).
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// A statement whose tables hold fewer MiB runs on the pod that received it (default 256).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub threshold_mb: Option<i64>,
    /// The most workers (query pods) one statement uses (default 16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub max_workers: Option<i32>,
    /// MiB of data files one scan task reads, about (default 64; 0: a task per fragment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub task_mb: Option<i64>,
    /// How the pods find each other: the headless Service's EndpointSlices (the default), or
    /// the ready Pods of the query role — only where EndpointSlices cannot carry the pods'
    /// addresses; it lets the query ServiceAccount read every Pod of the namespace.
    #[serde(default)]
    pub discovery: Discovery,
}

#[derive(JsonSchema, Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Discovery {
    #[default]
    EndpointSlices,
    Pods,
}

#[derive(KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq, Default)]
pub struct MetadataSpec {
    pub image: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Namespaces whose pods may connect to the metadata endpoint (the writers). The cluster's
    /// query pods always may; nothing else can (a NetworkPolicy).
    #[serde(
        rename = "clientNamespaces",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub client_namespaces: Vec<String>,
}

#[derive(KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq, Default)]
pub struct ServiceSpec {
    #[serde(rename = "type", default)]
    pub type_: ServiceType,
    /// Annotations for the query Service (e.g. load-balancer settings).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

#[derive(JsonSchema, Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ServiceType {
    #[default]
    ClusterIP,
    NodePort,
    LoadBalancer,
}

#[derive(KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MigrationSpec {
    /// The lake v1 shared table to copy from; it is never modified.
    #[schemars(length(min = 3, max = 255), regex(pattern = r"^[A-Za-z0-9_.-]+$"))]
    pub source_table: String,
    #[serde(default)]
    pub approval: Approval,
}

#[derive(JsonSchema, Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Approval {
    Automatic,
    /// Copy and verify, then wait for a person to approve the cutover.
    #[default]
    Manual,
}

#[derive(JsonSchema, Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DeletionPolicy {
    /// Leave the DynamoDB tables (and their data) when the LakeCluster is deleted.
    #[default]
    Retain,
    /// Delete the tables behind a finalizer.
    Delete,
}
