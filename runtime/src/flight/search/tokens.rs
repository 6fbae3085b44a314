//! `contains_tokens(col, 'words')`: Lance's function (its name is what lets Lance answer it
//! from an inverted index), taking its words only as a string literal — Lance's reads the
//! first row's words for every row — and at most [`MAX_WORDS`] of them (each row costs words ×
//! the text's words).

use arrow::datatypes::DataType;
use datafusion::common::{ScalarValue, exec_err};
use datafusion::error::Result;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};

const MAX_WORDS: usize = 64;

/// The function lake registers.
pub(in crate::flight) fn contains_tokens() -> ScalarUDF {
    ScalarUDF::new_from_impl(ContainsTokens {
        inner: lance_datafusion::udf::CONTAINS_TOKENS_UDF.clone(),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ContainsTokens {
    inner: ScalarUDF,
}

impl ScalarUDFImpl for ContainsTokens {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        match args.args.get(1) {
            Some(ColumnarValue::Scalar(
                ScalarValue::Utf8(Some(words))
                | ScalarValue::LargeUtf8(Some(words))
                | ScalarValue::Utf8View(Some(words)),
            )) => {
                if words.split_whitespace().count() > MAX_WORDS {
                    return exec_err!("contains_tokens takes at most {MAX_WORDS} words");
                }
            }
            _ => {
                return exec_err!(
                    "contains_tokens(column, 'words'): the words are a string literal"
                );
            }
        }
        self.inner.invoke_with_args(args)
    }
}
