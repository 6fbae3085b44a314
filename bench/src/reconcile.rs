//! Reconcile bench: N LakeClusters from nothing to Ready against the AWS emulator (tables, PITR,
//! protection, tags, markers, both IAM policies) on a real control plane (etcd, kube-apiserver,
//! controllers and scheduler; the bench plays the kubelet). Beside it, boto3 makes the same AWS
//! changes directly (the floor for the AWS work). Prints per-cluster times — the first pass
//! (AWS and the objects) apart from the whole way to Ready (the rollout) — and the ratios.
//!
//! Run: `bench/run reconcile [CLUSTERS]` (default 50, release build).

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Api, ListParams, Patch, PatchParams};
use lake_operator::crd::LakeCluster;
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
            .any(|c| c.type_ == "Ready" && c.status.as_str() == "True")
    })
}

/// On the real control plane: play the kubelet (mark every scheduled pod Ready); the Deployment
/// and ReplicaSet controllers do the rest.
async fn pods_ready(client: &kube::Client) {
    use k8s_openapi::api::core::v1::Pod;
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let status = lake_testkit::ready_pod_status();
    for pod in api.list(&ListParams::default()).await.expect("list pods") {
        let scheduled = pod.spec.as_ref().is_some_and(|s| s.node_name.is_some());
        let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        if scheduled && !running {
            api.patch_status(
                pod.metadata.name.as_deref().unwrap_or_default(),
                &PatchParams::default(),
                &Patch::Strategic(&status),
            )
            .await
            .expect("pod status");
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

fn context(client: &kube::Client, moto: &Moto) -> Arc<Context> {
    lake_bench::context(
        client,
        moto,
        "namespaces:\n  bench:\n    roles: [\"*-q\", \"*-m\"]\n    storage: [{bucket: \"*-bucket\", prefix: wh}]\n",
    )
}

/// A client of the real control plane with the CRD installed and the clusters created.
async fn real_client(names: &[String]) -> kube::Client {
    let client = lake_bench::control_plane_client(NS).await;
    let clusters: Api<LakeCluster> = Api::namespaced(client.clone(), NS);
    for name in names {
        clusters
            .create(&Default::default(), &cluster(name))
            .await
            .expect("create cluster");
    }
    client
}

async fn create_roles(moto: &Moto, names: &[String]) {
    let roles: Vec<String> = names
        .iter()
        .flat_map(|n| [format!("{n}-q"), format!("{n}-m")])
        .collect();
    lake_bench::create_roles(moto, &roles).await;
}

/// Mean seconds per cluster: its first pass, and from nothing to Ready.
struct Timing {
    first_pass: f64,
    to_ready: f64,
}

/// N clusters from nothing to Ready on the real API server.
async fn run(n: usize) -> Timing {
    let moto = moto();
    let names: Vec<String> = (0..n).map(|_| unique("rb")).collect();
    create_roles(moto, &names).await;
    let client = real_client(&names).await;
    let label = "real API server (etcd + kube-apiserver v1.37.2)";
    let ctx = context(&client, moto);
    let clusters: Api<LakeCluster> = Api::namespaced(client.clone(), NS);

    let started = Instant::now();
    let mut times = Vec::new();
    let mut passes = 0;
    let mut first_passes = Duration::ZERO;
    for name in &names {
        let t0 = Instant::now();
        let mut first = true;
        loop {
            let current = clusters.get(name).await.expect("cluster");
            if ready(&current) {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "{name} is not Ready after 60 s: {:?}",
                current.status.map(|s| s.conditions)
            );
            let pass = Instant::now();
            reconcile(Arc::new(current), ctx.clone())
                .await
                .expect("reconcile");
            if std::mem::take(&mut first) {
                first_passes += pass.elapsed();
            }
            passes += 1;
            pods_ready(&client).await;
            // The Deployment controller reports availability a moment later.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        times.push(t0.elapsed());
    }
    let total = started.elapsed();
    let per_cluster = total.as_secs_f64() / n as f64;
    let mut sorted = times.clone();
    sorted.sort();
    let first_pass = first_passes.as_secs_f64() / n as f64;
    println!(
        "{label}: {n} clusters Ready in {:.2} s ({passes} passes); first pass mean {:.0} ms; to Ready per cluster mean {:.0} ms, p50 {:.0} ms, p95 {:.0} ms, max {:.0} ms",
        total.as_secs_f64(),
        first_pass * 1000.0,
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
        "{label}: converged pass {:.0} ms per cluster",
        converged * 1000.0
    );
    Timing {
        first_pass,
        to_ready: per_cluster,
    }
}

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(50);
    println!("reconcile bench: {n} clusters from nothing to Ready on the emulator\n");
    let operator = run(n).await;

    let (ok, out, err) = python(&["bench/reconcile_peer.py", moto().endpoint(), &n.to_string()]);
    assert!(ok, "boto3 peer failed:\n{out}\n{err}");
    let peer: serde_json::Value = serde_json::from_str(out.trim()).expect("peer JSON");
    let peer_per_cluster = peer["per_cluster_s"].as_f64().expect("number");
    println!(
        "boto3 (same AWS changes, no checks, no Kubernetes): per cluster {:.0} ms",
        peer_per_cluster * 1000.0
    );
    println!(
        "\noperator/boto3 per cluster: x{:.2} (first pass: AWS and the objects), x{:.2} (to Ready, with the rollout)",
        operator.first_pass / peer_per_cluster,
        operator.to_ready / peer_per_cluster
    );
}
