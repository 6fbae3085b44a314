//! Regular expressions and LIKE patterns, compiled within the statement's budget.
//!
//! DataFusion's regular expression functions (and Arrow's kernel behind `~`) compile each
//! distinct pattern of a batch once and keep every compiled one until the batch is done: a
//! column of 8,192 distinct patterns of a few MB compiled each (`'(a{100}){100}' || value`)
//! asked for tens of GB and aborted the process, with no pool seeing any of it. So every
//! pattern is measured before its function compiles it ([`compile::held_by`]) and what it holds
//! reserved from the query's pool while the function runs. A call whose pattern (or flags) is a
//! column is split by pattern: the patterns are grouped so that a group's compiled expressions
//! fit a share of the budget ([`GROUP_BYTES`]), and the function runs once per group over that
//! group's rows. A pattern that alone would not fit is refused (RESOURCE_EXHAUSTED), and the
//! statement's deadline is checked between patterns and between groups.
//!
//! `~`, `~*`, `!~`, `!~*` and `SIMILAR TO` (which DataFusion runs as `~`) are DataFusion
//! operators, which no function wrapper sees: they become calls of [`RegexOperator`] (same
//! kernel, same name), counted like every function ([`operator_call`]). Before the plan is
//! optimized, a short literal pattern is left to DataFusion, which turns `~ '^abc'` into a
//! LIKE; it parses every literal pattern to do so, uncounted, so a longer one, or one only
//! known once folded (`~ repeat('\w', 100000)`), becomes the call at once. `regexp_replace`'s
//! `g` is no flag of the pattern: a key leaves it out, as DataFusion does before it compiles.
//!
//! A LIKE pattern with wildcards is compiled into a regular expression by Arrow, a row at a
//! time: its length is bounded instead ([`MAX_LIKE_PATTERN_BYTES`]), a literal's while the
//! statement is planned, any other's by [`LikePattern`] as it is evaluated.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, UInt32Array};
use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, Like, Operator, ReturnFieldArgs, ScalarFunctionArgs,
    ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use super::{Budget, MIB, compile, deadline};

/// The most compiled expressions one group of a call may hold, at most an eighth of the
/// query's budget.
const GROUP_BYTES: usize = 64 * MIB;

/// Where a regular expression function takes its pattern and its flags.
fn pattern_and_flags(function: &str) -> Option<(usize, Option<usize>)> {
    Some(match function {
        "regexp_like" | "regexp_match" => (1, Some(2)),
        "regexp_replace" | "regexp_count" => (1, Some(3)),
        "regexp_instr" => (1, Some(4)),
        // An operator's flag is part of the operator (see `RegexOperator::flags`).
        _ if RegexOperator::named(function).is_some() => (1, None),
        _ => return None,
    })
}

/// Whether `function` compiles a regular expression from its arguments.
pub(super) fn takes_pattern(function: &str) -> bool {
    pattern_and_flags(function).is_some()
}

/// `function` over `args`, once per group of its rows' patterns when its pattern is a column
/// (see the module's documentation); `call` runs the function.
pub(super) fn by_pattern(
    function: &str,
    args: ScalarFunctionArgs,
    budget: &Budget,
    call: impl Fn(ScalarFunctionArgs) -> Result<ColumnarValue>,
) -> Result<ColumnarValue> {
    let Some((pattern_at, flags_at)) = pattern_and_flags(function) else {
        return call(args);
    };
    let rows = args.number_rows;
    let patterns = texts(args.args.get(pattern_at), rows)?;
    let flags = texts(flags_at.and_then(|i| args.args.get(i)), rows)?;
    let operator_flags = RegexOperator::named(function).and_then(|op| op.flags());
    // One pattern for every row: held while the function compiles and searches with it.
    if let (Texts::Same(pattern), Texts::Same(flags)) = (&patterns, &flags) {
        let Some(pattern) = pattern else {
            return call(args);
        };
        let complete = compiled(function, pattern, flags.as_deref().or(operator_flags));
        let held = compiled_copies(function, &complete, budget)?;
        let _compiled = compile::reserve(function, "regular expressions", held, budget)?;
        return call(args);
    }

    // Each row's key: its pattern as compiled.
    let mut keys: HashMap<String, usize> = HashMap::new();
    let mut key_of_row = Vec::with_capacity(rows);
    let mut distinct = Vec::new();
    for row in 0..rows {
        let (Some(pattern), flags) = (patterns.at(row), flags.at(row).or(operator_flags)) else {
            key_of_row.push(None);
            continue;
        };
        let complete = compiled(function, pattern, flags);
        let next = keys.len();
        let key = *keys.entry(complete).or_insert_with_key(|complete| {
            distinct.push(complete.clone());
            next
        });
        key_of_row.push(Some(key));
    }
    let held = distinct
        .iter()
        .map(|complete| compiled_copies(function, complete, budget))
        .collect::<Result<Vec<_>>>()?;

    // Patterns in the order rows first name them, a group closed when the next would not fit.
    let share = (budget.limit() / 8).min(GROUP_BYTES);
    let mut group_of_key = Vec::with_capacity(held.len());
    let mut group_bytes = vec![0usize];
    for &bytes in &held {
        let last = group_bytes.len() - 1;
        if group_bytes[last] > 0 && group_bytes[last].saturating_add(bytes) > share {
            group_bytes.push(bytes);
        } else {
            group_bytes[last] = group_bytes[last].saturating_add(bytes);
        }
        group_of_key.push(group_bytes.len() - 1);
    }
    if group_bytes.len() == 1 {
        let _compiled = compile::reserve(function, "regular expressions", group_bytes[0], budget)?;
        return call(args);
    }

    // Each group's rows (rows without a pattern go with the first), called on their own, then
    // put back in their order.
    let group_of_row: Vec<usize> = key_of_row
        .iter()
        .map(|key| key.map_or(0, |k| group_of_key[k]))
        .collect();
    let mut members: Vec<Vec<u32>> = vec![Vec::new(); group_bytes.len()];
    let mut position = Vec::with_capacity(rows);
    for (row, &group) in group_of_row.iter().enumerate() {
        position.push((group, members[group].len()));
        members[group].push(u32::try_from(row).unwrap_or(u32::MAX));
    }
    let mut results: Vec<ArrayRef> = Vec::with_capacity(group_bytes.len());
    for (members, &bytes) in members.into_iter().zip(&group_bytes) {
        budget.deadline.check(function)?;
        let indices = UInt32Array::from(members);
        let sub_args = args
            .args
            .iter()
            .map(|a| match a {
                ColumnarValue::Array(a) => Ok(ColumnarValue::Array(arrow::compute::take(
                    a.as_ref(),
                    &indices,
                    None,
                )?)),
                scalar => Ok(scalar.clone()),
            })
            .collect::<Result<Vec<_>>>()?;
        let out = {
            let _compiled = compile::reserve(function, "regular expressions", bytes, budget)?;
            call(ScalarFunctionArgs {
                args: sub_args,
                arg_fields: args.arg_fields.clone(),
                number_rows: indices.len(),
                return_field: args.return_field.clone(),
                config_options: args.config_options.clone(),
            })?
        };
        results.push(out.to_array(indices.len())?);
    }
    let parts: Vec<&dyn Array> = results.iter().map(|a| a.as_ref()).collect();
    Ok(ColumnarValue::Array(arrow::compute::interleave(
        &parts, &position,
    )?))
}

/// What `function` holds compiling `pattern`: `regexp_replace` compiles a second expression,
/// the pattern without its `.*$`, when it extracts a group (`'^…(x)….*$'`, `'\1'`).
fn compiled_copies(function: &str, pattern: &str, budget: &Budget) -> Result<usize> {
    let held = compile::held_by(function, pattern, budget)?;
    let extracts = function == "regexp_replace" && pattern.ends_with(".*$");
    Ok(if extracts {
        held.saturating_mul(2)
    } else {
        held
    })
}

/// `pattern` as `function` compiles it with `flags`: the flags first, as the functions write
/// them. `regexp_replace`'s `g` (replace every match) is no flag of the pattern: DataFusion takes
/// it out before it compiles (measured with it, the pattern would not compile and count as
/// nothing but its caches).
fn compiled(function: &str, pattern: &str, flags: Option<&str>) -> String {
    let flags: String = flags
        .unwrap_or_default()
        .chars()
        .filter(|&c| !(c == 'g' && function == "regexp_replace"))
        .collect();
    if flags.is_empty() {
        pattern.to_owned()
    } else {
        format!("(?{flags}){pattern}")
    }
}

/// A text argument row by row.
enum Texts {
    Same(Option<String>),
    Each(ArrayRef),
}

impl Texts {
    fn at(&self, row: usize) -> Option<&str> {
        match self {
            Texts::Same(text) => text.as_deref(),
            Texts::Each(array) if array.is_null(row) => None,
            Texts::Each(array) => match array.data_type() {
                DataType::Utf8 => Some(array.as_string::<i32>().value(row)),
                DataType::LargeUtf8 => Some(array.as_string::<i64>().value(row)),
                DataType::Utf8View => Some(array.as_string_view().value(row)),
                _ => None,
            },
        }
    }
}

fn texts(value: Option<&ColumnarValue>, rows: usize) -> Result<Texts> {
    Ok(match value {
        None => Texts::Same(None),
        Some(ColumnarValue::Scalar(s)) => match s.cast_to(&DataType::Utf8)? {
            ScalarValue::Utf8(text) => Texts::Same(text),
            _ => Texts::Same(None),
        },
        Some(ColumnarValue::Array(a)) => {
            debug_assert_eq!(a.len(), rows);
            match a.data_type() {
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Texts::Each(a.clone()),
                _ => Texts::Each(arrow::compute::cast(a, &DataType::Utf8)?),
            }
        }
    })
}

/// `~`, `~*`, `!~` and `!~*` as a function call, evaluated by the kernel
/// DataFusion's operator uses, so that its patterns are compiled by group (see [`by_pattern`]).
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct RegexOperator {
    name: &'static str,
    negated: bool,
    insensitive: bool,
    signature: Signature,
}

/// Each operator's name (as it shows in a column's name), whether it negates, whether it
/// ignores case.
const OPERATORS: [(&str, bool, bool); 6] = [
    ("~", false, false),
    ("~*", false, true),
    ("!~", true, false),
    ("!~*", true, true),
    // DataFusion runs `SIMILAR TO` as the regular expression operator it names.
    ("SIMILAR TO", false, false),
    ("NOT SIMILAR TO", true, false),
];

impl RegexOperator {
    fn new(&(name, negated, insensitive): &(&'static str, bool, bool)) -> Self {
        Self {
            name,
            negated,
            insensitive,
            signature: Signature::any(2, Volatility::Immutable),
        }
    }

    fn named(name: &str) -> Option<Self> {
        OPERATORS
            .iter()
            .find(|(known, ..)| *known == name)
            .map(Self::new)
    }

    fn flags(&self) -> Option<&'static str> {
        self.insensitive.then_some("i")
    }
}

/// Whether `function` is one of the operators.
pub(super) fn is_operator(function: &str) -> bool {
    RegexOperator::named(function).is_some()
}

/// Every operator's function and the LIKE pattern's check, for a worker to decode by name.
pub(super) fn operators() -> impl Iterator<Item = Arc<ScalarUDF>> {
    OPERATORS
        .iter()
        .map(|operator| Arc::new(ScalarUDF::new_from_impl(RegexOperator::new(operator))))
        .chain([false, true].map(|i| Arc::new(ScalarUDF::new_from_impl(LikePattern::new(i)))))
}

/// `e` as a call of [`RegexOperator`] if it matches a regular expression: every one once the
/// plan is optimized (`every`); before, every one but those matching a column's values against
/// a short literal (left to DataFusion's simplifications, see the module's documentation).
pub(super) fn operator_call(
    e: &Expr,
    every: bool,
    budget: &Budget,
) -> Option<(Arc<ScalarUDF>, Vec<Expr>)> {
    let (name, left, right) = match e {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => match op {
            Operator::RegexMatch => ("~", left, right),
            Operator::RegexIMatch => ("~*", left, right),
            Operator::RegexNotMatch => ("!~", left, right),
            Operator::RegexNotIMatch => ("!~*", left, right),
            _ => return None,
        },
        // DataFusion has no simplification of its own for these.
        Expr::SimilarTo(Like {
            negated,
            expr,
            pattern,
            escape_char: None,
            case_insensitive: false,
        }) => (
            if *negated {
                "NOT SIMILAR TO"
            } else {
                "SIMILAR TO"
            },
            expr,
            pattern,
        ),
        _ => return None,
    };
    let operator = RegexOperator::named(name)?;
    // A constant on the left would be folded by DataFusion's own kernel, uncounted (and so may
    // a left side simplified into one: `CASE WHEN false THEN s ELSE 'b' END`, hence a pattern
    // left to DataFusion is one that holds little).
    let folded = left.column_refs().is_empty();
    if !every
        && matches!(e, Expr::BinaryExpr(_))
        && !folded
        && short_literal(right, operator.flags(), budget)
    {
        return None;
    }
    Some((
        Arc::new(ScalarUDF::new_from_impl(operator)),
        vec![left.as_ref().clone(), right.as_ref().clone()],
    ))
}

/// The longest literal pattern left to DataFusion's simplifications before the plan is
/// optimized, in what parsing it may hold (a few KB of pattern) …
const SIMPLIFIED_PARSE_BYTES: usize = 4 * MIB;
/// … and in what it holds compiled (DataFusion may fold it uncounted).
const SIMPLIFIED_HELD_BYTES: usize = 16 * MIB;

/// Whether `e` is a literal text (or NULL) small enough for DataFusion to parse and compile
/// uncounted, as the operator of `flags` compiles it.
fn short_literal(e: &Expr, flags: Option<&str>, budget: &Budget) -> bool {
    literal_text(e).is_some_and(|text| {
        text.is_none_or(|text| {
            // A pattern the budget cannot measure is left to the counted call, which refuses it.
            compile::parsing(text) <= SIMPLIFIED_PARSE_BYTES
                && compile::held_by("~", &compiled("~", text, flags), budget)
                    .is_ok_and(|held| held <= SIMPLIFIED_HELD_BYTES)
        })
    })
}

/// The text of `e` if it is a literal text or NULL (`Some(None)` for NULL).
fn literal_text(e: &Expr) -> Option<Option<&str>> {
    match e {
        Expr::Literal(
            ScalarValue::Utf8(text) | ScalarValue::LargeUtf8(text) | ScalarValue::Utf8View(text),
            _,
        ) => Some(text.as_deref()),
        Expr::Literal(ScalarValue::Null, _) => Some(None),
        _ => None,
    }
}

/// The longest LIKE (or ILIKE) pattern compiled, in bytes: Arrow compiles one with wildcards
/// into a regular expression, measured to hold up to 310 bytes per byte of it while parsed
/// (about 20 MB here), uncounted.
pub(super) const MAX_LIKE_PATTERN_BYTES: usize = 64 * 1024;

/// What compiling a byte of a LIKE pattern into a regular expression takes, in the steps of
/// [`deadline::MAX_STEPS`] (about a nanosecond each): measured 400 to 450 ns.
const COMPILE_STEPS_PER_BYTE: i64 = 1000;

/// `e` with its LIKE pattern bounded: a literal's checked now, any other's checked by
/// [`LikePattern`] as it is evaluated (a pattern already wrapped is left as it is).
pub(super) fn bounded_like(e: Expr, budget: &Budget) -> Result<Transformed<Expr>> {
    let Expr::Like(mut like) = e else {
        return Ok(Transformed::no(e));
    };
    if let Some(text) = literal_text(&like.pattern) {
        check_like(text, like.case_insensitive)?;
        return Ok(Transformed::no(Expr::Like(like)));
    }
    match like.pattern.as_ref() {
        Expr::Literal(..) => Ok(Transformed::no(Expr::Like(like))),
        Expr::ScalarFunction(f) if is_like_pattern(&f.func) => {
            Ok(Transformed::no(Expr::Like(like)))
        }
        _ => {
            let guard = LikePattern::new(like.case_insensitive);
            let pattern = std::mem::replace(
                like.pattern.as_mut(),
                Expr::Literal(ScalarValue::Null, None),
            );
            *like.pattern = Expr::ScalarFunction(ScalarFunction::new_udf(
                Arc::new(super::counted(
                    Arc::new(ScalarUDF::new_from_impl(guard)),
                    budget,
                )),
                vec![pattern],
            ));
            Ok(Transformed::yes(Expr::Like(like)))
        }
    }
}

/// Whether `f` is [`LikePattern`].
pub(super) fn is_like_pattern(f: &ScalarUDF) -> bool {
    [LikePattern::NAME, LikePattern::INSENSITIVE].contains(&f.name())
}

/// Refuses a LIKE `pattern` longer than [`MAX_LIKE_PATTERN_BYTES`] that Arrow compiles into a
/// regular expression (INVALID_ARGUMENT).
fn check_like(pattern: Option<&str>, case_insensitive: bool) -> Result<()> {
    let Some(pattern) = pattern else {
        return Ok(());
    };
    if pattern.len() > MAX_LIKE_PATTERN_BYTES && compiled_like(pattern, case_insensitive) {
        return Err(DataFusionError::External(Box::new(
            tonic::Status::invalid_argument(format!(
                "LIKE: a pattern of {} bytes; at most {MAX_LIKE_PATTERN_BYTES} bytes are \
                 compiled",
                pattern.len()
            )),
        )));
    }
    Ok(())
}

/// Whether Arrow compiles `pattern` into a regular expression: for LIKE, one with a wildcard
/// other than a `%` at either end (the others are equality, prefix, suffix and substring
/// tests); for ILIKE, any (which it does for text that is not ASCII).
fn compiled_like(pattern: &str, case_insensitive: bool) -> bool {
    let wildcard = |p: &str| p.contains(['%', '_', '\\']);
    if case_insensitive {
        return true;
    }
    let inner = pattern.strip_prefix('%').unwrap_or(pattern);
    let inner = inner.strip_suffix('%').unwrap_or(inner);
    wildcard(inner)
}

/// A LIKE pattern as it is: refused if Arrow would compile it and it is longer than
/// [`MAX_LIKE_PATTERN_BYTES`].
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct LikePattern {
    /// Whether the pattern is an ILIKE's.
    case_insensitive: bool,
    signature: Signature,
}

impl LikePattern {
    const NAME: &'static str = "like_pattern";
    const INSENSITIVE: &'static str = "ilike_pattern";

    fn new(case_insensitive: bool) -> Self {
        Self {
            case_insensitive,
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for LikePattern {
    fn name(&self) -> &str {
        if self.case_insensitive {
            Self::INSENSITIVE
        } else {
            Self::NAME
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    /// The pattern's own name: the LIKE's column is named as it was.
    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        Ok(one(args)?.schema_name().to_string())
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        one(arg_types).cloned()
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        one(args.arg_fields).cloned()
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let pattern = one(&args.args)?.clone();
        let rows = match &pattern {
            ColumnarValue::Scalar(_) => 1,
            ColumnarValue::Array(a) => a.len(),
        };
        let patterns = texts(Some(&pattern), rows)?;
        // Arrow compiles a row's pattern unless it is the previous row's: what that takes, as
        // no deadline stops the kernel once it runs.
        let (mut compiled, mut previous) = (0usize, None);
        for row in 0..rows {
            let pattern = patterns.at(row);
            check_like(pattern, self.case_insensitive)?;
            if let Some(pattern) = pattern {
                if previous != Some(pattern) && compiled_like(pattern, self.case_insensitive) {
                    compiled = compiled.saturating_add(pattern.len());
                }
                previous = Some(pattern);
            }
        }
        let steps = i64::try_from(compiled)
            .unwrap_or(i64::MAX)
            .saturating_mul(COMPILE_STEPS_PER_BYTE);
        if steps > deadline::MAX_STEPS {
            return Err(DataFusionError::ResourcesExhausted(format!(
                "LIKE would compile {compiled} bytes of patterns into regular expressions for \
                 one batch (about {steps} steps); at most {} steps per call are allowed",
                deadline::MAX_STEPS
            )));
        }
        Ok(pattern)
    }
}

/// A LIKE pattern check's one argument.
fn one<T>(items: &[T]) -> Result<&T> {
    match items {
        [one] => Ok(one),
        _ => Err(DataFusionError::Internal(format!(
            "a LIKE pattern's check takes one argument, given {}",
            items.len()
        ))),
    }
}

fn two<T>(items: &[T]) -> Result<(&T, &T)> {
    super::operands("a regular expression operator", items)
}

impl ScalarUDFImpl for RegexOperator {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    /// The name the operator gave its column (`a ~ b`).
    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        let (left, right) = two(args)?;
        Ok(format!(
            "{} {} {}",
            left.schema_name(),
            self.name,
            right.schema_name()
        ))
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    /// NULL only where an operand may be, as the operator's.
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let (left, right) = two(args.arg_fields)?;
        Ok(Arc::new(Field::new(
            self.name,
            DataType::Boolean,
            left.is_nullable() || right.is_nullable(),
        )))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let (left, right) = two(&args.args)?;
        // Two constants make one value, not one per row.
        let scalar = matches!(
            (left, right),
            (ColumnarValue::Scalar(_), ColumnarValue::Scalar(_))
        );
        let rows = if scalar { 1 } else { args.number_rows };
        let left = left.to_array(rows)?;
        let text = |other: &DataType| {
            DataFusionError::Plan(format!("{} takes text, not {other}", self.name))
        };
        let matched: BooleanArray = match right {
            // One pattern, compiled once (not copied into every row).
            ColumnarValue::Scalar(pattern) => {
                let ScalarValue::Utf8(Some(pattern)) = pattern.cast_to(&DataType::Utf8)? else {
                    if scalar {
                        return Ok(ColumnarValue::Scalar(ScalarValue::Boolean(None)));
                    }
                    let nulls = arrow::array::new_null_array(&DataType::Boolean, rows);
                    return Ok(ColumnarValue::Array(nulls));
                };
                let flags = self.flags();
                match left.data_type() {
                    DataType::Utf8 => arrow::compute::regexp_is_match_scalar(
                        left.as_string::<i32>(),
                        &pattern,
                        flags,
                    )?,
                    DataType::LargeUtf8 => arrow::compute::regexp_is_match_scalar(
                        left.as_string::<i64>(),
                        &pattern,
                        flags,
                    )?,
                    DataType::Utf8View => arrow::compute::regexp_is_match_scalar(
                        left.as_string_view(),
                        &pattern,
                        flags,
                    )?,
                    other => return Err(text(other)),
                }
            }
            ColumnarValue::Array(right) => {
                // Type coercion made the operands one type; a pattern of another is made the
                // text's.
                let right = if right.data_type() == left.data_type() {
                    right.clone()
                } else {
                    arrow::compute::cast(right, left.data_type())?
                };
                let flags = self.flags().map(|f| vec![Some(f); rows]);
                match left.data_type() {
                    DataType::Utf8 => arrow::compute::regexp_is_match(
                        left.as_string::<i32>(),
                        right.as_string::<i32>(),
                        flags.map(arrow::array::StringArray::from).as_ref(),
                    )?,
                    DataType::LargeUtf8 => arrow::compute::regexp_is_match(
                        left.as_string::<i64>(),
                        right.as_string::<i64>(),
                        flags.map(arrow::array::LargeStringArray::from).as_ref(),
                    )?,
                    DataType::Utf8View => arrow::compute::regexp_is_match(
                        left.as_string_view(),
                        right.as_string_view(),
                        flags.map(arrow::array::StringViewArray::from).as_ref(),
                    )?,
                    other => return Err(text(other)),
                }
            }
        };
        let matched = if self.negated {
            arrow::compute::not(&matched)?
        } else {
            matched
        };
        if scalar {
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(
                &matched, 0,
            )?));
        }
        Ok(ColumnarValue::Array(Arc::new(matched)))
    }
}

#[cfg(test)]
mod tests {
    use datafusion::execution::SessionStateBuilder;
    use datafusion::execution::memory_pool::GreedyMemoryPool;
    use datafusion::prelude::SessionContext;

    use super::super::testing::{counted, run};
    use super::*;

    fn lake(pool_bytes: usize) -> SessionContext {
        counted(
            SessionStateBuilder::new().with_default_features(),
            Arc::new(GreedyMemoryPool::new(pool_bytes)),
        )
    }

    /// Rows whose patterns (and flags) vary, some NULL.
    const ROWS: &str = "(SELECT value, CAST(value AS VARCHAR) || 'Ab' AS s, \
         CASE WHEN value % 5 = 0 THEN NULL ELSE '^' || CAST(value % 7 AS VARCHAR) || '.*b' END AS p, \
         CASE WHEN value % 3 = 0 THEN 'i' ELSE 's' END AS f FROM generate_series(1, 60))";

    /// Split into groups of two patterns or so (a 64 MiB budget), each function and operator
    /// gives what DataFusion gives in one call: the same values, in the same rows, under the
    /// same names.
    #[tokio::test]
    async fn grouped_patterns_keep_their_results_and_names() {
        let lake = lake(64 << 20);
        let plain = SessionContext::new();
        for call in [
            "regexp_like(s, p)",
            "regexp_like(s, p, f)",
            "regexp_match(s, '(' || p || ')')",
            "regexp_replace(s, p, 'x')",
            "regexp_replace(s, p, 'x', f)",
            "regexp_count(s, p)",
            "regexp_count(s, p, 1, f)",
            "regexp_instr(s, p)",
            "s ~ p",
            "s ~* p",
            "s !~ p",
            "s !~* p",
            "s ~ '^1'",
            "arrow_cast(s, 'Utf8') SIMILAR TO arrow_cast(p, 'Utf8')",
            "arrow_cast(s, 'Utf8') NOT SIMILAR TO arrow_cast(p, 'Utf8')",
            "s ~ (p || CAST(random() > 2 AS VARCHAR))",
            "regexp_replace(s, p, 'x', 'g')",
            "regexp_replace(s, p, 'x', 'gi')",
        ] {
            let sql = format!("SELECT value, {call} FROM {ROWS} ORDER BY value");
            let want = run(&plain, &sql).await;
            assert!(!want.starts_with("error"), "{sql}: {want}");
            assert_eq!(run(&lake, &sql).await, want, "{sql}");
        }
    }

    /// A row's pattern is measured as its function compiles it: `regexp_replace`'s `g` left
    /// out, other flags in front.
    #[test]
    fn patterns_are_measured_as_compiled() {
        assert_eq!(compiled("regexp_replace", "a+", Some("g")), "a+");
        assert_eq!(compiled("regexp_replace", "a+", Some("gi")), "(?i)a+");
        assert_eq!(compiled("regexp_like", "a+", Some("i")), "(?i)a+");
        assert_eq!(compiled("regexp_like", "a+", None), "a+");
        // Measured with its `g`, a pattern of a few MB counted as what parsing it held alone.
        let budget = super::super::testing::budget(1 << 30);
        let pattern = "(a{100}){100}";
        let with_g = compile::held_by("regexp_replace", &format!("(?g){pattern}"), &budget);
        let without = compile::held_by(
            "regexp_replace",
            &compiled("regexp_replace", pattern, Some("g")),
            &budget,
        );
        assert!(with_g.unwrap() < 8 * MIB);
        assert!(without.unwrap() > 8 * MIB);
    }

    /// `regexp_replace` extracting a group compiles the pattern twice (the second without its
    /// `.*$`): counted twice.
    #[test]
    fn an_extracting_replace_counts_its_second_expression() {
        let budget = super::super::testing::budget(1 << 30);
        let pattern = "^a{1000}(b).*$";
        let once = compile::held_by("regexp_like", pattern, &budget).unwrap();
        assert_eq!(
            compiled_copies("regexp_like", pattern, &budget).unwrap(),
            once
        );
        assert_eq!(
            compiled_copies("regexp_replace", pattern, &budget).unwrap(),
            2 * once
        );
    }

    /// A pattern that alone holds more than the query may is refused before it is compiled
    /// for the search (its measure is all that was built), and names the limit.
    #[tokio::test]
    async fn a_pattern_larger_than_the_budget_is_refused() {
        let lake = lake(4 << 20);
        let refused = run(
            &lake,
            "SELECT regexp_like(s, '(a{100}){100}' || s) FROM \
             (SELECT CAST(value AS VARCHAR) AS s FROM generate_series(1, 3))",
        )
        .await;
        assert!(
            refused.contains("Resources exhausted")
                && refused.contains("LAKE_QUERY_MEMORY_LIMIT_MB"),
            "{refused}"
        );
    }
}
