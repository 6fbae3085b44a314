//! `lake_case(CASE … END)`: what a CASE builds, claimed in the query's budget.
//!
//! A CASE is an expression, not a function, so nothing counted what it copies: 100 columns
//! `CASE WHEN length(s) > 0 THEN s END` over a 100 MB value were 10 GB that no pool saw. Wrapped
//! in this identity call (counted like every function), its result is claimed for as long as it
//! lives, and a statement whose results pass the budget is refused.

use arrow::datatypes::{DataType, FieldRef};
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};

pub(super) const NAME: &str = "lake_case";

#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct CaseResult {
    signature: Signature,
}

impl CaseResult {
    pub(super) fn new() -> Self {
        Self {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

fn one<T>(items: &[T]) -> Result<&T> {
    match items {
        [item] => Ok(item),
        _ => Err(DataFusionError::Internal(format!(
            "{NAME} takes one argument, given {}",
            items.len()
        ))),
    }
}

impl ScalarUDFImpl for CaseResult {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    /// The CASE's own name, so that wrapping it renames no column.
    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        Ok(one(args)?.schema_name().to_string())
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(one(arg_types)?.clone())
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        Ok(one(args.arg_fields)?.clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let mut args = args.args;
        match (args.pop(), args.is_empty()) {
            (Some(value), true) => Ok(value),
            _ => Err(DataFusionError::Internal(format!(
                "{NAME} takes one argument"
            ))),
        }
    }
}
