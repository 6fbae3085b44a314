//! The two contexts: a full round trip through the split authorities, the authority guards, and
//! query's lack of any catalog authority.

use lake_common::plan::{AuthorityPlan, AuthorityRequest, PlanFields, StorageRequest};
use lake_runtime::catalog::CatalogError;
use lake_runtime::context::{ContextError, MetadataContext, QueryContext};
use lake_runtime::manifest::AuthorityError;
use lake_runtime::write::WriteError;
use lake_testkit::{moto, unique};

use crate::support::{CloudLake, REGION, batch, ids, local_plan, options, schema, table};

#[tokio::test(flavor = "multi_thread")]
async fn cloud_round_trip_reads_through_the_query_plan_only() {
    let lake = CloudLake::new().await;
    let metadata = lake.metadata().await;
    let t = table("sales", "orders");
    metadata
        .registry()
        .create_namespace(&t.namespace)
        .await
        .unwrap();
    metadata
        .create_table(&t, schema(), vec![batch(0..100)])
        .await
        .unwrap();
    let committed = metadata
        .engine()
        .append(&t, schema(), vec![batch(100..150), batch(150..200)])
        .await
        .unwrap();
    assert_eq!((committed.version, committed.rows), (2, 100));
    let id_below_10 = datafusion::prelude::col("id").lt(datafusion::prelude::lit(10i64));
    let deleted = metadata
        .engine()
        .delete(&t, Some(id_below_10), std::time::Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!((deleted.version, deleted.rows), (3, 10));

    let entry = metadata
        .registry()
        .get_table(&t.namespace, &t.table)
        .await
        .unwrap();
    assert_eq!(entry.schema, schema());
    assert!(
        entry.location.ends_with("/wh/sales/orders.lance"),
        "{}",
        entry.location
    );

    // The query side gets the query plan and nothing else.
    let query = lake.query().await;
    assert_eq!(query.engine().list_tables().await.unwrap(), vec![t.clone()]);
    let latest = query.engine().open(&t, None).await.unwrap();
    assert_eq!(ids(&latest).await, (10..200).collect::<Vec<_>>());
    let first = query.engine().open(&t, Some(1)).await.unwrap();
    assert_eq!(ids(&first).await, (0..100).collect::<Vec<_>>());
    assert_eq!(query.engine().versions(&t).await.unwrap(), vec![1, 2, 3]);
    assert!(
        matches!(
            &query.stage().backend,
            lake_common::stage::StageBackend::S3 { prefix, .. } if prefix == "wh/_stage"
        ),
        "{:?}",
        query.stage()
    );

    // Compaction commits (a rewrite, and for materialised deletions a second commit); the data
    // is unchanged.
    let compacted = metadata
        .engine()
        .compact_fragments(&t, lake_runtime::maintain::DEFAULT_TARGET_ROWS)
        .await
        .unwrap();
    let compacted = compacted.version.expect("compaction committed nothing");
    assert!(compacted > 3, "compaction committed nothing: {compacted}");
    let after = query.engine().open(&t, None).await.unwrap();
    assert_eq!(ids(&after).await, (10..200).collect::<Vec<_>>());

    // Dropping unregisters it and removes its data; the name is free again.
    metadata.drop_table(&t).await.unwrap();
    assert!(matches!(
        metadata.registry().get_table(&t.namespace, &t.table).await,
        Err(CatalogError::NoSuchTable(..))
    ));
    assert!(query.engine().list_tables().await.unwrap().is_empty());
    metadata
        .create_table(&t, schema(), vec![batch(0..1)])
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn registry_rejects_duplicates_and_bad_names() {
    let dir = tempfile::tempdir().unwrap();
    let plan = local_plan(dir.path());
    let metadata = MetadataContext::open(&plan.metadata(), None, &options())
        .await
        .unwrap();
    let t = table("sales", "orders");
    let err = metadata
        .create_table(&t, schema(), vec![])
        .await
        .unwrap_err();
    assert!(
        matches!(err, WriteError::Catalog(CatalogError::NoSuchNamespace(_))),
        "{err}"
    );
    metadata
        .registry()
        .create_namespace(&t.namespace)
        .await
        .unwrap();
    assert!(matches!(
        metadata.registry().create_namespace(&t.namespace).await,
        Err(CatalogError::NamespaceExists(_))
    ));
    metadata
        .create_table(&t, schema(), vec![batch(0..3)])
        .await
        .unwrap();
    let err = metadata
        .create_table(&t, schema(), vec![batch(0..3)])
        .await
        .unwrap_err();
    assert!(
        matches!(err, WriteError::Catalog(CatalogError::TableExists(..))),
        "{err}"
    );
    assert_eq!(
        metadata.registry().list_namespaces().await.unwrap(),
        vec![t.namespace.clone()]
    );
    assert!(matches!(
        metadata.registry().drop_namespace(&t.namespace).await,
        Err(CatalogError::NamespaceNotEmpty(_))
    ));
}

#[tokio::test(flavor = "multi_thread")]
async fn query_context_has_no_catalog_authority() {
    let dir = tempfile::tempdir().unwrap();
    let plan = local_plan(dir.path());
    let registry_file = dir.path().join("_lake/registry.redb");

    // On a directory nobody provisioned, query refuses and creates nothing at all.
    let err = QueryContext::open(&plan.query(), None, &options())
        .await
        .unwrap_err();
    assert!(
        matches!(err, ContextError::LocalNotInitialised { .. }),
        "{err}"
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "query wrote to the data dir"
    );

    // Metadata provisions the lake and writes a table.
    {
        let metadata = MetadataContext::open(&plan.metadata(), None, &options())
            .await
            .unwrap();
        let t = table("sales", "orders");
        metadata
            .registry()
            .create_namespace(&t.namespace)
            .await
            .unwrap();
        metadata
            .create_table(&t, schema(), vec![batch(0..5)])
            .await
            .unwrap();
    }
    assert!(registry_file.exists());

    // Remove the registry: query must neither need it nor recreate it.
    std::fs::remove_file(&registry_file).unwrap();
    let query = QueryContext::open(&plan.query(), None, &options())
        .await
        .unwrap();
    let t = table("sales", "orders");
    assert_eq!(
        ids(&query.engine().open(&t, None).await.unwrap()).await,
        vec![0, 1, 2, 3, 4]
    );
    assert_eq!(query.engine().list_tables().await.unwrap(), vec![t]);
    assert!(
        !registry_file.exists(),
        "the query context created the registry file"
    );
}

fn query_plan_for(table: &str, lake: &CloudLake) -> AuthorityPlan {
    let endpoint = moto().endpoint().to_owned();
    AuthorityPlan::new(
        &AuthorityRequest {
            cluster_name: "guard".into(),
            storage: StorageRequest::S3 {
                bucket: lake.bucket.clone(),
                prefix: "wh".into(),
                region: REGION.into(),
                endpoint: Some(endpoint.clone()),
            },
            // The registry name is irrelevant to query; it only has to differ.
            registry_table: Some(unique("unused")),
            manifest_table: Some(table.to_owned()),
            legacy_table: None,
            dynamodb_endpoint: Some(endpoint),
        },
        &PlanFields::SPEC,
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn query_refuses_the_registry_table_naming_it_and_its_marker() {
    let lake = CloudLake::new().await;
    let plan = query_plan_for(&lake.registry_table(), &lake);
    let err = QueryContext::open(&plan.query(), Some(&lake.cluster), &options())
        .await
        .unwrap_err();
    let ContextError::Authority(AuthorityError::ForeignTable { found, .. }) = &err else {
        panic!("expected a foreign-table error, got {err}")
    };
    assert_eq!(
        found.as_ref().map(|m| m.format.as_str()),
        Some("lake-registry/v1")
    );
    let msg = err.to_string();
    assert!(
        msg.contains(&lake.registry_table()) && msg.contains("lake-registry/v1"),
        "{msg}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn query_refuses_another_clusters_manifest_table() {
    let lake = CloudLake::new().await;
    let other = CloudLake::new().await;
    let plan = query_plan_for(&other.manifest_table(), &lake);
    let err = QueryContext::open(&plan.query(), Some(&lake.cluster), &options())
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, ContextError::Authority(AuthorityError::Marker(_))),
        "{msg}"
    );
    assert!(
        msg.contains(&other.manifest_table()) && msg.contains(&other.cluster),
        "{msg}"
    );

    // And a table without any marker is refused too.
    let bare = unique("bare");
    lake_runtime::provision::create_dynamo_table(
        &lake.aws.dynamodb(),
        &bare,
        lake_common::schema::Authority::Manifests.key_schema(),
    )
    .await
    .unwrap();
    let plan = query_plan_for(&bare, &lake);
    let err = QueryContext::open(&plan.query(), Some(&lake.cluster), &options())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("has no lake marker"), "{err}");
}

/// A local lake with table `sales.<name>` holding `rows`: its directory, plan and metadata.
async fn local_table(
    name: &str,
    rows: std::ops::Range<i64>,
) -> (
    tempfile::TempDir,
    AuthorityPlan,
    MetadataContext,
    lake_runtime::engine::TableRef,
) {
    let dir = tempfile::tempdir().unwrap();
    let plan = local_plan(dir.path());
    let metadata = MetadataContext::open(&plan.metadata(), None, &options())
        .await
        .unwrap();
    let t = table("sales", name);
    metadata
        .registry()
        .create_namespace(&t.namespace)
        .await
        .unwrap();
    metadata
        .create_table(&t, schema(), vec![batch(rows)])
        .await
        .unwrap();
    (dir, plan, metadata, t)
}

/// A DROP that takes the table lock before an INSERT that already found the table registered:
/// the append must fail, not bring the dataset back (Lance's Append creates a missing dataset).
#[tokio::test(flavor = "multi_thread")]
async fn an_append_never_recreates_a_dropped_table() {
    let (dir, _plan, metadata, t) = local_table("gone", 0..3).await;
    metadata.drop_table(&t).await.unwrap();
    let err = metadata
        .engine()
        .append(&t, schema(), vec![batch(3..6)])
        .await
        .unwrap_err();
    assert!(
        matches!(err, lake_runtime::engine::EngineError::NotFound(_)),
        "{err}"
    );
    assert!(
        !dir.path().join("sales/gone.lance").exists(),
        "the dropped dataset came back"
    );
}

/// A writer died between recording its manifest (staged) and finalising it: the query role
/// reads the last finished version and writes nothing (finalising needs the object-store write
/// it is denied in the cloud); metadata finalises the commit, and query then sees it.
#[tokio::test(flavor = "multi_thread")]
async fn query_reads_the_last_finished_version_after_a_writer_died() {
    use lance_table::io::commit::external_manifest::ExternalManifestStore;
    let (dir, plan, metadata, t) = local_table("staged", 0..10).await;
    metadata
        .engine()
        .append(&t, schema(), vec![batch(10..20)])
        .await
        .unwrap();

    // Undo the finalisation of version 2: its manifest back at a staging path, its row too.
    let kv = std::sync::Arc::new(
        lake_runtime::store::EmbeddedStore::open(&dir.path().join("_lake/manifests.redb"), false)
            .unwrap(),
    );
    let manifests = lake_runtime::manifest::ManifestStore::new(kv);
    let base_uri = metadata.engine().warehouse().manifest_base_uri(&t);
    let (version, path) = manifests
        .get_latest_version(&base_uri)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(version, 2);
    let final_file = std::path::Path::new("/").join(&path);
    let staged = format!("{path}-0000dead");
    let size = std::fs::metadata(&final_file).unwrap().len();
    std::fs::rename(&final_file, std::path::Path::new("/").join(&staged)).unwrap();
    manifests
        .put_if_exists(&base_uri, 2, &staged, size, None)
        .await
        .unwrap();

    let query = QueryContext::open(&plan.query(), None, &options())
        .await
        .unwrap();
    let dataset = query.engine().open(&t, None).await.unwrap();
    assert_eq!(
        dataset.version().version,
        1,
        "query read the staged version"
    );
    assert_eq!(dataset.count_rows(None).await.unwrap(), 10);
    assert!(
        !final_file.exists(),
        "the query role finalised a commit (it wrote a manifest)"
    );
    // Time travel into the unfinished version: refused, and still nothing written.
    assert!(query.engine().open(&t, Some(2)).await.is_err());
    assert!(!final_file.exists(), "time travel finalised a commit");

    assert_eq!(metadata.finalise_staged().await.unwrap(), 1);
    assert!(final_file.exists(), "metadata did not finalise the commit");
    let dataset = query.engine().open(&t, None).await.unwrap();
    assert_eq!(dataset.count_rows(None).await.unwrap(), 20);
}
