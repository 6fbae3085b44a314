//! `LakeCluster.status`: an API like the spec. Every condition carries `observedGeneration`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(JsonSchema, Deserialize, Serialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct LakeClusterStatus {
    /// The generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// PlanValid, TablesReady, PoliciesReady, WorkloadsReady, MigrationComplete, Ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoints: Option<Endpoints>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tables: Option<TablesStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policies: Option<PoliciesStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<TokensStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration: Option<MigrationStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<MaintenanceStatus>,
}

/// The maintenance CronJob and how its passes went (its Jobs, as Kubernetes keeps them: the
/// last three of each outcome).
#[derive(JsonSchema, Deserialize, Serialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceStatus {
    pub cron_job: String,
    /// The newest pass that finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pass: Option<PassStatus>,
    /// Finished passes that failed since the last one that succeeded.
    #[serde(default)]
    pub consecutive_failures: i32,
    /// The Job of a pass running now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<String>,
}

#[derive(JsonSchema, Deserialize, Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PassStatus {
    pub job: String,
    pub outcome: PassOutcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
}

#[derive(JsonSchema, Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PassOutcome {
    Succeeded,
    Failed,
}

/// Where the TLS material is: the Secret with each role's certificate and key (the pods'), and
/// the ConfigMap with the CA certificate clients verify the endpoints with (key `ca.crt`).
#[derive(JsonSchema, Deserialize, Serialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct TlsStatus {
    pub secret: String,
    pub ca_config_map: String,
}

/// The Secrets holding each role's bearer tokens (key `tokens`, one per line). Clients of the
/// query endpoint read `querySecret`; a query token is never valid on metadata.
#[derive(JsonSchema, Deserialize, Serialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct TokensStatus {
    pub query_secret: String,
    pub metadata_secret: String,
}

/// A condition's status, spelt as metav1.Condition spells it.
#[derive(JsonSchema, Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }
}

impl std::fmt::Display for ConditionStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A metav1.Condition-shaped condition.
#[derive(JsonSchema, Deserialize, Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: ConditionStatus,
    pub reason: String,
    #[serde(default)]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

#[derive(JsonSchema, Deserialize, Serialize, Clone, Debug, PartialEq, Default)]
pub struct Endpoints {
    /// Flight SQL endpoint for reads (and stage discovery).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// Flight SQL endpoint for writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<String>,
}

#[derive(JsonSchema, Deserialize, Serialize, Clone, Debug, PartialEq, Default)]
pub struct TablesStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<TableStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<TableStatus>,
}

#[derive(JsonSchema, Deserialize, Serialize, Clone, Debug, PartialEq)]
pub struct TableStatus {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arn: Option<String>,
    /// True when the table existed before and was adopted rather than created.
    #[serde(default)]
    pub adopted: bool,
}

#[derive(JsonSchema, Deserialize, Serialize, Clone, Debug, PartialEq, Default)]
pub struct PoliciesStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<PolicyStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<PolicyStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<PolicyStatus>,
}

#[derive(JsonSchema, Deserialize, Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStatus {
    pub role: String,
    /// SHA-256 of the canonical policy document.
    pub digest: String,
    /// The IRSA trust-policy statement to put on the role, as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust_policy: Option<String>,
}

/// Where a migration from a lake v1 shared table stands. Written before each step, so a
/// restarted operator resumes from here.
#[derive(JsonSchema, Deserialize, Serialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct MigrationStatus {
    #[serde(default)]
    pub phase: MigrationPhase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_table: Option<String>,
    /// Items written to the split tables so far (every segment).
    #[serde(default)]
    pub copied_items: i64,
    /// Items of the legacy table, once every segment was scanned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_items: Option<i64>,
    /// `copied/total` and what the phase is doing or why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// One checkpoint per segment of the parallel scan.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub segments: Vec<SegmentStatus>,
    /// The digest of the verified copy: the value `lake.dev/approve-migration` must carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified_digest: Option<String>,
    /// With `Failed`: the phase that failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_in: Option<MigrationPhase>,
    /// How many times segments were copied again because the legacy table changed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub recopies: i64,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

#[derive(JsonSchema, Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MigrationPhase {
    #[default]
    Pending,
    Copying,
    Verifying,
    AwaitingApproval,
    CuttingOver,
    Complete,
    Failed,
}

impl std::fmt::Display for MigrationPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// One segment of the legacy table's parallel scan: how far the copy got, and the digest of
/// every item it read (to tell a changed source from a corrupted copy).
#[derive(JsonSchema, Deserialize, Serialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SegmentStatus {
    pub segment: i32,
    #[serde(default)]
    pub done: bool,
    /// Items read from the legacy table.
    #[serde(default)]
    pub scanned: i64,
    /// Items written (or found already written, identical) in the split tables.
    #[serde(default)]
    pub copied: i64,
    /// The scan's next start (DynamoDB's LastEvaluatedKey, as `base_uri`/`version`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_key: Option<ScanKey>,
    /// The digest of the items read (hex).
    #[serde(default)]
    pub digest: String,
}

#[derive(JsonSchema, Deserialize, Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ScanKey {
    pub base_uri: String,
    pub version: String,
}
