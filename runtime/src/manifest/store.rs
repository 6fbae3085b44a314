//! `ExternalManifestStore` implementations: read-write for metadata, read-only for query.

use std::sync::Arc;

use async_trait::async_trait;
use lake_common::schema::{
    Authority, MANIFEST_COMMITTER_ATTR, MANIFEST_PATH_ATTR, MANIFEST_SIZE_ATTR,
};
use lance_table::io::commit::external_manifest::ExternalManifestStore;

use crate::store::{
    Condition, Item, Key, MetaRead, MetaStore, QueryRequest, SortKey, StoreError, Value, WriteOp,
};

/// Who wrote a row, in Lance's `committer` attribute.
const COMMITTER: &str = "lake-metadata";
/// When a row was written (ms since the epoch, the writer's clock; rewritten when the commit is
/// finalised, by whoever finalises it): at or after its version's commit, so maintenance knows
/// versions' ages without reading every manifest. Lance's own stores do not write it.
const COMMITTED_ATTR: &str = "committed_ms";
/// Rows deleted per round when a dataset is dropped.
const DEFAULT_PAGE_SIZE: usize = 500;

/// A write attempted through the read-only adapter. Returned (inside Lance's error) before any
/// MetaStore call is made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the query role is read-only: {operation} on manifests of {base_uri:?} refused; writes go to the metadata endpoint"
)]
pub struct ReadOnlyViolation {
    pub operation: &'static str,
    pub base_uri: String,
}

fn lance_err(e: StoreError) -> lance::Error {
    lance::Error::io_source(Box::new(e))
}

fn row_key(base_uri: &str, version: u64) -> Key {
    Key::new(base_uri, SortKey::N(version))
}

/// The reads both adapters share.
async fn get_path(kv: &dyn MetaRead, base_uri: &str, version: u64) -> lance::Result<String> {
    let item = kv
        .get(&row_key(base_uri, version))
        .await
        .map_err(lance_err)?
        .ok_or_else(|| {
            lance::Error::not_found(format!("manifest of {base_uri} version {version}"))
        })?;
    path_of(&item)
}

fn path_of(item: &Item) -> lance::Result<String> {
    item.string(MANIFEST_PATH_ATTR)
        .map(str::to_owned)
        .ok_or_else(|| lance::Error::io(format!("manifest row {} has no path", item.key)))
}

async fn latest(kv: &dyn MetaRead, base_uri: &str) -> lance::Result<Option<(u64, String)>> {
    let page = kv
        .query(base_uri, &QueryRequest::last(1))
        .await
        .map_err(lance_err)?;
    match page.items.first() {
        None => Ok(None),
        Some(item) => match item.key.sort {
            // Version 0 is never a Lance version (it is where markers live).
            SortKey::N(0) => Ok(None),
            SortKey::N(version) => Ok(Some((version, path_of(item)?))),
            SortKey::S(_) => Err(lance::Error::io(format!(
                "manifest row {} has a string version",
                item.key
            ))),
        },
    }
}

/// The read-write manifest store of the metadata role.
#[derive(Debug, Clone)]
pub struct ManifestStore {
    kv: Arc<dyn MetaStore>,
    page_size: usize,
}

impl ManifestStore {
    pub fn new(kv: Arc<dyn MetaStore>) -> Self {
        Self {
            kv,
            page_size: DEFAULT_PAGE_SIZE,
        }
    }

    /// Smaller pages for tests of multi-page deletes.
    pub fn with_page_size(mut self, page_size: usize) -> Self {
        self.page_size = page_size.max(1);
        self
    }

    /// Deletes every manifest row of a dataset, page by page, returning how many there were.
    /// Lance never deletes rows; stale rows would block recreating a table at the same path.
    pub async fn delete_all(&self, base_uri: &str) -> Result<usize, StoreError> {
        // The authority marker's and the leases' partitions are no dataset's.
        if base_uri == Authority::Manifests.marker_key().hash
            || base_uri == super::LEASE_PARTITION
            || base_uri.starts_with(super::TABLE_LEASE_PREFIX)
        {
            return Err(StoreError::Backend {
                store: self.kv.describe().to_owned(),
                source: format!("refusing to delete lake's own partition {base_uri:?}").into(),
            });
        }
        let mut deleted = 0;
        loop {
            // Always read the first page: the previous one is gone.
            let page = self
                .kv
                .query(base_uri, &QueryRequest::first(self.page_size))
                .await?;
            let ops: Vec<WriteOp> = page
                .items
                .iter()
                .map(|i| WriteOp::Delete(i.key.clone()))
                .collect();
            if ops.is_empty() {
                return Ok(deleted);
            }
            self.kv.batch(&ops).await?;
            deleted += ops.len();
        }
    }

    /// Takes the lease `of` (a row of this table) for `ttl`, waiting at most `wait` while
    /// another holds it.
    pub async fn lease(
        &self,
        of: super::LeaseOf,
        holder: String,
        ttl: std::time::Duration,
        wait: std::time::Duration,
    ) -> Result<super::Lease, super::LeaseError> {
        super::Lease::acquire_waiting(self.kv.clone(), of, holder, ttl, wait).await
    }

    /// Deletes the rows of `versions` of a dataset (versions maintenance removed), never its
    /// latest row, returning how many it deleted.
    pub async fn delete_versions(
        &self,
        base_uri: &str,
        versions: &[u64],
    ) -> Result<usize, StoreError> {
        let latest = latest(self.kv.as_ref(), base_uri)
            .await
            .map_err(|e| StoreError::Backend {
                store: self.kv.describe().to_owned(),
                source: Box::new(e),
            })?
            .map(|(version, _)| version);
        let ops: Vec<WriteOp> = versions
            .iter()
            .filter(|v| **v >= 1 && Some(**v) != latest && latest.is_some_and(|l| **v < l))
            .map(|v| WriteOp::Delete(row_key(base_uri, *v)))
            .collect();
        for chunk in ops.chunks(self.page_size) {
            self.kv.batch(chunk).await?;
        }
        Ok(ops.len())
    }

    /// Every version row of a dataset with the time it was written, if it says (rows of Lance's
    /// own writers do not), oldest first.
    pub async fn committed_times(
        &self,
        base_uri: &str,
    ) -> Result<Vec<(u64, Option<i64>)>, StoreError> {
        let rows = crate::store::query_all(self.kv.as_ref(), base_uri, self.page_size).await?;
        Ok(rows
            .iter()
            .filter_map(|row| match row.key.sort {
                SortKey::N(version) if version >= 1 => Some((version, row.number(COMMITTED_ATTR))),
                _ => None,
            })
            .collect())
    }

    fn row(base_uri: &str, version: u64, path: &str, size: u64) -> Item {
        let mut row = Item::new(row_key(base_uri, version));
        // A clock before 1970 writes no time (the version is aged by its manifest), never 0.
        if let Ok(now) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            let ms = i64::try_from(now.as_millis()).unwrap_or(i64::MAX);
            row = row.with(COMMITTED_ATTR, Value::N(ms));
        }
        row.with(MANIFEST_PATH_ATTR, Value::S(path.to_owned()))
            .with(MANIFEST_COMMITTER_ATTR, Value::S(COMMITTER.to_owned()))
            .with(
                MANIFEST_SIZE_ATTR,
                Value::N(i64::try_from(size).unwrap_or(i64::MAX)),
            )
    }
}

#[async_trait]
impl ExternalManifestStore for ManifestStore {
    async fn get(&self, base_uri: &str, version: u64) -> lance::Result<String> {
        get_path(self.kv.as_ref(), base_uri, version).await
    }

    async fn get_latest_version(&self, base_uri: &str) -> lance::Result<Option<(u64, String)>> {
        latest(self.kv.as_ref(), base_uri).await
    }

    async fn put_if_not_exists(
        &self,
        base_uri: &str,
        version: u64,
        path: &str,
        size: u64,
        _e_tag: Option<String>,
    ) -> lance::Result<()> {
        self.kv
            .put(
                &Self::row(base_uri, version, path, size),
                Condition::NotExists,
            )
            .await
            .map_err(lance_err)
    }

    async fn put_if_exists(
        &self,
        base_uri: &str,
        version: u64,
        path: &str,
        size: u64,
        _e_tag: Option<String>,
    ) -> lance::Result<()> {
        self.kv
            .put(&Self::row(base_uri, version, path, size), Condition::Exists)
            .await
            .map_err(lance_err)
    }

    async fn delete(&self, base_uri: &str) -> lance::Result<()> {
        self.delete_all(base_uri)
            .await
            .map(|_| ())
            .map_err(lance_err)
    }
}

/// The query role's manifest store. It holds only a [`MetaRead`], so it has no way to write;
/// every mutating call is refused with a [`ReadOnlyViolation`] before touching anything.
#[derive(Debug, Clone)]
pub struct ReadOnlyManifestStore {
    kv: Arc<dyn MetaRead>,
}

impl ReadOnlyManifestStore {
    pub fn new(kv: Arc<dyn MetaRead>) -> Self {
        Self { kv }
    }

    fn refuse(operation: &'static str, base_uri: &str) -> lance::Error {
        lance::Error::not_supported_source(Box::new(ReadOnlyViolation {
            operation,
            base_uri: base_uri.to_owned(),
        }))
    }
}

/// Whether a manifest row points at a finished manifest (`…/N.manifest`), not at a staged one
/// (`…/N.manifest-<uuid>`) left by a writer that has not finalised its commit yet (or died).
fn finished(path: &str) -> bool {
    path.ends_with(".manifest")
}

/// How many of the newest rows the read-only store looks through for a finished one.
const STAGED_LOOKBACK: usize = 16;

/// The newest version whose manifest is finished. A reader that met a staged row would
/// finalise it (copy the manifest, rewrite the row), which the query role may not do: it reads
/// the last finished version instead, and metadata finalises the rest (it does on start-up and
/// periodically, see `MetadataContext::finalise_staged`).
async fn latest_finished(
    kv: &dyn MetaRead,
    base_uri: &str,
) -> lance::Result<Option<(u64, String)>> {
    let page = kv
        .query(base_uri, &QueryRequest::last(STAGED_LOOKBACK))
        .await
        .map_err(lance_err)?;
    for item in &page.items {
        match item.key.sort {
            SortKey::N(0) => return Ok(None),
            SortKey::N(version) => {
                let path = path_of(item)?;
                if finished(&path) {
                    return Ok(Some((version, path)));
                }
                tracing::debug!(base_uri, version, "skipping a staged manifest row");
            }
            SortKey::S(_) => {
                return Err(lance::Error::io(format!(
                    "manifest row {} has a string version",
                    item.key
                )));
            }
        }
    }
    if page.items.is_empty() {
        Ok(None)
    } else {
        Err(lance::Error::io(format!(
            "the newest {} manifest rows of {base_uri} are all staged (unfinished commits); the \
             metadata role finalises them",
            page.items.len()
        )))
    }
}

#[async_trait]
impl ExternalManifestStore for ReadOnlyManifestStore {
    /// A finished version only: reading a staged one (time travel into a commit in progress,
    /// or one a dead writer left) would finalise it, which is a write.
    async fn get(&self, base_uri: &str, version: u64) -> lance::Result<String> {
        let path = get_path(self.kv.as_ref(), base_uri, version).await?;
        if !finished(&path) {
            return Err(lance::Error::not_found(format!(
                "version {version} of {base_uri} is not finished (a commit in progress, or one \
                 the metadata role has yet to finalise)"
            )));
        }
        Ok(path)
    }

    async fn get_latest_version(&self, base_uri: &str) -> lance::Result<Option<(u64, String)>> {
        latest_finished(self.kv.as_ref(), base_uri).await
    }

    async fn put_if_not_exists(
        &self,
        base_uri: &str,
        _version: u64,
        _path: &str,
        _size: u64,
        _e_tag: Option<String>,
    ) -> lance::Result<()> {
        Err(Self::refuse("put_if_not_exists", base_uri))
    }

    async fn put_if_exists(
        &self,
        base_uri: &str,
        _version: u64,
        _path: &str,
        _size: u64,
        _e_tag: Option<String>,
    ) -> lance::Result<()> {
        Err(Self::refuse("put_if_exists", base_uri))
    }

    async fn delete(&self, base_uri: &str) -> lance::Result<()> {
        Err(Self::refuse("delete", base_uri))
    }

    async fn forget_version(
        &self,
        base_uri: &str,
        _version: u64,
        _identity: &str,
    ) -> lance::Result<()> {
        Err(Self::refuse("forget_version", base_uri))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{Lease, LeaseOf};
    use crate::store::EmbeddedStore;

    /// Dropping a dataset deletes its partition's rows; lake's own partitions (the marker's, the
    /// leases') are no dataset's, and are refused whatever asks.
    #[tokio::test]
    async fn lakes_own_partitions_are_never_deleted_as_a_dataset() {
        let dir = tempfile::tempdir().unwrap();
        let kv: Arc<dyn MetaStore> =
            Arc::new(EmbeddedStore::open(&dir.path().join("m.redb"), true).unwrap());
        let store = ManifestStore::new(kv.clone());
        let ttl = std::time::Duration::from_secs(60);
        let of = LeaseOf::Table {
            base_uri: "wh/b/t.lance".into(),
            table: "b.t".into(),
        };
        let lease = Lease::acquire(kv.clone(), of, "a pass".into(), ttl)
            .await
            .unwrap();
        for partition in [
            "__lake__/authority",
            crate::manifest::LEASE_PARTITION,
            "__lake__/table-lease/wh/b/t.lance",
        ] {
            let refused = store.delete_all(partition).await.unwrap_err().to_string();
            assert!(refused.contains("refusing"), "{partition}: {refused}");
        }
        // The lease is still there, still its holder's.
        lease.release().await.unwrap();
    }
}
