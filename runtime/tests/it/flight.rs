//! The Flight SQL endpoints through real clients: `lake local` as a process, driven by ADBC and
//! raw pyarrow.flight from Python.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use lake_testkit::python;

/// `lake local` on free ports; killed when dropped.
struct LocalLake {
    child: Child,
    query: String,
    metadata: String,
    _dir: tempfile::TempDir,
}

impl LocalLake {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_lake"))
            .args(["local", "--data"])
            .arg(dir.path())
            .args([
                "--query-addr",
                "127.0.0.1:0",
                "--metadata-addr",
                "127.0.0.1:0",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut endpoint = |role: &str| loop {
            let line = lines
                .next()
                .unwrap_or_else(|| panic!("lake local exited before printing the {role} endpoint"))
                .unwrap();
            if let Some(rest) = line.trim().strip_prefix(role) {
                break rest.split_whitespace().next().unwrap().to_owned();
            }
        };
        let query = endpoint("query");
        let metadata = endpoint("metadata");
        Self {
            child,
            query,
            metadata,
            _dir: dir,
        }
    }
}

impl Drop for LocalLake {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn adbc_and_pyarrow_flight_against_lake_local() {
    let lake = LocalLake::start();
    let (ok, stdout, stderr) = python(&[
        "runtime/tests/it/adbc_suite.py",
        &lake.query,
        &lake.metadata,
    ]);
    assert!(ok, "client suite failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
}
