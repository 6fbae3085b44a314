//! lake-e2e's tests: one test binary, one module per subject.

mod images;
mod kubernetes;
mod readme;
