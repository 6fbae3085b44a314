//! Lance manifests over the MetaStore: Lance's own external-manifest schema (so Lance readers read
//! our tables and we read theirs), the authority marker, and a read-only adapter for query.

mod lease;
mod marker;
mod store;

pub use lease::{
    LEASE_PARTITION, LEASE_TTL, Lease, LeaseError, LeaseOf, Renewed, TABLE_LEASE_PREFIX, holder,
};
pub use marker::{AuthorityError, load_marker, marker_item, verify_marker};
pub use store::{ManifestStore, ReadOnlyManifestStore, ReadOnlyViolation};
