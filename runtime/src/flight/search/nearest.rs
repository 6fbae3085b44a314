//! A lake table read for one search: the `k` rows nearest a query vector, from the column's
//! vector index when one with the wanted metric exists, else every row (the exact answer).

use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::default_table_source::source_as_provider;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{Expr, LogicalPlan, TableProviderFilterPushDown, TableType};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::projection::ProjectionExec;
use lance::dataset::Dataset;
use lance::index::DatasetIndexExt;
use lance_linalg::distance::DistanceType;
use prost::Message;

use super::settings;
use crate::flight::distributed::LakeTable;

/// A lake table whose scan is a nearest-neighbour search of `column` for `query`.
#[derive(Debug)]
pub(super) struct NearestTable {
    /// The [`LakeTable`] searched.
    table: Arc<dyn TableProvider>,
    column: String,
    /// The query vector, as the column's element type.
    query: ArrayRef,
    k: usize,
    metric: DistanceType,
    /// Whether an index with the metric serves the search, once asked.
    indexed: tokio::sync::OnceCell<bool>,
}

impl NearestTable {
    pub(super) fn new(
        table: Arc<dyn TableProvider>,
        column: String,
        query: ArrayRef,
        k: usize,
        metric: DistanceType,
    ) -> Self {
        Self {
            table,
            column,
            query,
            k,
            metric,
            indexed: tokio::sync::OnceCell::new(),
        }
    }

    /// Whether the table has a vector index on the column with the search's metric (asked of
    /// Lance once per statement).
    async fn indexed(&self, dataset: &Dataset) -> Result<bool> {
        self.indexed
            .get_or_try_init(|| has_vector_index(dataset, &self.column, self.metric))
            .await
            .copied()
    }

    fn dataset(&self) -> Option<Arc<Dataset>> {
        let any: &dyn std::any::Any = self.table.as_ref();
        any.downcast_ref::<LakeTable>().map(LakeTable::dataset)
    }
}

#[async_trait]
impl TableProvider for NearestTable {
    fn schema(&self) -> SchemaRef {
        self.table.schema()
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
        let Some(dataset) = self.dataset() else {
            return self.table.scan(state, projection, filters, limit).await;
        };
        // No index with this metric (or none yet): the plain scan, under the statement's
        // exact top-k.
        if !self.indexed(&dataset).await? {
            return self.table.scan(state, projection, filters, limit).await;
        }
        let settings = settings::vector(state.config_options());
        let schema = match projection {
            Some(columns) => Arc::new(self.table.schema().project(columns)?),
            None => self.table.schema(),
        };
        let columns: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        let mut scanner = dataset.scan();
        // Only the columns the statement reads: Lance's `_distance` is its own metric (the
        // statement computes the SQL function's).
        scanner.disable_scoring_autoprojection();
        scanner.project(&columns).map_err(lance_error)?;
        // The WHERE clause applies before the search: k rows that match it, not the k nearest
        // filtered afterwards.
        scanner.prefilter(true);
        if let Some(filter) = filters.iter().cloned().reduce(Expr::and) {
            scanner.filter_expr(filter);
        }
        scanner
            .nearest(&self.column, self.query.as_ref(), self.k)
            .map_err(lance_error)?;
        scanner.distance_metric(self.metric);
        // At least this many partitions; more when the WHERE clause leaves fewer than k rows
        // in them (a fixed count could answer a selective search with nothing).
        scanner.minimum_nprobes(settings.nprobes.max(1));
        let refine = settings::capped_refine(settings.refine_factor, self.k);
        if refine > 1 {
            scanner.refine(refine);
        }
        if settings.ef > 0 {
            scanner.ef(settings.ef);
        }
        let search = scanner.create_plan().await.map_err(lance_error)?;
        in_order(search, &columns)
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        self.table.supports_filters_pushdown(filters)
    }
}

/// Whether every table `plan` reads (its subqueries' too) is a k-row search an index serves:
/// such a statement handles at most k rows per search.
pub(in crate::flight) async fn reads_only_indexed_searches(plan: &LogicalPlan) -> Result<bool> {
    let mut scans = Vec::new();
    plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            // A source that is no provider (a view's) is not a search.
            scans.push(source_as_provider(&scan.source).ok());
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    if scans.is_empty() {
        return Ok(false);
    }
    for provider in scans {
        let Some(provider) = provider else {
            return Ok(false);
        };
        let any: &dyn std::any::Any = provider.as_ref();
        let Some(search) = any.downcast_ref::<NearestTable>() else {
            return Ok(false);
        };
        let Some(dataset) = search.dataset() else {
            return Ok(false);
        };
        if !search.indexed(&dataset).await? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// `plan`'s columns `names`, in that order, whatever order Lance gives them in.
pub(super) fn in_order(
    plan: Arc<dyn ExecutionPlan>,
    names: &[&str],
) -> Result<Arc<dyn ExecutionPlan>> {
    let schema = plan.schema();
    let exprs = names
        .iter()
        .map(|name| {
            let column: Arc<dyn PhysicalExpr> = Arc::new(Column::new(name, schema.index_of(name)?));
            Ok((column, (*name).to_owned()))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Arc::new(ProjectionExec::try_new(exprs, plan)?))
}

/// Lance's refusal of what the statement asked (no inverted index for `fts`, a query naming an
/// unindexed column, …) is the client's error; anything else stays Lance's.
pub(super) fn lance_error(e: lance::Error) -> DataFusionError {
    match e {
        e @ (lance::Error::InvalidInput { .. } | lance::Error::NotSupported { .. }) => {
            DataFusionError::Plan(e.to_string())
        }
        e => DataFusionError::External(Box::new(e)),
    }
}

/// Whether `dataset` has a vector index on `column` ordering by `metric`.
async fn has_vector_index(dataset: &Dataset, column: &str, metric: DistanceType) -> Result<bool> {
    let Some(field) = dataset.schema().field(column) else {
        return Ok(false);
    };
    let indices = dataset.load_indices().await.map_err(lance_error)?;
    // The index Lance will use: the first keyed on the column (a second one with another
    // metric would only make Lance scan every row).
    Ok(indices
        .iter()
        .find(|index| index.fields.first() == Some(&field.id) && !index.name.starts_with("__"))
        .is_some_and(|index| {
            index
                .index_details
                .as_ref()
                .filter(|d| d.type_url.ends_with("VectorIndexDetails") && !d.value.is_empty())
                .and_then(|d| lance_index::pb::VectorIndexDetails::decode(d.value.as_slice()).ok())
                .and_then(|d| lance_index::pb::VectorMetricType::try_from(d.metric_type).ok())
                .map(DistanceType::from)
                == Some(metric)
        }))
}
