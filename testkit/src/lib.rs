//! Test support shared by lake's test binaries: where the repository and the test tools are, one
//! AWS emulator (moto server) and one Kubernetes control plane per test binary.
//!
//! Tools are installed by `scripts/bootstrap` (run by `scripts/test`) into `$LAKE_CACHE`. A test
//! whose tool is missing fails with a message saying how to install it; it never skips.

// Test support: a failed unwrap fails the test or run that uses it, with its message.
#![allow(clippy::unwrap_used)]

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;

mod controlplane;
mod moto;
pub mod tpch;

pub use controlplane::{ControlPlane, control_plane};
pub use moto::{AwsRequest, Moto, Recording, dedicated_moto, moto, requests_signed_by};

/// The workspace root (the clone), found at run time: the nearest directory above the running
/// package (cargo sets `CARGO_MANIFEST_DIR` for tests) whose `Cargo.toml` has `[workspace]`.
///
/// Not `env!("CARGO_MANIFEST_DIR")`: clones in different folders share the target cache, and a
/// path baked into a cached artifact would point at another clone.
pub fn workspace_root() -> PathBuf {
    let start = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::current_dir().ok())
        .expect("a package directory or a working directory");
    start
        .ancestors()
        .find(|dir| {
            std::fs::read_to_string(dir.join("Cargo.toml"))
                .is_ok_and(|toml| toml.contains("[workspace]"))
        })
        .unwrap_or_else(|| panic!("no workspace Cargo.toml above {}", start.display()))
        .to_path_buf()
}

/// The Python venv with the test peers: `$LAKE_VENV`, else `$LAKE_CACHE/venv`, else
/// `~/.cache/lake/venv` (the defaults of `scripts/env.sh`).
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

pub fn venv() -> PathBuf {
    if let Some(v) = std::env::var_os("LAKE_VENV") {
        return v.into();
    }
    cache().join("venv")
}

/// The npm test peers (the IAM simulator): `$LAKE_NODE_PREFIX/node_modules`, by default under
/// `$LAKE_CACHE/node`. Panics with install
/// instructions when missing.
pub fn node_modules() -> PathBuf {
    let prefix = std::env::var_os("LAKE_NODE_PREFIX")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache().join("node"));
    let path = prefix.join("node_modules");
    assert!(
        path.join("@cloud-copilot/iam-simulate").exists(),
        "the npm test peers are not installed at {}: run scripts/bootstrap (or scripts/test) to \
         install scripts/node/package.json into the cache",
        path.display()
    );
    path
}

/// Runs `node` with `args` from the workspace root; (success, stdout, stderr). Panics with an
/// install hint when node is missing.
pub fn node(args: &[&str]) -> (bool, String, String) {
    let out = Command::new("node")
        .args(args)
        .current_dir(workspace_root())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run node ({e}): install Node.js 20+ (Debian: apt-get install nodejs npm)"
            )
        });
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `$LAKE_CACHE`, else `$XDG_CACHE_HOME/lake`, else `~/.cache/lake`.
fn cache() -> PathBuf {
    std::env::var_os("LAKE_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let base = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
                .expect("HOME or XDG_CACHE_HOME is set");
            base.join("lake")
        })
}

/// A program from the test venv (`python`, `kubernetes-validate`, …). Panics with install
/// instructions when it is missing.
pub fn venv_tool(name: &str) -> PathBuf {
    let path = venv().join("bin").join(name);
    assert!(
        path.exists(),
        "test tool {name:?} not found at {}: run scripts/bootstrap (or scripts/test, which runs it) \
         to install the test tools into the cache, or point LAKE_VENV at a venv made from \
         scripts/requirements.txt",
        path.display()
    );
    path
}

/// The venv's Python, as every test starts it: from the workspace root, with the shared checks
/// (`testkit/python/lake_checks.py`) importable, and never optimized — `PYTHONOPTIMIZE` (or
/// `-O`) strips `assert` statements, and a check that is stripped passes without checking.
pub fn python_command() -> Command {
    let mut command = Command::new(venv_tool("python"));
    command
        .current_dir(workspace_root())
        .env_remove("PYTHONOPTIMIZE")
        .env("PYTHONPATH", workspace_root().join("testkit/python"));
    command
}

/// Runs `venv python` with `args` and returns (status success, stdout, stderr).
pub fn python(args: &[&str]) -> (bool, String, String) {
    let out = python_command()
        .args(args)
        .output()
        .expect("the venv python starts");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A name no other test of this run uses: `<prefix>-<pid>-<n>` (lowercase, bucket-safe).
pub fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// One plain HTTP/1.1 request to the emulator; returns the whole response.
pub fn http(port: u16, method: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to moto");
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .expect("send the request");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("read the response");
    response
}

/// A command's stdout and stderr, for messages.
pub fn output_text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The pod status a kubelet reports once a pod's containers run and pass their probes: what tests
/// patch onto scheduled pods (the control plane has no kubelet) so Deployments become available.
pub fn ready_pod_status() -> serde_json::Value {
    let now = "2026-01-01T00:00:00Z";
    let conditions: Vec<serde_json::Value> =
        ["PodScheduled", "Initialized", "ContainersReady", "Ready"]
            .iter()
            .map(|t| serde_json::json!({"type": t, "status": "True", "lastTransitionTime": now}))
            .collect();
    serde_json::json!({"status": {"phase": "Running", "conditions": conditions}})
}

/// A program of the control plane `scripts/bootstrap` builds into `$LAKE_CACHE/controlplane/bin`.
/// Panics with install instructions when it is missing.
pub fn controlplane_tool(name: &str) -> PathBuf {
    let path = cache().join("controlplane/bin").join(name);
    assert!(
        path.exists(),
        "control-plane tool {name:?} not found at {}: run scripts/bootstrap (or scripts/test), \
         which builds etcd and Kubernetes from testkit/controlplane with Go 1.26+",
        path.display()
    );
    path
}

/// A client of the conformance suites `scripts/bootstrap` puts in `$LAKE_CACHE/clients` (the JDBC
/// driver's jar, the Go suite's binary). Panics with install instructions when it is missing.
pub fn client_tool(name: &str) -> PathBuf {
    let path = cache().join("clients").join(name);
    assert!(
        path.exists(),
        "client {name:?} not found at {}: run scripts/bootstrap (or scripts/test), which fetches \
         the JDBC driver with Maven (Java 17+) and builds the Go suite (Go 1.26+)",
        path.display()
    );
    path
}

#[cfg(test)]
mod tests;
