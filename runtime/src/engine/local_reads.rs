//! Local table files read without a thread hand-off when the page cache already holds them.
//!
//! Lance's local reader sends every read to a blocking thread and waits for it to come back
//! (`spawn_blocking`). For a vector search — about a hundred reads of half a kilobyte, all in
//! the page cache — the two thread switches per read cost many times the copy: in profiles of
//! the query process they were a third of a search's CPU. The readers' engines (query, workers)
//! open local tables through this store instead: a read of up to [`INLINE_MAX`] bytes is first
//! tried on the calling thread: the file opened only if its path resolves from the kernel's
//! caches (`openat2` with `RESOLVE_CACHED`, non-blocking, so a FIFO cannot hold the thread
//! either) and read with `RWF_NOWAIT`, which copies from the page cache or refuses without
//! touching the disk — a worker thread never waits for a device. A refused, larger or unusual
//! read goes to a blocking thread as before; a file system that cannot refuse (`EOPNOTSUPP`:
//! NFS, FUSE) is not asked again. Anything this store does not answer itself (conditional gets,
//! open ranges, listings, writes) is object_store's `LocalFileSystem`.
//!
//! The store is shared by every reader and knows only paths, so each read opens its file (a
//! cache of handles keyed by path could read a file a dropped table left behind: Lance's io_uring
//! reader's flaw). As on S3, a file removed while a statement reads it is then not found; data,
//! index and deletion files have unique names and are removed only outside the retention.

use std::fmt;
use std::fs::{File, Metadata};
use std::io::{ErrorKind, Read, Seek, SeekFrom};
use std::ops::Range;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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
#[derive(Debug)]
pub(crate) struct CachedFirst {
    local: LocalFileSystem,
    /// Whether reads are tried without waiting: until the file system says it cannot.
    nowait: AtomicBool,
}

impl Default for CachedFirst {
    fn default() -> Self {
        Self {
            local: LocalFileSystem::new(),
            nowait: AtomicBool::new(cfg!(target_os = "linux")),
        }
    }
}

impl fmt::Display for CachedFirst {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CachedFirst({})", self.local)
    }
}

/// How a read may wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// Only for what the kernel's caches hold: anything else is left to [`Wait::Blocking`].
    Never,
    /// For the device, on a blocking thread.
    Blocking,
}

/// What a read came to.
#[derive(Debug)]
enum Outcome {
    /// The bytes, the range they are and the file's metadata.
    Read(Bytes, Range<u64>, Metadata),
    /// The answer is an error: the file does not exist, or the range ends past it (Lance's own
    /// reader fails such a read rather than return fewer bytes).
    Failed(object_store::Error),
    /// Not answered here: with [`Wait::Never`] it would have waited; otherwise it is for
    /// `LocalFileSystem` (not a regular file, an unusual error), whose answer is canonical.
    Elsewhere,
    /// As `Elsewhere`, and this file system cannot refuse to wait: do not ask it again.
    Unsupported,
}

/// Reads `wanted` of the file at `path` (named `location` in errors).
fn read(path: &std::path::Path, location: &Path, wanted: &Wanted, wait: Wait) -> Outcome {
    let opened = match wait {
        Wait::Never => open_cached(path),
        Wait::Blocking => std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path),
    };
    let file = match opened {
        Ok(file) => file,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Outcome::Failed(object_store::Error::NotFound {
                path: location.to_string(),
                source: e.into(),
            });
        }
        Err(e) if unsupported(&e) => return Outcome::Unsupported,
        Err(_) => return Outcome::Elsewhere,
    };
    let Ok(meta) = file.metadata() else {
        return Outcome::Elsewhere;
    };
    if !meta.is_file() {
        return Outcome::Elsewhere;
    }
    let Some(range) = wanted.within(meta.len()) else {
        let e = std::io::Error::new(
            ErrorKind::UnexpectedEof,
            format!(
                "{wanted:?} is past the end of {location} ({} bytes)",
                meta.len()
            ),
        );
        return Outcome::Failed(object_store::Error::Generic {
            store: "LocalFileSystem",
            source: e.into(),
        });
    };
    let len = range.end - range.start;
    let Ok(size) = usize::try_from(len) else {
        return Outcome::Elsewhere;
    };
    match wait {
        Wait::Never => {
            if len > INLINE_MAX {
                return Outcome::Elsewhere;
            }
            let mut buf = Vec::with_capacity(size);
            match read_cached(&file, &mut buf, range.start) {
                Ok(()) if buf.len() == size => Outcome::Read(Bytes::from(buf), range, meta),
                Err(e) if unsupported(&e) => Outcome::Unsupported,
                _ => Outcome::Elsewhere,
            }
        }
        // Into spare capacity: zeroing a large buffer first would cost a second pass.
        Wait::Blocking => {
            let mut buf = Vec::with_capacity(size);
            let mut file = file;
            let read = file
                .seek(SeekFrom::Start(range.start))
                .and_then(|_| file.take(len).read_to_end(&mut buf));
            match read {
                Ok(read) if read == size => Outcome::Read(Bytes::from(buf), range, meta),
                _ => Outcome::Elsewhere,
            }
        }
    }
}

/// An error saying the kernel or file system cannot do a read without waiting at all.
fn unsupported(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL)
    )
}

/// Opens `path` read-only if the kernel resolves it from its caches alone (`openat2` with
/// `RESOLVE_CACHED`, Linux 5.12; `EAGAIN` otherwise), non-blocking.
#[cfg(target_os = "linux")]
fn open_cached(path: &std::path::Path) -> std::io::Result<File> {
    use std::os::fd::FromRawFd;
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes())?;
    /// The kernel's `struct open_how`, first version (libc's is non-exhaustive).
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    let how = OpenHow {
        flags: (libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NONBLOCK) as u64,
        mode: 0,
        resolve: libc::RESOLVE_CACHED,
    };
    // SAFETY: `path` is NUL-terminated and `how` a valid `open_how` of the size passed; both
    // outlive the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            path.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let fd = std::os::fd::RawFd::try_from(fd).map_err(std::io::Error::other)?;
    // SAFETY: `fd` was just opened and nothing else owns it.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// One `preadv2` with `RWF_NOWAIT` into `buf`'s spare capacity, appended to it (fewer bytes,
/// or `EAGAIN`, when some were not cached). Not zeroed first: that was a second pass over
/// every read.
#[cfg(target_os = "linux")]
fn read_cached(file: &File, buf: &mut Vec<u8>, offset: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let offset = libc::off_t::try_from(offset).map_err(std::io::Error::other)?;
    let spare = buf.spare_capacity_mut();
    let iov = libc::iovec {
        iov_base: spare.as_mut_ptr().cast(),
        iov_len: spare.len(),
    };
    // SAFETY: `iov` describes `buf`'s spare capacity, valid for writes of its length (the
    // kernel writes bytes, never reads them) and outliving the call; the descriptor is open
    // for the duration of `file`'s borrow.
    let read = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, offset, libc::RWF_NOWAIT) };
    let read = usize::try_from(read).map_err(|_| std::io::Error::last_os_error())?;
    // SAFETY: the kernel initialised the first `read` bytes of the spare capacity (no more than
    // `iov_len`, so within it).
    unsafe { buf.set_len(buf.len() + read) };
    Ok(())
}

/// Elsewhere nothing can be read without waiting: every read goes to a blocking thread.
#[cfg(not(target_os = "linux"))]
fn open_cached(_path: &std::path::Path) -> std::io::Result<File> {
    Err(std::io::Error::from_raw_os_error(libc::ENOSYS))
}

#[cfg(not(target_os = "linux"))]
fn read_cached(_file: &File, _buf: &mut Vec<u8>, _offset: u64) -> std::io::Result<()> {
    Err(std::io::Error::from_raw_os_error(libc::ENOSYS))
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

/// The file `LocalFileSystem` (rooted at `/`) maps `location` to, when its name is plain:
/// `/` and the path as it is. That mapping goes through a URL (the parts encoded into one,
/// then decoded out of it): a tenth of a search's reads' CPU for names that come back
/// unchanged. A name with a percent sign (the path's own escapes, which the URL decodes), a
/// `#` (`LocalFileSystem` refuses names ending `#<digits>`, its uploads' staging), a colon, a
/// bar or a backslash (the URL's drive-letter rules: `c|` is read `c:`), or a control character
/// is left to it; `None` for
/// those. A `Path` has no empty, `.` or `..` part to resolve.
fn plain_path(location: &Path) -> Option<PathBuf> {
    let name = location.as_ref();
    let plain = |b: &u8| !matches!(b, b'%' | b'#' | b':' | b'|' | b'\\') && !b.is_ascii_control();
    (!name.is_empty() && name.as_bytes().iter().all(plain))
        .then(|| PathBuf::from(format!("/{name}")))
}

impl CachedFirst {
    /// `wanted` of `location`: `None` for `LocalFileSystem` to answer.
    async fn read(
        &self,
        location: &Path,
        wanted: Wanted,
    ) -> Option<object_store::Result<GetResult>> {
        let path = match plain_path(location) {
            Some(path) => path,
            None => self.local.path_to_filesystem(location).ok()?,
        };
        let mut outcome = Outcome::Elsewhere;
        if wanted.small() && self.nowait.load(Ordering::Relaxed) {
            outcome = read(&path, location, &wanted, Wait::Never);
            if matches!(outcome, Outcome::Unsupported) {
                self.nowait.store(false, Ordering::Relaxed);
            }
        }
        if matches!(outcome, Outcome::Elsewhere | Outcome::Unsupported) {
            let location = location.clone();
            outcome = tokio::task::spawn_blocking(move || {
                read(&path, &location, &wanted, Wait::Blocking)
            })
            .await
            .ok()?;
        }
        match outcome {
            Outcome::Read(bytes, range, meta) => Some(Ok(answer(location, range, bytes, &meta))),
            Outcome::Failed(e) => Some(Err(e)),
            Outcome::Elsewhere | Outcome::Unsupported => None,
        }
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
            return result;
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
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use arrow::record_batch::RecordBatch;
    use object_store::ObjectStoreExt;

    use super::*;
    use crate::catalog::{NamespaceName, TableName};
    use crate::engine::{Engine, TableRef, Warehouse, WriteEngine, rows_of};
    use crate::manifest::{ManifestStore, ReadOnlyManifestStore};
    use crate::store::EmbeddedStore;

    /// The query process's and a worker's engines read local tables through this store; a
    /// writer keeps Lance's own local reader (and writer).
    #[tokio::test]
    async fn readers_read_local_tables_through_this_store() {
        let dir = tempfile::tempdir().unwrap();
        let kv = Arc::new(EmbeddedStore::open(&dir.path().join("manifests.redb"), true).unwrap());
        let warehouse = Warehouse::Local(dir.path().join("warehouse"));
        let writer = WriteEngine::new(warehouse.clone(), ManifestStore::new(kv.clone()));
        let t = TableRef::new(
            NamespaceName::parse("s").unwrap(),
            TableName::parse("t").unwrap(),
        );
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let ids = Int64Array::from_iter_values(0..100_000);
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(ids)]).unwrap();
        writer
            .create_stream(&t, rows_of(schema, vec![batch]))
            .await
            .unwrap();
        let query = Engine::read_only(warehouse.clone(), ReadOnlyManifestStore::new(kv));
        let worker = Engine::pinned(warehouse);
        for (engine, prefix) in [(&*writer, "file"), (&query, PREFIX), (&worker, PREFIX)] {
            let dataset = engine.open(&t, Some(1)).await.unwrap();
            let store = dataset.object_store(None).await.unwrap();
            assert_eq!(store.store_prefix, prefix);
            let rows = dataset.scan().try_into_batch().await.unwrap();
            assert_eq!(rows.num_rows(), 100_000);
        }
    }

    /// A plain name maps to the file `LocalFileSystem` maps it to; any other is left to it.
    #[test]
    fn a_plain_name_is_the_file_the_local_file_system_names() {
        let local = LocalFileSystem::new();
        let plain = [
            "srv/lake/s/t.lance/data/0f3c-a1.lance",
            "t.lance/_indices/5e1c/index.idx",
            "a b/ü é/x-y_z.1~+=,;@!$&'()*[]",
            "tmp/x",
        ];
        for name in plain {
            let location = Path::parse(name).unwrap();
            assert_eq!(
                plain_path(&location),
                Some(local.path_to_filesystem(&location).unwrap()),
                "{name}"
            );
        }
        // Escaped by `Path` (then decoded by the URL), staging names, drive letters: not plain.
        let other = [
            Path::from_iter(["d", "a/b"]),
            Path::from_iter(["d", ".."]),
            Path::from_iter(["d", "tab\there"]),
            Path::parse("d/50%").unwrap(),
            Path::parse("d/x#12").unwrap(),
            Path::parse("d/c:").unwrap(),
            Path::parse("c|/t.lance/a").unwrap(),
            Path::parse("d/ab|").unwrap(),
            Path::parse("d/a\\b").unwrap(),
            Path::parse("").unwrap(),
        ];
        for location in other {
            assert_eq!(plain_path(&location), None, "{location}");
        }
    }

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
    async fn a_read_past_the_end_or_of_a_missing_file_fails() {
        let (store, dir, location) = store_and_file(b"0123456789");
        // Past the end: refused, as Lance's own local reader refuses it (object_store would
        // return the bytes there are, and a reader trusting a stale size would take them).
        for range in [5..20, 20..30] {
            let e = store.get_range(&location, range.clone()).await.unwrap_err();
            assert!(e.to_string().contains("past the end"), "{range:?}: {e}");
        }
        assert_eq!(store.get_range(&location, 5..10).await.unwrap(), "56789");

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
        let (_store, dir, location) = store_and_file(b"just written, so in the page cache");
        let path = dir.path().join("data.lance");
        let read = |wanted| read(&path, &location, &wanted, Wait::Never);
        let Outcome::Read(bytes, range, meta) = read(Wanted::Range(5..12)) else {
            panic!("openat2(RESOLVE_CACHED) and preadv2(RWF_NOWAIT) work on this file system");
        };
        assert_eq!(
            (bytes, range, meta.len()),
            (Bytes::from("written"), 5..12, 34)
        );
        assert!(matches!(read(Wanted::Whole), Outcome::Read(whole, ..) if whole.len() == 34));
        assert!(
            matches!(read(Wanted::Range(30..40)), Outcome::Failed(_)),
            "past the end"
        );
        // Neither a FIFO nor a directory holds the thread: they are for LocalFileSystem.
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        for path in [fifo, dir.path().to_owned()] {
            let outcome = super::read(&path, &location, &Wanted::Range(0..4), Wait::Never);
            assert!(
                matches!(outcome, Outcome::Elsewhere),
                "{path:?}: {outcome:?}"
            );
        }
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
