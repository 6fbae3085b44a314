//! `lake`: the shared runtime of the query and metadata roles.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use lake_common::config::{Auth, MaintenanceConfig, RuntimeConfig};
use lake_common::plan::{AuthorityPlan, AuthorityRequest, PlanFields, RolePlan, StorageRequest};
use lake_runtime::aws::ConnectOptions;
use lake_runtime::context::{MaintenanceContext, MetadataContext, QueryContext};
use lake_runtime::flight::{self, Role, Tls, Tokens};
use lake_runtime::sql_client::Format;
use lake_runtime::stage_cli::StageCommand;

mod failure;
mod local_workers;

use failure::{Failure, listen};

#[derive(Parser)]
#[command(
    name = "lake",
    version,
    about = "The lake runtime: Arrow Flight SQL over Lance"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// How maintenance keeps and compacts (`lake maintain`, `lake local --maintain-every-minutes`).
#[derive(clap::Args, Debug, Clone, Copy)]
struct MaintainArgs {
    /// Versions younger than this stay, for time travel (seconds; default a week).
    #[arg(long, default_value_t = lake_runtime::maintain::DEFAULT_RETENTION.as_secs())]
    retention_seconds: u64,
    /// A version stays this long after a newer one replaced it, so queries still reading it
    /// finish (seconds; keep it above the query timeout).
    #[arg(long, default_value_t = lake_runtime::maintain::DEFAULT_GRACE.as_secs())]
    grace_seconds: u64,
    /// Compaction merges smaller fragments up to this many rows.
    #[arg(long, default_value_t = lake_runtime::maintain::DEFAULT_TARGET_ROWS)]
    target_rows_per_fragment: usize,
    /// An index is brought up to date once this many rows are not in it yet.
    #[arg(long, default_value_t = lake_runtime::maintain::DEFAULT_INDEX_UNINDEXED_ROWS)]
    index_unindexed_rows: u64,
}

impl MaintainArgs {
    fn options(self) -> lake_runtime::maintain::Options {
        lake_runtime::maintain::Options {
            retention: lake_runtime::maintain::Retention {
                keep: Duration::from_secs(self.retention_seconds),
                grace: Duration::from_secs(self.grace_seconds),
            },
            target_rows_per_fragment: self.target_rows_per_fragment.max(1),
            index_unindexed_rows: self.index_unindexed_rows,
        }
    }
}

/// The limits of one process's statements (`lake local`'s endpoints, and its workers).
#[derive(clap::Args)]
struct LimitArgs {
    /// Memory all queries of one endpoint may hold together, MiB [default: 1024].
    #[arg(long, env = "LAKE_MEMORY_LIMIT_MB")]
    memory_limit_mb: Option<u64>,
    /// Memory one query may hold, MiB [default: 512].
    #[arg(long, env = "LAKE_QUERY_MEMORY_LIMIT_MB")]
    query_memory_limit_mb: Option<u64>,
    /// How long one query may run, seconds [default: 600].
    #[arg(long, env = "LAKE_QUERY_TIMEOUT_SECONDS")]
    query_timeout_seconds: Option<u64>,
    /// Queries each endpoint runs at once [default: 32].
    #[arg(long, env = "LAKE_MAX_CONCURRENT_QUERIES")]
    max_concurrent_queries: Option<u64>,
    /// Disk all queries of one endpoint may spill to together, MiB [default: 8192].
    #[arg(long, env = "LAKE_SPILL_LIMIT_MB")]
    spill_limit_mb: Option<u64>,
}

impl LimitArgs {
    fn configured(&self) -> lake_common::config::Limits {
        lake_common::config::Limits {
            memory_mb: self.memory_limit_mb,
            query_memory_mb: self.query_memory_limit_mb,
            query_timeout_seconds: self.query_timeout_seconds,
            max_concurrent_queries: self.max_concurrent_queries,
            spill_mb: self.spill_limit_mb,
        }
    }
}

/// When the query endpoint spreads a statement over its workers.
#[derive(clap::Args)]
struct DistributedArgs {
    /// Statements whose tables hold fewer MiB run on the query process alone.
    #[arg(long, default_value_t = 256)]
    distributed_threshold_mb: u64,
    /// The most workers one statement uses.
    #[arg(long, default_value_t = 16)]
    distributed_max_workers: usize,
    /// MiB of data files one scan task reads, about (0: a task per fragment, up to the
    /// workers there are).
    #[arg(long, default_value_t = 64)]
    distributed_task_mb: u64,
}

impl DistributedArgs {
    fn settings(&self) -> flight::DistributedSettings {
        const MIB: u64 = 1024 * 1024;
        flight::DistributedSettings {
            threshold_bytes: self.distributed_threshold_mb.saturating_mul(MIB),
            max_workers: self.distributed_max_workers.max(1),
            bytes_per_task: self.distributed_task_mb.saturating_mul(MIB),
        }
    }
}

// Parsed once at start-up: the size of its largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// A whole lake on local disk: metadata and query endpoints over one data directory.
    Local {
        /// The data directory (created if missing).
        #[arg(long)]
        data: PathBuf,
        #[arg(long, default_value = "127.0.0.1:8815")]
        query_addr: SocketAddr,
        #[arg(long, default_value = "127.0.0.1:8816")]
        metadata_addr: SocketAddr,
        /// Require one of the bearer tokens in this file (one per line) on every call to the
        /// query endpoint.
        #[arg(long, requires = "metadata_token_file")]
        query_token_file: Option<PathBuf>,
        /// The same for the metadata endpoint; no token may be in both files (a read token
        /// must never write).
        #[arg(long, requires = "query_token_file")]
        metadata_token_file: Option<PathBuf>,
        /// Removed: one token set for both endpoints let a read token write.
        #[arg(long, hide = true)]
        token_file: Option<PathBuf>,
        /// After SIGTERM or SIGINT, how long calls in flight may take to finish (seconds).
        #[arg(long, default_value_t = 25)]
        shutdown_grace: u64,
        #[command(flatten)]
        limits: LimitArgs,
        /// Where queries spill (created if missing) [default: the system temp directory].
        #[arg(long, env = "LAKE_SPILL_DIR")]
        spill_dir: Option<PathBuf>,
        /// Serve TLS with this PEM certificate chain (needs --tls-key).
        #[arg(long, requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// The PEM private key of --tls-cert.
        #[arg(long, requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        /// Run a maintenance pass (as `lake maintain`) every this many minutes; 0: never.
        #[arg(long, default_value_t = 0)]
        maintain_every_minutes: u64,
        #[command(flatten)]
        maintain: MaintainArgs,
        /// Start this many query worker processes (at most 64) and spread large statements
        /// over them (distributed query; docs/guides/distributed.md); 0: none.
        #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=64))]
        query_workers: u8,
        #[command(flatten)]
        distributed: DistributedArgs,
    },
    /// A query worker process of `lake local --query-workers` (started by it, not by hand).
    #[command(hide = true)]
    Worker {
        #[arg(long)]
        data: PathBuf,
        /// The directory holding the worker identity (certificate, key, CA).
        #[arg(long)]
        identity: PathBuf,
        #[arg(long, default_value = "127.0.0.1:0")]
        addr: SocketAddr,
        #[command(flatten)]
        limits: LimitArgs,
    },
    /// One maintenance pass over every table: compact small fragments and every fragment holding
    /// deleted rows (deleted rows leave storage), remove versions outside the retention with
    /// their files and manifest rows. Prints one line per table; exits non-zero if any table
    /// failed. With --data, a local lake that is not being served (`lake local` runs passes
    /// itself with --maintain-every-minutes); without it, the cloud lake the maintenance role's
    /// LAKE_* environment names (LAKE_ROLE=maintenance: what its CronJob runs).
    Maintain {
        /// The data directory of a local lake.
        #[arg(long)]
        data: Option<PathBuf>,
        #[command(flatten)]
        options: MaintainArgs,
    },
    /// Serve one role, configured by the LAKE_* environment (what the pods run).
    Serve,
    /// Run one SQL statement against a Flight SQL endpoint and print the result.
    Sql {
        /// e.g. grpc://127.0.0.1:8815
        endpoint: String,
        /// The statement, or `-` to read it from standard input (statements longer than a
        /// command line takes).
        sql: String,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
        /// A bearer token, for endpoints that require one.
        #[arg(long, env = "LAKE_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// The PEM certificate of the CA to trust, for grpc+tls:// endpoints.
        #[arg(long)]
        tls_ca: Option<PathBuf>,
    },
    /// Validate the LAKE_* configuration and print what this role would connect to, without
    /// connecting to anything.
    Plan,
    /// Check, with this pod's configuration and credentials, what its role may and may not do,
    /// printing each check; exits non-zero if any fails. The query role: its stores open
    /// read-only (the manifest marker names this cluster), the warehouse lists, it holds no
    /// registry name, and IAM refuses it DynamoDB writes (PutItem, DeleteItem). The metadata
    /// role: both stores open (both markers name this cluster), the registry lists, and IAM
    /// permits those writes to both tables. The maintenance role (LAKE_ROLE=maintenance): the
    /// manifest table opens, the warehouse lists, and IAM permits PutItem and a BatchWriteItem
    /// delete on the manifest table. Write probes carry a condition that never holds, or delete
    /// a row that does not exist: nothing is ever written.
    Selftest,
    /// The managed stage: put, get, ls, rm (through the query endpoint's stage descriptor).
    Stage {
        /// The query endpoint.
        #[arg(long, env = "LAKE_ENDPOINT", default_value = "grpc://127.0.0.1:8815")]
        endpoint: String,
        /// The query endpoint's bearer token (the `<cluster>-query-token` Secret).
        #[arg(long, env = "LAKE_QUERY_TOKEN", hide_env_values = true)]
        query_token: Option<String>,
        /// The metadata endpoint's bearer token (the `<cluster>-metadata-token` Secret), for
        /// commands that write; never sent to the query endpoint.
        #[arg(long, env = "LAKE_METADATA_TOKEN", hide_env_values = true)]
        metadata_token: Option<String>,
        /// The PEM certificate of the CA to trust, for grpc+tls:// endpoints.
        #[arg(long)]
        tls_ca: Option<PathBuf>,
        #[command(subcommand)]
        command: StageCommand,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,lance=warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    // Both ring and aws-lc-rs are in the dependency tree; rustls needs one chosen explicitly.
    // Err only means a provider is already installed, which is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let command = Cli::parse().command;
    if let Command::Plan = command {
        return plan();
    }
    // Deep (but accepted) expressions are walked recursively by DataFusion: worker stacks of
    // 64 MiB (address space; only what is used is committed) leave a wide margin under
    // `MAX_EXPRESSION_DEPTH` even in a debug build, where frames are largest.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(WORKER_STACK)
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return fail(&Failure::Runtime(e)),
    };
    let result = runtime.block_on(async {
        match command {
            Command::Local {
                data,
                query_addr,
                metadata_addr,
                query_token_file,
                metadata_token_file,
                token_file,
                shutdown_grace,
                limits,
                spill_dir,
                tls_cert,
                tls_key,
                maintain_every_minutes,
                maintain,
                query_workers,
                distributed,
            } => {
                let configured = limits.configured();
                if let Err(name) = configured.fields_are_positive() {
                    return Err(Failure::NotPositive(name));
                }
                let limits = flight::Limits::resolve(&configured, spill_dir);
                if token_file.is_some() {
                    return Err(Failure::OneTokenFile);
                }
                let tls = match (tls_cert, tls_key) {
                    (Some(cert), Some(key)) => Some(Tls::from_files(&cert, &key)?),
                    _ => None,
                };
                let tokens = LocalTokens {
                    query: tokens(query_token_file.as_deref())?,
                    metadata: tokens(metadata_token_file.as_deref())?,
                };
                if let (Some(q), Some(m)) = (&tokens.query, &tokens.metadata)
                    && q.overlaps(m)
                {
                    return Err(Failure::SharedToken);
                }
                // Without tokens, only this machine may connect — or the user says otherwise.
                if tokens.query.is_none()
                    && let Some(exposed) = [query_addr, metadata_addr]
                        .into_iter()
                        .find(|a| !a.ip().is_loopback())
                {
                    if std::env::var(lake_common::config::LAKE_AUTH).as_deref() != Ok("none") {
                        return Err(Failure::ExposedWithoutTokens(exposed));
                    }
                    tracing::warn!(
                        %exposed,
                        "LAKE_AUTH=none: lake local serves without authentication; any client \
                         that reaches this address may read and write the lake"
                    );
                }
                // A version removed under a running query breaks it: the grace must outlast the
                // longest query this lake lets run.
                let query_timeout = limits.query_timeout;
                if maintain_every_minutes > 0
                    && Duration::from_secs(maintain.grace_seconds) < query_timeout
                {
                    return Err(Failure::GraceBelowTimeout {
                        grace: maintain.grace_seconds,
                        timeout: query_timeout.as_secs(),
                    });
                }
                let shutdown = flight::Shutdown::on_signals(Duration::from_secs(shutdown_grace));
                let maintenance = (maintain_every_minutes > 0).then(|| {
                    (
                        Duration::from_secs(maintain_every_minutes.saturating_mul(60)),
                        maintain.options(),
                    )
                });
                let workers = (query_workers > 0).then(|| LocalWorkers {
                    count: usize::from(query_workers),
                    limits: configured.clone(),
                    settings: distributed.settings(),
                });
                local(
                    &data,
                    query_addr,
                    metadata_addr,
                    tokens,
                    tls,
                    limits,
                    shutdown,
                    maintenance,
                    workers,
                )
                .await
            }
            Command::Worker {
                data,
                identity,
                addr,
                limits,
            } => {
                let limits = flight::Limits::resolve(&limits.configured(), None);
                local_workers::run(&data, &identity, addr, limits).await
            }
            Command::Maintain {
                data: Some(data),
                options,
            } => maintain_local(&data, options.options()).await,
            Command::Maintain {
                data: None,
                options,
            } => maintain_cloud(options.options()).await,
            Command::Serve => serve().await,
            Command::Selftest => selftest().await,
            Command::Sql {
                endpoint,
                sql,
                format,
                token,
                tls_ca,
            } => {
                let mut out = std::io::stdout();
                let ca = tls_ca.map(std::fs::read).transpose().map_err(Failure::Ca)?;
                let sql = if sql == "-" {
                    std::io::read_to_string(std::io::stdin()).map_err(Failure::Stdin)?
                } else {
                    sql
                };
                lake_runtime::sql_client::run(
                    &endpoint,
                    &sql,
                    format,
                    token.as_deref(),
                    ca,
                    &mut out,
                )
                .await
                .map_err(Failure::from)
            }
            Command::Stage {
                endpoint,
                query_token,
                metadata_token,
                tls_ca,
                command,
            } => {
                let tls_ca = tls_ca.map(std::fs::read).transpose().map_err(Failure::Ca)?;
                let options = lake_client::ConnectOptions {
                    query_token,
                    metadata_token,
                    tls_ca,
                };
                lake_runtime::stage_cli::run(&endpoint, options, command)
                    .await
                    .map_err(Failure::from)
            }
            Command::Plan => Ok(()),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => fail(&failure),
    }
}

fn fail(failure: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("error: {failure}");
    ExitCode::FAILURE
}

const WORKER_STACK: usize = 64 * 1024 * 1024;

/// How long a pod's calls in flight may take after SIGTERM: within Kubernetes' default 30 s
/// termination grace period.
pub(crate) const SERVE_GRACE: Duration = Duration::from_secs(25);

/// How often the metadata role finalises commits a dead writer left staged.
const FINALISE_EVERY: Duration = Duration::from_secs(60);

/// Finalises staged commits now and every [`FINALISE_EVERY`] (see
/// `MetadataContext::finalise_staged`).
async fn finalise_periodically(metadata: Arc<MetadataContext>) {
    loop {
        if let Err(e) = metadata.finalise_staged().await {
            tracing::warn!(error = %e, "finalising staged commits failed; retrying later");
        }
        tokio::time::sleep(FINALISE_EVERY).await;
    }
}

/// Each local endpoint's tokens.
struct LocalTokens {
    query: Option<Tokens>,
    metadata: Option<Tokens>,
}

fn tokens(file: Option<&Path>) -> Result<Option<Tokens>, Failure> {
    Ok(file.map(Tokens::from_file).transpose()?)
}

/// Runs a maintenance pass every `every` (the first one `every` after start-up). A pass that
/// fails (or panics) is reported and the next one runs on schedule.
async fn maintain_periodically(
    metadata: Arc<MetadataContext>,
    every: Duration,
    options: lake_runtime::maintain::Options,
) {
    loop {
        tokio::time::sleep(every).await;
        let pass = {
            let metadata = metadata.clone();
            tokio::spawn(
                async move { lake_runtime::maintain::run(metadata.engine(), options).await },
            )
        };
        match pass.await {
            Ok(Ok(summary)) => {
                for table in &summary.tables {
                    if matches!(table.outcome, lake_runtime::maintain::Outcome::Failed(_)) {
                        tracing::warn!(summary = %table, "maintenance failed for a table");
                    } else {
                        tracing::info!(summary = %table, "maintenance");
                    }
                }
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "a maintenance pass failed; the next one runs on schedule")
            }
            Err(e) => {
                tracing::error!(error = %e, "a maintenance pass panicked; the next one runs on schedule")
            }
        }
    }
}

/// `lake maintain --data`: one pass over a local lake that is not being served.
async fn maintain_local(
    data: &Path,
    options: lake_runtime::maintain::Options,
) -> Result<(), Failure> {
    if !data.join("_lake").is_dir() {
        return Err(Failure::NotALake(data.to_owned()));
    }
    // The manifest rows name each table by its absolute path: resolve it as `lake local` does.
    let data = data.canonicalize().map_err(|source| Failure::DataDir {
        action: "resolve",
        path: data.to_owned(),
        source,
    })?;
    let plan = local_plan(&data)?;
    let metadata =
        match MetadataContext::open(&plan.metadata(), None, &ConnectOptions::default()).await {
            Err(e) if held_by_another_process(&e) => return Err(Failure::LakeServed(data)),
            other => other?,
        };
    report_pass(metadata.engine(), options).await
}

/// `lake maintain` in the maintenance role: one pass over the cloud lake its LAKE_* environment
/// names, through the warehouse and the manifest table only.
async fn maintain_cloud(options: lake_runtime::maintain::Options) -> Result<(), Failure> {
    let (config, unknown) =
        MaintenanceConfig::from_vars(std::env::vars()).map_err(Failure::Config)?;
    for name in &unknown {
        tracing::warn!(variable = %name, "unknown LAKE_* variable ignored");
    }
    let context =
        MaintenanceContext::open(&config.plan, &config.cluster_id, &ConnectOptions::default())
            .await?;
    report_pass(context.engine(), options).await
}

/// Runs one pass and prints a line per table and a summary; fails if any table failed.
async fn report_pass(
    engine: &lake_runtime::engine::WriteEngine,
    options: lake_runtime::maintain::Options,
) -> Result<(), Failure> {
    use lake_runtime::maintain::PassError;
    use lake_runtime::manifest::LeaseError;
    let started = std::time::Instant::now();
    let summary = match lake_runtime::maintain::run(engine, options).await {
        Ok(summary) => summary,
        // Not a failure: the pass running now does this one's work.
        Err(e @ PassError::Lease(LeaseError::Held { .. })) => {
            println!("maintenance: skipped: {e}");
            return Ok(());
        }
        Err(e) => return Err(Failure::Maintain(Box::new(e))),
    };
    for table in &summary.tables {
        println!("{table}");
    }
    let failed = summary.failed();
    println!(
        "maintenance: {} tables, {failed} failed in {:.3} s",
        summary.tables.len(),
        started.elapsed().as_secs_f64()
    );
    if failed == 0 {
        Ok(())
    } else {
        Err(Failure::MaintainTables(failed))
    }
}

/// Whether opening a local lake failed because another process (`lake local`) holds its stores
/// (whichever store was opened first says so).
fn held_by_another_process(e: &lake_runtime::context::ContextError) -> bool {
    use lake_runtime::catalog::CatalogError;
    use lake_runtime::context::ContextError;
    use lake_runtime::provision::ProvisionError;
    use lake_runtime::store::StoreError;
    matches!(
        e,
        ContextError::Store(StoreError::Locked { .. })
            | ContextError::Provision(ProvisionError::Store(StoreError::Locked { .. }))
            | ContextError::Catalog(CatalogError::Store(StoreError::Locked { .. }))
    )
}

/// The authority plan of a local lake in `data` (an existing, canonical directory).
fn local_plan(data: &Path) -> Result<AuthorityPlan, Failure> {
    let request = AuthorityRequest {
        cluster_name: "local".into(),
        storage: StorageRequest::Local {
            path: data.display().to_string(),
        },
        registry_table: None,
        manifest_table: None,
        legacy_table: None,
        dynamodb_endpoint: None,
    };
    AuthorityPlan::new(&request, &PlanFields::SPEC).map_err(Failure::Config)
}

/// `lake local --query-workers`: how many, and how they are used.
struct LocalWorkers {
    count: usize,
    limits: lake_common::config::Limits,
    settings: flight::DistributedSettings,
}

#[allow(clippy::too_many_arguments)]
async fn local(
    data: &Path,
    query_addr: SocketAddr,
    metadata_addr: SocketAddr,
    tokens: LocalTokens,
    tls: Option<Tls>,
    limits: flight::Limits,
    shutdown: flight::Shutdown,
    maintenance: Option<(Duration, lake_runtime::maintain::Options)>,
    workers: Option<LocalWorkers>,
) -> Result<(), Failure> {
    let scheme = if tls.is_some() { "grpc+tls" } else { "grpc" };
    let data_dir = |action| {
        move |source| Failure::DataDir {
            action,
            path: data.to_owned(),
            source,
        }
    };
    std::fs::create_dir_all(data).map_err(data_dir("create"))?;
    let data = data.canonicalize().map_err(data_dir("resolve"))?;
    let plan = local_plan(&data)?;
    let options = ConnectOptions::default();
    // Metadata first: it provisions the local stores that query then opens read-only.
    let metadata = MetadataContext::open(&plan.metadata(), None, &options).await?;
    let query = QueryContext::open(&plan.query(), None, &options).await?;
    let metadata_bound = flight::bind(metadata_addr)
        .await
        .map_err(listen(metadata_addr))?;
    let query_bound = flight::bind(query_addr).await.map_err(listen(query_addr))?;
    let metadata_url = format!("{scheme}://{}", metadata_bound.addr);
    let query_url = format!("{scheme}://{}", query_bound.addr);
    // Started once the lake is provisioned (they read its warehouse), before serving; the
    // banner says where.
    let (_workers, distribution) = match workers {
        Some(w) => {
            let (running, distribution) =
                local_workers::start(&data, w.count, &w.limits, w.settings).await?;
            (Some(running), Some(Arc::new(distribution)))
        }
        None => (None, None),
    };
    // Nobody may be reading stdout (a closed pipe): the banner must never stop the servers.
    let workers_line = match &distribution {
        Some(d) => format!(
            "  workers   {}   (distributed query; mutual TLS)\n",
            d.workers()
                .iter()
                .map(url::Url::as_str)
                .collect::<Vec<_>>()
                .join(" ")
        ),
        None => String::new(),
    };
    let banner = format!(
        "lake local: data in {data}\n  query     {query_url}   (read-only SQL)\n  metadata  {metadata_url}   (DDL, INSERT, DELETE, ingest)\n{workers_line}\n\
         Python (ADBC):\n  import adbc_driver_flightsql.dbapi as flightsql\n  \
         with flightsql.connect(\"{metadata_url}\") as conn, conn.cursor() as cur:\n      \
         cur.execute(\"CREATE SCHEMA sales\")\n      \
         cur.execute(\"CREATE TABLE sales.orders (id BIGINT, item VARCHAR)\")\n      \
         cur.execute(\"INSERT INTO sales.orders VALUES (1, 'tea'), (2, 'cake')\")\n  \
         with flightsql.connect(\"{query_url}\") as conn, conn.cursor() as cur:\n      \
         cur.execute(\"SELECT * FROM sales.orders\"); print(cur.fetchall())",
        data = data.display()
    );
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{banner}").and_then(|()| out.flush());
    }

    let query_role = Role::Query {
        context: Arc::new(query),
        metadata_endpoint: Some(metadata_url),
        distribution,
    };
    let metadata = Arc::new(metadata);
    tokio::spawn(finalise_periodically(metadata.clone()));
    if let Some((every, options)) = maintenance {
        tokio::spawn(maintain_periodically(metadata.clone(), every, options));
    }
    let metadata_role = Role::Metadata(metadata);
    let (a, b) = tokio::join!(
        flight::serve(
            metadata_bound,
            metadata_role,
            tokens.metadata,
            tls.clone(),
            limits.clone(),
            shutdown.clone()
        ),
        flight::serve(query_bound, query_role, tokens.query, tls, limits, shutdown),
    );
    Ok(a.and(b)?)
}

async fn serve() -> Result<(), Failure> {
    let parsed = RuntimeConfig::from_vars(std::env::vars()).map_err(Failure::Config)?;
    for name in &parsed.unknown {
        tracing::warn!(variable = %name, "unknown LAKE_* variable ignored");
    }
    let config = parsed.config;
    // Refused before anything is opened: a pod without its token Secret must not serve openly.
    let tokens = match &config.auth {
        Auth::Tokens(file) => Some(Tokens::from_file(Path::new(file))?),
        Auth::Disabled => {
            tracing::warn!(
                role = %config.plan.role(),
                "LAKE_AUTH=none: serving without authentication; any client that reaches this \
                 address may call every RPC of this role"
            );
            None
        }
        Auth::Unconfigured => return Err(Failure::NoAuth),
    };
    let tls = config
        .tls
        .as_ref()
        .map(|(cert, key)| Tls::from_files(Path::new(cert), Path::new(key)))
        .transpose()?;
    let options = ConnectOptions::default();
    let limits =
        flight::Limits::resolve(&config.limits, config.spill_dir.as_ref().map(PathBuf::from));
    // Dispatch on the role before opening anything: query builds the minimal context only.
    let role = match &config.plan {
        RolePlan::Query(plan) => {
            let context =
                Arc::new(QueryContext::open(plan, config.cluster_id.as_deref(), &options).await?);
            let distribution = match &config.distributed {
                Some(distributed) => Some(Arc::new(
                    local_workers::serve_cluster_worker(distributed, context.engine(), &limits)
                        .await?,
                )),
                None => None,
            };
            Role::Query {
                context,
                metadata_endpoint: config.metadata_endpoint.clone(),
                distribution,
            }
        }
        RolePlan::Metadata(plan) => {
            let metadata = Arc::new(
                MetadataContext::open(plan, config.cluster_id.as_deref(), &options).await?,
            );
            tokio::spawn(finalise_periodically(metadata.clone()));
            Role::Metadata(metadata)
        }
    };
    let bound = flight::bind(config.flight_addr)
        .await
        .map_err(listen(config.flight_addr))?;
    let scheme = if tls.is_some() { "grpc+tls" } else { "grpc" };
    tracing::info!(role = %config.plan.role(), addr = %bound.addr, "serving");
    {
        // The bound address (LAKE_FLIGHT_ADDR may ask for port 0); a closed stdout is no error.
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{} {scheme}://{}", config.plan.role(), bound.addr)
            .and_then(|()| out.flush());
    }
    Ok(flight::serve(
        bound,
        role,
        tokens,
        tls,
        limits,
        flight::Shutdown::on_signals(SERVE_GRACE),
    )
    .await?)
}

async fn selftest() -> Result<(), Failure> {
    let maintenance = std::env::var(lake_common::config::LAKE_ROLE)
        .is_ok_and(|r| r == lake_common::config::MAINTENANCE_ROLE);
    let (role, checks) = if maintenance {
        let (config, _) =
            MaintenanceConfig::from_vars(std::env::vars()).map_err(Failure::Config)?;
        let checks = lake_runtime::selftest::run_maintenance(&config).await;
        (lake_common::config::MAINTENANCE_ROLE.to_owned(), checks)
    } else {
        let parsed = RuntimeConfig::from_vars(std::env::vars()).map_err(Failure::Config)?;
        let checks = lake_runtime::selftest::run(&parsed.config).await;
        (parsed.config.plan.role().to_string(), checks)
    };
    let failed = checks.iter().filter(|c| !c.passed).count();
    for check in &checks {
        let mark = if check.passed { "ok" } else { "FAILED" };
        println!("{mark} {}: {}", check.name, check.detail);
    }
    println!(
        "{role} selftest: {} passed, {failed} failed",
        checks.len() - failed
    );
    if failed == 0 {
        Ok(())
    } else {
        Err(Failure::Selftest(failed))
    }
}

fn plan() -> ExitCode {
    match RuntimeConfig::from_vars(std::env::vars()) {
        Ok(parsed) => {
            for name in &parsed.unknown {
                tracing::warn!(variable = %name, "unknown LAKE_* variable ignored");
            }
            match serde_json::to_string_pretty(&parsed.config) {
                Ok(json) => {
                    println!("{json}");
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&format!("cannot print the plan: {e}")),
            }
        }
        Err(errors) => {
            eprintln!("error: invalid LAKE_* configuration:");
            for error in errors.iter() {
                eprintln!("  - {error}");
            }
            ExitCode::FAILURE
        }
    }
}
