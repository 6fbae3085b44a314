//! LakeCluster through the real API server: the operator's types serialise, store and patch as
//! the installed CRD (with its status subresource) expects.

use kube::api::{Api, Patch, PatchParams, PostParams};
use lake_operator::crd::{Condition, ConditionStatus, LakeCluster, LakeClusterStatus};
use lake_operator::validate::validate;
use lake_testkit::{unique, workspace_root};

use super::control::{admin_client, namespace};

#[tokio::test]
async fn samples_round_trip_with_a_status_subresource() {
    let sample =
        std::fs::read_to_string(workspace_root().join("config/samples/lakecluster-cloud.yaml"))
            .unwrap();
    let mut cluster: LakeCluster = serde_yaml::from_str(&sample).unwrap();
    let name = unique("analytics");
    cluster.metadata.name = Some(name.clone());
    namespace("data");
    let api: Api<LakeCluster> = Api::namespaced(admin_client().await, "data");
    api.create(&PostParams::default(), &cluster).await.unwrap();
    let stored = api.get(&name).await.unwrap();
    assert_eq!(
        stored.spec, cluster.spec,
        "the API server stored the spec as sent"
    );
    let plan = validate(&stored).unwrap();
    assert_eq!(plan.authority.warehouse(), "s3://acme-lake/analytics");

    let status = LakeClusterStatus {
        observed_generation: stored.metadata.generation,
        conditions: vec![Condition {
            type_: "PlanValid".into(),
            status: ConditionStatus::True,
            reason: "Validated".into(),
            message: String::new(),
            observed_generation: stored.metadata.generation,
            last_transition_time: None,
        }],
        ..Default::default()
    };
    let patch = serde_json::json!({"status": status});
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let patched = api.get(&name).await.unwrap();
    assert_eq!(patched.status, Some(status));
    assert_eq!(
        patched.spec, stored.spec,
        "a status patch leaves the spec alone"
    );
}
