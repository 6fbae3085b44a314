//! `a || b` on strings and bytes as a function call, so that it is counted like `concat`.
//!
//! The operator is evaluated by DataFusion's physical `BinaryExpr`, which no memory pool sees:
//! `s || s || … || s` over a counted 100 MB value built its result 2,000 times over (the longest
//! expression we plan) with nothing counted. As a call of [`ConcatOperator`], wrapped like every
//! function, its result is reserved from the query's budget before it is built. Its semantics
//! are the operator's: NULL if either side is NULL (`concat` skips NULLs), the type of its
//! operands (type coercion made them one).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef};
use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, Expr, Operator, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDFImpl, Signature,
    Volatility,
};

/// The name the operator's call shows in errors and plans.
pub(super) const NAME: &str = "||";

#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct ConcatOperator {
    signature: Signature,
}

impl ConcatOperator {
    pub(super) fn new() -> Self {
        Self {
            signature: Signature::any(2, Volatility::Immutable),
        }
    }
}

/// The two operands of `operator` planned as a function call.
pub(in crate::flight) fn operands<'a, T>(operator: &str, items: &'a [T]) -> Result<(&'a T, &'a T)> {
    match items {
        [left, right] => Ok((left, right)),
        _ => Err(DataFusionError::Internal(format!(
            "{operator} takes two operands, given {}",
            items.len()
        ))),
    }
}

/// The name `operator` gives its column (`a || b`), for its call: rewriting it renames nothing.
pub(in crate::flight) fn operator_column(operator: Operator, args: &[Expr]) -> Result<String> {
    let (left, right) = operands(&operator.to_string(), args)?;
    Ok(format!(
        "{} {} {}",
        left.schema_name(),
        operator,
        right.schema_name()
    ))
}

fn two<T>(items: &[T]) -> Result<(&T, &T)> {
    operands(NAME, items)
}

impl ScalarUDFImpl for ConcatOperator {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    /// The name the operator gave its column (`a || b`), so that rewriting it renames nothing.
    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        operator_column(Operator::StringConcat, args)
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(two(arg_types)?.0.clone())
    }

    /// NULL only where an operand may be.
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let (left, right) = two(args.arg_fields)?;
        Ok(Arc::new(Field::new(
            NAME,
            left.data_type().clone(),
            left.is_nullable() || right.is_nullable(),
        )))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let (left, right) = two(&args.args)?;
        let scalar = matches!(
            (left, right),
            (ColumnarValue::Scalar(_), ColumnarValue::Scalar(_))
        );
        let rows = if scalar { 1 } else { args.number_rows };
        let left = left.to_array(rows)?;
        let right = right.to_array(rows)?;
        let joined: ArrayRef = arrow::compute::kernels::concat_elements::concat_elements_dyn(
            left.as_ref(),
            right.as_ref(),
        )?;
        if scalar {
            Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(
                joined.as_ref(),
                0,
            )?))
        } else {
            debug_assert_eq!(joined.len(), rows);
            Ok(ColumnarValue::Array(joined))
        }
    }
}
