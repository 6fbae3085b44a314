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
    /// `array_repeat(x, n)`: `n` copies of `x`.
    ArrayRepeat,
    /// `array_resize(a, n [, fill])`: `n` elements of `fill`.
    ArrayResize,
    /// `replace(s, from, to)`: every position of `s` may become `to`.
    Replace,
    /// `regexp_replace(s, pattern, replacement …)`: every position may become the replacement
    /// (and its group references copy parts of what matched).
    RegexpReplace,
}

const BOUNDED: [(&str, Growth); 7] = [
    ("repeat", Growth::Repeat),
    ("lpad", Growth::Pad),
    ("rpad", Growth::Pad),
    ("array_repeat", Growth::ArrayRepeat),
    ("array_resize", Growth::ArrayResize),
    ("replace", Growth::Replace),
    ("regexp_replace", Growth::RegexpReplace),
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

/// One value per row, without materialising a scalar once per row (a 200 MB scalar copied
/// for 8,192 rows was itself the allocation that aborted).
enum PerRow {
    Same(Option<i64>),
    Each(Int64Array),
}

impl PerRow {
    fn at(&self, row: usize) -> Option<i64> {
        match self {
            PerRow::Same(v) => *v,
            PerRow::Each(a) => (row < a.len() && !a.is_null(row)).then(|| a.value(row)),
        }
    }
}

fn to_i64(array: &ArrayRef) -> Result<Int64Array> {
    let cast = arrow::compute::cast(array, &DataType::Int64)?;
    cast.as_any()
        .downcast_ref::<Int64Array>()
        .cloned()
        .ok_or_else(|| DataFusionError::Internal("cast to Int64 gave another type".into()))
}

/// Integers as they are.
fn ints(value: &ColumnarValue) -> Result<PerRow> {
    Ok(match value {
        ColumnarValue::Scalar(s) => PerRow::Same(match s.cast_to(&DataType::Int64)? {
            datafusion::common::ScalarValue::Int64(v) => v,
            _ => None,
        }),
        ColumnarValue::Array(a) => PerRow::Each(to_i64(a)?),
    })
}

/// The byte length of each string (or of anything else: its memory, an upper bound).
fn sizes(value: &ColumnarValue) -> Result<PerRow> {
    use datafusion::common::ScalarValue as S;
    Ok(match value {
        ColumnarValue::Scalar(S::Utf8(v) | S::LargeUtf8(v) | S::Utf8View(v)) => {
            PerRow::Same(v.as_ref().map(|s| s.len() as i64))
        }
        ColumnarValue::Scalar(s) => PerRow::Same(Some(s.size() as i64)),
        ColumnarValue::Array(a) => match a.data_type() {
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                PerRow::Each(to_i64(&arrow::compute::kernels::length::length(a)?)?)
            }
            // Any row's element is at most the whole array.
            _ => PerRow::Same(Some(a.get_array_memory_size() as i64)),
        },
    })
}

impl Bounded {
    /// The bytes row `row` would produce.
    fn bytes(&self, args: &[PerRow], row: usize) -> i64 {
        let at = |i: usize| args.get(i).and_then(|a| a.at(row)).unwrap_or(0).max(0);
        match self.growth {
            Growth::Repeat => at(0).saturating_mul(at(1)),
            Growth::Pad => at(1).saturating_mul(4),
            Growth::ArrayRepeat => at(1).saturating_mul(at(0).max(8)),
            Growth::ArrayResize => at(1).saturating_mul(at(2).max(8)),
            Growth::Replace => (at(0) + 1).saturating_mul(at(2).max(1)),
            // Group references copy parts of the matched text, whose total is at most `s`:
            // at most `(len(s) + 1) × len(replacement)` for the literals, as much again for
            // the references.
            Growth::RegexpReplace => (at(0) + 1).saturating_mul(at(2).max(1)).saturating_mul(2),
        }
    }

    fn per_row(&self, args: &ScalarFunctionArgs) -> Result<Vec<PerRow>> {
        let arg = |i: usize| args.args.get(i);
        let size_of = |i: usize| arg(i).map(sizes).transpose();
        let int_of = |i: usize| arg(i).map(ints).transpose();
        let none = || PerRow::Same(None);
        Ok(match self.growth {
            Growth::Repeat | Growth::ArrayRepeat => {
                vec![
                    size_of(0)?.unwrap_or_else(none),
                    int_of(1)?.unwrap_or_else(none),
                ]
            }
            Growth::Pad => vec![none(), int_of(1)?.unwrap_or_else(none)],
            Growth::ArrayResize => vec![
                none(),
                int_of(1)?.unwrap_or_else(none),
                size_of(2)?.unwrap_or(PerRow::Same(Some(8))),
            ],
            Growth::Replace | Growth::RegexpReplace => vec![
                size_of(0)?.unwrap_or_else(none),
                none(),
                size_of(2)?.unwrap_or_else(none),
            ],
        })
    }

    fn check(&self, args: &ScalarFunctionArgs) -> Result<()> {
        let per_row = self.per_row(args)?;
        let mut total: i64 = 0;
        for row in 0..args.number_rows.max(1) {
            let bytes = self.bytes(&per_row, row);
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
