//! A stage file read in ranges, as the decoders ask for them: `COPY INTO` holds a few buffers
//! of each file, never the whole file (a file of any size loads in bounded memory).
//!
//! The decoders are synchronous and run on a blocking thread; each range is fetched from the
//! object store by blocking on the runtime there.

use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;

use bytes::Bytes;
use object_store::ObjectStore;
use object_store::path::Path as ObjectPath;

/// What a sequential read fetches first (a page header is a few dozen bytes) …
const FIRST_READ: usize = 16 * 1024;
/// … doubling with each further fetch, up to this (columns of a Parquet file each keep one).
const READ_AHEAD: usize = 512 * 1024;

/// Bytes addressed by offset: a stage object, or bytes already in memory.
pub(crate) trait Ranges: Send + Sync {
    fn len(&self) -> u64;
    fn range(&self, start: u64, len: usize) -> std::io::Result<Bytes>;
}

impl Ranges for Bytes {
    fn len(&self) -> u64 {
        Bytes::len(self) as u64
    }

    fn range(&self, start: u64, len: usize) -> std::io::Result<Bytes> {
        let start = usize::try_from(start).unwrap_or(usize::MAX);
        let end = start.saturating_add(len);
        if end > Bytes::len(self) {
            return Err(past_the_end(start as u64, len, Bytes::len(self) as u64));
        }
        Ok(self.slice(start..end))
    }
}

fn past_the_end(start: u64, len: usize, size: u64) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        format!("bytes {start}..+{len} lie past the end of the file ({size} bytes)"),
    )
}

/// One object of the stage, as it was when it was opened: every range is read from that
/// version (its e-tag or version id), so a file replaced between the checks of `COPY INTO` and
/// its decoding fails instead of being decoded unchecked.
pub(crate) struct StageObject {
    store: Arc<dyn ObjectStore>,
    location: ObjectPath,
    meta: object_store::ObjectMeta,
    runtime: tokio::runtime::Handle,
}

impl StageObject {
    pub(super) fn new(
        store: Arc<dyn ObjectStore>,
        location: ObjectPath,
        meta: object_store::ObjectMeta,
        runtime: tokio::runtime::Handle,
    ) -> Self {
        Self {
            store,
            location,
            meta,
            runtime,
        }
    }
}

impl Ranges for StageObject {
    fn len(&self) -> u64 {
        self.meta.size
    }

    fn range(&self, start: u64, len: usize) -> std::io::Result<Bytes> {
        let size = self.meta.size;
        let end = start.saturating_add(len as u64);
        if end > size {
            return Err(past_the_end(start, len, size));
        }
        if len == 0 {
            return Ok(Bytes::new());
        }
        let options = object_store::GetOptions {
            range: Some(object_store::GetRange::Bounded(start..end)),
            if_match: self.meta.e_tag.clone(),
            version: self.meta.version.clone(),
            ..Default::default()
        };
        // Called from the decoders' blocking thread, never from an async worker.
        let bytes =
            self.runtime
                .block_on(async {
                    self.store
                        .get_opts(&self.location, options)
                        .await?
                        .bytes()
                        .await
                })
                .map_err(|e| match e {
                    object_store::Error::Precondition { .. }
                    | object_store::Error::NotFound { .. } => std::io::Error::other(format!(
                        "{} changed while it was read; load it again",
                        self.location
                    )),
                    e => std::io::Error::other(e),
                })?;
        if bytes.len() != len {
            return Err(past_the_end(start, len, size));
        }
        Ok(bytes)
    }
}

/// A file's bytes to decoders: a `Read + Seek` cursor, and Parquet's chunk reader.
#[derive(Clone)]
pub(crate) struct RangeFile(Arc<dyn Ranges>);

impl RangeFile {
    pub(crate) fn new(ranges: Arc<dyn Ranges>) -> Self {
        Self(ranges)
    }

    pub(super) fn size(&self) -> u64 {
        self.0.len()
    }

    pub(super) fn range(&self, start: u64, len: usize) -> std::io::Result<Bytes> {
        self.0.range(start, len)
    }

    /// A reader from `start` to the end, buffering [`READ_AHEAD`] bytes at a time.
    pub(super) fn cursor(&self, start: u64) -> Cursor {
        Cursor {
            file: self.clone(),
            pos: start,
            buffer: Bytes::new(),
            buffer_start: start,
            next_fetch: FIRST_READ,
        }
    }
}

impl parquet::file::reader::Length for RangeFile {
    fn len(&self) -> u64 {
        self.0.len()
    }
}

impl parquet::file::reader::ChunkReader for RangeFile {
    type T = Cursor;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Cursor> {
        Ok(self.cursor(start))
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        self.0
            .range(start, length)
            .map_err(|e| parquet::errors::ParquetError::External(Box::new(e)))
    }
}

/// Sequential reads of a [`RangeFile`], one buffer at a time.
pub(crate) struct Cursor {
    file: RangeFile,
    pos: u64,
    buffer: Bytes,
    buffer_start: u64,
    /// What the next fetch asks for: reads that only want a header stay small.
    next_fetch: usize,
}

impl Read for Cursor {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let size = self.file.size();
        if self.pos >= size || out.is_empty() {
            return Ok(0);
        }
        let buffered = self.buffer_start..self.buffer_start + self.buffer.len() as u64;
        if !buffered.contains(&self.pos) {
            let want = usize::try_from(size - self.pos)
                .unwrap_or(usize::MAX)
                .min(self.next_fetch.max(out.len()));
            self.buffer = self.file.range(self.pos, want)?;
            self.buffer_start = self.pos;
            self.next_fetch = (self.next_fetch * 2).min(READ_AHEAD);
        }
        let from = usize::try_from(self.pos - self.buffer_start).unwrap_or(usize::MAX);
        let available = &self.buffer[from..];
        let n = available.len().min(out.len());
        out[..n].copy_from_slice(&available[..n]);
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for Cursor {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        let size = self.file.size() as i128;
        let target = match to {
            SeekFrom::Start(n) => i128::from(n),
            SeekFrom::End(d) => size + i128::from(d),
            SeekFrom::Current(d) => i128::from(self.pos) + i128::from(d),
        };
        if target < 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a seek before the start of the file",
            ));
        }
        self.pos = u64::try_from(target).unwrap_or(u64::MAX);
        Ok(self.pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_and_seeks_within_the_file_only() {
        let data: Vec<u8> = (0..=255u8).cycle().take(READ_AHEAD * 2 + 10).collect();
        let file = RangeFile::new(Arc::new(Bytes::from(data.clone())));
        let mut cursor = file.cursor(0);
        let mut all = Vec::new();
        cursor.read_to_end(&mut all).unwrap();
        assert_eq!(all, data);
        cursor.seek(SeekFrom::End(-4)).unwrap();
        let mut tail = Vec::new();
        cursor.read_to_end(&mut tail).unwrap();
        assert_eq!(tail, data[data.len() - 4..]);
        assert!(
            cursor
                .seek(SeekFrom::Current(-(data.len() as i64) - 1))
                .is_err()
        );
        assert!(file.range(data.len() as u64 - 2, 3).is_err());
    }
}
