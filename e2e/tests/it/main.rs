//! lake-e2e's tests: one test binary, one module per subject.

mod kubernetes;
mod readme;
