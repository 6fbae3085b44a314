//! The MetaStore contract, run identically against DynamoDB (moto) and the embedded store.

use std::sync::Arc;

use lake_common::schema::Authority;
use lake_runtime::provision::create_dynamo_table;
use lake_runtime::store::{
    Condition, DynamoStore, EmbeddedStore, Item, Key, MetaRead, MetaStore, QueryRequest,
    REVISION_ATTR, SortKey, StoreError, Value, WriteOp, query_all,
};
use lake_testkit::unique;

use crate::support::CloudLake;

async fn dynamo() -> Arc<dyn MetaStore> {
    let lake = CloudLake::new().await;
    let table = unique("kv");
    let client = lake.aws.dynamodb();
    create_dynamo_table(&client, &table, Authority::Manifests.key_schema())
        .await
        .unwrap();
    Arc::new(DynamoStore::new(
        client,
        &table,
        Authority::Manifests.key_schema(),
    ))
}

fn embedded(dir: &tempfile::TempDir) -> Arc<dyn MetaStore> {
    Arc::new(EmbeddedStore::open(&dir.path().join("kv.redb"), true).unwrap())
}

fn row(partition: &str, version: u64) -> Item {
    Item::new(Key::new(partition, SortKey::N(version)))
        .with("path", Value::S(format!("p{version}")))
}

/// The behaviour every backend must have.
async fn contract(kv: Arc<dyn MetaStore>) {
    // Conditional put: first wins, second is a typed conflict.
    kv.put(&row("ds", 1), Condition::NotExists).await.unwrap();
    let err = kv
        .put(&row("ds", 1), Condition::NotExists)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::ConditionFailed { .. }), "{err}");
    let err = kv.put(&row("ds", 2), Condition::Exists).await.unwrap_err();
    assert!(matches!(err, StoreError::ConditionFailed { .. }), "{err}");
    assert_eq!(kv.get(&row("ds", 1).key).await.unwrap(), Some(row("ds", 1)));
    assert_eq!(kv.get(&row("ds", 2).key).await.unwrap(), None);

    // Batches larger than DynamoDB's 25-item limit, then paged queries both ways.
    let ops: Vec<WriteOp> = (2..=60).map(|v| WriteOp::Put(row("ds", v))).collect();
    kv.batch(&ops).await.unwrap();
    kv.put(&row("other", 7), Condition::Always).await.unwrap();
    let all = query_all(kv.as_ref(), "ds", 7).await.unwrap();
    let versions: Vec<u64> = all
        .iter()
        .map(|i| match i.key.sort {
            SortKey::N(n) => n,
            SortKey::S(_) => panic!("numeric keys"),
        })
        .collect();
    assert_eq!(versions, (1..=60).collect::<Vec<_>>());
    let last = kv.query("ds", &QueryRequest::last(2)).await.unwrap();
    assert_eq!(last.items, vec![row("ds", 60), row("ds", 59)]);
    let mut next = QueryRequest::last(2);
    next.start_after = last.next.clone();
    let page = kv.query("ds", &next).await.unwrap();
    assert_eq!(page.items, vec![row("ds", 58), row("ds", 57)]);
    let empty = kv.query("nothing", &QueryRequest::first(5)).await.unwrap();
    assert!(empty.items.is_empty() && empty.next.is_none());

    // Revisions: an item without the attribute is at revision 0; a write conditional on a
    // revision fails once another write moved it on, and for a missing item.
    let err = kv
        .put(&row("none", 1), Condition::Revision(0))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::ConditionFailed { .. }), "{err}");
    let revised = row("ds", 1).with(REVISION_ATTR, Value::N(1));
    kv.put(&revised, Condition::Revision(0)).await.unwrap();
    let err = kv
        .put(&row("ds", 1), Condition::Revision(0))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::ConditionFailed { .. }), "{err}");
    let err = kv
        .delete(&row("ds", 1).key, Condition::Revision(2))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::ConditionFailed { .. }), "{err}");
    kv.put(&row("ds", 1), Condition::Revision(1)).await.unwrap();
    assert_eq!(kv.get(&row("ds", 1).key).await.unwrap(), Some(row("ds", 1)));

    // Conditional delete.
    kv.delete(&row("ds", 1).key, Condition::Exists)
        .await
        .unwrap();
    let err = kv
        .delete(&row("ds", 1).key, Condition::Exists)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::ConditionFailed { .. }), "{err}");
    let deletes: Vec<WriteOp> = (2..=60)
        .map(|v| WriteOp::Delete(row("ds", v).key))
        .collect();
    kv.batch(&deletes).await.unwrap();
    assert!(query_all(kv.as_ref(), "ds", 10).await.unwrap().is_empty());
    assert_eq!(
        query_all(kv.as_ref(), "other", 10).await.unwrap(),
        vec![row("other", 7)]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn dynamodb_store_keeps_the_contract() {
    contract(dynamo().await).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn embedded_store_keeps_the_contract() {
    let dir = tempfile::tempdir().unwrap();
    contract(embedded(&dir)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn embedded_store_survives_reopen_and_is_shared_in_process() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.redb");
    let first = EmbeddedStore::open(&path, true).unwrap();
    let second = EmbeddedStore::open(&path, false).unwrap();
    first
        .put(&row("ds", 1), Condition::NotExists)
        .await
        .unwrap();
    assert_eq!(
        second.get(&row("ds", 1).key).await.unwrap(),
        Some(row("ds", 1))
    );
    drop((first, second));
    let reopened = EmbeddedStore::open(&path, false).unwrap();
    assert_eq!(
        reopened.get(&row("ds", 1).key).await.unwrap(),
        Some(row("ds", 1))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn missing_stores_are_typed_errors_and_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.redb");
    assert!(matches!(
        EmbeddedStore::open(&path, false),
        Err(StoreError::Missing { .. })
    ));
    assert!(
        !path.exists(),
        "opening without create must not create the file"
    );

    let lake = CloudLake::new().await;
    let kv = DynamoStore::new(
        lake.aws.dynamodb(),
        &unique("absent"),
        Authority::Manifests.key_schema(),
    );
    let err = kv.get(&row("ds", 1).key).await.unwrap_err();
    assert!(matches!(err, StoreError::Missing { .. }), "{err}");
    assert!(err.to_string().contains("absent"), "{err}");
}
