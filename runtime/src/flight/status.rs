//! The gRPC status of each error a call can meet: the codes clients rely on (NOT_FOUND,
//! ALREADY_EXISTS, INVALID_ARGUMENT for the client's bad data, …), never a server path.

use tonic::Status;

use crate::catalog::CatalogError;
use crate::engine::EngineError;
use crate::stage::StageError;
use crate::write::WriteError;

pub(super) fn engine(e: EngineError) -> Status {
    match e {
        EngineError::NotFound(t) => Status::not_found(format!("table {t} does not exist")),
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
        other => Status::internal(other.to_string()),
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
        CatalogError::Name(e) => Status::invalid_argument(e.to_string()),
        other => Status::internal(other.to_string()),
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
        WriteError::Plan(e) => super::sql::status(e),
        other => Status::internal(other.to_string()),
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
