//! The MetaStore in a local redb file: crash-safe (every write is one durable transaction), one
//! file per authority. A file is opened once per process and shared, because redb refuses a second
//! open; another process holding it gets a clear `Locked` error.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use async_trait::async_trait;
use redb::{Database, DatabaseError, ReadableDatabase, ReadableTable, TableDefinition};

use super::{
    Attributes, Condition, Item, Key, MetaRead, MetaStore, Page, QueryRequest, SortKey, StoreError,
    WriteOp,
};

/// (partition, encoded sort key) → JSON attributes.
const ITEMS: TableDefinition<(&str, &[u8]), &[u8]> = TableDefinition::new("items");

#[derive(Debug, Clone)]
pub struct EmbeddedStore {
    db: Arc<Database>,
    describe: String,
}

fn open_files() -> &'static Mutex<HashMap<PathBuf, Weak<Database>>> {
    static OPEN: OnceLock<Mutex<HashMap<PathBuf, Weak<Database>>>> = OnceLock::new();
    OPEN.get_or_init(Default::default)
}

impl EmbeddedStore {
    /// Opens the store at `path`, creating the file (and its directory) if `create` is set.
    /// Without `create` a missing file is `StoreError::Missing` and nothing is written to disk.
    pub fn open(path: &Path, create: bool) -> Result<Self, StoreError> {
        let describe = format!("embedded store {}", path.display());
        let backend = |e: Box<dyn std::error::Error + Send + Sync>| StoreError::Backend {
            store: describe.clone(),
            source: e,
        };
        if !create && !path.exists() {
            return Err(StoreError::Missing { store: describe });
        }
        if create && let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| backend(e.into()))?;
        }
        let canonical = if path.exists() {
            path.canonicalize().map_err(|e| backend(e.into()))?
        } else {
            path.to_path_buf()
        };
        let mut open = open_files().lock().unwrap_or_else(|p| p.into_inner());
        if let Some(db) = open.get(&canonical).and_then(Weak::upgrade) {
            return Ok(Self { db, describe });
        }
        let result = if create {
            Database::create(path)
        } else {
            Database::open(path)
        };
        let db = match result {
            Ok(db) => Arc::new(db),
            Err(DatabaseError::DatabaseAlreadyOpen) => {
                return Err(StoreError::Locked { store: describe });
            }
            Err(e) => return Err(backend(e.into())),
        };
        let canonical = path.canonicalize().map_err(|e| backend(e.into()))?;
        open.insert(canonical, Arc::downgrade(&db));
        Ok(Self { db, describe })
    }

    fn backend(&self, e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> StoreError {
        StoreError::Backend {
            store: self.describe.clone(),
            source: e.into(),
        }
    }

    /// Runs blocking redb work off the async runtime.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Database, &str) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let db = self.db.clone();
        let describe = self.describe.clone();
        tokio::task::spawn_blocking(move || f(&db, &describe))
            .await
            .map_err(|e| self.backend(e))?
    }
}

/// Order-preserving sort-key bytes: numbers as tagged big-endian, strings as tagged UTF-8.
fn encode_sort(sort: &SortKey) -> Vec<u8> {
    match sort {
        SortKey::N(n) => {
            let mut v = vec![0u8];
            v.extend_from_slice(&n.to_be_bytes());
            v
        }
        SortKey::S(s) => {
            let mut v = vec![1u8];
            v.extend_from_slice(s.as_bytes());
            v
        }
    }
}

fn decode_sort(store: &str, bytes: &[u8]) -> Result<SortKey, StoreError> {
    let corrupt = || StoreError::Corrupt {
        store: store.to_owned(),
        key: format!("{bytes:?}"),
        detail: "undecodable sort key".into(),
    };
    match bytes.split_first() {
        Some((0, rest)) => Ok(SortKey::N(u64::from_be_bytes(
            rest.try_into().map_err(|_| corrupt())?,
        ))),
        Some((1, rest)) => Ok(SortKey::S(
            String::from_utf8(rest.to_vec()).map_err(|_| corrupt())?,
        )),
        _ => Err(corrupt()),
    }
}

fn decode_item(
    store: &str,
    partition: &str,
    sort: &[u8],
    value: &[u8],
) -> Result<Item, StoreError> {
    let key = Key::new(partition, decode_sort(store, sort)?);
    let attributes: Attributes =
        serde_json::from_slice(value).map_err(|e| StoreError::Corrupt {
            store: store.to_owned(),
            key: key.to_string(),
            detail: e.to_string(),
        })?;
    Ok(Item { key, attributes })
}

fn redb_err(store: &str, e: impl Into<redb::Error>) -> StoreError {
    StoreError::Backend {
        store: store.to_owned(),
        source: Box::new(e.into()),
    }
}

#[async_trait]
impl MetaRead for EmbeddedStore {
    fn describe(&self) -> &str {
        &self.describe
    }

    async fn get(&self, key: &Key) -> Result<Option<Item>, StoreError> {
        let key = key.clone();
        self.blocking(move |db, store| {
            let txn = db.begin_read().map_err(|e| redb_err(store, e))?;
            let table = match txn.open_table(ITEMS) {
                Ok(t) => t,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
                Err(e) => return Err(redb_err(store, e)),
            };
            let sort = encode_sort(&key.sort);
            let found = table
                .get((key.partition.as_str(), sort.as_slice()))
                .map_err(|e| redb_err(store, e))?;
            found
                .map(|v| decode_item(store, &key.partition, &sort, v.value()))
                .transpose()
        })
        .await
    }

    async fn query(&self, partition: &str, request: &QueryRequest) -> Result<Page, StoreError> {
        let partition = partition.to_owned();
        let request = request.clone();
        self.blocking(move |db, store| {
            let txn = db.begin_read().map_err(|e| redb_err(store, e))?;
            let table = match txn.open_table(ITEMS) {
                Ok(t) => t,
                Err(redb::TableError::TableDoesNotExist(_)) => {
                    return Ok(Page {
                        items: vec![],
                        next: None,
                    });
                }
                Err(e) => return Err(redb_err(store, e)),
            };
            let p = partition.as_str();
            let start = request.start_after.as_ref().map(encode_sort);
            // All sort keys of a partition lie in [(p, []), (p, [0xff])): tags are 0 and 1.
            let lo: (&str, &[u8]) = (p, &[]);
            let hi: (&str, &[u8]) = (p, &[0xff]);
            let range = table.range(lo..hi).map_err(|e| redb_err(store, e))?;
            let limit = request.limit.max(1);
            let mut items = Vec::new();
            let mut more = false;
            let mut push = |entry: Result<_, redb::StorageError>| -> Result<bool, StoreError> {
                let (k, v): (redb::AccessGuard<(&str, &[u8])>, redb::AccessGuard<&[u8]>) =
                    entry.map_err(|e| redb_err(store, e))?;
                let (_, sort) = k.value();
                if let Some(start) = &start {
                    let skip = if request.descending {
                        sort >= start.as_slice()
                    } else {
                        sort <= start.as_slice()
                    };
                    if skip {
                        return Ok(true);
                    }
                }
                if items.len() == limit {
                    more = true;
                    return Ok(false);
                }
                items.push(decode_item(store, p, sort, v.value())?);
                Ok(true)
            };
            if request.descending {
                for entry in range.rev() {
                    if !push(entry)? {
                        break;
                    }
                }
            } else {
                for entry in range {
                    if !push(entry)? {
                        break;
                    }
                }
            }
            let next = if more {
                items.last().map(|i| i.key.sort.clone())
            } else {
                None
            };
            Ok(Page { items, next })
        })
        .await
    }
}

#[async_trait]
impl MetaStore for EmbeddedStore {
    async fn put(&self, item: &Item, condition: Condition) -> Result<(), StoreError> {
        let item = item.clone();
        self.blocking(move |db, store| {
            let txn = db.begin_write().map_err(|e| redb_err(store, e))?;
            {
                let mut table = txn.open_table(ITEMS).map_err(|e| redb_err(store, e))?;
                let sort = encode_sort(&item.key.sort);
                let k = (item.key.partition.as_str(), sort.as_slice());
                let existing = table.get(k).map_err(|e| redb_err(store, e))?;
                let holds = condition_holds(condition, existing.map(|v| v.value().to_vec()));
                if !holds {
                    return Err(StoreError::ConditionFailed {
                        store: store.to_owned(),
                        key: item.key.clone(),
                    });
                }
                let value =
                    serde_json::to_vec(&item.attributes).map_err(|e| StoreError::Backend {
                        store: store.to_owned(),
                        source: Box::new(e),
                    })?;
                table
                    .insert(k, value.as_slice())
                    .map_err(|e| redb_err(store, e))?;
            }
            txn.commit().map_err(|e| redb_err(store, e))
        })
        .await
    }

    async fn delete(&self, key: &Key, condition: Condition) -> Result<(), StoreError> {
        let key = key.clone();
        self.blocking(move |db, store| {
            let txn = db.begin_write().map_err(|e| redb_err(store, e))?;
            {
                let mut table = txn.open_table(ITEMS).map_err(|e| redb_err(store, e))?;
                let sort = encode_sort(&key.sort);
                let removed = table
                    .remove((key.partition.as_str(), sort.as_slice()))
                    .map_err(|e| redb_err(store, e))?
                    .map(|v| v.value().to_vec());
                if !condition_holds(condition, removed) {
                    // Dropping the transaction without commit rolls the removal back.
                    return Err(StoreError::ConditionFailed {
                        store: store.to_owned(),
                        key: key.clone(),
                    });
                }
            }
            txn.commit().map_err(|e| redb_err(store, e))
        })
        .await
    }

    async fn batch(&self, ops: &[WriteOp]) -> Result<(), StoreError> {
        let ops = ops.to_vec();
        self.blocking(move |db, store| {
            let txn = db.begin_write().map_err(|e| redb_err(store, e))?;
            {
                let mut table = txn.open_table(ITEMS).map_err(|e| redb_err(store, e))?;
                for op in &ops {
                    match op {
                        WriteOp::Put(item) => {
                            let sort = encode_sort(&item.key.sort);
                            let value = serde_json::to_vec(&item.attributes).map_err(|e| {
                                StoreError::Backend {
                                    store: store.to_owned(),
                                    source: Box::new(e),
                                }
                            })?;
                            table
                                .insert(
                                    (item.key.partition.as_str(), sort.as_slice()),
                                    value.as_slice(),
                                )
                                .map_err(|e| redb_err(store, e))?;
                        }
                        WriteOp::Delete(key) => {
                            let sort = encode_sort(&key.sort);
                            table
                                .remove((key.partition.as_str(), sort.as_slice()))
                                .map_err(|e| redb_err(store, e))?;
                        }
                    }
                }
            }
            txn.commit().map_err(|e| redb_err(store, e))
        })
        .await
    }
}

/// Whether `condition` holds for the stored value of the key (`None`: no item).
fn condition_holds(condition: Condition, existing: Option<Vec<u8>>) -> bool {
    match condition {
        Condition::Always => true,
        Condition::NotExists => existing.is_none(),
        Condition::Exists => existing.is_some(),
        Condition::Revision(revision) => existing
            .and_then(|bytes| serde_json::from_slice::<Attributes>(&bytes).ok())
            .is_some_and(|attributes| match attributes.get(super::REVISION_ATTR) {
                Some(value) => value == &super::Value::N(revision),
                None => revision == 0,
            }),
    }
}
