//! The Lance engine: datasets at `<warehouse>/<ns>/<table>.lance`, committed through the manifest
//! store. [`Engine`] reads (query and metadata); [`WriteEngine`] also writes (metadata only).

mod encoding;
mod index;
mod local_reads;
mod maintain;
mod pinned;
mod restore;
mod warehouse;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use lance::dataset::builder::DatasetBuilder;
use lance::dataset::scanner::RowAddrTreeMap;
use lance::dataset::write::{CommitBuilder, DeleteBuilder, InsertBuilder};
use lance::dataset::{Dataset, WriteMode, WriteParams};
use lance::session::Session;
use lance_io::object_store::ObjectStoreRegistry;
use lance_table::io::commit::CommitHandler;
use lance_table::io::commit::external_manifest::{
    ExternalManifestCommitHandler, ExternalManifestStore,
};

use crate::catalog::{NamespaceName, TableName};
use crate::manifest::{Lease, LeaseError, LeaseOf, ManifestStore, ReadOnlyManifestStore, Renewed};
use crate::store::StoreError;

pub use encoding::InvalidEncoding;
pub use index::{
    IndexDefinition, IndexKind, IndexListing, TextOptions, VectorMetric, VectorOptions, indices,
};
pub use maintain::{Compaction, Removal, VersionTime, is_conflict};
pub use restore::{RestorePoint, RestoreTarget, Restoring};
pub use warehouse::{TableRef, Warehouse};

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("table {0} does not exist")]
    NotFound(TableRef),
    #[error("table {0} already exists")]
    AlreadyExists(TableRef),
    #[error("{operation} {table}: {source}")]
    Lance {
        operation: &'static str,
        table: TableRef,
        #[source]
        source: lance::Error,
    },
    /// The rows to write could not be produced (bad input: a cast, a decode): nothing was
    /// committed.
    #[error("the rows could not be written: {0}")]
    Rows(#[source] Arc<datafusion::error::DataFusionError>),
    #[error("table {0} cannot be read: its Lance metadata is damaged")]
    Corrupt(TableRef),
    #[error(
        "finding the rows to delete from {table} took longer than {} s \
         (LAKE_QUERY_TIMEOUT_SECONDS); nothing was deleted",
        limit.as_secs()
    )]
    Deadline { table: TableRef, limit: Duration },
    #[error("listing the warehouse: {0}")]
    Listing(#[source] object_store::Error),
    #[error("removing the files of {table}: {detail}")]
    Remove { table: TableRef, detail: String },
    /// Another process held the table's lease (a maintenance pass working on it, another DROP)
    /// longer than a `DROP TABLE` waits.
    #[error("table {table} is busy: {source}; try again")]
    Busy {
        table: TableRef,
        #[source]
        source: Box<LeaseError>,
    },
    /// The table's lease could not be taken or kept (a store error, a malformed or lost row).
    #[error("table {table}: {source}")]
    Lease {
        table: TableRef,
        #[source]
        source: Box<LeaseError>,
    },
    #[error("table {table} already has an index named {index:?}")]
    IndexExists { table: TableRef, index: String },
    #[error("table {table} has no index named {index:?}")]
    NoSuchIndex { table: TableRef, index: String },
    /// An index that cannot be built on that column, or with those options.
    #[error("cannot index {table}: {detail}")]
    InvalidIndex { table: TableRef, detail: String },
    /// A restore to a version the table no longer has (maintenance removed it) or never had.
    #[error(
        "table {table} has no {wanted} to restore: {kept} (maintenance removes versions past its retention)"
    )]
    NoSuchVersion {
        table: TableRef,
        wanted: String,
        kept: String,
    },
    /// A column's encoding choice (its field metadata) that Lance cannot take: nothing written.
    #[error("cannot write {table}: {source}")]
    Encoding {
        table: TableRef,
        #[source]
        source: encoding::InvalidEncoding,
    },
    #[error("deleting the manifest rows of {table}: {source}")]
    Manifests {
        table: TableRef,
        #[source]
        source: StoreError,
    },
}

impl EngineError {
    /// A manifest-store failure on `table`, for `map_err`.
    pub fn manifests(table: &TableRef) -> impl FnOnce(StoreError) -> Self + '_ {
        move |source| EngineError::Manifests {
            table: table.clone(),
            source,
        }
    }

    /// A table's lease not taken (held by another: [`EngineError::Busy`]) or not kept.
    pub fn lease(table: &TableRef, source: LeaseError) -> Self {
        let table = table.clone();
        match source {
            source @ LeaseError::Held { .. } => EngineError::Busy {
                table,
                source: Box::new(source),
            },
            source => EngineError::Lease {
                table,
                source: Box::new(source),
            },
        }
    }
}

/// How long, and how often, an append retries against commits of *other* processes (pylance,
/// another metadata replica during a rollout). Lance's default, 30 s, is too short for a busy
/// table on a slow store; in-process commits never contend (see [`WriteEngine`]).
const COMMIT_RETRY_TIMEOUT: Duration = Duration::from_secs(300);
const COMMIT_MAX_RETRIES: u32 = 200;

/// How long a `DROP TABLE` waits for a maintenance pass working on the table.
pub const DROP_WAIT: Duration = Duration::from_secs(30);

/// How often a delete is found and committed again after losing to a rewrite of its
/// fragments (see [`WriteEngine::delete`]).
const DELETE_ATTEMPTS: u32 = 5;

/// A commit that must be planned again on the new version (Lance could not rebase it).
fn is_replannable(e: &EngineError) -> bool {
    matches!(
        e,
        EngineError::Lance {
            source: lance::Error::RetryableCommitConflict { .. },
            ..
        }
    )
}

/// The rows of one write as a stream (see [`WriteEngine::append_stream`]).
pub type RowStream = datafusion::physical_plan::SendableRecordBatchStream;

/// `rows` as the [`RowStream`] of a write with `schema`.
pub fn row_stream<S>(schema: SchemaRef, rows: S) -> RowStream
where
    S: futures::Stream<Item = datafusion::error::Result<RecordBatch>> + Send + 'static,
{
    Box::pin(datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(schema, rows))
}

/// `batches` as a [`RowStream`].
pub fn rows_of(schema: SchemaRef, batches: Vec<RecordBatch>) -> RowStream {
    row_stream(schema, futures::stream::iter(batches.into_iter().map(Ok)))
}

/// `rows`, counting what passes and keeping the first error it yields (the client's bad
/// data or a stopped client, which Lance would otherwise report as its own failure).
fn counted(
    rows: RowStream,
) -> (
    RowStream,
    Arc<std::sync::atomic::AtomicU64>,
    Arc<FirstFailure>,
) {
    use futures::TryStreamExt;
    let count = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let failure = Arc::new(Mutex::new(None));
    let (c, f) = (count.clone(), failure.clone());
    let schema = rows.schema();
    let rows = rows
        .inspect_ok(move |b| {
            c.fetch_add(b.num_rows() as u64, std::sync::atomic::Ordering::Relaxed);
        })
        .map_err(move |e| {
            let e = Arc::new(e);
            let mut slot = f.lock().unwrap_or_else(|p| p.into_inner());
            slot.get_or_insert_with(|| e.clone());
            datafusion::error::DataFusionError::External(Box::new(SharedError(e)))
        });
    (row_stream(schema, rows), count, failure)
}

/// An error kept by [`counted`] and handed on to Lance too.
#[derive(Debug)]
struct SharedError(Arc<datafusion::error::DataFusionError>);

impl std::fmt::Display for SharedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for SharedError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.0.as_ref())
    }
}

/// The first error a write's rows yielded.
type FirstFailure = Mutex<Option<Arc<datafusion::error::DataFusionError>>>;

fn rows_failure(failure: &FirstFailure) -> Option<EngineError> {
    failure
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
        .map(EngineError::Rows)
}

/// The data files of one write, written but not committed. It holds the table's in-process
/// commit lock, so nothing else commits to the table between the files and their commit;
/// dropping it uncommitted leaves the table as it was.
#[derive(Debug)]
pub struct Staged {
    table: TableRef,
    operation: &'static str,
    transaction: lance::dataset::transaction::Transaction,
    rows: u64,
    /// The rows a delete touches (Lance rebases it on other processes' commits with them).
    affected_rows: Option<RowAddrTreeMap>,
    _guard: tokio::sync::OwnedMutexGuard<()>,
}

/// What an append or delete did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Committed {
    /// The dataset version the commit created.
    pub version: u64,
    /// Rows appended or deleted.
    pub rows: u64,
}

/// Budgets of the Lance caches one engine shares across requests (Lance's defaults, 6 GiB and
/// 1 GiB, are sized for a machine of its own; a pod has a memory limit).
const INDEX_CACHE_BYTES: usize = 128 * 1024 * 1024;
const METADATA_CACHE_BYTES: usize = 64 * 1024 * 1024;

/// Reads Lance datasets of one warehouse through one manifest store.
///
/// Every dataset it opens shares one Lance [`Session`]: manifests, file metadata and indices
/// read by one request are there for the next. What it caches is immutable (a manifest is keyed
/// by its version and e-tag, data files by their unique names); which version is latest is
/// always asked of the manifest store, so a cached entry never hides a newer commit.
#[derive(Debug, Clone)]
pub struct Engine {
    warehouse: Warehouse,
    handler: Arc<dyn CommitHandler>,
    session: Arc<Session>,
}

/// How an engine reads local table files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LocalReads {
    /// Lance's own local store: every read on a blocking thread. Writers keep it (their
    /// writes, copies and removals are Lance's local file code).
    Lance,
    /// Reads the page cache holds on the calling thread (`local_reads.rs`): readers.
    CachedFirst,
}

/// An engine's Lance session: its caches of manifests, file metadata and indices.
fn new_session(reads: LocalReads) -> Arc<Session> {
    let registry = ObjectStoreRegistry::default();
    if reads == LocalReads::CachedFirst {
        registry.insert("file", Arc::new(local_reads::CachedFirstProvider));
    }
    Arc::new(Session::new(
        INDEX_CACHE_BYTES,
        METADATA_CACHE_BYTES,
        Arc::new(registry),
    ))
}

impl Engine {
    fn with_store(
        warehouse: Warehouse,
        store: Arc<dyn ExternalManifestStore>,
        reads: LocalReads,
    ) -> Self {
        let handler = Arc::new(ExternalManifestCommitHandler {
            external_manifest_store: store,
        });
        Self {
            warehouse,
            handler,
            session: new_session(reads),
        }
    }

    /// A read-only engine: its commit handler cannot write a manifest row.
    pub fn read_only(warehouse: Warehouse, manifests: ReadOnlyManifestStore) -> Self {
        Self::with_store(warehouse, Arc::new(manifests), LocalReads::CachedFirst)
    }

    pub fn warehouse(&self) -> &Warehouse {
        &self.warehouse
    }

    /// An engine over the same warehouse (and cache) that opens only a given version, by the
    /// path Lance names it at, without the manifest store: a distributed query's worker
    /// (engine/pinned.rs). Asking it for a latest version, or to commit, is refused.
    pub fn pinned_reader(&self) -> Self {
        Self {
            warehouse: self.warehouse.clone(),
            handler: Arc::new(pinned::PinnedReads),
            session: self.session.clone(),
        }
    }

    /// A worker's engine over `warehouse` alone (a worker process of `lake local`).
    pub fn pinned(warehouse: Warehouse) -> Self {
        Self {
            warehouse,
            handler: Arc::new(pinned::PinnedReads),
            session: new_session(LocalReads::CachedFirst),
        }
    }

    fn lance_err(
        operation: &'static str,
        table: &TableRef,
    ) -> impl FnOnce(lance::Error) -> EngineError {
        let table = table.clone();
        move |source| match source {
            lance::Error::DatasetNotFound { .. } | lance::Error::NotFound { .. } => {
                EngineError::NotFound(table)
            }
            lance::Error::DatasetAlreadyExists { .. } => EngineError::AlreadyExists(table),
            source => EngineError::Lance {
                operation,
                table,
                source,
            },
        }
    }

    fn write_params(&self, table: &TableRef, mode: WriteMode) -> WriteParams {
        WriteParams {
            mode,
            commit_handler: Some(self.handler.clone()),
            store_params: self.warehouse.store_params(table),
            session: Some(self.session.clone()),
            // Only maintenance removes files (`lake maintain`): a dataset configured for Lance's
            // auto-cleanup (say, by pylance) must not have old versions removed by a write,
            // under a running query and outside the retention.
            skip_auto_cleanup: true,
            ..Default::default()
        }
    }

    /// Opens a table at its latest version, or at `version`.
    pub async fn open(
        &self,
        table: &TableRef,
        version: Option<u64>,
    ) -> Result<Dataset, EngineError> {
        let mut builder = DatasetBuilder::from_uri(self.warehouse.uri(table))
            .with_commit_handler(self.handler.clone())
            .with_session(self.session.clone());
        if let Some(params) = self.warehouse.store_params(table) {
            builder = builder.with_store_params(params);
        }
        if let Some(version) = version {
            builder = builder.with_version(version);
        }
        // Lance trusts what it reads: a corrupt manifest has made it panic (an arithmetic
        // overflow). One damaged table is an error for that table, never a crash of the call.
        use futures::FutureExt;
        match std::panic::AssertUnwindSafe(builder.load())
            .catch_unwind()
            .await
        {
            Ok(loaded) => loaded.map_err(Self::lance_err("open", table)),
            Err(_) => Err(EngineError::Corrupt(table.clone())),
        }
    }

    /// Every version of a table, oldest first.
    pub async fn versions(&self, table: &TableRef) -> Result<Vec<u64>, EngineError> {
        let dataset = self.open(table, None).await?;
        let mut versions: Vec<u64> = dataset
            .versions()
            .await
            .map_err(Self::lance_err("list versions of", table))?
            .into_iter()
            .map(|v| v.version)
            .collect();
        // The listing reads the manifest files' directory; the latest commit is resolved
        // through the manifest store, and its file may still be on its way there (Lance copies
        // it from staging after the commit succeeded): it is a version all the same.
        let latest = dataset.version().version;
        if !versions.contains(&latest) {
            versions.push(latest);
        }
        versions.sort_unstable();
        Ok(versions)
    }

    /// The tables the warehouse layout holds (`<ns>/<table>.lance`), sorted.
    pub async fn list_tables(&self) -> Result<Vec<TableRef>, EngineError> {
        self.warehouse.list_tables().await
    }
}

/// The metadata role's engine: reads plus every write, each one Lance commit.
///
/// Commits to one table are serialised within the process: concurrent requests would otherwise
/// race each other through Lance's optimistic retry, redoing work and risking its retry budget.
/// Commits from other processes still conflict and are retried by Lance.
#[derive(Debug, Clone)]
pub struct WriteEngine {
    engine: Engine,
    manifests: ManifestStore,
    locks: Arc<Mutex<HashMap<TableRef, Arc<tokio::sync::Mutex<()>>>>>,
}

impl std::ops::Deref for WriteEngine {
    type Target = Engine;
    fn deref(&self) -> &Engine {
        &self.engine
    }
}

impl WriteEngine {
    pub fn new(warehouse: Warehouse, manifests: ManifestStore) -> Self {
        Self {
            engine: Engine::with_store(warehouse, Arc::new(manifests.clone()), LocalReads::Lance),
            manifests,
            locks: Arc::default(),
        }
    }

    /// Takes the maintenance lease of this warehouse's manifest store for `ttl`, if it is free.
    pub async fn maintenance_lease(
        &self,
        holder: String,
        ttl: Duration,
    ) -> Result<Lease, LeaseError> {
        self.manifests
            .lease(LeaseOf::Pass, holder, ttl, Duration::ZERO)
            .await
    }

    /// Takes `table`'s lease for `ttl`, waiting at most `wait` while another holds it: a
    /// maintenance pass holds it while it works on the table, and a `DROP TABLE` while it drops.
    pub async fn table_lease(
        &self,
        table: &TableRef,
        holder: String,
        ttl: Duration,
        wait: Duration,
    ) -> Result<Lease, LeaseError> {
        let of = LeaseOf::Table {
            base_uri: self.engine.warehouse.manifest_base_uri(table),
            table: table.to_string(),
        };
        self.manifests.lease(of, holder, ttl, wait).await
    }

    /// Holds the table's in-process commit lock until the guard drops.
    async fn lock(&self, table: &TableRef) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
            locks.entry(table.clone()).or_default().clone()
        };
        lock.lock_owned().await
    }

    /// A read-only view, e.g. for serving reads from the metadata role.
    pub fn reader(&self) -> &Engine {
        &self.engine
    }

    /// Creates a table with `schema` and its first rows in one commit (version 1).
    pub async fn create(
        &self,
        table: &TableRef,
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    ) -> Result<Committed, EngineError> {
        self.create_stream(table, rows_of(schema, batches)).await
    }

    /// Creates a table with the schema and rows of `rows`, streamed into one commit.
    pub async fn create_stream(
        &self,
        table: &TableRef,
        rows: RowStream,
    ) -> Result<Committed, EngineError> {
        let staged = self.stage(table, WriteMode::Create, rows).await?;
        self.commit(staged).await
    }

    /// Appends `batches` in one commit. Concurrent appends from other processes are retried by
    /// Lance (up to `COMMIT_RETRY_TIMEOUT`) and all land.
    pub async fn append(
        &self,
        table: &TableRef,
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    ) -> Result<Committed, EngineError> {
        self.append_stream(table, rows_of(schema, batches)).await
    }

    /// Appends `rows` in one commit, pulling them while the data files are written: memory
    /// holds Lance's write buffers, not the input (an `INSERT … SELECT`, an ingest or a
    /// `COPY INTO` of any size). A failing batch fails the write before anything is committed.
    pub async fn append_stream(
        &self,
        table: &TableRef,
        rows: RowStream,
    ) -> Result<Committed, EngineError> {
        let staged = self.stage(table, WriteMode::Append, rows).await?;
        self.commit(staged).await
    }

    /// Writes the data files that replace a table's rows (and schema) with `rows`, without
    /// committing them: the caller commits with [`WriteEngine::commit`] once whatever must agree
    /// with the new rows (the registry) has been updated.
    pub async fn stage_overwrite(
        &self,
        table: &TableRef,
        rows: RowStream,
    ) -> Result<Staged, EngineError> {
        self.stage(table, WriteMode::Overwrite, rows).await
    }

    /// Writes `rows` as data files for one commit in `mode`, holding the table's lock until the
    /// returned [`Staged`] is committed or dropped. A failing batch fails here, before any commit.
    async fn stage(
        &self,
        table: &TableRef,
        mode: WriteMode,
        rows: RowStream,
    ) -> Result<Staged, EngineError> {
        // A table's schema is written only here (an append takes the table's): this is where
        // its columns' encoding choices are checked, before waiting for the table's lock, and
        // get their hints.
        let rows = match mode {
            WriteMode::Create | WriteMode::Overwrite => {
                encoding::check(&rows.schema()).map_err(|source| EngineError::Encoding {
                    table: table.clone(),
                    source,
                })?;
                encoding::with_encoding_hints(rows)
            }
            WriteMode::Append => rows,
        };
        let guard = self.lock(table).await;
        let operation = match mode {
            WriteMode::Create => "create",
            WriteMode::Append => "append to",
            WriteMode::Overwrite => "overwrite",
        };
        if !matches!(mode, WriteMode::Create) {
            // Under the lock, so a DROP that got it first is seen: Lance's Append or Overwrite
            // on a missing dataset creates one, which would bring a dropped table back,
            // unregistered.
            self.engine.open(table, None).await?;
        }
        let uri = self.engine.warehouse.uri(table);
        let params = self.engine.write_params(table, mode);
        let (rows, count, failure) = counted(rows);
        let transaction = InsertBuilder::new(uri.as_str())
            .with_params(&params)
            .execute_uncommitted_stream(rows)
            .await
            .map_err(|e| {
                rows_failure(&failure).unwrap_or_else(|| Engine::lance_err(operation, table)(e))
            })?;
        Ok(Staged {
            table: table.clone(),
            operation,
            transaction,
            rows: count.load(std::sync::atomic::Ordering::Relaxed),
            affected_rows: None,
            _guard: guard,
        })
    }

    /// Commits staged data files, with our retry budget against other processes' commits.
    pub async fn commit(&self, staged: Staged) -> Result<Committed, EngineError> {
        let version = self
            .commit_transaction(
                &staged.table,
                staged.operation,
                staged.transaction,
                staged.affected_rows,
            )
            .await?;
        Ok(Committed {
            version,
            rows: staged.rows,
        })
    }

    /// Commits `transaction` (the caller holds the table's lock), returning the new version.
    async fn commit_transaction(
        &self,
        table: &TableRef,
        operation: &'static str,
        transaction: lance::dataset::transaction::Transaction,
        affected_rows: Option<RowAddrTreeMap>,
    ) -> Result<u64, EngineError> {
        let uri = self.engine.warehouse.uri(table);
        let mut commit = CommitBuilder::new(uri.as_str())
            .with_commit_handler(self.engine.handler.clone())
            .with_session(self.engine.session.clone())
            .with_retry_timeout(COMMIT_RETRY_TIMEOUT)
            .with_max_retries(COMMIT_MAX_RETRIES)
            // Only maintenance removes files (see `Engine::write_params`).
            .with_skip_auto_cleanup(true);
        if let Some(store_params) = self.engine.warehouse.store_params(table) {
            commit = commit.with_store_params(store_params);
        }
        if let Some(rows) = affected_rows {
            commit = commit.with_affected_rows(rows);
        }
        let dataset = commit
            .execute(transaction)
            .await
            .map_err(Engine::lance_err(operation, table))?;
        Ok(dataset.version().version)
    }

    /// Deletes the rows matching `predicate` (a planned expression, see the Flight service's
    /// `sql::delete`; `None`: every row) in one commit. Finding them — a scan, however often it
    /// is repeated — must end within `limit` of the call, or nothing is deleted; the commit
    /// itself is never cut short. A commit that
    /// cannot be rebased on one that rewrote the same fragments meanwhile (a compaction by
    /// maintenance) is found again on the new version and committed again.
    pub async fn delete(
        &self,
        table: &TableRef,
        predicate: Option<datafusion::logical_expr::Expr>,
        limit: Duration,
    ) -> Result<Committed, EngineError> {
        let _guard = self.lock(table).await;
        let predicate = predicate.unwrap_or_else(|| datafusion::logical_expr::lit(true));
        // One limit for every attempt: a delete that keeps losing to compactions stops too.
        let deadline = tokio::time::Instant::now() + limit;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let dataset = Arc::new(self.engine.open(table, None).await?);
            let found = tokio::time::timeout_at(
                deadline,
                DeleteBuilder::from_expr(dataset, predicate.clone()).execute_uncommitted(),
            )
            .await
            .map_err(|_| EngineError::Deadline {
                table: table.clone(),
                limit,
            })?
            .map_err(Engine::lance_err("delete from", table))?;
            match self
                .commit_transaction(table, "delete from", found.transaction, found.affected_rows)
                .await
            {
                Ok(version) => {
                    return Ok(Committed {
                        version,
                        rows: found.num_deleted_rows,
                    });
                }
                Err(e) if attempt < DELETE_ATTEMPTS && is_replannable(&e) => {
                    tracing::info!(%table, attempt, error = %e, "a delete lost to a rewrite of its fragments; finding its rows again");
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Removes a table's files and every one of its manifest rows (Lance itself never deletes
    /// rows, and stale rows would block re-creating the table). Idempotent.
    ///
    /// It holds the table's lease meanwhile, waiting up to [`DROP_WAIT`] for a maintenance pass
    /// working on the table: a pass that read the table before a `DROP` and removed files or
    /// rows after a `CREATE` of the same name would remove the new table's (its manifests have
    /// the same names).
    pub async fn drop_table(&self, table: &TableRef) -> Result<usize, EngineError> {
        let holder = format!("DROP TABLE {table} ({})", crate::manifest::holder());
        // The lease before the in-process lock, as a pass takes them: neither waits for the
        // other while holding what it needs.
        let lease = self
            .table_lease(table, holder, crate::manifest::LEASE_TTL, DROP_WAIT)
            .await
            .map_err(|e| EngineError::lease(table, e))?
            .keep_renewed();
        let dropped = self.drop_held(table, &lease).await;
        lease.release().await;
        dropped
    }

    async fn drop_held(&self, table: &TableRef, lease: &Renewed) -> Result<usize, EngineError> {
        let _guard = self.lock(table).await;
        self.engine.warehouse.remove(table).await?;
        // Lost while the files went (renewals failing for minutes): a pass may be on the table
        // now, and its commit would land after the rows went. DROP again (it is idempotent).
        lease.check().map_err(|e| EngineError::lease(table, e))?;
        let removed = self
            .manifests
            .delete_all(&self.engine.warehouse.manifest_base_uri(table))
            .await
            .map_err(EngineError::manifests(table));
        // A table created again under this name restarts at version 1. Manifests are told apart
        // by their e-tags, but Lance keys some entries (transactions read while committing) by
        // version alone: nothing of the dropped table may answer for the new one.
        self.engine.session.file_metadata_cache().clear().await;
        removed
    }
}

impl TableRef {
    pub fn new(namespace: NamespaceName, table: TableName) -> Self {
        Self { namespace, table }
    }
}
