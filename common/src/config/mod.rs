//! The `LAKE_*` configuration contract between the operator (which renders one ConfigMap per role)
//! and the runtime (which reads its environment). Both directions live here so they cannot drift.
//!
//! Credentials are never part of it: pods use their ServiceAccount's IAM role, local runs the AWS
//! default credential chain.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

use crate::plan::storage::{self, StorageFields};
use crate::plan::{
    AuthorityPlan, AwsTarget, LOCAL_MANIFEST_FILE, LOCAL_META_DIR, LOCAL_REGISTRY_FILE,
    ManifestStore, ManifestTableName, MetadataConnectionPlan, PlanError, PlanErrors,
    QueryConnectionPlan, RegistryStore, RegistryTableName, Role, RolePlan, S3Location, STAGE_DIR,
    Storage, StorageRequest, check_distinct,
};

mod distributed;
mod limits;
mod maintenance;
pub use distributed::{
    DistributedConfig, LAKE_DISTRIBUTED_MAX_WORKERS, LAKE_DISTRIBUTED_TASK_MB,
    LAKE_DISTRIBUTED_THRESHOLD_MB, LAKE_KUBERNETES_DIR, LAKE_WORKER_ADDR, LAKE_WORKER_CA_FILE,
    LAKE_WORKER_CERT_FILE, LAKE_WORKER_KEY_FILE, LAKE_WORKER_NAME, LAKE_WORKERS,
    Peers as WorkerPeers,
};
pub use limits::Limits;
pub use maintenance::{MAINTENANCE_ROLE, MaintenanceConfig};

pub const LAKE_ROLE: &str = "LAKE_ROLE";
pub const LAKE_WAREHOUSE: &str = "LAKE_WAREHOUSE";
pub const LAKE_STAGE: &str = "LAKE_STAGE";
pub const LAKE_MANIFEST_DYNAMODB_TABLE: &str = "LAKE_MANIFEST_DYNAMODB_TABLE";
/// Metadata only: the query role's configuration never contains it.
pub const LAKE_REGISTRY_DYNAMODB_TABLE: &str = "LAKE_REGISTRY_DYNAMODB_TABLE";
pub const LAKE_CLUSTER_ID: &str = "LAKE_CLUSTER_ID";
pub const LAKE_FLIGHT_ADDR: &str = "LAKE_FLIGHT_ADDR";
pub const LAKE_METADATA_ENDPOINT: &str = "LAKE_METADATA_ENDPOINT";
pub const LAKE_AWS_REGION: &str = "LAKE_AWS_REGION";
pub const LAKE_DYNAMODB_ENDPOINT: &str = "LAKE_DYNAMODB_ENDPOINT";
pub const LAKE_S3_ENDPOINT: &str = "LAKE_S3_ENDPOINT";
/// A file of accepted bearer tokens (a mounted Secret). `lake serve` refuses to start without it
/// unless `LAKE_AUTH=none` says that serving without authentication is intended.
pub const LAKE_TOKEN_FILE: &str = "LAKE_TOKEN_FILE";
/// `none`: serve without authentication (a warning at start); the only value.
pub const LAKE_AUTH: &str = "LAKE_AUTH";
/// PEM certificate chain and private key for TLS; both or neither.
pub const LAKE_TLS_CERT_FILE: &str = "LAKE_TLS_CERT_FILE";
pub const LAKE_TLS_KEY_FILE: &str = "LAKE_TLS_KEY_FILE";

/// Resource limits (each optional; the runtime documents and applies its defaults).
pub const LAKE_MEMORY_LIMIT_MB: &str = "LAKE_MEMORY_LIMIT_MB";
pub const LAKE_QUERY_MEMORY_LIMIT_MB: &str = "LAKE_QUERY_MEMORY_LIMIT_MB";
pub const LAKE_QUERY_TIMEOUT_SECONDS: &str = "LAKE_QUERY_TIMEOUT_SECONDS";
pub const LAKE_MAX_CONCURRENT_QUERIES: &str = "LAKE_MAX_CONCURRENT_QUERIES";
/// Where queries spill (a directory the runtime creates if missing; the system temp directory if
/// unset), and how much they may spill there together.
pub const LAKE_SPILL_DIR: &str = "LAKE_SPILL_DIR";
pub const LAKE_SPILL_LIMIT_MB: &str = "LAKE_SPILL_LIMIT_MB";

/// Every variable of the contract.
pub const ALL_VARS: [&str; 31] = [
    LAKE_ROLE,
    LAKE_WAREHOUSE,
    LAKE_STAGE,
    LAKE_MANIFEST_DYNAMODB_TABLE,
    LAKE_REGISTRY_DYNAMODB_TABLE,
    LAKE_CLUSTER_ID,
    LAKE_FLIGHT_ADDR,
    LAKE_METADATA_ENDPOINT,
    LAKE_AWS_REGION,
    LAKE_DYNAMODB_ENDPOINT,
    LAKE_S3_ENDPOINT,
    LAKE_TOKEN_FILE,
    LAKE_AUTH,
    LAKE_TLS_CERT_FILE,
    LAKE_TLS_KEY_FILE,
    LAKE_MEMORY_LIMIT_MB,
    LAKE_QUERY_MEMORY_LIMIT_MB,
    LAKE_QUERY_TIMEOUT_SECONDS,
    LAKE_MAX_CONCURRENT_QUERIES,
    LAKE_SPILL_DIR,
    LAKE_SPILL_LIMIT_MB,
    LAKE_WORKER_ADDR,
    LAKE_WORKER_CERT_FILE,
    LAKE_WORKER_KEY_FILE,
    LAKE_WORKER_CA_FILE,
    LAKE_WORKER_NAME,
    LAKE_WORKERS,
    LAKE_KUBERNETES_DIR,
    LAKE_DISTRIBUTED_THRESHOLD_MB,
    LAKE_DISTRIBUTED_MAX_WORKERS,
    LAKE_DISTRIBUTED_TASK_MB,
];

/// The port each role listens on unless `LAKE_FLIGHT_ADDR` says otherwise.
pub fn default_port(role: Role) -> u16 {
    match role {
        Role::Query => 8815,
        Role::Metadata => 8816,
    }
}

/// A runtime process's validated configuration.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RuntimeConfig {
    pub plan: RolePlan,
    /// The LakeCluster uid the markers must name; a local lake keeps its own id on disk instead.
    pub cluster_id: Option<String>,
    pub flight_addr: SocketAddr,
    /// Where query tells clients to send writes.
    pub metadata_endpoint: Option<String>,
    /// How clients authenticate.
    pub auth: Auth,
    /// (certificate chain, private key) PEM files; `None`: plaintext gRPC.
    pub tls: Option<(String, String)>,
    pub limits: Limits,
    /// Where queries spill; `None`: the system temp directory.
    pub spill_dir: Option<String>,
    /// Query only: the worker port and peers of distributed query; `None`: every statement
    /// runs on this process alone.
    pub distributed: Option<DistributedConfig>,
}

/// How a runtime process authenticates its clients.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum Auth {
    /// Bearer tokens listed in this file (`LAKE_TOKEN_FILE`).
    Tokens(String),
    /// None at all, asked for explicitly (`LAKE_AUTH=none`).
    Disabled,
    /// Neither was configured: `lake serve` refuses to start.
    Unconfigured,
}

/// A configuration read from the environment, plus the `LAKE_*` names it did not recognise
/// (likely typos, worth a warning).
#[derive(Debug)]
pub struct ParsedConfig {
    pub config: RuntimeConfig,
    pub unknown: Vec<String>,
}

const WAREHOUSE_FIELDS: StorageFields = StorageFields {
    bucket: LAKE_WAREHOUSE,
    prefix: LAKE_WAREHOUSE,
    region: LAKE_AWS_REGION,
    endpoint: LAKE_S3_ENDPOINT,
    path: LAKE_WAREHOUSE,
};

impl RuntimeConfig {
    /// The configuration the operator renders for `role` of `plan`.
    pub fn for_role(
        plan: &AuthorityPlan,
        role: Role,
        cluster_id: Option<String>,
        flight_addr: SocketAddr,
        metadata_endpoint: Option<String>,
    ) -> Self {
        let plan = match role {
            Role::Query => RolePlan::Query(plan.query()),
            Role::Metadata => RolePlan::Metadata(plan.metadata()),
        };
        Self {
            plan,
            cluster_id,
            flight_addr,
            metadata_endpoint,
            auth: Auth::Unconfigured,
            tls: None,
            limits: Limits::default(),
            spill_dir: None,
            distributed: None,
        }
    }

    /// The environment variables of this configuration, sorted by name.
    pub fn to_vars(&self) -> BTreeMap<&'static str, String> {
        let mut vars = BTreeMap::new();
        let (warehouse, stage, registry, manifests, aws) = match &self.plan {
            RolePlan::Query(q) => (q.warehouse(), q.stage(), None, q.manifests(), q.aws()),
            RolePlan::Metadata(m) => (
                m.warehouse(),
                m.stage(),
                Some(m.registry()),
                m.manifests(),
                m.aws(),
            ),
        };
        vars.insert(LAKE_ROLE, self.plan.role().to_string());
        vars.insert(LAKE_WAREHOUSE, warehouse.to_owned());
        vars.insert(LAKE_STAGE, stage.to_owned());
        if let ManifestStore::DynamoDb { table } = manifests {
            vars.insert(LAKE_MANIFEST_DYNAMODB_TABLE, table.to_string());
        }
        if let Some(RegistryStore::DynamoDb { table }) = registry {
            vars.insert(LAKE_REGISTRY_DYNAMODB_TABLE, table.to_string());
        }
        if let Some(aws) = aws {
            vars.insert(LAKE_AWS_REGION, aws.region.clone());
            if let Some(e) = &aws.dynamodb_endpoint {
                vars.insert(LAKE_DYNAMODB_ENDPOINT, e.clone());
            }
            if let Some(e) = &aws.s3_endpoint {
                vars.insert(LAKE_S3_ENDPOINT, e.clone());
            }
        }
        if let Some(id) = &self.cluster_id {
            vars.insert(LAKE_CLUSTER_ID, id.clone());
        }
        vars.insert(LAKE_FLIGHT_ADDR, self.flight_addr.to_string());
        if let Some(e) = &self.metadata_endpoint {
            vars.insert(LAKE_METADATA_ENDPOINT, e.clone());
        }
        match &self.auth {
            Auth::Tokens(f) => {
                vars.insert(LAKE_TOKEN_FILE, f.clone());
            }
            Auth::Disabled => {
                vars.insert(LAKE_AUTH, "none".to_owned());
            }
            Auth::Unconfigured => {}
        }
        if let Some(dir) = &self.spill_dir {
            vars.insert(LAKE_SPILL_DIR, dir.clone());
        }
        if let Some((cert, key)) = &self.tls {
            vars.insert(LAKE_TLS_CERT_FILE, cert.clone());
            vars.insert(LAKE_TLS_KEY_FILE, key.clone());
        }
        for (name, value) in Limits::VARS.into_iter().zip(self.limits.fields()) {
            if let Some(value) = value {
                vars.insert(name, value.to_string());
            }
        }
        if let Some(distributed) = &self.distributed {
            vars.extend(distributed.vars());
        }
        vars
    }

    /// Reads a configuration from `(name, value)` pairs such as `std::env::vars()`. Variables
    /// that do not start with `LAKE_` are ignored; every problem is reported at once.
    pub fn from_vars<I, K, V>(vars: I) -> Result<ParsedConfig, PlanErrors>
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        let (env, unknown) = known_vars(vars);
        let get = |name: &str| env.get(name).map(String::as_str).filter(|v| !v.is_empty());
        let mut errors = Vec::new();

        let role = match get(LAKE_ROLE).map(str::parse::<Role>) {
            Some(Ok(role)) => Some(role),
            Some(Err(reason)) => {
                errors.push(invalid(
                    LAKE_ROLE,
                    get(LAKE_ROLE).unwrap_or_default(),
                    &reason,
                ));
                None
            }
            None => {
                errors.push(missing(LAKE_ROLE, "query or metadata"));
                None
            }
        };

        let warehouse = match get(LAKE_WAREHOUSE) {
            None => {
                errors.push(missing(
                    LAKE_WAREHOUSE,
                    "an s3://bucket/prefix URL or a local path",
                ));
                None
            }
            Some(w) => storage::validate(
                &warehouse_request(w, get(LAKE_AWS_REGION), get(LAKE_S3_ENDPOINT)),
                &WAREHOUSE_FIELDS,
                &mut errors,
            ),
        };

        let manifest_name = get(LAKE_MANIFEST_DYNAMODB_TABLE);
        let registry_name = get(LAKE_REGISTRY_DYNAMODB_TABLE);
        if role == Some(Role::Query) && registry_name.is_some() {
            errors.push(PlanError::NotAllowed {
                field: LAKE_REGISTRY_DYNAMODB_TABLE.to_owned(),
                reason: "the query role never receives the registry table".to_owned(),
            });
        }

        // Branch on what was asked for, not on whether it was valid, to report everything at once.
        let wants_s3 = get(LAKE_WAREHOUSE).is_some_and(|w| w.starts_with("s3://"));
        let local_dir = get(LAKE_WAREHOUSE).filter(|_| !wants_s3).map(Path::new);
        let mut stores = None;
        match local_dir {
            None if wants_s3 => {
                let manifest = table(
                    manifest_name,
                    LAKE_MANIFEST_DYNAMODB_TABLE,
                    ManifestTableName::parse,
                    &mut errors,
                );
                let registry = match role {
                    Some(Role::Metadata) => table(
                        registry_name,
                        LAKE_REGISTRY_DYNAMODB_TABLE,
                        RegistryTableName::parse,
                        &mut errors,
                    ),
                    _ => None,
                };
                if let (Some(r), Some(m)) = (&registry, &manifest)
                    && let Err(e) = check_distinct(
                        r,
                        m,
                        LAKE_REGISTRY_DYNAMODB_TABLE,
                        LAKE_MANIFEST_DYNAMODB_TABLE,
                    )
                {
                    errors.push(e);
                }
                if get(LAKE_CLUSTER_ID).is_none() {
                    errors.push(missing(
                        LAKE_CLUSTER_ID,
                        "the manifest table's marker must name this cluster",
                    ));
                }
                stores = manifest.map(|table| {
                    (
                        registry.map(|table| RegistryStore::DynamoDb { table }),
                        ManifestStore::DynamoDb { table },
                    )
                });
            }
            Some(path) => {
                for (name, value) in [
                    (LAKE_MANIFEST_DYNAMODB_TABLE, manifest_name),
                    (LAKE_REGISTRY_DYNAMODB_TABLE, registry_name),
                ] {
                    if value.is_some() {
                        errors.push(PlanError::NotAllowed {
                            field: name.to_owned(),
                            reason: "a local warehouse keeps its stores on disk".to_owned(),
                        });
                    }
                }
                let meta = path.join(LOCAL_META_DIR);
                stores = Some((
                    Some(RegistryStore::Embedded {
                        file: meta.join(LOCAL_REGISTRY_FILE),
                    }),
                    ManifestStore::Embedded {
                        file: meta.join(LOCAL_MANIFEST_FILE),
                    },
                ));
            }
            None => {}
        }

        let flight_addr = match get(LAKE_FLIGHT_ADDR) {
            None => role.map(|r| SocketAddr::from(([0, 0, 0, 0], default_port(r)))),
            Some(a) => a
                .parse()
                .map_err(|_| {
                    errors.push(invalid(
                        LAKE_FLIGHT_ADDR,
                        a,
                        "must be an address such as 0.0.0.0:8815",
                    ))
                })
                .ok(),
        };

        let tls = match (get(LAKE_TLS_CERT_FILE), get(LAKE_TLS_KEY_FILE)) {
            (Some(cert), Some(key)) => Some((cert.to_owned(), key.to_owned())),
            (None, None) => None,
            (Some(_), None) => {
                errors.push(missing(
                    LAKE_TLS_KEY_FILE,
                    "TLS needs the key with the certificate",
                ));
                None
            }
            (None, Some(_)) => {
                errors.push(missing(
                    LAKE_TLS_CERT_FILE,
                    "TLS needs the certificate with the key",
                ));
                None
            }
        };

        let auth = match (get(LAKE_TOKEN_FILE), get(LAKE_AUTH)) {
            (Some(file), None) => Auth::Tokens(file.to_owned()),
            (None, None) => Auth::Unconfigured,
            (None, Some("none")) => Auth::Disabled,
            (Some(_), Some("none")) => {
                errors.push(PlanError::NotAllowed {
                    field: LAKE_AUTH.to_owned(),
                    reason: "LAKE_AUTH=none and LAKE_TOKEN_FILE contradict each other; set one"
                        .to_owned(),
                });
                Auth::Unconfigured
            }
            (_, Some(other)) => {
                errors.push(invalid(
                    LAKE_AUTH,
                    other,
                    "the only value is none (serve without authentication); set LAKE_TOKEN_FILE \
                     for bearer tokens",
                ));
                Auth::Unconfigured
            }
        };

        let limits = Limits::from_values(Limits::VARS.map(|name| {
            let value = get(name)?;
            match value.parse::<u64>() {
                Ok(n) if n > 0 => Some(n),
                _ => {
                    errors.push(invalid(name, value, "must be a whole number above 0"));
                    None
                }
            }
        }));

        let distributed = DistributedConfig::read(&get, role, &mut errors);

        let (Some(role), Some(warehouse), Some((registry, manifests)), Some(flight_addr)) =
            (role, warehouse, stores, flight_addr)
        else {
            return Err(PlanErrors(errors));
        };
        if !errors.is_empty() {
            return Err(PlanErrors(errors));
        }

        let (root, aws) = match &warehouse {
            Storage::S3(s3) => (
                s3.url(""),
                Some(aws_target(s3, get(LAKE_DYNAMODB_ENDPOINT))),
            ),
            Storage::Local { path } => (path.display().to_string(), None),
        };
        let stage = get(LAKE_STAGE).map_or_else(|| join(&root, STAGE_DIR), str::to_owned);
        let plan = match (role, registry) {
            (Role::Query, _) => {
                RolePlan::Query(QueryConnectionPlan::new(root, stage, manifests, aws))
            }
            (Role::Metadata, Some(registry)) => RolePlan::Metadata(MetadataConnectionPlan::new(
                root, stage, registry, manifests, aws,
            )),
            // Unreachable in practice: a metadata role without a registry pushed an error above.
            (Role::Metadata, None) => {
                return Err(PlanErrors(vec![missing(
                    LAKE_REGISTRY_DYNAMODB_TABLE,
                    "the metadata role needs the registry table",
                )]));
            }
        };
        Ok(ParsedConfig {
            config: RuntimeConfig {
                plan,
                cluster_id: get(LAKE_CLUSTER_ID).map(str::to_owned),
                flight_addr,
                metadata_endpoint: get(LAKE_METADATA_ENDPOINT).map(str::to_owned),
                auth,
                tls,
                limits,
                spill_dir: get(LAKE_SPILL_DIR).map(str::to_owned),
                distributed,
            },
            unknown,
        })
    }
}

/// The contract's variables among `vars`, and the `LAKE_*` names it does not know.
fn known_vars<I, K, V>(vars: I) -> (BTreeMap<&'static str, String>, Vec<String>)
where
    I: IntoIterator<Item = (K, V)>,
    K: Into<String>,
    V: Into<String>,
{
    let mut env = BTreeMap::new();
    let mut unknown = Vec::new();
    for (k, v) in vars {
        let k = k.into();
        if let Some(known) = ALL_VARS.iter().find(|n| **n == k) {
            env.insert(*known, v.into());
        } else if k.starts_with("LAKE_") {
            unknown.push(k);
        }
    }
    (env, unknown)
}

/// Where the AWS clients of an `s3` warehouse connect.
fn aws_target(s3: &S3Location, dynamodb_endpoint: Option<&str>) -> AwsTarget {
    AwsTarget {
        region: s3.region.clone(),
        dynamodb_endpoint: dynamodb_endpoint.map(str::to_owned),
        s3_endpoint: s3.endpoint.clone(),
    }
}

fn join(root: &str, child: &str) -> String {
    if root.starts_with("s3://") {
        format!("{}/{child}", root.trim_end_matches('/'))
    } else {
        Path::new(root).join(child).display().to_string()
    }
}

fn warehouse_request(url: &str, region: Option<&str>, endpoint: Option<&str>) -> StorageRequest {
    match url.strip_prefix("s3://") {
        Some(rest) => {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            StorageRequest::S3 {
                bucket: bucket.to_owned(),
                prefix: prefix.to_owned(),
                region: region.unwrap_or_default().to_owned(),
                endpoint: endpoint.map(str::to_owned),
            }
        }
        None => StorageRequest::Local {
            path: url.to_owned(),
        },
    }
}

fn table<T>(
    value: Option<&str>,
    field: &str,
    parse: fn(&str, &str) -> Result<T, crate::plan::TableNameError>,
    errors: &mut Vec<PlanError>,
) -> Option<T> {
    match value {
        None => {
            errors.push(missing(field, "required with an s3:// warehouse"));
            None
        }
        Some(v) => parse(field, v).map_err(|e| errors.push(e.into())).ok(),
    }
}

fn missing(field: &str, reason: &str) -> PlanError {
    PlanError::Missing {
        field: field.to_owned(),
        reason: reason.to_owned(),
    }
}

fn invalid(field: &str, value: &str, reason: &str) -> PlanError {
    PlanError::InvalidField {
        field: field.to_owned(),
        value: value.to_owned(),
        reason: reason.to_owned(),
    }
}

#[cfg(test)]
mod tests;
