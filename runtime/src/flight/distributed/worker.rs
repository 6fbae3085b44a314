//! The worker side of distributed query: a gRPC service on its own port, over mutual TLS, that
//! runs the stages it is sent as the query role would — read-only, within the process's limits.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::SessionState;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_distributed::{
    DistributedExt, Worker, WorkerPlanRewriteEvent, WorkerPlanRewriteEventResponse,
    WorkerQueryContext, WorkerSessionBuilder,
};

use super::codec::LakeCodec;
use super::identity::WorkerIdentity;
use super::peers::Channels;
use crate::engine::Engine;
use crate::flight::bounded::{self, Budget};
use crate::flight::limits::{Governor, Limits, SpillDirError};
use crate::flight::{Shutdown, sql};

/// The largest message a worker accepts (a stage's plan; data flows the other way).
const MAX_DECODING: usize = 64 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error(transparent)]
    Spill(#[from] SpillDirError),
    #[error("the worker port failed: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// Builds the session each stage a worker is sent runs in.
#[derive(Clone)]
struct Sessions {
    codec: Arc<LakeCodec>,
    channels: Channels,
    governor: Governor,
}

#[async_trait]
impl WorkerSessionBuilder for Sessions {
    async fn build_session_state(&self, ctx: WorkerQueryContext) -> Result<SessionState> {
        // A stage counts against the process's memory like a statement, with a statement's cap
        // and time limit (its coordinator holds the statement's admission slot).
        let pool = self.governor.query_pool();
        let limit = self.governor.limits.query_timeout;
        let budget = Budget::new(pool.clone(), std::time::Instant::now() + limit, limit);
        let builder = ctx
            .builder
            .with_runtime_env(sql::runtime_env(pool, self.governor.disk())?)
            .with_distributed_user_codec_arc(self.codec.clone())
            .with_distributed_channel_resolver(self.channels.clone())
            .with_distributed_worker_plan_rewrite_handler(only_reads);
        Ok(bounded::counted_worker_session(builder, &budget).build())
    }
}

/// Refuses a stage that writes or reads anything but lake tables and constants: a worker runs
/// what the query role may run, whoever crafted the plan. (Nodes nobody's codec knows were
/// refused while decoding.)
fn only_reads(event: WorkerPlanRewriteEvent<'_>) -> Result<WorkerPlanRewriteEventResponse> {
    event.plan.apply(|node| {
        if let Some(refusal) = refusal(node.as_ref()) {
            return Err(DataFusionError::Plan(format!(
                "a distributed query's worker refused the plan: {refusal}"
            )));
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(WorkerPlanRewriteEventResponse::new(event.plan))
}

/// The most output partitions a node of a stage may have (a plan's counts are what its sender
/// declares; lake's own plans have the planning process's few).
const MAX_PARTITIONS: usize = 4096;

fn refusal(node: &dyn ExecutionPlan) -> Option<String> {
    let partitions = node.properties().partitioning.partition_count();
    if partitions > MAX_PARTITIONS {
        return Some(format!(
            "{} has {partitions} partitions, more than {MAX_PARTITIONS}",
            node.name()
        ));
    }
    if node.name() == "DataSinkExec" {
        return Some("it writes (DataSinkExec)".into());
    }
    if let Some(source) = node.downcast_ref::<DataSourceExec>() {
        let source: &dyn std::any::Any = source.data_source().as_ref();
        if source.is::<MemorySourceConfig>() {
            return None;
        }
        return Some("it reads files outside the lake (DataSourceExec)".into());
    }
    None
}

/// Serves the worker port on `listener` until `shutdown`, admitting only connections with a
/// certificate `identity`'s CA signed. Stages read through `engine` (a pinned reader) within
/// `limits`.
pub async fn serve_worker(
    listener: tokio::net::TcpListener,
    engine: &Engine,
    identity: WorkerIdentity,
    limits: Limits,
    shutdown: Shutdown,
) -> Result<(), WorkerError> {
    let sessions = Sessions {
        codec: Arc::new(LakeCodec::new(engine.clone())),
        channels: Channels::new(identity.clone()),
        governor: Governor::new(limits)?,
    };
    let service = Worker::from_session_builder(sessions)
        .with_version(env!("CARGO_PKG_VERSION"))
        .into_worker_server()
        .max_decoding_message_size(MAX_DECODING);
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    tonic::transport::Server::builder()
        .tls_config(identity.server())?
        .add_service(service)
        .serve_with_incoming_shutdown(incoming, shutdown.requested())
        .await?;
    Ok(())
}
