//! Distributed query on a query process (`LAKE_WORKER_*`, `LAKE_WORKERS`,
//! `LAKE_DISTRIBUTED_*`): the worker port it serves, who it admits, where its peers are, and
//! when a statement is spread over them (docs/guides/distributed.md).

use std::net::SocketAddr;

use super::{LAKE_ROLE, invalid, missing};
use crate::plan::{PlanError, Role};

/// Where this process serves the worker port (other query processes send it plan stages).
pub const LAKE_WORKER_ADDR: &str = "LAKE_WORKER_ADDR";
/// This process's certificate and key on the worker port (served and presented), and the CA
/// whose certificates it admits: the cluster's own processes.
pub const LAKE_WORKER_CERT_FILE: &str = "LAKE_WORKER_CERT_FILE";
pub const LAKE_WORKER_KEY_FILE: &str = "LAKE_WORKER_KEY_FILE";
pub const LAKE_WORKER_CA_FILE: &str = "LAKE_WORKER_CA_FILE";
/// The name worker certificates are issued for (checked when connecting to a peer).
pub const LAKE_WORKER_NAME: &str = "LAKE_WORKER_NAME";
/// The peers: `https://host:port` URLs separated by commas, or `dns:<name>:<port>` (every
/// address the name resolves to, looked up again every few seconds: a headless Service).
pub const LAKE_WORKERS: &str = "LAKE_WORKERS";
/// A statement whose tables hold fewer MiB runs on the process that received it.
pub const LAKE_DISTRIBUTED_THRESHOLD_MB: &str = "LAKE_DISTRIBUTED_THRESHOLD_MB";
/// The most workers one statement uses.
pub const LAKE_DISTRIBUTED_MAX_WORKERS: &str = "LAKE_DISTRIBUTED_MAX_WORKERS";
/// MiB of data files one scan task reads, about.
pub const LAKE_DISTRIBUTED_TASK_MB: &str = "LAKE_DISTRIBUTED_TASK_MB";

pub(super) const VARS: [&str; 9] = [
    LAKE_WORKER_ADDR,
    LAKE_WORKER_CERT_FILE,
    LAKE_WORKER_KEY_FILE,
    LAKE_WORKER_CA_FILE,
    LAKE_WORKER_NAME,
    LAKE_WORKERS,
    LAKE_DISTRIBUTED_THRESHOLD_MB,
    LAKE_DISTRIBUTED_MAX_WORKERS,
    LAKE_DISTRIBUTED_TASK_MB,
];

/// Where a query process finds its peers.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum Peers {
    Urls(Vec<String>),
    /// Every address `name` resolves to, on `port`.
    Dns {
        name: String,
        port: u16,
    },
}

/// A query process's distributed query configuration.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DistributedConfig {
    pub worker_addr: SocketAddr,
    pub cert_file: String,
    pub key_file: String,
    pub ca_file: String,
    pub worker_name: String,
    pub peers: Peers,
    pub threshold_mb: Option<u64>,
    pub max_workers: Option<u64>,
    pub task_mb: Option<u64>,
}

impl DistributedConfig {
    /// Its variables, as `to_vars` writes them.
    pub(super) fn vars(&self) -> Vec<(&'static str, String)> {
        let mut vars = vec![
            (LAKE_WORKER_ADDR, self.worker_addr.to_string()),
            (LAKE_WORKER_CERT_FILE, self.cert_file.clone()),
            (LAKE_WORKER_KEY_FILE, self.key_file.clone()),
            (LAKE_WORKER_CA_FILE, self.ca_file.clone()),
            (LAKE_WORKER_NAME, self.worker_name.clone()),
            (
                LAKE_WORKERS,
                match &self.peers {
                    Peers::Urls(urls) => urls.join(","),
                    Peers::Dns { name, port } => format!("dns:{name}:{port}"),
                },
            ),
        ];
        for (name, value) in [
            (LAKE_DISTRIBUTED_THRESHOLD_MB, self.threshold_mb),
            (LAKE_DISTRIBUTED_MAX_WORKERS, self.max_workers),
            (LAKE_DISTRIBUTED_TASK_MB, self.task_mb),
        ] {
            if let Some(value) = value {
                vars.push((name, value.to_string()));
            }
        }
        vars
    }

    /// The configuration `get` holds, if any of its variables is set; errors into `errors`.
    pub(super) fn read<'a>(
        get: &dyn Fn(&str) -> Option<&'a str>,
        role: Option<Role>,
        errors: &mut Vec<PlanError>,
    ) -> Option<Self> {
        let set: Vec<&str> = VARS.into_iter().filter(|n| get(n).is_some()).collect();
        let first = *set.first()?;
        if role == Some(Role::Metadata) {
            errors.push(PlanError::NotAllowed {
                field: first.to_owned(),
                reason: format!(
                    "distributed query is the query role's ({LAKE_ROLE}=query); metadata \
                     runs no statement on workers"
                ),
            });
            return None;
        }
        let required = |name: &str, what: &str, errors: &mut Vec<PlanError>| {
            let value = get(name);
            if value.is_none() {
                errors.push(missing(
                    name,
                    &format!("distributed query ({first} is set) needs {what}"),
                ));
            }
            value
        };
        let addr = required(LAKE_WORKER_ADDR, "the worker port's address", errors).and_then(|a| {
            a.parse::<SocketAddr>()
                .map_err(|_| {
                    errors.push(invalid(
                        LAKE_WORKER_ADDR,
                        a,
                        "must be an address such as 0.0.0.0:8817",
                    ))
                })
                .ok()
        });
        let cert = required(LAKE_WORKER_CERT_FILE, "the worker certificate", errors);
        let key = required(LAKE_WORKER_KEY_FILE, "the worker key", errors);
        let ca = required(LAKE_WORKER_CA_FILE, "the cluster CA", errors);
        let name = required(LAKE_WORKER_NAME, "the worker certificates' name", errors);
        let peers = required(LAKE_WORKERS, "its peers", errors).and_then(|p| peers(p, errors));
        let number = |name: &str, errors: &mut Vec<PlanError>| {
            let value = get(name)?;
            match value.parse::<u64>() {
                Ok(n) => Some(n),
                Err(_) => {
                    errors.push(invalid(name, value, "must be a whole number"));
                    None
                }
            }
        };
        let threshold_mb = number(LAKE_DISTRIBUTED_THRESHOLD_MB, errors);
        let max_workers = number(LAKE_DISTRIBUTED_MAX_WORKERS, errors);
        if max_workers == Some(0) {
            errors.push(invalid(
                LAKE_DISTRIBUTED_MAX_WORKERS,
                "0",
                "must be above 0",
            ));
        }
        let task_mb = number(LAKE_DISTRIBUTED_TASK_MB, errors);
        Some(Self {
            worker_addr: addr?,
            cert_file: cert?.to_owned(),
            key_file: key?.to_owned(),
            ca_file: ca?.to_owned(),
            worker_name: name?.to_owned(),
            peers: peers?,
            threshold_mb,
            max_workers,
            task_mb,
        })
    }
}

fn peers(value: &str, errors: &mut Vec<PlanError>) -> Option<Peers> {
    if let Some(rest) = value.strip_prefix("dns:") {
        let parsed = rest
            .rsplit_once(':')
            .and_then(|(name, port)| Some((name, port.parse::<u16>().ok()?)))
            .filter(|(name, _)| !name.is_empty());
        return match parsed {
            Some((name, port)) => Some(Peers::Dns {
                name: name.to_owned(),
                port,
            }),
            None => {
                errors.push(invalid(LAKE_WORKERS, value, "must be dns:<name>:<port>"));
                None
            }
        };
    }
    let urls: Vec<String> = value.split(',').map(|u| u.trim().to_owned()).collect();
    if let Some(bad) = urls
        .iter()
        .find(|u| !u.starts_with("https://") || u.len() <= "https://".len())
    {
        errors.push(invalid(
            LAKE_WORKERS,
            bad,
            "peers are https:// URLs (the worker port is mutual TLS), separated by commas, \
             or dns:<name>:<port>",
        ));
        return None;
    }
    Some(Peers::Urls(urls))
}
