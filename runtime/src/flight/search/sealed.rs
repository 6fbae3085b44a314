//! A search's plan as Lance's planner made it, kept out of DataFusion's physical optimizer.
//!
//! `Scanner::create_plan` already runs Lance's own rule list over the plan it builds (limits
//! pushed into its reads, distribution enforced): that plan is what pylance executes. lake's
//! session then ran DataFusion's whole rule list over it again, and each rule that rebuilds an
//! operator makes Lance's reads re-derive their schemas (`FilteredReadExec::with_new_children`
//! re-runs its constructor): a twentieth of an index-served search's CPU, for no change to what
//! runs. So the search's plan enters the statement's plan as one leaf, [`Sealed`], which
//! DataFusion's rules see as an opaque scan with the plan's own properties; [`Unseal`], after
//! them, puts the plan back in its place, so that lake's own rules (a yield point above every
//! operator, bounds on repetition) still cover it and EXPLAIN shows every operator.

use std::fmt;
use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Statistics, internal_err};
use datafusion::error::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_optimizer::ensure_coop::EnsureCooperative;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};

/// A plan DataFusion's optimizer rules are not to rewrite: a leaf with the plan's properties.
#[derive(Debug)]
pub(super) struct Sealed {
    plan: Arc<dyn ExecutionPlan>,
}

impl Sealed {
    pub(super) fn new(plan: Arc<dyn ExecutionPlan>) -> Self {
        Self { plan }
    }
}

impl DisplayAs for Sealed {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        // Seen only in EXPLAIN VERBOSE's steps before `Unseal`.
        write!(f, "Sealed: {}", self.plan.name())
    }
}

impl ExecutionPlan for Sealed {
    fn name(&self) -> &str {
        "Sealed"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.plan.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if children.is_empty() {
            Ok(self)
        } else {
            internal_err!("Sealed is a leaf: given {} children", children.len())
        }
    }

    /// The plan itself, should a session without [`Unseal`] run it.
    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        self.plan.execute(partition, context)
    }

    fn partition_statistics(&self, partition: Option<usize>) -> Result<Arc<Statistics>> {
        self.plan.partition_statistics(partition)
    }
}

/// Puts every [`Sealed`] plan back in its place. Runs after DataFusion's rules, before lake's.
#[derive(Debug, Default)]
pub(in crate::flight) struct Unseal;

impl PhysicalOptimizerRule for Unseal {
    fn name(&self) -> &str {
        "lake_unseal"
    }

    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            Ok(match node.downcast_ref::<Sealed>() {
                // With the yield points DataFusion would have put at its leaves (lake's own rule
                // puts them above every other operator).
                Some(sealed) => Transformed::yes(
                    EnsureCooperative::new().optimize(Arc::clone(&sealed.plan), config)?,
                ),
                None => Transformed::no(node),
            })
        })
        .map(|t| t.data)
    }

    fn schema_check(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use arrow::record_batch::RecordBatch;
    use datafusion::common::tree_node::TreeNodeRecursion;
    use datafusion::datasource::memory::MemorySourceConfig;
    use datafusion::physical_expr::expressions::col;
    use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
    use datafusion::physical_plan::coop::CooperativeExec;
    use datafusion::physical_plan::execution_plan::SchedulingType;
    use datafusion::physical_plan::limit::GlobalLimitExec;
    use datafusion::physical_plan::projection::ProjectionExec;
    use datafusion::physical_plan::sorts::sort::SortExec;

    use super::*;
    use crate::flight::sql::physical_rules;

    /// An operator passing its input on, counting how often a rule rebuilds it (Lance's reads
    /// re-derive their schemas then).
    #[derive(Debug)]
    struct Rebuilt {
        input: Arc<dyn ExecutionPlan>,
        count: Arc<AtomicUsize>,
    }

    impl DisplayAs for Rebuilt {
        fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
            write!(f, "Rebuilt")
        }
    }

    impl ExecutionPlan for Rebuilt {
        fn name(&self) -> &str {
            "Rebuilt"
        }

        fn properties(&self) -> &Arc<PlanProperties> {
            self.input.properties()
        }

        fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
            vec![&self.input]
        }

        fn with_new_children(
            self: Arc<Self>,
            mut children: Vec<Arc<dyn ExecutionPlan>>,
        ) -> Result<Arc<dyn ExecutionPlan>> {
            self.count.fetch_add(1, Ordering::Relaxed);
            Ok(Arc::new(Self {
                input: children.remove(0),
                count: Arc::clone(&self.count),
            }))
        }

        fn execute(
            &self,
            partition: usize,
            context: Arc<TaskContext>,
        ) -> Result<SendableRecordBatchStream> {
            self.input.execute(partition, context)
        }
    }

    /// A scan that yields nowhere of its own (as Lance's index partitions).
    #[derive(Debug)]
    struct Unyielding {
        scan: Arc<dyn ExecutionPlan>,
        properties: Arc<PlanProperties>,
    }

    impl Unyielding {
        fn new(scan: Arc<dyn ExecutionPlan>) -> Self {
            let properties = scan
                .properties()
                .as_ref()
                .clone()
                .with_scheduling_type(SchedulingType::NonCooperative);
            Self {
                scan,
                properties: Arc::new(properties),
            }
        }
    }

    impl DisplayAs for Unyielding {
        fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
            write!(f, "Unyielding")
        }
    }

    impl ExecutionPlan for Unyielding {
        fn name(&self) -> &str {
            "Unyielding"
        }

        fn properties(&self) -> &Arc<PlanProperties> {
            &self.properties
        }

        fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
            vec![]
        }

        fn with_new_children(
            self: Arc<Self>,
            _children: Vec<Arc<dyn ExecutionPlan>>,
        ) -> Result<Arc<dyn ExecutionPlan>> {
            Ok(self)
        }

        fn execute(
            &self,
            partition: usize,
            context: Arc<TaskContext>,
        ) -> Result<SendableRecordBatchStream> {
            self.scan.execute(partition, context)
        }
    }

    /// A top-1 sort of a projection of a search (two operators, a limit between them, over a
    /// scan), optimized by the session's rules; and how often they rebuilt the search's
    /// operators.
    fn optimized(seal: bool) -> (Arc<dyn ExecutionPlan>, usize) {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from(vec![3, 1, 2]))],
        )
        .unwrap();
        let source =
            MemorySourceConfig::try_new_exec(&[vec![batch]], schema.clone(), None).unwrap();
        let count = Arc::new(AtomicUsize::new(0));
        let rebuilt = |input| -> Arc<dyn ExecutionPlan> {
            Arc::new(Rebuilt {
                input,
                count: Arc::clone(&count),
            })
        };
        // A limit over a scan that can take it: DataFusion's rules push it down.
        let source = Arc::new(Unyielding::new(source));
        let search = rebuilt(Arc::new(GlobalLimitExec::new(rebuilt(source), 0, Some(2))));
        let search = if seal {
            Arc::new(Sealed::new(search))
        } else {
            search
        };
        let projected: Arc<dyn ExecutionPlan> = Arc::new(
            ProjectionExec::try_new(vec![(col("n", &schema).unwrap(), "n".to_owned())], search)
                .unwrap(),
        );
        let ordering =
            LexOrdering::new([PhysicalSortExpr::new_default(col("n", &schema).unwrap())]).unwrap();
        let mut plan: Arc<dyn ExecutionPlan> =
            Arc::new(SortExec::new(ordering, projected).with_fetch(Some(1)));
        let mut config = ConfigOptions::new();
        config.execution.target_partitions = 1;
        for rule in physical_rules() {
            plan = rule.optimize(plan, &config).unwrap();
        }
        let rebuilt = count.load(Ordering::Relaxed);
        (plan, rebuilt)
    }

    #[test]
    fn a_sealed_plan_is_rebuilt_only_by_lakes_own_rules() {
        let (plan, rebuilt) = optimized(true);
        let mut sealed = 0;
        let mut unyielding = Vec::new();
        plan.apply(|node| {
            sealed += usize::from(node.is::<Sealed>());
            for child in node.children() {
                let leaf = child.children().is_empty();
                let cooperative = child.properties().scheduling_type == SchedulingType::Cooperative;
                let yields = node.is::<CooperativeExec>()
                    || child.is::<CooperativeExec>()
                    || (leaf && cooperative);
                if !yields {
                    unyielding.push(child.name().to_owned());
                }
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .unwrap();
        let shown = datafusion::physical_plan::displayable(plan.as_ref())
            .indent(true)
            .to_string();
        assert_eq!(sealed, 0, "left sealed:\n{shown}");
        assert!(
            shown.contains("Rebuilt"),
            "the search is not in the plan:\n{shown}"
        );
        assert!(
            unyielding.is_empty(),
            "no yield point above {unyielding:?}:\n{shown}"
        );
        // What sealing saves: DataFusion's rules rebuild an operator they can see many times;
        // sealed, only the yield points rebuild it.
        let (_, unsealed) = optimized(false);
        assert!(
            unsealed > rebuilt,
            "rebuilt {unsealed} times unsealed, {rebuilt} sealed"
        );
    }
}
