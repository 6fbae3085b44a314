//! Cancellation: when a client drops a DoGet stream, the query must stop.
//!
//! Dropping the stream aborts DataFusion's spawned tasks, but an abort only lands when a task
//! yields. DataFusion inserts yield points at the scan (`EnsureCooperative`), so an operator that
//! produces many batches per input batch — a nested-loop join, for one — can run for minutes
//! without yielding, and a cancelled query keeps burning CPU. This rule adds a yield point (a
//! tokio coop-budget check) above every operator, so every task yields within a few batches.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::error::Result;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::coop::CooperativeExec;

#[derive(Debug, Default)]
pub(super) struct YieldAboveEveryOperator;

impl PhysicalOptimizerRule for YieldAboveEveryOperator {
    fn name(&self) -> &str {
        "YieldAboveEveryOperator"
    }

    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let leaf = node.children().is_empty();
            let wrapped = node.is::<CooperativeExec>();
            Ok(if leaf || wrapped {
                Transformed::no(node)
            } else {
                Transformed::yes(Arc::new(CooperativeExec::new(node)) as Arc<dyn ExecutionPlan>)
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
    use super::*;
    use datafusion::prelude::SessionContext;

    #[tokio::test]
    async fn every_operator_gets_a_yield_point() {
        let ctx = SessionContext::new();
        let plan = ctx
            .sql("SELECT count(*) FROM (VALUES (1), (2)) a(x) CROSS JOIN (VALUES (3)) b(y)")
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let plan = YieldAboveEveryOperator
            .optimize(plan, &ConfigOptions::default())
            .unwrap();
        let mut unwrapped = Vec::new();
        plan.apply(|node| {
            for child in node.children() {
                let parent_is_coop = node.is::<CooperativeExec>();
                if !child.children().is_empty() && !child.is::<CooperativeExec>() && !parent_is_coop
                {
                    unwrapped.push(child.name().to_owned());
                }
            }
            Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
        })
        .unwrap();
        assert!(plan.is::<CooperativeExec>(), "the root has no yield point");
        assert!(
            unwrapped.is_empty(),
            "operators without a yield point: {unwrapped:?}"
        );
    }
}
