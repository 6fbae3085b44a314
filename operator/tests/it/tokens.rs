//! Bearer tokens: each role gets its own Secret with a random token, mounted where the role's
//! `LAKE_TOKEN_FILE` points; the operator creates it once and never overwrites it (a user's
//! rotation stays), sends nothing for it on a converged pass, and creates it again when it is
//! gone and the workloads are not ready.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, PostParams};
use lake_testkit::unique;
use serde_json::json;

use super::reconcile::{NS, cluster_yaml, create_roles, harness};

fn token(secret: &Secret) -> String {
    String::from_utf8(secret.data.as_ref().unwrap()["tokens"].0.clone()).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn each_role_gets_its_own_token_secret_created_once() {
    let name = unique("tok");
    create_roles(&name).await;
    let h = harness(cluster_yaml(&name, "")).await;
    h.reconcile().await;
    let uid = h.cluster().await.metadata.uid.unwrap();
    let secrets: Api<Secret> = Api::namespaced(h.client.clone(), NS);

    let mut tokens = Vec::new();
    for role in ["query", "metadata"] {
        let secret = secrets.get(&format!("{name}-{role}-token")).await.unwrap();
        assert_eq!(
            secret.metadata.owner_references.as_ref().unwrap()[0].uid,
            uid
        );
        let token = token(&secret);
        let line = token
            .strip_suffix('\n')
            .unwrap_or_else(|| panic!("{token:?}"));
        assert!(
            line.len() == 64 && line.chars().all(|c| c.is_ascii_hexdigit()),
            "{role}: not 32 random bytes in hex: {line:?}"
        );
        tokens.push(token);

        let config = Api::<ConfigMap>::namespaced(h.client.clone(), NS)
            .get(&format!("{name}-{role}"))
            .await
            .unwrap();
        assert_eq!(
            config.data.unwrap()["LAKE_TOKEN_FILE"],
            "/var/run/secrets/lake/tokens"
        );
        let pod = h.deployment(role).await.spec.template.spec.unwrap();
        let volume = pod
            .volumes
            .unwrap()
            .into_iter()
            .find(|v| v.name == "tokens")
            .expect("a tokens volume");
        assert_eq!(
            volume.secret.unwrap().secret_name.unwrap(),
            format!("{name}-{role}-token")
        );
        let mount = pod.containers[0]
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.name == "tokens")
            .cloned()
            .expect("a tokens mount");
        assert_eq!(mount.mount_path, "/var/run/secrets/lake");
        assert_eq!(mount.read_only, Some(true));
    }
    assert_ne!(
        tokens[0], tokens[1],
        "a query token must never be valid on metadata"
    );
    let status = h.cluster().await.status.unwrap().tokens.unwrap();
    assert_eq!(status.query_secret, format!("{name}-query-token"));
    assert_eq!(status.metadata_secret, format!("{name}-metadata-token"));

    // The user rotates the query token: the operator keeps the user's token.
    let query_secret = format!("{name}-query-token");
    let mut rotated = secrets.get(&query_secret).await.unwrap();
    rotated.data = Some(
        [(
            "tokens".to_owned(),
            k8s_openapi::ByteString(b"rotated-by-the-user\n".to_vec()),
        )]
        .into(),
    );
    secrets
        .replace(&query_secret, &PostParams::default(), &rotated)
        .await
        .unwrap();
    h.roll_out().await;
    h.reconcile().await;
    assert_eq!(h.condition("Ready").await.0, "True");
    assert_eq!(
        token(&secrets.get(&query_secret).await.unwrap()),
        "rotated-by-the-user\n"
    );
    // Converged: nothing is sent for the Secrets (nor anything else).
    let (_, written) = h.writes_during(h.reconcile()).await;
    assert!(written.is_empty(), "{written:?}");

    // Deleted while the workloads roll: the next pass creates it again, with a new token.
    let metadata_secret = format!("{name}-metadata-token");
    secrets
        .delete(&metadata_secret, &DeleteParams::default())
        .await
        .unwrap();
    h.patch_spec(json!({"query": {"replicas": 3}})).await;
    h.reconcile().await; // the rollout starts: WorkloadsReady False
    let (_, written) = h.writes_during(h.reconcile()).await;
    assert!(
        written.contains(&format!("create secrets {metadata_secret}")),
        "{written:?}"
    );
    let recreated = token(&secrets.get(&metadata_secret).await.unwrap());
    assert_ne!(recreated, tokens[1], "a new random token");
}
