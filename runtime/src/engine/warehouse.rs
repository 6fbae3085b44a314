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
use super::local_reads::LocalReads;
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
    /// A directory, and how Lance reads its files.
    Local(PathBuf, LocalReads),
    S3 {
        location: S3Location,
        store: Arc<dyn ObjectStore>,
    },
}

impl Warehouse {
    fn relative(table: &TableRef) -> String {
        format!("{}/{}{SUFFIX}", table.namespace, table.table)
    }

    /// A local warehouse that Lance reads and writes in its default way (what writers use).
    pub fn local(root: impl Into<PathBuf>) -> Self {
        Warehouse::Local(root.into(), LocalReads::Blocking)
    }

    /// A local warehouse for a process that only reads it: through io_uring where that works.
    pub fn local_for_reads(root: impl Into<PathBuf>) -> Self {
        Warehouse::Local(root.into(), LocalReads::detected())
    }

    /// The dataset URI Lance opens.
    pub fn uri(&self, table: &TableRef) -> String {
        match self {
            Warehouse::Local(root, LocalReads::Blocking) => {
                root.join(Self::relative(table)).display().to_string()
            }
            Warehouse::Local(root, LocalReads::IoUring) => {
                let path = root.join(Self::relative(table));
                // Lance picks its reader by the scheme. A URL, so the path is percent-encoded
                // (a warehouse may be `/data/my lake`); a relative root cannot be one, and is
                // read the default way.
                match url::Url::from_file_path(&path) {
                    Ok(url) => format!("file+uring{}", &url.as_str()["file".len()..]),
                    Err(()) => path.display().to_string(),
                }
            }
            Warehouse::S3 { location, .. } => location.url(&Self::relative(table)),
        }
    }

    /// The dataset's `base_uri` in the manifest table: its object-store path, without scheme or
    /// bucket (exactly what Lance writes).
    pub fn manifest_base_uri(&self, table: &TableRef) -> String {
        match self {
            Warehouse::Local(root, _) => root
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
            Warehouse::Local(..) => None,
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
            Warehouse::Local(root, _) => {
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
            Warehouse::Local(root, _) => {
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

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, RecordBatch, RecordBatchIterator};
    use arrow::datatypes::{DataType, Field, Schema};
    use lance::dataset::{Dataset, builder::DatasetBuilder};

    fn table() -> TableRef {
        TableRef {
            namespace: NamespaceName::parse("s").unwrap(),
            table: TableName::parse("t").unwrap(),
        }
    }

    #[test]
    fn a_reading_warehouse_names_lances_io_uring_reader() {
        let root = PathBuf::from("/srv/my lake");
        assert_eq!(
            Warehouse::local(&root).uri(&table()),
            "/srv/my lake/s/t.lance"
        );
        assert_eq!(
            Warehouse::Local(root.clone(), LocalReads::IoUring).uri(&table()),
            "file+uring:///srv/my%20lake/s/t.lance"
        );
        // Where the object store keeps it, and what the manifest table says, do not change.
        assert_eq!(
            Warehouse::Local(root, LocalReads::IoUring).manifest_base_uri(&table()),
            "srv/my lake/s/t.lance"
        );
    }

    /// A table written the default way reads back through the reader this machine gets, from a
    /// directory whose name a URL must encode.
    #[tokio::test]
    async fn what_is_written_reads_back_through_the_chosen_reader() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("my 50%20 lake");
        let writer = Warehouse::local(&root);
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from_iter_values(0..1000))],
        )
        .unwrap();
        let batches = RecordBatchIterator::new([Ok(batch)], schema);
        Dataset::write(batches, &writer.uri(&table()), None)
            .await
            .unwrap();

        let reads = LocalReads::detected();
        // Where the kernel allows io_uring, this test reads through it.
        assert_eq!(
            reads == LocalReads::IoUring,
            super::super::local_reads::probe().is_ok()
        );
        let reader = Warehouse::Local(root, reads);
        let dataset = DatasetBuilder::from_uri(reader.uri(&table()))
            .load()
            .await
            .unwrap();
        assert_eq!(dataset.count_rows(None).await.unwrap(), 1000);
        let read = dataset.scan().try_into_batch().await.unwrap();
        assert_eq!(read.num_rows(), 1000);
    }
}
