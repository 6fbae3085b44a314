//! lake-e2e: whole-system tests over the real `lake` and `lake-operator` processes: the test
//! control plane (`lake_testkit::control_plane`), a [`node::NodeAgent`] that runs the pods the
//! operator renders as local processes, and the AWS emulator.

use std::path::PathBuf;

pub use lake_testkit::{moto, python, venv_tool, workspace_root};

pub mod node;
pub mod pod;

/// A workspace binary from the same build as this test (e.g. `lake-operator`).
///
/// `cargo test --workspace` builds every package's binaries before running any test; a missing
/// binary means the test was run on its own: build them with `scripts/cargo build --workspace`.
pub fn binary(name: &str) -> PathBuf {
    let path = binaries().join(name);
    assert!(
        path.exists(),
        "binary {name} not found at {}: build it with `scripts/cargo build --workspace` (scripts/test does)",
        path.display()
    );
    path
}

/// Where this build's binaries are: `<target>/<profile>`.
pub fn binaries() -> PathBuf {
    let exe = std::env::current_exe().expect("the test knows its own path");
    // <target>/<profile>/deps/<test> → <target>/<profile>
    exe.parent()
        .and_then(|deps| deps.parent())
        .map(PathBuf::from)
        .expect("test binaries live in <target>/<profile>/deps")
}
