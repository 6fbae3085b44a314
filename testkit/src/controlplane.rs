//! The Kubernetes control plane (etcd, kube-apiserver, controllers) of a test binary.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};

use super::{controlplane_tool, output_text, workspace_root};

/// A Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
/// one Node), shared by every test in this test binary; stopped when the binary exits.
pub struct ControlPlane {
    kubeconfig: PathBuf,
    server: String,
    audit: PathBuf,
    // Held, never read: while this process lives, the pipe stays open and the control plane
    // runs. When the process exits the pipe closes and `scripts/controlplane_guard.py` stops it.
    _guard: Mutex<(Child, ChildStdin)>,
}

impl ControlPlane {
    /// An admin kubeconfig (a static token in group `system:masters`).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The API server's URL (`https://127.0.0.1:<port>`, a self-signed certificate).
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The API server's audit log: one JSON line per request that is not a get, list or watch.
    pub fn audit_log(&self) -> &Path {
        &self.audit
    }

    /// `kubectl --kubeconfig <admin>`, run from the workspace root.
    pub fn kubectl(&self) -> Command {
        let mut command = Command::new(controlplane_tool("kubectl"));
        command
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .current_dir(workspace_root());
        command
    }

    /// Runs `kubectl args…` as the administrator with `stdin` piped in.
    pub fn run(&self, args: &[&str], stdin: Option<&str>) -> std::process::Output {
        use std::io::Write;
        let mut child = self
            .kubectl()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl starts");
        let mut input = child.stdin.take().expect("kubectl's stdin");
        input
            .write_all(stdin.unwrap_or_default().as_bytes())
            .expect("kubectl reads its input");
        drop(input);
        child.wait_with_output().expect("kubectl runs")
    }

    /// `kubectl apply -k config/default` (the CRD, RBAC and the operator's namespace) once per
    /// test binary, and the CRD Established.
    pub fn install_lake(&self) {
        static INSTALLED: OnceLock<()> = OnceLock::new();
        INSTALLED.get_or_init(|| {
            let out = self.run(&["apply", "-k", "config/default"], None);
            assert!(
                out.status.success(),
                "kubectl apply -k config/default: {}",
                output_text(&out)
            );
            let out = self.run(
                &[
                    "wait",
                    "--for=condition=Established",
                    "crd/lakeclusters.lake.dev",
                    "--timeout=60s",
                ],
                None,
            );
            assert!(
                out.status.success(),
                "the CRD is not Established: {}",
                output_text(&out)
            );
        });
    }

    /// A kubeconfig in `dir` for ServiceAccount `namespace/account`, with a fresh TokenRequest
    /// token (an hour): a client holding exactly that account's RBAC.
    pub fn service_account_kubeconfig(
        &self,
        namespace: &str,
        account: &str,
        dir: &Path,
    ) -> PathBuf {
        let out = self.run(
            &["create", "token", account, "-n", namespace, "--duration=1h"],
            None,
        );
        assert!(out.status.success(), "TokenRequest: {}", output_text(&out));
        let token = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let config = serde_json::json!({
            "apiVersion": "v1", "kind": "Config", "current-context": account,
            "clusters": [{"name": "test", "cluster": {
                "server": self.server, "insecure-skip-tls-verify": true}}],
            "users": [{"name": account, "user": {"token": token}}],
            "contexts": [{"name": account, "context": {"cluster": "test", "user": account}}],
        });
        let path = dir.join("kubeconfig");
        std::fs::write(&path, config.to_string()).expect("writing a kubeconfig");
        path
    }
}

static CONTROL_PLANE: OnceLock<ControlPlane> = OnceLock::new();

/// The test binary's control plane, started on first use. Panics (failing the test loudly, with
/// the failing component's log) if it cannot start.
pub fn control_plane() -> &'static ControlPlane {
    CONTROL_PLANE.get_or_init(start_control_plane)
}

fn start_control_plane() -> ControlPlane {
    let script = workspace_root().join("scripts/controlplane_guard.py");
    let bin = controlplane_tool("kube-apiserver")
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let mut child = crate::python_command()
        .arg(&script)
        .arg(&bin)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start the control plane ({}): {e}", script.display()));
    let stdin = child.stdin.take().expect("stdin is piped");
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut said = String::new();
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    // "READY <kubeconfig> <server> <audit log>", or "FAILED <why>" and the logs' last lines.
    while reader.read_line(&mut line).unwrap_or(0) > 0 {
        if let Some(ready) = line.strip_prefix("READY ") {
            let parts: Vec<&str> = ready.split_whitespace().collect();
            if let [kubeconfig, server, audit] = parts[..] {
                return ControlPlane {
                    kubeconfig: kubeconfig.into(),
                    server: server.to_owned(),
                    audit: audit.into(),
                    _guard: Mutex::new((child, stdin)),
                };
            }
        }
        said.push_str(&line);
        line.clear();
    }
    let status = child.wait().ok();
    panic!("the control plane did not start (exit {status:?}):\n{said}");
}
