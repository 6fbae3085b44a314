//! DataFusion's `EnforceDistribution`, not run over a plan that already runs in one partition.
//!
//! With one target partition and every operator producing one partition, each distribution
//! an operator can require is met (a single partition, or a hash partitioning into one), so the
//! rule has nothing to add; yet it rebuilds the plan's operators to find that out, and Lance's
//! scans re-derive their schemas on each rebuild. For an index-served search (`fetch.rs` plans
//! it in one partition) that was a twentieth of the statement's CPU.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::config::ConfigOptions;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_optimizer::enforce_distribution::EnforceDistribution;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};

/// `EnforceDistribution`, skipped when it would leave the plan as it is.
#[derive(Debug, Default)]
pub(super) struct UnlessOnePartition(EnforceDistribution);

impl PhysicalOptimizerRule for UnlessOnePartition {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if config.execution.target_partitions == 1 && in_one_partition(plan.as_ref()) {
            return Ok(plan);
        }
        self.0.optimize(plan, config)
    }

    /// The rule's own name: EXPLAIN VERBOSE lists the same steps.
    fn name(&self) -> &str {
        self.0.name()
    }

    fn schema_check(&self) -> bool {
        self.0.schema_check()
    }
}

/// Whether every operator of `plan` produces one partition.
fn in_one_partition(plan: &dyn ExecutionPlan) -> bool {
    plan.output_partitioning().partition_count() == 1
        && plan
            .children()
            .into_iter()
            .all(|child| in_one_partition(child.as_ref()))
}

/// DataFusion's physical optimizer rules, `EnforceDistribution` in its wrapper.
pub(super) fn datafusion_rules() -> Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>> {
    datafusion::physical_optimizer::optimizer::PhysicalOptimizer::new()
        .rules
        .into_iter()
        .map(|rule| -> Arc<dyn PhysicalOptimizerRule + Send + Sync> {
            if rule.name() == EnforceDistribution::new().name() {
                Arc::new(UnlessOnePartition::default())
            } else {
                rule
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use arrow::record_batch::RecordBatch;
    use datafusion::datasource::memory::MemorySourceConfig;
    use datafusion::physical_expr::expressions::col;
    use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
    use datafusion::physical_plan::sorts::sort::SortExec;

    use super::*;

    /// A sort of one column over `partitions` in-memory partitions.
    fn sorted(partitions: usize) -> Arc<dyn ExecutionPlan> {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from(vec![3, 1, 2]))],
        )
        .unwrap();
        let source =
            MemorySourceConfig::try_new_exec(&vec![vec![batch]; partitions], schema.clone(), None)
                .unwrap();
        let ordering =
            LexOrdering::new([PhysicalSortExpr::new_default(col("n", &schema).unwrap())]).unwrap();
        Arc::new(SortExec::new(ordering, source))
    }

    fn config(target_partitions: usize) -> ConfigOptions {
        let mut config = ConfigOptions::new();
        config.execution.target_partitions = target_partitions;
        config
    }

    #[test]
    fn a_plan_in_one_partition_is_left_as_it_is() {
        let plan = sorted(1);
        let out = UnlessOnePartition::default()
            .optimize(plan.clone(), &config(1))
            .unwrap();
        assert!(Arc::ptr_eq(&out, &plan), "the plan was rebuilt");
        let rebuilt = EnforceDistribution::new()
            .optimize(plan.clone(), &config(1))
            .unwrap();
        assert_eq!(
            datafusion::physical_plan::displayable(out.as_ref())
                .indent(true)
                .to_string(),
            datafusion::physical_plan::displayable(rebuilt.as_ref())
                .indent(true)
                .to_string(),
            "EnforceDistribution would have changed it"
        );
    }

    #[test]
    fn a_plan_in_more_partitions_is_distributed() {
        for (partitions, target) in [(2, 1), (1, 4), (2, 4)] {
            let plan = sorted(partitions);
            let out = UnlessOnePartition::default()
                .optimize(plan.clone(), &config(target))
                .unwrap();
            let expected = EnforceDistribution::new()
                .optimize(plan, &config(target))
                .unwrap();
            let shown = |plan: &Arc<dyn ExecutionPlan>| {
                datafusion::physical_plan::displayable(plan.as_ref())
                    .indent(true)
                    .to_string()
            };
            assert_eq!(shown(&out), shown(&expected), "{partitions} into {target}");
        }
        // Two partitions under a sort of all rows: they are merged first.
        let out = UnlessOnePartition::default()
            .optimize(sorted(2), &config(1))
            .unwrap();
        assert_eq!(out.output_partitioning().partition_count(), 1);
        assert_ne!(out.children()[0].output_partitioning().partition_count(), 2);
    }

    /// Joins, aggregates, windows, unions and top-k planned in one partition answer the same
    /// with the rule skipped as with it.
    #[tokio::test]
    async fn queries_in_one_partition_answer_as_with_the_rule() {
        use datafusion::execution::SessionStateBuilder;
        use datafusion::prelude::{SessionConfig, SessionContext};
        let session = |rules: Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>>| {
            let state = SessionStateBuilder::new()
                .with_config(SessionConfig::new().with_target_partitions(1))
                .with_default_features()
                .with_physical_optimizer_rules(rules)
                .build();
            let ctx = SessionContext::new_with_state(state);
            let n: arrow::array::ArrayRef = Arc::new(Int64Array::from_iter_values(1..=40));
            ctx.register_batch("t", RecordBatch::try_from_iter([("n", n)]).unwrap())
                .unwrap();
            ctx
        };
        let skipping = session(datafusion_rules());
        let default =
            session(datafusion::physical_optimizer::optimizer::PhysicalOptimizer::new().rules);
        for sql in [
            "SELECT a.n, b.n FROM t a JOIN t b ON a.n = b.n % 7 ORDER BY 1, 2",
            "SELECT n % 3 AS g, count(*), sum(n) FROM t GROUP BY n % 3 ORDER BY g",
            "SELECT n, sum(n) OVER (PARTITION BY n % 2 ORDER BY n) FROM t ORDER BY n",
            "SELECT n FROM t ORDER BY n DESC LIMIT 3",
            "SELECT n FROM t UNION ALL SELECT n * 2 FROM t ORDER BY n LIMIT 50",
            "SELECT count(DISTINCT n % 5) FROM t WHERE n IN (SELECT n * 3 FROM t)",
        ] {
            let answer = |ctx: &SessionContext| {
                let ctx = ctx.clone();
                async move {
                    let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
                    arrow::util::pretty::pretty_format_batches(&batches)
                        .unwrap()
                        .to_string()
                }
            };
            assert_eq!(answer(&skipping).await, answer(&default).await, "{sql}");
        }
    }

    #[test]
    fn the_wrapper_replaces_the_rule_in_place() {
        let default = datafusion::physical_optimizer::optimizer::PhysicalOptimizer::new().rules;
        let rules = datafusion_rules();
        let names = |rules: &[Arc<dyn PhysicalOptimizerRule + Send + Sync>]| {
            rules
                .iter()
                .map(|r| r.name().to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&rules), names(&default));
        let at = rules
            .iter()
            .position(|r| r.name() == "EnforceDistribution")
            .unwrap();
        assert!(format!("{:?}", rules[at]).starts_with("UnlessOnePartition"));
    }
}
