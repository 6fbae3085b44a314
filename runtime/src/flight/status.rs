//! The gRPC status of each error a call can meet: the codes clients rely on (NOT_FOUND,
//! ALREADY_EXISTS, INVALID_ARGUMENT for the client's bad data, …), never a server path.

use tonic::Status;

use crate::catalog::CatalogError;
use crate::engine::EngineError;
use crate::stage::StageError;
use crate::write::WriteError;

/// The memory refusal somewhere in `e`'s sources (a function over the statement's budget while
/// Lance scans), if any.
fn exhausted(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next = Some(e);
    while let Some(error) = next {
        if let Some(datafusion::error::DataFusionError::ResourcesExhausted(message)) =
            error.downcast_ref::<datafusion::error::DataFusionError>()
        {
            return Some(message.clone());
        }
        next = error.source();
    }
    // Lance keeps a DataFusion error of its scans as text only.
    const EXHAUSTED: &str = "Resources exhausted: ";
    let text = e.to_string();
    let at = text.find(EXHAUSTED)?;
    Some(without_locations(&text[at + EXHAUSTED.len()..]))
}

/// `text` without the source locations Lance appends to its errors (`…, /root/.cargo/registry/
/// …/compression.rs:544:30`: paths of the build machine, nothing a client can act on).
fn without_locations(text: &str) -> String {
    text.split(", ")
        .filter(|piece| !is_location(piece))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `path/to/file.rs:LINE[:COLUMN]`, a path without spaces.
fn is_location(piece: &str) -> bool {
    let Some((path, position)) = piece.rsplit_once(".rs:") else {
        return false;
    };
    path.contains('/')
        && !path.contains(char::is_whitespace)
        && position
            .split(':')
            .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// An internal error's text for the client, without the build machine's source locations.
fn internal(e: impl std::fmt::Display) -> Status {
    Status::internal(without_locations(&e.to_string()))
}

pub(super) fn engine(e: EngineError) -> Status {
    if let Some(message) = exhausted(&e) {
        return Status::resource_exhausted(message);
    }
    // Another commit to the table won (a maintenance pass, another writer) past Lance's
    // retries: nothing was written, and the same statement may succeed when sent again.
    if crate::engine::is_conflict(&e) {
        return Status::aborted(format!(
            "{e}; another commit to the table came first and nothing was written: try again"
        ));
    }
    match e {
        EngineError::Deadline { .. } => Status::deadline_exceeded(e.to_string()),
        // Held by a maintenance pass for now: the same statement succeeds later.
        EngineError::Busy { .. } => Status::unavailable(e.to_string()),
        // Its text names the lease's row, which for a local lake holds a server path.
        EngineError::Lease { table, source } => {
            tracing::error!(%table, error = %source, "a table's lease could not be taken or kept");
            Status::internal(format!(
                "table {table}: its lease could not be taken or kept (the metadata log says why)"
            ))
        }
        EngineError::NotFound(t) => Status::not_found(format!("table {t} does not exist")),
        e @ (EngineError::NoSuchVersion { .. } | EngineError::NoSuchIndex { .. }) => {
            Status::not_found(e.to_string())
        }
        e @ EngineError::IndexExists { .. } => Status::already_exists(e.to_string()),
        e @ (EngineError::InvalidIndex { .. } | EngineError::Encoding { .. }) => {
            Status::invalid_argument(e.to_string())
        }
        EngineError::AlreadyExists(t) => {
            Status::already_exists(format!("table {t} already exists"))
        }
        // A refusal that stopped the rows (a client gone quiet, an ingress limit) keeps its
        // code; anything else is the client's bad data.
        EngineError::Rows(e) => match e.as_ref() {
            datafusion::error::DataFusionError::External(inner) => {
                match inner.downcast_ref::<Status>() {
                    Some(status) => Status::new(
                        status.code(),
                        format!("the rows could not be written: {}", status.message()),
                    ),
                    None => Status::invalid_argument(format!("the rows could not be written: {e}")),
                }
            }
            _ => Status::invalid_argument(format!("the rows could not be written: {e}")),
        },
        other => internal(other),
    }
}

pub(super) fn catalog(e: CatalogError) -> Status {
    match e {
        CatalogError::NoSuchTable(ns, t) => {
            Status::not_found(format!("table {ns}.{t} does not exist"))
        }
        CatalogError::NoSuchNamespace(ns) => {
            Status::not_found(format!("schema {ns} does not exist"))
        }
        CatalogError::TableExists(ns, t) => {
            Status::already_exists(format!("table {ns}.{t} already exists"))
        }
        CatalogError::NamespaceExists(ns) => {
            Status::already_exists(format!("schema {ns} already exists"))
        }
        // Retryable: the drop may fail (a table in it) and the schema stay.
        CatalogError::NamespaceBeingDropped(ns) => Status::aborted(format!(
            "schema {ns} is being dropped by another statement; try again"
        )),
        CatalogError::Name(e) => Status::invalid_argument(e.to_string()),
        other => internal(other),
    }
}

pub(super) fn write(e: WriteError) -> Status {
    match e {
        WriteError::Catalog(e) => catalog(e),
        WriteError::Engine(e) => engine(*e),
        WriteError::Stage(StageError::NotFound(path)) => {
            Status::not_found(format!("nothing in the stage at {path:?}"))
        }
        WriteError::Load(e) => Status::invalid_argument(e.to_string()),
        e @ WriteError::Mismatch { .. } => Status::invalid_argument(e.to_string()),
        e @ WriteError::SchemaNotEmpty { .. } => Status::failed_precondition(e.to_string()),
        WriteError::Plan(e) => super::sql::status(e),
        other => internal(other),
    }
}

/// A refusal from the transport or the ingress check keeps its code; anything else is the
/// client's bad data.
pub(super) fn decode(what: &str, e: arrow_flight::error::FlightError) -> Status {
    match e {
        arrow_flight::error::FlightError::Tonic(status) => *status,
        other => Status::invalid_argument(format!("{what}: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{NamespaceName, TableName};
    use crate::engine::TableRef;

    fn table() -> TableRef {
        TableRef::new(
            NamespaceName::parse("s").unwrap(),
            TableName::parse("t").unwrap(),
        )
    }

    /// A commit that lost to another past Lance's retries is ABORTED (send it again), not an
    /// internal error.
    #[test]
    fn a_lost_commit_is_aborted_and_says_to_try_again() {
        let lost = EngineError::Lance {
            operation: "create an index on",
            table: table(),
            source: lance::Error::commit_conflict_source(7, "a compaction came first".into()),
        };
        let status = engine(lost);
        assert_eq!(status.code(), tonic::Code::Aborted, "{status:?}");
        assert!(status.message().contains("try again"), "{status:?}");
    }

    /// Lance's errors end with the source location that raised them, a path on the machine
    /// that built the server: a client is told the error without it.
    #[test]
    fn an_internal_error_names_no_source_location() {
        let failed = EngineError::Lance {
            operation: "create",
            table: table(),
            source: lance::Error::invalid_input("Unknown compression scheme: bogus, zstd, lz4"),
        };
        assert!(failed.to_string().contains(".rs:"), "{failed}");
        let status = engine(failed);
        assert_eq!(status.code(), tonic::Code::Internal, "{status:?}");
        assert!(!status.message().contains(".rs:"), "{status:?}");
        assert!(
            status
                .message()
                .ends_with("Unknown compression scheme: bogus, zstd, lz4"),
            "{status:?}"
        );
        assert!(!is_location("see docs/x.rs: 12"));
        assert!(is_location(
            "/home/u/.cargo/registry/src/lance-14/src/a.rs:12:5"
        ));
    }

    /// A create or drop refused because another drop holds the schema's mark may succeed when
    /// sent again (that drop may fail): ABORTED, not NOT_FOUND.
    #[test]
    fn a_schema_being_dropped_is_aborted() {
        let ns = NamespaceName::parse("s").unwrap();
        let status = catalog(CatalogError::NamespaceBeingDropped(ns));
        assert_eq!(status.code(), tonic::Code::Aborted, "{status:?}");
        assert!(status.message().contains("try again"), "{status:?}");
    }
}
