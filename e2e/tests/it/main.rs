//! lake-e2e's tests: one test binary, one module per subject.

// Test code: a failed unwrap is a failed test, with its message (helpers included).
#![allow(clippy::unwrap_used)]

mod images;
mod kubernetes;
mod readme;
