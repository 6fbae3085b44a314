//! Reconcile bench: N LakeClusters from nothing to Ready against the AWS emulator (tables, PITR,
//! protection, tags, markers, both IAM policies) and an in-memory Kubernetes API, the Deployment
//! rollout played by the bench. Beside it, boto3 makes the same AWS changes directly (the floor
//! for the AWS work). Prints per-cluster times and the ratio.
//!
//! Run: `bench/run reconcile [CLUSTERS]` (default 50, release build).

use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_credential_types::Credentials;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube_fake_client::ClientBuilder;
use lake_operator::allowlist::Allowlist;
use lake_operator::aws::{AwsPool, AwsSettings};
use lake_operator::crd::LakeCluster;
use lake_operator::metrics::Metrics;
use lake_operator::reconcile::{Context, reconcile};
use lake_testkit::{Moto, moto, python, unique};

const NS: &str = "bench";

fn cluster(name: &str) -> LakeCluster {
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
"#,
        region = Moto::REGION
    ))
    .expect("bench cluster")
}

fn ready(cluster: &LakeCluster) -> bool {
    cluster.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

async fn roll_out(client: &kube::Client) {
    let api: Api<Deployment> = Api::namespaced(client.clone(), NS);
    for d in api.list(&ListParams::default()).await.expect("list") {
        if d.status.as_ref().and_then(|s| s.observed_generation) == d.metadata.generation {
            continue;
        }
        let replicas = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let status = serde_json::json!({"status": {"observedGeneration": d.metadata.generation,
            "replicas": replicas, "updatedReplicas": replicas, "availableReplicas": replicas}});
        api.patch_status(
            d.metadata.name.as_deref().unwrap_or_default(),
            &PatchParams::default(),
            &Patch::Merge(&status),
        )
        .await
        .expect("deployment status");
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(50);
    println!("reconcile bench: {n} clusters from nothing to Ready on the emulator\n");
    let moto = moto();
    let names: Vec<String> = (0..n).map(|_| unique("rb")).collect();
    let admin = aws_sdk_iam::Client::new(
        &aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new(Moto::REGION))
            .endpoint_url(moto.endpoint())
            .credentials_provider(Credentials::new("admin", "testing", None, None, "bench"))
            .load()
            .await,
    );
    let trust = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;
    for name in &names {
        for role in [format!("{name}-q"), format!("{name}-m")] {
            admin
                .create_role()
                .role_name(role)
                .assume_role_policy_document(trust)
                .send()
                .await
                .expect("role");
        }
    }

    let mut builder = ClientBuilder::new()
        .with_resource::<LakeCluster>()
        .with_status_subresource::<LakeCluster>()
        .with_status_subresource::<Deployment>();
    for name in &names {
        builder = builder.with_object(cluster(name));
    }
    let client = builder.build().await.expect("fake client");
    let ctx = Context::new(
        client.clone(),
        AwsPool::new(AwsSettings {
            endpoint: Some(moto.endpoint().to_owned()),
            credentials: Some(Credentials::new("operator", "testing", None, None, "bench")),
            ..Default::default()
        }),
        None,
        Arc::new(Metrics::default()),
        Allowlist::parse(
            "namespaces:\n  bench:\n    roles: [\"*-q\", \"*-m\"]\n    storage: [{bucket: \"*-bucket\", prefix: wh}]\n",
            "bench",
        )
        .expect("allowlist"),
    );
    let clusters: Api<LakeCluster> = Api::namespaced(client.clone(), NS);

    let started = Instant::now();
    let mut times = Vec::new();
    let mut passes = 0;
    for name in &names {
        let t0 = Instant::now();
        loop {
            let current = clusters.get(name).await.expect("cluster");
            if ready(&current) {
                break;
            }
            reconcile(Arc::new(current), ctx.clone())
                .await
                .expect("reconcile");
            passes += 1;
            roll_out(&client).await;
        }
        times.push(t0.elapsed());
    }
    let total = started.elapsed();
    let per_cluster = total.as_secs_f64() / n as f64;
    let mut sorted = times.clone();
    sorted.sort();
    println!(
        "per-cluster ms: {}",
        times
            .iter()
            .map(|t| format!("{:.0}", t.as_secs_f64() * 1000.0))
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "\noperator: {n} clusters Ready in {:.2} s ({passes} passes); per cluster mean {:.0} ms, p50 {:.0} ms, p95 {:.0} ms, max {:.0} ms",
        total.as_secs_f64(),
        per_cluster * 1000.0,
        percentile(&sorted, 0.5),
        percentile(&sorted, 0.95),
        percentile(&sorted, 1.0)
    );

    // A converged pass over every cluster: reads only.
    let t0 = Instant::now();
    for name in &names {
        let current = clusters.get(name).await.expect("cluster");
        reconcile(Arc::new(current), ctx.clone())
            .await
            .expect("reconcile");
    }
    let converged = t0.elapsed().as_secs_f64() / n as f64;
    println!(
        "operator: converged pass {:.0} ms per cluster",
        converged * 1000.0
    );

    let (ok, out, err) = python(&["bench/reconcile_peer.py", moto.endpoint(), &n.to_string()]);
    assert!(ok, "boto3 peer failed:\n{out}\n{err}");
    let peer: serde_json::Value = serde_json::from_str(out.trim()).expect("peer JSON");
    let peer_per_cluster = peer["per_cluster_s"].as_f64().expect("number");
    println!(
        "boto3 (same AWS changes, no checks, no Kubernetes): per cluster {:.0} ms",
        peer_per_cluster * 1000.0
    );
    println!(
        "\noperator/boto3 per cluster: x{:.2}",
        per_cluster / peer_per_cluster
    );
}
