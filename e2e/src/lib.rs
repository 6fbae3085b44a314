//! lake-e2e: whole-system tests over the real `lake` and `lake-operator` processes (and, as the
//! runtime grows, the AWS emulator and the Python client peers).

use std::path::PathBuf;

pub use lake_testkit::{moto, python, venv_tool, workspace_root};

/// A workspace binary from the same build as this test (e.g. `lake-operator`).
///
/// `cargo test --workspace` builds every package's binaries before running any test; a missing
/// binary means the test was run on its own: build them with `scripts/cargo build --workspace`.
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test knows its own path");
    // <target>/<profile>/deps/<test> → <target>/<profile>/<name>
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|profile| profile.join(name))
        .expect("test binaries live in <target>/<profile>/deps");
    assert!(
        path.exists(),
        "binary {name} not found at {}: build it with `scripts/cargo build --workspace` (scripts/test does)",
        path.display()
    );
    path
}
