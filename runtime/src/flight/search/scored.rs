//! A lake table read by an explicit search (`vector_search`, `fts`): the rows Lance's search
//! returns, with its score column (`_distance`, `_score`) after the table's columns.

use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::error::Result;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown, TableType};
use datafusion::physical_plan::ExecutionPlan;
use lance::dataset::Dataset;
use lance_index::scalar::FullTextSearchQuery;
use lance_linalg::distance::DistanceType;

use super::nearest::{in_order, lance_error};

/// The most rows one `fts(…)` may rank.
pub(super) const MAX_FTS_ROWS: usize = 100_000;

/// What Lance is asked.
#[derive(Debug, Clone)]
pub(super) enum Search {
    Nearest {
        column: String,
        query: ArrayRef,
        k: usize,
        /// `None`: the index's metric, or Lance's default for the column.
        metric: Option<DistanceType>,
        nprobes: Option<usize>,
        refine_factor: Option<u32>,
        ef: Option<usize>,
    },
    FullText(FullTextSearchQuery),
}

impl Search {
    /// The score column Lance adds.
    fn score(&self) -> &'static str {
        match self {
            Self::Nearest { .. } => "_distance",
            Self::FullText(_) => "_score",
        }
    }
}

#[derive(Debug)]
pub(super) struct ScoredTable {
    dataset: Arc<Dataset>,
    search: Search,
    schema: SchemaRef,
}

impl ScoredTable {
    pub(super) fn new(dataset: Arc<Dataset>, table: SchemaRef, search: Search) -> Self {
        let mut fields: Vec<Arc<Field>> = table.fields().iter().cloned().collect();
        fields.push(Arc::new(Field::new(
            search.score(),
            DataType::Float32,
            true,
        )));
        Self {
            dataset,
            search,
            schema: Arc::new(Schema::new(fields)),
        }
    }

    /// This full-text search asked for its `k` best rows only (Lance then ranks with WAND,
    /// not every match), when `column` is its score; `None` if it already asks for no more.
    pub(super) fn top(&self, column: &str, k: usize) -> Option<Self> {
        let Search::FullText(query) = &self.search else {
            return None;
        };
        let k = i64::try_from(k).ok()?;
        if column != self.search.score() || query.limit.is_some_and(|l| l <= k) {
            return None;
        }
        Some(Self {
            dataset: self.dataset.clone(),
            search: Search::FullText(query.clone().limit(Some(k))),
            schema: self.schema.clone(),
        })
    }

    fn is_score(&self, expr: &Expr) -> bool {
        expr.column_refs()
            .iter()
            .any(|c| c.name == self.search.score())
    }
}

#[async_trait]
impl TableProvider for ScoredTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let schema = match projection {
            Some(columns) => Arc::new(self.schema.project(columns)?),
            None => self.schema.clone(),
        };
        // The score is one of Lance's output columns: named when the statement reads it.
        let columns: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        let mut scanner = self.dataset.scan();
        scanner.disable_scoring_autoprojection();
        scanner.project(&columns).map_err(lance_error)?;
        // A WHERE clause (on the table's columns) applies before the search.
        scanner.prefilter(true);
        if let Some(filter) = filters.iter().cloned().reduce(Expr::and) {
            scanner.filter_expr(filter);
        }
        match &self.search {
            Search::Nearest {
                column,
                query,
                k,
                metric,
                nprobes,
                refine_factor,
                ef,
            } => {
                scanner
                    .nearest(column, query.as_ref(), *k)
                    .map_err(lance_error)?;
                if let Some(metric) = metric {
                    scanner.distance_metric(*metric);
                }
                // What the options do not say, the statement's settings do (as for
                // `ORDER BY <distance> LIMIT k`).
                let settings = super::settings::vector(state.config_options());
                scanner.minimum_nprobes(nprobes.unwrap_or(settings.nprobes).max(1));
                let refine = super::settings::capped_refine(
                    refine_factor.unwrap_or(settings.refine_factor),
                    *k,
                );
                if refine > 1 {
                    scanner.refine(refine);
                }
                match ef.unwrap_or(settings.ef) {
                    0 => {}
                    ef => {
                        scanner.ef(ef);
                    }
                }
            }
            Search::FullText(query) => {
                // Lance ranks every match it returns in memory of its own (no pool sees it):
                // a search names how many it wants.
                let wanted = query
                    .limit
                    .and_then(|l| usize::try_from(l).ok())
                    .or(limit)
                    .filter(|n| *n <= MAX_FTS_ROWS);
                let Some(wanted) = wanted else {
                    return Err(datafusion::error::DataFusionError::Plan(format!(
                        "fts: say how many rows — ORDER BY _score DESC LIMIT k, or LIMIT k — \
                         at most {MAX_FTS_ROWS}"
                    )));
                };
                let query = query.clone().limit(i64::try_from(wanted).ok());
                scanner.full_text_search(query).map_err(lance_error)?;
            }
        }
        let search = scanner.create_plan().await.map_err(lance_error)?;
        in_order(search, &columns)
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(filters
            .iter()
            .map(|f| {
                if self.is_score(f) {
                    TableProviderFilterPushDown::Unsupported
                } else {
                    TableProviderFilterPushDown::Exact
                }
            })
            .collect())
    }
}
