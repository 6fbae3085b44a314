//! Migration from a lake v1 shared table, on the real control plane and the emulator. Each test
//! makes its legacy table from a real v2 lake: a throwaway cluster's tables, datasets written
//! through `lake serve` (real Lance commits), turned into a v1 table by
//! `lake-operator legacy-fixture`. The migrating cluster reads the same warehouse.

use super::reconcile::{Harness, NS, cluster_yaml, create_roles, dynamodb, harness, harness_with};
use aws_sdk_dynamodb::types::AttributeValue;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use kube::runtime::controller::Action;
use lake_operator::allowlist::Allowlist;
use lake_operator::crd::{MigrationPhase, MigrationStatus};
use lake_operator::migration::legacy::{self, Item, LegacyItem, SetDigest};
use lake_operator::reconcile::reconcile;
use lake_testkit::{Moto, binary, moto, output_text, python, requests_signed_by, unique};
use serde_json::json;
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod refusals;
mod round_trip;

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
    migrating_as(&unique("dst"), legacy, approval).await
}

/// [`migrating`], as the cluster `name` (whose tables a test may have made first).
async fn migrating_as(name: &str, legacy: &Legacy, approval: &str) -> Harness {
    create_roles(name).await;
    let mut cluster = cluster_yaml(
        name,
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
