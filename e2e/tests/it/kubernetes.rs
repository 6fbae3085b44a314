//! End to end on Kubernetes: `kubectl apply` of a LakeCluster on the test control plane, the
//! operator (a process, as its own ServiceAccount) reconciling it against the AWS emulator, the
//! node agent running the pods it renders as `lake` processes with workload identity (a token the
//! API server issued for the pod's ServiceAccount, exchanged through STS), and real clients
//! writing and reading through the pods with the tokens the operator put in their Secrets.

use aws_credential_types::Credentials;
use lake_e2e::node::NodeAgent;
use lake_e2e::pod::NodeSettings;
use lake_e2e::{binaries, binary, moto, workspace_root};
use lake_testkit::{Moto, control_plane, controlplane_tool, output_text, unique};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

mod apply;
mod distributed;
mod maintenance;
mod recovery;
mod rollout;
mod storage;

const OIDC: &str = "oidc.eks.us-east-1.amazonaws.com/id/LAKEE2E";

/// The test binary's node agent (one Node; every other Node is cordoned).
fn agent() -> &'static NodeAgent {
    static AGENT: OnceLock<NodeAgent> = OnceLock::new();
    AGENT.get_or_init(|| {
        control_plane().install_lake();
        NodeAgent::start(
            control_plane().kubeconfig(),
            "lake-e2e-node",
            NodeSettings {
                binaries: binaries(),
                aws_endpoint: Some(moto().endpoint().to_owned()),
                aws_region: Moto::REGION.to_owned(),
                api_server: Some(control_plane().server().to_owned()),
            },
        )
    })
}

fn kubectl(args: &[&str]) -> String {
    let out = control_plane().run(args, None);
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        output_text(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A shell command with kubectl on PATH and the admin kubeconfig: the docs' commands as written.
fn sh(script: &str) -> String {
    let kubectl_dir = controlplane_tool("kubectl").parent().unwrap().to_owned();
    let path = format!(
        "{}:{}",
        kubectl_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("sh")
        .args(["-c", script])
        .env("PATH", path)
        .env("KUBECONFIG", control_plane().kubeconfig())
        .current_dir(workspace_root())
        .output()
        .unwrap();
    assert!(out.status.success(), "{script}: {}", output_text(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Which emulator a lake lives on, and the operator's credentials there (static: the operator's
/// own identity is not under test here).
struct Aws {
    endpoint: String,
    operator_key: String,
    operator_secret: String,
}

impl Aws {
    /// The test binary's shared emulator (no IAM enforcement).
    fn shared() -> Self {
        Self {
            endpoint: moto().endpoint().to_owned(),
            operator_key: "e2eoperator".into(),
            operator_secret: "testing".into(),
        }
    }
}

/// `lake-operator run` for one namespace, as its ServiceAccount, its AWS calls on `aws`.
struct Operator {
    child: Child,
    dir: tempfile::TempDir,
}

impl Operator {
    fn start(namespace: &str, aws: &Aws) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig =
            control_plane().service_account_kubeconfig("lake-system", "lake-operator", dir.path());
        let allowlist = dir.path().join("allowlist.yaml");
        std::fs::write(
            &allowlist,
            format!(
                "namespaces:\n  {namespace}:\n    roles: [\"*-query-role\", \"*-metadata-role\", \"*-maintenance-role\"]\n    storage: [{{bucket: \"*-bucket\"}}]\n"
            ),
        )
        .unwrap();
        let metrics = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap();
        let log = std::fs::File::create(dir.path().join("operator.log")).unwrap();
        let child = Command::new(binary("lake-operator"))
            .args(["run", "--namespace", namespace, "--oidc-provider", OIDC])
            .arg("--metrics-addr")
            .arg(metrics.to_string())
            .arg("--aws-endpoint")
            .arg(&aws.endpoint)
            .arg("--allowlist")
            .arg(&allowlist)
            .env("KUBECONFIG", &kubeconfig)
            .env("AWS_ACCESS_KEY_ID", &aws.operator_key)
            .env("AWS_SECRET_ACCESS_KEY", &aws.operator_secret)
            .env("AWS_REGION", Moto::REGION)
            .env("RUST_LOG", "info,kube_client::client::tls=error")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        Self { child, dir }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("operator.log")).unwrap_or_default()
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn iam(endpoint: &str) -> aws_sdk_iam::Client {
    aws_sdk_iam::Client::new(
        &aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new(Moto::REGION))
            .endpoint_url(endpoint)
            .credentials_provider(Credentials::new("admin", "testing", None, None, "e2e"))
            .load()
            .await,
    )
}

async fn create_role(endpoint: &str, name: &str) {
    let iam = iam(endpoint).await;
    let trust = serde_json::json!({"Version": "2012-10-17", "Statement": [{"Effect": "Allow",
        "Principal": {"Federated": format!("arn:aws:iam::123456789012:oidc-provider/{OIDC}")},
        "Action": "sts:AssumeRoleWithWebIdentity"}]});
    iam.create_role()
        .role_name(name)
        .assume_role_policy_document(trust.to_string())
        .send()
        .await
        .unwrap();
}

/// A namespace with the operator watching it, and an S3 LakeCluster `name` applied with kubectl,
/// its roles and bucket created on the emulator beforehand (`create_aws`).
struct Lake {
    namespace: String,
    name: String,
    operator: Operator,
    /// The LakeCluster as applied (without `spec_extra`), to apply again.
    manifest: String,
}

/// A lake's name, and its roles and bucket on the emulator at `endpoint` (before any IAM
/// enforcement: unsigned bucket creation).
async fn create_aws(endpoint: &str, port: u16) -> String {
    let name = unique("lake");
    create_role(endpoint, &format!("{name}-query-role")).await;
    create_role(endpoint, &format!("{name}-metadata-role")).await;
    create_role(endpoint, &format!("{name}-maintenance-role")).await;
    let bucket = format!("{name}-bucket");
    let response = lake_testkit::http(port, "PUT", &format!("/{bucket}"));
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    name
}

/// An emulator of the test's own with IAM enforcement on: the operator signs as an IAM user
/// allowed everything; each pod holds only what the operator's policy on its role grants.
async fn enforced_aws(moto: &Moto) -> (Aws, String) {
    let name = create_aws(moto.endpoint(), moto.port()).await;
    let iam = iam(moto.endpoint()).await;
    iam.create_user()
        .user_name("lake-operator")
        .send()
        .await
        .unwrap();
    let admin = serde_json::json!({"Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]});
    iam.put_user_policy()
        .user_name("lake-operator")
        .policy_name("admin")
        .policy_document(admin.to_string())
        .send()
        .await
        .unwrap();
    let key = iam
        .create_access_key()
        .user_name("lake-operator")
        .send()
        .await
        .unwrap()
        .access_key
        .unwrap();
    moto.enforce_iam();
    let aws = Aws {
        endpoint: moto.endpoint().to_owned(),
        operator_key: key.access_key_id,
        operator_secret: key.secret_access_key,
    };
    (aws, name)
}

impl Lake {
    async fn apply() -> Self {
        Self::apply_with("").await
    }

    /// With `spec_extra` (YAML lines under `spec:`, indented two spaces).
    async fn apply_with(spec_extra: &str) -> Self {
        let name = create_aws(moto().endpoint(), moto().port()).await;
        Self::apply_named(&name, &Aws::shared(), spec_extra)
    }

    fn apply_named(name: &str, aws: &Aws, spec_extra: &str) -> Self {
        Self::apply_with_iam(name, aws, "", spec_extra)
    }

    /// With `iam_extra` (YAML lines under `spec.iam:`, indented four spaces) too.
    fn apply_with_iam(name: &str, aws: &Aws, iam_extra: &str, spec_extra: &str) -> Self {
        Self::apply_with_query(name, aws, iam_extra, "    replicas: 1\n", spec_extra)
    }

    /// With `query` (YAML lines under `spec.query:`, indented four spaces) too.
    fn apply_with_query(
        name: &str,
        aws: &Aws,
        iam_extra: &str,
        query: &str,
        spec_extra: &str,
    ) -> Self {
        let storage = format!(
            r#"  storage:
    s3:
      bucket: {name}-bucket
      prefix: warehouse
      region: {region}
      endpoint: {endpoint}
  iam:
    queryRole: {name}-query-role
    metadataRole: {name}-metadata-role
{iam_extra}  query:
{query}"#,
            region = Moto::REGION,
            endpoint = aws.endpoint,
        );
        Self::apply_spec(name, aws, &storage, spec_extra)
    }

    /// A local (development) lake: one pod running both roles on a claim of its own.
    fn apply_local(spec_extra: &str) -> Self {
        let storage =
            "  storage:\n    local:\n      path: /var/lib/lake\n      size: 64Mi\n  query:\n";
        Self::apply_spec(&unique("dev"), &Aws::shared(), storage, spec_extra)
    }

    /// A namespace, the operator for it, and a LakeCluster `name` with `storage` (YAML under
    /// `spec:`, ending inside `query:`) and `spec_extra` applied with kubectl.
    fn apply_spec(name: &str, aws: &Aws, storage: &str, spec_extra: &str) -> Self {
        agent();
        let namespace = unique("e2e");
        let name = name.to_owned();
        kubectl(&["create", "namespace", &namespace]);
        if aws.endpoint != moto().endpoint() {
            agent().route_aws(&namespace, &aws.endpoint);
        }
        let operator = Operator::start(&namespace, aws);
        let manifest = format!(
            r#"apiVersion: lake.dev/v1alpha1
kind: LakeCluster
metadata:
  name: {name}
  namespace: {namespace}
spec:
{storage}    image: ghcr.io/acme/lake:1
  metadata:
    image: ghcr.io/acme/lake:1
"#
        );
        let lake = Self {
            namespace,
            name,
            operator,
            manifest,
        };
        lake.reapply(spec_extra);
        lake
    }

    /// `kubectl apply` of the LakeCluster again, with `spec_extra` (YAML lines under `spec:`).
    fn reapply(&self, spec_extra: &str) {
        let manifest = format!("{}{spec_extra}", self.manifest);
        let out = control_plane().run(&["apply", "-f", "-"], Some(&manifest));
        assert!(out.status.success(), "{}", output_text(&out));
    }

    /// `kubectl delete` of the LakeCluster (its finalizer's cleanup done), then until its query
    /// pod stops answering: garbage collection removes the Deployments, the node stops their
    /// processes.
    fn delete(&self) {
        let (_, query_ip) = self.pod("query");
        kubectl(&[
            "delete",
            "lakecluster",
            &self.name,
            "-n",
            &self.namespace,
            "--timeout=120s",
        ]);
        eventually("the deleted lake still answers", 90, || {
            !port_open(&query_ip, 8815)
        });
    }

    /// A condition's reason, once it has one (`""` until then).
    fn reason(&self, condition: &str) -> String {
        kubectl(&[
            "get",
            "lakecluster",
            &self.name,
            "-n",
            &self.namespace,
            "-o",
            &format!("jsonpath={{.status.conditions[?(@.type==\"{condition}\")].reason}}"),
        ])
    }

    /// `kubectl wait --for=condition=Ready`, with everything worth reading when it times out.
    fn wait_ready(&self, seconds: u64) {
        self.kubectl_ok(&[
            "wait",
            "--for=condition=Ready",
            &format!("lakecluster/{}", self.name),
            "-n",
            &self.namespace,
            &format!("--timeout={seconds}s"),
        ]);
    }

    /// `kubectl args…`, failing the test with everything worth reading if it fails.
    fn kubectl_ok(&self, args: &[&str]) {
        let out = control_plane().run(args, None);
        if !out.status.success() {
            panic!("{}", self.diagnostics(&output_text(&out)));
        }
    }

    fn diagnostics(&self, what: &str) -> String {
        let ns = &self.namespace;
        let describe = output_text(
            &control_plane().run(&["describe", "lakecluster", &self.name, "-n", ns], None),
        );
        let objects = output_text(&control_plane().run(
            &[
                "get",
                "deploy,sts,rs,pods,pvc,secrets",
                "-n",
                ns,
                "-o",
                "wide",
            ],
            None,
        ));
        let pods = kubectl(&[
            "get",
            "pods",
            "-n",
            ns,
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ]);
        let logs: String = pods
            .split_whitespace()
            .map(|pod| agent().logs(ns, pod))
            .collect();
        // Why a container did not start (the node agent's launch errors land here).
        let waiting = kubectl(&[
            "get",
            "pods",
            "-n",
            ns,
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}: \
             {.status.containerStatuses[*].state.waiting.message}{\"\\n\"}{end}",
        ]);
        format!(
            "{what}\n{describe}\n{objects}\n--- waiting\n{waiting}\n{logs}\n--- operator\n{}",
            self.operator.log()
        )
    }

    /// The pod of `role` (the first), and its pod IP.
    fn pod(&self, role: &str) -> (String, String) {
        let selector = format!(
            "app.kubernetes.io/instance={},app.kubernetes.io/component={role}",
            self.name
        );
        let out = kubectl(&[
            "get",
            "pods",
            "-n",
            &self.namespace,
            "-l",
            &selector,
            "--field-selector=status.phase=Running",
            "-o",
            "jsonpath={.items[0].metadata.name} {.items[0].status.podIP}",
        ]);
        let mut words = out.split_whitespace();
        match (words.next(), words.next()) {
            (Some(pod), Some(ip)) => (pod.to_owned(), ip.to_owned()),
            _ => panic!(
                "{}",
                self.diagnostics(&format!("no running {role} pod: {out:?}"))
            ),
        }
    }

    /// The URL of `role`'s pod at `ip`: TLS, as every lake endpoint is by default.
    fn url(ip: &str, role: &str) -> String {
        let port = if role == "query" { 8815 } else { 8816 };
        format!("grpc+tls://{ip}:{port}")
    }

    /// The environment of a client script (`lake_e2e.py`): the CA the cluster publishes, read
    /// as the guide says, and the Service name of each role's port.
    fn client_env(&self) -> Vec<(String, String)> {
        let ca = self.operator.dir.path().join("ca.crt");
        if !ca.exists() {
            let pem = sh(&format!(
                "kubectl get configmap \"$(kubectl get lake {name} -n {ns} -o jsonpath='{{.status.tls.caConfigMap}}')\" \
                 -n {ns} -o jsonpath='{{.data.ca\\.crt}}'",
                name = self.name,
                ns = self.namespace
            ));
            std::fs::write(&ca, pem + "\n").unwrap();
        }
        let (name, ns) = (&self.name, &self.namespace);
        vec![
            ("LAKE_E2E_CA".into(), ca.display().to_string()),
            (
                "LAKE_E2E_TLS_NAMES".into(),
                format!("8815={name}-query.{ns}.svc,8816={name}-metadata.{ns}.svc"),
            ),
        ]
    }

    /// Runs a client script with [`Lake::client_env`]: (success, stdout, stderr).
    fn client(&self, args: &[&str]) -> (bool, String, String) {
        let out = lake_testkit::python_command()
            .args(args)
            .envs(self.client_env())
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Ingests 1,000 rows into `sales.orders` through metadata and reads them through query.
    fn load_orders(&self) {
        let (_, query_ip) = self.pod("query");
        let (_, metadata_ip) = self.pod("metadata");
        let (ok, out, err) = self.client(&[
            "e2e/tests/it/clients.py",
            &Self::url(&metadata_ip, "metadata"),
            &self.token("metadata"),
            &Self::url(&query_ip, "query"),
            &self.token("query"),
        ]);
        assert!(
            ok,
            "{}",
            self.diagnostics(&format!("clients failed:\n{out}\n{err}"))
        );
        assert!(out.contains("ok SQL through query"), "{out}");
    }

    /// A role's bearer token, read from its Secret as docs/operator.md says to.
    fn token(&self, role: &str) -> String {
        let field = if role == "query" {
            "querySecret"
        } else {
            "metadataSecret"
        };
        sh(&format!(
            "kubectl get secret -n {ns} \"$(kubectl get lake {name} -n {ns} -o jsonpath='{{.status.tokens.{field}}}')\" \
             -o jsonpath='{{.data.tokens}}' | base64 -d | head -n1",
            ns = self.namespace,
            name = self.name,
        ))
    }
}

/// The claims of a JWT (its payload, unverified: the API server issued it).
fn claims(jwt: &str) -> serde_json::Value {
    use base64::Engine as _;
    let payload = jwt.split('.').nth(1).expect("a JWT");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .expect("base64url");
    serde_json::from_slice(&bytes).expect("JSON claims")
}

/// The web-identity tokens presented to STS for `role_arn` in a recording.
fn web_identity_tokens(log: &[serde_json::Value], role_arn: &str) -> Vec<String> {
    use base64::Engine as _;
    log.iter()
        .filter_map(|entry| {
            let raw = entry["body"].as_str()?;
            let body = if entry["body_encoded"].as_bool() == Some(true) {
                base64::engine::general_purpose::STANDARD.decode(raw).ok()?
            } else {
                raw.as_bytes().to_vec()
            };
            let form: std::collections::HashMap<String, String> =
                url::form_urlencoded::parse(&body).into_owned().collect();
            (form.get("Action").map(String::as_str) == Some("AssumeRoleWithWebIdentity")
                && form.get("RoleArn").map(String::as_str) == Some(role_arn))
            .then(|| form.get("WebIdentityToken").cloned())
            .flatten()
        })
        .collect()
}

fn eventually(what: &str, seconds: u64, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while !f() {
        assert!(Instant::now() < deadline, "{what} after {seconds} s");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn port_open(ip: &str, port: u16) -> bool {
    let addr = format!("{ip}:{port}").parse().unwrap();
    std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
}
