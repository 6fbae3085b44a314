//! The catalog registry: namespaces and tables over the MetaStore, every write conditional.
//!
//! Layout (single table): `NAMESPACES`/`<ns>` for each namespace, `NS#<ns>`/`TABLE#<table>` for
//! each table, and the authority marker. Only the metadata role holds a `Registry`.

mod names;

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use arrow::datatypes::Schema;
use arrow::ipc::convert::{IpcSchemaEncoder, fb_to_schema};
use arrow::ipc::root_as_schema;
use lake_common::schema::Authority;

use crate::manifest::{AuthorityError, verify_marker};
use crate::store::{
    Condition, Item, Key, MetaStore, REVISION_ATTR, SortKey, StoreError, Value, query_all,
};

pub use names::{MAX_NAME_LEN, NameError, NamespaceName, TableName};

const NAMESPACES: &str = "NAMESPACES";
const PAGE: usize = 500;

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error(transparent)]
    Name(#[from] NameError),
    #[error("namespace {0} already exists")]
    NamespaceExists(NamespaceName),
    #[error("namespace {0} does not exist")]
    NoSuchNamespace(NamespaceName),
    #[error("namespace {0} is not empty: drop its tables first")]
    NamespaceNotEmpty(NamespaceName),
    #[error("namespace {0} is being dropped by another statement: try again")]
    NamespaceBeingDropped(NamespaceName),
    #[error("table {0}.{1} already exists")]
    TableExists(NamespaceName, TableName),
    #[error("table {0}.{1} does not exist")]
    NoSuchTable(NamespaceName, TableName),
    #[error("table {0}.{1} has an unreadable record: {2}")]
    Corrupt(NamespaceName, TableName, String),
    #[error(transparent)]
    Authority(#[from] AuthorityError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A registered table.
#[derive(Debug, Clone, PartialEq)]
pub struct TableEntry {
    pub namespace: NamespaceName,
    pub name: TableName,
    /// The dataset's URI (`s3://…/<ns>/<table>.lance` or a local path).
    pub location: String,
    pub schema: Arc<Schema>,
    /// `key=value` properties, as JSON.
    pub properties: serde_json::Map<String, serde_json::Value>,
    pub created_ms: i64,
    pub updated_ms: i64,
}

#[derive(Debug, Clone)]
pub struct Registry {
    kv: Arc<dyn MetaStore>,
}

/// Whether a namespace takes tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Openness {
    Open,
    /// A drop is under way: marked less than [`STALE_DROP_MS`] ago (an older mark is a drop
    /// that died half-way, and is ignored).
    Dropping,
}

fn openness(namespace: &Item) -> Openness {
    match namespace.number(DROPPING) {
        Some(marked) if now_ms().saturating_sub(marked) <= STALE_DROP_MS => Openness::Dropping,
        _ => Openness::Open,
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or_default()
}

/// The namespace attribute that marks a drop under way (its time, ms since the epoch).
const DROPPING: &str = "dropping_ms";
/// A drop mark older than this is a drop that died between its steps (a drop's steps take
/// moments: a listing of an empty namespace and a delete).
const STALE_DROP_MS: i64 = 5 * 60 * 1000;

fn ns_key(ns: &NamespaceName) -> Key {
    Key::new(NAMESPACES, SortKey::S(ns.to_string()))
}

fn table_partition(ns: &NamespaceName) -> String {
    format!("NS#{ns}")
}

fn table_key(ns: &NamespaceName, table: &TableName) -> Key {
    Key::new(table_partition(ns), SortKey::S(format!("TABLE#{table}")))
}

impl Registry {
    /// Opens the registry after checking its marker names the registry authority of `cluster`.
    pub async fn open(kv: Arc<dyn MetaStore>, cluster: &str) -> Result<Self, CatalogError> {
        verify_marker(kv.as_ref(), Authority::Registry, cluster).await?;
        Ok(Self { kv })
    }

    pub async fn create_namespace(&self, ns: &NamespaceName) -> Result<(), CatalogError> {
        let item = Item::new(ns_key(ns)).with("created_ms", Value::N(now_ms()));
        match self.kv.put(&item, Condition::NotExists).await {
            Err(StoreError::ConditionFailed { .. }) => {
                Err(CatalogError::NamespaceExists(ns.clone()))
            }
            other => Ok(other?),
        }
    }

    pub async fn namespace_exists(&self, ns: &NamespaceName) -> Result<bool, CatalogError> {
        Ok(self.kv.get(&ns_key(ns)).await?.is_some())
    }

    pub async fn list_namespaces(&self) -> Result<Vec<NamespaceName>, CatalogError> {
        query_all(self.kv.as_ref(), NAMESPACES, PAGE)
            .await?
            .into_iter()
            .filter_map(|item| match item.key.sort {
                SortKey::S(s) => Some(NamespaceName::parse(&s).map_err(CatalogError::from)),
                SortKey::N(_) => None,
            })
            .collect()
    }

    /// Removes an empty namespace, isolated from a concurrent [`Self::create_table`] in it:
    /// the namespace is first marked as being dropped, then its tables are listed. A create
    /// registers its table, then reads the namespace (withdrawing if it is marked or gone).
    /// Each side writes before it reads, so one of them sees the other: either the create
    /// withdraws, or this drop lists its table and refuses. Never a table under a removed
    /// namespace. One drop holds the mark at a time (a second is refused while it is fresh),
    /// and each of its later writes is conditional on the mark still being its own.
    pub async fn drop_namespace(&self, ns: &NamespaceName) -> Result<(), CatalogError> {
        let mark = self.mark_dropping(ns).await?;
        self.finish_drop(ns, mark).await
    }

    /// The first step of a drop: the namespace marked (a create sees it and withdraws).
    /// Returns the mark's revision, which the drop's later writes are conditional on.
    async fn mark_dropping(&self, ns: &NamespaceName) -> Result<i64, CatalogError> {
        let item = self
            .kv
            .get(&ns_key(ns))
            .await?
            .ok_or_else(|| CatalogError::NoSuchNamespace(ns.clone()))?;
        if openness(&item) == Openness::Dropping {
            return Err(CatalogError::NamespaceBeingDropped(ns.clone()));
        }
        // A namespace never revised has no revision attribute: revision 0.
        let revision = item.number(REVISION_ATTR).unwrap_or(0);
        let marked = item
            .with(DROPPING, Value::N(now_ms()))
            .with(REVISION_ATTR, Value::N(revision + 1));
        match self.kv.put(&marked, Condition::Revision(revision)).await {
            Err(StoreError::ConditionFailed { .. }) => Err(self.lost_the_mark(ns).await),
            Err(e) => Err(e.into()),
            Ok(()) => Ok(revision + 1),
        }
    }

    /// The second step: removed if it holds no table; unmarked and refused if it does. Both
    /// writes are conditional on `mark` (a drop that outlived its mark changes nothing).
    async fn finish_drop(&self, ns: &NamespaceName, mark: i64) -> Result<(), CatalogError> {
        if !self.list_tables(ns).await?.is_empty() {
            if let Some(mut item) = self.kv.get(&ns_key(ns)).await? {
                item.attributes.remove(DROPPING);
                let item = item.with(REVISION_ATTR, Value::N(mark + 1));
                match self.kv.put(&item, Condition::Revision(mark)).await {
                    // Another drop took over a stale mark: the mark is its to lift.
                    Err(StoreError::ConditionFailed { .. }) | Ok(()) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            return Err(CatalogError::NamespaceNotEmpty(ns.clone()));
        }
        match self.kv.delete(&ns_key(ns), Condition::Revision(mark)).await {
            Err(StoreError::ConditionFailed { .. }) => Err(self.lost_the_mark(ns).await),
            other => Ok(other?),
        }
    }

    /// Why a write conditional on a drop's mark failed: the namespace is gone, or another
    /// drop marked it.
    async fn lost_the_mark(&self, ns: &NamespaceName) -> CatalogError {
        match self.kv.get(&ns_key(ns)).await {
            Ok(None) => CatalogError::NoSuchNamespace(ns.clone()),
            Ok(Some(_)) => CatalogError::NamespaceBeingDropped(ns.clone()),
            Err(e) => e.into(),
        }
    }

    /// Whether the namespace takes new tables: it exists, and no drop of it is under way.
    async fn open_for_tables(&self, ns: &NamespaceName) -> Result<(), CatalogError> {
        match self.kv.get(&ns_key(ns)).await?.as_ref().map(openness) {
            None => Err(CatalogError::NoSuchNamespace(ns.clone())),
            Some(Openness::Dropping) => Err(CatalogError::NamespaceBeingDropped(ns.clone())),
            Some(Openness::Open) => Ok(()),
        }
    }

    /// Registers a table; its namespace must exist, and not be being dropped (see
    /// [`Self::drop_namespace`]).
    pub async fn create_table(&self, entry: &TableEntry) -> Result<(), CatalogError> {
        self.register_table(entry).await?;
        self.confirm_table(entry).await
    }

    /// The first step of a create: the table's record written, if its namespace is open.
    async fn register_table(&self, entry: &TableEntry) -> Result<(), CatalogError> {
        self.open_for_tables(&entry.namespace).await?;
        let item = item_from(entry);
        match self.kv.put(&item, Condition::NotExists).await {
            Err(StoreError::ConditionFailed { .. }) => Err(CatalogError::TableExists(
                entry.namespace.clone(),
                entry.name.clone(),
            )),
            other => Ok(other?),
        }
    }

    /// The second step: the namespace read again; the record withdrawn if a drop began.
    async fn confirm_table(&self, entry: &TableEntry) -> Result<(), CatalogError> {
        let closed = match self.open_for_tables(&entry.namespace).await {
            Ok(()) => return Ok(()),
            Err(
                closed
                @ (CatalogError::NoSuchNamespace(_) | CatalogError::NamespaceBeingDropped(_)),
            ) => closed,
            Err(e) => return Err(e),
        };
        self.drop_table(&entry.namespace, &entry.name).await?;
        Err(closed)
    }

    /// Replaces an existing table's record (schema or properties changed).
    pub async fn update_table(&self, entry: &TableEntry) -> Result<(), CatalogError> {
        let mut entry = entry.clone();
        entry.updated_ms = now_ms();
        match self.kv.put(&item_from(&entry), Condition::Exists).await {
            Err(StoreError::ConditionFailed { .. }) => {
                Err(CatalogError::NoSuchTable(entry.namespace, entry.name))
            }
            other => Ok(other?),
        }
    }

    pub async fn get_table(
        &self,
        ns: &NamespaceName,
        table: &TableName,
    ) -> Result<TableEntry, CatalogError> {
        let item = self
            .kv
            .get(&table_key(ns, table))
            .await?
            .ok_or_else(|| CatalogError::NoSuchTable(ns.clone(), table.clone()))?;
        entry_from(ns, table, &item)
    }

    pub async fn list_tables(&self, ns: &NamespaceName) -> Result<Vec<TableEntry>, CatalogError> {
        let items = query_all(self.kv.as_ref(), &table_partition(ns), PAGE).await?;
        items
            .iter()
            .filter_map(|item| match &item.key.sort {
                SortKey::S(s) => s.strip_prefix("TABLE#").map(|t| (t.to_owned(), item)),
                SortKey::N(_) => None,
            })
            .map(|(name, item)| entry_from(ns, &TableName::parse(&name)?, item))
            .collect()
    }

    pub async fn drop_table(
        &self,
        ns: &NamespaceName,
        table: &TableName,
    ) -> Result<(), CatalogError> {
        match self
            .kv
            .delete(&table_key(ns, table), Condition::Exists)
            .await
        {
            Err(StoreError::ConditionFailed { .. }) => {
                Err(CatalogError::NoSuchTable(ns.clone(), table.clone()))
            }
            other => Ok(other?),
        }
    }
}

fn item_from(entry: &TableEntry) -> Item {
    let schema = IpcSchemaEncoder::new()
        .schema_to_fb(&entry.schema)
        .finished_data()
        .to_vec();
    Item::new(table_key(&entry.namespace, &entry.name))
        .with("location", Value::S(entry.location.clone()))
        .with("schema", Value::B(schema))
        .with(
            "properties",
            Value::S(serde_json::Value::Object(entry.properties.clone()).to_string()),
        )
        .with("created_ms", Value::N(entry.created_ms))
        .with("updated_ms", Value::N(entry.updated_ms))
        .with("state", Value::S("active".into()))
}

fn entry_from(
    ns: &NamespaceName,
    table: &TableName,
    item: &Item,
) -> Result<TableEntry, CatalogError> {
    let corrupt = |what: &str| CatalogError::Corrupt(ns.clone(), table.clone(), what.to_owned());
    let schema = item
        .bytes("schema")
        .ok_or_else(|| corrupt("no schema"))
        .and_then(|b| root_as_schema(b).map_err(|e| corrupt(&e.to_string())))
        .map(fb_to_schema)?;
    let properties = match item.string("properties").map(serde_json::from_str) {
        Some(Ok(serde_json::Value::Object(map))) => map,
        None => serde_json::Map::new(),
        Some(_) => return Err(corrupt("properties are not a JSON object")),
    };
    Ok(TableEntry {
        namespace: ns.clone(),
        name: table.clone(),
        location: item
            .string("location")
            .ok_or_else(|| corrupt("no location"))?
            .to_owned(),
        schema: Arc::new(schema),
        properties,
        created_ms: item.number("created_ms").unwrap_or_default(),
        updated_ms: item.number("updated_ms").unwrap_or_default(),
    })
}

/// A new table entry, stamped now.
pub fn new_entry(
    namespace: NamespaceName,
    name: TableName,
    location: String,
    schema: Arc<Schema>,
) -> TableEntry {
    let now = now_ms();
    TableEntry {
        namespace,
        name,
        location,
        schema,
        properties: serde_json::Map::new(),
        created_ms: now,
        updated_ms: now,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::EmbeddedStore;

    fn registry(dir: &tempfile::TempDir) -> Registry {
        let kv = EmbeddedStore::open(&dir.path().join("r.redb"), true).unwrap();
        Registry { kv: Arc::new(kv) }
    }

    fn entry(ns: &NamespaceName, name: &str) -> TableEntry {
        new_entry(
            ns.clone(),
            TableName::parse(name).unwrap(),
            format!("/nowhere/{ns}/{name}.lance"),
            Arc::new(Schema::empty()),
        )
    }

    /// Namespace `s` with table `t` registered (a create's first step) in a new registry.
    async fn a_create_under_way(dir: &tempfile::TempDir) -> (Registry, NamespaceName, TableEntry) {
        let registry = registry(dir);
        let ns = NamespaceName::parse("s").unwrap();
        registry.create_namespace(&ns).await.unwrap();
        let t = entry(&ns, "t");
        registry.register_table(&t).await.unwrap();
        (registry, ns, t)
    }

    /// The two interleavings of a create racing a drop (each side writes, then reads): the
    /// create's read after the drop's mark withdraws the table; the drop's listing after the
    /// create's record refuses the drop. Never a table left under a removed namespace.
    #[tokio::test]
    async fn a_drop_and_a_create_in_the_namespace_never_leave_a_stray_table() {
        let dir = tempfile::tempdir().unwrap();
        let (registry, ns, t) = a_create_under_way(&dir).await;
        let mark = registry.mark_dropping(&ns).await.unwrap();
        assert!(matches!(
            registry.confirm_table(&t).await,
            Err(CatalogError::NamespaceBeingDropped(_))
        ));
        registry.finish_drop(&ns, mark).await.unwrap();
        assert!(!registry.namespace_exists(&ns).await.unwrap());
        assert!(registry.list_tables(&ns).await.unwrap().is_empty());

        registry.create_namespace(&ns).await.unwrap();
        registry.register_table(&t).await.unwrap();
        registry.confirm_table(&t).await.unwrap();
        let mark = registry.mark_dropping(&ns).await.unwrap();
        assert!(matches!(
            registry.finish_drop(&ns, mark).await,
            Err(CatalogError::NamespaceNotEmpty(_))
        ));
        // Refused and unmarked: the namespace takes tables again.
        registry.create_table(&entry(&ns, "u")).await.unwrap();
        assert_eq!(registry.list_tables(&ns).await.unwrap().len(), 2);

        // While a drop is under way, a create is refused outright, as retryable (the
        // namespace may well stay).
        let other = NamespaceName::parse("o").unwrap();
        registry.create_namespace(&other).await.unwrap();
        registry.mark_dropping(&other).await.unwrap();
        assert!(matches!(
            registry.create_table(&entry(&other, "t")).await,
            Err(CatalogError::NamespaceBeingDropped(_))
        ));
    }

    /// Two drops of one namespace, one of them refused because a table is being created:
    /// the refused drop lifts only its own mark. Before marks were owned, a second drop's mark
    /// was overwritten and then lifted by the first, so a create could confirm in a namespace
    /// the second drop then removed.
    #[tokio::test]
    async fn one_drop_holds_the_mark_and_lifts_only_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let (registry, ns, t) = a_create_under_way(&dir).await;
        let first = registry.mark_dropping(&ns).await.unwrap();
        assert!(matches!(
            registry.mark_dropping(&ns).await,
            Err(CatalogError::NamespaceBeingDropped(_))
        ));
        assert!(matches!(
            registry.drop_namespace(&ns).await,
            Err(CatalogError::NamespaceBeingDropped(_))
        ));

        // A drop whose mark was taken over (it outlived STALE_DROP_MS) neither lifts the
        // newer mark nor removes the namespace.
        let mut item = registry.kv.get(&ns_key(&ns)).await.unwrap().unwrap();
        item.attributes
            .insert(DROPPING.into(), Value::N(now_ms() - STALE_DROP_MS - 1));
        registry.kv.put(&item, Condition::Always).await.unwrap();
        let second = registry.mark_dropping(&ns).await.unwrap();
        assert_ne!(first, second);
        assert!(matches!(
            registry.finish_drop(&ns, first).await,
            Err(CatalogError::NamespaceNotEmpty(_))
        ));
        assert!(matches!(
            registry.open_for_tables(&ns).await,
            Err(CatalogError::NamespaceBeingDropped(_))
        ));
        registry.drop_table(&ns, &t.name).await.unwrap();
        assert!(matches!(
            registry.finish_drop(&ns, first).await,
            Err(CatalogError::NamespaceBeingDropped(_))
        ));
        assert!(registry.namespace_exists(&ns).await.unwrap());
        registry.finish_drop(&ns, second).await.unwrap();
        assert!(!registry.namespace_exists(&ns).await.unwrap());
    }
}
