//! Parameter types DataFusion leaves open, inferred where lake knows what a client must bind:
//! a search's query vector (`cosine_distance(emb, $1)`: a list of the vector column's element
//! type) and a vector sent as text (`string_to_array($1, ',')`: a string). Clients that type
//! parameters from the server's schema (JDBC) can then bind them.

use std::collections::HashMap;

use arrow::datatypes::{DataType, Field};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, ExprSchema};
use datafusion::logical_expr::{Expr, LogicalPlan};

/// `$n` → its type, for the placeholders of `plan` lake can type.
pub(super) fn parameter_types(plan: &LogicalPlan) -> HashMap<String, DataType> {
    let mut found = HashMap::new();
    let _ = plan.apply_with_subqueries(|node| {
        let empty = DFSchema::empty();
        let schema = match node.inputs().as_slice() {
            [input] => input.schema().as_ref(),
            _ => &empty,
        };
        node.apply_expressions(|expr| {
            expr.apply(|e| {
                if let Expr::ScalarFunction(f) = e {
                    infer(f.name(), &f.args, schema, &mut found);
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    });
    found
}

fn infer(function: &str, args: &[Expr], schema: &DFSchema, found: &mut HashMap<String, DataType>) {
    match (function, args) {
        ("cosine_distance" | "array_distance" | "inner_product", [a, b]) => {
            for (p, other) in [(a, b), (b, a)] {
                if let (Expr::Placeholder(p), Expr::Column(c)) = (p, other)
                    && let Ok(field) = schema.field_from_column(c)
                    && let DataType::FixedSizeList(item, _) | DataType::List(item) =
                        field.data_type()
                {
                    found.insert(
                        p.id.clone(),
                        DataType::List(std::sync::Arc::new(Field::new(
                            "item",
                            item.data_type().clone(),
                            true,
                        ))),
                    );
                }
            }
        }
        ("string_to_array", [Expr::Placeholder(p), ..]) => {
            found.insert(p.id.clone(), DataType::Utf8);
        }
        _ => {}
    }
}
