//! Functions whose output size is a product of their arguments, bounded before they run. A
//! failed allocation aborts the process (Rust cannot recover from it), and no memory pool sees
//! a function's own buffers: `repeat(arrow_cast('x', 'LargeUtf8'), 2^45)` asked for 32 TiB and
//! took the server down. Each wrapper checks every row's requested size, then delegates.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int64Array};
use arrow::datatypes::{DataType, FieldRef};
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::FunctionRegistry;
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, Expr, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature,
};
use datafusion::prelude::SessionContext;

/// The largest value one call may produce.
pub(super) const MAX_VALUE_BYTES: i64 = 256 * 1024 * 1024;
/// The most one call may produce over a batch.
pub(super) const MAX_CALL_BYTES: i64 = 1024 * 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Growth {
    /// `repeat(s, n)`: `len(s) × n` bytes.
    Repeat,
    /// `lpad(s, n [, fill])`, `rpad`: `n` characters, up to 4 bytes each.
    Pad,
    /// `array_repeat(x, n)`: `n` elements, at least 8 bytes each with their offsets.
    ArrayRepeat,
}

const BOUNDED: [(&str, Growth); 4] = [
    ("repeat", Growth::Repeat),
    ("lpad", Growth::Pad),
    ("rpad", Growth::Pad),
    ("array_repeat", Growth::ArrayRepeat),
];

/// Replaces `ctx`'s output-multiplying functions with bounded ones.
pub(super) fn register(ctx: &SessionContext) {
    for (name, growth) in BOUNDED {
        if let Ok(inner) = ctx.udf(name) {
            ctx.register_udf(ScalarUDF::new_from_impl(Bounded { inner, growth }));
        }
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Bounded {
    inner: Arc<ScalarUDF>,
    growth: Growth,
}

/// One `i64` per row of `value` (integers as they are; strings as their byte lengths).
fn per_row(value: &ColumnarValue, rows: usize, lengths: bool) -> Result<Int64Array> {
    let array: ArrayRef = value.to_array(rows)?;
    let array = if lengths {
        arrow::compute::kernels::length::length(&array)?
    } else {
        array
    };
    let cast = arrow::compute::cast(&array, &DataType::Int64)?;
    cast.as_any()
        .downcast_ref::<Int64Array>()
        .cloned()
        .ok_or_else(|| DataFusionError::Internal("cast to Int64 gave another type".into()))
}

impl Bounded {
    fn check(&self, args: &ScalarFunctionArgs) -> Result<()> {
        let rows = args.number_rows.max(1);
        let (Some(first), Some(count)) = (args.args.first(), args.args.get(1)) else {
            return Ok(());
        };
        let counts = per_row(count, rows, false)?;
        let unit = match self.growth {
            Growth::Repeat => Some(per_row(first, rows, true)?),
            Growth::Pad | Growth::ArrayRepeat => None,
        };
        let mut total: i64 = 0;
        for row in 0..counts.len() {
            if counts.is_null(row) {
                continue;
            }
            let n = counts.value(row).max(0);
            let bytes = match (&unit, self.growth) {
                (Some(lengths), _) if lengths.is_null(row) => 0,
                (Some(lengths), _) => lengths.value(row).saturating_mul(n),
                (None, Growth::Pad) => n.saturating_mul(4),
                (None, _) => n.saturating_mul(8),
            };
            total = total.saturating_add(bytes);
            if bytes > MAX_VALUE_BYTES || total > MAX_CALL_BYTES {
                return Err(DataFusionError::ResourcesExhausted(format!(
                    "{}() would produce {} bytes; at most {MAX_VALUE_BYTES} per value and \
                     {MAX_CALL_BYTES} per call are allowed",
                    self.inner.name(),
                    bytes.max(total)
                )));
            }
        }
        Ok(())
    }
}

impl ScalarUDFImpl for Bounded {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }
    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        self.inner.inner().schema_name(args)
    }
    fn signature(&self) -> &Signature {
        self.inner.signature()
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.inner().return_type(arg_types)
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.inner.inner().return_field_from_args(args)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        self.check(&args)?;
        self.inner.inner().invoke_with_args(args)
    }
    fn simplify(&self, args: Vec<Expr>, info: &SimplifyContext) -> Result<ExprSimplifyResult> {
        self.inner.inner().simplify(args, info)
    }
    fn short_circuits(&self) -> bool {
        self.inner.inner().short_circuits()
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.inner().coerce_types(arg_types)
    }
    fn documentation(&self) -> Option<&Documentation> {
        self.inner.inner().documentation()
    }
}
