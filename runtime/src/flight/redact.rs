//! What a client is told never names the server's own paths: a local lake's absolute data
//! directory (it holds the stores, the stage and every table) becomes `<data>` in error messages
//! and in EXPLAIN output. Applied once, at the protocol boundary.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, LargeStringArray, RecordBatch, StringArray, StringViewArray};
use arrow::datatypes::DataType;
use tonic::Status;

#[derive(Debug, Clone, Default)]
pub(super) struct Redactor {
    /// The forms of the data directory a message may carry, longest first: its `file://` URL,
    /// its path, and its object-store path (no leading slash: EXPLAIN's `LanceRead:
    /// uri=srv/lake/s/t.lance/data`, Lance's not-found errors). Each becomes `<data>` where a
    /// path starts and ends, so that a name merely containing one stays.
    forms: Vec<String>,
}

impl Redactor {
    /// Hides `data_dir` in each of its forms.
    pub(super) fn for_data_dir(data_dir: &std::path::Path) -> Self {
        let dir = data_dir.display().to_string();
        let trimmed = dir.trim_end_matches('/');
        if trimmed.is_empty() {
            return Self::default();
        }
        let mut forms = vec![format!("file://{trimmed}"), trimmed.to_owned()];
        let object_path = trimmed.trim_start_matches('/');
        if !object_path.is_empty() && object_path != trimmed {
            forms.push(object_path.to_owned());
        }
        Self { forms }
    }

    pub(super) fn text(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for form in &self.forms {
            if out.contains(form.as_str()) {
                out = at_path_starts(&out, form, "<data>");
            }
        }
        out
    }

    pub(super) fn status(&self, status: Status) -> Status {
        if self.forms.is_empty() {
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
        if self.forms.is_empty() {
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

/// `text` with `path` replaced where it is a whole path component sequence: not preceded by a
/// character a path could continue from, and followed by `/` or a character no name holds.
fn at_path_starts(text: &str, path: &str, public: &str) -> String {
    let in_name = |c: char| c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '/');
    let mut out = String::with_capacity(text.len());
    let mut rest = 0;
    for (at, _) in text.match_indices(path) {
        if at < rest {
            continue;
        }
        let before = text[..at].chars().next_back();
        let after = text[at + path.len()..].chars().next();
        let starts = before.is_none_or(|c| !in_name(c));
        let ends = after.is_none_or(|c| c == '/' || !in_name(c));
        if starts && ends {
            out.push_str(&text[rest..at]);
            out.push_str(public);
            rest = at + path.len();
        }
    }
    out.push_str(&text[rest..]);
    out
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
            (
                "LanceRead: uri=srv/lake/s/t.lance/data, projection=[id]",
                "LanceRead: uri=<data>/s/t.lance/data, projection=[id]",
            ),
            (
                "Not found: srv/lake/s/t.lance/_versions/1.manifest",
                "Not found: <data>/s/t.lance/_versions/1.manifest",
            ),
            ("at 'srv/lake'", "at '<data>'"),
            // Not the directory: a longer name, or a path that only ends like it.
            ("srv/lakehouse/x", "srv/lakehouse/x"),
            ("xsrv/lake/a", "xsrv/lake/a"),
            ("/mnt/srv/lake/x", "/mnt/srv/lake/x"),
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
