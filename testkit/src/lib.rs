//! Test support shared by lake's test binaries: where the repository and the test tools are, one
//! AWS emulator (moto server) and one Kubernetes control plane per test binary.
//!
//! Tools are installed by `scripts/bootstrap` (run by `scripts/test`) into `$LAKE_CACHE`. A test
//! whose tool is missing fails with a message saying how to install it; it never skips.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

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

/// Runs `venv python` with `args` and returns (status success, stdout, stderr).
pub fn python(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(venv_tool("python"))
        .args(args)
        .current_dir(workspace_root())
        .output()
        .expect("the venv python starts");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A running moto server, shared by every test in this test binary.
pub struct Moto {
    endpoint: String,
    port: u16,
    /// The file moto's request recorder appends to.
    recording: PathBuf,
    // Held, never read: while this process lives, the pipe stays open and moto keeps running.
    // When the process exits the pipe closes and `scripts/moto_guard.py` stops the server.
    _guard: Mutex<(Child, ChildStdin)>,
}

impl Moto {
    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The region tests use against the emulator.
    pub const REGION: &'static str = "us-east-1";

    /// Turns IAM enforcement on from the next request (moto's `reset-auth` with no free
    /// actions): every request must then be signed by a principal whose policies allow it. For a
    /// [`dedicated_moto`] only: it is server-wide.
    pub fn enforce_iam(&self) {
        use std::io::{Read, Write};
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).expect("connect to moto");
        write!(
            stream,
            "POST /moto-api/reset-auth HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: text/plain\r\nContent-Length: 1\r\nConnection: close\r\n\r\n0",
            self.port
        )
        .expect("send the request");
        let mut response = String::new();
        stream
            .read_to_string(&mut response)
            .expect("read the response");
        assert!(
            response.starts_with("HTTP/1.1 200"),
            "turning IAM enforcement on failed: {response}"
        );
    }

    /// Creates an S3 bucket (moto accepts unsigned requests while IAM enforcement is off).
    pub fn create_bucket(&self, bucket: &str) {
        let response = http(self.port, "PUT", &format!("/{bucket}"));
        assert!(
            response.starts_with("HTTP/1.1 200"),
            "creating bucket {bucket} failed: {response}"
        );
    }
}

/// The emulator's request log (moto's recorder), one JSON object per request. The recorder is
/// global to the server: while it runs it logs every test's requests, so tests filter the log by
/// something only they use (e.g. an access key id), and one recording runs at a time.
impl Moto {
    pub fn start_recording(&'static self) -> Recording {
        static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
        let guard = ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for action in ["reset-recording", "start-recording"] {
            let response = http(self.port, "POST", &format!("/moto-api/recorder/{action}"));
            assert!(response.starts_with("HTTP/1.1 200"), "{action}: {response}");
        }
        Recording {
            moto: self,
            _one_at_a_time: guard,
        }
    }
}

/// A running recording; [`Recording::stop`] returns what it logged.
pub struct Recording {
    moto: &'static Moto,
    _one_at_a_time: std::sync::MutexGuard<'static, ()>,
}

impl Recording {
    pub fn stop(self) -> Vec<serde_json::Value> {
        let port = self.moto.port;
        let response = http(port, "POST", "/moto-api/recorder/stop-recording");
        assert!(response.starts_with("HTTP/1.1 200"), "stop: {response}");
        let log = std::fs::read_to_string(&self.moto.recording).unwrap_or_else(|e| {
            panic!(
                "cannot read moto's recording {}: {e}",
                self.moto.recording.display()
            )
        });
        // Other tests' requests still in flight may leave a half-written last line; the
        // recording test's own processes have finished by now, so their records are whole.
        log.lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

/// One recorded AWS request: the service, the action and what it acted on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsRequest {
    /// `dynamodb`, `iam`, `sts` or `s3`.
    pub service: String,
    /// The API action (`PutItem`, `PutRolePolicy`, …); for S3 the HTTP method.
    pub action: String,
    /// The table, the role (with the policy name), or the S3 URL.
    pub resource: String,
}

impl AwsRequest {
    /// Whether the request only reads (Describe*, Get*, List*, Query, Scan; S3 GET/HEAD).
    pub fn is_read(&self) -> bool {
        ["Describe", "Get", "List", "Query", "Scan", "GET", "HEAD"]
            .iter()
            .any(|p| self.action.starts_with(p))
    }
}

/// The requests in `log` signed with `access_key`.
pub fn requests_signed_by(log: &[serde_json::Value], access_key: &str) -> Vec<AwsRequest> {
    use base64::Engine as _;
    let credential = format!("Credential={access_key}/");
    log.iter()
        .filter_map(|entry| {
            let headers = entry["headers"].as_object()?;
            let header = |name: &str| {
                headers
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(name))
                    .and_then(|(_, v)| v.as_str())
                    .unwrap_or_default()
                    .to_owned()
            };
            let auth = header("authorization");
            if !auth.contains(&credential) {
                return None;
            }
            let service = auth
                .split("Credential=")
                .nth(1)
                .and_then(|c| c.split('/').nth(3))
                .unwrap_or_default()
                .to_owned();
            let raw = entry["body"].as_str().unwrap_or_default();
            let body = if entry["body_encoded"].as_bool() == Some(true) {
                base64::engine::general_purpose::STANDARD
                    .decode(raw)
                    .unwrap_or_default()
            } else {
                raw.as_bytes().to_vec()
            };
            let (action, resource) = match service.as_str() {
                "dynamodb" => {
                    let target = header("x-amz-target");
                    let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                    (
                        target.rsplit('.').next().unwrap_or_default().to_owned(),
                        json["TableName"].as_str().unwrap_or_default().to_owned(),
                    )
                }
                "s3" => (
                    entry["method"].as_str().unwrap_or_default().to_owned(),
                    entry["url"].as_str().unwrap_or_default().to_owned(),
                ),
                _ => {
                    // Query-protocol services (IAM, STS): a form-encoded body.
                    let form: std::collections::HashMap<String, String> =
                        url::form_urlencoded::parse(&body).into_owned().collect();
                    let resource = [form.get("RoleName"), form.get("PolicyName")]
                        .into_iter()
                        .flatten()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join("/");
                    (form.get("Action").cloned().unwrap_or_default(), resource)
                }
            };
            Some(AwsRequest {
                service,
                action,
                resource,
            })
        })
        .collect()
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

static MOTO: OnceLock<Moto> = OnceLock::new();

/// The test binary's moto server, started on first use on a free loopback port. Panics (failing
/// the test loudly) if it cannot start.
pub fn moto() -> &'static Moto {
    MOTO.get_or_init(start_moto)
}

/// A moto server of the caller's own (for tests that change server-wide settings such as IAM
/// enforcement); stopped when dropped.
pub fn dedicated_moto() -> Moto {
    start_moto()
}

fn start_moto() -> Moto {
    let script = workspace_root().join("scripts/moto_guard.py");
    let mut child = Command::new(venv_tool("python"))
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start the moto server ({}): {e}", script.display()));
    let stdin = child.stdin.take().expect("stdin is piped");
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read moto's port");
    // "PORT <n> RECORDING <path>"
    let mut words = line.split_whitespace();
    let (port, recording) = match (words.next(), words.next(), words.next(), words.next()) {
        (Some("PORT"), Some(port), Some("RECORDING"), Some(path)) => {
            (port.parse::<u16>().ok(), PathBuf::from(path))
        }
        _ => (None, PathBuf::new()),
    };
    let port = port.unwrap_or_else(|| {
        let status = child.try_wait().ok().flatten();
        panic!(
            "the moto server did not start (said {line:?}, exit {status:?}); is moto[server] \
             installed in the venv? run scripts/bootstrap"
        )
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "moto announced port {port} but does not accept connections after 20 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Moto {
        endpoint: format!("http://127.0.0.1:{port}"),
        port,
        recording,
        _guard: Mutex::new((child, stdin)),
    }
}

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
    let mut child = Command::new(venv_tool("python"))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moto_starts_once_per_binary_and_answers() {
        let first = moto();
        let second = moto();
        assert!(std::ptr::eq(first, second), "one server per test binary");
        let response = http(first.port(), "GET", "/moto-api/");
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    }

    #[test]
    fn workspace_root_is_this_clone() {
        let root = workspace_root();
        assert!(
            root.join("scripts/moto_guard.py").exists(),
            "{}",
            root.display()
        );
        let here = std::env::var("CARGO_MANIFEST_DIR").unwrap();
        assert!(
            Path::new(&here).starts_with(&root),
            "{here} is not under {}",
            root.display()
        );
    }

    #[test]
    fn buckets_can_be_created_and_names_are_unique() {
        let bucket = unique("tk");
        assert_ne!(bucket, unique("tk"));
        moto().create_bucket(&bucket);
        let listing = http(moto().port(), "GET", &format!("/{bucket}"));
        assert!(listing.starts_with("HTTP/1.1 200"), "{listing}");
    }

    #[test]
    fn the_control_plane_starts_once_per_binary_and_runs_its_controllers() {
        let plane = control_plane();
        assert!(
            std::ptr::eq(plane, control_plane()),
            "one control plane per test binary"
        );
        let out = plane
            .kubectl()
            .args(["version", "-o", "json"])
            .output()
            .unwrap();
        let version = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{version}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(version.contains("\"gitVersion\": \"v1.37.2\""), "{version}");
        let out = plane
            .kubectl()
            .args(["get", "nodes", "-o", "name"])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "node/lake-test-node"
        );
        // The service-account controller (controller manager) made the namespace's account.
        let out = plane
            .kubectl()
            .args([
                "get",
                "serviceaccount",
                "default",
                "-n",
                "kube-system",
                "-o",
                "name",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn missing_tool_fails_with_install_hint() {
        let err = std::panic::catch_unwind(|| venv_tool("no-such-tool-here")).unwrap_err();
        let msg = err.downcast_ref::<String>().unwrap();
        assert!(msg.contains("scripts/bootstrap"), "{msg}");
    }
}
