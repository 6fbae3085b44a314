//! Faults: AWS goes away in the middle of a reconcile (after the first table was created); the
//! pass fails with a retryable error and a backoff, and converges once AWS is back.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use aws_credential_types::Credentials;
use aws_sdk_dynamodb::config::interceptors::BeforeSerializationInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, SharedInterceptor};
use aws_sdk_dynamodb::error::BoxError;
use aws_sdk_dynamodb::operation::describe_continuous_backups::DescribeContinuousBackupsInput;
use kube::api::{Api, PostParams};
use lake_operator::allowlist::Allowlist;
use lake_operator::aws::{AwsPool, AwsSettings};
use lake_operator::crd::LakeCluster;
use lake_operator::metrics::Metrics;
use lake_operator::reconcile::{Context, error_policy, reconcile};
use lake_testkit::{moto, unique};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::control::{admin_client, namespace, operator_client};

/// A TCP proxy to the emulator that can be cut (every connection dropped, new ones refused).
struct Proxy {
    port: u16,
    up: watch::Sender<bool>,
}

impl Proxy {
    async fn start(target: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (up, watching) = watch::channel(true);
        tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                let mut down = watching.clone();
                if !*down.borrow() {
                    continue; // dropped: connection reset
                }
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(("127.0.0.1", target)).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = down.wait_for(|up| !*up) => {}
                    }
                });
            }
        });
        Self { port, up }
    }

    fn set(&self, up: bool) {
        let _ = self.up.send(up);
    }
}

/// Cuts the proxy when the operator starts its first DescribeContinuousBackups: the first table
/// exists by then, the rest of the pass does not.
#[derive(Debug)]
struct CutAfterFirstTable {
    armed: AtomicBool,
    cut: watch::Sender<bool>,
}

impl Intercept for CutAfterFirstTable {
    fn name(&self) -> &'static str {
        "CutAfterFirstTable"
    }

    fn read_before_execution(
        &self,
        context: &BeforeSerializationInterceptorContextRef<'_>,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if context
            .input()
            .downcast_ref::<DescribeContinuousBackupsInput>()
            .is_some()
            && self.armed.swap(false, Ordering::SeqCst)
        {
            let _ = self.cut.send(false);
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn aws_outage_mid_reconcile_retries_and_converges() {
    let proxy = Proxy::start(moto().port()).await;
    let name = unique("fault");
    let cluster: LakeCluster = serde_yaml::from_str(&format!(
        r#"
apiVersion: lake.dev/v1alpha1
kind: LakeCluster
metadata: {{name: {name}, namespace: data}}
spec:
  storage: {{s3: {{bucket: b-{name}, prefix: wh, region: us-east-1}}}}
  query: {{image: lake:1}}
  metadata: {{image: lake:1}}
"#
    ))
    .unwrap();
    namespace("data");
    let clusters: Api<LakeCluster> = Api::namespaced(admin_client().await, "data");
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    let cut = CutAfterFirstTable {
        armed: AtomicBool::new(true),
        cut: proxy.up.clone(),
    };
    let aws = AwsPool::new(AwsSettings {
        endpoint: Some(format!("http://127.0.0.1:{}", proxy.port)),
        credentials: Some(Credentials::new("fault", "testing", None, None, "tests")),
        interceptors: vec![SharedInterceptor::new(cut)],
        max_attempts: Some(2),
    });
    let ctx = Context::new(
        operator_client().await,
        aws,
        None,
        Arc::new(Metrics::default()),
        Allowlist::default(),
    );
    let condition = |cluster: &LakeCluster, type_: &str| {
        cluster
            .status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_).cloned())
            .unwrap()
    };

    let ddb = aws_sdk_dynamodb::Client::new(
        &aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new("us-east-1"))
            .endpoint_url(moto().endpoint())
            .credentials_provider(Credentials::new("admin", "testing", None, None, "tests"))
            .load()
            .await,
    );
    // The outage: the pass fails, retryably, and says so.
    let current = Arc::new(clusters.get(&name).await.unwrap());
    let error = reconcile(current.clone(), ctx.clone())
        .await
        .expect_err("the pass cannot finish without AWS");
    assert_eq!(error.reason(), "AwsError", "{error}");
    let first = error_policy(current.clone(), &error, ctx.clone());
    let second = error_policy(current.clone(), &error, ctx.clone());
    assert!(
        first != second,
        "the backoff grows: {first:?} then {second:?}"
    );
    let status = clusters.get(&name).await.unwrap();
    let tables = condition(&status, "TablesReady");
    assert_eq!(
        (tables.status.as_str(), tables.reason.as_str()),
        ("False", "AwsError")
    );
    assert!(ctx.metrics.render().contains("reason=\"AwsError\"} 1"));
    // Mid-reconcile: the first table was created, the second not yet.
    let exists = |table: String| {
        let ddb = ddb.clone();
        async move { ddb.describe_table().table_name(table).send().await.is_ok() }
    };
    assert!(exists(format!("data.{name}-registry")).await);
    assert!(!exists(format!("data.{name}-manifests")).await);

    // AWS is back: the next pass picks up where the last one stopped.
    proxy.set(true);
    let current = Arc::new(clusters.get(&name).await.unwrap());
    reconcile(current, ctx.clone())
        .await
        .unwrap_or_else(|e| panic!("after the outage: {e}"));
    let status = clusters.get(&name).await.unwrap();
    assert_eq!(condition(&status, "TablesReady").status.as_str(), "True");
    assert_eq!(condition(&status, "WorkloadsReady").reason, "RollingOut");
    for table in [
        format!("data.{name}-registry"),
        format!("data.{name}-manifests"),
    ] {
        let pitr = ddb
            .describe_continuous_backups()
            .table_name(&table)
            .send()
            .await
            .unwrap();
        assert_eq!(
            pitr.continuous_backups_description()
                .and_then(|d| d.point_in_time_recovery_description())
                .and_then(|p| p.point_in_time_recovery_status())
                .map(|s| s.as_str()),
            Some("ENABLED"),
            "{table}"
        );
        assert_eq!(
            ddb.scan().table_name(&table).send().await.unwrap().count(),
            1,
            "{table} has its marker"
        );
    }
}
