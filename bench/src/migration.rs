//! Migration bench: a lake v1 table of N items (`lake-operator legacy-fixture`'s history rows)
//! migrated by reconcile passes on the real control plane and the AWS emulator — the copy
//! (parallel segmented scan, conditional puts, a checkpoint per page) and the verify — beside
//! boto3's `batch_writer` copying the same items (no conditions, no checkpoints, no verify).
//! Prints items/s of each and the ratio.
//!
//! Run: `bench/run migration [ITEMS]` (default 20000, release build).

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::Api;
use lake_operator::crd::{LakeCluster, MigrationPhase};
use lake_operator::migration::fixture;
use lake_operator::reconcile::reconcile;
use lake_testkit::{Moto, moto, python, unique};

const NS: &str = "bench-migration";

fn cluster(name: &str, source: &str) -> LakeCluster {
    serde_yaml::from_str(&format!(
        r#"
apiVersion: lake.dev/v1alpha1
kind: LakeCluster
metadata: {{name: {name}, namespace: {NS}}}
spec:
  storage: {{s3: {{bucket: {name}-bucket, prefix: wh, region: {region}}}}}
  iam: {{queryRole: {name}-q, metadataRole: {name}-m}}
  query: {{image: lake:1}}
  metadata: {{image: lake:1}}
  migration: {{sourceTable: {source}, approval: Automatic}}
"#,
        region = Moto::REGION
    ))
    .expect("bench cluster")
}

async fn dynamodb(moto: &Moto) -> aws_sdk_dynamodb::Client {
    aws_sdk_dynamodb::Client::new(
        &aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new(Moto::REGION))
            .endpoint_url(moto.endpoint())
            .credentials_provider(aws_credential_types::Credentials::new(
                "admin", "testing", None, None, "bench",
            ))
            .load()
            .await,
    )
}

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let items: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    let moto = moto();
    println!("migration bench: a lake v1 table of {items} items, on the emulator\n");
    let source = unique("legacy-v1");
    let (rows, _) = fixture::legacy_items(&[], &[], items);
    fixture::write_items(&dynamodb(moto).await, &source, &rows)
        .await
        .expect("legacy table");

    let name = unique("mb");
    lake_bench::create_roles(moto, &[format!("{name}-q"), format!("{name}-m")]).await;
    let client = lake_bench::control_plane_client(NS).await;
    let clusters: Api<LakeCluster> = Api::namespaced(client.clone(), NS);
    clusters
        .create(&Default::default(), &cluster(&name, &source))
        .await
        .expect("create cluster");
    let ctx = lake_bench::context(
        &client,
        moto,
        "namespaces:\n  bench-migration:\n    roles: [\"*-q\", \"*-m\"]\n    storage: [{bucket: \"*-bucket\", prefix: wh}]\n    migrationSources: [\"*\"]\n",
    );

    // Passes until the cutover, timing each phase from the status the migration saves.
    let watcher = {
        let clusters = clusters.clone();
        let name = name.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let mut seen = Vec::new();
            loop {
                let phase = clusters
                    .get(&name)
                    .await
                    .ok()
                    .and_then(|c| c.status?.migration.map(|m| m.phase));
                if let Some(phase) = phase
                    && seen.last().map(|(p, _)| p) != Some(&phase)
                {
                    seen.push((phase, started.elapsed()));
                    if phase == MigrationPhase::CuttingOver {
                        return seen;
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let started = Instant::now();
    loop {
        let current = clusters.get(&name).await.expect("cluster");
        let phase = current
            .status
            .as_ref()
            .and_then(|s| s.migration.as_ref())
            .map(|m| m.phase);
        match phase {
            Some(MigrationPhase::CuttingOver) => break,
            Some(MigrationPhase::Failed) => panic!("the migration failed: {:?}", current.status),
            _ => {}
        }
        reconcile(Arc::new(current), ctx.clone())
            .await
            .expect("reconcile");
    }
    let total = started.elapsed().as_secs_f64();
    let phases = watcher.await.expect("watcher");
    let at = |phase| {
        phases
            .iter()
            .find(|(p, _)| *p == phase)
            .map(|(_, t)| t.as_secs_f64())
    };
    let copying = at(MigrationPhase::Copying).unwrap_or(0.0);
    let verifying = at(MigrationPhase::Verifying).unwrap_or(total);
    let copy = verifying - copying;
    let verify = total - verifying;
    let status = clusters
        .get(&name)
        .await
        .expect("cluster")
        .status
        .and_then(|s| s.migration)
        .expect("migration status");
    println!(
        "operator: {} items copied in {copy:.2} s ({:.0} items/s: conditional puts, a checkpoint per page of 1,000), verified in {verify:.2} s; copy + verify {total:.2} s ({:.0} items/s)",
        status.copied_items,
        status.copied_items as f64 / copy,
        status.copied_items as f64 / total
    );

    let (ok, out, err) = python(&["bench/migration_peer.py", moto.endpoint(), &source]);
    assert!(ok, "boto3 peer failed:\n{out}\n{err}");
    let peer: serde_json::Value = serde_json::from_str(out.trim()).expect("peer JSON");
    let (peer_items, peer_seconds) = (
        peer["items"].as_f64().expect("number"),
        peer["seconds"].as_f64().expect("number"),
    );
    println!(
        "boto3 batch_writer (same items, no conditions, no checkpoints, no verify): {peer_items} items in {peer_seconds:.2} s ({:.0} items/s)",
        peer_items / peer_seconds
    );
    println!(
        "\noperator/boto3 time: x{:.2} (copy), x{:.2} (copy + verify)",
        copy / peer_seconds,
        total / peer_seconds
    );
}
