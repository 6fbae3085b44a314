//! Migrations that complete: every dataset preserved, the source never written, kills and
//! concurrent changes survived.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn migration_round_trip_preserves_every_dataset() {
    let started = Instant::now();
    // 20,000 items: the datasets' real commits, pointers and registry rows, and the history of
    // dropped datasets.
    let legacy = legacy_lake(6, 3, 19_963).await;
    assert_eq!(legacy.items, 20_000);
    eprintln!(
        "legacy table of {} items in {:?}",
        legacy.items,
        started.elapsed()
    );
    let source_before = content(&legacy.table).await;

    let h = migrating(&legacy, "Automatic").await;
    let migrating_since = Instant::now();
    let status = finish(&h).await;
    let took = migrating_since.elapsed();
    eprintln!(
        "migrated {} items ({} copied) in {took:?}: {:.0} items/s",
        legacy.items,
        status.copied_items,
        status.copied_items as f64 / took.as_secs_f64()
    );
    assert_eq!(h.condition("MigrationComplete").await.0, "True");
    assert_eq!(h.condition("Ready").await.0, "True");
    assert_copied_exactly(&h, &legacy).await;
    assert_eq!(
        content(&legacy.table).await,
        source_before,
        "the source changed"
    );

    // The query role, as the operator configured it, serves every dataset as before; pylance
    // reads each through the migrated manifest table at the same version with the same rows.
    let (manifests, _) = tables(&h);
    let query = serve_with(config(&h.client, &format!("{}-query", h.name)).await)
        .unwrap_or_else(|log| panic!("the migrated lake's query did not start:\n{log}"));
    let mut args = vec![
        "operator/tests/it/migration_check.py".to_owned(),
        query.url.clone(),
        query.token.clone(),
        pylance_options(),
        format!("{}/wh", legacy.bucket),
        legacy.source_manifests.clone(),
        manifests,
    ];
    args.extend(legacy.datasets.iter().cloned());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, out, err) = python(&args);
    assert!(ok, "{out}\n{err}\n{}", query.log());
    let checked: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(checked["datasets"], legacy.datasets.len());
    eprintln!("checked after the migration: {checked}");

    // The runtime never reads a v1 table: it refuses one, naming the migration.
    let mut vars = config(&h.client, &format!("{}-query", h.name)).await;
    vars.insert("LAKE_MANIFEST_DYNAMODB_TABLE".into(), legacy.table.clone());
    let refused = serve_with(vars).map(|_| ()).unwrap_err();
    assert!(refused.contains("docs/guides/migration.md"), "{refused}");
    eprintln!(
        "migration_round_trip_preserves_every_dataset: {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn migration_never_writes_the_source_table() {
    let legacy = legacy_lake(3, 2, 1_500).await;
    let before = content(&legacy.table).await;
    let h = migrating(&legacy, "Manual").await;
    let recording = moto().start_recording();
    h.reconcile().await;
    let status = migration(&h).await;
    assert_eq!(status.phase, MigrationPhase::AwaitingApproval, "{status:?}");
    let digest = status.verified_digest.clone().unwrap();
    let message = h.condition("MigrationComplete").await.2;
    assert!(message.contains(&digest), "{message}");
    let deployments: Api<Deployment> = Api::namespaced(h.client.clone(), NS);
    let ours = ListParams::default().labels(&format!("app.kubernetes.io/instance={}", h.name));
    assert!(
        deployments.list(&ours).await.unwrap().items.is_empty(),
        "workloads before the cutover"
    );

    // An approval of another digest is not one.
    let out = super::super::control::kubectl(
        &[
            "annotate",
            "lake",
            &h.name,
            "-n",
            NS,
            "lake.dev/approve-migration=0000000000000000",
        ],
        None,
    );
    assert!(out.status.success(), "{}", output_text(&out));
    h.reconcile().await;
    let status = migration(&h).await;
    assert_eq!(status.phase, MigrationPhase::AwaitingApproval);
    assert!(
        status
            .message
            .as_deref()
            .unwrap_or_default()
            .contains(&digest),
        "{status:?}"
    );
    // The approval as docs/guides/migration.md gives it.
    let kubectl_dir = lake_testkit::controlplane_tool("kubectl");
    let script = format!(
        "kubectl annotate lake {name} -n {NS} --overwrite \\\n  lake.dev/approve-migration=\"$(kubectl get lake {name} -n {NS} -o jsonpath='{{.status.migration.verifiedDigest}}')\"",
        name = h.name
    );
    let out = Command::new("sh")
        .args(["-c", &script])
        .env(
            "PATH",
            format!(
                "{}:{}",
                kubectl_dir.parent().unwrap().display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env("KUBECONFIG", lake_testkit::control_plane().kubeconfig())
        .output()
        .unwrap();
    assert!(out.status.success(), "{script}: {}", output_text(&out));
    let status = finish(&h).await;
    let log = recording.stop();
    assert_eq!(status.phase, MigrationPhase::Complete);
    assert_copied_exactly(&h, &legacy).await;

    let on_source: Vec<_> = requests_signed_by(&log, &h.key)
        .into_iter()
        .filter(|r| r.resource == legacy.table)
        .collect();
    assert!(!on_source.is_empty(), "the source was never read");
    // Its key schema, and its items: reads, nothing else.
    let others: Vec<_> = on_source
        .iter()
        .filter(|r| r.action != "Scan" && r.action != "DescribeTable")
        .collect();
    assert!(
        others.is_empty(),
        "only Scans and DescribeTable on the source: {others:?}"
    );
    assert_eq!(content(&legacy.table).await, before, "the source changed");
}

/// `lake-operator run` as a process for one namespace: its own ServiceAccount's token, the
/// emulator, an allowlist for the namespace, AWS calls signed with `key`.
struct OperatorProcess {
    child: Child,
    _dir: tempfile::TempDir,
}

impl OperatorProcess {
    fn start(namespace: &str, key: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = super::super::control::operator_kubeconfig(dir.path());
        let allowlist = dir.path().join("allowlist.yaml");
        std::fs::write(
            &allowlist,
            format!(
                "namespaces:\n  {namespace}:\n    roles: [\"*-query-role\", \"*-metadata-role\"]\n    storage: [{{bucket: \"*\"}}]\n    tables: [\"*\"]\n    migrationSources: [\"*\"]\n"
            ),
        )
        .unwrap();
        // Its metrics are not read here: any free port.
        let child = Command::new(env!("CARGO_BIN_EXE_lake-operator"))
            .args([
                "run",
                "--namespace",
                namespace,
                "--metrics-addr",
                "127.0.0.1:0",
            ])
            .args(["--aws-endpoint", moto().endpoint(), "--allowlist"])
            .arg(&allowlist)
            .env("KUBECONFIG", &kubeconfig)
            .env("AWS_ACCESS_KEY_ID", key)
            .env("AWS_SECRET_ACCESS_KEY", "testing")
            .env("AWS_REGION", Moto::REGION)
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("RUST_LOG", "warn,kube_client::client::tls=error")
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        Self { child, _dir: dir }
    }

    /// SIGKILL: no cleanup, no last write.
    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A real operator process is killed (SIGKILL) in every phase of a migration — Pending,
/// Copying mid-segment, Verifying, AwaitingApproval, CuttingOver — and another started each
/// time: the migration resumes from what was saved (the copy from its checkpoints, not from
/// the start), and ends with every item copied exactly once.
#[tokio::test(flavor = "multi_thread")]
async fn migration_resumes_after_a_kill_in_every_phase() {
    // Two pages per segment at least, so a kill can land inside one.
    let legacy = legacy_lake(3, 2, 4_800).await;
    let ns: &'static str = Box::leak(unique("migkill").into_boxed_str());
    super::super::control::namespace(ns);
    let name = unique("dst");
    create_roles(&name).await;
    let mut cluster = cluster_yaml(
        &name,
        &format!(
            "  migration:\n    sourceTable: {}\n    approval: Manual\n",
            legacy.table
        ),
    );
    cluster.metadata.namespace = Some(ns.to_owned());
    cluster.spec.storage.s3.as_mut().unwrap().bucket = legacy.bucket.clone();
    let admin = super::super::control::admin_client().await;
    let clusters: Api<lake_operator::crd::LakeCluster> = Api::namespaced(admin.clone(), ns);
    clusters
        .create(&kube::api::PostParams::default(), &cluster)
        .await
        .unwrap();
    let key = unique("MIGKILL").to_uppercase().replace('-', "");
    let status = || saved(&clusters, &name);
    // Starts an operator and kills it once what it saved is `at`; returns what it saved then.
    let kill_at = |what: &'static str, seconds: u64, at: fn(&MigrationStatus) -> bool| {
        kill_operator_when(&clusters, &name, ns, &key, what, seconds, at)
    };
    let until = |what: &'static str, seconds: u64| {
        let deadline = Instant::now() + Duration::from_secs(seconds);
        move || {
            assert!(Instant::now() < deadline, "{what} after {seconds} s");
        }
    };
    let manifests = format!("{ns}.{name}-manifests");

    // Pending: the first pass created the split tables and nothing is saved yet.
    let operator = OperatorProcess::start(ns, &key);
    let check = until("the split tables", 60);
    while dynamodb()
        .await
        .describe_table()
        .table_name(&manifests)
        .send()
        .await
        .is_err()
    {
        check();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    operator.kill();
    let saved = status().await;
    // (The pass may have saved its move to Copying just before the kill: nothing copied yet.)
    assert!(
        saved
            .as_ref()
            .is_none_or(|m| m.phase == MigrationPhase::Pending
                || m.phase == MigrationPhase::Copying
                    && m.segments.iter().all(|s| s.last_key.is_none() && !s.done)),
        "killed in Pending: {saved:?}"
    );

    // Copying, in the middle of a segment.
    let killed = kill_at("a checkpoint inside a segment", 120, |m| {
        m.phase == MigrationPhase::Copying
            && m.segments.iter().any(|s| s.last_key.is_some() && !s.done)
    })
    .await;
    let resumed: Vec<i32> = killed
        .segments
        .iter()
        .filter(|s| s.last_key.is_some() && !s.done)
        .map(|s| s.segment)
        .collect();

    // The copy resumes from its checkpoints: the source is not scanned from the start again.
    let recording = moto().start_recording();
    kill_at("Verifying", 180, |m| m.phase == MigrationPhase::Verifying).await;
    let log = recording.stop();
    // The first Scan of each segment the kill interrupted starts after its checkpoint.
    let scans: Vec<serde_json::Value> = requests_signed_by(&log, &key)
        .into_iter()
        .filter(|r| r.action == "Scan" && r.resource == legacy.table)
        .filter_map(|r| serde_json::from_slice(&r.body).ok())
        .collect();
    for segment in &resumed {
        let first = scans
            .iter()
            .find(|b| b["Segment"] == *segment)
            .unwrap_or_else(|| panic!("segment {segment} was not scanned after the kill"));
        assert!(
            first.get("ExclusiveStartKey").is_some(),
            "segment {segment} was copied again from its start: {first}"
        );
    }
    let all = scan(&legacy.table).await.len() as i64;

    // AwaitingApproval: killed while it waits.
    let digest = kill_at("AwaitingApproval", 180, |m| {
        m.phase == MigrationPhase::AwaitingApproval
    })
    .await
    .verified_digest
    .unwrap();
    let out = super::super::control::kubectl(
        &[
            "annotate",
            "lake",
            &name,
            "-n",
            ns,
            "--overwrite",
            &format!("lake.dev/approve-migration={digest}"),
        ],
        None,
    );
    assert!(out.status.success(), "{}", output_text(&out));

    // CuttingOver: approved and checked, the workloads rolling out (no pod is ready yet).
    kill_at("CuttingOver", 180, |m| {
        m.phase == MigrationPhase::CuttingOver
    })
    .await;

    // A last operator finishes it once the pods are ready.
    let _operator = OperatorProcess::start(ns, &key);
    let check = until("Complete", 180);
    let done = loop {
        check();
        mark_pods_ready(&admin, ns).await;
        if let Some(m) = status().await
            && m.phase == MigrationPhase::Complete
        {
            break m;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(done.recopies, 0, "nothing changed: {done:?}");
    // Identical to an uninterrupted run: every item once, nothing else.
    let (want_manifest, want_registry) = expected(&legacy).await;
    assert_eq!(
        content(&manifests).await,
        want_manifest,
        "the manifest table"
    );
    assert_eq!(
        content(&format!("{ns}.{name}-registry")).await,
        want_registry,
        "the registry table"
    );
    assert_eq!(
        done.copied_items as usize,
        want_manifest.0 + want_registry.0
    );
    assert_eq!(done.total_items, Some(all));
}

/// What the operator saved of `name`'s migration.
async fn saved(
    clusters: &Api<lake_operator::crd::LakeCluster>,
    name: &str,
) -> Option<MigrationStatus> {
    clusters
        .get_status(name)
        .await
        .unwrap()
        .status
        .and_then(|s| s.migration)
}

/// Starts an operator for `namespace` and kills it once what it saved of `name`'s migration is
/// `at` (within `seconds`); returns what it had saved when it died.
async fn kill_operator_when(
    clusters: &Api<lake_operator::crd::LakeCluster>,
    name: &str,
    namespace: &'static str,
    key: &str,
    what: &'static str,
    seconds: u64,
    at: fn(&MigrationStatus) -> bool,
) -> MigrationStatus {
    let operator = OperatorProcess::start(namespace, key);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    loop {
        assert!(Instant::now() < deadline, "{what} after {seconds} s");
        if let Some(m) = saved(clusters, name).await
            && at(&m)
        {
            operator.kill();
            // It may have saved more between the read and the kill.
            return saved(clusters, name).await.unwrap_or(m);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Marks the scheduled pods of `namespace` Ready, as a kubelet would once their containers run.
async fn mark_pods_ready(client: &kube::Client, namespace: &str) {
    use kube::api::{Patch, PatchParams};
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), namespace);
    let ready = lake_testkit::ready_pod_status();
    for pod in pods.list(&ListParams::default()).await.unwrap() {
        let bound = pod.spec.as_ref().is_some_and(|s| s.node_name.is_some());
        let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        if bound && !running {
            let _ = pods
                .patch_status(
                    pod.metadata.name.as_deref().unwrap(),
                    &PatchParams::default(),
                    &Patch::Strategic(&ready),
                )
                .await;
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn migration_copies_again_what_changed_during_the_copy() {
    let legacy = legacy_lake(3, 2, 1_500).await;
    let h = migrating(&legacy, "Automatic").await;
    // Stopped once the copy read the whole legacy table, before the verify finished.
    kill_when(&h, |m| m.phase == MigrationPhase::Verifying)
        .await
        .expect("killed after the copy");
    // A lake v1 writer still runs: it changes a registry row and adds a manifest row.
    let ddb = dynamodb().await;
    let items = scan(&legacy.table).await;
    let registry_row = items
        .iter()
        .find(|i| {
            i["base_uri"]
                .as_s()
                .is_ok_and(|b| b.starts_with("__registry__/"))
        })
        .unwrap();
    ddb.update_item()
        .table_name(&legacy.table)
        .key("base_uri", registry_row["base_uri"].clone())
        .key("version", registry_row["version"].clone())
        .update_expression("SET changed_by_v1 = :c")
        .expression_attribute_values(":c", AttributeValue::S("yes".into()))
        .send()
        .await
        .unwrap();
    let mut added = items
        .iter()
        .find(|i| i["base_uri"].as_s().is_ok_and(|b| b.contains("/_dropped/")))
        .unwrap()
        .clone();
    added.insert("version".into(), AttributeValue::N("100000".into()));
    ddb.put_item()
        .table_name(&legacy.table)
        .set_item(Some(added))
        .send()
        .await
        .unwrap();
    let status = finish(&h).await;
    assert!(
        status.recopies >= 1,
        "the change was not detected: {status:?}"
    );
    // What the split tables hold is the changed legacy table, exactly.
    assert_copied_exactly(&h, &legacy).await;
}

/// `status.migration` is writable by anyone who may patch the cluster's status: a phase the
/// operator did not record (its ledger on the manifest table's marker says otherwise) is
/// verified again, never cut over; an approval of a forged digest approves nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_status_the_operator_did_not_record_is_never_cut_over() {
    let legacy = legacy_lake(1, 1, 0).await;
    let h = migrating(&legacy, "Manual").await;
    h.reconcile().await;
    let status = migration(&h).await;
    assert_eq!(status.phase, MigrationPhase::AwaitingApproval, "{status:?}");
    let digest = status.verified_digest.clone().unwrap();
    let deployments: Api<Deployment> = Api::namespaced(h.client.clone(), NS);
    let ours = ListParams::default().labels(&format!("app.kubernetes.io/instance={}", h.name));
    let forge = |migration: serde_json::Value| {
        let patch = json!({"status": {"migration": migration}}).to_string();
        let out = super::super::control::kubectl(
            &[
                "patch",
                "lake",
                &h.name,
                "-n",
                NS,
                "--subresource=status",
                "--type=merge",
                "-p",
                &patch,
            ],
            None,
        );
        assert!(out.status.success(), "{}", output_text(&out));
    };
    for forged in [
        json!({"phase": "CuttingOver"}),
        json!({"phase": "Complete", "verifiedDigest": digest}),
        json!({"phase": "AwaitingApproval", "verifiedDigest": "f0f0f0f0f0f0f0f0"}),
    ] {
        forge(forged.clone());
        let _ = super::super::control::kubectl(
            &[
                "annotate",
                "lake",
                &h.name,
                "-n",
                NS,
                "--overwrite",
                "lake.dev/approve-migration=f0f0f0f0f0f0f0f0",
            ],
            None,
        );
        h.reconcile().await;
        let status = migration(&h).await;
        assert!(
            !matches!(
                status.phase,
                MigrationPhase::CuttingOver | MigrationPhase::Complete
            ),
            "forged {forged}: {status:?}"
        );
        assert!(
            deployments.list(&ours).await.unwrap().items.is_empty(),
            "forged {forged}: the workloads were pointed at the split tables"
        );
    }
    // Verified again, the operator awaits the approval of what it verified; given, it cuts over.
    let status = migration(&h).await;
    assert_eq!(status.phase, MigrationPhase::AwaitingApproval, "{status:?}");
    assert_eq!(status.verified_digest.as_deref(), Some(digest.as_str()));
    let out = super::super::control::kubectl(
        &[
            "annotate",
            "lake",
            &h.name,
            "-n",
            NS,
            "--overwrite",
            &format!("lake.dev/approve-migration={digest}"),
        ],
        None,
    );
    assert!(out.status.success(), "{}", output_text(&out));
    assert_eq!(finish(&h).await.phase, MigrationPhase::Complete);
}
