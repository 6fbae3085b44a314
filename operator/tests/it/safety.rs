//! The operator never touches what is not its own and never widens what a namespace may reach:
//! deletion checks markers and creation tags, an invalid spec at deletion is reported, the
//! administrator's allowlist bounds the IAM policies it writes, a failed role lookup deploys
//! nothing, and the status is the truth of the last pass. Each test reads the emulator's and
//! the API server's state, not the operator's word.

use super::reconcile::{
    Harness, NS, cluster_yaml, context_with, create_lake_table, create_roles, dynamodb, harness,
    harness_with, iam, writes,
};
use aws_sdk_dynamodb::types::{AttributeValue, ScalarAttributeType};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, ListParams};
use kube::runtime::controller::Action;
use lake_operator::allowlist::Allowlist;
use lake_operator::crd::LakeCluster;
use lake_operator::reconcile::{FINALIZER, reconcile};
use lake_testkit::{moto, requests_signed_by, unique};
use serde_json::json;
use std::sync::Arc;

mod iam;
mod maintenance;

async fn table_exists(name: &str) -> bool {
    dynamodb()
        .await
        .describe_table()
        .table_name(name)
        .send()
        .await
        .is_ok()
}

async fn item_count(table: &str) -> usize {
    dynamodb()
        .await
        .scan()
        .table_name(table)
        .send()
        .await
        .unwrap()
        .items()
        .len()
}

/// Whether the cluster's inline policy is on `role`.
async fn has_policy(role: &str, cluster: &str) -> bool {
    iam()
        .await
        .get_role_policy()
        .role_name(role)
        .policy_name(format!("lake.{NS}.{cluster}"))
        .send()
        .await
        .is_ok()
}

/// Deletes `h`'s cluster (a DELETE, then the pass that runs the finalizer).
async fn delete(h: &Harness) -> &Harness {
    let deleting = h.deleting().await;
    reconcile(Arc::new(deleting.cluster().await), deleting.ctx.clone())
        .await
        .unwrap_or_else(|e| panic!("cleanup failed: {e}"));
    deleting
}

#[tokio::test(flavor = "multi_thread")]
async fn deletion_never_touches_a_foreign_table() {
    // Cluster A owns its tables; a row in its manifest table stands for its data.
    let a = unique("own");
    create_roles(&a).await;
    let ha = harness(cluster_yaml(&a, "")).await;
    ha.reconcile().await;
    let (a_registry, a_manifests) = (format!("{NS}.{a}-registry"), format!("{NS}.{a}-manifests"));
    dynamodb()
        .await
        .put_item()
        .table_name(&a_manifests)
        .item("base_uri", AttributeValue::S("sales/orders.lance".into()))
        .item("version", AttributeValue::N("1".into()))
        .item("path", AttributeValue::S("_versions/1.manifest".into()))
        .send()
        .await
        .unwrap();
    let a_items = item_count(&a_manifests).await;

    // Cluster B names A's tables and asks for deletion: refused while it lives, and its
    // deletion leaves A's tables as they are.
    let b = unique("foe");
    create_roles(&b).await;
    let extra = format!(
        "  deletionPolicy: Delete\n  tables:\n    registry: {a_registry}\n    manifest: {a_manifests}\n"
    );
    let hb = harness(cluster_yaml(&b, &extra)).await;
    assert_eq!(hb.reconcile().await, Action::await_change());
    assert_eq!(hb.condition("TablesReady").await.1, "MarkerConflict");
    let recording = moto().start_recording();
    let deleting = delete(&hb).await;
    let log = recording.stop();
    assert!(
        deleting.clusters.get_opt(&b).await.unwrap().is_none(),
        "B's finalizer was released"
    );
    let touched: Vec<_> = writes(&requests_signed_by(&log, &hb.key))
        .into_iter()
        // TagResource/UntagResource name the table by ARN: match the name anywhere in it.
        .filter(|r| r.resource.contains(&a_registry) || r.resource.contains(&a_manifests))
        .cloned()
        .collect();
    assert!(touched.is_empty(), "A's tables were written: {touched:?}");
    for table in [&a_registry, &a_manifests] {
        let t = dynamodb()
            .await
            .describe_table()
            .table_name(table)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{table} is gone: {e:?}"))
            .table
            .unwrap();
        assert_eq!(
            t.deletion_protection_enabled(),
            Some(true),
            "{table} lost its protection"
        );
    }
    assert_eq!(item_count(&a_manifests).await, a_items, "A's items changed");

    // Cluster C adopts an existing table and creates the other: deletion removes only the one
    // it created, unless spec.tables.deleteAdopted opts in.
    for opt_in in [false, true] {
        let c = unique("adopter");
        create_roles(&c).await;
        let registry = format!("{NS}.{c}-registry");
        create_lake_table(&registry, "pk", ("sk", ScalarAttributeType::S)).await;
        dynamodb()
            .await
            .put_item()
            .table_name(&registry)
            .item("pk", AttributeValue::S("NS#before".into()))
            .item("sk", AttributeValue::S("META".into()))
            .send()
            .await
            .unwrap();
        let extra = if opt_in {
            "  deletionPolicy: Delete\n  tables:\n    deleteAdopted: true\n"
        } else {
            "  deletionPolicy: Delete\n"
        };
        let hc = harness(cluster_yaml(&c, extra)).await;
        hc.reconcile().await;
        hc.reconcile().await; // a second pass must still know the registry was adopted
        let tables = hc.cluster().await.status.unwrap().tables.unwrap();
        assert!(tables.registry.unwrap().adopted, "{c}: registry adopted");
        delete(&hc).await;
        assert!(
            !table_exists(&format!("{NS}.{c}-manifests")).await,
            "the table C created is deleted"
        );
        assert_eq!(
            table_exists(&registry).await,
            !opt_in,
            "adopted table kept unless deleteAdopted (opt-in: {opt_in})"
        );
        if !opt_in {
            let before = dynamodb()
                .await
                .get_item()
                .table_name(&registry)
                .key("pk", AttributeValue::S("NS#before".into()))
                .key("sk", AttributeValue::S("META".into()))
                .send()
                .await
                .unwrap();
            assert!(
                before.item.is_some(),
                "the adopted table's own item is gone"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn adoption_needs_consent_and_never_takes_another_clusters_table() {
    use lake_operator::plan::tables::TAG_CLUSTER_UID;
    // Any table with lake's key schema (e.g. a plain Lance commit table) and no marker: without
    // the administrator's `adopt: true`, a namespace cannot adopt it (and so cannot delete it).
    let name = unique("squat");
    create_roles(&name).await;
    let victim = format!("{NS}.{name}-manifests");
    create_lake_table(&victim, "base_uri", ("version", ScalarAttributeType::N)).await;
    let strict = Allowlist::parse(
        &format!(
            "namespaces:\n  data:\n    roles: [{name}-query-role, {name}-metadata-role]\n    storage: [{{bucket: {name}-bucket}}]\n"
        ),
        "test allowlist",
    )
    .unwrap();
    let h = harness_with(cluster_yaml(&name, ""), strict.clone()).await;
    let recording = moto().start_recording();
    assert_eq!(h.reconcile().await, Action::await_change());
    let log = recording.stop();
    let (status, reason, message) = h.condition("TablesReady").await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "AdoptionRefused"),
        "{message}"
    );
    let touched: Vec<_> = writes(&requests_signed_by(&log, &h.key))
        .into_iter()
        .filter(|r| r.resource.contains(&victim))
        .cloned()
        .collect();
    assert!(
        touched.is_empty(),
        "the unconsented table was written: {touched:?}"
    );
    assert_eq!(item_count(&victim).await, 0, "a marker was written");

    // deleteAdopted is the administrator's to allow, not the namespace's.
    let mut cluster = cluster_yaml(&unique("squat"), "  tables:\n    deleteAdopted: true\n");
    cluster.spec.iam = None;
    let h2 = harness_with(cluster, strict).await;
    h2.reconcile().await;
    let (status, _, message) = h2.condition("PlanValid").await;
    assert!(
        status == "False" && message.contains("spec.tables.deleteAdopted"),
        "{message}"
    );

    // A table another cluster has just created (tagged with its uid, not yet marked) is not
    // taken even with consent: the creator's next pass must find it as it left it.
    let other = unique("racer");
    create_roles(&other).await;
    let raced = format!("{NS}.{other}-registry");
    create_lake_table(&raced, "pk", ("sk", ScalarAttributeType::S)).await;
    let ddb = dynamodb().await;
    let arn = ddb
        .describe_table()
        .table_name(&raced)
        .send()
        .await
        .unwrap()
        .table
        .unwrap()
        .table_arn
        .unwrap();
    ddb.tag_resource()
        .resource_arn(&arn)
        .tags(
            aws_sdk_dynamodb::types::Tag::builder()
                .key(TAG_CLUSTER_UID)
                .value("the-creators-uid")
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let h3 = harness(cluster_yaml(&other, "")).await;
    assert_eq!(h3.reconcile().await, Action::await_change());
    let (_, reason, message) = h3.condition("TablesReady").await;
    assert_eq!(reason, "MarkerConflict", "{message}");
    assert!(message.contains("another cluster created it"), "{message}");
    assert!(
        !message.contains("the-creators-uid"),
        "its owner's uid leaked: {message}"
    );
    assert_eq!(
        item_count(&raced).await,
        0,
        "a marker was written on the raced table"
    );
}

/// Deletion deletes only tables the allowlist admits: one that left it (the administrator
/// narrowed the allowlist after the cluster was created) is neither looked up nor deleted, and
/// its Event says only that it was kept, not whether it exists.
#[tokio::test(flavor = "multi_thread")]
async fn deletion_keeps_tables_the_allowlist_no_longer_admits() {
    let name = unique("left");
    create_roles(&name).await;
    let h = harness(cluster_yaml(&name, "  deletionPolicy: Delete\n")).await;
    h.reconcile().await;
    let (registry, manifests) = (
        format!("{NS}.{name}-registry"),
        format!("{NS}.{name}-manifests"),
    );
    assert!(table_exists(&manifests).await && table_exists(&registry).await);

    // Restarted with an allowlist that admits the registry but no longer the manifest table.
    let narrowed = Allowlist::parse(
        &format!(
            "namespaces:\n  data:\n    roles: [\"*-query-role\", \"*-metadata-role\"]\n    storage: [{{bucket: \"*-bucket\"}}]\n    tables: [\"{registry}\"]\n"
        ),
        "narrowed allowlist",
    )
    .unwrap();
    let ctx = context_with(&h.key, narrowed).await;
    let deleting = h.deleting().await;
    let recording = moto().start_recording();
    reconcile(Arc::new(deleting.cluster().await), ctx)
        .await
        .unwrap_or_else(|e| panic!("cleanup failed: {e}"));
    let log = recording.stop();
    assert!(
        deleting.clusters.get_opt(&name).await.unwrap().is_none(),
        "the finalizer stayed"
    );
    assert!(!table_exists(&registry).await, "{registry} was kept");
    assert!(table_exists(&manifests).await, "{manifests} was deleted");
    let named: Vec<_> = requests_signed_by(&log, &h.key)
        .into_iter()
        .filter(|r| r.resource.contains(&manifests))
        .collect();
    assert!(named.is_empty(), "{manifests} was looked up: {named:?}");
    let kept: Vec<String> = deleting
        .events()
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("TableKept"))
        .filter_map(|e| e.note)
        .collect();
    assert!(
        kept.len() == 1 && kept[0].contains(&manifests) && kept[0].contains("allowlist"),
        "{kept:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn deletion_with_an_invalid_spec_is_reported() {
    let name = unique("inv");
    create_roles(&name).await;
    let h = harness(cluster_yaml(&name, "  deletionPolicy: Delete\n")).await;
    h.reconcile().await;
    let manifests = format!("{NS}.{name}-manifests");
    assert!(table_exists(&manifests).await);

    // The spec turns invalid (a bucket name the CRD's schema lets through), then the cluster
    // is deleted: cleanup is blocked and says so; the finalizer stays.
    h.patch_spec(json!({"storage": {"s3": {"bucket": "Bad_Bucket"}}}))
        .await;
    let deleting = h.deleting().await;
    let recording = moto().start_recording();
    let action = reconcile(Arc::new(deleting.cluster().await), deleting.ctx.clone())
        .await
        .unwrap();
    let log = recording.stop();
    assert_eq!(action, Action::await_change());
    let cluster = deleting.cluster().await;
    assert!(
        cluster
            .metadata
            .finalizers
            .unwrap_or_default()
            .contains(&FINALIZER.to_owned()),
        "the finalizer was released with nothing cleaned up"
    );
    let (status, reason, message) = deleting.condition("PlanValid").await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "CleanupBlocked")
    );
    assert!(
        message.contains("spec.storage.s3.bucket") && message.contains(FINALIZER),
        "{message}"
    );
    assert!(
        requests_signed_by(&log, &h.key).is_empty(),
        "AWS was called with an invalid spec"
    );
    assert!(table_exists(&manifests).await);

    // Fixed: cleanup runs and the finalizer goes.
    deleting
        .patch_spec(json!({"storage": {"s3": {"bucket": format!("{name}-bucket")}}}))
        .await;
    reconcile(Arc::new(deleting.cluster().await), deleting.ctx.clone())
        .await
        .unwrap();
    assert!(deleting.clusters.get_opt(&name).await.unwrap().is_none());
    assert!(!table_exists(&manifests).await, "{manifests} still exists");
}
