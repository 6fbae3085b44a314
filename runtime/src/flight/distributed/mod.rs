//! Distributed query: one statement spread over the query role's processes
//! (datafusion-distributed; docs/guides/distributed.md).
//!
//! The process that receives a statement plans it; when the tables it scans hold at least the
//! threshold's bytes and workers are there, it plans it again distributed — its scans dealt out
//! by fragment ([`scan`], [`split`]), its stages sent to workers ([`worker`]) over mutual TLS
//! ([`identity`]) as lake's codec encodes them ([`codec`]). Smaller statements run as before.

mod codec;
mod identity;
pub mod kubernetes;
mod peers;
mod scan;
mod split;
mod table;
mod worker;

use std::sync::Arc;
use std::time::Duration;

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::datasource::source_as_provider;
use datafusion::execution::SessionStateBuilder;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use datafusion_distributed::{DistributedExt, SessionStateBuilderExt, WorkerResolver};
use url::Url;

pub use identity::{IdentityError, LOCAL_WORKER_NAME, WorkerIdentity};
pub use peers::Peers;
pub(in crate::flight) use table::{LakeTable, LargeScanBatches};
pub use worker::{WorkerError, serve_worker};

use codec::LakeCodec;
use peers::{Channels, Resolver};

/// Marks a statement's session as distributed: its tables are scanned with [`scan::LakeScanExec`],
/// `bytes_per_task` of data files per scan task.
#[derive(Debug, Clone, Copy)]
pub(super) struct Spread {
    pub(super) bytes_per_task: u64,
}

impl Spread {
    pub(super) const DEFAULT_BYTES_PER_TASK: u64 = 64 * 1024 * 1024;
}

/// When and over what a query endpoint distributes its statements.
#[derive(Debug, Clone)]
pub struct DistributedSettings {
    /// A statement whose tables hold fewer bytes runs on this process alone.
    pub threshold_bytes: u64,
    /// The most workers one statement uses.
    pub max_workers: usize,
    /// Data files one scan task reads, about.
    pub bytes_per_task: u64,
}

impl Default for DistributedSettings {
    fn default() -> Self {
        Self {
            threshold_bytes: 256 * 1024 * 1024,
            max_workers: 16,
            bytes_per_task: Spread::DEFAULT_BYTES_PER_TASK,
        }
    }
}

/// Where a query endpoint's workers may be.
#[derive(Debug, Clone)]
pub enum Candidates {
    Fixed(Vec<Url>),
    /// Every address `name` resolves to now, on `port` (a headless Service's ready pods).
    Dns {
        name: String,
        port: u16,
    },
    /// Found through the Kubernetes API, watched.
    Kubernetes(kubernetes::Found),
}

impl Candidates {
    async fn urls(&self) -> Vec<Url> {
        match self {
            Self::Fixed(urls) => urls.clone(),
            Self::Dns { name, port } => match tokio::net::lookup_host((name.as_str(), *port)).await
            {
                Ok(addrs) => addrs
                    .filter_map(|a| Url::parse(&format!("https://{a}")).ok())
                    .collect(),
                Err(e) => {
                    tracing::warn!(%name, error = %e, "the workers' name does not resolve");
                    Vec::new()
                }
            },
            Self::Kubernetes(found) => found.urls(),
        }
    }
}

/// A query endpoint's distribution: its settings, its workers, and how to reach them.
#[derive(Debug, Clone)]
pub struct Distribution {
    settings: DistributedSettings,
    peers: Arc<Peers>,
    channels: Channels,
    /// The check of the workers (`watch`), stopped with the distribution.
    watching: Arc<std::sync::Mutex<Option<Watching>>>,
}

/// Aborts the watch loop when the last handle of the distribution goes.
#[derive(Debug)]
struct Watching(tokio::task::JoinHandle<()>);

impl Drop for Watching {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Distribution {
    pub fn new(settings: DistributedSettings, peers: Arc<Peers>, identity: WorkerIdentity) -> Self {
        Self {
            settings,
            peers,
            channels: Channels::new(identity),
            watching: Arc::default(),
        }
    }

    /// Keeps the workers to those of `candidates` that answer over mutual TLS now, checking
    /// every `every`: a worker that stopped leaves the list within one check, so the next
    /// statement runs on the workers that remain.
    pub fn watch(&self, candidates: Candidates, every: Duration) {
        let peers = self.peers.clone();
        let channels = self.channels.clone();
        let task = tokio::spawn(async move {
            loop {
                let urls = candidates.urls().await;
                let mut live = Vec::with_capacity(urls.len());
                for url in urls {
                    if channels.answers(&url, every).await {
                        live.push(url);
                    }
                }
                peers.set(live);
                tokio::time::sleep(every).await;
            }
        });
        // One loop: watching again replaces (and stops) the one before.
        *self.watching.lock().unwrap_or_else(|p| p.into_inner()) = Some(Watching(task));
    }

    /// The workers statements may use now.
    pub fn workers(&self) -> Vec<Url> {
        self.peers.urls()
    }

    fn resolver(&self) -> Resolver {
        Resolver {
            peers: self.peers.clone(),
            max: self.settings.max_workers,
        }
    }

    /// Whether `plan` is worth distributing now: it reads lake tables only, they hold at least
    /// the threshold's bytes, and there are at least two workers to spread it over.
    pub(super) fn wants(&self, plan: &LogicalPlan) -> bool {
        if self.resolver().get_urls().map_or(0, |u| u.len()) < 2 {
            return false;
        }
        let mut bytes = 0u64;
        let mut lake_tables_only = true;
        let _ = plan.apply_with_subqueries(|node| {
            if let LogicalPlan::TableScan(scan) = node {
                // A search's table too (a prepared search arrives optimized).
                let table = source_as_provider(&scan.source).ok().and_then(|provider| {
                    crate::flight::search::lake_table(provider.as_ref()).map(LakeTable::bytes)
                });
                match table {
                    Some(table) => bytes = bytes.saturating_add(table),
                    // `information_schema` and the like are this process's: their scans cannot
                    // run on a worker.
                    None => lake_tables_only = false,
                }
            }
            Ok(TreeNodeRecursion::Continue)
        });
        lake_tables_only && bytes >= self.settings.threshold_bytes
    }

    /// `ctx` as a distributed session: the same catalog, functions, rules and limits, planned by
    /// datafusion-distributed over this endpoint's workers.
    pub(super) fn session(
        &self,
        ctx: &SessionContext,
        engine: &crate::engine::Engine,
    ) -> SessionContext {
        let mut builder = SessionStateBuilder::new_from_existing(ctx.state())
            .with_distributed_planner()
            .with_distributed_worker_resolver(self.resolver())
            .with_distributed_channel_resolver(self.channels.clone())
            .with_distributed_user_codec(LakeCodec::new(engine.clone()))
            .with_distributed_desired_task_count_handler(split::desired_tasks)
            .with_distributed_scale_up_leaf_node_handler(split::scale_up);
        if let Some(config) = builder.config() {
            config.set_extension(Arc::new(Spread {
                bytes_per_task: self.settings.bytes_per_task,
            }));
            // Stages are cut at repartitions: a process planning for one core (its CPU set, a
            // pod's limit) would plan none, and keep the whole statement to itself.
            let partitions = &mut config.options_mut().execution.target_partitions;
            *partitions = (*partitions).max(2);
        }
        SessionContext::new_with_state(builder.build())
    }
}
