//! What only a real API server shows: the shipped manifests install, and the CRD's rules (its
//! OpenAPI schema and CEL validations) are enforced by kube-apiserver itself, with kubectl's exit
//! code and message — not by a client-side evaluation of the same rules.

use std::io::Write;
use std::process::{Output, Stdio};

use lake_testkit::{control_plane, unique};

fn kubectl(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = control_plane()
        .kubectl()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input
        .write_all(stdin.unwrap_or_default().as_bytes())
        .unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `kubectl apply -k config/default`, once per test binary, and the CRD Established.
fn installed() {
    static INSTALLED: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    INSTALLED.get_or_init(|| {
        let out = kubectl(&["apply", "-k", "config/default"], None);
        assert!(
            out.status.success(),
            "kubectl apply -k config/default: {}",
            text(&out)
        );
        let out = kubectl(
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
            text(&out)
        );
    });
}

fn cluster(name: &str, spec: serde_json::Value) -> String {
    serde_json::json!({
        "apiVersion": "lake.dev/v1alpha1",
        "kind": "LakeCluster",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    })
    .to_string()
}

fn spec(storage: serde_json::Value, tables: serde_json::Value, replicas: i64) -> serde_json::Value {
    serde_json::json!({
        "storage": storage,
        "tables": tables,
        "query": {"image": "img", "replicas": replicas},
        "metadata": {"image": "img"},
    })
}

fn s3() -> serde_json::Value {
    serde_json::json!({"s3": {"bucket": "acme-lake", "region": "eu-west-1"}})
}

/// `kubectl apply` of `manifest` is refused by the API server with `message`.
fn refused(manifest: &str, message: &str) {
    let out = kubectl(&["apply", "-f", "-"], Some(manifest));
    let said = text(&out);
    assert!(!out.status.success(), "accepted: {manifest}\n{said}");
    assert!(
        said.contains(message),
        "refused without {message:?}: {said}"
    );
}

#[test]
fn crd_rules_are_enforced_by_the_api_server() {
    installed();
    for sample in [
        "config/samples/lakecluster-local.yaml",
        "config/samples/lakecluster-cloud.yaml",
    ] {
        if sample.ends_with("cloud.yaml") {
            let _ = kubectl(&["create", "namespace", "data"], None);
        }
        let out = kubectl(&["apply", "-f", sample], None);
        assert!(out.status.success(), "{sample}: {}", text(&out));
    }

    let tables = |r: &str, m: &str| serde_json::json!({"registry": r, "manifest": m});
    refused(
        &cluster(&unique("same"), spec(s3(), tables("same-t", "same-t"), 1)),
        "spec.tables.registry and spec.tables.manifest must name different tables",
    );
    let both = serde_json::json!({
        "s3": {"bucket": "acme-lake", "region": "eu-west-1"},
        "local": {"path": "/var/lib/lake"},
    });
    refused(
        &cluster(&unique("both"), spec(both, tables("reg-t", "man-t"), 1)),
        "set exactly one of spec.storage.s3 or spec.storage.local",
    );
    refused(
        &cluster(&unique("zero"), spec(s3(), tables("reg-t", "man-t"), 0)),
        "spec.query.replicas: Invalid value: 0",
    );

    // A table name cannot change once the cluster exists.
    let name = unique("renamed");
    let out = kubectl(
        &["apply", "-f", "-"],
        Some(&cluster(&name, spec(s3(), tables("reg-t", "man-t"), 1))),
    );
    assert!(out.status.success(), "{}", text(&out));
    refused(
        &cluster(&name, spec(s3(), tables("other-t", "man-t"), 1)),
        "spec.tables.registry is immutable once set",
    );
    // Nor be removed.
    refused(
        &cluster(&name, spec(s3(), serde_json::json!({}), 1)),
        "spec.tables.registry and spec.tables.manifest cannot be removed once set",
    );
    let out = kubectl(
        &[
            "get",
            "lakecluster",
            &name,
            "-n",
            "default",
            "-o",
            "jsonpath={.spec.tables.registry}",
        ],
        None,
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "reg-t",
        "{}",
        text(&out)
    );
}
