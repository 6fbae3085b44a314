//! How a Lance scan is spread: fragments dealt to tasks, and within a task to partitions, by
//! their bytes; how many tasks a scan asks for.

use std::sync::Arc;

use datafusion::error::Result;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_distributed::{
    DesiredTaskCountEvent, DesiredTaskCountEventResponse, DistributedLeafExec,
    ScaleUpLeafNodeEvent, ScaleUpLeafNodeEventResponse,
};

use super::Spread;
use super::scan::{FragmentRef, LakeScanExec};

/// `fragments` in `groups` groups of near-equal bytes (largest first, each to the lightest
/// group; ties to the lowest group, so the dealing is deterministic). Fragments are never
/// split or repeated: the groups are disjoint and together hold every fragment.
pub(super) fn deal(fragments: &[FragmentRef], groups: usize) -> Vec<Vec<FragmentRef>> {
    let mut dealt: Vec<(u64, Vec<FragmentRef>)> = vec![(0, Vec::new()); groups.max(1)];
    let mut ordered = fragments.to_vec();
    ordered.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.id.cmp(&b.id)));
    for fragment in ordered {
        if let Some((bytes, group)) = dealt.iter_mut().min_by_key(|(bytes, _)| *bytes) {
            *bytes = bytes.saturating_add(fragment.bytes);
            group.push(fragment);
        }
    }
    dealt
        .into_iter()
        .map(|(_, mut group)| {
            group.sort_by_key(|f| f.id);
            group
        })
        .collect()
}

/// A scan asks for one task per `Spread::bytes_per_task` it reads, at most one per fragment
/// (the planner caps it at the workers there are).
pub(super) fn desired_tasks(
    event: DesiredTaskCountEvent<'_>,
) -> Option<Result<DesiredTaskCountEventResponse>> {
    let scan = event.plan.downcast_ref::<LakeScanExec>()?;
    let per_task = event
        .session_config
        .get_extension::<Spread>()
        .map_or(Spread::DEFAULT_BYTES_PER_TASK, |s| s.bytes_per_task)
        .max(1);
    let bytes = scan
        .fragments()
        .map(|f| f.bytes)
        .fold(0u64, u64::saturating_add);
    let fragments = scan.fragments().count();
    let tasks = usize::try_from(bytes.div_ceil(per_task)).unwrap_or(usize::MAX);
    Some(Ok(DesiredTaskCountEventResponse::desired(
        tasks.clamp(1, fragments.max(1)),
    )))
}

/// The scan as `task_count` variants, each reading its own share of the fragments in as many
/// partitions as the scan had (a variant with fewer fragments than partitions leaves the rest
/// empty, as the distributed planner requires).
pub(super) fn scale_up(
    event: ScaleUpLeafNodeEvent<'_>,
) -> Option<Result<ScaleUpLeafNodeEventResponse>> {
    let scan = event.plan.downcast_ref::<LakeScanExec>()?;
    let all: Vec<FragmentRef> = scan.fragments().copied().collect();
    let partitions = scan.partitions().len().max(1);
    let variants = deal(&all, event.task_count).into_iter().map(|share| {
        Arc::new(scan.with_partitions(deal(&share, partitions))) as Arc<dyn ExecutionPlan>
    });
    Some(
        DistributedLeafExec::try_new(Arc::clone(event.plan), variants)
            .map(|leaf| ScaleUpLeafNodeEventResponse::new(Arc::new(leaf))),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fragments(sizes: &[u64]) -> Vec<FragmentRef> {
        sizes
            .iter()
            .enumerate()
            .map(|(id, &bytes)| FragmentRef {
                id: id as u64,
                bytes,
            })
            .collect()
    }

    #[test]
    fn dealing_is_disjoint_complete_and_balanced() {
        let all = fragments(&[90, 10, 10, 10, 40, 40, 30, 20, 50]);
        let groups = deal(&all, 3);
        assert_eq!(groups.len(), 3);
        let mut ids: Vec<u64> = groups.iter().flatten().map(|f| f.id).collect();
        ids.sort_unstable();
        assert_eq!(ids, (0..9).collect::<Vec<_>>(), "every fragment once");
        let loads: Vec<u64> = groups
            .iter()
            .map(|g| g.iter().map(|f| f.bytes).sum())
            .collect();
        let (min, max) = (loads.iter().min().unwrap(), loads.iter().max().unwrap());
        assert!(max - min <= 20, "unbalanced: {loads:?}");
    }

    #[test]
    fn more_groups_than_fragments_leaves_groups_empty() {
        let groups = deal(&fragments(&[5, 7]), 4);
        assert_eq!(groups.len(), 4);
        assert_eq!(groups.iter().filter(|g| g.is_empty()).count(), 2);
        assert_eq!(deal(&[], 0).len(), 1, "no groups asked: one, empty");
    }
}
