//! Bearer tokens: each role gets its own Secret with a random token, mounted where the role's
//! `LAKE_TOKEN_FILE` points; the operator creates it once and never overwrites it (a user's
//! rotation stays), sends nothing for it on a converged pass, and creates it again when it is
//! gone and the workloads are not ready.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, PostParams};
use lake_testkit::unique;
use serde_json::json;

use super::reconcile::{Harness, NS, cluster_yaml, create_roles, harness};

/// One pass whose outcome may be an error (a terminal condition is still Ok).
async fn reconcile_once(h: &super::reconcile::Harness, cluster: lake_operator::crd::LakeCluster) {
    let _ = lake_operator::reconcile::reconcile(std::sync::Arc::new(cluster), h.ctx.clone()).await;
}

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

/// TLS is on unless disabled: one Secret with each role's certificate and key and the CA, each
/// pod mounting only its own role's pair, `LAKE_TLS_*` pointing at them, the CA published in a
/// ConfigMap for clients, `grpc+tls://` endpoints. `spec.tls: Disabled` has none of it.
#[tokio::test(flavor = "multi_thread")]
async fn tls_is_on_unless_disabled_with_a_certificate_per_role() {
    let name = unique("tls");
    create_roles(&name).await;
    let h = harness(cluster_yaml(&name, "")).await;
    h.reconcile().await;
    let secrets: Api<Secret> = Api::namespaced(h.client.clone(), NS);
    let secret = secrets.get(&format!("{name}-lake-tls")).await.unwrap();
    let data = secret.data.unwrap();
    let keys: Vec<&str> = data.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "ca.crt",
            "metadata.crt",
            "metadata.key",
            "query.crt",
            "query.key",
            "worker.crt",
            "worker.key"
        ]
    );
    let ca = Api::<ConfigMap>::namespaced(h.client.clone(), NS)
        .get(&format!("{name}-lake-ca"))
        .await
        .unwrap();
    assert_eq!(
        ca.data.unwrap()["ca.crt"].as_bytes(),
        data["ca.crt"].0.as_slice(),
        "the published CA is the one that signed the certificates"
    );
    for role in ["query", "metadata"] {
        let config = Api::<ConfigMap>::namespaced(h.client.clone(), NS)
            .get(&format!("{name}-{role}"))
            .await
            .unwrap()
            .data
            .unwrap();
        assert_eq!(
            config["LAKE_TLS_CERT_FILE"],
            "/var/run/secrets/lake-tls/tls.crt"
        );
        assert_eq!(
            config["LAKE_TLS_KEY_FILE"],
            "/var/run/secrets/lake-tls/tls.key"
        );
        let pod = h.deployment(role).await.spec.template.spec.unwrap();
        let volume = pod
            .volumes
            .unwrap()
            .into_iter()
            .find(|v| v.name == "tls")
            .expect("a tls volume");
        let items: Vec<(String, String)> = volume
            .secret
            .unwrap()
            .items
            .unwrap()
            .into_iter()
            .map(|i| (i.key, i.path))
            .collect();
        assert_eq!(
            items,
            [
                (format!("{role}.crt"), "tls.crt".to_owned()),
                (format!("{role}.key"), "tls.key".to_owned())
            ],
            "a pod mounts its own role's certificate and key only"
        );
    }
    // The CA ConfigMap goes missing: the Secret's CA cannot be recovered, so the pass says what
    // to do instead of reporting TLS in place; deleting the Secret issues everything anew.
    let ca_maps = Api::<ConfigMap>::namespaced(h.client.clone(), NS);
    ca_maps
        .delete(&format!("{name}-lake-ca"), &DeleteParams::default())
        .await
        .unwrap();
    h.patch_spec(json!({"query": {"replicas": 3}})).await;
    h.reconcile().await; // WorkloadsReady False: the next pass checks the created-once objects
    let cluster = h.cluster().await;
    reconcile_once(&h, cluster).await;
    let (status, reason, message) = h.condition("WorkloadsReady").await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "CaNotPublished"),
        "{message}"
    );
    assert!(
        message.contains(&format!("delete Secret \"{name}-lake-tls\"")),
        "{message}"
    );
    secrets
        .delete(&format!("{name}-lake-tls"), &DeleteParams::default())
        .await
        .unwrap();
    reconcile_once(&h, h.cluster().await).await;
    let reissued = secrets
        .get(&format!("{name}-lake-tls"))
        .await
        .unwrap()
        .data
        .unwrap();
    assert_ne!(reissued["ca.crt"], data["ca.crt"], "a new CA");
    let published = ca_maps
        .get(&format!("{name}-lake-ca"))
        .await
        .unwrap()
        .data
        .unwrap();
    assert_eq!(
        published["ca.crt"].as_bytes(),
        reissued["ca.crt"].0.as_slice()
    );

    let status = h.cluster().await.status.unwrap();
    let tls = status.tls.unwrap();
    assert_eq!(
        (tls.secret.as_str(), tls.ca_config_map.as_str()),
        (
            format!("{name}-lake-tls").as_str(),
            format!("{name}-lake-ca").as_str()
        )
    );
    assert!(
        status
            .endpoints
            .unwrap()
            .query
            .unwrap()
            .starts_with("grpc+tls://")
    );

    // Disabled: plaintext, explicitly.
    let plain = unique("plain");
    create_roles(&plain).await;
    let h = harness(cluster_yaml(&plain, "  tls: Disabled\n")).await;
    h.reconcile().await;
    assert!(
        secrets
            .get_opt(&format!("{plain}-lake-tls"))
            .await
            .unwrap()
            .is_none()
    );
    let config = Api::<ConfigMap>::namespaced(h.client.clone(), NS)
        .get(&format!("{plain}-query"))
        .await
        .unwrap()
        .data
        .unwrap();
    assert!(!config.contains_key("LAKE_TLS_CERT_FILE"), "{config:?}");
    let status = h.cluster().await.status.unwrap();
    assert!(status.tls.is_none());
    assert!(
        status
            .endpoints
            .unwrap()
            .query
            .unwrap()
            .starts_with("grpc://")
    );
}

/// A pass stopped after publishing the CA and before creating the Secret it signed (an operator
/// killed there): the next pass sees the published CA without its Secret, issues a new pair,
/// publishes its CA first and then creates the Secret, so the two always match.
#[tokio::test(flavor = "multi_thread")]
async fn a_pass_stopped_between_the_ca_and_its_secret_is_repaired() {
    let name = unique("tlscrash");
    create_roles(&name).await;
    let h = harness(cluster_yaml(&name, "")).await;
    // What the stopped pass left: the CA ConfigMap (this cluster's, generation 0), no Secret.
    let uid = h.cluster().await.metadata.uid.unwrap();
    let in_a_year = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 365 * 24 * 3600;
    let stale = serde_json::from_value::<ConfigMap>(json!({
        "metadata": {"name": format!("{name}-lake-ca"), "namespace": NS,
            "annotations": {"lake.dev/tls-generation": "0", "lake.dev/tls-expires": in_a_year.to_string()},
            "ownerReferences": [{"apiVersion": "lake.dev/v1alpha1", "kind": "LakeCluster",
                "name": name, "uid": uid, "controller": true, "blockOwnerDeletion": true}]},
        "data": {"ca.crt": "-----BEGIN CERTIFICATE-----\nstale\n-----END CERTIFICATE-----\n"}
    }))
    .unwrap();
    let ca_maps = Api::<ConfigMap>::namespaced(h.client.clone(), NS);
    ca_maps
        .create(&PostParams::default(), &stale)
        .await
        .unwrap();
    h.reconcile().await;
    let secret = Api::<Secret>::namespaced(h.client.clone(), NS)
        .get(&format!("{name}-lake-tls"))
        .await
        .unwrap()
        .data
        .unwrap();
    let published = ca_maps
        .get(&format!("{name}-lake-ca"))
        .await
        .unwrap()
        .data
        .unwrap();
    assert_eq!(
        published["ca.crt"].as_bytes(),
        secret["ca.crt"].0.as_slice(),
        "the published CA signed the Secret's certificates; the stale one, which signed nothing \
         that serves, is not kept"
    );
    assert_ne!(h.condition("WorkloadsReady").await.1, "CaNotPublished");
}

/// Whoever may edit the CA ConfigMap cannot put renewal off: the recorded expiry is bounded by
/// the newest CA certificate's own. Here the published CA expires in 10 days while the annotation
/// says ten years: the next pass renews.
#[tokio::test(flavor = "multi_thread")]
async fn renewal_follows_the_certificate_not_the_annotation() {
    let (h, name, now, ca_maps, secrets) = tls_cluster("postpone").await;
    let ca_name = format!("{name}-lake-ca");
    let published = ca_maps.get(&ca_name).await.unwrap();
    let bundle = published.data.unwrap()["ca.crt"].clone();
    let expiring = ca_expiring_in_10_days();
    let ten_years = now + 10 * 365 * 24 * 3600;
    let postponed = json!({
        "metadata": {"annotations": {"lake.dev/tls-expires": ten_years.to_string()}},
        "data": {"ca.crt": format!("{expiring}{bundle}")},
    });
    patch_ca(&ca_maps, &name, postponed).await;
    h.reconcile().await;
    assert!(
        secrets
            .get_opt(&format!("{name}-lake-tls-1"))
            .await
            .unwrap()
            .is_some(),
        "no renewal: the annotation put it off"
    );
    let renewed = ca_maps.get(&ca_name).await.unwrap();
    assert_eq!(
        renewed.metadata.annotations.unwrap()["lake.dev/tls-generation"],
        "1"
    );
}

/// The next CA is published before any pod serves a certificate it signed: 60 days before the
/// served generation expires, its CA joins `ca.crt` and its Secret is created while the pods keep
/// the generation they have; they move onto it 30 days later, or once the generation they serve
/// nears its own expiry.
#[tokio::test(flavor = "multi_thread")]
async fn the_next_ca_is_published_before_the_pods_serve_it() {
    let (h, name, now, ca_maps, secrets) = tls_cluster("prepublish").await;
    let ca_name = format!("{name}-lake-ca");
    let old_ca = ca_maps.get(&ca_name).await.unwrap().data.unwrap()["ca.crt"].clone();
    // 45 days before expiry: published, not served.
    let in_45_days = now + 45 * 24 * 3600;
    let soon =
        json!({"metadata": {"annotations": {"lake.dev/tls-expires": in_45_days.to_string()}}});
    patch_ca(&ca_maps, &name, soon).await;
    h.reconcile().await;
    let next = secrets.get(&format!("{name}-lake-tls-1")).await.unwrap();
    let new_ca = String::from_utf8(next.data.unwrap()["ca.crt"].0.clone()).unwrap();
    let published = ca_maps.get(&ca_name).await.unwrap();
    assert_eq!(
        published.metadata.annotations.as_ref().unwrap()["lake.dev/tls-generation"],
        "1"
    );
    assert_eq!(
        published.data.unwrap()["ca.crt"],
        format!("{new_ca}{old_ca}"),
        "the next CA published beside the one served"
    );
    // Not yet served: clients may not have read the next CA.
    assert_served(&h, &format!("{name}-lake-tls")).await;
    // The next pass changes nothing: the pods wait 30 days.
    h.reconcile().await;
    assert_served(&h, &format!("{name}-lake-tls")).await;
    let after_next = format!("{name}-lake-tls-2");
    let next_after = || secrets.get_opt(&after_next);
    assert!(next_after().await.unwrap().is_none());
    // Once the CA they serve is within 30 days of its expiry, they move onto the published one
    // (and nothing new is issued).
    let expiring = ca_expiring_in_10_days();
    patch_ca(
        &ca_maps,
        &name,
        json!({"data": {"ca.crt": format!("{new_ca}{expiring}")}}),
    )
    .await;
    h.reconcile().await;
    assert_served(&h, &format!("{name}-lake-tls-1")).await;
    assert!(next_after().await.unwrap().is_none());
}

/// Both roles' pods mount `secret`, and status names it.
async fn assert_served(h: &Harness, secret: &str) {
    for role in ["query", "metadata"] {
        assert_eq!(
            mounted_tls_secret(h.deployment(role).await),
            secret,
            "{role}"
        );
    }
    let status = h.cluster().await.status.unwrap();
    assert_eq!(status.tls.unwrap().secret, secret);
}

/// Certificates are renewed before they expire, and each renewal rotates the CA without an
/// outage: a new generation (CA, certificates, Secret) once the recorded expiry is within 30
/// days, the CA bundle holding the new CA and the old, the pods moved onto the new Secret, the
/// old one left as it was.
#[tokio::test(flavor = "multi_thread")]
async fn certificates_are_renewed_before_they_expire() {
    let (h, name, now, ca_maps, secrets) = tls_cluster("renew").await;
    let annotation = |cm: &ConfigMap, key: &str| -> u64 {
        cm.metadata.annotations.as_ref().unwrap()[key]
            .parse()
            .unwrap()
    };
    let first = ca_maps.get(&format!("{name}-lake-ca")).await.unwrap();
    assert_eq!(annotation(&first, "lake.dev/tls-generation"), 0);
    let expires = annotation(&first, "lake.dev/tls-expires");
    assert!(
        expires.abs_diff(now + 365 * 24 * 3600) < 3600,
        "valid for a year: {expires} at {now}"
    );
    let old_ca = first.data.as_ref().unwrap()["ca.crt"].clone();

    // Within 30 days of its expiry (as an administrator forces it), the next pass renews.
    let soon = json!({"metadata": {"annotations": {"lake.dev/tls-expires": (now + 24 * 3600).to_string()}}});
    patch_ca(&ca_maps, &name, soon).await;
    h.reconcile().await;
    let renewed = secrets.get(&format!("{name}-lake-tls-1")).await.unwrap();
    let renewed = renewed.data.unwrap();
    let published = ca_maps.get(&format!("{name}-lake-ca")).await.unwrap();
    assert_eq!(annotation(&published, "lake.dev/tls-generation"), 1);
    assert!(annotation(&published, "lake.dev/tls-expires") > now + 300 * 24 * 3600);
    let bundle = published.data.unwrap()["ca.crt"].clone();
    let new_ca = String::from_utf8(renewed["ca.crt"].0.clone()).unwrap();
    assert_ne!(new_ca, old_ca, "a new CA");
    assert_eq!(
        bundle,
        format!("{new_ca}{old_ca}"),
        "the new CA first, the old one kept"
    );
    // The old generation's Secret is left as it was (old pods keep serving until they roll).
    let old = secrets
        .get(&format!("{name}-lake-tls"))
        .await
        .unwrap()
        .data
        .unwrap();
    assert_eq!(String::from_utf8(old["ca.crt"].0.clone()).unwrap(), old_ca);
    // The pods move onto the new Secret; status names it.
    assert_served(&h, &format!("{name}-lake-tls-1")).await;
    // The new certificates chain to the new CA, and to the bundle clients read; not to the old CA.
    let dir = tempfile::tempdir().unwrap();
    let file = |n: &str, text: &[u8]| {
        let path = dir.path().join(n);
        std::fs::write(&path, text).unwrap();
        path
    };
    let leaf = file("query.crt", &renewed["query.crt"].0);
    for (ca, ok) in [
        (bundle.as_str(), true),
        (new_ca.as_str(), true),
        (old_ca.as_str(), false),
    ] {
        let ca_file = file("ca.pem", ca.as_bytes());
        let out = std::process::Command::new("openssl")
            .args(["verify", "-CAfile"])
            .arg(&ca_file)
            .arg(&leaf)
            .output()
            .expect("openssl (scripts/bootstrap installs it)");
        assert_eq!(
            out.status.success(),
            ok,
            "{}",
            lake_testkit::output_text(&out)
        );
    }
    // Renewed, the next pass leaves it.
    h.reconcile().await;
    assert!(
        secrets
            .get_opt(&format!("{name}-lake-tls-2"))
            .await
            .unwrap()
            .is_none()
    );
}

/// A TLS cluster named after `prefix`, reconciled once; now (seconds since the epoch); its
/// namespace's ConfigMaps and Secrets.
async fn tls_cluster(prefix: &str) -> (Harness, String, u64, Api<ConfigMap>, Api<Secret>) {
    let name = unique(prefix);
    create_roles(&name).await;
    let h = harness(cluster_yaml(&name, "")).await;
    h.reconcile().await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let ca_maps = Api::<ConfigMap>::namespaced(h.client.clone(), NS);
    let secrets: Api<Secret> = Api::namespaced(h.client.clone(), NS);
    (h, name, now, ca_maps, secrets)
}

/// The Secret a Deployment's pods mount as their certificate.
fn mounted_tls_secret(deployment: k8s_openapi::api::apps::v1::Deployment) -> String {
    tls_volume(deployment).secret_name.unwrap()
}

/// The TLS volume a Deployment's pods mount.
fn tls_volume(
    deployment: k8s_openapi::api::apps::v1::Deployment,
) -> k8s_openapi::api::core::v1::SecretVolumeSource {
    deployment
        .spec
        .template
        .spec
        .unwrap()
        .volumes
        .unwrap()
        .into_iter()
        .find(|v| v.name == "tls")
        .unwrap()
        .secret
        .unwrap()
}

/// A self-signed CA certificate (PEM) that expires in 10 days.
fn ca_expiring_in_10_days() -> String {
    let mut params = rcgen::CertificateParams::new(Vec::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.not_after = time::OffsetDateTime::now_utc() + time::Duration::days(10);
    let key = rcgen::KeyPair::generate().unwrap();
    params.self_signed(&key).unwrap().pem()
}

/// Merges `body` into the CA ConfigMap of cluster `name`, as whoever may edit it would.
async fn patch_ca(ca_maps: &Api<ConfigMap>, name: &str, body: serde_json::Value) {
    ca_maps
        .patch(
            &format!("{name}-lake-ca"),
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&body),
        )
        .await
        .unwrap();
}

/// Distributed query needs the worker certificate: a cluster issued one from the start turns it
/// on with the generation it has; one whose generation predates it (its CA ConfigMap lists no
/// `worker`, as an older operator left it) gets a new generation at once, with the certificate,
/// mounted by the query pods beside the CA.
#[tokio::test(flavor = "multi_thread")]
async fn turning_distributed_query_on_renews_only_a_generation_without_the_worker_certificate() {
    let (h, name, _, ca_maps, secrets) = tls_cluster("workers").await;
    let ca_name = format!("{name}-lake-ca");
    let certs = |cm: ConfigMap| cm.metadata.annotations.unwrap()["lake.dev/tls-certs"].clone();
    assert_eq!(
        certs(ca_maps.get(&ca_name).await.unwrap()),
        "query,metadata,worker"
    );
    h.patch_spec(json!({"query": {"distributed": {}}})).await;
    h.reconcile().await;
    assert_served(&h, &format!("{name}-lake-tls")).await;
    assert!(
        secrets
            .get_opt(&format!("{name}-lake-tls-1"))
            .await
            .unwrap()
            .is_none(),
        "no new generation: the one served has the worker certificate"
    );
    // Rolled out, converged: the Role, the headless Service and the rest are not written again.
    h.roll_out().await;
    h.reconcile().await;
    let (_, written) = h.writes_during(h.reconcile()).await;
    assert!(written.is_empty(), "{written:?}");

    // As an older operator issued it: no list of certificates.
    patch_ca(
        &ca_maps,
        &name,
        json!({"metadata": {"annotations": {"lake.dev/tls-certs": null}}}),
    )
    .await;
    h.reconcile().await;
    let renewed = secrets.get(&format!("{name}-lake-tls-1")).await.unwrap();
    assert!(renewed.data.unwrap().contains_key("worker.crt"));
    assert_served(&h, &format!("{name}-lake-tls-1")).await;
    let cm = ca_maps.get(&ca_name).await.unwrap();
    assert_eq!(
        cm.metadata.annotations.as_ref().unwrap()["lake.dev/tls-generation"],
        "1"
    );
    assert_eq!(certs(cm), "query,metadata,worker");
    let items: Vec<String> = tls_volume(h.deployment("query").await)
        .items
        .unwrap()
        .into_iter()
        .map(|i| i.path)
        .collect();
    assert_eq!(
        items,
        ["tls.crt", "tls.key", "worker.crt", "worker.key", "ca.crt"]
    );
}
