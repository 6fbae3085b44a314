//! Tables that outlive their cluster, and adoption of matching ones.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn retained_tables_survive_deletion() {
    let name = unique("rt");
    create_roles(&name).await;
    let h = harness(cluster_yaml(&name, "")).await;
    h.reconcile().await;
    let deleting = h.deleting().await;
    reconcile(Arc::new(deleting.cluster().await), deleting.ctx.clone())
        .await
        .unwrap();
    assert!(deleting.clusters.get_opt(&name).await.unwrap().is_none());
    let ddb = dynamodb().await;
    let t = ddb
        .describe_table()
        .table_name(format!("{NS}.{name}-manifests"))
        .send()
        .await
        .unwrap();
    assert_eq!(t.table.unwrap().deletion_protection_enabled(), Some(true));
}

#[tokio::test(flavor = "multi_thread")]
async fn matching_tables_are_adopted_and_another_clusters_are_not() {
    use aws_sdk_dynamodb::types::{AttributeValue, ScalarAttributeType};
    // A pre-existing registry with the right key schema and no marker: adopted.
    let name = unique("adopt-ok");
    create_roles(&name).await;
    create_lake_table(
        &format!("{NS}.{name}-registry"),
        "pk",
        ("sk", ScalarAttributeType::S),
    )
    .await;
    let h = harness(cluster_yaml(&name, "")).await;
    h.reconcile().await;
    assert_eq!(h.condition("TablesReady").await.0, "True");
    let tables = h.cluster().await.status.unwrap().tables.unwrap();
    assert!(
        tables.registry.unwrap().adopted,
        "the existing registry is reported adopted"
    );
    assert!(
        !tables.manifest.unwrap().adopted,
        "the manifest table was created"
    );

    // A manifest table that holds another cluster's marker: left alone, terminal condition.
    let other = unique("adopt-no");
    create_roles(&other).await;
    let manifests = format!("{NS}.{other}-manifests");
    create_lake_table(&manifests, "base_uri", ("version", ScalarAttributeType::N)).await;
    dynamodb()
        .await
        .put_item()
        .table_name(&manifests)
        .item("base_uri", AttributeValue::S("__lake__/authority".into()))
        .item("version", AttributeValue::N("0".into()))
        .item("format", AttributeValue::S("lake-manifests/v2".into()))
        .item("cluster", AttributeValue::S("someone-else".into()))
        .send()
        .await
        .unwrap();
    let h = harness(cluster_yaml(&other, "")).await;
    let recording = moto().start_recording();
    assert_eq!(h.reconcile().await, Action::await_change());
    let log = recording.stop();
    let (status, reason, message) = h.condition("TablesReady").await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "MarkerConflict")
    );
    assert!(message.contains("another cluster"), "{message}");
    assert!(
        !message.contains("someone-else"),
        "its owner's uid leaked: {message}"
    );
    let touched: Vec<_> = requests_signed_by(&log, &h.key)
        .into_iter()
        .filter(|r| r.resource == manifests && !r.is_read())
        .collect();
    assert!(
        touched.is_empty(),
        "another cluster's table was modified: {touched:?}"
    );
}
