//! What the operator benches share: a client of the real control plane, roles on the emulator,
//! and an operator context whose AWS calls go to the emulator.

use std::sync::Arc;

use aws_credential_types::Credentials;
use lake_operator::allowlist::Allowlist;
use lake_operator::aws::{AwsPool, AwsSettings};
use lake_operator::metrics::Metrics;
use lake_operator::reconcile::Context;
use lake_testkit::Moto;

/// An operator context on `moto`, admitting what `allowlist` (YAML) allows.
pub fn context(client: &kube::Client, moto: &Moto, allowlist: &str) -> Arc<Context> {
    Context::new(
        client.clone(),
        AwsPool::new(AwsSettings {
            endpoint: Some(moto.endpoint().to_owned()),
            credentials: Some(Credentials::new("operator", "testing", None, None, "bench")),
            ..Default::default()
        }),
        None,
        Arc::new(Metrics::default()),
        Allowlist::parse(allowlist, "bench").expect("allowlist"),
    )
}

/// A client of the real control plane, with the CRD installed and `namespace` created.
pub async fn control_plane_client(namespace: &str) -> kube::Client {
    let plane = lake_testkit::control_plane();
    let run = |args: &[&str]| {
        let out = plane.kubectl().args(args).output().expect("kubectl");
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&["apply", "-f", "crds/lakecluster.yaml"]);
    run(&[
        "wait",
        "--for=condition=Established",
        "crd/lakeclusters.lake.dev",
        "--timeout=60s",
    ]);
    run(&["create", "namespace", namespace]);
    let kubeconfig = kube::config::Kubeconfig::read_from(plane.kubeconfig()).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("kube config");
    kube::Client::try_from(config).expect("kube client")
}

/// IAM roles on `moto` (EC2-trusted: the bench's pods never assume them).
pub async fn create_roles(moto: &Moto, roles: &[String]) {
    let admin = aws_sdk_iam::Client::new(
        &aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new(Moto::REGION))
            .endpoint_url(moto.endpoint())
            .credentials_provider(Credentials::new("admin", "testing", None, None, "bench"))
            .load()
            .await,
    );
    let trust = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;
    for role in roles {
        admin
            .create_role()
            .role_name(role)
            .assume_role_policy_document(trust)
            .send()
            .await
            .expect("role");
    }
}
