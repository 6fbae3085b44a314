//! `lake serve` query processes as a LakeCluster's query pods run them: each serves the worker
//! port beside its endpoint (`LAKE_WORKER_*`) and spreads its large statements over its peers
//! (`LAKE_WORKERS`, itself among them), over S3 and DynamoDB (the emulator).

use lake_common::config::{
    LAKE_DISTRIBUTED_TASK_MB, LAKE_DISTRIBUTED_THRESHOLD_MB, LAKE_WORKER_ADDR, LAKE_WORKER_CA_FILE,
    LAKE_WORKER_CERT_FILE, LAKE_WORKER_KEY_FILE, LAKE_WORKER_NAME, LAKE_WORKERS,
};
use lake_common::plan::Role;
use lake_runtime::flight::{LOCAL_WORKER_NAME, WorkerIdentity};

use super::{analyzed, answer, scan_tasks, six_commits};
use crate::support::{CloudLake, Served};

/// A port free on 127.0.0.1 now (each process listens on it at its own loopback address, as
/// pods share a port at their own IPs).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread")]
async fn distributed_query_processes_serve_each_other() {
    let lake = CloudLake::new().await;
    let metadata = Served::start(&lake, Role::Metadata, "testing", None);
    let ids = tempfile::tempdir().unwrap();
    WorkerIdentity::ephemeral()
        .unwrap()
        .write_to(ids.path())
        .unwrap();
    let file = |name: &str| ids.path().join(name).display().to_string();
    let (cert, key, ca) = (file("worker.pem"), file("worker.key"), file("ca.pem"));
    let port = free_port();
    let peers: Vec<String> = (1..=3)
        .map(|i| format!("https://127.0.0.{i}:{port}"))
        .collect();
    let peers = peers.join(",");
    let queries: Vec<Served> = (1..=3)
        .map(|i| {
            let addr = format!("127.0.0.{i}:{port}");
            Served::start_with(
                &lake,
                Role::Query,
                "testing",
                Some(&metadata.endpoint),
                &[
                    (LAKE_WORKER_ADDR, &addr),
                    (LAKE_WORKER_CERT_FILE, &cert),
                    (LAKE_WORKER_KEY_FILE, &key),
                    (LAKE_WORKER_CA_FILE, &ca),
                    (LAKE_WORKER_NAME, LOCAL_WORKER_NAME),
                    (LAKE_WORKERS, &peers),
                    (LAKE_DISTRIBUTED_THRESHOLD_MB, "0"),
                    (LAKE_DISTRIBUTED_TASK_MB, "0"),
                ],
            )
        })
        .collect();
    let stage = std::sync::Arc::new(object_store::memory::InMemory::new());
    let client =
        lake_client::LakeClient::with_stage(&queries[0].endpoint, stage, Default::default())
            .await
            .unwrap();
    six_commits(&client, "c", "g", 500, 5).await;
    let sql = "SELECT count(*), count(DISTINCT id), sum(id) FROM c.t WHERE g <> 7";
    // Each process finds its peers within a check (a second) of their start.
    let mut tasks = 0;
    for _ in 0..20 {
        tasks = scan_tasks(&analyzed(&client, sql).await).len();
        if tasks == 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    assert_eq!(tasks, 3, "the scan ran on the three query processes");
    assert_eq!(answer(&client, sql).await, vec!["3000 | 3000 | 4501500"]);
}
