//! lake-runtime's integration tests: one test binary, one module per subject.

mod plan;
