//! Decoding stage files (Parquet, CSV, Arrow IPC) into batches of a table's schema.
//!
//! Columns are matched by name. A file type is accepted when it equals the table's type or widens
//! to it without loss (int32 → int64, float32 → float64, the string and binary encodings,
//! dictionaries of the type); anything else is a schema mismatch naming every offending column,
//! decided before a single row is written.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow::array::RecordBatch;
use arrow::datatypes::{Schema, SchemaRef};
use bytes::Bytes;
use lake_common::stage::StagePath;

use super::file::RangeFile;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    Parquet,
    Csv,
    Arrow,
}

impl FromStr for FileFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "parquet" => Ok(Self::Parquet),
            "csv" => Ok(Self::Csv),
            "arrow" | "ipc" => Ok(Self::Arrow),
            other => Err(format!(
                "unknown file format {other:?}; use PARQUET, CSV or ARROW"
            )),
        }
    }
}

impl FileFormat {
    /// The format a file name's extension implies.
    pub fn from_path(path: &StagePath) -> Option<Self> {
        let ext = path.as_str().rsplit_once('.')?.1.to_ascii_lowercase();
        match ext.as_str() {
            "parquet" | "pq" => Some(Self::Parquet),
            "csv" => Some(Self::Csv),
            "arrow" | "arrows" | "ipc" | "feather" => Some(Self::Arrow),
            _ => None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(
        "cannot tell the format of {path}; name it .parquet, .csv or .arrow, or add \
         FILE_FORMAT = PARQUET|CSV|ARROW"
    )]
    UnknownFormat { path: String },
    #[error("{path} is not a readable {format:?} file: {message}")]
    Decode {
        path: String,
        format: FileFormat,
        message: String,
    },
    #[error("{path} does not match the table's schema: {}", problems.join("; "))]
    SchemaMismatch { path: String, problems: Vec<String> },
}

/// A file's batches, decoded as they are pulled.
pub type Batches = Box<dyn Iterator<Item = Result<RecordBatch, LoadError>> + Send>;

/// The largest Arrow IPC message (header or body) read from a stage file: arrow allocates what
/// a message declares before reading it.
const MAX_IPC_MESSAGE: u64 = crate::flight::MAX_DECODING as u64;

/// Checks the file at `path` against `target` — by name, losslessly — and returns its batches
/// with exactly `target`'s schema, decoded lazily from `file` (read in ranges, see
/// [`super::file`]): a file's schema is known (and refused) before a row is decoded, every size
/// it declares is checked before a decoder allocates it, and its rows are never all in memory.
/// Blocking: call it, and pull the batches, off the async workers.
pub(crate) fn batches(
    path: &StagePath,
    file: RangeFile,
    format: Option<FileFormat>,
    target: &SchemaRef,
) -> Result<Batches, LoadError> {
    let format = format
        .or_else(|| FileFormat::from_path(path))
        .ok_or_else(|| LoadError::UnknownFormat {
            path: path.to_string(),
        })?;
    let name = path.to_string();
    let decode = move |e: &dyn std::fmt::Display| LoadError::Decode {
        path: name.clone(),
        format,
        message: e.to_string(),
    };
    let cast = {
        let target = target.clone();
        let decode = decode.clone();
        move |batch: Result<RecordBatch, arrow::error::ArrowError>| {
            batch
                .and_then(|b| crate::conform::cast_batch(b, &target))
                .map_err(|e| decode(&e))
        }
    };
    let is_ipc_file = |file: &RangeFile| {
        file.range(0, 6)
            .is_ok_and(|magic| magic.as_ref() == b"ARROW1")
    };
    match format {
        FileFormat::Parquet => {
            super::pages::footer(&file).map_err(|e| decode(&e))?;
            let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                file.clone(),
            )
            .map_err(|e| decode(&e))?;
            conform(path, reader.schema().as_ref(), target)?;
            super::pages::check(
                &file,
                reader.metadata(),
                super::pages::PageLimits::default(),
            )
            .map_err(|e| decode(&e))?;
            let reader = reader.build().map_err(|e| decode(&e))?;
            Ok(Box::new(reader.map(cast)))
        }
        // The file format starts with "ARROW1"; anything else is read as a stream. Every
        // message is checked first: arrow allocates what a file declares (block sizes in the
        // footer, message lengths, decompressed lengths) before reading it, and a failed
        // allocation aborts.
        FileFormat::Arrow if is_ipc_file(&file) => {
            check_ipc_file(&file).map_err(|e| decode(&e))?;
            let reader = arrow::ipc::reader::FileReader::try_new(file.cursor(0), None)
                .map_err(|e| decode(&e))?;
            conform(path, reader.schema().as_ref(), target)?;
            Ok(Box::new(reader.map(cast)))
        }
        FileFormat::Arrow => {
            check_ipc_stream(&file, 0).map_err(|e| decode(&e))?;
            let reader = arrow::ipc::reader::StreamReader::try_new(file.cursor(0), None)
                .map_err(|e| decode(&e))?;
            conform(path, reader.schema().as_ref(), target)?;
            Ok(Box::new(reader.map(cast)))
        }
        FileFormat::Csv => {
            // CSV has names but no types: the header must name the table's columns, in order,
            // and the values are parsed as the table's types.
            let read = Arc::new(AtomicU64::new(0));
            let (header, _) = arrow::csv::reader::Format::default()
                .with_header(true)
                .infer_schema(CsvInput::new(file.cursor(0), read.clone()), Some(0))
                .map_err(|e| decode(&e))?;
            let names: Vec<&str> = header.fields().iter().map(|f| f.name().as_str()).collect();
            let expected: Vec<&str> = target.fields().iter().map(|f| f.name().as_str()).collect();
            if names != expected {
                return Err(LoadError::SchemaMismatch {
                    path: path.to_string(),
                    problems: vec![format!(
                        "the CSV header is {names:?}; the table's columns are {expected:?}"
                    )],
                });
            }
            read.store(0, Ordering::Relaxed);
            let reader = arrow::csv::ReaderBuilder::new(target.clone())
                .with_header(true)
                .build(CsvInput::new(file.cursor(0), read.clone()))
                .map_err(|e| decode(&e))?;
            Ok(Box::new(reader.map(move |b| {
                // A batch decoded: what it read is no longer held.
                read.store(0, Ordering::Relaxed);
                b.map_err(|e| decode(&e))
            })))
        }
    }
}

/// The most bytes of CSV one batch of rows may span: the decoder holds a batch's records (a
/// single line of 10 GB, too) in memory until the batch is complete.
const MAX_CSV_BATCH_BYTES: u64 = 256 << 20;

/// A CSV file's bytes, refused past [`MAX_CSV_BATCH_BYTES`] since the last batch.
struct CsvInput<R> {
    inner: R,
    read: Arc<AtomicU64>,
}

impl<R> CsvInput<R> {
    fn new(inner: R, read: Arc<AtomicU64>) -> Self {
        Self { inner, read }
    }
}

impl<R: std::io::Read> std::io::Read for CsvInput<R> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(out)?;
        let total = self.read.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
        if total > MAX_CSV_BATCH_BYTES {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "a batch of CSV records spans more than {MAX_CSV_BATCH_BYTES} bytes (a \
                     record that long is not loaded)"
                ),
            ));
        }
        Ok(n)
    }
}

/// One encapsulated IPC message of a file: its header (flatbuffer) and where its body lies.
struct IpcMessage {
    header: Bytes,
    body_at: u64,
    body_len: u64,
    /// Where the next message starts.
    next: u64,
}

/// The encapsulated message at `at`, its header and body within the file and the limits;
/// `None` at the end-of-stream marker or the end of the file.
fn ipc_message(file: &RangeFile, at: u64) -> Result<Option<IpcMessage>, String> {
    let size = file.size();
    let word = |i: u64| -> Result<Option<i32>, String> {
        if i.saturating_add(4) > size {
            return Ok(None);
        }
        let b = file.range(i, 4).map_err(|e| e.to_string())?;
        Ok(Some(i32::from_le_bytes([b[0], b[1], b[2], b[3]])))
    };
    let Some(mut len) = word(at)? else {
        return Ok(None);
    };
    let mut header_at = at + 4;
    if len == -1 {
        // The continuation marker, then the length.
        len = word(header_at)?.unwrap_or(0);
        header_at += 4;
    }
    if len == 0 {
        return Ok(None);
    }
    let len = u64::try_from(len).map_err(|_| format!("a negative message length at {at}"))?;
    if len > MAX_IPC_MESSAGE || header_at.saturating_add(len) > size {
        return Err(format!(
            "a message header of {len} bytes at {at}: past the end of the file or above the \
             {MAX_IPC_MESSAGE} allowed"
        ));
    }
    let header = file
        .range(header_at, len as usize)
        .map_err(|e| e.to_string())?;
    let message = arrow::ipc::root_as_message(&header).map_err(|e| e.to_string())?;
    let body_at = header_at + len;
    let body_len = u64::try_from(message.bodyLength())
        .map_err(|_| format!("a negative body length at {at}"))?;
    if body_len > MAX_IPC_MESSAGE || body_at.saturating_add(body_len) > size {
        return Err(format!(
            "a message body of {body_len} bytes at {at}: past the end of the file or above the \
             {MAX_IPC_MESSAGE} allowed (write smaller batches)"
        ));
    }
    Ok(Some(IpcMessage {
        header,
        body_at,
        body_len,
        next: body_at + body_len,
    }))
}

/// The declared sizes of one message, reading only its compressed buffers' first bytes.
/// Delta dictionaries (appended to the dictionary they extend, never replacing it) add up in
/// `deltas` against [`MAX_IPC_MESSAGE`], as the decoder holds them together.
fn check_one(file: &RangeFile, message: &IpcMessage, deltas: &mut u64) -> Result<(), String> {
    let decoded = crate::flight::check_ipc_message_at(&message.header, |offset| {
        let offset = offset as u64;
        if offset.saturating_add(8) > message.body_len {
            return None;
        }
        let b = file.range(message.body_at + offset, 8).ok()?;
        b.as_ref().try_into().ok()
    })
    .map_err(|s| s.message().to_owned())?;
    let delta = arrow::ipc::root_as_message(&message.header)
        .ok()
        .and_then(|m| m.header_as_dictionary_batch())
        .is_some_and(|d| d.isDelta());
    if delta {
        *deltas = deltas.saturating_add(decoded.max(message.body_len));
        if *deltas > MAX_IPC_MESSAGE {
            return Err(format!(
                "delta dictionaries of more than {MAX_IPC_MESSAGE} bytes in all (write the file \
                 without dictionary deltas)"
            ));
        }
    }
    Ok(())
}

/// Every message of an IPC stream from `at` on.
fn check_ipc_stream(file: &RangeFile, mut at: u64) -> Result<(), String> {
    let mut deltas = 0;
    while let Some(message) = ipc_message(file, at)? {
        check_one(file, &message, &mut deltas)?;
        at = message.next;
    }
    Ok(())
}

/// Every block an IPC file's footer names (what its reader will read), within the file.
fn check_ipc_file(file: &RangeFile) -> Result<(), String> {
    let n = file.size();
    if n < 10 {
        return Err("no Arrow file footer".into());
    }
    let trailer = file.range(n - 10, 10).map_err(|e| e.to_string())?;
    if !trailer.ends_with(b"ARROW1") {
        return Err("no Arrow file footer".into());
    }
    let footer_len = u64::try_from(i32::from_le_bytes([
        trailer[0], trailer[1], trailer[2], trailer[3],
    ]))
    .map_err(|_| "a negative footer length")?;
    if footer_len > MAX_IPC_MESSAGE || footer_len > n - 10 {
        return Err("the footer runs past the start of the file".into());
    }
    let footer = file
        .range(n - 10 - footer_len, footer_len as usize)
        .map_err(|e| e.to_string())?;
    let footer = arrow::ipc::root_as_footer(&footer).map_err(|e| e.to_string())?;
    let blocks = footer
        .dictionaries()
        .into_iter()
        .flatten()
        .chain(footer.recordBatches().into_iter().flatten());
    let mut deltas = 0;
    let mut spans = Vec::new();
    for block in blocks {
        let offset = u64::try_from(block.offset()).map_err(|_| "a negative block offset")?;
        let meta = u64::try_from(block.metaDataLength()).map_err(|_| "a negative block")?;
        let body = u64::try_from(block.bodyLength()).map_err(|_| "a negative block body")?;
        let end = offset
            .checked_add(meta)
            .and_then(|e| e.checked_add(body))
            .filter(|e| *e <= n && meta <= MAX_IPC_MESSAGE && body <= MAX_IPC_MESSAGE)
            .ok_or("a block lies outside the file or above the size allowed")?;
        let message = ipc_message(file, offset)?.ok_or("a block holds no message")?;
        // The reader slices the block by the footer's lengths, not the message's own: they
        // must agree, or it decodes bytes other than the ones checked.
        if message.body_at != offset + meta || message.body_len != body {
            return Err("a block's lengths disagree with its message".into());
        }
        check_one(file, &message, &mut deltas)?;
        spans.push((offset, end));
    }
    // Each block is read once: listed twice (or overlapping), a dictionary is decoded again.
    spans.sort_unstable();
    if spans.windows(2).any(|w| w[1].0 < w[0].1) {
        return Err("the footer lists overlapping blocks".into());
    }
    Ok(())
}

/// Every batch of `bytes` (a whole file in memory; see [`batches`]).
pub fn load(
    path: &StagePath,
    bytes: Bytes,
    format: Option<FileFormat>,
    target: &SchemaRef,
) -> Result<Vec<RecordBatch>, LoadError> {
    batches(
        path,
        RangeFile::new(std::sync::Arc::new(bytes)),
        format,
        target,
    )?
    .collect()
}

/// Every problem between a file's schema and the table's, or none.
fn conform(path: &StagePath, file: &Schema, table: &Schema) -> Result<(), LoadError> {
    crate::conform::check(file, table).map_err(|problems| LoadError::SchemaMismatch {
        path: path.to_string(),
        problems,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use arrow::array::{Float32Array, Int32Array, StringArray};
    use arrow::datatypes::DataType;
    use arrow::datatypes::Field;

    fn table() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("price", DataType::Float64, true),
            Field::new("item", DataType::Utf8, true),
        ]))
    }

    fn path(p: &str) -> StagePath {
        StagePath::parse(p).unwrap()
    }

    fn ipc(batch: &RecordBatch) -> Bytes {
        let mut out = Vec::new();
        let mut writer =
            arrow::ipc::writer::FileWriter::try_new(&mut out, &batch.schema()).unwrap();
        writer.write(batch).unwrap();
        writer.finish().unwrap();
        drop(writer);
        Bytes::from(out)
    }

    #[test]
    fn narrower_numbers_widen_to_the_table() {
        let file = RecordBatch::try_from_iter(vec![
            ("id", Arc::new(Int32Array::from(vec![1, 2])) as _),
            ("price", Arc::new(Float32Array::from(vec![1.5, 2.5])) as _),
            ("item", Arc::new(StringArray::from(vec!["a", "b"])) as _),
        ])
        .unwrap();
        let batches = load(&path("in/a.arrow"), ipc(&file), None, &table()).unwrap();
        assert_eq!(batches[0].schema(), table());
        assert_eq!(batches[0].num_rows(), 2);
    }

    #[test]
    fn mismatches_name_every_column() {
        let file = RecordBatch::try_from_iter(vec![
            ("id", Arc::new(StringArray::from(vec!["1"])) as _),
            ("extra", Arc::new(Int32Array::from(vec![1])) as _),
        ])
        .unwrap();
        let err = load(&path("a.arrow"), ipc(&file), None, &table()).unwrap_err();
        let text = err.to_string();
        for part in [
            "column \"id\" is Utf8 in the data but Int64",
            "column \"price\" is missing",
            "column \"item\" is missing",
            "column \"extra\" is not in the table",
        ] {
            assert!(text.contains(part), "{text} lacks {part}");
        }
    }

    #[test]
    fn csv_needs_the_table_header_and_parses_its_types() {
        let good = Bytes::from_static(b"id,price,item\n1,2.5,tea\n2,3,cake\n");
        let batches = load(&path("x.csv"), good, None, &table()).unwrap();
        assert_eq!(batches[0].num_rows(), 2);
        let wrong = Bytes::from_static(b"id,item,price\n1,tea,2.5\n");
        assert!(matches!(
            load(&path("x.csv"), wrong, None, &table()),
            Err(LoadError::SchemaMismatch { .. })
        ));
        let bad_value = Bytes::from_static(b"id,price,item\none,2.5,tea\n");
        assert!(matches!(
            load(&path("x.csv"), bad_value, None, &table()),
            Err(LoadError::Decode { .. })
        ));
    }

    #[test]
    fn the_format_comes_from_the_option_or_the_extension() {
        let csv = Bytes::from_static(b"id,price,item\n1,2.5,tea\n");
        assert!(matches!(
            load(&path("data.txt"), csv.clone(), None, &table()),
            Err(LoadError::UnknownFormat { .. })
        ));
        assert!(load(&path("data.txt"), csv, Some(FileFormat::Csv), &table()).is_ok());
        assert!(matches!(
            load(
                &path("x.parquet"),
                Bytes::from_static(b"nope"),
                None,
                &table()
            ),
            Err(LoadError::Decode {
                format: FileFormat::Parquet,
                ..
            })
        ));
    }
}
