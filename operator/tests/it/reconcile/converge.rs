//! From a new LakeCluster to Ready, and passes that then write nothing.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn new_cluster_reaches_ready_and_converged_reconciles_write_nothing() {
    let name = unique("lk");
    create_roles(&name).await;
    let h = harness(cluster_yaml(&name, "")).await;
    let uid = h.cluster().await.metadata.uid.unwrap();

    // First pass: tables, policies, objects; the Deployments are not rolled out yet.
    let recording = moto().start_recording();
    h.reconcile().await;
    let log = recording.stop();
    assert!(
        h.cluster()
            .await
            .metadata
            .finalizers
            .unwrap()
            .contains(&FINALIZER.to_owned())
    );
    let (status, reason, message) = h.condition("WorkloadsReady").await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "RollingOut"),
        "{message}"
    );
    assert_eq!(h.condition("TablesReady").await.0, "True");
    assert_eq!(h.condition("PoliciesReady").await.0, "True");
    assert_eq!(h.condition("Ready").await.0, "False");
    let first = requests_signed_by(&log, &h.key);
    assert!(first.iter().any(|r| r.action == "CreateTable"), "{first:?}");

    // The tables: key schemas, on-demand, PITR, deletion protection, tags, markers.
    let ddb = dynamodb().await;
    for (table, hash, range, format) in [
        (
            format!("{NS}.{name}-registry"),
            "pk",
            "sk",
            "lake-registry/v1",
        ),
        (
            format!("{NS}.{name}-manifests"),
            "base_uri",
            "version",
            "lake-manifests/v2",
        ),
    ] {
        let t = ddb
            .describe_table()
            .table_name(&table)
            .send()
            .await
            .unwrap()
            .table
            .unwrap();
        let keys: Vec<_> = t
            .key_schema()
            .iter()
            .map(|k| {
                (
                    k.attribute_name().to_owned(),
                    k.key_type().as_str().to_owned(),
                )
            })
            .collect();
        assert_eq!(
            keys,
            [
                (hash.to_owned(), "HASH".to_owned()),
                (range.to_owned(), "RANGE".to_owned())
            ]
        );
        assert_eq!(t.deletion_protection_enabled(), Some(true), "{table}");
        assert_eq!(
            t.billing_mode_summary()
                .and_then(|b| b.billing_mode())
                .map(|b| b.as_str()),
            Some("PAY_PER_REQUEST")
        );
        let pitr = ddb
            .describe_continuous_backups()
            .table_name(&table)
            .send()
            .await
            .unwrap();
        assert_eq!(
            pitr.continuous_backups_description()
                .unwrap()
                .point_in_time_recovery_description()
                .unwrap()
                .point_in_time_recovery_status()
                .unwrap()
                .as_str(),
            "ENABLED"
        );
        let tags = ddb
            .list_tags_of_resource()
            .resource_arn(t.table_arn().unwrap())
            .send()
            .await
            .unwrap();
        let tags: BTreeMap<_, _> = tags
            .tags()
            .iter()
            .map(|t| (t.key().to_owned(), t.value().to_owned()))
            .collect();
        assert_eq!(tags["lake.dev/cluster-uid"], uid);
        assert_eq!(tags["lake.dev/cluster"], format!("{NS}/{name}"));
        let scan = ddb.scan().table_name(&table).send().await.unwrap();
        let marker = &scan.items()[0];
        assert_eq!(marker["format"].as_s().unwrap(), format);
        assert_eq!(marker["cluster"].as_s().unwrap(), &uid);
    }
    // The policies, on the roles.
    let iam = iam().await;
    for (role, must, must_not) in [
        ("query", "dynamodb:GetItem", "dynamodb:PutItem"),
        ("metadata", "dynamodb:PutItem", "\"*\""),
    ] {
        let doc = iam
            .get_role_policy()
            .role_name(format!("{name}-{role}-role"))
            .policy_name(format!("lake.{NS}.{name}"))
            .send()
            .await
            .unwrap();
        let text = percent_encoding::percent_decode_str(doc.policy_document())
            .decode_utf8()
            .unwrap()
            .into_owned();
        assert!(
            text.contains(must) && !text.contains(must_not),
            "{role}: {text}"
        );
    }
    // The objects: fourteen applied and the CA ConfigMap, owned by the cluster; query's config
    // has no registry table.
    let versions = h.versions().await;
    assert_eq!(versions.len(), 16, "{versions:?}");
    let query_config = Api::<ConfigMap>::namespaced(h.client.clone(), NS)
        .get(&format!("{name}-query"))
        .await
        .unwrap();
    let data = query_config.data.unwrap();
    assert!(
        !data.contains_key("LAKE_REGISTRY_DYNAMODB_TABLE"),
        "{data:?}"
    );
    assert_eq!(data["LAKE_CLUSTER_ID"], uid);
    assert_eq!(query_config.metadata.owner_references.unwrap()[0].uid, uid);
    let sa = Api::<ServiceAccount>::namespaced(h.client.clone(), NS)
        .get(&format!("{name}-query"))
        .await
        .unwrap();
    assert!(
        sa.metadata.annotations.unwrap()["eks.amazonaws.com/role-arn"]
            .ends_with(&format!(":role/{name}-query-role"))
    );

    // The Deployments roll out: Ready, with endpoints, table ARNs and policy digests.
    h.roll_out().await;
    assert!(
        matches!(h.reconcile().await, a if a == Action::requeue(std::time::Duration::from_secs(300)))
    );
    assert_eq!(h.condition("Ready").await.0, "True");
    let status = h.cluster().await.status.unwrap();
    assert_eq!(
        status.observed_generation,
        h.cluster().await.metadata.generation
    );
    assert!(
        status
            .conditions
            .iter()
            .all(|c| c.observed_generation == status.observed_generation)
    );
    assert_eq!(
        status.endpoints.unwrap().query.unwrap(),
        format!("grpc+tls://{name}-query.{NS}.svc:8815")
    );
    let tables = status.tables.unwrap();
    assert!(
        tables
            .manifest
            .unwrap()
            .arn
            .unwrap()
            .ends_with(&format!("table/{NS}.{name}-manifests"))
    );
    assert!(!tables.registry.unwrap().adopted);
    let policies = status.policies.unwrap();
    let query_policy = policies.query.unwrap();
    assert_eq!(query_policy.digest.len(), 64);
    assert!(
        query_policy
            .trust_policy
            .unwrap()
            .contains(&format!("system:serviceaccount:{NS}:{name}-query"))
    );
    let events = h.events().await;
    assert!(
        events.iter().any(|e| e.reason.as_deref() == Some("Ready")),
        "{events:?}"
    );
    let event_count = events.len();

    // Converged: another pass writes nothing, anywhere.
    let recording = moto().start_recording();
    let (_, written) = h.writes_during(h.reconcile()).await;
    let log = recording.stop();
    let requests = requests_signed_by(&log, &h.key);
    assert!(!requests.is_empty(), "the pass observed AWS");
    assert!(
        writes(&requests).is_empty(),
        "a converged pass wrote to AWS: {:?}",
        writes(&requests)
    );
    assert!(
        written.is_empty(),
        "a converged pass wrote to Kubernetes: {written:?}"
    );
    assert_eq!(
        h.events().await.len(),
        event_count,
        "events only on transitions"
    );

    // Replicas and image: only the query Deployment changes; its config hash does not.
    let hash_before = config_hash(&h.deployment("query").await);
    h.patch_spec(json!({"query": {"replicas": 3, "image": "ghcr.io/acme/lake:2"}}))
        .await;
    let recording = moto().start_recording();
    let (_, written) = h.writes_during(h.reconcile()).await;
    let log = recording.stop();
    assert!(
        writes(&requests_signed_by(&log, &h.key)).is_empty(),
        "a replica change wrote to AWS"
    );
    assert_eq!(
        written,
        [
            format!("patch deployments {name}-query"),
            format!("patch lakeclusters/status {name}")
        ],
        "only the query Deployment (and the status) was written"
    );
    let query = h.deployment("query").await;
    assert_eq!(query.spec.replicas, Some(3));
    assert_eq!(config_hash(&query), hash_before);
    assert_eq!(h.condition("WorkloadsReady").await.1, "RollingOut");

    // A configuration change (the warehouse prefix) changes both ConfigMaps and rolls both
    // Deployments through their config-hash annotation.
    let metadata_hash = config_hash(&h.deployment("metadata").await);
    h.patch_spec(json!({"storage": {"s3": {"prefix": "wh2"}}}))
        .await;
    h.reconcile().await;
    assert_ne!(config_hash(&h.deployment("query").await), hash_before);
    assert_ne!(config_hash(&h.deployment("metadata").await), metadata_hash);
    let cm = Api::<ConfigMap>::namespaced(h.client.clone(), NS)
        .get(&format!("{name}-metadata"))
        .await
        .unwrap();
    assert_eq!(
        cm.data.unwrap()["LAKE_WAREHOUSE"],
        format!("s3://{name}-bucket/wh2")
    );
}

/// A local lake reconciles to one StatefulSet (its claim provisioned by the control plane) and
/// both roles' Services; once its pod is Ready the cluster is Ready without AWS or selftest
/// Jobs, and a converged pass writes nothing (the live StatefulSet, with the defaults the API
/// server adds to its claim template, matches the plan).
#[tokio::test(flavor = "multi_thread")]
async fn a_local_lake_is_one_stateful_set_that_converges() {
    use k8s_openapi::api::apps::v1::StatefulSet;
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    let name = unique("loc");
    let cluster: LakeCluster = serde_yaml::from_str(&format!(
        r#"
apiVersion: lake.dev/v1alpha1
kind: LakeCluster
metadata: {{name: {name}, namespace: {NS}}}
spec:
  storage: {{local: {{path: /var/lib/lake, size: 16Mi}}}}
  query: {{image: ghcr.io/acme/lake:1}}
  metadata: {{image: ghcr.io/acme/lake:1}}
"#
    ))
    .unwrap();
    let h = harness(cluster).await;
    let recording = moto().start_recording();
    h.reconcile().await;
    let sets: Api<StatefulSet> = Api::namespaced(h.client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), NS);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(h.client.clone(), NS);
    let set = format!("{name}-local");
    let pod = format!("{set}-0");
    // The StatefulSet controller creates the claim, the provisioner binds it, the scheduler
    // binds the pod; the test marks the pod Ready as its kubelet would.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let bound = pods
            .get_opt(&pod)
            .await
            .unwrap()
            .is_some_and(|p| p.spec.is_some_and(|s| s.node_name.is_some()));
        if bound {
            pods.patch_status(
                &pod,
                &PatchParams::default(),
                &Patch::Strategic(&lake_testkit::ready_pod_status()),
            )
            .await
            .unwrap();
            let status = sets.get(&set).await.unwrap().status.unwrap_or_default();
            if status.available_replicas == Some(1) && status.current_revision.is_some() {
                break;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{pod} not bound and available after 60 s: {:?}",
            sets.get(&set).await.unwrap().status
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let claim = claims.get(&format!("data-{pod}")).await.unwrap();
    assert_eq!(claim.status.and_then(|s| s.phase).as_deref(), Some("Bound"));
    h.reconcile().await;
    assert_eq!(h.condition("Ready").await.0, "True");
    assert_eq!(h.condition("TablesReady").await.1, "Embedded");
    let status = h.cluster().await.status.unwrap();
    assert!(
        !status
            .conditions
            .iter()
            .any(|c| c.type_ == "SelfTestPassed"),
        "no selftest Jobs for a local lake: {:?}",
        status.conditions
    );
    let deployments: Api<Deployment> = Api::namespaced(h.client.clone(), NS);
    let selector = format!("app.kubernetes.io/instance={name}");
    assert!(
        deployments
            .list(&ListParams::default().labels(&selector))
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert!(
        requests_signed_by(&recording.stop(), &h.key).is_empty(),
        "a local lake reaches no AWS"
    );
    let (_, written) = h.writes_during(h.reconcile()).await;
    assert!(
        written.is_empty(),
        "a converged pass wrote to Kubernetes: {written:?}"
    );
}
