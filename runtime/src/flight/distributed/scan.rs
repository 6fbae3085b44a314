//! The leaf a distributed statement reads a Lance table with: some of the table's fragments, at
//! the version the statement pinned, through the engine of the process that runs it.
//!
//! Built on Lance's public `Scanner` (fragments, projection, filter, limit), so the plan that
//! crosses the network names a table, a version and fragment ids, never a path or a credential:
//! each worker opens the dataset through its own engine (engine/pinned.rs) and identity.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use futures::{StreamExt, TryStreamExt};
use lance::dataset::Dataset;

use crate::engine::{Engine, TableRef};

/// One fragment of a table, as a scan deals it out: its id and the bytes of its data files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FragmentRef {
    pub(super) id: u64,
    pub(super) bytes: u64,
}

impl FragmentRef {
    /// Every fragment of `dataset`'s version; a fragment whose file sizes the manifest does not
    /// record counts its rows instead (one byte each), so it is still dealt out.
    pub(super) fn all_of(dataset: &Dataset) -> Vec<Self> {
        dataset
            .fragments()
            .iter()
            .map(|f| {
                let recorded = f
                    .files
                    .iter()
                    .filter_map(|file| file.file_size_bytes.get())
                    .map(u64::from)
                    .fold(0u64, u64::saturating_add);
                let bytes = if recorded > 0 {
                    recorded
                } else {
                    f.physical_rows.map_or(1, |r| r as u64)
                };
                Self { id: f.id, bytes }
            })
            .collect()
    }
}

/// What a scan reads of its table, whichever process runs it.
#[derive(Debug, Clone)]
pub(super) struct ScanSpec {
    pub(super) table: TableRef,
    /// The version the statement pinned when it was planned.
    pub(super) version: u64,
    /// Columns, by name, in output order (none: only row counts, as `count(*)` reads).
    pub(super) projection: Vec<String>,
    /// Every filter pushed into the scan, combined (Lance applies it exactly).
    pub(super) filter: Option<Expr>,
    pub(super) limit: Option<usize>,
    pub(super) schema: SchemaRef,
}

/// Reads `partitions[i]`'s fragments as output partition `i`; a partition with none is empty
/// (a task of a distributed scan is given only its share, the others left empty).
#[derive(Debug)]
pub(super) struct LakeScanExec {
    engine: Engine,
    spec: Arc<ScanSpec>,
    partitions: Vec<Vec<FragmentRef>>,
    properties: Arc<PlanProperties>,
}

impl LakeScanExec {
    pub(super) fn new(
        engine: Engine,
        spec: Arc<ScanSpec>,
        partitions: Vec<Vec<FragmentRef>>,
    ) -> Self {
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(spec.schema.clone()),
            Partitioning::UnknownPartitioning(partitions.len().max(1)),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        Self {
            engine,
            spec,
            partitions,
            properties,
        }
    }

    pub(super) fn spec(&self) -> &Arc<ScanSpec> {
        &self.spec
    }

    pub(super) fn partitions(&self) -> &[Vec<FragmentRef>] {
        &self.partitions
    }

    /// The same scan over other fragments (one task's share).
    pub(super) fn with_partitions(&self, partitions: Vec<Vec<FragmentRef>>) -> Self {
        Self::new(self.engine.clone(), self.spec.clone(), partitions)
    }

    /// Every fragment this scan reads.
    pub(super) fn fragments(&self) -> impl Iterator<Item = &FragmentRef> {
        self.partitions.iter().flatten()
    }
}

impl DisplayAs for LakeScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let groups: Vec<Vec<u64>> = self
            .partitions
            .iter()
            .map(|p| p.iter().map(|f| f.id).collect())
            .collect();
        write!(
            f,
            "LakeScanExec: table={} version={} fragments={groups:?} projection={:?}",
            self.spec.table, self.spec.version, self.spec.projection
        )?;
        if let Some(filter) = &self.spec.filter {
            write!(f, " filter={filter}")?;
        }
        if let Some(limit) = self.spec.limit {
            write!(f, " limit={limit}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for LakeScanExec {
    fn name(&self) -> &str {
        "LakeScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if children.is_empty() {
            Ok(self)
        } else {
            Err(DataFusionError::Internal(
                "LakeScanExec is a leaf: it takes no inputs".into(),
            ))
        }
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let schema = self.spec.schema.clone();
        let fragments: HashSet<u64> = self
            .partitions
            .get(partition)
            .map(|p| p.iter().map(|f| f.id).collect())
            .unwrap_or_default();
        if fragments.is_empty() {
            return Ok(Box::pin(RecordBatchStreamAdapter::new(
                schema,
                futures::stream::empty(),
            )));
        }
        let engine = self.engine.clone();
        let spec = self.spec.clone();
        // Opened when first polled: executing a plan does no I/O.
        let rows = futures::stream::once(async move { read(&engine, &spec, &fragments).await })
            .try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, rows)))
    }
}

/// The rows of `fragments` of the pinned version, as the scan asks for them.
async fn read(
    engine: &Engine,
    spec: &ScanSpec,
    fragments: &HashSet<u64>,
) -> Result<futures::stream::BoxStream<'static, Result<arrow::array::RecordBatch>>> {
    let dataset = engine
        .open(&spec.table, Some(spec.version))
        .await
        .map_err(|e| DataFusionError::External(Box::new(e)))?;
    let chosen: Vec<_> = dataset
        .fragments()
        .iter()
        .filter(|f| fragments.contains(&f.id))
        .cloned()
        .collect();
    // The version is pinned: every fragment the planner saw is in it.
    if chosen.len() != fragments.len() {
        return Err(DataFusionError::Execution(format!(
            "table {} version {} lacks fragments the statement was planned with",
            spec.table, spec.version
        )));
    }
    let mut scan = dataset.scan();
    scan.with_fragments(chosen);
    scan.project(&spec.projection)?;
    if let Some(filter) = &spec.filter {
        scan.filter_expr(filter.clone());
    }
    scan.limit(spec.limit.map(|l| l as i64), None)?;
    scan.scan_in_order(false);
    let stream = scan.try_into_stream().await?;
    // The operators above were planned for `spec.schema`: a batch of another shape (a plan
    // whose schema was not the table's) is an error, never handed on.
    let expected = spec.schema.clone();
    let table = spec.table.to_string();
    Ok(stream
        .map_err(DataFusionError::from)
        .and_then(move |batch| {
            let same = batch.num_columns() == expected.fields().len()
                && batch
                    .schema()
                    .fields()
                    .iter()
                    .zip(expected.fields())
                    .all(|(a, b)| a.data_type() == b.data_type());
            futures::future::ready(if same {
                Ok(batch)
            } else {
                Err(DataFusionError::Execution(format!(
                    "a scan of {table} read columns of another schema than it was planned with"
                )))
            })
        })
        .boxed())
}
