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

/// Applies `manifest`, which the API server must accept.
fn accepted(manifest: &str) {
    let out = kubectl(&["apply", "-f", "-"], Some(manifest));
    assert!(out.status.success(), "refused: {manifest}\n{}", text(&out));
}

#[test]
fn crd_update_rules_are_enforced_by_the_api_server() {
    installed();
    let tables = |t: serde_json::Value| spec(s3(), t, 1);
    refused(
        &cluster(
            &unique("none"),
            spec(serde_json::json!({}), serde_json::json!({}), 1),
        ),
        "set exactly one of spec.storage.s3 or spec.storage.local",
    );
    // A name may be set where none was; once set it is fixed.
    let name = unique("tables");
    accepted(&cluster(
        &name,
        tables(serde_json::json!({"manifest": "m-t"})),
    ));
    accepted(&cluster(
        &name,
        tables(serde_json::json!({"registry": "r-t", "manifest": "m-t"})),
    ));
    refused(
        &cluster(
            &name,
            tables(serde_json::json!({"registry": "r-t", "manifest": "m-2"})),
        ),
        "spec.tables.manifest is immutable once set",
    );
    // Storage never switches kind; a local lake's path may move (its claim stays).
    let name = unique("kind");
    let local = |path: &str| {
        spec(
            serde_json::json!({"local": {"path": path, "size": "1Gi"}}),
            serde_json::json!({}),
            1,
        )
    };
    accepted(&cluster(&name, local("/x")));
    accepted(&cluster(&name, local("/y")));
    refused(
        &cluster(&name, spec(s3(), serde_json::json!({}), 1)),
        "cannot switch between s3 and local",
    );
    // A migration is part of a lake from its creation: never added, removed or re-pointed.
    let plain = unique("plain");
    accepted(&cluster(&plain, tables(serde_json::json!({}))));
    let mut with = tables(serde_json::json!({}));
    with["migration"] = serde_json::json!({"sourceTable": "lake-v1"});
    refused(
        &cluster(&plain, with.clone()),
        "spec.migration is set when a LakeCluster is created",
    );
    let migrating = unique("migrating");
    accepted(&cluster(&migrating, with.clone()));
    refused(
        &cluster(&migrating, tables(serde_json::json!({}))),
        "spec.migration is set when a LakeCluster is created",
    );
    let mut other = with.clone();
    other["migration"]["sourceTable"] = serde_json::json!("other-v1");
    refused(
        &cluster(&migrating, other),
        "spec.migration is set when a LakeCluster is created",
    );
    accepted(&cluster(&migrating, with));
}

/// The approval mode cannot be switched once a migration exists: `Manual` → `Automatic` while
/// it awaits its approval would cut over without one. (The operator also keeps the mode it
/// recorded when the migration started: `migration::trust`.)
#[test]
fn approval_mode_is_fixed_once_started() {
    installed();
    let name = unique("approval");
    let mut manual = spec(s3(), serde_json::json!({}), 1);
    manual["migration"] = serde_json::json!({"sourceTable": "lake-v1", "approval": "Manual"});
    accepted(&cluster(&name, manual.clone()));
    let mut automatic = manual.clone();
    automatic["migration"]["approval"] = serde_json::json!("Automatic");
    refused(
        &cluster(&name, automatic),
        "switched to another approval mode",
    );
    // Left out, the field keeps its default (Manual): not a switch.
    let mut defaulted = manual.clone();
    defaulted["migration"] = serde_json::json!({"sourceTable": "lake-v1"});
    accepted(&cluster(&name, defaulted));
    let out = kubectl(
        &[
            "get",
            "lakecluster",
            &name,
            "-n",
            "default",
            "-o",
            "jsonpath={.spec.migration.approval}",
        ],
        None,
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "Manual",
        "{}",
        text(&out)
    );
}
