//! lake-operator's integration tests: one test binary, one module per subject.

mod cel;
mod crd;
mod render;
