//! The worker side of distributed query in this binary (docs/guides/distributed.md): `lake
//! local --query-workers N` starts N query worker processes over the lake's data directory, so
//! one machine runs distributed query as a cluster does; `lake serve` with `LAKE_WORKER_*` makes
//! a query process a worker of its peers too.
//!
//! Each worker is this binary's hidden `worker` command: a pinned-version reader of the
//! warehouse (no manifest store, which the serving process holds) behind the worker port, over
//! mutual TLS with a CA made for this run. A worker stops when its parent does: it exits when
//! its standard input (a pipe from the parent) closes.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use lake_runtime::engine::{Engine, Warehouse};
use lake_runtime::flight::{
    self, Candidates, DistributedSettings, Distribution, Peers, WorkerIdentity, kubernetes,
    serve_worker,
};
use tokio::io::AsyncBufReadExt;
use tokio::process::{Child, Command};
use url::Url;

use crate::failure::{Failure, listen};

/// How long a worker may take to say where it listens.
const START_WAIT: Duration = Duration::from_secs(30);

/// How often the serving process checks which workers answer.
pub(crate) const WATCH_EVERY: Duration = Duration::from_secs(1);

/// The running workers of a local lake: stopped when this is dropped.
pub(crate) struct Workers {
    _children: Vec<Child>,
}

/// Starts `count` workers over the lake in `data` (with the serving process's `limits`), and
/// the distribution that spreads the query endpoint's large statements over them.
pub(crate) async fn start(
    data: &Path,
    count: usize,
    configured: &lake_common::config::Limits,
    settings: DistributedSettings,
) -> Result<(Workers, Distribution), Failure> {
    let identity = WorkerIdentity::ephemeral()?;
    let dir = data.join("_lake").join("worker-identity");
    identity.write_to(&dir)?;
    let mut children = Vec::with_capacity(count);
    let mut urls = Vec::with_capacity(count);
    for index in 0..count {
        let (child, url) = spawn(index, data, &dir, configured).await?;
        children.push(child);
        urls.push(url);
    }
    tracing::info!(workers = ?urls.iter().map(Url::as_str).collect::<Vec<_>>(), "query workers started");
    let distribution = Distribution::new(settings, Peers::fixed(urls.clone()), identity);
    distribution.watch(Candidates::Fixed(urls), WATCH_EVERY);
    Ok((
        Workers {
            _children: children,
        },
        distribution,
    ))
}

async fn spawn(
    index: usize,
    data: &Path,
    identity: &Path,
    configured: &lake_common::config::Limits,
) -> Result<(Child, Url), Failure> {
    let failed = |source| Failure::WorkerStart { index, source };
    let exe = std::env::current_exe().map_err(failed)?;
    let mut command = Command::new(exe);
    command
        .arg("worker")
        .arg("--data")
        .arg(data)
        .arg("--identity")
        .arg(identity)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    for (name, value) in [
        ("LAKE_MEMORY_LIMIT_MB", configured.memory_mb),
        ("LAKE_QUERY_MEMORY_LIMIT_MB", configured.query_memory_mb),
        (
            "LAKE_QUERY_TIMEOUT_SECONDS",
            configured.query_timeout_seconds,
        ),
        ("LAKE_SPILL_LIMIT_MB", configured.spill_mb),
    ] {
        if let Some(value) = value {
            command.env(name, value.to_string());
        }
    }
    let mut child = command.spawn().map_err(failed)?;
    let stdout = child.stdout.take().ok_or(Failure::WorkerSilent { index })?;
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let line = tokio::time::timeout(START_WAIT, lines.next_line())
        .await
        .map_err(|_| Failure::WorkerSilent { index })?
        .map_err(failed)?
        .ok_or(Failure::WorkerSilent { index })?;
    let url = line
        .strip_prefix("worker ")
        .and_then(|u| Url::parse(u).ok())
        .ok_or(Failure::WorkerSilent { index })?;
    Ok((child, url))
}

/// The hidden `lake worker` command: serves the worker port over the lake in `data` until its
/// standard input closes (its parent stopped) or a signal asks.
pub(crate) async fn run(
    data: &Path,
    identity: &Path,
    addr: SocketAddr,
    limits: flight::Limits,
) -> Result<(), Failure> {
    let plan = crate::local_plan(data)?;
    let engine = Engine::pinned(Warehouse::Local(plan.query().warehouse().into()));
    let identity = WorkerIdentity::from_dir(identity)?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(listen(addr))?;
    let bound = listener.local_addr().map_err(listen(addr))?;
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "worker https://{bound}").and_then(|()| out.flush());
    }
    std::thread::spawn(|| {
        // EOF (or an error): the parent is gone.
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
        std::process::exit(0);
    });
    let shutdown = flight::Shutdown::on_signals(Duration::from_secs(1));
    Ok(serve_worker(listener, &engine, identity, limits, shutdown).await?)
}

/// `lake serve` (query) with `LAKE_WORKER_*`: serves the worker port beside the Flight SQL
/// endpoint (with the process's own engine, pinned reads only) and spreads large statements over
/// the peers `LAKE_WORKERS` names — this process among them, as every query process is a worker.
pub(crate) async fn serve_cluster_worker(
    config: &lake_common::config::DistributedConfig,
    engine: &Engine,
    limits: &flight::Limits,
) -> Result<Distribution, Failure> {
    use lake_common::config::WorkerPeers;
    let identity = WorkerIdentity::from_files(
        Path::new(&config.cert_file),
        Path::new(&config.key_file),
        Path::new(&config.ca_file),
        &config.worker_name,
    )?;
    let listener = tokio::net::TcpListener::bind(config.worker_addr)
        .await
        .map_err(listen(config.worker_addr))?;
    tracing::info!(addr = %config.worker_addr, "serving the worker port");
    let worker = {
        let (engine, identity, limits) = (engine.clone(), identity.clone(), limits.clone());
        async move {
            let shutdown = flight::Shutdown::on_signals(crate::SERVE_GRACE);
            if let Err(e) = serve_worker(listener, &engine, identity, limits, shutdown).await {
                tracing::error!(error = %e, "the worker port stopped");
            }
        }
    };
    tokio::spawn(worker);
    const MIB: u64 = 1024 * 1024;
    let defaults = DistributedSettings::default();
    let settings = DistributedSettings {
        threshold_bytes: config
            .threshold_mb
            .map_or(defaults.threshold_bytes, |mb| mb.saturating_mul(MIB)),
        max_workers: config
            .max_workers
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(defaults.max_workers),
        bytes_per_task: config
            .task_mb
            .map_or(defaults.bytes_per_task, |mb| mb.saturating_mul(MIB)),
    };
    let candidates = match &config.peers {
        WorkerPeers::Urls(urls) => {
            Candidates::Fixed(urls.iter().filter_map(|u| Url::parse(u).ok()).collect())
        }
        WorkerPeers::Dns { name, port } => Candidates::Dns {
            name: name.clone(),
            port: *port,
        },
        peers @ (WorkerPeers::EndpointSlices { .. } | WorkerPeers::Pods { .. }) => {
            // The contract requires the directory with these peers.
            let dir = config.kubernetes_dir.as_deref().unwrap_or_default();
            let client = kubernetes::client(Path::new(dir))?;
            Candidates::Kubernetes(kubernetes::watch(client, peers)?)
        }
    };
    let distribution = Distribution::new(settings, Peers::fixed(Vec::new()), identity);
    distribution.watch(candidates, WATCH_EVERY);
    Ok(distribution)
}
