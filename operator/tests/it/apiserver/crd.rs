//! The CRD's rules, as the API server enforces them.

use super::*;

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

    // A local lake's claim keeps its size and StorageClass (a StatefulSet's claim template
    // cannot change).
    let name = unique("claim");
    let local = |extra: serde_json::Value| {
        let mut local = serde_json::json!({"path": "/var/lib/lake", "size": "1Gi"});
        local
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        spec(
            serde_json::json!({"local": local}),
            serde_json::json!({}),
            1,
        )
    };
    let out = kubectl(
        &["apply", "-f", "-"],
        Some(&cluster(&name, local(serde_json::json!({})))),
    );
    assert!(out.status.success(), "{}", text(&out));
    refused(
        &cluster(&name, local(serde_json::json!({"size": "2Gi"}))),
        "spec.storage.local.size is fixed once set",
    );
    refused(
        &cluster(
            &name,
            local(serde_json::json!({"storageClassName": "fast"})),
        ),
        "spec.storage.local.storageClassName cannot be added or removed",
    );
}
