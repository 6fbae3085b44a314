//! Migration from a lake v1 shared table, on the real control plane and the emulator. Each test
//! makes its legacy table from a real v2 lake: a throwaway cluster's tables, datasets written
//! through `lake serve` (real Lance commits), turned into a v1 table by
//! `lake-operator legacy-fixture`. The migrating cluster reads the same warehouse.

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use lake_operator::crd::{MigrationPhase, MigrationStatus};
use lake_operator::migration::legacy::{self, Item, LegacyItem, SetDigest};
use lake_operator::reconcile::reconcile;
use lake_testkit::{Moto, binary, moto, output_text, python, requests_signed_by, unique};
use serde_json::json;

use super::reconcile::{Harness, NS, cluster_yaml, create_roles, dynamodb, harness};

/// `lake serve` of one role with the ConfigMap the operator rendered for it (TLS off, a token
/// of the test's own, on a free loopback port), signing with static credentials on the
/// emulator. Stopped when dropped.
struct Served {
    child: Child,
    url: String,
    token: String,
    dir: tempfile::TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("serve.log")).unwrap_or_default()
    }
}

fn aws_env(command: &mut Command) -> &mut Command {
    command
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_REGION", Moto::REGION)
        .env("AWS_ENDPOINT_URL", moto().endpoint())
}

async fn config(client: &kube::Client, name: &str) -> std::collections::BTreeMap<String, String> {
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    config_maps
        .get(name)
        .await
        .unwrap()
        .data
        .unwrap_or_default()
}

/// Starts `lake serve` with `vars`; `Err(output)` if it exits before serving.
fn serve_with(vars: std::collections::BTreeMap<String, String>) -> Result<Served, String> {
    let dir = tempfile::tempdir().unwrap();
    let token = unique("token");
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("{token}\n")).unwrap();
    let log = std::fs::File::create(dir.path().join("serve.log")).unwrap();
    let mut command = Command::new(binary("lake"));
    command
        .arg("serve")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(
            vars.into_iter()
                .filter(|(k, _)| !k.starts_with("LAKE_TLS_")),
        )
        .env("LAKE_FLIGHT_ADDR", "127.0.0.1:0")
        .env("LAKE_TOKEN_FILE", &tokens)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(log)
        .stdin(Stdio::null());
    aws_env(&mut command);
    let mut child = command.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let url = rx
        .recv_timeout(Duration::from_secs(60))
        .ok()
        .and_then(|line| line.split_whitespace().nth(1).map(str::to_owned));
    let served = Served {
        child,
        url: url.unwrap_or_default(),
        token,
        dir,
    };
    if served.url.starts_with("grpc://") {
        Ok(served)
    } else {
        Err(served.log())
    }
}

/// A lake v1 table, and where its datasets came from.
struct Legacy {
    /// The warehouse's bucket (`<bucket>/wh/…`).
    bucket: String,
    table: String,
    /// The original v2 lake's manifest table (the ground truth the migration must reproduce).
    source_manifests: String,
    datasets: Vec<String>,
    items: usize,
}

/// `datasets` tables with `versions` inserts each written through a v2 lake, then turned into a
/// v1 table with `history` rows of dropped datasets.
async fn legacy_lake(datasets: usize, versions: usize, history: usize) -> Legacy {
    let src = unique("src");
    create_roles(&src).await;
    let bucket = format!("{src}-bucket");
    moto().create_bucket(&bucket);
    let h = harness(cluster_yaml(&src, "")).await;
    h.reconcile().await;
    let metadata = serve_with(config(&h.client, &format!("{src}-metadata")).await)
        .unwrap_or_else(|log| panic!("the source lake's metadata did not start:\n{log}"));
    let (ok, out, err) = python(&[
        "operator/tests/it/legacy_write.py",
        &metadata.url,
        &metadata.token,
        &datasets.to_string(),
        &versions.to_string(),
    ]);
    assert!(
        ok,
        "writing the datasets:\n{out}\n{err}\n{}",
        metadata.log()
    );
    drop(metadata);
    let names: Vec<String> = serde_json::from_str(out.trim()).unwrap();
    let table = unique("legacy-v1");
    let (manifests, registry) = (
        format!("{NS}.{src}-manifests"),
        format!("{NS}.{src}-registry"),
    );
    let mut command = Command::new(binary("lake-operator"));
    command.args([
        "legacy-fixture",
        "--manifest-table",
        &manifests,
        "--registry-table",
        &registry,
        "--into",
        &table,
        "--history",
        &history.to_string(),
    ]);
    let out = aws_env(&mut command).output().unwrap();
    assert!(
        out.status.success(),
        "legacy-fixture: {}",
        output_text(&out)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    let items = said
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("legacy-fixture said {said:?}"));
    Legacy {
        bucket,
        table,
        source_manifests: manifests,
        datasets: names,
        items,
    }
}

/// A cluster on `legacy`'s warehouse migrating from its table.
async fn migrating(legacy: &Legacy, approval: &str) -> Harness {
    let name = unique("dst");
    create_roles(&name).await;
    let mut cluster = cluster_yaml(
        &name,
        &format!(
            "  migration:\n    sourceTable: {}\n    approval: {approval}\n",
            legacy.table
        ),
    );
    cluster.spec.storage.s3.as_mut().unwrap().bucket = legacy.bucket.clone();
    harness(cluster).await
}

async fn scan(table: &str) -> Vec<Item> {
    lake_operator::migration::fixture::scan(&dynamodb().await, table)
        .await
        .unwrap()
}

/// The digest of every item of `table` but its marker.
async fn content(table: &str) -> (usize, String) {
    let mut digest = SetDigest::default();
    let mut n = 0;
    for item in scan(table).await {
        if !legacy::is_marker(&item) {
            digest.add(&item);
            n += 1;
        }
    }
    (n, digest.hex())
}

/// What a correct migration of `legacy` leaves in the split tables: (manifest, registry), each
/// as (items, digest).
async fn expected(legacy: &Legacy) -> ((usize, String), (usize, String)) {
    let (mut manifest, mut registry) = ((0, SetDigest::default()), (0, SetDigest::default()));
    for item in scan(&legacy.table).await {
        match legacy::classify(&item).unwrap() {
            LegacyItem::Manifest(i) => {
                manifest.0 += 1;
                manifest.1.add(&i);
            }
            LegacyItem::Registry(i) => {
                registry.0 += 1;
                registry.1.add(&i);
            }
            LegacyItem::Pointer { .. } => {}
        }
    }
    (
        (manifest.0, manifest.1.hex()),
        (registry.0, registry.1.hex()),
    )
}

fn tables(h: &Harness) -> (String, String) {
    (
        format!("{NS}.{}-manifests", h.name),
        format!("{NS}.{}-registry", h.name),
    )
}

async fn migration(h: &Harness) -> MigrationStatus {
    h.cluster()
        .await
        .status
        .and_then(|s| s.migration)
        .unwrap_or_default()
}

/// Runs a pass and stops it (as a kill would: at whatever await it is in, no cleanup) as soon
/// as the saved status satisfies `when`; returns that status, or `None` if the pass finished
/// first.
async fn kill_when(
    h: &Harness,
    when: impl Fn(&MigrationStatus) -> bool,
) -> Option<MigrationStatus> {
    let cluster = Arc::new(h.cluster().await);
    let pass = tokio::spawn(reconcile(cluster, h.ctx.clone()));
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        let status = migration(h).await;
        if when(&status) {
            pass.abort();
            let _ = pass.await;
            return Some(status);
        }
        if pass.is_finished() {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the pass neither finished nor reached the kill point in 120 s");
}

/// Passes until the migration is complete (rolling the workloads out at cutover).
async fn finish(h: &Harness) -> MigrationStatus {
    for _ in 0..10 {
        h.reconcile().await;
        let status = migration(h).await;
        match status.phase {
            MigrationPhase::CuttingOver => h.roll_out().await,
            MigrationPhase::Complete => return status,
            MigrationPhase::Failed => panic!("the migration failed: {status:?}"),
            _ => {}
        }
    }
    panic!("not complete after 10 passes: {:?}", migration(h).await);
}

/// The split tables hold exactly what the legacy table's manifest and registry rows are.
async fn assert_copied_exactly(h: &Harness, legacy: &Legacy) {
    let (manifests, registry) = tables(h);
    let (want_manifest, want_registry) = expected(legacy).await;
    assert_eq!(
        content(&manifests).await,
        want_manifest,
        "the manifest table"
    );
    assert_eq!(
        content(&registry).await,
        want_registry,
        "the registry table"
    );
    let status = migration(h).await;
    assert_eq!(
        status.copied_items as usize,
        want_manifest.0 + want_registry.0,
        "copied items counted once each: {status:?}"
    );
    let items = scan(&legacy.table).await.len();
    assert_eq!(
        status.total_items,
        Some(items as i64),
        "every legacy item read"
    );
}

fn pylance_options() -> String {
    let endpoint = moto().endpoint();
    json!({
        "aws_endpoint": endpoint,
        "dynamodb_endpoint": endpoint,
        "allow_http": "true",
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
        "aws_region": Moto::REGION,
    })
    .to_string()
}

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
    let out = super::control::kubectl(
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
    create_roles(&name).await;
    let registry = format!("{NS}.{name}-registry");
    super::reconcile::create_lake_table(&registry, "pk", ("sk", ScalarAttributeType::S)).await;
    dynamodb()
        .await
        .put_item()
        .table_name(&registry)
        .item("pk", AttributeValue::S("NAMESPACES".into()))
        .item("sk", AttributeValue::S("live".into()))
        .send()
        .await
        .unwrap();
    let mut cluster = cluster_yaml(
        &name,
        &format!(
            "  migration:\n    sourceTable: {}\n    approval: Automatic\n",
            legacy.table
        ),
    );
    cluster.spec.storage.s3.as_mut().unwrap().bucket = legacy.bucket.clone();
    let h = harness(cluster).await;
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

/// A source that is not a lake v1 table (another key schema) stops the migration in Pending,
/// saying why, before anything is copied.
#[tokio::test(flavor = "multi_thread")]
async fn a_source_with_another_key_schema_is_refused() {
    use aws_sdk_dynamodb::types::ScalarAttributeType;
    let source = unique("not-v1");
    super::reconcile::create_lake_table(&source, "pk", ("sk", ScalarAttributeType::S)).await;
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
