//! lake-runtime's integration tests: one test binary, one module per subject. Cloud tests run
//! against the binary's moto server; Lance interoperability against pylance.

// Test code: a failed unwrap is a failed test, with its message (helpers included).
#![allow(clippy::unwrap_used)]

mod support;

mod authority;
mod caches;
mod clients;
mod concurrency;
mod contexts;
mod distributed;
mod flight;
mod hostile_clients;
mod interop;
mod maintenance;
mod manifest;
mod plan;
mod restore;
mod sdk;
mod search;
mod store;
mod vector_search;
