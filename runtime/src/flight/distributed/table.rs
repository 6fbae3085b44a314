//! A lake table as DataFusion sees it: Lance's own provider, except in a statement being
//! distributed, where a scan is a [`LakeScanExec`] that can be dealt out by fragment.

use std::sync::{Arc, OnceLock};

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::error::Result;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown, TableType};
use datafusion::physical_plan::ExecutionPlan;
use lance::datafusion::LanceTableProvider;

use super::Spread;
use super::scan::{FragmentRef, LakeScanExec, ScanSpec};
use super::split::deal;
use crate::engine::{Engine, TableRef};

/// The most rows of one batch a statement marked [`LargeScanBatches`] reads, and bytes: narrow
/// rows fill a Flight message (each batch is a hand-off from Lance's decoders to the statement
/// and a message on the wire; at Lance's default of 8,192 rows a large read spent a fifth more
/// time), and wide rows still make batches of bounded size.
const SCAN_BATCH_ROWS: usize = 64 * 1024;
const SCAN_BATCH_BYTES: u64 = 2 * 1024 * 1024;

/// Set on a statement whose tables are read in large batches ([`SCAN_BATCH_ROWS`]): one that
/// builds no more from a batch than it reads (no UNNEST, window or growing function, whose
/// per-batch measures are sized for the statement's batch size). Others read Lance's default.
#[derive(Debug)]
pub(in crate::flight) struct LargeScanBatches;

#[derive(Debug)]
pub(in crate::flight) struct LakeTable {
    table: TableRef,
    /// The version a statement named (`t@v5`); `None`: the latest when it was opened.
    pinned: Option<u64>,
    lance: LanceTableProvider,
    /// The same dataset, read in large batches: made by the first scan that wants it (a
    /// search or a write's read never does).
    large: OnceLock<LanceTableProvider>,
    engine: Engine,
}

impl LakeTable {
    pub(in crate::flight) fn new(
        engine: &Engine,
        table: TableRef,
        pinned: Option<u64>,
        dataset: lance::dataset::Dataset,
    ) -> Self {
        Self {
            table,
            pinned,
            lance: LanceTableProvider::new(Arc::new(dataset), false, false),
            large: OnceLock::new(),
            engine: engine.clone(),
        }
    }

    /// The table this is.
    pub(in crate::flight) fn table(&self) -> &TableRef {
        &self.table
    }

    /// The version the statement named, if it named one.
    pub(in crate::flight) fn pinned(&self) -> Option<u64> {
        self.pinned
    }

    /// The dataset at the version this statement reads.
    pub(in crate::flight) fn dataset(&self) -> Arc<lance::dataset::Dataset> {
        self.lance.dataset()
    }

    /// The bytes of the table's data files at the opened version.
    pub(super) fn bytes(&self) -> u64 {
        FragmentRef::all_of(&self.lance.dataset())
            .iter()
            .map(|f| f.bytes)
            .fold(0, u64::saturating_add)
    }
}

#[async_trait]
impl TableProvider for LakeTable {
    fn schema(&self) -> SchemaRef {
        self.lance.schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if state.config().get_extension::<Spread>().is_none() {
            let lance = match state.config().get_extension::<LargeScanBatches>() {
                Some(_) => self.large.get_or_init(|| {
                    LanceTableProvider::new(self.lance.dataset(), false, false)
                        .with_batch_size(SCAN_BATCH_ROWS)
                        .with_batch_size_bytes(SCAN_BATCH_BYTES)
                }),
                None => &self.lance,
            };
            return lance.scan(state, projection, filters, limit).await;
        }
        let schema = self.lance.schema();
        let schema = match projection {
            Some(columns) => Arc::new(schema.project(columns)?),
            None => schema,
        };
        let dataset = self.lance.dataset();
        let spec = ScanSpec {
            table: self.table.clone(),
            version: dataset.version().version,
            projection: schema.fields().iter().map(|f| f.name().clone()).collect(),
            filter: filters.iter().cloned().reduce(Expr::and),
            limit,
            schema,
        };
        let partitions = deal(
            &FragmentRef::all_of(&dataset),
            state.config().target_partitions(),
        );
        Ok(Arc::new(LakeScanExec::new(
            self.engine.pinned_reader(),
            Arc::new(spec),
            partitions,
        )))
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        self.lance.supports_filters_pushdown(filters)
    }
}
