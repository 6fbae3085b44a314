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
/// The peers: `https://host:port` URLs separated by commas, `dns:<name>:<port>` (every
/// address the name resolves to, looked up again every few seconds), or from the Kubernetes
/// API: `endpointslices:<service>:<port>` (the ready endpoints of a headless Service, watched)
/// or `pods:<port>:<label selector>` (the ready pods the selector names, watched).
pub const LAKE_WORKERS: &str = "LAKE_WORKERS";
/// Where the Kubernetes API identity of a query pod is (`token`, `ca.crt`, `namespace`: a
/// projected volume), for peers found through the API; its address is the kubelet's
/// `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT`.
pub const LAKE_KUBERNETES_DIR: &str = "LAKE_KUBERNETES_DIR";
/// A statement whose tables hold fewer MiB runs on the process that received it.
pub const LAKE_DISTRIBUTED_THRESHOLD_MB: &str = "LAKE_DISTRIBUTED_THRESHOLD_MB";
/// The most workers one statement uses.
pub const LAKE_DISTRIBUTED_MAX_WORKERS: &str = "LAKE_DISTRIBUTED_MAX_WORKERS";
/// MiB of data files one scan task reads, about.
pub const LAKE_DISTRIBUTED_TASK_MB: &str = "LAKE_DISTRIBUTED_TASK_MB";

pub(super) const VARS: [&str; 10] = [
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

/// Where a query process finds its peers.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum Peers {
    Urls(Vec<String>),
    /// Every address `name` resolves to, on `port`.
    Dns {
        name: String,
        port: u16,
    },
    /// The ready, not terminating endpoints of the Service `service` (its EndpointSlices).
    EndpointSlices {
        service: String,
        port: u16,
    },
    /// The ready pods `selector` (a label selector) names, not being deleted.
    Pods {
        selector: String,
        port: u16,
    },
}

impl Peers {
    /// Whether they are found through the Kubernetes API.
    pub fn from_kubernetes(&self) -> bool {
        matches!(self, Self::EndpointSlices { .. } | Self::Pods { .. })
    }
}

impl std::fmt::Display for Peers {
    /// As `LAKE_WORKERS` spells them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Urls(urls) => f.write_str(&urls.join(",")),
            Self::Dns { name, port } => write!(f, "dns:{name}:{port}"),
            Self::EndpointSlices { service, port } => write!(f, "endpointslices:{service}:{port}"),
            Self::Pods { selector, port } => write!(f, "pods:{port}:{selector}"),
        }
    }
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
    /// The Kubernetes API identity's directory (peers found through the API only).
    pub kubernetes_dir: Option<String>,
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
            (LAKE_WORKERS, self.peers.to_string()),
        ];
        if let Some(dir) = &self.kubernetes_dir {
            vars.push((LAKE_KUBERNETES_DIR, dir.clone()));
        }
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
        let kubernetes_dir = get(LAKE_KUBERNETES_DIR).map(str::to_owned);
        match (&peers, &kubernetes_dir) {
            (Some(p), None) if p.from_kubernetes() => errors.push(missing(
                LAKE_KUBERNETES_DIR,
                &format!("{LAKE_WORKERS}={p} finds peers through the Kubernetes API"),
            )),
            (Some(p), Some(_)) if !p.from_kubernetes() => errors.push(PlanError::NotAllowed {
                field: LAKE_KUBERNETES_DIR.to_owned(),
                reason: format!("{LAKE_WORKERS}={p} does not use the Kubernetes API"),
            }),
            _ => {}
        }
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
            kubernetes_dir,
            threshold_mb,
            max_workers,
            task_mb,
        })
    }
}

fn peers(value: &str, errors: &mut Vec<PlanError>) -> Option<Peers> {
    if let Some(rest) = value.strip_prefix("endpointslices:") {
        let parsed = rest
            .rsplit_once(':')
            .and_then(|(service, port)| Some((service, port.parse::<u16>().ok()?)))
            .filter(|(service, _)| is_dns_label(service));
        if parsed.is_none() {
            errors.push(invalid(
                LAKE_WORKERS,
                value,
                "must be endpointslices:<service>:<port>, the Service a DNS label",
            ));
        }
        return parsed.map(|(service, port)| Peers::EndpointSlices {
            service: service.to_owned(),
            port,
        });
    }
    if let Some(rest) = value.strip_prefix("pods:") {
        let parsed = rest
            .split_once(':')
            .and_then(|(port, selector)| Some((port.parse::<u16>().ok()?, selector)))
            .filter(|(_, selector)| !selector.trim().is_empty());
        if parsed.is_none() {
            errors.push(invalid(
                LAKE_WORKERS,
                value,
                "must be pods:<port>:<label selector>, the selector not empty",
            ));
        }
        return parsed.map(|(port, selector)| Peers::Pods {
            selector: selector.to_owned(),
            port,
        });
    }
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
             dns:<name>:<port>, endpointslices:<service>:<port> or pods:<port>:<selector>",
        ));
        return None;
    }
    Some(Peers::Urls(urls))
}

/// A Service name: lowercase letters, digits and `-`, at most 63, starting with a letter.
fn is_dns_label(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}
