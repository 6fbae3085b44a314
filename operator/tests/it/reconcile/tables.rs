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

/// Retained tables of a deleted cluster in another namespace, named by `spec.tables.reattachFrom`:
/// refused without the administrator's consent to adopt in this namespace (nothing written);
/// with it, re-attached — marker and uid tag rewritten to this cluster, the old uid recorded.
#[tokio::test(flavor = "multi_thread")]
async fn another_namespaces_retained_tables_are_reattached_only_with_consent() {
    use aws_sdk_dynamodb::types::{AttributeValue, ScalarAttributeType, Tag};
    use lake_common::schema::{Authority, MarkerRange};
    let old = "0b3c5f3e-8a61-4c8e-9d2e-5f1b7a9c0d11";
    let name = unique("reattach");
    create_roles(&name).await;
    let ddb = dynamodb().await;
    let tables = [
        (format!("{NS}.{name}-registry"), Authority::Registry),
        (format!("{NS}.{name}-manifests"), Authority::Manifests),
    ];
    for (table, authority) in &tables {
        let schema = authority.key_schema();
        let range_type = match schema.range.attribute_type {
            lake_common::schema::AttributeType::N => ScalarAttributeType::N,
            lake_common::schema::AttributeType::S => ScalarAttributeType::S,
        };
        create_lake_table(table, schema.hash.name, (schema.range.name, range_type)).await;
        let key = authority.marker_key();
        let range = match key.range {
            MarkerRange::Number(n) => AttributeValue::N(n.to_string()),
            MarkerRange::String(s) => AttributeValue::S(s.to_owned()),
        };
        ddb.put_item()
            .table_name(table)
            .item(schema.hash.name, AttributeValue::S(key.hash.into()))
            .item(schema.range.name, range)
            .item("format", AttributeValue::S(authority.format().into()))
            .item("cluster", AttributeValue::S(old.into()))
            .send()
            .await
            .unwrap();
        let arn = ddb
            .describe_table()
            .table_name(table)
            .send()
            .await
            .unwrap()
            .table
            .unwrap()
            .table_arn
            .unwrap();
        let tag = |k: &str, v: &str| Tag::builder().key(k).value(v).build().unwrap();
        ddb.tag_resource()
            .resource_arn(arn)
            .tags(tag("lake.dev/cluster", "elsewhere/lake"))
            .tags(tag("lake.dev/cluster-uid", old))
            .send()
            .await
            .unwrap();
    }
    let owner = |table: String| {
        let ddb = ddb.clone();
        async move {
            let items = ddb.scan().table_name(&table).send().await.unwrap();
            let marker = items.items()[0]["cluster"].as_s().unwrap().clone();
            let arn = ddb
                .describe_table()
                .table_name(&table)
                .send()
                .await
                .unwrap()
                .table
                .unwrap()
                .table_arn
                .unwrap();
            let tags: BTreeMap<String, String> = ddb
                .list_tags_of_resource()
                .resource_arn(arn)
                .send()
                .await
                .unwrap()
                .tags()
                .iter()
                .map(|t| (t.key().to_owned(), t.value().to_owned()))
                .collect();
            (marker, tags)
        }
    };
    let spec = format!("  tables:\n    reattachFrom: {old}\n");
    let no_adopt = Allowlist::parse(
        "namespaces:\n  data:\n    roles: [\"*-query-role\", \"*-metadata-role\"]\n    storage: [{bucket: \"*-bucket\"}]\n",
        "tests",
    )
    .unwrap();
    let h = harness_with(cluster_yaml(&name, &spec), no_adopt).await;
    let recording = moto().start_recording();
    h.reconcile().await;
    let log = recording.stop();
    let (status, reason, message) = h.condition("TablesReady").await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "ReattachRefused")
    );
    assert!(message.contains("\"elsewhere\""), "{message}");
    let written: Vec<_> = requests_signed_by(&log, &h.key)
        .into_iter()
        .filter(|r| tables.iter().any(|(t, _)| &r.resource == t) && !r.is_read())
        .collect();
    assert!(written.is_empty(), "refused, yet written: {written:?}");
    for (table, _) in &tables {
        let (marker, tags) = owner(table.clone()).await;
        assert_eq!(marker, old);
        assert_eq!(tags["lake.dev/cluster-uid"], old);
    }

    // The administrator consents (adopt: true): re-attached.
    let consenting = Harness {
        ctx: context_with(&h.key, test_allowlist()).await,
        ..h
    };
    consenting.reconcile().await;
    assert_eq!(consenting.condition("TablesReady").await.0, "True");
    let uid = consenting.cluster().await.metadata.uid.unwrap();
    for (table, _) in &tables {
        let (marker, tags) = owner(table.clone()).await;
        assert_eq!(marker, uid, "{table}");
        assert_eq!(tags["lake.dev/cluster-uid"], uid, "{table}");
        assert_eq!(tags["lake.dev/reattached-from"], old, "{table}");
    }
}
