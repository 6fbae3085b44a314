//! Parquet page headers, checked before a stage file is decoded.
//!
//! The Parquet reader allocates the uncompressed size a page header declares (up to 2 GiB) and
//! decompresses into it, one page per column at a time: a small zstd file of zeros could make one
//! `COPY INTO` hold gigabytes. Every page header of every column chunk is read first (the data
//! between them is skipped), and a file whose pages would need more than [`PageLimits`] is refused.

// `parquet::format` is deprecated for removal in parquet 59, with no public replacement for
// reading page headers yet; revisit on that upgrade.
#![allow(deprecated)]

use parquet::file::metadata::ParquetMetaData;
use parquet::format::PageHeader;
use parquet::thrift::TSerializable;
use thrift::protocol::TCompactInputProtocol;

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

/// Checks every page header of the file `bytes` (whose footer is `metadata`) against `limits`.
pub(super) fn check(
    bytes: &[u8],
    metadata: &ParquetMetaData,
    limits: PageLimits,
) -> Result<(), String> {
    for (g, group) in metadata.row_groups().iter().enumerate() {
        let mut together = 0usize;
        for (c, column) in group.columns().iter().enumerate() {
            let name = column.column_path().string();
            let (start, len) = column.byte_range();
            let chunk = usize::try_from(start)
                .ok()
                .zip(usize::try_from(len).ok())
                .and_then(|(s, l)| bytes.get(s..s.checked_add(l)?))
                .ok_or_else(|| format!("column {name:?} of row group {g} lies outside the file"))?;
            let largest = largest_page(chunk, limits)
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

/// The largest uncompressed page of a column chunk, every page within the chunk and the limit.
fn largest_page(chunk: &[u8], limits: PageLimits) -> Result<usize, String> {
    let mut rest = chunk;
    let mut largest = 0;
    while !rest.is_empty() {
        let header = {
            let mut protocol = TCompactInputProtocol::new(&mut rest);
            PageHeader::read_from_in_protocol(&mut protocol)
                .map_err(|e| format!("an unreadable page header: {e}"))?
        };
        let compressed = usize::try_from(header.compressed_page_size)
            .map_err(|_| "a page with a negative size")?;
        let uncompressed = usize::try_from(header.uncompressed_page_size)
            .map_err(|_| "a page with a negative size")?;
        if uncompressed > limits.page_bytes {
            return Err(format!(
                "a page of {uncompressed} bytes once uncompressed, above the {} allowed per page; \
                 write the file with smaller pages",
                limits.page_bytes
            ));
        }
        rest = rest
            .get(compressed..)
            .ok_or("a page runs past the end of its column chunk")?;
        largest = largest.max(uncompressed);
    }
    Ok(largest)
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
        check(file, metadata.metadata(), limits)
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
        let err = check(&forged, metadata.metadata(), SMALL).unwrap_err();
        assert!(err.contains("column \"c0\""), "{err}");
    }
}
