//! A lake table read for one search: the `k` rows nearest a query vector, from the column's
//! vector index when one with the wanted metric exists, else every row (the exact answer).

use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::array::{RecordBatch, RecordBatchOptions};
use arrow::datatypes::{DataType, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::default_table_source::{provider_as_source, source_as_provider};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, ParamValues, ScalarValue};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::ExecutionProps;
use datafusion::logical_expr::{Expr, LogicalPlan, TableProviderFilterPushDown, TableType};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::create_physical_expr;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::projection::ProjectionExec;
use lance::dataset::Dataset;
use lance::index::DatasetIndexExt;
use lance_linalg::distance::DistanceType;
use prost::Message;

use super::sealed::Sealed;
use super::settings;
use crate::flight::bounded::{self, Budget};
use crate::flight::distributed::LakeTable;

/// What a search looks for.
#[derive(Debug, Clone)]
pub(super) enum Query {
    /// The query vector, as the column's element type.
    Vector(ArrayRef),
    /// An expression of a prepared statement's parameters (`$1`), evaluated with each
    /// execution's values ([`bind_searches`]) and read as a vector of `dimension` values of type
    /// `element`.
    Parameter {
        vector: Expr,
        element: DataType,
        dimension: i32,
    },
    /// A bound value that is no query vector of the column (another length, a null or a value
    /// that is not finite): every row is read, and the statement's own sort answers exactly
    /// (its distance function says what is wrong with the value, as it does unprepared).
    Exact,
}

/// A lake table whose scan is a nearest-neighbour search of `column` for `query`.
#[derive(Debug)]
pub(super) struct NearestTable {
    /// The [`LakeTable`] searched.
    table: Arc<dyn TableProvider>,
    column: String,
    query: Query,
    k: usize,
    metric: DistanceType,
    /// Whether an index with the metric serves the search, once asked.
    indexed: tokio::sync::OnceCell<bool>,
}

impl NearestTable {
    pub(super) fn new(
        table: Arc<dyn TableProvider>,
        column: String,
        query: Query,
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

    /// This search with its parameter bound to `values`, in a statement of `budget`.
    fn bind(&self, values: &ParamValues, budget: &Budget) -> Result<Option<Self>> {
        let Query::Parameter {
            vector,
            element,
            dimension,
        } = &self.query
        else {
            return Ok(None);
        };
        // A value the expression cannot take (`string_to_array` of text that is no number, or
        // more than the budget allows) fails the statement's own sort the same way, with its
        // message: the sort's expression is bound to the same budget.
        let vector = bounded::bind_calls(vector.clone(), budget)?;
        let query = evaluate(&vector, values)?
            .and_then(|value| super::rule::query_vector(&value, element, *dimension))
            .map_or(Query::Exact, Query::Vector);
        Ok(Some(Self::new(
            self.table.clone(),
            self.column.clone(),
            query,
            self.k,
            self.metric,
        )))
    }

    /// Whether the table has a vector index on the column with the search's metric (asked of
    /// Lance once per statement), and the search has a vector to look for.
    async fn indexed(&self, dataset: &Dataset) -> Result<bool> {
        if !matches!(self.query, Query::Vector(_)) {
            return Ok(false);
        }
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
        let Query::Vector(query) = &self.query else {
            // `indexed` is false for any other query.
            return self.table.scan(state, projection, filters, limit).await;
        };
        scanner
            .nearest(&self.column, query.as_ref(), self.k)
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

/// `vector` with its placeholders bound to `values`, evaluated; `None` if it fails.
fn evaluate(vector: &Expr, values: &ParamValues) -> Result<Option<ScalarValue>> {
    let bound = vector
        .clone()
        .transform(|e| match e {
            Expr::Placeholder(p) => {
                let (value, metadata) = values.get_placeholders_with_values(&p.id)?.into_inner();
                Ok(Transformed::yes(Expr::Literal(value, metadata)))
            }
            other => Ok(Transformed::no(other)),
        })?
        .data;
    let one_row = RecordBatch::try_new_with_options(
        Arc::new(arrow::datatypes::Schema::empty()),
        vec![],
        &RecordBatchOptions::new().with_row_count(Some(1)),
    )?;
    let value = create_physical_expr(&bound, &DFSchema::empty(), &ExecutionProps::new())
        .and_then(|e| e.evaluate(&one_row))
        .and_then(|v| v.into_array(1))
        .and_then(|a| ScalarValue::try_from_array(&a, 0));
    Ok(value.ok())
}

/// The lake table `provider` reads: itself, or the table a search reads.
pub(in crate::flight) fn lake_table(provider: &dyn TableProvider) -> Option<&LakeTable> {
    let any: &dyn std::any::Any = provider;
    match any.downcast_ref::<NearestTable>() {
        Some(search) => {
            let searched: &dyn std::any::Any = search.table.as_ref();
            searched.downcast_ref::<LakeTable>()
        }
        None => any.downcast_ref::<LakeTable>(),
    }
}

/// `plan` (optimized with its parameters as placeholders) with each search's parameter bound to
/// `values`, in a statement of `budget`.
pub(in crate::flight) fn bind_searches(
    plan: LogicalPlan,
    values: &ParamValues,
    budget: &Budget,
) -> Result<LogicalPlan> {
    plan.transform_up_with_subqueries(|node| {
        let LogicalPlan::TableScan(scan) = &node else {
            return Ok(Transformed::no(node));
        };
        let Ok(provider) = source_as_provider(&scan.source) else {
            return Ok(Transformed::no(node));
        };
        let any: &dyn std::any::Any = provider.as_ref();
        let Some(bound) = any
            .downcast_ref::<NearestTable>()
            .map(|search| search.bind(values, budget))
            .transpose()?
            .flatten()
        else {
            return Ok(Transformed::no(node));
        };
        let mut scan = scan.clone();
        scan.source = provider_as_source(Arc::new(bound));
        Ok(Transformed::yes(LogicalPlan::TableScan(scan)))
    })
    .map(|t| t.data)
}

/// The vectors of `plan`'s searches that are expressions of its parameters.
#[cfg(test)]
pub(in crate::flight) fn parameter_vectors(plan: &LogicalPlan) -> Vec<Expr> {
    let mut vectors = Vec::new();
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node
            && let Ok(provider) = source_as_provider(&scan.source)
            && let Some(search) =
                (provider.as_ref() as &dyn std::any::Any).downcast_ref::<NearestTable>()
            && let Query::Parameter { vector, .. } = &search.query
        {
            vectors.push(vector.clone());
        }
        Ok(TreeNodeRecursion::Continue)
    });
    vectors
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

/// The columns `names` of a plan Lance made, in that order, whatever order Lance gives them in;
/// the plan [`Sealed`] as Lance optimized it.
pub(super) fn in_order(
    plan: Arc<dyn ExecutionPlan>,
    names: &[&str],
) -> Result<Arc<dyn ExecutionPlan>> {
    let plan: Arc<dyn ExecutionPlan> = Arc::new(Sealed::new(plan));
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

#[cfg(test)]
mod tests {
    use arrow::array::AsArray;
    use arrow::datatypes::{Field, Float32Type};
    use datafusion::functions_nested::string::string_to_array_udf;
    use datafusion::logical_expr::{Cast, lit, placeholder};

    use super::*;

    /// `CAST(string_to_array($1, ',') AS FLOAT[])`, as a Go client writes a vector.
    fn from_text() -> Expr {
        Expr::Cast(Cast::new(
            Box::new(string_to_array_udf().call(vec![placeholder("$1"), lit(",")])),
            DataType::List(Arc::new(Field::new_list_field(DataType::Float32, true))),
        ))
    }

    #[test]
    fn a_parameter_vector_is_evaluated_with_each_value() {
        let values = ParamValues::List(vec![ScalarValue::from("1.5,2,-3").into()]);
        let Some(ScalarValue::List(list)) = evaluate(&from_text(), &values).unwrap() else {
            panic!("no list");
        };
        let floats = list.value(0);
        assert_eq!(
            floats.as_primitive::<Float32Type>().values(),
            &[1.5, 2.0, -3.0]
        );
    }

    #[test]
    fn a_value_the_vector_cannot_take_leaves_the_search_exact() {
        let values = ParamValues::List(vec![ScalarValue::from("1,two").into()]);
        assert_eq!(evaluate(&from_text(), &values).unwrap(), None);
        // A parameter that is not given is the caller's error.
        assert!(evaluate(&from_text(), &ParamValues::List(vec![])).is_err());
    }
}
