//! lake-client: the Rust SDK of lake.
//!
//! `LakeClient::connect(query_endpoint)` (SQL over Flight SQL, managed-stage discovery and direct
//! object-storage I/O) lands with the managed-stage work; today the crate reserves its place in
//! the workspace and depends only on the shared contract.

pub use lake_common::plan::Role;
