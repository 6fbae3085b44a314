//! A Parquet stage file's footer and page headers, checked before anything decodes them.
//!
//! - The footer: the reader decodes it in one go, allocating what its lists declare (up to 2^31
//!   elements each) before reading them; its length and every size in it are checked first
//!   (`super::thrift`).
//! - The pages: the reader allocates the uncompressed size a page header declares (up to
//!   2 GiB) and decompresses into it, one page per column at a time: a small zstd file of zeros
//!   could make one `COPY INTO` hold gigabytes. Every page header of every column chunk is read
//!   first (the data between them is skipped), and a file whose pages would need more than
//!   [`PageLimits`] is refused.

use parquet::file::metadata::ParquetMetaData;

use super::file::RangeFile;
use super::thrift::{Bounds, Seen, Walk};

/// The longest footer accepted (a wide file with many row groups has a few MiB).
pub(super) const MAX_FOOTER_BYTES: u64 = 64 << 20;
/// What a footer may declare once decoded, and its largest value (a schema, statistics).
const FOOTER_BOUNDS: Bounds = Bounds {
    binary: 16 << 20,
    decoded: 256 << 20,
};
/// Page headers hold statistics, nothing large.
const PAGE_HEADER_BOUNDS: Bounds = Bounds {
    binary: 16 << 20,
    decoded: 16 << 20,
};

/// Checks the footer of the Parquet file `file` before a reader decodes it.
pub(super) fn footer(file: &RangeFile) -> Result<(), String> {
    let size = file.size();
    if size < 12 {
        return Err("too short for a Parquet file".into());
    }
    let tail = file.range(size - 8, 8).map_err(|e| e.to_string())?;
    if &tail[4..] != b"PAR1" {
        return Err("no Parquet footer (PAR1) at the end of the file".into());
    }
    let len = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
    if len > MAX_FOOTER_BYTES || len > size - 12 {
        return Err(format!(
            "a footer of {len} bytes in a file of {size} (at most {MAX_FOOTER_BYTES} are read)"
        ));
    }
    let start = size - 8 - len;
    let mut walk = Walk::new(file.cursor(start), len, FOOTER_BOUNDS);
    let mut schema = Schema::default();
    // FileMetaData.schema (2) is a list of SchemaElement { name (4), num_children (5) }.
    walk.read_struct(&mut |path, seen| match (path, seen) {
        ([2, 4], Seen::Binary(len)) => schema.name = len,
        ([2, 5], Seen::Int(n)) => schema.children = Some(n),
        ([2], Seen::End) => schema.end_element(),
        _ => {}
    })
    .map_err(|e| format!("a forged footer: {e}"))?;
    schema.check().map_err(|e| format!("a forged schema: {e}"))
}

/// The deepest schema accepted (the reader builds and converts it recursively).
const MAX_SCHEMA_DEPTH: usize = 64;
/// What the leaves' paths may take together: each leaf copies the names of all its ancestors.
const MAX_SCHEMA_PATH_BYTES: u64 = 64 << 20;

/// A footer's schema as its elements declare it: the tree is built from each element's
/// `num_children` (not from the Thrift nesting), allocating that many children first.
#[derive(Default)]
struct Schema {
    /// (num_children, name length) of each element, in order.
    elements: Vec<(i64, u64)>,
    name: u64,
    children: Option<i64>,
}

impl Schema {
    fn end_element(&mut self) {
        self.elements.push((
            self.children.take().unwrap_or(0),
            std::mem::take(&mut self.name),
        ));
    }

    /// The elements form one tree no deeper than [`MAX_SCHEMA_DEPTH`], whose leaves' paths
    /// take at most [`MAX_SCHEMA_PATH_BYTES`].
    fn check(&self) -> Result<(), String> {
        // (children still to come, bytes of the path so far) of each open group.
        let mut open: Vec<(i64, u64)> = Vec::new();
        let mut paths: u64 = 0;
        for (i, &(children, name)) in self.elements.iter().enumerate() {
            while open.last().is_some_and(|(left, _)| *left == 0) {
                open.pop();
            }
            match open.last_mut() {
                Some((left, _)) => *left -= 1,
                None if i > 0 => {
                    return Err(format!("element {i} lies outside the schema's tree"));
                }
                None => {}
            }
            let left = self.elements.len() - i - 1;
            if children < 0 || children as u64 > left as u64 {
                return Err(format!(
                    "element {i} declares {children} children, with {left} elements left"
                ));
            }
            if open.len() >= MAX_SCHEMA_DEPTH {
                return Err(format!("groups nested over {MAX_SCHEMA_DEPTH} deep"));
            }
            let path = open.last().map_or(0, |(_, p)| *p).saturating_add(name);
            if children > 0 {
                open.push((children, path));
            } else {
                paths = paths
                    .saturating_add(path)
                    .saturating_add(24 * open.len() as u64);
                if paths > MAX_SCHEMA_PATH_BYTES {
                    return Err(format!(
                        "the columns' paths take more than {MAX_SCHEMA_PATH_BYTES} bytes"
                    ));
                }
            }
        }
        if open.iter().any(|(left, _)| *left > 0) {
            return Err("groups declare more children than the schema has".into());
        }
        Ok(())
    }
}

/// What the pages of one stage file may need once uncompressed.
#[derive(Debug, Clone, Copy)]
pub(super) struct PageLimits {
    /// One page (writers cut pages at about 1 MiB; a page above this is a bomb or a mistake).
    pub page_bytes: usize,
    /// The largest page of every column of a row group together: what the reader holds at once.
    pub row_group_bytes: usize,
}

impl Default for PageLimits {
    fn default() -> Self {
        Self {
            page_bytes: 256 << 20,
            row_group_bytes: 1 << 30,
        }
    }
}

/// Checks every page header of `file` (whose footer is `metadata`) against `limits`.
pub(super) fn check(
    file: &RangeFile,
    metadata: &ParquetMetaData,
    limits: PageLimits,
) -> Result<(), String> {
    for (g, group) in metadata.row_groups().iter().enumerate() {
        let mut together = 0usize;
        for (c, column) in group.columns().iter().enumerate() {
            let name = column.column_path().string();
            let (start, len) = column.byte_range();
            if start.checked_add(len).is_none_or(|end| end > file.size()) {
                return Err(format!(
                    "column {name:?} of row group {g} lies outside the file"
                ));
            }
            // LZ4 (the deprecated codec, not LZ4_RAW) decompresses as an LZ4 frame, ignoring
            // the size the page declares.
            if column.compression() == parquet::basic::Compression::LZ4 {
                return Err(format!(
                    "column {name:?} is compressed with the deprecated LZ4 codec; write the file \
                     with LZ4_RAW, ZSTD, SNAPPY or GZIP"
                ));
            }
            let values = u64::try_from(column.num_values()).unwrap_or(0);
            let largest = largest_page(file, start, len, values, limits)
                .map_err(|e| format!("column {name:?} (#{c}) of row group {g}: {e}"))?;
            together = together.saturating_add(largest);
        }
        if together > limits.row_group_bytes {
            return Err(format!(
                "row group {g} needs {together} bytes of pages at once once uncompressed, above \
                 the {} allowed; write it with smaller pages or fewer columns per file",
                limits.row_group_bytes
            ));
        }
    }
    Ok(())
}

/// Encodings whose decoders allocate what the page data (not its header) declares.
const DELTA_LENGTH_BYTE_ARRAY: i64 = 6;
const DELTA_BYTE_ARRAY: i64 = 7;

/// The largest uncompressed page of the column chunk of `len` bytes at `start` (holding
/// `values` values), every page within the chunk and the limit.
fn largest_page(
    file: &RangeFile,
    start: u64,
    len: u64,
    values: u64,
    limits: PageLimits,
) -> Result<usize, String> {
    let mut at = 0u64;
    let mut largest = 0;
    while at < len {
        let mut walk = Walk::new(file.cursor(start + at), len - at, PAGE_HEADER_BOUNDS);
        let mut header = PageHeader::default();
        walk.read_struct(&mut |path, seen| {
            if let Seen::Int(v) = seen {
                header.see(path, v);
            }
        })
        .map_err(|e| format!("an unreadable page header: {e}"))?;
        let (Some(uncompressed), Some(compressed)) = (header.uncompressed, header.compressed)
        else {
            return Err("a page header without its sizes".into());
        };
        let compressed = u64::try_from(compressed).map_err(|_| "a page with a negative size")?;
        let uncompressed =
            usize::try_from(uncompressed).map_err(|_| "a page with a negative size")?;
        if uncompressed > limits.page_bytes {
            return Err(format!(
                "a page of {uncompressed} bytes once uncompressed, above the {} allowed per page; \
                 write the file with smaller pages",
                limits.page_bytes
            ));
        }
        if compressed > limits.page_bytes as u64 {
            return Err(format!(
                "a page of {compressed} compressed bytes, above the {} allowed per page",
                limits.page_bytes
            ));
        }
        if let Some(n) = header.dictionary_values {
            // A dictionary value takes at least a byte: the decoder reserves what is declared.
            if n < 0 || n as u64 > uncompressed as u64 {
                return Err(format!(
                    "a dictionary page declares {n} values in {uncompressed} bytes"
                ));
            }
        }
        if let Some(n) = header.data_values
            && (n < 0 || n as u64 > values)
        {
            return Err(format!(
                "a data page declares {n} values, in a column of {values}"
            ));
        }
        if header
            .encodings
            .iter()
            .any(|e| matches!(*e, DELTA_LENGTH_BYTE_ARRAY | DELTA_BYTE_ARRAY))
        {
            return Err(
                "a page is encoded DELTA_LENGTH_BYTE_ARRAY or DELTA_BYTE_ARRAY, which are not \
                 loaded (their decoders size buffers by the page's own counts); write the file \
                 with PLAIN or dictionary encoding"
                    .into(),
            );
        }
        at = at
            .saturating_add(walk.position())
            .saturating_add(compressed);
        if at > len {
            return Err("a page runs past the end of its column chunk".into());
        }
        largest = largest.max(uncompressed);
    }
    Ok(largest)
}

/// The fields of a PageHeader that are checked.
#[derive(Default)]
struct PageHeader {
    uncompressed: Option<i64>,
    compressed: Option<i64>,
    data_values: Option<i64>,
    dictionary_values: Option<i64>,
    encodings: Vec<i64>,
}

impl PageHeader {
    fn see(&mut self, path: &[i16], v: i64) {
        match path {
            [2] => self.uncompressed = Some(v),
            [3] => self.compressed = Some(v),
            // DataPageHeader (5) and DataPageHeaderV2 (8): num_values (1), encoding (2 / 4).
            [5, 1] | [8, 1] => self.data_values = Some(v),
            [5, 2] | [8, 4] | [7, 2] => self.encodings.push(v),
            // DictionaryPageHeader (7): num_values (1).
            [7, 1] => self.dictionary_values = Some(v),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, RecordBatch};
    use bytes::Bytes;
    use parquet::arrow::ArrowWriter;
    use parquet::arrow::arrow_reader::ArrowReaderMetadata;
    use parquet::basic::{Compression, ZstdLevel};
    use parquet::file::properties::WriterProperties;

    use super::*;

    /// A zstd file of `rows` zeros in pages of at most `page` bytes, with `columns` columns.
    fn zeros(rows: i64, page: usize, columns: usize) -> Bytes {
        let batch = RecordBatch::try_from_iter((0..columns).map(|c| {
            (
                format!("c{c}"),
                Arc::new(Int64Array::from_iter_values((0..rows).map(|_| 0))) as _,
            )
        }))
        .unwrap();
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .set_dictionary_enabled(false)
            .set_data_page_size_limit(page)
            .set_data_page_row_count_limit(usize::MAX)
            .set_write_batch_size(1024)
            .build();
        let mut out = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut out, batch.schema(), Some(props)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        Bytes::from(out)
    }

    fn checked(file: &Bytes, limits: PageLimits) -> Result<(), String> {
        let metadata = ArrowReaderMetadata::load(file, Default::default()).unwrap();
        check(&ranged(file.clone()), metadata.metadata(), limits)
    }

    fn ranged(bytes: Bytes) -> RangeFile {
        RangeFile::new(Arc::new(bytes))
    }

    const SMALL: PageLimits = PageLimits {
        page_bytes: 1 << 20,
        row_group_bytes: 3 << 20,
    };

    #[test]
    fn pages_within_the_limits_pass() {
        let file = zeros(1_000_000, 512 << 10, 2);
        assert_eq!(checked(&file, SMALL), Ok(()));
    }

    #[test]
    fn a_page_above_the_limit_is_refused_before_decoding() {
        // 8 MB of zeros in one page: a few hundred compressed bytes.
        let file = zeros(1_000_000, 64 << 20, 1);
        assert!(file.len() < 64 << 10, "{}", file.len());
        let err = checked(&file, SMALL).unwrap_err();
        assert!(err.contains("a page of 8000000 bytes"), "{err}");
        assert!(err.contains("column \"c0\""), "{err}");
    }

    #[test]
    fn the_columns_of_a_row_group_are_bounded_together() {
        let file = zeros(100_000, 1 << 20, 8);
        let err = checked(&file, SMALL).unwrap_err();
        assert!(err.contains("row group 0 needs"), "{err}");
    }

    #[test]
    fn a_garbled_page_header_is_refused() {
        let file = zeros(1000, 1 << 20, 1);
        let metadata = ArrowReaderMetadata::load(&file, Default::default()).unwrap();
        let (start, len) = metadata.metadata().row_group(0).column(0).byte_range();
        let mut forged = file.to_vec();
        forged[start as usize..(start + len) as usize].fill(0xFF);
        let err = check(&ranged(forged.into()), metadata.metadata(), SMALL).unwrap_err();
        assert!(err.contains("column \"c0\""), "{err}");
    }

    /// A footer whose row-group list declares 2^31 - 1 elements, in a file of a few bytes:
    /// decoded, it asked for hundreds of gigabytes before reading one.
    fn forged_footer(list_size_varint: &[u8]) -> Bytes {
        // FileMetaData { 1: version i32 = 1, 2: schema list<struct> = [], 3: num_rows i64 =
        // 0, 4: row_groups list<struct> of the declared size }.
        let mut footer = vec![0x15, 2, 0x19, 0x0c, 0x16, 0, 0x19, 0xfc];
        footer.extend_from_slice(list_size_varint);
        footer.extend([0u8; 16]);
        parquet_file(&footer)
    }

    /// A Parquet file of nothing but `footer`.
    fn parquet_file(footer: &[u8]) -> Bytes {
        let mut file = b"PAR1".to_vec();
        file.extend(footer);
        file.extend((footer.len() as u32).to_le_bytes());
        file.extend(b"PAR1");
        file.into()
    }

    #[test]
    fn forged_footers_are_refused_before_decoding() {
        let forged = forged_footer(&[0xff, 0xff, 0xff, 0xff, 0x07]);
        let err = footer(&ranged(forged)).unwrap_err();
        assert!(err.contains("2147483647 elements"), "{err}");
        // A declared footer length past the file.
        let mut long = forged_footer(&[1]).to_vec();
        let n = long.len();
        long[n - 8..n - 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(
            footer(&ranged(long.into()))
                .unwrap_err()
                .contains("a footer of")
        );
        // A real file's footer passes.
        assert_eq!(footer(&ranged(zeros(1000, 1 << 20, 3))), Ok(()));
    }

    /// A footer whose schema is `elements` of (name, num_children).
    fn footer_with_schema(elements: &[(&str, Option<i64>)]) -> Bytes {
        let varint = |mut v: u64, out: &mut Vec<u8>| loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                break;
            }
            out.push(b | 0x80);
        };
        // FileMetaData { 1: version = 1, 2: schema list<struct> }.
        let mut footer = vec![0x15, 2, 0x19, 0xfc];
        varint(elements.len() as u64, &mut footer);
        for (name, children) in elements {
            footer.push(0x48);
            varint(name.len() as u64, &mut footer);
            footer.extend(name.as_bytes());
            if let Some(n) = children {
                footer.push(0x15);
                varint(((n << 1) ^ (n >> 63)) as u64, &mut footer);
            }
            footer.push(0);
        }
        // 3: num_rows = 0, 4: row_groups = [], stop.
        footer.extend([0x16, 0, 0x19, 0x0c, 0]);
        parquet_file(&footer)
    }

    #[test]
    fn forged_schemas_are_refused_before_decoding() {
        // num_children becomes Vec::with_capacity(num_children) (i32::MAX: 16 GiB).
        let huge = footer_with_schema(&[("root", Some(i64::from(i32::MAX))), ("a", None)]);
        let err = footer(&ranged(huge)).unwrap_err();
        assert!(err.contains("declares 2147483647 children"), "{err}");
        // Groups nested 100 deep: the reader builds the tree recursively.
        let mut deep: Vec<(&str, Option<i64>)> = vec![("g", Some(1)); 100];
        deep.push(("leaf", None));
        let err = footer(&ranged(footer_with_schema(&deep))).unwrap_err();
        assert!(err.contains("nested over 64"), "{err}");
        // Elements outside the tree, and a tree missing its elements.
        let err = footer(&ranged(footer_with_schema(&[
            ("root", Some(1)),
            ("a", None),
            ("b", None),
        ])))
        .unwrap_err();
        assert!(err.contains("outside the schema's tree"), "{err}");
        let err = footer(&ranged(footer_with_schema(&[("root", Some(1))]))).unwrap_err();
        assert!(err.contains("children"), "{err}");
        // A well-formed nested schema passes.
        let fine = [
            ("root", Some(2)),
            ("g", Some(2)),
            ("a", None),
            ("b", None),
            ("c", None),
        ];
        assert_eq!(footer(&ranged(footer_with_schema(&fine))), Ok(()));
    }

    #[test]
    fn delta_byte_array_pages_are_refused() {
        let batch = RecordBatch::try_from_iter([(
            "s",
            Arc::new(arrow::array::StringArray::from_iter_values(
                (0..1000).map(|i| format!("value {i}")),
            )) as _,
        )])
        .unwrap();
        let props = WriterProperties::builder()
            .set_dictionary_enabled(false)
            .set_encoding(parquet::basic::Encoding::DELTA_BYTE_ARRAY)
            .build();
        let mut out = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut out, batch.schema(), Some(props)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        let err = checked(&Bytes::from(out), PageLimits::default()).unwrap_err();
        assert!(err.contains("DELTA_BYTE_ARRAY"), "{err}");
    }
}
