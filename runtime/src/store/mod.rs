//! The MetaStore: a small async key-value interface over the two metadata tables, with a DynamoDB
//! backend (cloud) and an embedded, on-disk backend (the local lake, one file per authority).
//!
//! Reads and writes are separate traits: a holder of `Arc<dyn MetaRead>` (the query role) has no
//! write path at all, by type.

mod dynamo;
mod embedded;
mod item;

use std::fmt::Debug;

use async_trait::async_trait;

pub use dynamo::DynamoStore;
pub use embedded::EmbeddedStore;
pub use item::{Attributes, Item, Key, SortKey, Value};

/// The precondition of a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    /// Write unconditionally.
    Always,
    /// Only if no item has this key.
    NotExists,
    /// Only if an item has this key.
    Exists,
    /// Only if an item has this key and its [`REVISION_ATTR`] is this number: an optimistic
    /// update of a row others may update too (the maintenance lease, a namespace's drop mark).
    /// An item without the attribute is at revision 0.
    Revision(i64),
}

/// The attribute [`Condition::Revision`] compares.
pub const REVISION_ATTR: &str = "revision";

/// One page of a partition query.
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    pub items: Vec<Item>,
    /// Pass as `start_after` to get the next page; `None` when this was the last page.
    pub next: Option<SortKey>,
}

/// A consistent query of one partition, in sort-key order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryRequest {
    pub limit: usize,
    pub start_after: Option<SortKey>,
    pub descending: bool,
}

impl QueryRequest {
    pub fn first(limit: usize) -> Self {
        Self {
            limit,
            start_after: None,
            descending: false,
        }
    }
    pub fn last(limit: usize) -> Self {
        Self {
            limit,
            start_after: None,
            descending: true,
        }
    }
}

/// One write of a batch.
#[derive(Debug, Clone, PartialEq)]
pub enum WriteOp {
    Put(Item),
    Delete(Key),
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{store}: the condition of the write to {key} failed")]
    ConditionFailed { store: String, key: Key },
    #[error("{store}: its key schema is not the one expected ({detail})")]
    KeySchemaMismatch { store: String, detail: String },
    #[error("{store} does not exist")]
    Missing { store: String },
    #[error("{store}: access denied: {detail}")]
    AccessDenied { store: String, detail: String },
    #[error("{store} is open in another process; a local lake is served by one process")]
    Locked { store: String },
    #[error("{store}: item {key} is malformed: {detail}")]
    Corrupt {
        store: String,
        key: String,
        detail: String,
    },
    #[error("{store}: {source}")]
    Backend {
        store: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Reads: what every role may do.
#[async_trait]
pub trait MetaRead: Debug + Send + Sync {
    /// What this store is, for errors and logs ("DynamoDB table t", "embedded store /p").
    fn describe(&self) -> &str;
    /// A strongly consistent read of one item.
    async fn get(&self, key: &Key) -> Result<Option<Item>, StoreError>;
    /// A strongly consistent page of one partition.
    async fn query(&self, partition: &str, request: &QueryRequest) -> Result<Page, StoreError>;
}

/// Writes: only the metadata role (and provisioning) holds a `MetaStore`.
#[async_trait]
pub trait MetaStore: MetaRead {
    async fn put(&self, item: &Item, condition: Condition) -> Result<(), StoreError>;
    async fn delete(&self, key: &Key, condition: Condition) -> Result<(), StoreError>;
    /// Unconditional puts and deletes; all of them are applied when it returns `Ok`.
    async fn batch(&self, ops: &[WriteOp]) -> Result<(), StoreError>;
}

/// Every item of `partition`, page by page.
pub async fn query_all(
    store: &dyn MetaRead,
    partition: &str,
    page_size: usize,
) -> Result<Vec<Item>, StoreError> {
    let mut items = Vec::new();
    let mut request = QueryRequest::first(page_size);
    loop {
        let page = store.query(partition, &request).await?;
        items.extend(page.items);
        match page.next {
            Some(next) => request.start_after = Some(next),
            None => return Ok(items),
        }
    }
}
