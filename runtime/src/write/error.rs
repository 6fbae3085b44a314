//! What can stop a write. Each variant keeps its source; the Flight service maps them to gRPC
//! codes (`flight/status.rs`).

use crate::catalog::CatalogError;
use crate::engine::{EngineError, TableRef};
use crate::stage::{LoadError, StageError};

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The registry refused or failed (a table that exists, a namespace that does not, …).
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// The dataset's commit, or the rows streamed into it, failed.
    #[error(transparent)]
    Engine(Box<EngineError>),
    #[error("stage: {0}")]
    Stage(#[from] StageError),
    /// A stage file that cannot be loaded into the table.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// Rows that bring their own schema do not conform to the table's (see `conform::check`).
    #[error("the ingested rows do not match {table}: {}", problems.join("; "))]
    Mismatch {
        table: TableRef,
        problems: Vec<String>,
    },
    /// `DROP SCHEMA` without `CASCADE` of a schema holding tables.
    #[error(
        "schema {namespace} holds tables ({tables}): drop them, or DROP SCHEMA {namespace} CASCADE"
    )]
    SchemaNotEmpty {
        namespace: crate::catalog::NamespaceName,
        tables: String,
    },
    /// The SQL plan whose rows were to be written could not run.
    #[error(transparent)]
    Plan(datafusion::error::DataFusionError),
}

impl From<EngineError> for WriteError {
    fn from(e: EngineError) -> Self {
        Self::Engine(Box::new(e))
    }
}
