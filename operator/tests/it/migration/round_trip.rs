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

#[tokio::test(flavor = "multi_thread")]
async fn migration_resumes_after_a_kill_in_every_phase() {
    // Two pages per segment at least, so a kill can land inside one.
    let legacy = legacy_lake(3, 2, 4_800).await;
    let h = migrating(&legacy, "Automatic").await;
    let mid_segment = |m: &MigrationStatus| {
        m.phase == MigrationPhase::Copying
            && m.segments.iter().any(|s| s.last_key.is_some() && !s.done)
    };
    let killed = kill_when(&h, mid_segment)
        .await
        .expect("killed while copying");
    eprintln!("killed copying: {:?}", killed.message);
    let killed = kill_when(&h, |m| m.phase == MigrationPhase::Verifying)
        .await
        .expect("killed while verifying");
    assert!(killed.segments.iter().all(|s| s.done), "{killed:?}");
    kill_when(&h, |m| m.phase == MigrationPhase::CuttingOver)
        .await
        .expect("killed while cutting over");
    let status = finish(&h).await;
    assert_eq!(status.recopies, 0, "nothing changed: {status:?}");
    // Identical to an uninterrupted run: every item once, nothing else.
    assert_copied_exactly(&h, &legacy).await;
    assert_eq!(h.condition("Ready").await.0, "True");
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
