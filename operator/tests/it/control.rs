//! The test binary's Kubernetes control plane (etcd, kube-apiserver, controller-manager,
//! scheduler; `lake_testkit::control_plane`) as the operator tests use it: kubectl, the shipped
//! manifests installed once, and API clients as the administrator and as the operator's own
//! ServiceAccount (a TokenRequest token, so exactly the RBAC of `config/rbac`).

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;

use lake_testkit::control_plane;

/// `kubectl args…` on the control plane as its administrator, `stdin` piped in.
pub(super) fn kubectl(args: &[&str], stdin: Option<&str>) -> Output {
    control_plane().run(args, stdin)
}

/// A command's stdout and stderr, for messages.
pub(super) fn text(out: &Output) -> String {
    lake_testkit::output_text(out)
}

/// `kubectl apply -k config/default`, once per test binary, and the CRD Established.
pub(super) fn installed() {
    control_plane().install_lake();
}

/// Namespace `name` exists (created once per test binary).
pub(super) fn namespace(name: &'static str) {
    static CREATED: OnceLock<std::sync::Mutex<Vec<&'static str>>> = OnceLock::new();
    let mut created = CREATED.get_or_init(Default::default).lock().unwrap();
    if created.contains(&name) {
        return;
    }
    let out = kubectl(&["create", "namespace", name], None);
    let said = text(&out);
    assert!(
        out.status.success() || said.contains("AlreadyExists"),
        "{said}"
    );
    created.push(name);
}

/// A kubeconfig for `lake-system/lake-operator` with a fresh TokenRequest token.
pub(super) fn operator_kubeconfig(dir: &Path) -> PathBuf {
    control_plane().service_account_kubeconfig("lake-system", "lake-operator", dir)
}

async fn client_for(kubeconfig: &Path) -> kube::Client {
    // kube's rustls needs a process-wide provider; the operator binary installs the same.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// An API client as the control plane's administrator (the tests' own reads and writes).
pub(super) async fn admin_client() -> kube::Client {
    installed();
    client_for(control_plane().kubeconfig()).await
}

/// An API client as the operator's ServiceAccount: what an in-process reconcile runs with.
pub(super) async fn operator_client() -> kube::Client {
    static KUBECONFIG: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    installed();
    let (_, path) = KUBECONFIG.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let path = operator_kubeconfig(dir.path());
        (dir, path)
    });
    client_for(path).await
}

/// Where the API server's audit log ends now: `operator_writes_since` reads what follows.
pub(super) fn audit_mark() -> u64 {
    std::fs::metadata(control_plane().audit_log())
        .map(|m| m.len())
        .unwrap_or(0)
}

/// The writes (create, update, patch, delete: `verb resource[/subresource] name`) the operator's
/// ServiceAccount sent after `mark` for objects in `namespace` whose name starts with `prefix`,
/// Events left out — the API server's own record, not the objects' resourceVersions (which its
/// controllers change too). Waits for a marker write of its own to reach the log first: each
/// event is logged as its request completes, so everything sent before the marker is there.
pub(super) fn operator_writes_since(mark: u64, namespace: &str, prefix: &str) -> Vec<String> {
    let marker = lake_testkit::unique("audit-marker");
    let out = kubectl(&["create", "configmap", &marker, "-n", "default"], None);
    assert!(out.status.success(), "{}", text(&out));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let log = std::fs::read(control_plane().audit_log()).unwrap_or_default();
        let tail = String::from_utf8_lossy(log.get(mark as usize..).unwrap_or_default());
        if tail.contains(&marker) {
            return tail
                .lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .filter(|e| {
                    let object = &e["objectRef"];
                    e["stage"] == "ResponseComplete"
                        && e["user"]["username"]
                            == "system:serviceaccount:lake-system:lake-operator"
                        && object["namespace"] == namespace
                        && object["resource"] != "events"
                        && object["name"]
                            .as_str()
                            .is_some_and(|n| n.starts_with(prefix))
                        && !matches!(e["verb"].as_str(), Some("get" | "list" | "watch"))
                })
                .map(|e| {
                    let object = &e["objectRef"];
                    let resource = match object["subresource"].as_str() {
                        Some(sub) => format!("{}/{sub}", object["resource"].as_str().unwrap_or("")),
                        None => object["resource"].as_str().unwrap_or("").to_owned(),
                    };
                    format!(
                        "{} {resource} {}",
                        e["verb"].as_str().unwrap_or(""),
                        object["name"].as_str().unwrap_or("")
                    )
                })
                .collect();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the audit log did not record {marker} within 10 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
