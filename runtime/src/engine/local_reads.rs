//! Local table files read without a thread hand-off when the page cache already holds them.
//!
//! Lance's local reader sends every read to a blocking thread and waits for it to come back
//! (`spawn_blocking`). For a vector search — about a hundred reads of half a kilobyte, all in
//! the page cache — the two thread switches per read cost many times the copy: in profiles of
//! the query process they were a third of a search's CPU. The readers' engines (query, workers)
//! open local tables through this store instead: a read of up to [`INLINE_MAX`] bytes is first
//! tried on the calling thread with `RWF_NOWAIT`, which copies from the page cache or refuses
//! without touching the disk, so a worker thread never waits for a device. A refused, larger or
//! unusual read goes to a blocking thread as before; anything this store does not answer itself
//! (conditional gets, open ranges, listings, writes) is object_store's `LocalFileSystem`.
//!
//! No file handle is kept between reads: a path can name another file after a table is dropped
//! and created again, and a kept handle would read the old one.

use std::fmt;
use std::fs::{File, Metadata};
use std::io::{Read, Seek, SeekFrom};
use std::ops::Range;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use lance_io::object_store::providers::local::FileStoreProvider;
use lance_io::object_store::{ObjectStore as LanceStore, ObjectStoreParams, ObjectStoreProvider};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    Attributes, CopyOptions, GetOptions, GetRange, GetResult, GetResultPayload, ListResult,
    MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions, PutOptions, PutPayload,
    PutResult, RenameOptions,
};
use url::Url;

/// The largest read tried on the calling thread: copying it from the page cache takes about as
/// long as handing it to another thread; a larger read is better overlapped with decoding.
pub(crate) const INLINE_MAX: u64 = 256 * 1024;

/// Lance's provider for `file://` URLs with reads through [`CachedFirst`]. Its stores carry
/// their own prefix, so Lance takes them for stores of their own kind (not its direct local
/// reader, which would skip this store) and caches them apart from plain local stores.
#[derive(Debug, Default)]
pub(crate) struct CachedFirstProvider;

const PREFIX: &str = "file$cached-first";

#[async_trait]
impl ObjectStoreProvider for CachedFirstProvider {
    async fn new_store(
        &self,
        base_path: Url,
        params: &ObjectStoreParams,
    ) -> lance::Result<LanceStore> {
        let mut store = FileStoreProvider.new_store(base_path, params).await?;
        store.inner = Arc::new(CachedFirst::default());
        store.store_prefix = PREFIX.to_owned();
        Ok(store)
    }

    fn extract_path(&self, url: &Url) -> lance::Result<Path> {
        FileStoreProvider.extract_path(url)
    }

    fn calculate_object_store_prefix(
        &self,
        _url: &Url,
        _storage_options: Option<&std::collections::HashMap<String, String>>,
    ) -> lance::Result<String> {
        Ok(PREFIX.to_owned())
    }
}

/// The local file system, with plain reads of a range or a whole file served by [`read`].
#[derive(Debug, Default)]
pub(crate) struct CachedFirst {
    local: LocalFileSystem,
}

impl fmt::Display for CachedFirst {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CachedFirst({})", self.local)
    }
}

/// How a read may wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// Only what the page cache holds; anything else is refused (`RWF_NOWAIT`).
    Never,
    /// For the device, on a blocking thread.
    Blocking,
}

/// What `wanted` names of the file at `path`: its bytes, the range they are and the file's
/// metadata; `None` when the read is not for this store (a range past the end, not a regular
/// file, an error of any kind, or with [`Wait::Never`] a larger read or bytes not all cached):
/// the caller then asks `LocalFileSystem`, whose answer (and error) is the canonical one.
fn read(
    path: &std::path::Path,
    wanted: &Wanted,
    wait: Wait,
) -> Option<(Bytes, Range<u64>, Metadata)> {
    let file = File::open(path).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() {
        return None;
    }
    let range = wanted.within(meta.len())?;
    let len = usize::try_from(range.end - range.start).ok()?;
    let buf = match wait {
        // Read into spare capacity: zeroing a large buffer first would cost a second pass.
        Wait::Blocking => {
            let mut buf = Vec::with_capacity(len);
            let mut file = file;
            file.seek(SeekFrom::Start(range.start)).ok()?;
            file.take(len as u64).read_to_end(&mut buf).ok()?;
            buf
        }
        Wait::Never => {
            let mut buf = vec![0u8; len];
            if len as u64 > INLINE_MAX || read_cached(&file, &mut buf, range.start)? != len {
                return None;
            }
            buf
        }
    };
    (buf.len() == len).then(|| (Bytes::from(buf), range, meta))
}

/// One `preadv2` with `RWF_NOWAIT`: the bytes read, `None` if it would have waited for the
/// device (or the file system cannot say).
#[cfg(target_os = "linux")]
fn read_cached(file: &File, buf: &mut [u8], offset: u64) -> Option<usize> {
    use std::os::fd::AsRawFd;
    let offset = libc::off_t::try_from(offset).ok()?;
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: `iov` describes `buf`, which is valid for writes of its length and outlives the
    // call; the descriptor is open for the duration of `file`'s borrow.
    let read = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, offset, libc::RWF_NOWAIT) };
    usize::try_from(read).ok()
}

/// Elsewhere no read can be refused rather than wait: every read goes to a blocking thread.
#[cfg(not(target_os = "linux"))]
fn read_cached(_file: &File, _buf: &mut [u8], _offset: u64) -> Option<usize> {
    None
}

/// What `LocalFileSystem` would say of the file: its e-tag is inode, mtime and size.
fn object_meta(location: &Path, meta: &Metadata) -> ObjectMeta {
    let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
    let micros = modified
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros();
    ObjectMeta {
        location: location.clone(),
        last_modified: modified.into(),
        size: meta.len(),
        e_tag: Some(format!(
            "\"{:x}-{:x}-{:x}\"",
            meta.ino(),
            micros,
            meta.len()
        )),
        version: None,
    }
}

fn answer(location: &Path, range: Range<u64>, bytes: Bytes, meta: &Metadata) -> GetResult {
    GetResult {
        payload: GetResultPayload::Stream(futures::stream::once(async move { Ok(bytes) }).boxed()),
        meta: object_meta(location, meta),
        range,
        attributes: Attributes::default(),
        extensions: Default::default(),
    }
}

/// What a get this store answers itself asks for: no conditions, and a bounded non-empty range
/// or the whole file (Lance reads a small file whole).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Wanted {
    Range(Range<u64>),
    Whole,
}

impl Wanted {
    fn of(options: &GetOptions) -> Option<Self> {
        let GetOptions {
            if_match: None,
            if_none_match: None,
            if_modified_since: None,
            if_unmodified_since: None,
            range,
            version: None,
            head: false,
            ..
        } = options
        else {
            return None;
        };
        match range {
            None => Some(Self::Whole),
            Some(GetRange::Bounded(range)) if range.start < range.end => {
                Some(Self::Range(range.clone()))
            }
            Some(_) => None,
        }
    }

    /// The bytes of a file of `len` bytes it names; `None` past the end.
    fn within(&self, len: u64) -> Option<Range<u64>> {
        match self {
            Self::Range(range) => (range.end <= len).then(|| range.clone()),
            Self::Whole => Some(0..len),
        }
    }

    /// Whether it may be read on the calling thread (the whole file's size is known only once
    /// it is open).
    fn small(&self) -> bool {
        match self {
            Self::Range(range) => range.end - range.start <= INLINE_MAX,
            Self::Whole => true,
        }
    }
}

impl CachedFirst {
    async fn read(&self, location: &Path, wanted: Wanted) -> Option<GetResult> {
        let path: PathBuf = self.local.path_to_filesystem(location).ok()?;
        let read = match wanted.small().then(|| read(&path, &wanted, Wait::Never)) {
            Some(Some(read)) => read,
            _ => tokio::task::spawn_blocking(move || read(&path, &wanted, Wait::Blocking))
                .await
                .ok()??,
        };
        let (bytes, range, meta) = read;
        Some(answer(location, range, bytes, &meta))
    }
}

#[async_trait]
impl ObjectStore for CachedFirst {
    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        if let Some(wanted) = Wanted::of(&options)
            && let Some(result) = self.read(location, wanted).await
        {
            return Ok(result);
        }
        self.local.get_opts(location, options).await
    }

    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.local.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.local.put_multipart_opts(location, opts).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.local.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.local.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.local.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.local.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.local.copy_opts(from, to, options).await
    }

    async fn rename_opts(
        &self,
        from: &Path,
        to: &Path,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        self.local.rename_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use object_store::ObjectStoreExt;

    use super::*;

    fn store_and_file(bytes: &[u8]) -> (CachedFirst, tempfile::TempDir, Path) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("data.lance");
        std::fs::write(&file, bytes).unwrap();
        let location = Path::from_absolute_path(&file).unwrap();
        (CachedFirst::default(), dir, location)
    }

    #[tokio::test]
    async fn a_range_reads_what_the_local_file_system_reads() {
        let bytes: Vec<u8> = (0..=255u8).cycle().take(3 * INLINE_MAX as usize).collect();
        let (store, _dir, location) = store_and_file(&bytes);
        let local = LocalFileSystem::new();
        // Small (from the page cache, on this thread), large (a blocking thread), at the end.
        let len = bytes.len() as u64;
        for range in [0..512, 1000..1001, 7..INLINE_MAX + 9, len - 100..len] {
            let ours = store.get_range(&location, range.clone()).await.unwrap();
            let theirs = local.get_range(&location, range.clone()).await.unwrap();
            assert_eq!(ours, theirs, "{range:?}");
            let options = || GetOptions {
                range: Some(range.clone().into()),
                ..Default::default()
            };
            let ours = store.get_opts(&location, options()).await;
            let theirs = local.get_opts(&location, options()).await;
            let (ours, theirs) = (ours.unwrap(), theirs.unwrap());
            assert_eq!(ours.meta, theirs.meta);
            assert_eq!(ours.range, theirs.range);
        }
        let (ours, theirs) = (store.get(&location).await, local.get(&location).await);
        let (ours, theirs) = (ours.unwrap(), theirs.unwrap());
        assert_eq!((&ours.meta, &ours.range), (&theirs.meta, &theirs.range));
        assert_eq!(ours.bytes().await.unwrap(), theirs.bytes().await.unwrap());
    }

    #[tokio::test]
    async fn a_read_past_the_end_or_of_a_missing_file_fails_as_the_local_file_system_does() {
        let (store, dir, location) = store_and_file(b"0123456789");
        let local = LocalFileSystem::new();
        // Past the end: object_store clamps a range that starts inside the file.
        let ours = store.get_range(&location, 5..20).await.unwrap();
        assert_eq!(ours, local.get_range(&location, 5..20).await.unwrap());
        let ours = store.get_range(&location, 20..30).await.unwrap_err();
        let theirs = local.get_range(&location, 20..30).await.unwrap_err();
        assert_eq!(ours.to_string(), theirs.to_string());

        let missing = Path::from_absolute_path(dir.path().join("gone.lance")).unwrap();
        let ours = store.get_range(&missing, 0..4).await.unwrap_err();
        assert!(
            matches!(ours, object_store::Error::NotFound { .. }),
            "{ours}"
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_cached_range_is_read_on_the_calling_thread() {
        let (_store, dir, _location) = store_and_file(b"just written, so in the page cache");
        let path = dir.path().join("data.lance");
        let (bytes, range, meta) = read(&path, &Wanted::Range(5..12), Wait::Never)
            .expect("RWF_NOWAIT reads of cached pages work on this file system");
        assert_eq!(
            (bytes, range, meta.len()),
            (Bytes::from("written"), 5..12, 34)
        );
        let (whole, ..) = read(&path, &Wanted::Whole, Wait::Never).unwrap();
        assert_eq!(whole.len(), 34);
        assert!(
            read(&path, &Wanted::Range(30..40), Wait::Never).is_none(),
            "past the end"
        );
    }

    #[tokio::test]
    async fn a_file_replaced_under_its_path_is_read_anew() {
        let (store, dir, location) = store_and_file(b"old contents");
        assert_eq!(store.get_range(&location, 0..3).await.unwrap(), "old");
        // A table dropped and created again: the same path, another file.
        let file = dir.path().join("data.lance");
        std::fs::remove_file(&file).unwrap();
        std::fs::write(&file, b"new contents").unwrap();
        assert_eq!(store.get_range(&location, 0..3).await.unwrap(), "new");
    }
}
