//! Peers from the Kubernetes API (`LAKE_WORKERS=endpointslices:…`), against a real API server:
//! a ServiceAccount holding only list/watch of EndpointSlices (the Role the operator renders)
//! sees the ready, not terminating endpoints of its Service's slices, and follows them as they
//! change. The slices are written directly: the test's pod addresses are loopback, which
//! EndpointSlices refuse.

use std::path::Path;
use std::time::{Duration, Instant};

use lake_common::config::WorkerPeers;
use lake_runtime::flight::kubernetes;
use lake_testkit::{control_plane, output_text, unique};

fn kubectl(args: &[&str], stdin: Option<&str>) -> String {
    let out = control_plane().run(args, stdin);
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        output_text(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// An EndpointSlice of `service` named `name`: (address, ready, terminating) per endpoint.
fn slice(namespace: &str, name: &str, service: &str, endpoints: &[(&str, bool, bool)]) -> String {
    let endpoints: Vec<serde_json::Value> = endpoints
        .iter()
        .map(|(ip, ready, terminating)| {
            serde_json::json!({"addresses": [ip],
                "conditions": {"ready": ready, "serving": ready, "terminating": terminating}})
        })
        .collect();
    serde_json::json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": namespace,
            "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "ports": [{"name": "worker", "port": 8817, "protocol": "TCP"}],
        "endpoints": endpoints,
    })
    .to_string()
}

async fn eventually(found: &kubernetes::Found, want: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let urls: Vec<String> = found.urls().iter().map(|u| u.to_string()).collect();
        let mut urls = urls;
        urls.sort();
        if urls == want {
            return;
        }
        assert!(Instant::now() < deadline, "workers {urls:?}, want {want:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The identity files a query pod's projected volume holds: a token of `account`, the API's
/// CA (`kube-root-ca.crt`, once the controller manager has published it), the namespace.
fn identity(namespace: &str, account: &str, dir: &Path) {
    let token = kubectl(&["create", "token", account, "-n", namespace], None);
    std::fs::write(dir.join("token"), token.trim()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let ca = loop {
        let out = control_plane().run(
            &[
                "get",
                "configmap",
                "kube-root-ca.crt",
                "-n",
                namespace,
                "-o",
                "jsonpath={.data.ca\\.crt}",
            ],
            None,
        );
        if out.status.success() && !out.stdout.is_empty() {
            break String::from_utf8_lossy(&out.stdout).into_owned();
        }
        assert!(
            Instant::now() < deadline,
            "no kube-root-ca.crt in {namespace}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    std::fs::write(dir.join("ca.crt"), ca).unwrap();
    std::fs::write(dir.join("namespace"), namespace).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn distributed_peers_follow_the_services_endpointslices() {
    let ns = unique("peers");
    kubectl(&["create", "namespace", &ns], None);
    kubectl(&["create", "serviceaccount", "query", "-n", &ns], None);
    let rbac = format!(
        r#"apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: workers, namespace: {ns}}}
rules:
  - apiGroups: ["discovery.k8s.io"]
    resources: ["endpointslices"]
    verbs: ["list", "watch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: workers, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: workers}}
subjects: [{{kind: ServiceAccount, name: query, namespace: {ns}}}]
"#
    );
    kubectl(&["apply", "-f", "-"], Some(&rbac));
    let dir = tempfile::tempdir().unwrap();
    identity(&ns, "query", dir.path());
    // As `lake` does when it starts.
    let _ = rustls::crypto::ring::default_provider().install_default();

    let client = kubernetes::client_at(control_plane().server(), dir.path()).unwrap();
    let peers = WorkerPeers::EndpointSlices {
        service: "lake-query-workers".into(),
        port: 8817,
    };
    let found = kubernetes::watch(client, &peers).unwrap();
    // Two slices of the Service, one of another: only the ready, not terminating endpoints of
    // the Service's own.
    let apply = |json: String| kubectl(&["apply", "-f", "-"], Some(&json));
    apply(slice(
        &ns,
        "a",
        "lake-query-workers",
        &[("10.1.0.1", true, false), ("10.1.0.2", false, false)],
    ));
    apply(slice(
        &ns,
        "b",
        "lake-query-workers",
        &[("10.1.0.3", true, true), ("10.1.0.4", true, false)],
    ));
    apply(slice(&ns, "c", "other", &[("10.9.9.9", true, false)]));
    eventually(
        &found,
        &["https://10.1.0.1:8817/", "https://10.1.0.4:8817/"],
    )
    .await;
    // One becomes ready, one starts terminating, a slice goes.
    apply(slice(
        &ns,
        "a",
        "lake-query-workers",
        &[("10.1.0.1", true, true), ("10.1.0.2", true, false)],
    ));
    kubectl(&["delete", "endpointslice", "b", "-n", &ns], None);
    eventually(&found, &["https://10.1.0.2:8817/"]).await;
    kubectl(&["delete", "namespace", &ns, "--wait=false"], None);
}

/// Without the identity the API needs (no such directory), the process says what is missing
/// before it serves.
#[test]
fn distributed_peers_need_the_pods_api_identity() {
    let err = kubernetes::client_at("https://127.0.0.1:1", Path::new("/nonexistent"))
        .err()
        .unwrap();
    assert!(err.to_string().contains("/nonexistent/namespace"), "{err}");
}
