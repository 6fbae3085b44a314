//! Reads at a version another process pinned: what a distributed query's workers do.
//!
//! The process that plans a distributed statement resolves each table's version through the
//! manifest store (the last finished one: its manifest is at the path Lance's naming gives it
//! under the table); its workers read exactly that version. So a worker needs no manifest
//! store, only the warehouse, and can never be asked which version is latest or to commit:
//! both are refused here, so a worker's engine cannot write a manifest whatever it is sent.

use lance::io::ObjectStore;
use lance_table::format::{IndexMetadata, Manifest, Transaction};
use lance_table::io::commit::{
    CommitError, CommitHandler, ManifestLocation, ManifestNamingScheme, ManifestWriter,
};
use object_store::path::Path;

/// A commit handler that resolves only a given version, by Lance's own naming.
#[derive(Debug, Default)]
pub(super) struct PinnedReads;

fn refused(what: &str) -> lance::Error {
    lance::Error::not_supported(format!(
        "{what}: a distributed query's worker reads only the version its statement pinned"
    ))
}

#[async_trait::async_trait]
impl CommitHandler for PinnedReads {
    async fn resolve_latest_location(
        &self,
        _base_path: &Path,
        _object_store: &ObjectStore,
    ) -> lance::Result<ManifestLocation> {
        Err(refused("resolving the latest version"))
    }

    async fn commit(
        &self,
        _manifest: &mut Manifest,
        _indices: Option<Vec<IndexMetadata>>,
        _base_path: &Path,
        _object_store: &ObjectStore,
        _manifest_writer: ManifestWriter,
        _naming_scheme: ManifestNamingScheme,
        _transaction: Option<Transaction>,
    ) -> Result<ManifestLocation, CommitError> {
        Err(CommitError::OtherError(refused("a commit")))
    }
}
