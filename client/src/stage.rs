//! Stage I/O straight between this process and object storage: the servers never see the bytes.
//!
//! Every operation parses its path as a [`StagePath`] first, so `..`, absolute paths and other
//! escapes are refused before any I/O.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use lake_common::stage::{StageBackend, StageDescriptor, StagePath};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::ClientError;
use crate::aws::ChainCredentials;

/// Uploads larger than this go as multipart uploads, in parts of this size.
pub const PART_SIZE: usize = 8 * 1024 * 1024;

/// Parts uploaded at once: bounds memory (`PARTS_IN_FLIGHT × PART_SIZE`). 8 measured no faster
/// than 4 against the emulator (`bench/run stage`); re-measure against real S3 before raising.
pub(crate) const PARTS_IN_FLIGHT: usize = 4;

/// One object in the stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageObject {
    pub path: StagePath,
    pub size: u64,
    pub last_modified: String,
}

/// An object store rooted at the stage.
#[derive(Debug, Clone)]
pub struct Stage {
    store: Arc<dyn ObjectStore>,
    root: ObjectPath,
}

impl Stage {
    /// The stage a descriptor names: a local directory, or S3 with the AWS default credential
    /// chain (and the descriptor's endpoint for S3-compatible storage).
    pub async fn from_descriptor(descriptor: &StageDescriptor) -> Result<Self, ClientError> {
        match &descriptor.backend {
            StageBackend::Local { root } => {
                std::fs::create_dir_all(root).map_err(|source| ClientError::LocalFile {
                    path: root.clone(),
                    source,
                })?;
                let store = object_store::local::LocalFileSystem::new_with_prefix(root).map_err(
                    |source| ClientError::Store {
                        op: "open",
                        path: root.clone(),
                        source,
                    },
                )?;
                Ok(Self::new(Arc::new(store), ""))
            }
            StageBackend::S3 {
                bucket,
                prefix,
                region,
                endpoint,
            } => {
                let credentials = ChainCredentials::default_chain(region).await?;
                // Built from the descriptor only, never from the environment (`from_env`
                // would let stray variables such as AWS_ENDPOINT redirect the stage).
                let mut builder = object_store::aws::AmazonS3Builder::new()
                    .with_bucket_name(bucket)
                    .with_region(region)
                    .with_credentials(Arc::new(credentials));
                if let Some(endpoint) = endpoint {
                    builder = builder
                        .with_endpoint(endpoint)
                        .with_allow_http(endpoint.starts_with("http://"))
                        .with_virtual_hosted_style_request(false);
                }
                let store = builder.build().map_err(|source| ClientError::Store {
                    op: "open",
                    path: format!("s3://{bucket}/{prefix}"),
                    source,
                })?;
                Ok(Self::new(Arc::new(store), prefix))
            }
        }
    }

    /// A stage on `store` under `prefix` (tests and embedding).
    pub fn new(store: Arc<dyn ObjectStore>, prefix: &str) -> Self {
        Self {
            store,
            root: ObjectPath::from(prefix),
        }
    }

    fn location(&self, path: &StagePath) -> ObjectPath {
        path.as_str()
            .split('/')
            .fold(self.root.clone(), |p, part| p.join(part))
    }

    fn relative(&self, location: &ObjectPath) -> Option<StagePath> {
        let full = location.as_ref();
        let rest = match self.root.as_ref() {
            "" => full,
            root => full.strip_prefix(root)?.strip_prefix('/')?,
        };
        StagePath::parse(rest).ok()
    }

    fn store_error(op: &'static str, path: &str, source: object_store::Error) -> ClientError {
        match source {
            object_store::Error::NotFound { .. } => ClientError::NotFound(path.to_owned()),
            source => ClientError::Store {
                op,
                path: path.to_owned(),
                source,
            },
        }
    }

    /// Writes `bytes` to `path` in one request.
    pub async fn put(&self, path: &str, bytes: Bytes) -> Result<(), ClientError> {
        let path = StagePath::parse(path)?;
        self.store
            .put(&self.location(&path), PutPayload::from(bytes))
            .await
            .map(|_| ())
            .map_err(|e| Self::store_error("put", path.as_str(), e))
    }

    /// Streams the local file `from` to `path`: a multipart upload in [`PART_SIZE`] parts, never
    /// the whole file in memory. `progress` gets the bytes sent so far. Returns the file size.
    /// A failed upload is aborted, leaving no partial object.
    pub async fn put_file(
        &self,
        path: &str,
        from: &Path,
        mut progress: impl FnMut(u64),
    ) -> Result<u64, ClientError> {
        let path = StagePath::parse(path)?;
        let local = |source| ClientError::LocalFile {
            path: from.display().to_string(),
            source,
        };
        let mut file = tokio::fs::File::open(from).await.map_err(local)?;
        let upload = self
            .store
            .put_multipart(&self.location(&path))
            .await
            .map_err(|e| Self::store_error("put", path.as_str(), e))?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
        let mut buffer = vec![0u8; 1024 * 1024];
        let mut sent = 0u64;
        loop {
            let n = match file.read(&mut buffer).await {
                Ok(n) => n,
                Err(e) => {
                    let _ = writer.abort().await;
                    return Err(local(e));
                }
            };
            if n == 0 {
                break;
            }
            // Back-pressure: at most PARTS_IN_FLIGHT parts in flight.
            if let Err(e) = writer.wait_for_capacity(PARTS_IN_FLIGHT).await {
                return Err(Self::store_error("put", path.as_str(), e));
            }
            writer.write(&buffer[..n]);
            sent += n as u64;
            progress(sent);
        }
        writer
            .finish()
            .await
            .map_err(|e| Self::store_error("put", path.as_str(), e))?;
        Ok(sent)
    }

    /// The whole object.
    pub async fn get(&self, path: &str) -> Result<Bytes, ClientError> {
        let path = StagePath::parse(path)?;
        let result = self
            .store
            .get(&self.location(&path))
            .await
            .map_err(|e| Self::store_error("get", path.as_str(), e))?;
        result
            .bytes()
            .await
            .map_err(|e| Self::store_error("get", path.as_str(), e))
    }

    /// Streams the object to the local file `to`; `progress` gets (bytes so far, total).
    pub async fn get_file(
        &self,
        path: &str,
        to: &Path,
        mut progress: impl FnMut(u64, u64),
    ) -> Result<u64, ClientError> {
        let path = StagePath::parse(path)?;
        let result = self
            .store
            .get(&self.location(&path))
            .await
            .map_err(|e| Self::store_error("get", path.as_str(), e))?;
        let total = result.meta.size;
        let local = |source| ClientError::LocalFile {
            path: to.display().to_string(),
            source,
        };
        let mut file = tokio::fs::File::create(to).await.map_err(local)?;
        let mut stream = result.into_stream();
        let mut received = 0u64;
        while let Some(chunk) = stream
            .try_next()
            .await
            .map_err(|e| Self::store_error("get", path.as_str(), e))?
        {
            file.write_all(&chunk).await.map_err(local)?;
            received += chunk.len() as u64;
            progress(received, total);
        }
        file.flush().await.map_err(local)?;
        Ok(received)
    }

    /// Bytes `range` of the object. A range past the object's end is an error naming its size,
    /// never a short read.
    pub async fn get_range(&self, path: &str, range: Range<u64>) -> Result<Bytes, ClientError> {
        let path = StagePath::parse(path)?;
        if range.start >= range.end {
            return Err(ClientError::BadRange {
                path: path.to_string(),
                start: range.start,
                end: range.end,
            });
        }
        let location = self.location(&path);
        match self.store.get_range(&location, range.clone()).await {
            Ok(bytes) if bytes.len() as u64 == range.end - range.start => Ok(bytes),
            outcome => {
                // Short or failed: tell past-the-end from other failures by the object's size.
                let meta = self
                    .store
                    .head(&location)
                    .await
                    .map_err(|e| Self::store_error("get", path.as_str(), e))?;
                if range.end > meta.size {
                    return Err(ClientError::RangePastEnd {
                        path: path.to_string(),
                        start: range.start,
                        end: range.end,
                        size: meta.size,
                    });
                }
                match outcome {
                    Ok(_) => Err(ClientError::ShortRead {
                        path: path.to_string(),
                    }),
                    Err(e) => Err(Self::store_error("get", path.as_str(), e)),
                }
            }
        }
    }

    /// The object's size and modification time.
    pub async fn head(&self, path: &str) -> Result<StageObject, ClientError> {
        let path = StagePath::parse(path)?;
        let meta = self
            .store
            .head(&self.location(&path))
            .await
            .map_err(|e| Self::store_error("head", path.as_str(), e))?;
        Ok(StageObject {
            path,
            size: meta.size,
            last_modified: meta.last_modified.to_rfc3339(),
        })
    }

    /// Every object under `prefix` ("" = the whole stage), sorted by path.
    pub async fn list(&self, prefix: &str) -> Result<Vec<StageObject>, ClientError> {
        let parsed = StagePath::parse_prefix(prefix)?;
        let location = match &parsed {
            Some(p) => self.location(p),
            None => self.root.clone(),
        };
        let mut objects: Vec<StageObject> = self
            .store
            .list(Some(&location))
            .map_err(|e| Self::store_error("list", prefix, e))
            .filter_map(|meta| {
                let object = meta.map(|meta| {
                    self.relative(&meta.location).map(|path| StageObject {
                        path,
                        size: meta.size,
                        last_modified: meta.last_modified.to_rfc3339(),
                    })
                });
                async move { object.transpose() }
            })
            .try_collect()
            .await?;
        objects.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(objects)
    }

    /// Deletes the object (an absent object is NotFound, so typos do not pass silently).
    pub async fn delete(&self, path: &str) -> Result<(), ClientError> {
        let parsed = StagePath::parse(path)?;
        self.head(path).await?;
        self.store
            .delete(&self.location(&parsed))
            .await
            .map_err(|e| Self::store_error("delete", parsed.as_str(), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    fn stage() -> Stage {
        Stage::new(Arc::new(InMemory::new()), "wh/_stage")
    }

    #[tokio::test]
    async fn traversal_is_refused_before_any_io() {
        let inner = Arc::new(InMemory::new());
        inner
            .put(
                &ObjectPath::from("wh/secret"),
                PutPayload::from_static(b"x"),
            )
            .await
            .unwrap();
        let stage = Stage::new(inner.clone(), "wh/_stage");
        for bad in ["../secret", "/wh/secret", "a/../../secret", "a//b", ""] {
            assert!(
                matches!(stage.get(bad).await, Err(ClientError::Path(_))),
                "{bad}"
            );
            assert!(matches!(
                stage.put(bad, Bytes::from_static(b"y")).await,
                Err(ClientError::Path(_))
            ));
            assert!(matches!(stage.delete(bad).await, Err(ClientError::Path(_))));
        }
        assert!(matches!(stage.list("../").await, Err(ClientError::Path(_))));
        // Nothing was written anywhere.
        let all: Vec<_> = inner.list(None).try_collect().await.unwrap();
        assert_eq!(all.len(), 1);
    }

    #[tokio::test]
    async fn objects_roundtrip_under_the_prefix() {
        let stage = stage();
        stage
            .put("in/a.csv", Bytes::from_static(b"hello"))
            .await
            .unwrap();
        stage
            .put("in/b.csv", Bytes::from_static(b"hi"))
            .await
            .unwrap();
        stage.put("other", Bytes::from_static(b"o")).await.unwrap();
        assert_eq!(stage.get("in/a.csv").await.unwrap(), "hello");
        assert_eq!(stage.get_range("in/a.csv", 1..3).await.unwrap(), "el");
        let listed: Vec<_> = stage
            .list("in/")
            .await
            .unwrap()
            .into_iter()
            .map(|o| (o.path.to_string(), o.size))
            .collect();
        assert_eq!(listed, [("in/a.csv".into(), 5), ("in/b.csv".into(), 2)]);
        assert_eq!(stage.list("").await.unwrap().len(), 3);
        assert!(matches!(
            stage.get_range("in/a.csv", 3..9).await,
            Err(ClientError::RangePastEnd { size: 5, .. })
        ));
        stage.delete("in/a.csv").await.unwrap();
        assert!(matches!(
            stage.get("in/a.csv").await,
            Err(ClientError::NotFound(_))
        ));
        assert!(matches!(
            stage.delete("in/a.csv").await,
            Err(ClientError::NotFound(_))
        ));
    }

    #[tokio::test]
    async fn large_files_stream_in_parts() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("big.bin");
        let data: Vec<u8> = (0..(PART_SIZE * 2 + 12_345))
            .map(|i| (i % 251) as u8)
            .collect();
        std::fs::write(&file, &data).unwrap();
        let stage = stage();
        let mut seen = Vec::new();
        let sent = stage
            .put_file("big.bin", &file, |n| seen.push(n))
            .await
            .unwrap();
        assert_eq!(sent, data.len() as u64);
        assert_eq!(seen.last(), Some(&(data.len() as u64)));
        let back = dir.path().join("back.bin");
        stage.get_file("big.bin", &back, |_, _| {}).await.unwrap();
        assert_eq!(std::fs::read(back).unwrap(), data);
    }
}
