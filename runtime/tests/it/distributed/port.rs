//! The worker port: only the lake's own processes may use it, and what they send must be a
//! read of lake tables.

use std::path::Path;

use datafusion::prelude::SessionContext;
use datafusion_distributed::grpc::{BoxCloneSyncChannel, create_worker_client};
use datafusion_distributed::{
    CoordinatorToWorkerMsg, GetWorkerInfoRequest, SetPlanRequest, TaskKey, WorkerChannel,
};
use datafusion_proto::physical_plan::{AsExecutionPlan, DefaultPhysicalExtensionCodec};
use datafusion_proto::protobuf::{PhysicalExtensionNode, PhysicalPlanNode, physical_plan_node};
use futures::StreamExt;
use lake_runtime::flight::{LOCAL_WORKER_NAME, WorkerIdentity};
use prost::Message;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

use super::{distributed, start};

fn pem(dir: &Path, name: &str) -> Vec<u8> {
    std::fs::read(dir.join(name)).unwrap()
}

/// A client of the worker at `url` with `tls` (none: plaintext).
async fn connect(
    url: &str,
    tls: Option<ClientTlsConfig>,
) -> Result<Box<dyn WorkerChannel>, String> {
    let mut endpoint = Endpoint::from_shared(url.to_owned()).map_err(|e| e.to_string())?;
    if let Some(tls) = tls {
        endpoint = endpoint.tls_config(tls).map_err(|e| e.to_string())?;
    }
    let channel = endpoint.connect().await.map_err(|e| format!("{e:?}"))?;
    Ok(create_worker_client(BoxCloneSyncChannel::new(channel)))
}

async fn info(url: &str, tls: Option<ClientTlsConfig>) -> Result<String, String> {
    let mut client = connect(url, tls).await?;
    client
        .get_worker_info(GetWorkerInfoRequest {})
        .await
        .map(|i| i.version)
        .map_err(|e| e.to_string())
}

fn trusting(ca: &[u8]) -> ClientTlsConfig {
    ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca))
        .domain_name(LOCAL_WORKER_NAME)
}

#[tokio::test(flavor = "multi_thread")]
async fn distributed_worker_port_requires_cluster_identity() {
    let lake = start(&distributed(2));
    let ids = lake.dir.path().join("_lake/worker-identity");
    let ca = pem(&ids, "ca.pem");
    let url = lake.workers[0].clone();
    let own = trusting(&ca).identity(Identity::from_pem(
        pem(&ids, "worker.pem"),
        pem(&ids, "worker.key"),
    ));
    // The lake's own identity is admitted (so each refusal below is the port's, not a broken
    // client).
    info(&url, Some(own))
        .await
        .expect("the lake's identity is admitted");
    // No client certificate.
    let refused = info(&url, Some(trusting(&ca))).await;
    assert!(
        refused.is_err(),
        "a client without a certificate was admitted"
    );
    // A certificate of another CA (another lake's).
    let other = tempfile::tempdir().unwrap();
    WorkerIdentity::ephemeral()
        .unwrap()
        .write_to(other.path())
        .unwrap();
    let foreign = trusting(&ca).identity(Identity::from_pem(
        pem(other.path(), "worker.pem"),
        pem(other.path(), "worker.key"),
    ));
    let refused = info(&url, Some(foreign)).await;
    assert!(refused.is_err(), "another CA's certificate was admitted");
    // Plaintext.
    let plain = url.replacen("https://", "http://", 1);
    assert!(
        info(&plain, None).await.is_err(),
        "a plaintext client was admitted"
    );
}

/// Sends `plan` (an encoded physical plan) to the worker at `url` as a stage to run, with the
/// lake's own identity; the worker's answer, or its refusal.
async fn set_plan(url: &str, ids: &Path, plan: Vec<u8>) -> Result<(), String> {
    let tls = trusting(&pem(ids, "ca.pem")).identity(Identity::from_pem(
        pem(ids, "worker.pem"),
        pem(ids, "worker.key"),
    ));
    let mut client = connect(url, Some(tls)).await?;
    let request = SetPlanRequest {
        task_key: TaskKey {
            query_id: uuid::Uuid::new_v4(),
            stage_id: 1,
            task_number: 0,
        },
        task_count: 1,
        plan_proto: plan,
        work_unit_feed_declarations: Vec::new(),
        target_worker_url: url.parse().unwrap(),
        query_start_time_ns: 0,
    };
    let messages = futures::stream::iter([CoordinatorToWorkerMsg::SetPlanRequest(request)])
        .chain(futures::stream::pending())
        .boxed();
    let mut answers = client
        .coordinator_channel(Default::default(), messages)
        .await
        .map_err(|e| e.to_string())?;
    match tokio::time::timeout(std::time::Duration::from_secs(10), answers.next()).await {
        Ok(Some(Err(e))) => Err(e.to_string()),
        _ => Ok(()),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn distributed_workers_refuse_writes() {
    let lake = start(&distributed(2));
    let ids = lake.dir.path().join("_lake/worker-identity");
    let url = lake.workers[0].clone();
    // A write: DataFusion's own COPY … TO, planned by a plain DataFusion session.
    let target = tempfile::tempdir().unwrap();
    let out = target.path().join("stolen.csv");
    let ctx = SessionContext::new();
    let copy = ctx
        .sql(&format!(
            "COPY (SELECT 1 AS x) TO '{}' STORED AS CSV",
            out.display()
        ))
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let encoded = PhysicalPlanNode::try_from_physical_plan(copy, &DefaultPhysicalExtensionCodec {})
        .unwrap()
        .encode_to_vec();
    let refused = set_plan(&url, &ids, encoded)
        .await
        .expect_err("a write was accepted");
    assert!(
        refused.contains("refused the plan") && refused.contains("writes"),
        "{refused}"
    );
    // A node no codec of the lake's knows.
    let unknown = PhysicalPlanNode {
        physical_plan_type: Some(physical_plan_node::PhysicalPlanType::Extension(
            PhysicalExtensionNode {
                node: b"not a lake node".to_vec(),
                inputs: Vec::new(),
            },
        )),
    }
    .encode_to_vec();
    let refused = set_plan(&url, &ids, unknown)
        .await
        .expect_err("an unknown node was accepted");
    assert!(
        refused.contains("cannot run") || refused.contains("decode"),
        "{refused}"
    );
    // And the worker still serves: the refusals stopped nothing.
    let client = super::client(&lake).await;
    client.execute("CREATE SCHEMA r").await.unwrap();
    client
        .execute("CREATE TABLE r.t AS SELECT 1 AS id")
        .await
        .unwrap();
    assert_eq!(
        super::answer(&client, "SELECT count(*) FROM r.t").await,
        vec!["1"]
    );
    assert!(!out.exists(), "the worker wrote the file");
}
