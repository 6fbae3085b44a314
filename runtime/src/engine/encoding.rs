//! How lake asks Lance to encode the columns of a table it creates.
//!
//! Lance chooses an encoding per page. For a fixed-width column it prices run-length encoding
//! by walking the page's runs: the costliest step of a write (a quarter of an ingest's CPU in a
//! profile, docs/performance.md). Unless a field names a threshold in its metadata
//! (`lance-encoding:rle-threshold`), Lance prices it for every page, even one whose values hardly
//! repeat, where it cannot win; with one, only for a page with fewer runs than that share of its
//! values. Lake names Lance's own default share on every fixed-width column that has none: the
//! schema is the table's, so appends, rewrites and compactions keep it.
//!
//! A client may choose encodings itself, in the same field metadata. Lance reads some of those
//! values only deep in its encoder, where a bad one panics or fails the write half-way, and
//! ignores others without a word; [`check`] refuses them before anything is written.

use std::sync::Arc;

use arrow::datatypes::{Field, Fields, Schema, SchemaRef};
use futures::StreamExt;
use lance_encoding::compression_config::BssMode;
use lance_encoding::constants::{
    BSS_META_KEY, COMPRESSION_LEVEL_META_KEY, COMPRESSION_META_KEY, DICT_DIVISOR_META_KEY,
    DICT_MAX_SIZE_META_KEY, DICT_SIZE_RATIO_META_KEY, DICT_VALUES_COMPRESSION_LEVEL_META_KEY,
    DICT_VALUES_COMPRESSION_META_KEY, MINICHUNK_SIZE_META_KEY, PACKED_STRUCT_LEGACY_META_KEY,
    PACKED_STRUCT_META_KEY, RLE_THRESHOLD_META_KEY, STRUCTURAL_ENCODING_FULLZIP,
    STRUCTURAL_ENCODING_META_KEY, STRUCTURAL_ENCODING_MINIBLOCK,
};
use lance_encoding::encodings::physical::block::CompressionScheme;

use super::{RowStream, row_stream};

/// Lance's mark of a blob column (lance-arrow's `BLOB_META_KEY`).
const BLOB_META_KEY: &str = "lance-encoding:blob";

/// The share of runs below which Lance prices run-length encoding for a page: Lance's own
/// default (`DEFAULT_RLE_COMPRESSION_THRESHOLD` in lance-encoding), which it applies only when a
/// field asks. A page of 8-byte values with more runs than half its values gains little from
/// run lengths, and bit-packing usually beats them there.
const RLE_THRESHOLD: &str = "0.5";

/// `schema` with [`RLE_THRESHOLD`] on every fixed-width column without a threshold of its own,
/// or `None` when no column takes it.
fn hinted(schema: &Schema) -> Option<SchemaRef> {
    let mut hinted = false;
    let fields: Fields = schema
        .fields()
        .iter()
        .map(|field| {
            if !takes_hint(field) {
                return field.clone();
            }
            hinted = true;
            let mut metadata = field.metadata().clone();
            metadata.insert(RLE_THRESHOLD_META_KEY.to_owned(), RLE_THRESHOLD.to_owned());
            Arc::new(field.as_ref().clone().with_metadata(metadata))
        })
        .collect();
    hinted.then(|| Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone())))
}

/// Values Lance may run-length encode (8 to 64 bits wide), with no threshold chosen by the client.
fn takes_hint(field: &Field) -> bool {
    matches!(field.data_type().primitive_width(), Some(1 | 2 | 4 | 8))
        && !field.metadata().contains_key(RLE_THRESHOLD_META_KEY)
}

/// `rows` under the hinted schema: each batch of the stream's own schema relabelled (its
/// columns shared, not copied); a batch of another schema is passed on as it came.
pub(super) fn with_encoding_hints(rows: RowStream) -> RowStream {
    let source = rows.schema();
    let Some(schema) = hinted(&source) else {
        return rows;
    };
    let target = schema.clone();
    row_stream(
        schema,
        rows.map(move |batch| {
            let batch = batch?;
            if batch.schema() != source {
                return Ok(batch);
            }
            Ok(batch.with_schema(target.clone())?)
        }),
    )
}

/// A column's encoding choice (field metadata) that Lance cannot take.
#[derive(Debug, thiserror::Error)]
#[error("column {column:?}: field metadata {key} = {value:?} cannot be written: {why}")]
pub struct InvalidEncoding {
    /// The column's path (`tags.item` for a list's items), cut to [`SHOWN`] characters.
    pub column: String,
    /// The key, cut to [`SHOWN`] characters.
    pub key: String,
    /// The value, cut to [`SHOWN`] characters.
    pub value: String,
    pub why: &'static str,
}

/// How much of a client's column name, key or value an error repeats (a gRPC message is
/// bounded; the client has the rest).
const SHOWN: usize = 64;

/// The prefix of the field metadata keys Lance's encoder reads.
const ENCODING_PREFIX: &str = "lance-encoding:";

/// An encoding choice Lance reads from field metadata, and the values lake lets through.
struct Choice {
    key: &'static str,
    why: &'static str,
    accepts: fn(&str) -> bool,
}

/// A compression level lake lets a table keep: every later write and compaction of the table
/// pays for it (zstd at 22 writes a few MB/s), with no deadline on a write.
fn modest_level(v: &str) -> bool {
    v.parse::<i32>().is_ok_and(|level| (1..=9).contains(&level))
}

/// The encoding choices lake lets a client make, each with what it accepts (as Lance 14.0.2
/// parses it). A dictionary size ratio out of range or a maximum size that is no byte count
/// panic inside Lance's encoder; a compression or layout it does not know fails a write
/// half-way, or only once a page takes that path (a later append, a compaction); the others it
/// ignores when they do not parse. Any other `lance-encoding:` key is refused, and so are packed
/// structs and blob columns (Lance fails on some of them at write time; lake reads neither).
const CHOICES: &[Choice] = &[
    Choice {
        key: COMPRESSION_META_KEY,
        why: "it must be one of none, fsst, zstd, lz4",
        accepts: |v| v.parse::<CompressionScheme>().is_ok(),
    },
    Choice {
        key: COMPRESSION_LEVEL_META_KEY,
        why: "it must be an integer from 1 to 9",
        accepts: modest_level,
    },
    Choice {
        key: RLE_THRESHOLD_META_KEY,
        why: "it must be a number from 0 to 1",
        accepts: |v| v.parse::<f64>().is_ok_and(|r| (0.0..=1.0).contains(&r)),
    },
    Choice {
        key: DICT_SIZE_RATIO_META_KEY,
        why: "it must be a number above 0 and at most 1",
        accepts: |v| v.parse::<f64>().is_ok_and(|r| r > 0.0 && r <= 1.0),
    },
    Choice {
        key: DICT_MAX_SIZE_META_KEY,
        why: "it must be a byte count",
        accepts: |v| v.parse::<usize>().is_ok(),
    },
    Choice {
        key: DICT_DIVISOR_META_KEY,
        why: "it must be a whole number",
        accepts: |v| v.parse::<u64>().is_ok(),
    },
    Choice {
        key: DICT_VALUES_COMPRESSION_META_KEY,
        why: "it must be one of none, lz4, zstd",
        accepts: |v| matches!(v, "none" | "lz4" | "zstd"),
    },
    Choice {
        key: DICT_VALUES_COMPRESSION_LEVEL_META_KEY,
        why: "it must be an integer from 1 to 9",
        accepts: modest_level,
    },
    Choice {
        key: MINICHUNK_SIZE_META_KEY,
        why: "it must be a positive byte count",
        accepts: |v| v.parse::<i64>().is_ok_and(|n| n > 0),
    },
    Choice {
        key: BSS_META_KEY,
        why: "it must be one of off, on, auto",
        accepts: |v| BssMode::parse(v).is_some(),
    },
    Choice {
        key: STRUCTURAL_ENCODING_META_KEY,
        why: "it must be miniblock or fullzip",
        accepts: |v| {
            let v = v.to_lowercase();
            v == STRUCTURAL_ENCODING_MINIBLOCK || v == STRUCTURAL_ENCODING_FULLZIP
        },
    },
    Choice {
        key: PACKED_STRUCT_META_KEY,
        why: "lake does not write Lance's packed structs",
        accepts: |_| false,
    },
    Choice {
        key: PACKED_STRUCT_LEGACY_META_KEY,
        why: "lake does not write Lance's packed structs",
        accepts: |_| false,
    },
    Choice {
        key: BLOB_META_KEY,
        why: "lake does not write Lance's blob columns",
        accepts: |_| false,
    },
];

/// Checks the encoding choices in the field metadata of a table's new schema, on every column
/// and nested field, before anything is written.
pub(super) fn check(schema: &Schema) -> Result<(), InvalidEncoding> {
    schema
        .fields()
        .iter()
        .try_for_each(|field| check_field(field, field.name()))
}

fn check_field(field: &Field, path: &str) -> Result<(), InvalidEncoding> {
    for (key, value) in field.metadata() {
        let choice = CHOICES.iter().find(|c| c.key == key);
        let why = match choice {
            Some(choice) if (choice.accepts)(value) => continue,
            Some(choice) => choice.why,
            None if key.starts_with(ENCODING_PREFIX) => {
                "it is no encoding choice Lance 14 reads (docs/storage.md lists them)"
            }
            None => continue,
        };
        return Err(InvalidEncoding {
            column: shown(path),
            key: shown(key),
            value: shown(value),
            why,
        });
    }
    crate::nested::fields(field.data_type())
        .into_iter()
        .try_for_each(|child| check_field(child, &format!("{path}.{}", child.name())))
}

/// At most [`SHOWN`] characters of `text`.
fn shown(text: &str) -> String {
    match text.char_indices().nth(SHOWN) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use arrow::array::{ArrayRef, Int32Array, Int64Array, StringArray};
    use arrow::datatypes::DataType;
    use arrow::record_batch::RecordBatch;

    use super::*;
    use crate::catalog::{NamespaceName, TableName};
    use crate::engine::{TableRef, Warehouse, WriteEngine, rows_of};
    use crate::manifest::ManifestStore;
    use crate::store::EmbeddedStore;

    fn engine(dir: &std::path::Path) -> WriteEngine {
        let kv = Arc::new(EmbeddedStore::open(&dir.join("manifests.redb"), true).unwrap());
        WriteEngine::new(
            Warehouse::Local(dir.join("warehouse")),
            ManifestStore::new(kv),
        )
    }

    fn table() -> TableRef {
        TableRef::new(
            NamespaceName::parse("s").unwrap(),
            TableName::parse("t").unwrap(),
        )
    }

    fn threshold(field: &Field) -> Option<&str> {
        field
            .metadata()
            .get(RLE_THRESHOLD_META_KEY)
            .map(String::as_str)
    }

    #[test]
    fn fixed_width_columns_get_the_threshold_and_a_clients_own_is_kept() {
        let own = HashMap::from([(RLE_THRESHOLD_META_KEY.to_owned(), "0.9".to_owned())]);
        let schema = Schema::new(vec![
            Field::new("n", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
            Field::new("f", DataType::Float32, true),
            Field::new("d", DataType::Decimal128(10, 2), true),
            Field::new("o", DataType::Int32, true).with_metadata(own),
        ]);
        let with_hints = hinted(&schema).expect("n and f take the hint");
        let thresholds: Vec<_> = with_hints.fields().iter().map(|f| threshold(f)).collect();
        assert_eq!(
            thresholds,
            [
                Some(RLE_THRESHOLD),
                None,
                Some(RLE_THRESHOLD),
                None,
                Some("0.9")
            ]
        );
        assert!(hinted(&Schema::new(vec![Field::new("s", DataType::Utf8, true)])).is_none());
    }

    #[test]
    fn an_encoding_lance_cannot_take_is_refused_naming_the_column() {
        let with = |key: &str, value: &str| {
            let metadata = HashMap::from([(key.to_owned(), value.to_owned())]);
            let item = Field::new("item", DataType::Utf8, true).with_metadata(metadata);
            Schema::new(vec![
                Field::new("id", DataType::Int64, false),
                Field::new("tags", DataType::List(Arc::new(item)), true),
            ])
        };
        for (key, bad, good) in [
            (COMPRESSION_META_KEY, "bogus", Some("zstd")),
            (COMPRESSION_LEVEL_META_KEY, "22", Some("3")),
            (RLE_THRESHOLD_META_KEY, "1.5", Some("0.25")),
            (DICT_SIZE_RATIO_META_KEY, "5", Some("0.8")),
            (DICT_SIZE_RATIO_META_KEY, "NaN", Some("1")),
            (DICT_MAX_SIZE_META_KEY, "x", Some("65536")),
            (DICT_DIVISOR_META_KEY, "-2", Some("2")),
            (DICT_VALUES_COMPRESSION_META_KEY, "fsst", Some("lz4")),
            (DICT_VALUES_COMPRESSION_LEVEL_META_KEY, "high", Some("9")),
            (MINICHUNK_SIZE_META_KEY, "-5", Some("4096")),
            (BSS_META_KEY, "sometimes", Some("auto")),
            (STRUCTURAL_ENCODING_META_KEY, "sparse", Some("FullZip")),
            (PACKED_STRUCT_META_KEY, "true", None),
            (PACKED_STRUCT_LEGACY_META_KEY, "true", None),
            (BLOB_META_KEY, "true", None),
            ("lance-encoding:future", "anything", None),
        ] {
            let e = check(&with(key, bad)).expect_err(bad);
            assert_eq!(
                (e.column.as_str(), e.key.as_str(), e.value.as_str()),
                ("tags.item", key, bad)
            );
            let text = e.to_string();
            assert!(
                text.contains(key) && text.contains("cannot be written"),
                "{text}"
            );
            if let Some(good) = good {
                check(&with(key, good)).unwrap_or_else(|e| panic!("{key} = {good}: {e}"));
            }
        }
        // Metadata that is no encoding choice is the client's own business.
        check(&with("owner", "finance")).unwrap();
        // A long value is cut in the error (a gRPC message is bounded).
        let e = check(&with(COMPRESSION_META_KEY, &"z".repeat(100_000))).unwrap_err();
        assert!(e.to_string().len() < 400, "{e}");
    }

    #[tokio::test]
    async fn a_created_table_keeps_the_threshold_across_appends() {
        let dir = tempfile::tempdir().unwrap();
        let engine = engine(dir.path());
        let t = table();
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        let batch = |ids: Vec<i64>| {
            let names: Vec<String> = ids.iter().map(|i| format!("n{i}")).collect();
            RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(Int64Array::from(ids)) as ArrayRef,
                    Arc::new(StringArray::from(names)),
                ],
            )
            .unwrap()
        };
        engine
            .create_stream(&t, rows_of(schema.clone(), vec![batch(vec![1, 2])]))
            .await
            .unwrap();
        engine
            .append_stream(&t, rows_of(schema.clone(), vec![batch(vec![3])]))
            .await
            .unwrap();
        let dataset = engine.open(&t, None).await.unwrap();
        let stored = arrow::datatypes::Schema::from(dataset.schema());
        assert_eq!(threshold(stored.field(0)), Some(RLE_THRESHOLD));
        assert_eq!(threshold(stored.field(1)), None);
        assert_eq!(dataset.count_rows(None).await.unwrap(), 3);
    }

    /// The threshold must not cost a column of long runs its run-length encoding: 1M values in
    /// 100 runs of the widest values (no bit-packing helps) stay a few KiB, not 4 MiB.
    #[tokio::test]
    async fn a_column_of_long_runs_is_still_stored_run_length_encoded() {
        let dir = tempfile::tempdir().unwrap();
        let engine = engine(dir.path());
        let t = table();
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int32, false)]));
        let values = (0..1_000_000).map(|i| {
            if (i / 10_000) % 2 == 0 {
                i32::MAX
            } else {
                i32::MIN
            }
        });
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int32Array::from_iter_values(values)) as ArrayRef],
        )
        .unwrap();
        engine
            .create_stream(&t, rows_of(schema, vec![batch]))
            .await
            .unwrap();
        let data = dir.path().join("warehouse/s/t.lance/data");
        let bytes: u64 = std::fs::read_dir(&data)
            .unwrap()
            .map(|f| f.unwrap().metadata().unwrap().len())
            .sum();
        assert!(bytes < 256 * 1024, "{bytes} bytes of data files");
    }
}
