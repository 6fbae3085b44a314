//! Where datasets live: URIs, object-store parameters and the layout (`<ns>/<table>.lance`).

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use lake_common::plan::S3Location;
use lance::io::ObjectStoreParams;
use object_store::ObjectStore;
use object_store::path::Path as ObjectPath;

use super::EngineError;
use crate::catalog::{NamespaceName, TableName};

const SUFFIX: &str = ".lance";

/// A table of the warehouse.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableRef {
    pub namespace: NamespaceName,
    pub table: TableName,
}

impl fmt::Display for TableRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.namespace, self.table)
    }
}

#[derive(Debug, Clone)]
pub enum Warehouse {
    Local(PathBuf),
    S3 {
        location: S3Location,
        store: Arc<dyn ObjectStore>,
    },
}

impl Warehouse {
    fn relative(table: &TableRef) -> String {
        format!("{}/{}{SUFFIX}", table.namespace, table.table)
    }

    /// The dataset URI Lance opens.
    pub fn uri(&self, table: &TableRef) -> String {
        match self {
            Warehouse::Local(root) => root.join(Self::relative(table)).display().to_string(),
            Warehouse::S3 { location, .. } => location.url(&Self::relative(table)),
        }
    }

    /// The dataset's `base_uri` in the manifest table: its object-store path, without scheme or
    /// bucket (exactly what Lance writes).
    pub fn manifest_base_uri(&self, table: &TableRef) -> String {
        match self {
            Warehouse::Local(root) => root
                .join(Self::relative(table))
                .display()
                .to_string()
                .trim_start_matches('/')
                .to_owned(),
            Warehouse::S3 { location, .. } => location.key(&Self::relative(table)),
        }
    }

    /// Object-store parameters: for S3, our own explicitly configured store (no environment).
    pub fn store_params(&self, table: &TableRef) -> Option<ObjectStoreParams> {
        match self {
            Warehouse::Local(_) => None,
            Warehouse::S3 { store, .. } => {
                let url = url::Url::parse(&self.uri(table)).ok()?;
                #[allow(deprecated)] // the only way to hand Lance a store it did not configure
                let params = ObjectStoreParams {
                    object_store: Some((store.clone(), url)),
                    list_is_lexically_ordered: Some(true),
                    ..Default::default()
                };
                Some(params)
            }
        }
    }

    /// The tables under the warehouse root, sorted. Directories that are not valid names (such
    /// as `_stage`, `_lake`) are not tables.
    pub async fn list_tables(&self) -> Result<Vec<TableRef>, EngineError> {
        let mut tables = Vec::new();
        for ns in self.list_dirs(None).await? {
            let Ok(namespace) = NamespaceName::parse(&ns) else {
                continue;
            };
            for entry in self.list_dirs(Some(&ns)).await? {
                let Some(name) = entry.strip_suffix(SUFFIX) else {
                    continue;
                };
                if let Ok(table) = TableName::parse(name) {
                    tables.push(TableRef {
                        namespace: namespace.clone(),
                        table,
                    });
                }
            }
        }
        tables.sort();
        Ok(tables)
    }

    async fn list_dirs(&self, under: Option<&str>) -> Result<Vec<String>, EngineError> {
        match self {
            Warehouse::Local(root) => {
                let dir = under.map_or_else(|| root.clone(), |u| root.join(u));
                let entries = match std::fs::read_dir(&dir) {
                    Ok(entries) => entries,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
                    Err(e) => {
                        return Err(EngineError::Listing(object_store::Error::Generic {
                            store: "local",
                            source: Box::new(e),
                        }));
                    }
                };
                Ok(entries
                    .filter_map(Result::ok)
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect())
            }
            Warehouse::S3 { location, store } => {
                let prefix = match under {
                    Some(u) => location.key(u),
                    None => location.prefix.clone(),
                };
                let prefix = (!prefix.is_empty()).then(|| ObjectPath::from(prefix));
                let listing = store
                    .list_with_delimiter(prefix.as_ref())
                    .await
                    .map_err(EngineError::Listing)?;
                Ok(listing
                    .common_prefixes
                    .iter()
                    .filter_map(|p| p.filename().map(str::to_owned))
                    .collect())
            }
        }
    }

    /// Removes every file of a table; a table that is already gone is fine.
    pub(super) async fn remove(&self, table: &TableRef) -> Result<(), EngineError> {
        let err = |detail: String| EngineError::Remove {
            table: table.clone(),
            detail,
        };
        match self {
            Warehouse::Local(root) => {
                match tokio::fs::remove_dir_all(root.join(Self::relative(table))).await {
                    Ok(()) => Ok(()),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                    Err(e) => Err(err(e.to_string())),
                }
            }
            Warehouse::S3 { location, store } => {
                let prefix = ObjectPath::from(location.key(&Self::relative(table)));
                let locations = store
                    .list(Some(&prefix))
                    .map_ok(|meta| meta.location)
                    .boxed();
                store
                    .delete_stream(locations)
                    .try_collect::<Vec<_>>()
                    .await
                    .map(|_| ())
                    .map_err(|e| err(e.to_string()))
            }
        }
    }
}
