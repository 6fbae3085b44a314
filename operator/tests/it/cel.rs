//! The CRD's CEL rules (x-kubernetes-validations), evaluated client-side with kube's CEL engine,
//! since no API server runs here. These are the rules the API server enforces on create/update.

use lake_operator::crd::LakeCluster;

fn cluster(spec: serde_json::Value) -> LakeCluster {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "lake.dev/v1alpha1",
        "kind": "LakeCluster",
        "metadata": {"name": "analytics", "namespace": "data"},
        "spec": spec,
    }))
    .unwrap()
}

fn spec(tables: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "storage": {"s3": {"bucket": "acme-lake", "region": "eu-west-1"}},
        "tables": tables,
        "query": {"image": "img"},
        "metadata": {"image": "img"},
    })
}

#[test]
fn valid_cluster_passes() {
    let c = cluster(spec(
        serde_json::json!({"registry": "r-t", "manifest": "m-t"}),
    ));
    c.validate_cel().unwrap();
}

#[test]
fn same_table_twice_is_rejected() {
    let c = cluster(spec(
        serde_json::json!({"registry": "same", "manifest": "same"}),
    ));
    let err = c.validate_cel().unwrap_err().to_string();
    assert!(err.contains("must name different tables"), "{err}");
}

#[test]
fn storage_needs_exactly_one_backend() {
    let mut s = spec(serde_json::json!({}));
    s["storage"] =
        serde_json::json!({"s3": {"bucket": "b-1", "region": "r"}, "local": {"path": "/x"}});
    let err = cluster(s.clone()).validate_cel().unwrap_err().to_string();
    assert!(
        err.contains("exactly one of spec.storage.s3 or spec.storage.local"),
        "{err}"
    );
    s["storage"] = serde_json::json!({});
    assert!(cluster(s).validate_cel().is_err());
}

#[test]
fn table_names_are_immutable_once_set() {
    let old = cluster(spec(
        serde_json::json!({"registry": "r-t", "manifest": "m-t"}),
    ));
    let renamed = cluster(spec(
        serde_json::json!({"registry": "r-t", "manifest": "m-2"}),
    ));
    let err = renamed.validate_cel_update(&old).unwrap_err().to_string();
    assert!(err.contains("spec.tables.manifest is immutable"), "{err}");

    let removed = cluster(spec(serde_json::json!({"manifest": "m-t"})));
    let err = removed.validate_cel_update(&old).unwrap_err().to_string();
    assert!(err.contains("cannot be removed"), "{err}");

    // Setting a name that was not set before is allowed; an unchanged spec is too.
    let unset = cluster(spec(serde_json::json!({"manifest": "m-t"})));
    old.validate_cel_update(&unset).unwrap();
    old.validate_cel_update(&old).unwrap();
}

#[test]
fn a_local_claim_keeps_its_size_and_class() {
    let local = |local: serde_json::Value| {
        let mut s = spec(serde_json::json!({}));
        s["storage"] = serde_json::json!({"local": local});
        cluster(s)
    };
    let old = local(serde_json::json!({"path": "/x", "size": "1Gi"}));
    let resized = local(serde_json::json!({"path": "/x", "size": "2Gi"}));
    let err = resized.validate_cel_update(&old).unwrap_err().to_string();
    assert!(
        err.contains("spec.storage.local.size is fixed once set"),
        "{err}"
    );
    let classed = local(serde_json::json!({"path": "/x", "size": "1Gi", "storageClassName": "f"}));
    let err = classed.validate_cel_update(&old).unwrap_err().to_string();
    assert!(
        err.contains("storageClassName cannot be added or removed"),
        "{err}"
    );
    // The mount path may move (the claim stays); an unchanged spec passes.
    local(serde_json::json!({"path": "/y", "size": "1Gi"}))
        .validate_cel_update(&old)
        .unwrap();
    old.validate_cel_update(&old).unwrap();
}

#[test]
fn a_migration_is_part_of_a_lake_from_its_creation() {
    let plain = cluster(spec(serde_json::json!({})));
    let mut with = spec(serde_json::json!({}));
    with["migration"] = serde_json::json!({"sourceTable": "lake-v1"});
    let migrating = cluster(with.clone());
    for (new, old, what) in [
        (&migrating, &plain, "added to a lake in use"),
        (&plain, &migrating, "removed"),
    ] {
        let err = new.validate_cel_update(old).unwrap_err().to_string();
        assert!(
            err.contains("spec.migration is set when a LakeCluster is created"),
            "{what}: {err}"
        );
    }
    with["migration"]["sourceTable"] = serde_json::json!("other-v1");
    assert!(
        cluster(with).validate_cel_update(&migrating).is_err(),
        "another table"
    );
    migrating.validate_cel_update(&migrating).unwrap();
}

#[test]
fn storage_never_switches_kind() {
    let s3 = cluster(spec(serde_json::json!({})));
    let mut local = spec(serde_json::json!({}));
    local["storage"] = serde_json::json!({"local": {"path": "/x"}});
    let local = cluster(local);
    for (new, old) in [(&local, &s3), (&s3, &local)] {
        let err = new.validate_cel_update(old).unwrap_err().to_string();
        assert!(err.contains("cannot switch between s3 and local"), "{err}");
    }
}
