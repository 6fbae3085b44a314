//! Decoding stage files (Parquet, CSV, Arrow IPC) into batches of a table's schema.
//!
//! Columns are matched by name. A file type is accepted when it equals the table's type or widens
//! to it without loss (int32 → int64, float32 → float64, the string and binary encodings,
//! dictionaries of the type); anything else is a schema mismatch naming every offending column,
//! decided before a single row is written.

use std::io::Cursor;
use std::str::FromStr;

use arrow::array::RecordBatch;
use arrow::datatypes::{Schema, SchemaRef};
use bytes::Bytes;
use lake_common::stage::StagePath;

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

/// Checks the file at `path` (its bytes) against `target` — by name, losslessly — and returns
/// its batches with exactly `target`'s schema, decoded lazily: a file's schema is known (and
/// refused) before a row is decoded, and its rows need not all be in memory at once.
pub fn batches(
    path: &StagePath,
    bytes: Bytes,
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
    match format {
        FileFormat::Parquet => {
            let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                bytes.clone(),
            )
            .map_err(|e| decode(&e))?;
            conform(path, reader.schema().as_ref(), target)?;
            super::pages::check(
                &bytes,
                reader.metadata(),
                super::pages::PageLimits::default(),
            )
            .map_err(|e| decode(&e))?;
            let reader = reader.build().map_err(|e| decode(&e))?;
            Ok(Box::new(reader.map(cast)))
        }
        // The file format starts with "ARROW1"; anything else is read as a stream. Every
        // message is checked first: arrow allocates what a file declares (block sizes in the
        // footer, decompressed lengths) before reading it, and a failed allocation aborts.
        FileFormat::Arrow if bytes.starts_with(b"ARROW1") => {
            check_ipc_file(&bytes).map_err(|e| decode(&e))?;
            let reader = arrow::ipc::reader::FileReader::try_new(Cursor::new(bytes), None)
                .map_err(|e| decode(&e))?;
            conform(path, reader.schema().as_ref(), target)?;
            Ok(Box::new(reader.map(cast)))
        }
        FileFormat::Arrow => {
            check_ipc_stream(&bytes, 0).map_err(|e| decode(&e))?;
            let reader = arrow::ipc::reader::StreamReader::try_new(Cursor::new(bytes), None)
                .map_err(|e| decode(&e))?;
            conform(path, reader.schema().as_ref(), target)?;
            Ok(Box::new(reader.map(cast)))
        }
        FileFormat::Csv => {
            // CSV has names but no types: the header must name the table's columns, in order,
            // and the values are parsed as the table's types.
            let (header, _) = arrow::csv::reader::Format::default()
                .with_header(true)
                .infer_schema(Cursor::new(&bytes), Some(0))
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
            let reader = arrow::csv::ReaderBuilder::new(target.clone())
                .with_header(true)
                .build(Cursor::new(bytes))
                .map_err(|e| decode(&e))?;
            Ok(Box::new(reader.map(move |b| b.map_err(|e| decode(&e)))))
        }
    }
}

/// One encapsulated IPC message, within the file's bytes.
struct IpcMessage<'a> {
    header: &'a [u8],
    body: &'a [u8],
    /// Where the next message starts.
    next: usize,
}

/// The header (flatbuffer) and body of the encapsulated message at `at`, both within `bytes`;
/// `None` at the end-of-stream marker.
fn ipc_message(bytes: &[u8], at: usize) -> Result<Option<IpcMessage<'_>>, String> {
    let word = |i: usize| -> Option<i32> {
        Some(i32::from_le_bytes(
            bytes.get(i..i.checked_add(4)?)?.try_into().ok()?,
        ))
    };
    let Some(mut len) = word(at) else {
        return Ok(None);
    };
    let mut header_at = at + 4;
    if len == -1 {
        // The continuation marker, then the length.
        len = word(header_at).unwrap_or(0);
        header_at += 4;
    }
    if len == 0 {
        return Ok(None);
    }
    let len = usize::try_from(len).map_err(|_| format!("a negative message length at {at}"))?;
    let header = bytes
        .get(header_at..header_at.saturating_add(len))
        .ok_or_else(|| format!("a message at {at} runs past the end of the file"))?;
    let message = arrow::ipc::root_as_message(header).map_err(|e| e.to_string())?;
    let body_at = header_at + len;
    let body_len = usize::try_from(message.bodyLength())
        .map_err(|_| format!("a negative body length at {at}"))?;
    let body = bytes
        .get(body_at..body_at.saturating_add(body_len))
        .ok_or_else(|| format!("a message body at {at} runs past the end of the file"))?;
    Ok(Some(IpcMessage {
        header,
        body,
        next: body_at + body_len,
    }))
}

fn check_one(header: &[u8], body: &[u8]) -> Result<(), String> {
    crate::flight::check_ipc_message(header, body).map_err(|s| s.message().to_owned())
}

/// Every message of an IPC stream from `at` on.
fn check_ipc_stream(bytes: &[u8], mut at: usize) -> Result<(), String> {
    while let Some(message) = ipc_message(bytes, at)? {
        check_one(message.header, message.body)?;
        at = message.next;
    }
    Ok(())
}

/// Every block an IPC file's footer names (what its reader will read), within the file.
fn check_ipc_file(bytes: &[u8]) -> Result<(), String> {
    let n = bytes.len();
    let trailer = bytes
        .get(n.saturating_sub(10)..)
        .filter(|t| t.len() == 10 && t.ends_with(b"ARROW1"))
        .ok_or("no Arrow file footer")?;
    let footer_len = usize::try_from(i32::from_le_bytes(
        trailer[..4].try_into().map_err(|_| "no footer length")?,
    ))
    .map_err(|_| "a negative footer length")?;
    let footer = bytes
        .get(n.saturating_sub(10).saturating_sub(footer_len)..n - 10)
        .filter(|f| f.len() == footer_len)
        .ok_or("the footer runs past the start of the file")?;
    let footer = arrow::ipc::root_as_footer(footer).map_err(|e| e.to_string())?;
    let blocks = footer
        .dictionaries()
        .into_iter()
        .flatten()
        .chain(footer.recordBatches().into_iter().flatten());
    for block in blocks {
        let offset = usize::try_from(block.offset()).map_err(|_| "a negative block offset")?;
        let meta = usize::try_from(block.metaDataLength()).map_err(|_| "a negative block")?;
        let body = usize::try_from(block.bodyLength()).map_err(|_| "a negative block body")?;
        let end = offset
            .checked_add(meta)
            .and_then(|e| e.checked_add(body))
            .filter(|e| *e <= n)
            .ok_or("a block lies outside the file")?;
        let message = ipc_message(&bytes[..end], offset)?.ok_or("a block holds no message")?;
        check_one(message.header, message.body)?;
    }
    Ok(())
}

/// Every batch of the file at `path`, in memory (see [`batches`]).
pub fn load(
    path: &StagePath,
    bytes: Bytes,
    format: Option<FileFormat>,
    target: &SchemaRef,
) -> Result<Vec<RecordBatch>, LoadError> {
    batches(path, bytes, format, target)?.collect()
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
