//! Reconcile passes run in the test, as the operator's ServiceAccount, against the real control
//! plane (its controllers roll the Deployments out) and the AWS emulator: a new cluster reaches
//! Ready, a converged cluster costs no writes, spec changes touch only what changed, bad specs
//! never reach AWS, and a table that cannot be adopted is left alone.

use super::control::{admin_client, audit_mark, namespace, operator_client, operator_writes_since};
use aws_credential_types::Credentials;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use lake_operator::allowlist::Allowlist;
use lake_operator::aws::{AwsPool, AwsSettings};
use lake_operator::crd::LakeCluster;
use lake_operator::metrics::Metrics;
use lake_operator::plan::workloads::CONFIG_HASH;
use lake_operator::reconcile::{Context, FINALIZER, reconcile};
use lake_testkit::{AwsRequest, Moto, moto, requests_signed_by, unique};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;

mod converge;
mod refusals;
mod tables;

pub(super) const NS: &str = "data";

pub(super) const OIDC: &str = "oidc.eks.eu-west-1.amazonaws.com/id/TEST";

/// A cluster, its operator context, and the access key its AWS calls are signed with.
pub(super) struct Harness {
    pub(super) name: String,
    pub(super) key: String,
    pub(super) client: kube::Client,
    pub(super) ctx: Arc<Context>,
    pub(super) clusters: Api<LakeCluster>,
}

fn admin_sdk() -> aws_config::ConfigLoader {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new(Moto::REGION))
        .endpoint_url(moto().endpoint())
        .credentials_provider(Credentials::new("admin", "testing", None, None, "tests"))
}

pub(super) async fn iam() -> aws_sdk_iam::Client {
    aws_sdk_iam::Client::new(&admin_sdk().load().await)
}

pub(super) async fn dynamodb() -> aws_sdk_dynamodb::Client {
    aws_sdk_dynamodb::Client::new(&admin_sdk().load().await)
}

pub(super) async fn create_role(name: &str) {
    let trust = json!({"Version": "2012-10-17", "Statement": [{"Effect": "Allow",
        "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]});
    iam()
        .await
        .create_role()
        .role_name(name)
        .assume_role_policy_document(trust.to_string())
        .send()
        .await
        .unwrap();
}

/// The query and metadata roles `cluster_yaml(name, …)` names.
pub(super) async fn create_roles(name: &str) {
    create_role(&format!("{name}-query-role")).await;
    create_role(&format!("{name}-metadata-role")).await;
}

pub(super) fn cluster_yaml(name: &str, spec_extra: &str) -> LakeCluster {
    let yaml = format!(
        r#"
apiVersion: lake.dev/v1alpha1
kind: LakeCluster
metadata:
  name: {name}
  namespace: {NS}
spec:
  storage:
    s3:
      bucket: {name}-bucket
      prefix: wh
      region: {region}
      endpoint: {endpoint}
  iam:
    queryRole: {name}-query-role
    metadataRole: {name}-metadata-role
  query:
    replicas: 2
    image: ghcr.io/acme/lake:1
  metadata:
    image: ghcr.io/acme/lake:1
{spec_extra}"#,
        region = Moto::REGION,
        endpoint = moto().endpoint(),
    );
    serde_yaml::from_str(&yaml).unwrap()
}

/// The operator's AWS clients on the emulator, signing with `key`.
pub(super) fn pool(key: &str) -> Arc<AwsPool> {
    AwsPool::new(AwsSettings {
        endpoint: Some(moto().endpoint().to_owned()),
        credentials: Some(Credentials::new(key, "testing", None, None, "operator")),
        interceptors: Vec::new(),
        max_attempts: Some(2),
    })
}

/// What the tests' operator allows namespace `data`: the roles and buckets `cluster_yaml` names,
/// any table name and migration source (the tests name their own).
pub(super) fn test_allowlist() -> Allowlist {
    Allowlist::parse(
        "namespaces:\n  data:\n    roles: [\"*-query-role\", \"*-metadata-role\", \"*-maintenance-role\"]\n    storage: [{bucket: \"*-bucket\"}]\n    tables: [\"*\"]\n    migrationSources: [\"*\"]\n    adopt: true\n",
        "tests",
    )
    .unwrap()
}

/// An operator context for the tests' clusters signing with `key`, under `allowlist` (an
/// operator restarted with another allowlist).
pub(super) async fn context_with(key: &str, allowlist: Allowlist) -> Arc<Context> {
    Context::new(
        operator_client().await,
        pool(key),
        Some(OIDC.to_owned()),
        Arc::new(Metrics::default()),
        allowlist,
    )
}

pub(super) async fn harness(cluster: LakeCluster) -> Harness {
    harness_with(cluster, test_allowlist()).await
}

/// `cluster` created in namespace `data` of the control plane, and an operator context for it
/// that talks to the API server as the operator's ServiceAccount.
pub(super) async fn harness_with(mut cluster: LakeCluster, allowlist: Allowlist) -> Harness {
    namespace(NS);
    let name = cluster.metadata.name.clone().unwrap();
    let key = unique("OPKEY").to_uppercase().replace('-', "");
    let client = admin_client().await;
    let clusters: Api<LakeCluster> = Api::namespaced(client.clone(), NS);
    cluster.metadata.resource_version = None;
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap_or_else(|e| panic!("the API server refused {name}: {e}"));
    let ctx = context_with(&key, allowlist).await;
    Harness {
        clusters,
        name,
        key,
        client,
        ctx,
    }
}

/// A Deployment whose rollout the deployment controller reports finished.
fn rolled_out(d: &Deployment) -> bool {
    let want = d.spec.replicas.unwrap_or(1);
    let Some(status) = &d.status else {
        return false;
    };
    status.observed_generation >= d.metadata.generation
        && status.replicas == Some(want)
        && status.updated_replicas == Some(want)
        && status.available_replicas == Some(want)
        && status.conditions.iter().flatten().any(|c| {
            c.type_.as_deref() == Some("Progressing")
                && c.reason.as_deref() == Some("NewReplicaSetAvailable")
        })
}

impl Harness {
    pub(super) async fn reconcile(&self) -> Action {
        let cluster = self.clusters.get(&self.name).await.unwrap();
        reconcile(Arc::new(cluster), self.ctx.clone())
            .await
            .unwrap_or_else(|e| panic!("reconcile failed: {e}"))
    }

    /// The operator's writes to Kubernetes (`verb resource name`, Events aside) while `pass`
    /// runs, as the API server's audit log records them.
    pub(super) async fn writes_during<T>(
        &self,
        pass: impl std::future::Future<Output = T>,
    ) -> (T, Vec<String>) {
        let mark = audit_mark();
        let result = pass.await;
        (result, operator_writes_since(mark, NS, &self.name))
    }

    pub(super) async fn cluster(&self) -> LakeCluster {
        self.clusters.get(&self.name).await.unwrap()
    }

    pub(super) async fn condition(&self, type_: &str) -> (String, String, String) {
        let cluster = self.cluster().await;
        let c = cluster
            .status
            .unwrap_or_default()
            .conditions
            .into_iter()
            .find(|c| c.type_ == type_)
            .unwrap_or_else(|| panic!("no {type_} condition"));
        (c.status.to_string(), c.reason, c.message)
    }

    /// The cluster's Deployments roll out: the control plane's controllers create ReplicaSets
    /// and Pods and the scheduler binds them to the node; the test marks each bound Pod Ready,
    /// as the node's kubelet would once its containers run, until both Deployments report the
    /// rollout finished (at most 60 s).
    pub(super) async fn roll_out(&self) {
        let selector = format!("app.kubernetes.io/instance={}", self.name);
        let by_cluster = ListParams::default().labels(&selector);
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), NS);
        let deployments: Api<Deployment> = Api::namespaced(self.client.clone(), NS);
        let ready = lake_testkit::ready_pod_status();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            for pod in pods.list(&by_cluster).await.unwrap() {
                let bound = pod.spec.as_ref().is_some_and(|s| s.node_name.is_some());
                let running =
                    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
                if bound && !running {
                    pods.patch_status(
                        pod.metadata.name.as_deref().unwrap(),
                        &PatchParams::default(),
                        &Patch::Strategic(&ready),
                    )
                    .await
                    .unwrap();
                }
            }
            let listed = deployments.list(&by_cluster).await.unwrap().items;
            if listed.len() == 2 && listed.iter().all(rolled_out) {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "not rolled out after 60 s: {:?}",
                listed
                    .iter()
                    .map(|d| (&d.metadata.name, &d.status))
                    .collect::<Vec<_>>()
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }

    /// resourceVersion of every object the cluster owns (by owner reference), and of the
    /// LakeCluster.
    pub(super) async fn versions(&self) -> BTreeMap<String, String> {
        let cluster = self.cluster().await;
        let uid = cluster.metadata.uid.clone().unwrap();
        let mut versions = BTreeMap::new();
        versions.insert(
            format!("LakeCluster/{}", self.name),
            cluster.metadata.resource_version.clone().unwrap(),
        );
        macro_rules! collect {
            ($kind:ty, $label:expr) => {
                let api: Api<$kind> = Api::namespaced(self.client.clone(), NS);
                for o in api.list(&ListParams::default()).await.unwrap() {
                    let owned = o
                        .metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .any(|r| r.uid == uid);
                    if owned {
                        versions.insert(
                            format!("{}/{}", $label, o.metadata.name.clone().unwrap()),
                            o.metadata.resource_version.clone().unwrap(),
                        );
                    }
                }
            };
        }
        collect!(ConfigMap, "ConfigMap");
        collect!(ServiceAccount, "ServiceAccount");
        collect!(Deployment, "Deployment");
        collect!(Service, "Service");
        collect!(PodDisruptionBudget, "PodDisruptionBudget");
        collect!(
            k8s_openapi::api::networking::v1::NetworkPolicy,
            "NetworkPolicy"
        );
        collect!(k8s_openapi::api::rbac::v1::Role, "Role");
        collect!(k8s_openapi::api::rbac::v1::RoleBinding, "RoleBinding");
        versions
    }

    /// The Events about this cluster.
    pub(super) async fn events(&self) -> Vec<k8s_openapi::api::events::v1::Event> {
        Api::<k8s_openapi::api::events::v1::Event>::namespaced(self.client.clone(), NS)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(self.name.as_str())
            })
            .collect()
    }

    pub(super) async fn deployment(&self, role: &str) -> Deployment {
        Api::<Deployment>::namespaced(self.client.clone(), NS)
            .get(&format!("{}-{role}", self.name))
            .await
            .unwrap()
    }

    /// Asks the API server to delete the cluster: with the operator's finalizer on it, it stays,
    /// with `deletionTimestamp` set, until a pass releases the finalizer.
    pub(super) async fn deleting(&self) -> &Harness {
        self.clusters
            .delete(&self.name, &DeleteParams::default())
            .await
            .unwrap();
        self
    }

    pub(super) async fn patch_spec(&self, spec: serde_json::Value) {
        self.clusters
            .patch(
                &self.name,
                &PatchParams::default(),
                &Patch::Merge(&json!({ "spec": spec })),
            )
            .await
            .unwrap();
    }
}

pub(super) fn writes(requests: &[AwsRequest]) -> Vec<&AwsRequest> {
    requests.iter().filter(|r| !r.is_read()).collect()
}

fn config_hash(d: &Deployment) -> String {
    d.spec
        .template
        .metadata
        .as_ref()
        .unwrap()
        .annotations
        .as_ref()
        .unwrap()[CONFIG_HASH]
        .clone()
}

pub(super) async fn create_lake_table(
    table: &str,
    hash: &str,
    range: (&str, aws_sdk_dynamodb::types::ScalarAttributeType),
) {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    };
    dynamodb()
        .await
        .create_table()
        .table_name(table)
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name(hash)
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name(range.0)
                .key_type(KeyType::Range)
                .build()
                .unwrap(),
        )
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(hash)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(range.0)
                .attribute_type(range.1)
                .build()
                .unwrap(),
        )
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .unwrap();
}
