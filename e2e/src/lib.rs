//! lake-e2e: whole-system tests over the real `lake` and `lake-operator` processes: the test
//! control plane (`lake_testkit::control_plane`), a [`node::NodeAgent`] that runs the pods the
//! operator renders as local processes, and the AWS emulator.

// Test support: a failed unwrap fails the test or run that uses it, with its message.
#![allow(clippy::unwrap_used)]

pub use lake_testkit::{binaries, binary, moto, python, venv_tool, workspace_root};

pub mod node;
pub mod pod;
