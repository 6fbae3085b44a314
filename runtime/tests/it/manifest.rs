//! The Lance manifest store: the read-only adapter refuses every write before any KV call, and
//! dropping a table removes all of its manifest rows, page after page.

use std::sync::Arc;

use lake_common::schema::Authority;
use lake_runtime::engine::{Warehouse, WriteEngine};
use lake_runtime::manifest::{ManifestStore, ReadOnlyManifestStore, ReadOnlyViolation};
use lake_runtime::store::{DynamoStore, MetaRead, query_all};
use lance_table::io::commit::external_manifest::ExternalManifestStore;

use crate::support::{CloudLake, batch, schema, seed, table};

fn violation(err: &lance::Error) -> Option<&ReadOnlyViolation> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if let Some(v) = e.downcast_ref::<ReadOnlyViolation>() {
            return Some(v);
        }
        source = e.source();
    }
    None
}

#[tokio::test(flavor = "multi_thread")]
async fn read_only_adapter_refuses_every_write_and_leaves_the_table_unchanged() {
    let lake = CloudLake::new().await;
    let metadata = lake.metadata().await;
    let t = table("sales", "orders");
    seed(&metadata, &t, &[0..10, 10..20]).await;
    let base_uri = metadata.engine().warehouse().manifest_base_uri(&t);

    let before = lake.dump_manifest_table().await;
    assert!(before.len() >= 3, "marker + two versions: {before:?}");

    let kv: Arc<dyn MetaRead> = Arc::new(DynamoStore::new(
        lake.aws.dynamodb(),
        &lake.manifest_table(),
        Authority::Manifests.key_schema(),
    ));
    let adapter = ReadOnlyManifestStore::new(kv);
    let attempts = [
        adapter.put_if_not_exists(&base_uri, 3, "p", 1, None).await,
        adapter.put_if_exists(&base_uri, 2, "p", 1, None).await,
        adapter.delete(&base_uri).await,
        adapter.forget_version(&base_uri, 1, "id").await,
    ];
    for (attempt, operation) in attempts.iter().zip([
        "put_if_not_exists",
        "put_if_exists",
        "delete",
        "forget_version",
    ]) {
        let err = attempt.as_ref().expect_err("read-only adapter must refuse");
        let v = violation(err).unwrap_or_else(|| panic!("{operation}: untyped error {err}"));
        assert_eq!(v.operation, operation);
        assert_eq!(v.base_uri, base_uri);
    }
    // Reads still work.
    assert_eq!(
        adapter
            .get_latest_version(&base_uri)
            .await
            .unwrap()
            .map(|(v, _)| v),
        Some(2)
    );

    // A whole query context over the table: reading works, and nothing was written.
    let query = lake.query().await;
    let dataset = query.engine().open(&t, None).await.unwrap();
    assert_eq!(dataset.count_rows(None).await.unwrap(), 20);
    assert_eq!(
        lake.dump_manifest_table().await,
        before,
        "the manifest table changed"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn dropping_a_table_deletes_every_manifest_row_across_pages() {
    let lake = CloudLake::new().await;
    let metadata = lake.metadata().await;
    let t = table("sales", "events");
    let other = table("sales", "kept");
    metadata
        .registry()
        .create_namespace(&t.namespace)
        .await
        .unwrap();
    metadata
        .create_table(&t, schema(), vec![batch(0..1)])
        .await
        .unwrap();
    metadata
        .create_table(&other, schema(), vec![batch(0..1)])
        .await
        .unwrap();

    // A write engine whose deletes go three rows per page, over 8 versions: three pages.
    let kv = Arc::new(DynamoStore::new(
        lake.aws.dynamodb(),
        &lake.manifest_table(),
        Authority::Manifests.key_schema(),
    ));
    let warehouse: Warehouse = metadata.engine().warehouse().clone();
    let engine = WriteEngine::new(warehouse, ManifestStore::new(kv.clone()).with_page_size(3));
    for i in 1..8 {
        engine
            .append(&t, schema(), vec![batch(i..i + 1)])
            .await
            .unwrap();
    }
    let base_uri = engine.warehouse().manifest_base_uri(&t);
    assert_eq!(
        query_all(kv.as_ref(), &base_uri, 100).await.unwrap().len(),
        8
    );

    let deleted = engine.drop_table(&t).await.unwrap();
    assert_eq!(deleted, 8);
    assert!(
        query_all(kv.as_ref(), &base_uri, 100)
            .await
            .unwrap()
            .is_empty()
    );
    // The other table and the marker are untouched, and the dropped name can be reused.
    let other_uri = engine.warehouse().manifest_base_uri(&other);
    assert_eq!(
        query_all(kv.as_ref(), &other_uri, 100).await.unwrap().len(),
        1
    );
    assert!(
        lake.dump_manifest_table()
            .await
            .iter()
            .any(|r| r.contains("__lake__/authority"))
    );
    let again = engine
        .create(&t, schema(), vec![batch(100..101)])
        .await
        .unwrap();
    assert_eq!(again.version, 1);
}
