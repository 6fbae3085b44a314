//! lake-operator's integration tests: one test binary, one module per subject.

mod api;
mod cel;
mod crd;
mod iam;
mod reconcile;
mod render;
