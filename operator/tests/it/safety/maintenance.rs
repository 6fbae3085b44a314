//! The maintenance CronJob follows the spec: rendered with its own ServiceAccount and role
//! grant, its status read only from Jobs the live CronJob controls, and everything of it gone
//! (the CronJob, its ServiceAccount and ConfigMap, the grant, the status) once
//! `spec.maintenance` is removed — even when the edit goes through a refused spec first.

use super::*;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use kube::api::PostParams;

#[tokio::test(flavor = "multi_thread")]
async fn maintenance_follows_the_spec_and_only_its_own_jobs() {
    let name = unique("maint");
    create_roles(&name).await;
    let maintenance_role = format!("{name}-maintenance-role");
    super::super::reconcile::create_role(&maintenance_role).await;
    let mut cluster = cluster_yaml(&name, "");
    cluster.spec.iam.as_mut().unwrap().maintenance_role = Some(maintenance_role.clone());
    cluster.spec.maintenance = Some(serde_yaml::from_str("schedule: '@daily'").unwrap());
    let h = harness(cluster).await;
    h.reconcile().await;
    h.roll_out().await;
    h.reconcile().await;

    let cron_jobs: Api<CronJob> = Api::namespaced(h.client.clone(), NS);
    let cron_job = format!("{name}-maintenance");
    let live = cron_jobs.get(&cron_job).await.unwrap();
    let spec = live.spec;
    assert_eq!(spec.schedule, "@daily");
    assert_eq!(spec.concurrency_policy.as_deref(), Some("Forbid"));
    let pod = spec.job_template.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some(cron_job.as_str()));
    let args = pod.containers[0].args.clone().unwrap();
    assert_eq!(args[0], "maintain");
    let account = Api::<ServiceAccount>::namespaced(h.client.clone(), NS)
        .get(&cron_job)
        .await
        .unwrap();
    let annotation = account.metadata.annotations.unwrap_or_default();
    assert!(
        annotation
            .get("eks.amazonaws.com/role-arn")
            .is_some_and(|arn| arn.ends_with(&format!(":role/{maintenance_role}"))),
        "{annotation:?}"
    );
    assert!(has_policy(&maintenance_role, &name).await);
    let status = h.cluster().await.status.unwrap();
    assert!(status.policies.unwrap().maintenance.is_some());
    assert_eq!(status.maintenance.unwrap().cron_job, cron_job);
    assert_eq!(h.condition("Maintained").await.1, "NoPassYet");

    // A Job that carries the labels and names the CronJob, but not its uid, is not a pass.
    let forged: Job = serde_json::from_value(json!({
        "metadata": {
            "name": format!("{name}-forged"),
            "labels": {
                "app.kubernetes.io/instance": name,
                "app.kubernetes.io/component": "maintenance",
                "app.kubernetes.io/managed-by": "lake-operator",
            },
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": cron_job,
                "uid": "00000000-0000-0000-0000-000000000000", "controller": true}],
        },
        "spec": {
            "suspend": true,
            "template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "x", "image": "lake:1"}]}},
        },
    }))
    .unwrap();
    Api::<Job>::namespaced(h.client.clone(), NS)
        .create(&PostParams::default(), &forged)
        .await
        .unwrap();
    h.reconcile().await;
    let maintenance = h.cluster().await.status.unwrap().maintenance.unwrap();
    assert_eq!((maintenance.last_pass, maintenance.running), (None, None));

    // spec.maintenance removed first: refused (the role would hold a grant nothing uses), and
    // the record of the grant is kept so that it can still be revoked.
    h.patch_spec(json!({"maintenance": null})).await;
    h.reconcile().await;
    assert_eq!(h.condition("PlanValid").await.0, "False");
    let recorded = h.cluster().await.status.unwrap().policies.unwrap();
    assert!(recorded.maintenance.is_some(), "{recorded:?}");
    // Then the role: the CronJob, its ServiceAccount and ConfigMap, the grant and the status go.
    h.patch_spec(json!({"iam": {"maintenanceRole": null}}))
        .await;
    h.reconcile().await;
    assert!(cron_jobs.get_opt(&cron_job).await.unwrap().is_none());
    for gone in [
        Api::<ServiceAccount>::namespaced(h.client.clone(), NS)
            .get_opt(&cron_job)
            .await
            .unwrap()
            .map(|_| "ServiceAccount"),
        Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(h.client.clone(), NS)
            .get_opt(&cron_job)
            .await
            .unwrap()
            .map(|_| "ConfigMap"),
    ] {
        assert_eq!(gone, None, "the maintenance {gone:?} is still there");
    }
    assert!(
        !has_policy(&maintenance_role, &name).await,
        "the maintenance role kept its grant"
    );
    let status = h.cluster().await.status.unwrap();
    assert_eq!(status.maintenance, None);
    assert_eq!(status.policies.unwrap().maintenance, None);
    assert!(!status.conditions.iter().any(|c| c.type_ == "Maintained"));
}
