//! A test fixture: an endpoint's shared sessions over a warehouse of its own.

use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::execution::DiskManager;
use datafusion::execution::disk_manager::DiskManagerBuilder;
use datafusion::execution::memory_pool::GreedyMemoryPool;
use datafusion::prelude::SessionContext;

use super::Sessions;
use crate::engine::{Warehouse, WriteEngine};
use crate::flight::options::SessionOptions;
use crate::manifest::ManifestStore;
use crate::store::EmbeddedStore;

/// An endpoint's sessions over an empty warehouse.
pub(in crate::flight) struct Endpoint {
    _dir: tempfile::TempDir,
    pub(in crate::flight) sessions: Sessions,
    pub(in crate::flight) engine: WriteEngine,
    disk: Arc<DiskManager>,
}

impl Endpoint {
    pub(in crate::flight) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let kv = Arc::new(EmbeddedStore::open(&dir.path().join("manifests.redb"), true).unwrap());
        let engine = WriteEngine::new(
            Warehouse::Local(dir.path().join("warehouse")),
            ManifestStore::new(kv),
        );
        let disk = Arc::new(DiskManagerBuilder::default().build().unwrap());
        let sessions = Sessions::new(disk.clone()).unwrap();
        Self {
            _dir: dir,
            sessions,
            engine,
            disk,
        }
    }

    /// A statement's session with a budget of `bytes` (and a minute to run).
    pub(in crate::flight) fn statement(&self, bytes: usize) -> SessionContext {
        self.sessions
            .statement(
                self.engine.reader(),
                Arc::new(GreedyMemoryPool::new(bytes)),
                self.disk.clone(),
                Instant::now() + Duration::from_secs(60),
                Duration::from_secs(60),
                &SessionOptions::default(),
            )
            .unwrap()
    }
}
