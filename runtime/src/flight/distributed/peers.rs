//! Where a statement's workers are, and how they are reached.
//!
//! The planner asks for workers synchronously, so the list is a snapshot that whatever finds
//! them (a fixed list, or the cluster's EndpointSlices) replaces as they come and go.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use datafusion::error::DataFusionError;
use datafusion_distributed::grpc::{BoxCloneSyncChannel, create_worker_client};
use datafusion_distributed::{
    ChannelResolver, GetWorkerInfoRequest, WorkerChannel, WorkerResolver,
};
use tonic::transport::Endpoint;
use url::Url;

use super::identity::WorkerIdentity;

/// The workers a statement may use now.
#[derive(Debug, Default)]
pub struct Peers {
    urls: RwLock<Vec<Url>>,
}

impl Peers {
    pub fn fixed(urls: Vec<Url>) -> Arc<Self> {
        Arc::new(Self {
            urls: RwLock::new(urls),
        })
    }

    /// Replaces the list (a worker came, or went).
    pub fn set(&self, mut urls: Vec<Url>) {
        urls.sort();
        urls.dedup();
        *self.urls.write().unwrap_or_else(|p| p.into_inner()) = urls;
    }

    pub fn urls(&self) -> Vec<Url> {
        self.urls.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// The planner's view of [`Peers`], at most `max` of them.
#[derive(Debug, Clone)]
pub(super) struct Resolver {
    pub(super) peers: Arc<Peers>,
    pub(super) max: usize,
}

impl WorkerResolver for Resolver {
    fn get_urls(&self) -> Result<Vec<Url>, DataFusionError> {
        let mut urls = self.peers.urls();
        urls.truncate(self.max.max(1));
        Ok(urls)
    }
}

/// Connections to workers over mutual TLS, one per worker, kept while they work.
#[derive(Clone)]
pub(super) struct Channels {
    identity: WorkerIdentity,
    open: Arc<tokio::sync::Mutex<HashMap<Url, BoxCloneSyncChannel>>>,
}

impl std::fmt::Debug for Channels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channels").finish_non_exhaustive()
    }
}

/// How long connecting to a worker may take: one that does not answer fails the statement,
/// retryable, rather than holding it.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The most worker connections kept.
const MAX_CHANNELS: usize = 256;

impl Channels {
    pub(super) fn new(identity: WorkerIdentity) -> Self {
        Self {
            identity,
            open: Arc::default(),
        }
    }

    async fn channel(&self, url: &Url) -> Result<BoxCloneSyncChannel, DataFusionError> {
        if let Some(channel) = self.open.lock().await.get(url) {
            return Ok(channel.clone());
        }
        // Connected without the lock held: a worker that stalls its handshake holds up only the
        // statements that need it. (Two connecting at once keep the later channel; both work.)
        let unreachable = |e: &dyn std::fmt::Display| {
            DataFusionError::External(Box::new(tonic::Status::unavailable(format!(
                "the distributed query's worker {url} cannot be reached: {e}; try again"
            ))))
        };
        let endpoint = Endpoint::from_shared(url.to_string())
            .and_then(|e| e.tls_config(self.identity.client()))
            .map_err(|e| unreachable(&e))?
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true);
        let channel = tokio::time::timeout(CONNECT_TIMEOUT, endpoint.connect())
            .await
            .map_err(|e| unreachable(&e))?
            .map_err(|e| unreachable(&e))?;
        let channel = BoxCloneSyncChannel::new(channel);
        let mut open = self.open.lock().await;
        // Bounded: workers are few; a plan naming many spellings of their URLs cannot grow it.
        if open.len() >= MAX_CHANNELS {
            open.clear();
        }
        open.insert(url.clone(), channel.clone());
        Ok(channel)
    }

    /// Whether the worker at `url` answers, over mutual TLS, within `wait`. One that does not
    /// is forgotten: it is connected to afresh when it answers again.
    pub(super) async fn answers(&self, url: &Url, wait: std::time::Duration) -> bool {
        let asked = async {
            let mut client = create_worker_client(self.channel(url).await?);
            client.get_worker_info(GetWorkerInfoRequest {}).await
        };
        let answered = matches!(tokio::time::timeout(wait, asked).await, Ok(Ok(_)));
        if !answered {
            self.open.lock().await.remove(url);
        }
        answered
    }
}

#[async_trait]
impl ChannelResolver for Channels {
    async fn get_worker_client_for_url(
        &self,
        url: &Url,
    ) -> Result<Box<dyn WorkerChannel>, DataFusionError> {
        self.channel(url).await.map(create_worker_client)
    }
}
