//! Reconcile passes run in the test, as the operator's ServiceAccount, against the real control
//! plane (its controllers roll the Deployments out) and the AWS emulator: a new cluster reaches
//! Ready, a converged cluster costs no writes, spec changes touch only what changed, bad specs
//! never reach AWS, and a table that cannot be adopted is left alone.

use std::collections::BTreeMap;
use std::sync::Arc;

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

use super::control::{admin_client, audit_mark, namespace, operator_client, operator_writes_since};

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

/// What the tests' operator allows namespace `data`: the roles and buckets `cluster_yaml` names.
pub(super) fn test_allowlist() -> Allowlist {
    Allowlist::parse(
        "namespaces:\n  data:\n    roles: [\"*-query-role\", \"*-metadata-role\"]\n    storage: [{bucket: \"*-bucket\"}]\n    adopt: true\n",
        "tests",
    )
    .unwrap()
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
    let ctx = Context::new(
        operator_client().await,
        pool(&key),
        Some(OIDC.to_owned()),
        Arc::new(Metrics::default()),
        allowlist,
    );
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
        (c.status, c.reason, c.message)
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

#[tokio::test(flavor = "multi_thread")]
async fn new_cluster_reaches_ready_and_converged_reconciles_write_nothing() {
    let name = unique("lk");
    create_roles(&name).await;
    let h = harness(cluster_yaml(&name, "")).await;
    let uid = h.cluster().await.metadata.uid.unwrap();

    // First pass: tables, policies, objects; the Deployments are not rolled out yet.
    let recording = moto().start_recording();
    h.reconcile().await;
    let log = recording.stop();
    assert!(
        h.cluster()
            .await
            .metadata
            .finalizers
            .unwrap()
            .contains(&FINALIZER.to_owned())
    );
    let (status, reason, message) = h.condition("WorkloadsReady").await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "RollingOut"),
        "{message}"
    );
    assert_eq!(h.condition("TablesReady").await.0, "True");
    assert_eq!(h.condition("PoliciesReady").await.0, "True");
    assert_eq!(h.condition("Ready").await.0, "False");
    let first = requests_signed_by(&log, &h.key);
    assert!(first.iter().any(|r| r.action == "CreateTable"), "{first:?}");

    // The tables: key schemas, on-demand, PITR, deletion protection, tags, markers.
    let ddb = dynamodb().await;
    for (table, hash, range, format) in [
        (
            format!("{NS}.{name}-registry"),
            "pk",
            "sk",
            "lake-registry/v1",
        ),
        (
            format!("{NS}.{name}-manifests"),
            "base_uri",
            "version",
            "lake-manifests/v2",
        ),
    ] {
        let t = ddb
            .describe_table()
            .table_name(&table)
            .send()
            .await
            .unwrap()
            .table
            .unwrap();
        let keys: Vec<_> = t
            .key_schema()
            .iter()
            .map(|k| {
                (
                    k.attribute_name().to_owned(),
                    k.key_type().as_str().to_owned(),
                )
            })
            .collect();
        assert_eq!(
            keys,
            [
                (hash.to_owned(), "HASH".to_owned()),
                (range.to_owned(), "RANGE".to_owned())
            ]
        );
        assert_eq!(t.deletion_protection_enabled(), Some(true), "{table}");
        assert_eq!(
            t.billing_mode_summary()
                .and_then(|b| b.billing_mode())
                .map(|b| b.as_str()),
            Some("PAY_PER_REQUEST")
        );
        let pitr = ddb
            .describe_continuous_backups()
            .table_name(&table)
            .send()
            .await
            .unwrap();
        assert_eq!(
            pitr.continuous_backups_description()
                .unwrap()
                .point_in_time_recovery_description()
                .unwrap()
                .point_in_time_recovery_status()
                .unwrap()
                .as_str(),
            "ENABLED"
        );
        let tags = ddb
            .list_tags_of_resource()
            .resource_arn(t.table_arn().unwrap())
            .send()
            .await
            .unwrap();
        let tags: BTreeMap<_, _> = tags
            .tags()
            .iter()
            .map(|t| (t.key().to_owned(), t.value().to_owned()))
            .collect();
        assert_eq!(tags["lake.dev/cluster-uid"], uid);
        assert_eq!(tags["lake.dev/cluster"], format!("{NS}/{name}"));
        let scan = ddb.scan().table_name(&table).send().await.unwrap();
        let marker = &scan.items()[0];
        assert_eq!(marker["format"].as_s().unwrap(), format);
        assert_eq!(marker["cluster"].as_s().unwrap(), &uid);
    }
    // The policies, on the roles.
    let iam = iam().await;
    for (role, must, must_not) in [
        ("query", "dynamodb:GetItem", "dynamodb:PutItem"),
        ("metadata", "dynamodb:PutItem", "\"*\""),
    ] {
        let doc = iam
            .get_role_policy()
            .role_name(format!("{name}-{role}-role"))
            .policy_name(format!("lake.{NS}.{name}"))
            .send()
            .await
            .unwrap();
        let text = percent_encoding::percent_decode_str(doc.policy_document())
            .decode_utf8()
            .unwrap()
            .into_owned();
        assert!(
            text.contains(must) && !text.contains(must_not),
            "{role}: {text}"
        );
    }
    // The objects: ten applied and the CA ConfigMap, owned by the cluster; query's config has
    // no registry table.
    let versions = h.versions().await;
    assert_eq!(versions.len(), 12, "{versions:?}");
    let query_config = Api::<ConfigMap>::namespaced(h.client.clone(), NS)
        .get(&format!("{name}-query"))
        .await
        .unwrap();
    let data = query_config.data.unwrap();
    assert!(
        !data.contains_key("LAKE_REGISTRY_DYNAMODB_TABLE"),
        "{data:?}"
    );
    assert_eq!(data["LAKE_CLUSTER_ID"], uid);
    assert_eq!(query_config.metadata.owner_references.unwrap()[0].uid, uid);
    let sa = Api::<ServiceAccount>::namespaced(h.client.clone(), NS)
        .get(&format!("{name}-query"))
        .await
        .unwrap();
    assert!(
        sa.metadata.annotations.unwrap()["eks.amazonaws.com/role-arn"]
            .ends_with(&format!(":role/{name}-query-role"))
    );

    // The Deployments roll out: Ready, with endpoints, table ARNs and policy digests.
    h.roll_out().await;
    assert!(
        matches!(h.reconcile().await, a if a == Action::requeue(std::time::Duration::from_secs(300)))
    );
    assert_eq!(h.condition("Ready").await.0, "True");
    let status = h.cluster().await.status.unwrap();
    assert_eq!(
        status.observed_generation,
        h.cluster().await.metadata.generation
    );
    assert!(
        status
            .conditions
            .iter()
            .all(|c| c.observed_generation == status.observed_generation)
    );
    assert_eq!(
        status.endpoints.unwrap().query.unwrap(),
        format!("grpc+tls://{name}-query.{NS}.svc:8815")
    );
    let tables = status.tables.unwrap();
    assert!(
        tables
            .manifest
            .unwrap()
            .arn
            .unwrap()
            .ends_with(&format!("table/{NS}.{name}-manifests"))
    );
    assert!(!tables.registry.unwrap().adopted);
    let policies = status.policies.unwrap();
    let query_policy = policies.query.unwrap();
    assert_eq!(query_policy.digest.len(), 64);
    assert!(
        query_policy
            .trust_policy
            .unwrap()
            .contains(&format!("system:serviceaccount:{NS}:{name}-query"))
    );
    let events = h.events().await;
    assert!(
        events.iter().any(|e| e.reason.as_deref() == Some("Ready")),
        "{events:?}"
    );
    let event_count = events.len();

    // Converged: another pass writes nothing, anywhere.
    let recording = moto().start_recording();
    let (_, written) = h.writes_during(h.reconcile()).await;
    let log = recording.stop();
    let requests = requests_signed_by(&log, &h.key);
    assert!(!requests.is_empty(), "the pass observed AWS");
    assert!(
        writes(&requests).is_empty(),
        "a converged pass wrote to AWS: {:?}",
        writes(&requests)
    );
    assert!(
        written.is_empty(),
        "a converged pass wrote to Kubernetes: {written:?}"
    );
    assert_eq!(
        h.events().await.len(),
        event_count,
        "events only on transitions"
    );

    // Replicas and image: only the query Deployment changes; its config hash does not.
    let hash_before = config_hash(&h.deployment("query").await);
    h.patch_spec(json!({"query": {"replicas": 3, "image": "ghcr.io/acme/lake:2"}}))
        .await;
    let recording = moto().start_recording();
    let (_, written) = h.writes_during(h.reconcile()).await;
    let log = recording.stop();
    assert!(
        writes(&requests_signed_by(&log, &h.key)).is_empty(),
        "a replica change wrote to AWS"
    );
    assert_eq!(
        written,
        [
            format!("patch deployments {name}-query"),
            format!("patch lakeclusters/status {name}")
        ],
        "only the query Deployment (and the status) was written"
    );
    let query = h.deployment("query").await;
    assert_eq!(query.spec.replicas, Some(3));
    assert_eq!(config_hash(&query), hash_before);
    assert_eq!(h.condition("WorkloadsReady").await.1, "RollingOut");

    // A configuration change (the warehouse prefix) changes both ConfigMaps and rolls both
    // Deployments through their config-hash annotation.
    let metadata_hash = config_hash(&h.deployment("metadata").await);
    h.patch_spec(json!({"storage": {"s3": {"prefix": "wh2"}}}))
        .await;
    h.reconcile().await;
    assert_ne!(config_hash(&h.deployment("query").await), hash_before);
    assert_ne!(config_hash(&h.deployment("metadata").await), metadata_hash);
    let cm = Api::<ConfigMap>::namespaced(h.client.clone(), NS)
        .get(&format!("{name}-metadata"))
        .await
        .unwrap();
    assert_eq!(
        cm.data.unwrap()["LAKE_WAREHOUSE"],
        format!("s3://{name}-bucket/wh2")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_specs_never_reach_aws() {
    // Specs the CRD's schema and CEL rules let through but the operator refuses (what the API
    // server itself refuses is `apiserver::crd_rules_are_enforced_by_the_api_server`).
    type Edit = fn(&mut LakeCluster);
    let cases: [(&str, Edit, &str); 6] = [
        (
            "a bucket name S3 refuses",
            |c| c.spec.storage.s3.as_mut().unwrap().bucket = "Bad_Bucket".into(),
            "spec.storage.s3.bucket",
        ),
        (
            "a prefix with a '..' segment",
            |c| c.spec.storage.s3.as_mut().unwrap().prefix = "wh/../other".into(),
            "spec.storage.s3.prefix",
        ),
        (
            "a blank image",
            |c| c.spec.query.image = "  ".into(),
            "spec.query.image",
        ),
        (
            "a malformed role ARN",
            |c| c.spec.iam.as_mut().unwrap().query_role = "arn:aws:iam::12:role/x".into(),
            "spec.iam.queryRole",
        ),
        (
            "a client namespace that is no namespace name",
            |c| c.spec.metadata.client_namespaces = vec!["writers".into(), "Bad_NS".into()],
            "spec.metadata.clientNamespaces[1]",
        ),
        (
            "DynamoDB tables on local storage",
            |c| {
                c.spec.storage.s3 = None;
                c.spec.storage.local =
                    serde_json::from_value(json!({"path": "/var/lib/lake"})).unwrap();
                c.spec.tables.registry = Some("some-registry".into());
            },
            "spec.tables",
        ),
    ];
    for (case, edit, field) in cases {
        let name = unique("bad");
        let mut cluster = cluster_yaml(&name, "");
        edit(&mut cluster);
        let h = harness(cluster).await;
        let recording = moto().start_recording();
        let action = h.reconcile().await;
        let log = recording.stop();
        assert_eq!(
            action,
            Action::await_change(),
            "{case}: a spec error is terminal"
        );
        let (status, reason, message) = h.condition("PlanValid").await;
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", "InvalidSpec"),
            "{case}"
        );
        assert!(
            message.contains(field),
            "{case}: {message} does not name {field}"
        );
        assert_eq!(h.condition("Ready").await.1, "PlanInvalid");
        let calls = requests_signed_by(&log, &h.key);
        assert!(calls.is_empty(), "{case}: AWS was called: {calls:?}");
        // Nothing but the status was written to Kubernetes.
        assert_eq!(h.versions().await.len(), 1, "{case}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_table_with_the_wrong_key_schema_is_a_terminal_condition_and_left_alone() {
    let name = unique("adopt");
    create_roles(&name).await;
    let ddb = dynamodb().await;
    let registry = format!("{NS}.{name}-registry");
    ddb.create_table()
        .table_name(&registry)
        .key_schema(
            aws_sdk_dynamodb::types::KeySchemaElement::builder()
                .attribute_name("id")
                .key_type(aws_sdk_dynamodb::types::KeyType::Hash)
                .build()
                .unwrap(),
        )
        .attribute_definitions(
            aws_sdk_dynamodb::types::AttributeDefinition::builder()
                .attribute_name("id")
                .attribute_type(aws_sdk_dynamodb::types::ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .billing_mode(aws_sdk_dynamodb::types::BillingMode::PayPerRequest)
        .send()
        .await
        .unwrap();
    let h = harness(cluster_yaml(&name, "")).await;
    let recording = moto().start_recording();
    let action = h.reconcile().await;
    let log = recording.stop();
    assert_eq!(action, Action::await_change());
    let (status, reason, message) = h.condition("TablesReady").await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "KeySchemaMismatch")
    );
    assert!(
        message.contains(&registry) && message.contains("HASH id"),
        "{message}"
    );
    let touched: Vec<_> = requests_signed_by(&log, &h.key)
        .into_iter()
        .filter(|r| r.resource == registry && !r.is_read())
        .collect();
    assert!(
        touched.is_empty(),
        "the foreign table was modified: {touched:?}"
    );
    let t = ddb
        .describe_table()
        .table_name(&registry)
        .send()
        .await
        .unwrap()
        .table
        .unwrap();
    assert_ne!(t.deletion_protection_enabled(), Some(true));
    assert!(
        ddb.scan()
            .table_name(&registry)
            .send()
            .await
            .unwrap()
            .items()
            .is_empty(),
        "no marker was written"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn paused_stops_mutation_but_not_deletion() {
    let name = unique("pz");
    create_roles(&name).await;
    let h = harness(cluster_yaml(&name, "  deletionPolicy: Delete\n")).await;
    h.reconcile().await;
    h.roll_out().await;
    h.reconcile().await;
    assert_eq!(h.condition("Ready").await.0, "True");

    // Paused: a spec change is not applied, nothing is written, the status says so.
    h.patch_spec(json!({"paused": true, "query": {"replicas": 5}}))
        .await;
    let recording = moto().start_recording();
    let (action, written) = h.writes_during(h.reconcile()).await;
    let log = recording.stop();
    assert_eq!(action, Action::await_change());
    assert!(
        requests_signed_by(&log, &h.key).is_empty(),
        "paused but AWS was called"
    );
    assert_eq!(
        written,
        [format!("patch lakeclusters/status {name}")],
        "only the status was written"
    );
    assert_eq!(h.deployment("query").await.spec.replicas, Some(2));
    let (status, reason, _) = h.condition("Ready").await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "WorkloadsNotReady")
    );
    assert_eq!(
        h.condition("WorkloadsReady").await.1,
        "ReconciliationPaused"
    );

    // Deleted while paused: the finalizer still runs — policies off the roles, tables deleted
    // (deletionPolicy: Delete) — and the LakeCluster goes.
    let deleting = h.deleting().await;
    let cluster = deleting.cluster().await;
    assert!(cluster.spec.paused && cluster.metadata.deletion_timestamp.is_some());
    reconcile(Arc::new(cluster), deleting.ctx.clone())
        .await
        .unwrap();
    assert!(
        deleting.clusters.get_opt(&name).await.unwrap().is_none(),
        "the finalizer was released"
    );
    let ddb = dynamodb().await;
    for table in [
        format!("{NS}.{name}-registry"),
        format!("{NS}.{name}-manifests"),
    ] {
        assert!(
            ddb.describe_table()
                .table_name(&table)
                .send()
                .await
                .is_err(),
            "{table} still exists"
        );
    }
    let policy = iam()
        .await
        .get_role_policy()
        .role_name(format!("{name}-query-role"))
        .policy_name(format!("lake.{NS}.{name}"))
        .send()
        .await;
    assert!(policy.is_err(), "the inline policy is still on the role");
}

#[tokio::test(flavor = "multi_thread")]
async fn retained_tables_survive_deletion() {
    let name = unique("rt");
    create_roles(&name).await;
    let h = harness(cluster_yaml(&name, "")).await;
    h.reconcile().await;
    let deleting = h.deleting().await;
    reconcile(Arc::new(deleting.cluster().await), deleting.ctx.clone())
        .await
        .unwrap();
    assert!(deleting.clusters.get_opt(&name).await.unwrap().is_none());
    let ddb = dynamodb().await;
    let t = ddb
        .describe_table()
        .table_name(format!("{NS}.{name}-manifests"))
        .send()
        .await
        .unwrap();
    assert_eq!(t.table.unwrap().deletion_protection_enabled(), Some(true));
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

#[tokio::test(flavor = "multi_thread")]
async fn matching_tables_are_adopted_and_another_clusters_are_not() {
    use aws_sdk_dynamodb::types::{AttributeValue, ScalarAttributeType};
    // A pre-existing registry with the right key schema and no marker: adopted.
    let name = unique("adopt-ok");
    create_roles(&name).await;
    create_lake_table(
        &format!("{NS}.{name}-registry"),
        "pk",
        ("sk", ScalarAttributeType::S),
    )
    .await;
    let h = harness(cluster_yaml(&name, "")).await;
    h.reconcile().await;
    assert_eq!(h.condition("TablesReady").await.0, "True");
    let tables = h.cluster().await.status.unwrap().tables.unwrap();
    assert!(
        tables.registry.unwrap().adopted,
        "the existing registry is reported adopted"
    );
    assert!(
        !tables.manifest.unwrap().adopted,
        "the manifest table was created"
    );

    // A manifest table that holds another cluster's marker: left alone, terminal condition.
    let other = unique("adopt-no");
    create_roles(&other).await;
    let manifests = format!("{NS}.{other}-manifests");
    create_lake_table(&manifests, "base_uri", ("version", ScalarAttributeType::N)).await;
    dynamodb()
        .await
        .put_item()
        .table_name(&manifests)
        .item("base_uri", AttributeValue::S("__lake__/authority".into()))
        .item("version", AttributeValue::N("0".into()))
        .item("format", AttributeValue::S("lake-manifests/v2".into()))
        .item("cluster", AttributeValue::S("someone-else".into()))
        .send()
        .await
        .unwrap();
    let h = harness(cluster_yaml(&other, "")).await;
    let recording = moto().start_recording();
    assert_eq!(h.reconcile().await, Action::await_change());
    let log = recording.stop();
    let (status, reason, message) = h.condition("TablesReady").await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "MarkerConflict")
    );
    assert!(message.contains("someone-else"), "{message}");
    let touched: Vec<_> = requests_signed_by(&log, &h.key)
        .into_iter()
        .filter(|r| r.resource == manifests && !r.is_read())
        .collect();
    assert!(
        touched.is_empty(),
        "another cluster's table was modified: {touched:?}"
    );
}

/// Metadata (the writer) admits connections only from the cluster's query pods and the pods of
/// the namespaces `spec.metadata.clientNamespaces` names, on its Flight port.
#[tokio::test(flavor = "multi_thread")]
async fn metadata_admits_only_query_pods_and_named_namespaces() {
    let name = unique("np");
    create_roles(&name).await;
    let mut cluster = cluster_yaml(&name, "");
    cluster.spec.metadata.client_namespaces = vec!["writers".into()];
    let h = harness(cluster).await;
    h.reconcile().await;
    let policy =
        Api::<k8s_openapi::api::networking::v1::NetworkPolicy>::namespaced(h.client.clone(), NS)
            .get(&format!("{name}-metadata"))
            .await
            .unwrap();
    let spec = serde_json::to_value(policy.spec.unwrap()).unwrap();
    assert_eq!(
        spec["podSelector"]["matchLabels"]["app.kubernetes.io/component"],
        "metadata"
    );
    assert_eq!(spec["policyTypes"], json!(["Ingress"]));
    let rules = spec["ingress"].as_array().unwrap();
    assert_eq!(rules.len(), 1, "{spec}");
    assert_eq!(
        rules[0]["ports"],
        json!([{"port": 8816, "protocol": "TCP"}])
    );
    let from = rules[0]["from"].as_array().unwrap();
    assert_eq!(from.len(), 2, "{spec}");
    assert_eq!(
        from[0]["podSelector"]["matchLabels"],
        json!({"app.kubernetes.io/component": "query", "app.kubernetes.io/instance": name,
               "app.kubernetes.io/name": "lake"})
    );
    assert!(
        from[0].get("namespaceSelector").is_none(),
        "query pods of this namespace only"
    );
    assert_eq!(
        from[1]["namespaceSelector"]["matchExpressions"],
        json!([{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["writers"]}])
    );
}

/// A local lake reconciles to one StatefulSet (its claim provisioned by the control plane) and
/// both roles' Services; once its pod is Ready the cluster is Ready without AWS or selftest
/// Jobs, and a converged pass writes nothing (the live StatefulSet, with the defaults the API
/// server adds to its claim template, matches the plan).
#[tokio::test(flavor = "multi_thread")]
async fn a_local_lake_is_one_stateful_set_that_converges() {
    use k8s_openapi::api::apps::v1::StatefulSet;
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    let name = unique("loc");
    let cluster: LakeCluster = serde_yaml::from_str(&format!(
        r#"
apiVersion: lake.dev/v1alpha1
kind: LakeCluster
metadata: {{name: {name}, namespace: {NS}}}
spec:
  storage: {{local: {{path: /var/lib/lake, size: 16Mi}}}}
  query: {{image: ghcr.io/acme/lake:1}}
  metadata: {{image: ghcr.io/acme/lake:1}}
"#
    ))
    .unwrap();
    let h = harness(cluster).await;
    let recording = moto().start_recording();
    h.reconcile().await;
    let sets: Api<StatefulSet> = Api::namespaced(h.client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), NS);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(h.client.clone(), NS);
    let set = format!("{name}-local");
    let pod = format!("{set}-0");
    // The StatefulSet controller creates the claim, the provisioner binds it, the scheduler
    // binds the pod; the test marks the pod Ready as its kubelet would.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let bound = pods
            .get_opt(&pod)
            .await
            .unwrap()
            .is_some_and(|p| p.spec.is_some_and(|s| s.node_name.is_some()));
        if bound {
            pods.patch_status(
                &pod,
                &PatchParams::default(),
                &Patch::Strategic(&lake_testkit::ready_pod_status()),
            )
            .await
            .unwrap();
            let status = sets.get(&set).await.unwrap().status.unwrap_or_default();
            if status.available_replicas == Some(1) && status.current_revision.is_some() {
                break;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{pod} not bound and available after 60 s: {:?}",
            sets.get(&set).await.unwrap().status
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let claim = claims.get(&format!("data-{pod}")).await.unwrap();
    assert_eq!(claim.status.and_then(|s| s.phase).as_deref(), Some("Bound"));
    h.reconcile().await;
    assert_eq!(h.condition("Ready").await.0, "True");
    assert_eq!(h.condition("TablesReady").await.1, "Embedded");
    let status = h.cluster().await.status.unwrap();
    assert!(
        !status
            .conditions
            .iter()
            .any(|c| c.type_ == "SelfTestPassed"),
        "no selftest Jobs for a local lake: {:?}",
        status.conditions
    );
    let deployments: Api<Deployment> = Api::namespaced(h.client.clone(), NS);
    let selector = format!("app.kubernetes.io/instance={name}");
    assert!(
        deployments
            .list(&ListParams::default().labels(&selector))
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert!(
        requests_signed_by(&recording.stop(), &h.key).is_empty(),
        "a local lake reaches no AWS"
    );
    let (_, written) = h.writes_during(h.reconcile()).await;
    assert!(
        written.is_empty(),
        "a converged pass wrote to Kubernetes: {written:?}"
    );
}
