//! How lake's guards cross the network in a distributed plan (flight/distributed/codec.rs): as
//! what they are, not what they hold — a check and its handoff are one process's.
//!
//! A worker decodes bottom-up: each [`Guarded`] first, as a [`Pending`] placeholder over its
//! input; then the operator; then its [`keep::KeepReservation`], which sets the guards up again
//! for the operator — with the worker's batch size and, when they run, its budget — in the
//! placeholders' places. The plan keeps its shape node for node, as the distributed planner's
//! metrics (one per node, in order) need.

use std::fmt;
use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::execution_plan::CardinalityEffect;
use datafusion::physical_plan::filter_pushdown::{
    ChildPushdownResult, FilterDescription, FilterPushdownPhase, FilterPushdownPropagation,
};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, Statistics,
};

use super::{Check, Guarded, Guarding, guarded, keep};

/// One of lake's guard nodes, as it crosses the network.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(in crate::flight) enum GuardNode {
    /// A guard, with its check when that check can travel (a window's holds the operator's
    /// own functions: it is set up again by the keeper).
    Guarded(Option<WireCheck>),
    Keeper,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(in crate::flight) enum WireCheck {
    Join {
        name: String,
        rows: usize,
        slice: bool,
    },
    Unnest(Vec<(usize, usize, bool)>),
}

/// The operator names a join check may carry (they are `&'static str`).
const JOIN_NAMES: [&str; 3] = ["a cross join", "a nested-loop join", "a join"];

impl WireCheck {
    fn of(check: &Check) -> Option<Self> {
        match check {
            Check::Join { name, rows, slice } => Some(Self::Join {
                name: (*name).to_owned(),
                rows: *rows,
                slice: *slice,
            }),
            Check::Unnest(lists) => Some(Self::Unnest(lists.clone())),
            Check::Window { .. } => None,
        }
    }

    /// The check, for a worker whose batches hold `batch_size` rows: the rows a join's batch
    /// may hold are the worker's (a sent count is no bound: 0 or 2^64 would switch it off).
    fn check(&self, batch_size: usize) -> Result<Check> {
        Ok(match self {
            Self::Join { name, slice, .. } => Check::Join {
                name: JOIN_NAMES
                    .into_iter()
                    .find(|n| n == name)
                    .ok_or_else(|| bad(format!("a join check for {name:?}")))?,
                rows: batch_size.max(1),
                slice: *slice,
            },
            Self::Unnest(lists) => Check::Unnest(lists.clone()),
        })
    }
}

fn bad(what: impl fmt::Display) -> DataFusionError {
    DataFusionError::Plan(format!("a distributed plan lake cannot run: {what}"))
}

impl GuardNode {
    pub(in crate::flight) fn of(node: &dyn ExecutionPlan) -> Option<Self> {
        if let Some(guard) = node.downcast_ref::<Guarded>() {
            Some(Self::Guarded(WireCheck::of(&guard.check)))
        } else if node.is::<keep::KeepReservation>() {
            Some(Self::Keeper)
        } else {
            None
        }
    }

    /// The node again over `input`, decoded in a worker whose batches hold `batch_size` rows.
    /// A guard decodes on its own (its keeper may run in another stage, on another worker);
    /// a keeper then links the guards of its operator's inputs to itself.
    pub(in crate::flight) fn decode(
        self,
        input: Arc<dyn ExecutionPlan>,
        batch_size: usize,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match self {
            Self::Guarded(Some(check)) => Ok(Arc::new(Guarded::new(
                input,
                check.check(batch_size)?,
                Arc::default(),
            ))),
            Self::Guarded(None) => Ok(Arc::new(Pending::new(input))),
            Self::Keeper => keeper(input, batch_size.max(1)),
        }
    }
}

/// The keeper over `input`: its operator, or (YieldAboveEveryOperator ran after BoundRepetition)
/// the operator's yield point.
fn keeper(input: Arc<dyn ExecutionPlan>, batch_size: usize) -> Result<Arc<dyn ExecutionPlan>> {
    let (operator, yielding) = match input.downcast_ref::<CooperativeExec>() {
        Some(_) => match input.children().as_slice() {
            [operator] => (Arc::clone(operator), true),
            _ => return Err(bad("a guard keeper over a yield point of several inputs")),
        },
        None => (Arc::clone(&input), false),
    };
    let Guarding {
        operator,
        handoff,
        claims,
    } = guarded(&operator, batch_size, &relink)?.ok_or_else(|| {
        bad(format!(
            "a guard keeper over {}, which needs none",
            operator.name()
        ))
    })?;
    let operator = if yielding {
        input.with_new_children(vec![operator])?
    } else {
        operator
    };
    Ok(Arc::new(keep::KeepReservation::new(
        operator, handoff, claims,
    )))
}

/// `input` with its guard — the first one down its chain of single-input nodes in this stage
/// (the distributed planner may have put nodes between an operator and its guards) — set up
/// with `check` and the keeper's `handoff`. An input whose guard runs in another stage is left
/// as it is: that guard measures on its own there.
fn relink(
    input: Arc<dyn ExecutionPlan>,
    check: Check,
    handoff: Arc<keep::Handoff>,
) -> Result<Arc<dyn ExecutionPlan>> {
    if let Some(guard) = input.downcast_ref::<Guarded>() {
        return Ok(Arc::new(Guarded::new(
            Arc::clone(&guard.input),
            check,
            handoff,
        )));
    }
    if let Some(pending) = input.downcast_ref::<Pending>() {
        return Ok(Arc::new(Guarded::new(
            Arc::clone(&pending.input),
            check,
            handoff,
        )));
    }
    let boundary = datafusion_distributed::NetworkBoundaryExt::is_network_boundary(input.as_ref());
    match input.children().as_slice() {
        [inner] if !boundary => {
            let inner = relink(Arc::clone(inner), check, handoff)?;
            input.with_new_children(vec![inner])
        }
        _ => Ok(input),
    }
}

/// A window's guard decoded without its window (which holds the check): its keeper replaces it.
/// One whose keeper runs in another stage passes its input on unmeasured; the window's own
/// accounting (its memory pool) still applies.
#[derive(Debug)]
struct Pending {
    input: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
}

impl Pending {
    fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        let properties = Arc::new(PlanProperties::clone(input.properties()));
        Self { input, properties }
    }

    fn with_input(&self, input: Arc<dyn ExecutionPlan>) -> Self {
        Self::new(input)
    }
}

impl DisplayAs for Pending {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "LakeRepetitionGuard (pending)")
    }
}

impl ExecutionPlan for Pending {
    one_input_node!("LakeRepetitionGuardPending");

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        self.input.execute(partition, context)
    }
}
