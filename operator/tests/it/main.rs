//! lake-operator's integration tests: one test binary, one module per subject.

// Test code: a failed unwrap is a failed test, with its message (helpers included).
#![allow(clippy::unwrap_used)]

mod api;
mod apiserver;
mod control;
mod crd;
mod deploy;
mod faults;
mod iam;
mod migration;
mod reconcile;
mod render;
mod safety;
mod tokens;
