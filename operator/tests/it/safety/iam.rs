//! IAM: a namespace never widens what the allowlist grants; dropped roles lose their grant; a
//! failed lookup deploys nothing.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn namespace_cannot_widen_iam_beyond_the_allowlist() {
    // The administrator allows namespace `data` exactly these roles and s3://<bucket>/wh.
    let strict = |name: &str| {
        Allowlist::parse(
            &format!(
                "namespaces:\n  data:\n    roles: [{name}-query-role, {name}-metadata-role]\n    storage: [{{bucket: {name}-bucket, prefix: wh}}]\n"
            ),
            "test allowlist",
        )
        .unwrap()
    };
    type Edit = fn(&mut LakeCluster, &str);
    let cases: [(&str, Edit, &str); 9] = [
        (
            "another team's role",
            |c, _| c.spec.iam.as_mut().unwrap().query_role = "payments-admin".into(),
            "spec.iam.queryRole",
        ),
        (
            "another bucket",
            |c, _| c.spec.storage.s3.as_mut().unwrap().bucket = "payments-bucket".into(),
            "spec.storage.s3",
        ),
        (
            "a sibling prefix",
            |c, _| c.spec.storage.s3.as_mut().unwrap().prefix = "wh2".into(),
            "spec.storage.s3",
        ),
        (
            "a wildcard prefix",
            |c, _| c.spec.storage.s3.as_mut().unwrap().prefix = "*".into(),
            "spec.storage.s3.prefix",
        ),
        (
            "a policy-variable prefix",
            |c, _| c.spec.storage.s3.as_mut().unwrap().prefix = "wh/${aws:username}".into(),
            "spec.storage.s3.prefix",
        ),
        (
            "a role ARN with a wildcard account",
            |c, name| {
                c.spec.iam.as_mut().unwrap().query_role =
                    format!("arn:aws:iam::*:role/{name}-query-role")
            },
            "spec.iam.queryRole",
        ),
        (
            "one role by name and by ARN",
            |c, name| {
                c.spec.iam.as_mut().unwrap().metadata_role =
                    format!("arn:aws:iam::123456789012:role/{name}-query-role")
            },
            "spec.iam.queryRole",
        ),
        (
            "one role in two cases",
            |c, name| {
                c.spec.iam.as_mut().unwrap().metadata_role =
                    format!("{name}-query-role").to_uppercase()
            },
            "spec.iam.queryRole",
        ),
        (
            // Run with an empty allowlist (below): the namespace has no entry.
            "a namespace the allowlist does not name",
            |_, _| {},
            "spec.iam.manage",
        ),
    ];
    for (case, edit, field) in cases {
        let name = unique("wide");
        create_roles(&name).await;
        let mut cluster = cluster_yaml(&name, "");
        edit(&mut cluster, &name);
        let allowlist = if field == "spec.iam.manage" {
            Allowlist::default()
        } else {
            strict(&name)
        };
        let h = harness_with(cluster, allowlist).await;
        let recording = moto().start_recording();
        let action = h.reconcile().await;
        let log = recording.stop();
        assert_eq!(action, Action::await_change(), "{case}: terminal");
        let (status, reason, message) = h.condition("PlanValid").await;
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", "InvalidSpec"),
            "{case}: {message}"
        );
        assert!(
            message.contains(field),
            "{case}: {message} does not name {field}"
        );
        let calls = requests_signed_by(&log, &h.key);
        assert!(calls.is_empty(), "{case}: AWS was called: {calls:?}");
        for role in [
            format!("{name}-query-role"),
            format!("{name}-metadata-role"),
        ] {
            assert!(
                !has_policy(&role, &name).await,
                "{case}: a policy reached {role}"
            );
        }
        assert_eq!(h.versions().await.len(), 1, "{case}: objects were written");
    }

    // Inside the allowlist (a prefix below the allowed one) the policies are written.
    let name = unique("narrow");
    create_roles(&name).await;
    let mut cluster = cluster_yaml(&name, "");
    cluster.spec.storage.s3.as_mut().unwrap().prefix = "wh/team".into();
    let h = harness_with(cluster, strict(&name)).await;
    h.reconcile().await;
    assert_eq!(h.condition("PoliciesReady").await.0, "True");
    assert!(has_policy(&format!("{name}-query-role"), &name).await);
    assert!(has_policy(&format!("{name}-metadata-role"), &name).await);
}

/// A role ARN of another account would have the operator write, on its own role of that name, a
/// policy granting tables in the other account: the account is pinned to the operator's own,
/// learned from STS (the emulator's account, 123456789012), and the refusal reaches nothing else.
#[tokio::test(flavor = "multi_thread")]
async fn allowlist_pins_the_role_account() {
    let strict = |name: &str| {
        Allowlist::parse(
            &format!(
                "namespaces:\n  data:\n    roles: [{name}-query-role, {name}-metadata-role]\n    storage: [{{bucket: {name}-bucket}}]\n"
            ),
            "test allowlist",
        )
        .unwrap()
    };
    let name = unique("account");
    create_roles(&name).await;
    let mut foreign = cluster_yaml(&name, "");
    foreign.spec.iam.as_mut().unwrap().query_role =
        format!("arn:aws:iam::999999999999:role/{name}-query-role");
    let h = harness_with(foreign, strict(&name)).await;
    let recording = moto().start_recording();
    assert_eq!(h.reconcile().await, Action::await_change());
    let log = recording.stop();
    let (status, reason, message) = h.condition("PlanValid").await;
    assert_eq!((status.as_str(), reason.as_str()), ("False", "InvalidSpec"));
    assert!(
        message.contains("spec.iam.queryRole") && message.contains("123456789012"),
        "{message}"
    );
    let calls: Vec<String> = requests_signed_by(&log, &h.key)
        .into_iter()
        .map(|r| format!("{} {}", r.service, r.action))
        .collect();
    assert_eq!(
        calls,
        ["sts GetCallerIdentity"],
        "only the operator's own identity"
    );
    for role in [
        format!("{name}-query-role"),
        format!("{name}-metadata-role"),
    ] {
        assert!(!has_policy(&role, &name).await, "a policy reached {role}");
    }

    // The same role in the operator's own account is admitted, and its policy written.
    let name = unique("account");
    create_roles(&name).await;
    let mut own = cluster_yaml(&name, "");
    own.spec.iam.as_mut().unwrap().query_role =
        format!("arn:aws:iam::123456789012:role/{name}-query-role");
    let h = harness_with(own, strict(&name)).await;
    h.reconcile().await;
    assert_eq!(h.condition("PoliciesReady").await.0, "True");
    assert!(has_policy(&format!("{name}-query-role"), &name).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_role_dropped_from_the_spec_loses_its_grant() {
    let name = unique("swap");
    create_roles(&name).await;
    super::super::reconcile::create_role(&format!("{name}-new-query-role")).await;
    let h = harness(cluster_yaml(&name, "")).await;
    h.reconcile().await;
    let old = format!("{name}-query-role");
    assert!(has_policy(&old, &name).await);
    h.patch_spec(json!({"iam": {"queryRole": format!("{name}-new-query-role")}}))
        .await;
    h.reconcile().await;
    assert!(has_policy(&format!("{name}-new-query-role"), &name).await);
    assert!(
        !has_policy(&old, &name).await,
        "the old role kept its grant"
    );
    // Converged: the revocation is not repeated (reads only).
    let recording = moto().start_recording();
    h.reconcile().await;
    let log = recording.stop();
    let written: Vec<_> = writes(&requests_signed_by(&log, &h.key))
        .into_iter()
        .cloned()
        .collect();
    assert!(written.is_empty(), "{written:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn failed_role_lookup_deploys_nothing() {
    // The roles do not exist: GetRole fails.
    let name = unique("norole");
    let h = harness(cluster_yaml(&name, "")).await;
    let recording = moto().start_recording();
    let result = reconcile(Arc::new(h.cluster().await), h.ctx.clone()).await;
    let log = recording.stop();
    let error = result.expect_err("a failed role lookup must fail the pass (backoff, metric)");
    assert_eq!(error.reason(), "RoleNotFound");
    assert!(
        h.ctx.metrics.render().contains("RoleNotFound"),
        "no error metric: {}",
        h.ctx.metrics.render()
    );
    let (status, reason, _) = h.condition("PoliciesReady").await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "RoleNotFound")
    );
    assert_eq!(h.condition("WorkloadsReady").await.0, "Unknown");
    let by_cluster = ListParams::default().labels(&format!("app.kubernetes.io/instance={name}"));
    let accounts: Vec<_> = Api::<ServiceAccount>::namespaced(h.client.clone(), NS)
        .list(&by_cluster)
        .await
        .unwrap()
        .items;
    assert!(
        accounts.is_empty(),
        "ServiceAccounts were applied: {accounts:?}"
    );
    assert_eq!(h.versions().await.len(), 1, "objects were applied");
    let written = writes(&requests_signed_by(&log, &h.key))
        .into_iter()
        .cloned()
        .collect::<Vec<_>>();
    assert!(
        written.is_empty(),
        "AWS writes before the roles resolved: {written:?}"
    );

    // Once the roles exist, the ServiceAccounts carry their real ARNs.
    create_roles(&name).await;
    h.reconcile().await;
    let accounts = Api::<ServiceAccount>::namespaced(h.client.clone(), NS)
        .list(&by_cluster)
        .await
        .unwrap()
        .items;
    assert_eq!(accounts.len(), 2);
    for sa in accounts {
        let arn = &sa.metadata.annotations.unwrap()["eks.amazonaws.com/role-arn"];
        assert!(
            arn.starts_with("arn:aws:iam::123456789012:role/") && !arn.contains('<'),
            "{arn}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn status_drops_what_the_spec_dropped() {
    let name = unique("drop");
    create_roles(&name).await;
    let h = harness(cluster_yaml(&name, "")).await;
    h.reconcile().await;
    let status = h.cluster().await.status.unwrap();
    assert!(status.policies.is_some() && status.tables.is_some());

    // No more spec.iam: no policies in status.
    h.patch_spec(json!({"iam": null})).await;
    h.reconcile().await;
    let status = h.cluster().await.status.unwrap();
    assert!(
        status.policies.is_none(),
        "stale policies: {:?}",
        status.policies
    );
    assert!(status.tables.is_some());

    // Storage cannot switch kinds (the API server refuses it): the workloads of one would be
    // left running beside the other's.
    let switched = h
        .clusters
        .patch(
            &h.name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"storage": {"s3": null,
                "local": {"path": "/var/lib/lake"}}, "query": {"replicas": 1}}})),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        switched.contains("spec.storage cannot switch between s3 and local"),
        "{switched}"
    );

    // An invalid spec: the pass observed nothing, so nothing but conditions (and the record of
    // grants still to revoke, none here) is reported.
    h.patch_spec(json!({"query": {"image": " "}})).await;
    h.reconcile().await;
    let status = h.cluster().await.status.unwrap();
    assert!(
        status.endpoints.is_none() && status.tables.is_none() && status.policies.is_none(),
        "{status:?}"
    );
}
