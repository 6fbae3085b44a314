//! Lance indices of a table: created and dropped by the metadata role (each one Lance commit,
//! under the table's lock), listed by either role (docs/guides/search.md).

use std::sync::Arc;

use arrow::datatypes::DataType;
use lance::Dataset;
use lance::dataset::transaction::{Operation, Transaction};
use lance::index::DatasetIndexExt;
use lance::index::vector::VectorIndexParams;
use lance_index::IndexParams;
use lance_index::scalar::inverted::InvertedIndexParams;
use lance_index::scalar::{BuiltinIndexType, ScalarIndexParams};
use lance_index::vector::hnsw::builder::HnswBuildParams;
use lance_index::vector::ivf::IvfBuildParams;
use lance_index::vector::pq::PQBuildParams;
use lance_index::vector::sq::builder::SQBuildParams;
use lance_linalg::distance::DistanceType;

use super::{Engine, EngineError, TableRef, WriteEngine};

/// The index types lake builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexKind {
    BTree,
    Bitmap,
    LabelList,
    Inverted,
    IvfFlat,
    IvfPq,
    IvfHnswSq,
}

impl IndexKind {
    pub fn is_vector(self) -> bool {
        matches!(self, Self::IvfFlat | Self::IvfPq | Self::IvfHnswSq)
    }

    /// The `WITH` options it takes.
    pub fn options(self) -> &'static [&'static str] {
        match self {
            Self::IvfFlat => &["metric", "num_partitions"],
            Self::IvfPq => &["metric", "num_partitions", "num_sub_vectors", "num_bits"],
            Self::IvfHnswSq => &["metric", "num_partitions", "m", "ef_construction"],
            Self::Inverted => &[
                "stem",
                "remove_stop_words",
                "lower_case",
                "with_position",
                "max_token_length",
            ],
            _ => &[],
        }
    }
}

impl std::fmt::Display for IndexKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::BTree => "BTREE",
            Self::Bitmap => "BITMAP",
            Self::LabelList => "LABEL_LIST",
            Self::Inverted => "INVERTED",
            Self::IvfFlat => "IVF_FLAT",
            Self::IvfPq => "IVF_PQ",
            Self::IvfHnswSq => "IVF_HNSW_SQ",
        })
    }
}

/// The distance a vector index orders by (Lance's: `l2` is the squared Euclidean distance).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum VectorMetric {
    #[default]
    L2,
    Cosine,
    Dot,
}

/// A vector index's options; `None` fields take defaults sized to the table.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VectorOptions {
    pub metric: VectorMetric,
    pub num_partitions: Option<usize>,
    pub num_sub_vectors: Option<usize>,
    pub num_bits: Option<u8>,
    pub m: Option<usize>,
    pub ef_construction: Option<usize>,
}

/// One index to build: its name, column and type, checked by the SQL layer.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexDefinition {
    pub name: String,
    pub column: String,
    pub kind: IndexKind,
    pub vector: Option<VectorOptions>,
    /// An INVERTED index's tokenizer options (`None`: Lance's defaults).
    pub text: Option<TextOptions>,
}

/// How an INVERTED index splits text; `None` fields keep Lance's defaults (English stemming,
/// stop words removed, lower case, no positions, tokens of at most 40 bytes).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TextOptions {
    pub stem: Option<bool>,
    pub remove_stop_words: Option<bool>,
    pub lower_case: Option<bool>,
    /// Positions make phrase queries possible (a larger index).
    pub with_position: Option<bool>,
    /// `Some(None)`: no limit (what lets Lance serve `contains_tokens` from the index).
    pub max_token_length: Option<Option<usize>>,
}

impl TextOptions {
    fn params(&self) -> InvertedIndexParams {
        let mut params = InvertedIndexParams::default();
        if let Some(stem) = self.stem {
            params = params.stem(stem);
        }
        if let Some(remove) = self.remove_stop_words {
            params = params.remove_stop_words(remove);
        }
        if let Some(lower) = self.lower_case {
            params = params.lower_case(lower);
        }
        if let Some(positions) = self.with_position {
            params = params.with_position(positions);
        }
        if let Some(length) = self.max_token_length {
            params = params.max_token_length(length);
        }
        params
    }
}

/// One index as `SHOW INDEXES` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexListing {
    pub name: String,
    pub columns: Vec<String>,
    pub index_type: String,
    pub indexed_rows: u64,
    pub unindexed_rows: u64,
}

impl WriteEngine {
    /// Builds `index` on `table` in one commit. With `if_not_exists`, an index of that name
    /// already there is no error (and nothing is built).
    pub async fn create_index(
        &self,
        table: &TableRef,
        index: &IndexDefinition,
        if_not_exists: bool,
    ) -> Result<(), EngineError> {
        // The table's lease, as a DROP holds it: a maintenance pass does not compact under a
        // build (its commit would then fail), nor the build commit under a pass.
        let holder = format!(
            "CREATE INDEX {} ON {table} ({})",
            index.name,
            crate::manifest::holder()
        );
        let lease = self
            .table_lease(table, holder, crate::manifest::LEASE_TTL, super::DROP_WAIT)
            .await
            .map_err(|e| EngineError::lease(table, e))?
            .keep_renewed();
        let created = self.create_held(table, index, if_not_exists, &lease).await;
        lease.release().await;
        created
    }

    async fn create_held(
        &self,
        table: &TableRef,
        index: &IndexDefinition,
        if_not_exists: bool,
        lease: &crate::manifest::Renewed,
    ) -> Result<(), EngineError> {
        let _guard = self.lock(table).await;
        let (mut dataset, exists) = self.open_with_index(table, &index.name).await?;
        if exists {
            return match if_not_exists {
                true => Ok(()),
                false => Err(EngineError::IndexExists {
                    table: table.clone(),
                    index: index.name.clone(),
                }),
            };
        }
        let invalid = |detail: String| EngineError::InvalidIndex {
            table: table.clone(),
            detail,
        };
        let field = dataset
            .schema()
            .field(&index.column)
            .ok_or_else(|| invalid(format!("column {:?} does not exist", index.column)))?;
        let data_type = field.data_type();
        let rows = dataset
            .count_rows(None)
            .await
            .map_err(Engine::lance_err("count the rows of", table))?;
        let (lance_type, params) = params(index, &data_type, rows).map_err(invalid)?;
        // Built, not committed, by Lance; committed as every lake write is (no auto-cleanup,
        // lake's retries), once the lease shows no maintenance pass came in meanwhile.
        let built = dataset
            .create_index_builder(&[index.column.as_str()], lance_type, params.as_ref())
            .name(index.name.clone())
            .execute_uncommitted()
            .await
            .map_err(|e| match e {
                lance::Error::InvalidInput { .. } => invalid(e.to_string()),
                e => Engine::lance_err("build an index on", table)(e),
            })?;
        lease.check().map_err(|e| EngineError::lease(table, e))?;
        let transaction = Transaction::new(
            built.dataset_version,
            Operation::CreateIndex {
                new_indices: vec![built],
                removed_indices: Vec::new(),
            },
            None,
        );
        self.commit_transaction(table, "create an index on", transaction, None)
            .await
            .map(|_| ())
    }

    /// Drops the index `name` of `table` (its files stay until maintenance removes the
    /// versions that use it). With `if_exists`, an index not there is no error.
    pub async fn drop_index(
        &self,
        table: &TableRef,
        name: &str,
        if_exists: bool,
    ) -> Result<(), EngineError> {
        let _guard = self.lock(table).await;
        let (dataset, exists) = self.open_with_index(table, name).await?;
        if !exists {
            return match if_exists {
                true => Ok(()),
                false => Err(EngineError::NoSuchIndex {
                    table: table.clone(),
                    index: name.to_owned(),
                }),
            };
        }
        let removed: Vec<_> = dataset
            .load_indices()
            .await
            .map_err(Engine::lance_err("list the indices of", table))?
            .iter()
            .filter(|i| i.name == name)
            .cloned()
            .collect();
        let transaction = Transaction::new(
            dataset.version().version,
            Operation::CreateIndex {
                new_indices: Vec::new(),
                removed_indices: removed,
            },
            None,
        );
        self.commit_transaction(table, "drop an index of", transaction, None)
            .await
            .map(|_| ())
    }
}

impl WriteEngine {
    /// `table` at its latest version, and whether it has an index named `name`.
    async fn open_with_index(
        &self,
        table: &TableRef,
        name: &str,
    ) -> Result<(Dataset, bool), EngineError> {
        let dataset = self.engine.open(table, None).await?;
        let exists = dataset
            .load_indices()
            .await
            .map_err(Engine::lance_err("list the indices of", table))?
            .iter()
            .any(|i| i.name == name);
        Ok((dataset, exists))
    }
}

/// The indices of `dataset` (the table `table` at the version read), by name.
pub async fn indices(
    table: &TableRef,
    dataset: &Dataset,
) -> Result<Vec<IndexListing>, EngineError> {
    let metadata = dataset
        .load_indices()
        .await
        .map_err(Engine::lance_err("list the indices of", table))?;
    let mut names: Vec<&str> = metadata
        .iter()
        .map(|i| i.name.as_str())
        // Lance's own bookkeeping (a compaction's fragment reuse), not an index users made.
        .filter(|n| !n.starts_with("__"))
        .collect();
    names.sort_unstable();
    names.dedup();
    let mut listed = Vec::with_capacity(names.len());
    for name in names {
        let columns = metadata
            .iter()
            .find(|i| i.name == name)
            .map(|i| {
                i.fields
                    .iter()
                    .filter_map(|id| dataset.schema().field_by_id(*id))
                    .map(|f| f.name.clone())
                    .collect()
            })
            .unwrap_or_default();
        let stats = dataset
            .index_statistics(name)
            .await
            .map_err(Engine::lance_err("describe an index of", table))?;
        let stats: serde_json::Value = serde_json::from_str(&stats).unwrap_or_default();
        let number = |key: &str| {
            stats
                .get(key)
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0)
        };
        listed.push(IndexListing {
            name: name.to_owned(),
            columns,
            index_type: stats
                .get("index_type")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("unknown")
                .to_owned(),
            indexed_rows: number("num_indexed_rows"),
            unindexed_rows: number("num_unindexed_rows"),
        });
    }
    Ok(listed)
}

/// Lance's type and parameters for `index` on a column of `data_type` in a table of `rows`
/// rows; what does not fit is named.
fn params(
    index: &IndexDefinition,
    data_type: &DataType,
    rows: usize,
) -> Result<(lance_index::IndexType, Arc<dyn IndexParams>), String> {
    let column = &index.column;
    let scalar = |kind: BuiltinIndexType| -> Arc<dyn IndexParams> {
        Arc::new(ScalarIndexParams::for_builtin(kind))
    };
    match index.kind {
        IndexKind::BTree => Ok((
            lance_index::IndexType::BTree,
            scalar(BuiltinIndexType::BTree),
        )),
        IndexKind::Bitmap => Ok((
            lance_index::IndexType::Bitmap,
            scalar(BuiltinIndexType::Bitmap),
        )),
        IndexKind::LabelList => match data_type {
            DataType::List(_) | DataType::LargeList(_) => Ok((
                lance_index::IndexType::LabelList,
                scalar(BuiltinIndexType::LabelList),
            )),
            other => Err(format!(
                "a LABEL_LIST index needs a list column; {column:?} is {other}"
            )),
        },
        IndexKind::Inverted => match data_type {
            DataType::Utf8 | DataType::LargeUtf8 => Ok((
                lance_index::IndexType::Inverted,
                Arc::new(index.text.clone().unwrap_or_default().params()),
            )),
            other => Err(format!(
                "an INVERTED index needs a text column; {column:?} is {other}"
            )),
        },
        kind => {
            let dimension = match data_type {
                DataType::FixedSizeList(item, n)
                    if matches!(
                        item.data_type(),
                        DataType::Float16 | DataType::Float32 | DataType::Float64
                    ) =>
                {
                    usize::try_from(*n).unwrap_or(0)
                }
                other => {
                    return Err(format!(
                        "a {kind} index needs a vector column (FixedSizeList of floats); \
                         {column:?} is {other}"
                    ));
                }
            };
            let options = index.vector.clone().unwrap_or_default();
            let metric = match options.metric {
                VectorMetric::L2 => DistanceType::L2,
                VectorMetric::Cosine => DistanceType::Cosine,
                VectorMetric::Dot => DistanceType::Dot,
            };
            // Lance's rule of thumb: about √rows partitions, each holding a few thousand.
            let partitions = options
                .num_partitions
                .unwrap_or_else(|| ((rows as f64).sqrt() as usize).clamp(1, 4096));
            if partitions > rows.max(1) {
                return Err(format!(
                    "num_partitions = {partitions}: the table has {rows} rows, fewer than the \
                     partitions (each needs rows to train on)"
                ));
            }
            let ivf = IvfBuildParams::new(partitions);
            let params = match kind {
                IndexKind::IvfFlat => VectorIndexParams::ivf_flat(partitions, metric),
                IndexKind::IvfPq => {
                    let sub_vectors = match options.num_sub_vectors {
                        Some(n) => n,
                        None => [16, 8, 4, 2, 1]
                            .into_iter()
                            .map(|d| dimension / d)
                            .find(|n| *n > 0 && dimension % n == 0)
                            .unwrap_or(1),
                    };
                    if dimension % sub_vectors != 0 {
                        return Err(format!(
                            "num_sub_vectors = {sub_vectors} must divide the vectors' dimension \
                             ({dimension})"
                        ));
                    }
                    let pq =
                        PQBuildParams::new(sub_vectors, usize::from(options.num_bits.unwrap_or(8)));
                    VectorIndexParams::with_ivf_pq_params(metric, ivf, pq)
                }
                _ => {
                    let mut hnsw = HnswBuildParams::default();
                    if let Some(m) = options.m {
                        hnsw = hnsw.num_edges(m);
                    }
                    if let Some(ef) = options.ef_construction {
                        hnsw = hnsw.ef_construction(ef);
                    }
                    VectorIndexParams::with_ivf_hnsw_sq_params(
                        metric,
                        ivf,
                        hnsw,
                        SQBuildParams::default(),
                    )
                }
            };
            Ok((lance_index::IndexType::Vector, Arc::new(params)))
        }
    }
}
