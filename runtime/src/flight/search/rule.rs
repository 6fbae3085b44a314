//! The logical rule that lets a vector index answer `ORDER BY <distance>(col, <vector>) LIMIT k`.
//!
//! It runs after DataFusion's own rules, when the limit sits in the `Sort` as its `fetch` and
//! the WHERE clause in the table's scan (lake tables take every filter). It matches
//! `Sort(one key, fetch k) → (Projection | SubqueryAlias)* → TableScan(a lake table)` whose key
//! is, through the projections, `cosine_distance | array_distance (ascending) | inner_product
//! (descending)` of a vector column of that table and a constant vector (a literal or a bound
//! parameter) — and swaps only the scan's source for a [`NearestTable`]. Everything else stays:
//! the sort, the distance expression, the projections and the filters. Likewise
//! `ORDER BY _score DESC LIMIT k` over `fts(…)` asks Lance for the k best rows only.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::DataType;
use datafusion::catalog::default_table_source::{provider_as_source, source_as_provider};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, DFSchema, ScalarValue};
use datafusion::error::Result;
use datafusion::logical_expr::{Expr, LogicalPlan, Projection, SortExpr, SubqueryAlias, TableScan};
use datafusion::optimizer::{ApplyOrder, OptimizerConfig, OptimizerRule};
use lance_linalg::distance::DistanceType;

use super::nearest::{NearestTable, Query};
use super::scored::ScoredTable;
use super::settings;
use crate::flight::distributed::LakeTable;

/// The most rows a search may ask an index for (`LIMIT` plus `OFFSET`); a larger one is
/// answered exactly (DataFusion's top-k, bounded by the statement's memory).
pub(super) const MAX_K: usize = 10_000;

/// Swaps a lake table's scan for a nearest-neighbour scan where the statement is a search.
#[derive(Debug, Default)]
pub(in crate::flight) struct NearestNeighbours;

impl OptimizerRule for NearestNeighbours {
    fn name(&self) -> &str {
        "lake_nearest_neighbours"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::TopDown)
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        if !settings::vector(config.options().as_ref()).use_index {
            return Ok(Transformed::no(plan));
        }
        let LogicalPlan::Sort(sort) = &plan else {
            return Ok(Transformed::no(plan));
        };
        let (Some(k), [key]) = (sort.fetch, sort.expr.as_slice()) else {
            return Ok(Transformed::no(plan));
        };
        if k == 0 || k > MAX_K {
            return Ok(Transformed::no(plan));
        }
        let wanted = Wanted { key, k };
        match swap(&sort.input, key.expr.clone(), &wanted) {
            Some(input) => {
                let mut sort = sort.clone();
                sort.input = Arc::new(input);
                Ok(Transformed::yes(LogicalPlan::Sort(sort)))
            }
            None => Ok(Transformed::no(plan)),
        }
    }
}

/// What the statement asks for: its one sort key and how many rows.
struct Wanted<'a> {
    key: &'a SortExpr,
    k: usize,
}

/// `plan` with its lake table's scan swapped, if `expr` (in `plan`'s columns) resolves down to
/// a search of that table; `None` leaves the statement as it is.
fn swap(plan: &LogicalPlan, expr: Expr, wanted: &Wanted<'_>) -> Option<LogicalPlan> {
    match plan {
        LogicalPlan::Projection(p) => {
            let expr = through(expr, &p.schema, |i| p.expr[i].clone().unalias())?;
            let input = swap(&p.input, expr, wanted)?;
            Projection::try_new_with_schema(p.expr.clone(), Arc::new(input), p.schema.clone())
                .ok()
                .map(LogicalPlan::Projection)
        }
        LogicalPlan::SubqueryAlias(a) => {
            let inner = a.input.schema();
            let expr = through(expr, &a.schema, |i| {
                Expr::Column(Column::from(inner.qualified_field(i)))
            })?;
            let input = swap(&a.input, expr, wanted)?;
            SubqueryAlias::try_new(Arc::new(input), a.alias.clone())
                .ok()
                .map(LogicalPlan::SubqueryAlias)
        }
        LogicalPlan::TableScan(scan) => search(scan, &expr, wanted).map(LogicalPlan::TableScan),
        // A filter the table did not take, an aggregate, a join, a window, a limit …: the
        // index cannot say which rows survive it.
        _ => None,
    }
}

/// `expr` with each column of `schema` replaced by what `column(i)` says it is below.
fn through(expr: Expr, schema: &DFSchema, column: impl Fn(usize) -> Expr) -> Option<Expr> {
    let mut unknown = false;
    let resolved = expr
        .transform(|e| match e {
            Expr::Column(c) => match schema.maybe_index_of_column(&c) {
                Some(i) => Ok(Transformed::yes(column(i))),
                None => {
                    unknown = true;
                    Ok(Transformed::no(Expr::Column(c)))
                }
            },
            other => Ok(Transformed::no(other)),
        })
        .ok()?
        .data;
    (!unknown).then_some(resolved)
}

/// The scan of a search: `expr` is a distance function of one of `scan`'s vector columns and a
/// constant vector, in the direction and null order the index can serve.
fn search(scan: &TableScan, expr: &Expr, wanted: &Wanted<'_>) -> Option<TableScan> {
    // `fts(…) ORDER BY _score DESC LIMIT k`: the search ranks only its k best.
    if let Expr::Column(column) = unalias(expr) {
        if wanted.key.asc {
            return None;
        }
        let provider = source_as_provider(&scan.source).ok()?;
        let any: &dyn std::any::Any = provider.as_ref();
        let top = any
            .downcast_ref::<ScoredTable>()?
            .top(&column.name, wanted.k)?;
        let mut scan = scan.clone();
        scan.source = provider_as_source(Arc::new(top));
        return Some(scan);
    }
    let Expr::ScalarFunction(function) = unalias(expr) else {
        return None;
    };
    let (metric, ascending) = match function.name() {
        "cosine_distance" => (DistanceType::Cosine, true),
        // Lance's L2 is the squared distance: the same order.
        "array_distance" => (DistanceType::L2, true),
        // Lance's dot distance is 1 − x·y: ascending is the product descending.
        "inner_product" => (DistanceType::Dot, false),
        _ => return None,
    };
    if wanted.key.asc != ascending {
        return None;
    }
    let [a, b] = function.args.as_slice() else {
        return None;
    };
    // The vector: a constant, or an expression of a prepared statement's parameters (`$1`,
    // `CAST(string_to_array($1, ',') AS FLOAT[])`) evaluated at each execution.
    let (column, vector) = match (uncast(a), uncast(b)) {
        (Expr::Column(c), _) => (c, b),
        (_, Expr::Column(c)) => (c, a),
        _ => return None,
    };
    let index = scan.projected_schema.maybe_index_of_column(column)?;
    let field = scan.projected_schema.field(index);
    let DataType::FixedSizeList(item, dimension) = field.data_type() else {
        return None;
    };
    if !item.data_type().is_floating() {
        return None;
    }
    // Rows without a vector have no distance: the exact answer puts them last unless told
    // otherwise, and an index never returns them.
    if wanted.key.nulls_first && field.is_nullable() {
        return None;
    }
    let query = match uncast(vector) {
        Expr::Literal(value, _) => {
            Query::Vector(query_vector(value, item.data_type(), *dimension)?)
        }
        // Its calls bound to no statement: each execution binds them to its own budget.
        _ if of_parameters_only(vector) => Query::Parameter {
            vector: crate::flight::bounded::unbind_calls(unalias(vector).clone())
                .ok()?
                .data,
            element: item.data_type().clone(),
            dimension: *dimension,
        },
        _ => return None,
    };
    let provider = source_as_provider(&scan.source).ok()?;
    let any: &dyn std::any::Any = provider.as_ref();
    any.downcast_ref::<LakeTable>()?;
    let nearest = NearestTable::new(provider, field.name().clone(), query, wanted.k, metric);
    let mut scan = scan.clone();
    scan.source = provider_as_source(Arc::new(nearest));
    Some(scan)
}

/// Whether `expr` is a value once its placeholders are bound: it has one, and reads no column,
/// no subquery and nothing that changes between evaluations.
fn of_parameters_only(expr: &Expr) -> bool {
    let mut placeholder = false;
    let other = expr.exists(|e| {
        Ok(match e {
            Expr::Placeholder(_) => {
                placeholder = true;
                false
            }
            Expr::Column(_)
            | Expr::OuterReferenceColumn(..)
            | Expr::ScalarSubquery(_)
            | Expr::Exists(_)
            | Expr::InSubquery(_) => true,
            e => crate::flight::prepared::varies(e),
        })
    });
    placeholder && matches!(other, Ok(false))
}

/// `expr` without its names.
fn unalias(expr: &Expr) -> &Expr {
    match expr {
        Expr::Alias(a) => unalias(&a.expr),
        other => other,
    }
}

/// `expr` without the casts DataFusion puts around a distance function's arguments (a vector
/// column of float32 is read as a list of float64: the same values). A cast to anything else
/// (integers) changes the values, and stays.
fn uncast(expr: &Expr) -> &Expr {
    let to_floats = |t: &DataType| match t {
        DataType::List(item) | DataType::LargeList(item) | DataType::FixedSizeList(item, _) => {
            item.data_type().is_floating()
        }
        _ => false,
    };
    match unalias(expr) {
        Expr::Cast(c) if to_floats(c.field.data_type()) => uncast(&c.expr),
        Expr::TryCast(c) if to_floats(c.field.data_type()) => uncast(&c.expr),
        other => other,
    }
}

/// The query vector as the column's element type: `dimension` values, none null or not finite.
pub(super) fn query_vector(
    value: &ScalarValue,
    element: &DataType,
    dimension: i32,
) -> Option<ArrayRef> {
    let values: ArrayRef = match value {
        ScalarValue::List(list) if list.len() == 1 && !list.is_null(0) => list.value(0),
        ScalarValue::LargeList(list) if list.len() == 1 && !list.is_null(0) => list.value(0),
        ScalarValue::FixedSizeList(list) if list.len() == 1 && !list.is_null(0) => list.value(0),
        _ => return None,
    };
    if values.len() != usize::try_from(dimension).ok()? || values.null_count() != 0 {
        return None;
    }
    // Finite as the column's type (1e39 is no float32).
    let query = arrow::compute::cast(&values, element).ok()?;
    let as_f64 = arrow::compute::cast(&query, &DataType::Float64).ok()?;
    let finite = as_f64
        .as_primitive::<arrow::datatypes::Float64Type>()
        .values()
        .iter()
        .all(|v| v.is_finite());
    (finite && query.null_count() == 0).then_some(query)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(values: Vec<Option<f64>>) -> ScalarValue {
        ScalarValue::List(Arc::new(arrow::array::ListArray::from_iter_primitive::<
            arrow::datatypes::Float64Type,
            _,
            _,
        >([Some(values)])))
    }

    #[test]
    fn a_query_vector_has_the_columns_dimension_and_finite_values() {
        let ok = query_vector(&list(vec![Some(1.0), Some(2.0)]), &DataType::Float32, 2).unwrap();
        assert_eq!(ok.data_type(), &DataType::Float32);
        assert_eq!(ok.len(), 2);
        for refused in [
            list(vec![Some(1.0)]),
            list(vec![Some(1.0), None]),
            list(vec![Some(1.0), Some(f64::NAN)]),
            list(vec![Some(f64::INFINITY), Some(1.0)]),
            list(vec![Some(1e39), Some(1.0)]),
            ScalarValue::Float64(Some(1.0)),
        ] {
            assert!(
                query_vector(&refused, &DataType::Float32, 2).is_none(),
                "{refused:?}"
            );
        }
    }
}
