//! lake-common: the pure contract shared by the lake operator and runtime.
//!
//! Nothing here performs I/O. The operator and the runtime both derive what they connect to from
//! these types, so a bad spec or configuration is rejected before any client exists.

pub mod config;
pub mod plan;
pub mod schema;
pub mod stage;
