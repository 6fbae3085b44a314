//! Migrations that must not start or must stop, with nothing deployed and nothing lost.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn migration_verify_failure_changes_nothing() {
    let legacy = legacy_lake(3, 2, 1_500).await;
    let before = content(&legacy.table).await;
    let h = migrating(&legacy, "Automatic").await;
    kill_when(&h, |m| m.segments.iter().any(|s| s.done))
        .await
        .expect("killed once a segment was copied");
    // A copied item is corrupted in the split manifest table.
    let (manifests, _) = tables(&h);
    let victim = scan(&manifests)
        .await
        .into_iter()
        .find(|i| {
            i["base_uri"]
                .as_s()
                .is_ok_and(|b| !b.starts_with("__lake__"))
        })
        .unwrap();
    dynamodb()
        .await
        .update_item()
        .table_name(&manifests)
        .key("base_uri", victim["base_uri"].clone())
        .key("version", victim["version"].clone())
        .update_expression("SET #p = :p")
        .expression_attribute_names("#p", "path")
        .expression_attribute_values(":p", AttributeValue::S("corrupted".into()))
        .send()
        .await
        .unwrap();
    h.reconcile().await;
    let status = migration(&h).await;
    assert_eq!(status.phase, MigrationPhase::Failed, "{status:?}");
    assert_eq!(status.failed_in, Some(MigrationPhase::Verifying));
    let (state, reason, message) = h.condition("MigrationComplete").await;
    assert_eq!(
        (state.as_str(), reason.as_str()),
        ("False", "MigrationFailed")
    );
    assert!(
        message.contains("differs from the legacy item")
            && message.contains("nothing was cut over"),
        "{message}"
    );
    assert_eq!(h.condition("Ready").await.0, "False");
    assert_eq!(h.condition("WorkloadsReady").await.1, "MigrationInProgress");
    // Terminal: another pass changes nothing, and no workload was ever pointed at the tables.
    h.reconcile().await;
    assert_eq!(migration(&h).await, status);
    let deployments: Api<Deployment> = Api::namespaced(h.client.clone(), NS);
    let ours = ListParams::default().labels(&format!("app.kubernetes.io/instance={}", h.name));
    assert!(deployments.list(&ours).await.unwrap().items.is_empty());
    assert_eq!(content(&legacy.table).await, before, "the source changed");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_source_table_is_reported_and_nothing_is_deployed() {
    let name = unique("nosrc");
    create_roles(&name).await;
    let h = harness(cluster_yaml(
        &name,
        "  migration:\n    sourceTable: no-such-v1-table\n    approval: Automatic\n",
    ))
    .await;
    let cluster = Arc::new(h.cluster().await);
    let failed = reconcile(cluster, h.ctx.clone()).await;
    assert!(failed.is_err(), "the pass is retried");
    let (state, reason, message) = h.condition("MigrationComplete").await;
    assert_eq!(
        (state.as_str(), reason.as_str()),
        ("False", "MigrationError")
    );
    assert!(message.contains("no-such-v1-table"), "{message}");
    assert_eq!(h.condition("WorkloadsReady").await.1, "MigrationInProgress");
    let deployments: Api<Deployment> = Api::namespaced(h.client.clone(), NS);
    let ours = ListParams::default().labels(&format!("app.kubernetes.io/instance={}", h.name));
    assert!(deployments.list(&ours).await.unwrap().items.is_empty());
}

/// A migration never copies into a lake in use: split tables that hold data (here an adopted
/// registry with a namespace in it) stop it in Pending, before anything is written.
#[tokio::test(flavor = "multi_thread")]
async fn a_migration_into_tables_that_hold_data_never_starts() {
    use aws_sdk_dynamodb::types::ScalarAttributeType;
    let legacy = legacy_lake(1, 1, 0).await;
    let name = unique("inuse");
    let registry = format!("{NS}.{name}-registry");
    super::super::reconcile::create_lake_table(&registry, "pk", ("sk", ScalarAttributeType::S))
        .await;
    dynamodb()
        .await
        .put_item()
        .table_name(&registry)
        .item("pk", AttributeValue::S("NAMESPACES".into()))
        .item("sk", AttributeValue::S("live".into()))
        .send()
        .await
        .unwrap();
    let h = migrating_as(&name, &legacy, "Automatic").await;
    h.reconcile().await;
    let status = migration(&h).await;
    assert_eq!(status.phase, MigrationPhase::Failed, "{status:?}");
    assert_eq!(status.failed_in, Some(MigrationPhase::Pending));
    assert!(
        status
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("already hold data"),
        "{status:?}"
    );
    let (manifests, _) = tables(&h);
    assert_eq!(content(&manifests).await.0, 0, "nothing was copied");
    assert_eq!(content(&registry).await.0, 1, "the live row is untouched");
}

/// The maintenance leases are lake's own rows, not data: a manifest table holding only them (a
/// pass ran while the migration waited) does not stop a migration as "already holds data".
#[tokio::test(flavor = "multi_thread")]
async fn maintenance_leases_are_not_data_to_a_migration() {
    use aws_sdk_dynamodb::types::ScalarAttributeType;
    let legacy = legacy_lake(1, 1, 0).await;
    let name = unique("leased");
    let manifests = format!("{NS}.{name}-manifests");
    super::super::reconcile::create_lake_table(
        &manifests,
        "base_uri",
        ("version", ScalarAttributeType::N),
    )
    .await;
    for partition in [
        "__lake__/maintenance-lease".to_owned(),
        format!(
            "__lake__/table-lease/{}/wh/people/contacts.lance",
            legacy.bucket
        ),
    ] {
        dynamodb()
            .await
            .put_item()
            .table_name(&manifests)
            .item("base_uri", AttributeValue::S(partition))
            .item("version", AttributeValue::N("0".into()))
            .item("holder", AttributeValue::S("a pass".into()))
            .item("expires_ms", AttributeValue::N("0".into()))
            .item("revision", AttributeValue::N("2".into()))
            .send()
            .await
            .unwrap();
    }
    let h = migrating_as(&name, &legacy, "Automatic").await;
    h.reconcile().await;
    let status = migration(&h).await;
    assert_ne!(status.phase, MigrationPhase::Failed, "{status:?}");
    assert_ne!(status.phase, MigrationPhase::Pending, "{status:?}");
}

/// A migration source is read with the operator's own rights: a namespace may name only the
/// sources the administrator lists. Any other — another cluster's manifest table included — is
/// refused before the operator reads, or even describes, it.
#[tokio::test(flavor = "multi_thread")]
async fn migration_sources_are_allowlisted() {
    use aws_sdk_dynamodb::types::ScalarAttributeType;
    let source = unique("someone-elses-manifests");
    super::super::reconcile::create_lake_table(
        &source,
        "base_uri",
        ("version", ScalarAttributeType::N),
    )
    .await;
    let allowlist = |sources: &str| {
        Allowlist::parse(
            &format!(
                "namespaces:\n  data:\n    roles: [\"*-query-role\", \"*-metadata-role\"]\n    storage: [{{bucket: \"*-bucket\"}}]\n    migrationSources: [{sources}]\n"
            ),
            "test allowlist",
        )
        .unwrap()
    };
    let name = unique("srcallow");
    create_roles(&name).await;
    let spec = format!("  migration:\n    sourceTable: {source}\n    approval: Manual\n");
    let h = harness_with(cluster_yaml(&name, &spec), allowlist("lake-v1-*")).await;
    let recording = moto().start_recording();
    assert_eq!(h.reconcile().await, Action::await_change());
    let log = recording.stop();
    let (status, reason, message) = h.condition("PlanValid").await;
    assert_eq!((status.as_str(), reason.as_str()), ("False", "InvalidSpec"));
    assert!(message.contains("spec.migration.sourceTable"), "{message}");
    let calls = requests_signed_by(&log, &h.key);
    assert!(calls.is_empty(), "AWS was called: {calls:?}");
    assert!(h.cluster().await.status.unwrap().migration.is_none());

    // Listed, the same source is read: the migration starts (and, its table being empty, runs).
    let name = unique("srcallow");
    create_roles(&name).await;
    let h = harness_with(
        cluster_yaml(&name, &spec),
        allowlist(&format!("\"{source}\"")),
    )
    .await;
    h.reconcile().await;
    assert_eq!(h.condition("PlanValid").await.0, "True");
    let status = migration(&h).await;
    assert_ne!(status.phase, MigrationPhase::Pending, "{status:?}");
    assert_ne!(status.phase, MigrationPhase::Failed, "{status:?}");
}

/// A source that is not a lake v1 table (another key schema) stops the migration in Pending,
/// saying why, before anything is copied.
#[tokio::test(flavor = "multi_thread")]
async fn a_source_with_another_key_schema_is_refused() {
    use aws_sdk_dynamodb::types::ScalarAttributeType;
    let source = unique("not-v1");
    super::super::reconcile::create_lake_table(&source, "pk", ("sk", ScalarAttributeType::S)).await;
    let name = unique("wrongsrc");
    create_roles(&name).await;
    let h = harness(cluster_yaml(
        &name,
        &format!("  migration:\n    sourceTable: {source}\n    approval: Automatic\n"),
    ))
    .await;
    h.reconcile().await;
    let status = migration(&h).await;
    assert_eq!(status.phase, MigrationPhase::Failed, "{status:?}");
    assert_eq!(status.failed_in, Some(MigrationPhase::Pending));
    let message = status.message.unwrap_or_default();
    assert!(message.contains("not a lake v1 table's"), "{message}");
    assert_eq!(h.condition("WorkloadsReady").await.1, "MigrationInProgress");
}

/// A malformed item in the legacy table (a registry row without its `sk`) stops the copy in
/// Copying, naming the item: not retried forever, not skipped, nothing cut over.
#[tokio::test(flavor = "multi_thread")]
async fn a_malformed_legacy_item_fails_the_copy_naming_it() {
    let legacy = legacy_lake(1, 1, 0).await;
    dynamodb()
        .await
        .put_item()
        .table_name(&legacy.table)
        .item(
            "base_uri",
            AttributeValue::S("__registry__/NS#broken/".into()),
        )
        .item("version", AttributeValue::N("0".into()))
        .item("pk", AttributeValue::S("NS#broken".into()))
        .send()
        .await
        .unwrap();
    let h = migrating(&legacy, "Automatic").await;
    h.reconcile().await;
    let status = migration(&h).await;
    assert_eq!(status.phase, MigrationPhase::Failed, "{status:?}");
    assert_eq!(status.failed_in, Some(MigrationPhase::Copying));
    let message = status.message.unwrap_or_default();
    assert!(
        message.contains("__registry__/NS#broken/") && message.contains("sk"),
        "{message}"
    );
    let (_, reason, _) = h.condition("MigrationComplete").await;
    assert_eq!(reason, "MigrationFailed");
    assert_eq!(h.condition("WorkloadsReady").await.1, "MigrationInProgress");
}
