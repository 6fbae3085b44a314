//! What a client is told never names the server's own paths: a local lake's absolute data
//! directory (it holds the stores, the stage and every table) becomes `<data>` in error messages
//! and in EXPLAIN output. Applied once, at the protocol boundary.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, LargeStringArray, RecordBatch, StringArray, StringViewArray};
use arrow::datatypes::DataType;
use tonic::Status;

#[derive(Debug, Clone, Default)]
pub(super) struct Redactor {
    /// (private text, what clients see instead), longest first.
    pairs: Vec<(String, &'static str)>,
}

impl Redactor {
    /// Hides `data_dir` (and its `file://` form).
    pub(super) fn for_data_dir(data_dir: &std::path::Path) -> Self {
        let dir = data_dir.display().to_string();
        let trimmed = dir.trim_end_matches('/').to_owned();
        if trimmed.is_empty() {
            return Self::default();
        }
        Self {
            pairs: vec![(format!("file://{trimmed}"), "<data>"), (trimmed, "<data>")],
        }
    }

    pub(super) fn text(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for (private, public) in &self.pairs {
            if out.contains(private.as_str()) {
                out = out.replace(private.as_str(), public);
            }
        }
        out
    }

    pub(super) fn status(&self, status: Status) -> Status {
        if self.pairs.is_empty() {
            return status;
        }
        let message = self.text(status.message());
        if message == status.message() {
            return status;
        }
        Status::new(status.code(), message)
    }

    /// Every string column of `batch` (EXPLAIN's plan text), redacted.
    pub(super) fn batch(&self, batch: RecordBatch) -> RecordBatch {
        if self.pairs.is_empty() {
            return batch;
        }
        let columns: Vec<ArrayRef> = batch
            .columns()
            .iter()
            .map(|c| match c.data_type() {
                DataType::Utf8 => {
                    let a = c.as_any().downcast_ref::<StringArray>();
                    a.map_or(c.clone(), |a| {
                        Arc::new(
                            a.iter()
                                .map(|v| v.map(|s| self.text(s)))
                                .collect::<StringArray>(),
                        )
                    })
                }
                DataType::LargeUtf8 => {
                    let a = c.as_any().downcast_ref::<LargeStringArray>();
                    a.map_or(c.clone(), |a| {
                        Arc::new(
                            a.iter()
                                .map(|v| v.map(|s| self.text(s)))
                                .collect::<LargeStringArray>(),
                        )
                    })
                }
                DataType::Utf8View => {
                    let a = c.as_any().downcast_ref::<StringViewArray>();
                    a.map_or(c.clone(), |a| {
                        Arc::new(
                            a.iter()
                                .map(|v| v.map(|s| self.text(s)))
                                .collect::<StringViewArray>(),
                        )
                    })
                }
                _ => c.clone(),
            })
            .collect();
        RecordBatch::try_new(batch.schema(), columns).unwrap_or(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_data_directory_never_reaches_a_client() {
        let r = Redactor::for_data_dir(std::path::Path::new("/srv/lake/"));
        for (text, want) in [
            (
                "cannot open /srv/lake/sales/t.lance",
                "cannot open <data>/sales/t.lance",
            ),
            ("uri=file:///srv/lake/_lake/x", "uri=<data>/_lake/x"),
            ("nothing private", "nothing private"),
        ] {
            assert_eq!(r.text(text), want);
        }
        let s = r.status(Status::not_found("no /srv/lake/a"));
        assert_eq!(
            (s.code(), s.message()),
            (tonic::Code::NotFound, "no <data>/a")
        );
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("plan", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![Arc::new(StringArray::from(vec![
                Some("scan /srv/lake/t"),
                None,
            ]))],
        )
        .unwrap();
        let out = r.batch(batch);
        let col = out
            .column(0)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!(col.value(0), "scan <data>/t");
        assert!(col.is_null(1));
    }
}
