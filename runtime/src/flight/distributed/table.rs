//! A lake table as DataFusion sees it: Lance's own provider, except in a statement being
//! distributed, where a scan is a [`LakeScanExec`] that can be dealt out by fragment.

use std::sync::Arc;

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

#[derive(Debug)]
pub(in crate::flight) struct LakeTable {
    table: TableRef,
    lance: LanceTableProvider,
    engine: Engine,
}

impl LakeTable {
    pub(in crate::flight) fn new(
        engine: &Engine,
        table: TableRef,
        dataset: lance::dataset::Dataset,
    ) -> Self {
        Self {
            table,
            lance: LanceTableProvider::new(Arc::new(dataset), false, false),
            engine: engine.clone(),
        }
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
            return self.lance.scan(state, projection, filters, limit).await;
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
