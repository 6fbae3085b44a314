//! What a pass refuses or leaves alone: bad specs, a wrong key schema, a paused cluster, and
//! who may reach metadata.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn bad_specs_never_reach_aws() {
    // Specs the CRD's schema and CEL rules let through but the operator refuses (what the API
    // server itself refuses is `apiserver::crd_rules_are_enforced_by_the_api_server`).
    type Edit = fn(&mut LakeCluster);
    let cases: [(&str, Edit, &str); 6] = [
        (
            "a bucket name S3 refuses",
            |c| c.spec.storage.s3.as_mut().unwrap().bucket = "Bad_Bucket".into(),
            "spec.storage.s3.bucket",
        ),
        (
            "a prefix with a '..' segment",
            |c| c.spec.storage.s3.as_mut().unwrap().prefix = "wh/../other".into(),
            "spec.storage.s3.prefix",
        ),
        (
            "a blank image",
            |c| c.spec.query.image = "  ".into(),
            "spec.query.image",
        ),
        (
            "a malformed role ARN",
            |c| c.spec.iam.as_mut().unwrap().query_role = "arn:aws:iam::12:role/x".into(),
            "spec.iam.queryRole",
        ),
        (
            "a client namespace that is no namespace name",
            |c| c.spec.metadata.client_namespaces = vec!["writers".into(), "Bad_NS".into()],
            "spec.metadata.clientNamespaces[1]",
        ),
        (
            "DynamoDB tables on local storage",
            |c| {
                c.spec.storage.s3 = None;
                c.spec.storage.local =
                    serde_json::from_value(json!({"path": "/var/lib/lake"})).unwrap();
                c.spec.tables.registry = Some("some-registry".into());
            },
            "spec.tables",
        ),
    ];
    for (case, edit, field) in cases {
        let name = unique("bad");
        let mut cluster = cluster_yaml(&name, "");
        edit(&mut cluster);
        let h = harness(cluster).await;
        let recording = moto().start_recording();
        let action = h.reconcile().await;
        let log = recording.stop();
        assert_eq!(
            action,
            Action::await_change(),
            "{case}: a spec error is terminal"
        );
        let (status, reason, message) = h.condition("PlanValid").await;
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", "InvalidSpec"),
            "{case}"
        );
        assert!(
            message.contains(field),
            "{case}: {message} does not name {field}"
        );
        assert_eq!(h.condition("Ready").await.1, "PlanInvalid");
        let calls = requests_signed_by(&log, &h.key);
        assert!(calls.is_empty(), "{case}: AWS was called: {calls:?}");
        // Nothing but the status was written to Kubernetes.
        assert_eq!(h.versions().await.len(), 1, "{case}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_table_with_the_wrong_key_schema_is_a_terminal_condition_and_left_alone() {
    let name = unique("adopt");
    create_roles(&name).await;
    let ddb = dynamodb().await;
    let registry = format!("{NS}.{name}-registry");
    ddb.create_table()
        .table_name(&registry)
        .key_schema(
            aws_sdk_dynamodb::types::KeySchemaElement::builder()
                .attribute_name("id")
                .key_type(aws_sdk_dynamodb::types::KeyType::Hash)
                .build()
                .unwrap(),
        )
        .attribute_definitions(
            aws_sdk_dynamodb::types::AttributeDefinition::builder()
                .attribute_name("id")
                .attribute_type(aws_sdk_dynamodb::types::ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .billing_mode(aws_sdk_dynamodb::types::BillingMode::PayPerRequest)
        .send()
        .await
        .unwrap();
    let h = harness(cluster_yaml(&name, "")).await;
    let recording = moto().start_recording();
    let action = h.reconcile().await;
    let log = recording.stop();
    assert_eq!(action, Action::await_change());
    let (status, reason, message) = h.condition("TablesReady").await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "KeySchemaMismatch")
    );
    // The tenant learns the name it chose is taken, not what the table holds.
    assert!(
        message.contains(&registry) && message.contains("another key schema"),
        "{message}"
    );
    assert!(
        !message.contains("HASH id"),
        "the foreign key schema leaked: {message}"
    );
    let touched: Vec<_> = requests_signed_by(&log, &h.key)
        .into_iter()
        .filter(|r| r.resource == registry && !r.is_read())
        .collect();
    assert!(
        touched.is_empty(),
        "the foreign table was modified: {touched:?}"
    );
    let t = ddb
        .describe_table()
        .table_name(&registry)
        .send()
        .await
        .unwrap()
        .table
        .unwrap();
    assert_ne!(t.deletion_protection_enabled(), Some(true));
    assert!(
        ddb.scan()
            .table_name(&registry)
            .send()
            .await
            .unwrap()
            .items()
            .is_empty(),
        "no marker was written"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn paused_stops_mutation_but_not_deletion() {
    let name = unique("pz");
    create_roles(&name).await;
    let h = harness(cluster_yaml(&name, "  deletionPolicy: Delete\n")).await;
    h.reconcile().await;
    h.roll_out().await;
    h.reconcile().await;
    assert_eq!(h.condition("Ready").await.0, "True");

    // Paused: a spec change is not applied, nothing is written, the status says so.
    h.patch_spec(json!({"paused": true, "query": {"replicas": 5}}))
        .await;
    let recording = moto().start_recording();
    let (action, written) = h.writes_during(h.reconcile()).await;
    let log = recording.stop();
    assert_eq!(action, Action::await_change());
    assert!(
        requests_signed_by(&log, &h.key).is_empty(),
        "paused but AWS was called"
    );
    assert_eq!(
        written,
        [format!("patch lakeclusters/status {name}")],
        "only the status was written"
    );
    assert_eq!(h.deployment("query").await.spec.replicas, Some(2));
    let (status, reason, _) = h.condition("Ready").await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "WorkloadsNotReady")
    );
    assert_eq!(
        h.condition("WorkloadsReady").await.1,
        "ReconciliationPaused"
    );

    // Deleted while paused: the finalizer still runs — policies off the roles, tables deleted
    // (deletionPolicy: Delete) — and the LakeCluster goes.
    let deleting = h.deleting().await;
    let cluster = deleting.cluster().await;
    assert!(cluster.spec.paused && cluster.metadata.deletion_timestamp.is_some());
    reconcile(Arc::new(cluster), deleting.ctx.clone())
        .await
        .unwrap();
    assert!(
        deleting.clusters.get_opt(&name).await.unwrap().is_none(),
        "the finalizer was released"
    );
    let ddb = dynamodb().await;
    for table in [
        format!("{NS}.{name}-registry"),
        format!("{NS}.{name}-manifests"),
    ] {
        assert!(
            ddb.describe_table()
                .table_name(&table)
                .send()
                .await
                .is_err(),
            "{table} still exists"
        );
    }
    let policy = iam()
        .await
        .get_role_policy()
        .role_name(format!("{name}-query-role"))
        .policy_name(format!("lake.{NS}.{name}"))
        .send()
        .await;
    assert!(policy.is_err(), "the inline policy is still on the role");
}

/// Metadata (the writer) admits connections only from the cluster's query pods and the pods of
/// the namespaces `spec.metadata.clientNamespaces` names, on its Flight port.
#[tokio::test(flavor = "multi_thread")]
async fn metadata_admits_only_query_pods_and_named_namespaces() {
    let name = unique("np");
    create_roles(&name).await;
    let mut cluster = cluster_yaml(&name, "");
    cluster.spec.metadata.client_namespaces = vec!["writers".into()];
    let h = harness(cluster).await;
    h.reconcile().await;
    let policy =
        Api::<k8s_openapi::api::networking::v1::NetworkPolicy>::namespaced(h.client.clone(), NS)
            .get(&format!("{name}-metadata"))
            .await
            .unwrap();
    let spec = serde_json::to_value(policy.spec.unwrap()).unwrap();
    assert_eq!(
        spec["podSelector"]["matchLabels"]["app.kubernetes.io/component"],
        "metadata"
    );
    assert_eq!(spec["policyTypes"], json!(["Ingress"]));
    let rules = spec["ingress"].as_array().unwrap();
    assert_eq!(rules.len(), 1, "{spec}");
    assert_eq!(
        rules[0]["ports"],
        json!([{"port": 8816, "protocol": "TCP"}])
    );
    let from = rules[0]["from"].as_array().unwrap();
    assert_eq!(from.len(), 2, "{spec}");
    assert_eq!(
        from[0]["podSelector"]["matchLabels"],
        json!({"app.kubernetes.io/component": "query", "app.kubernetes.io/instance": name,
               "app.kubernetes.io/name": "lake"})
    );
    assert!(
        from[0].get("namespaceSelector").is_none(),
        "query pods of this namespace only"
    );
    assert_eq!(
        from[1]["namespaceSelector"]["matchExpressions"],
        json!([{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["writers"]}])
    );
}
