//! The managed stage as the metadata role sees it: the store `COPY INTO` reads files from.
//! (Query holds only the descriptor; SDKs move stage bytes themselves.)

mod file;
mod load;
mod pages;
mod thrift;

use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use lake_common::stage::{StageBackend, StageDescriptor, StageDescriptorError, StagePath};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};

use crate::aws::{AwsConnection, AwsError};

pub(crate) use file::RangeFile;
pub(crate) use load::batches;
pub use load::{Batches, FileFormat, LoadError, load};

#[derive(Debug, thiserror::Error)]
pub enum StageError {
    #[error(transparent)]
    Descriptor(#[from] StageDescriptorError),
    #[error(transparent)]
    Aws(#[from] AwsError),
    #[error("cannot create the local stage {root}: {source}")]
    CreateLocal {
        root: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot open the local stage {root}: {source}")]
    OpenLocal {
        root: String,
        #[source]
        source: object_store::Error,
    },
    #[error("nothing in the stage at {0:?}")]
    NotFound(String),
    #[error("cannot read {path:?} from the stage: {source}")]
    Read {
        path: String,
        #[source]
        source: object_store::Error,
    },
}

/// A stage the process can read: its descriptor and a store rooted at the stage.
#[derive(Debug, Clone)]
pub struct Stage {
    descriptor: StageDescriptor,
    store: Arc<dyn ObjectStore>,
    root: ObjectPath,
}

impl Stage {
    /// Opens the configured stage; a local stage directory is created if missing (the metadata
    /// role provisions local lakes).
    pub fn open(stage: &str, aws: Option<&AwsConnection>) -> Result<Self, StageError> {
        let descriptor = StageDescriptor::for_stage(stage, aws.map(AwsConnection::target))?;
        let (store, root): (Arc<dyn ObjectStore>, ObjectPath) = match &descriptor.backend {
            StageBackend::Local { root } => {
                std::fs::create_dir_all(root).map_err(|source| StageError::CreateLocal {
                    root: root.clone(),
                    source,
                })?;
                let store = object_store::local::LocalFileSystem::new_with_prefix(root).map_err(
                    |source| StageError::OpenLocal {
                        root: root.clone(),
                        source,
                    },
                )?;
                (Arc::new(store), ObjectPath::default())
            }
            StageBackend::S3 { bucket, prefix, .. } => {
                let aws = aws.ok_or(StageDescriptorError::NoRegion {
                    stage: stage.into(),
                })?;
                (aws.s3_store(bucket)?, ObjectPath::from(prefix.as_str()))
            }
        };
        Ok(Self {
            descriptor,
            store,
            root,
        })
    }

    pub fn descriptor(&self) -> &StageDescriptor {
        &self.descriptor
    }

    fn location(&self, path: &StagePath) -> ObjectPath {
        path.as_str()
            .split('/')
            .fold(self.root.clone(), |p, part| p.join(part))
    }

    /// The files `path` names: the object itself, or every object under it (sorted), so
    /// `COPY INTO … FROM 'in/'` loads a whole folder.
    pub async fn files(&self, path: &StagePath) -> Result<Vec<StagePath>, StageError> {
        let location = self.location(path);
        match self.store.head(&location).await {
            Ok(_) => return Ok(vec![path.clone()]),
            Err(object_store::Error::NotFound { .. }) => {}
            Err(source) => {
                return Err(StageError::Read {
                    path: path.to_string(),
                    source,
                });
            }
        }
        let mut found: Vec<StagePath> = self
            .store
            .list(Some(&location))
            .map_ok(|meta| meta.location)
            .try_collect::<Vec<_>>()
            .await
            .map_err(|source| StageError::Read {
                path: path.to_string(),
                source,
            })?
            .into_iter()
            .filter_map(|location| {
                let relative = match self.root.as_ref() {
                    "" => location.as_ref().to_owned(),
                    root => location
                        .as_ref()
                        .strip_prefix(root)?
                        .trim_start_matches('/')
                        .to_owned(),
                };
                StagePath::parse(&relative).ok()
            })
            .collect();
        if found.is_empty() {
            return Err(StageError::NotFound(path.to_string()));
        }
        found.sort();
        Ok(found)
    }

    /// One file, read in ranges as its decoder asks (see `file.rs`).
    pub(crate) async fn open_file(&self, path: &StagePath) -> Result<RangeFile, StageError> {
        let location = self.location(path);
        match self.store.head(&location).await {
            Ok(meta) => Ok(RangeFile::new(Arc::new(file::StageObject::new(
                self.store.clone(),
                location,
                meta,
                tokio::runtime::Handle::current(),
            )))),
            Err(object_store::Error::NotFound { .. }) => {
                Err(StageError::NotFound(path.to_string()))
            }
            Err(source) => Err(StageError::Read {
                path: path.to_string(),
                source,
            }),
        }
    }

    /// One whole file.
    pub async fn read(&self, path: &StagePath) -> Result<Bytes, StageError> {
        let read = |source| StageError::Read {
            path: path.to_string(),
            source,
        };
        match self.store.get(&self.location(path)).await {
            Ok(result) => result.bytes().await.map_err(read),
            Err(object_store::Error::NotFound { .. }) => {
                Err(StageError::NotFound(path.to_string()))
            }
            Err(source) => Err(read(source)),
        }
    }
}
