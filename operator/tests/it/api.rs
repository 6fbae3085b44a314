//! LakeCluster through the in-memory Kubernetes API (kube-fake-client): the types the reconcile
//! tests will use serialise, store and patch like a real API server's objects.

use kube::api::{Api, Patch, PatchParams};
use kube_fake_client::ClientBuilder;
use lake_operator::crd::{Condition, LakeCluster, LakeClusterStatus};
use lake_operator::validate::validate;
use lake_testkit::workspace_root;

#[tokio::test]
async fn samples_round_trip_with_a_status_subresource() {
    let client = ClientBuilder::new()
        .with_fixture_dir(workspace_root().join("config/samples"))
        .load_fixture("lakecluster-cloud.yaml")
        .unwrap()
        .with_resource::<LakeCluster>()
        .with_status_subresource::<LakeCluster>()
        .build()
        .await
        .unwrap();
    let api: Api<LakeCluster> = Api::namespaced(client, "data");
    let stored = api.get("analytics").await.unwrap();
    let plan = validate(&stored).unwrap();
    assert_eq!(plan.authority.warehouse(), "s3://acme-lake/analytics");

    let status = LakeClusterStatus {
        observed_generation: stored.metadata.generation,
        conditions: vec![Condition {
            type_: "PlanValid".into(),
            status: "True".into(),
            reason: "Validated".into(),
            message: String::new(),
            observed_generation: stored.metadata.generation,
            last_transition_time: None,
        }],
        ..Default::default()
    };
    let patch = serde_json::json!({"status": status});
    api.patch_status("analytics", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let patched = api.get("analytics").await.unwrap();
    assert_eq!(patched.status, Some(status));
    assert_eq!(
        patched.spec, stored.spec,
        "a status patch leaves the spec alone"
    );
}
