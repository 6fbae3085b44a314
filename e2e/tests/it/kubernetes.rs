//! End to end on Kubernetes: `kubectl apply` of a LakeCluster on the test control plane, the
//! operator (a process, as its own ServiceAccount) reconciling it against the AWS emulator, the
//! node agent running the pods it renders as `lake` processes with workload identity (a token the
//! API server issued for the pod's ServiceAccount, exchanged through STS), and real clients
//! writing and reading through the pods with the tokens the operator put in their Secrets.

use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use aws_credential_types::Credentials;
use lake_e2e::node::NodeAgent;
use lake_e2e::pod::NodeSettings;
use lake_e2e::{binaries, binary, moto, workspace_root};
use lake_testkit::{Moto, control_plane, controlplane_tool, output_text, unique};

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
                "namespaces:\n  {namespace}:\n    roles: [\"*-query-role\", \"*-metadata-role\"]\n    storage: [{{bucket: \"*-bucket\"}}]\n"
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
}

/// A lake's name, and its roles and bucket on the emulator at `endpoint` (before any IAM
/// enforcement: unsigned bucket creation).
async fn create_aws(endpoint: &str, port: u16) -> String {
    let name = unique("lake");
    create_role(endpoint, &format!("{name}-query-role")).await;
    create_role(endpoint, &format!("{name}-metadata-role")).await;
    let bucket = format!("{name}-bucket");
    let response = lake_testkit::http(port, "PUT", &format!("/{bucket}"));
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    name
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
  query:
    replicas: 1
"#,
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
{spec_extra}"#
        );
        let out = control_plane().run(&["apply", "-f", "-"], Some(&manifest));
        assert!(out.status.success(), "{}", output_text(&out));
        Self {
            namespace,
            name,
            operator,
        }
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
        format!(
            "{what}\n{describe}\n{objects}\n{logs}\n--- operator\n{}",
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
        let out = Command::new(lake_testkit::venv_tool("python"))
            .args(args)
            .envs(self.client_env())
            .current_dir(workspace_root())
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

#[tokio::test(flavor = "multi_thread")]
async fn e2e_kubectl_apply_to_sql() {
    let started = Instant::now();
    let recording = moto().start_recording();
    let lake = Lake::apply().await;
    lake.wait_ready(180);
    let log = recording.stop();
    eprintln!("kubectl apply → Ready in {:?}", started.elapsed());

    // Each pod runs with workload identity: the token it presented to STS is the one the API
    // server issued for its own ServiceAccount.
    let (query_pod, _) = lake.pod("query");
    let (metadata_pod, metadata_ip) = lake.pod("metadata");
    for (role, pod) in [("query", &query_pod), ("metadata", &metadata_pod)] {
        let token = agent()
            .irsa_token(&lake.namespace, pod)
            .unwrap_or_else(|| panic!("{pod} has no web-identity token"));
        let claims = claims(&token);
        assert_eq!(
            claims["sub"],
            format!(
                "system:serviceaccount:{}:{}-{role}",
                lake.namespace, lake.name
            ),
            "{claims}"
        );
        assert_eq!(
            claims["aud"],
            serde_json::json!(["sts.amazonaws.com"]),
            "{claims}"
        );
        let role_arn = format!("arn:aws:iam::123456789012:role/{}-{role}-role", lake.name);
        let presented = web_identity_tokens(&log, &role_arn);
        assert!(
            presented.contains(&token),
            "{pod} did not assume {role_arn} with its own token ({} presented; {} STS requests recorded)",
            presented.len(),
            log.iter()
                .filter(|e| e.to_string().contains("AssumeRole"))
                .count()
        );
    }

    // On an emulator that enforces no IAM, query's selftest fails: it can write.
    let out = agent().exec(&lake.namespace, &query_pod, &["selftest"]);
    let said = output_text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("FAILED query is refused writes to")
            && said.contains("IAM permits query's credentials to write"),
        "{said}"
    );
    let out = agent().exec(&lake.namespace, &metadata_pod, &["selftest"]);
    assert!(out.status.success(), "{}", output_text(&out));
    // The operator's post-rollout selftest Jobs say so in status, without blocking Ready.
    lake.kubectl_ok(&[
        "wait",
        "--for=condition=SelfTestPassed=False",
        &format!("lakecluster/{}", lake.name),
        "-n",
        &lake.namespace,
        "--timeout=60s",
    ]);
    let message = kubectl(&[
        "get",
        "lake",
        &lake.name,
        "-n",
        &lake.namespace,
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"SelfTestPassed\")].message}",
    ]);
    assert!(message.contains("the query selftest failed"), "{message}");
    assert!(!message.contains("metadata selftest failed"), "{message}");

    // Real clients, with the tokens from the Secrets: ingest through metadata, SQL through query.
    lake.load_orders();

    // Token rotation as docs/guides/kubernetes.md says: replace the Secret's content, restart.
    let old_token = lake.token("query");
    sh(&format!(
        "kubectl create secret generic {name}-query-token -n {ns} \
           --from-literal=tokens=\"$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n')\" \
           --dry-run=client -o yaml | kubectl apply -f - && \
         kubectl rollout restart deployment/{name}-query -n {ns} && \
         kubectl rollout status deployment/{name}-query -n {ns} --timeout=120s",
        name = lake.name,
        ns = lake.namespace,
    ));
    let new_token = lake.token("query");
    assert_ne!(new_token, old_token, "the Secret was not rotated");
    eventually("the pre-rotation query pod is still there", 60, || {
        !kubectl(&["get", "pods", "-n", &lake.namespace, "-o", "name"]).contains(&query_pod)
    });
    let (_, query_ip) = lake.pod("query");
    let (ok, out, err) = lake.client(&[
        "e2e/tests/it/token_check.py",
        &Lake::url(&query_ip, "query"),
        &new_token,
        &old_token,
    ]);
    assert!(
        ok,
        "{}",
        lake.diagnostics(&format!("rotation:\n{out}\n{err}"))
    );

    // Deleting the namespace stops every process of the lake and frees its ports.
    kubectl(&["delete", "namespace", &lake.namespace, "--wait=false"]);
    eventually("the lake's ports are still open", 60, || {
        !port_open(&query_ip, 8815) && !port_open(&metadata_ip, 8816)
    });
    eprintln!("e2e_kubectl_apply_to_sql: {:?}", started.elapsed());
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

#[tokio::test(flavor = "multi_thread")]
async fn e2e_query_credentials_refused_every_write() {
    let started = Instant::now();
    let enforced = lake_testkit::dedicated_moto();
    let (aws, name) = enforced_aws(&enforced).await;
    let lake = Lake::apply_named(&name, &aws, "");
    lake.wait_ready(180);
    let (query_pod, query_ip) = lake.pod("query");
    let (_, metadata_ip) = lake.pod("metadata");
    let query = Lake::url(&query_ip, "query");
    let query_token = lake.token("query");

    // Data first, through metadata (its credentials may write).
    lake.load_orders();

    // Query refuses every write, and its pod's own AWS credentials are refused every write.
    let web_token = agent()
        .irsa_token(&lake.namespace, &query_pod)
        .expect("the query pod's web-identity token");
    let (ok, out, err) = lake.client(&[
        "e2e/tests/it/query_refused.py",
        &query,
        &query_token,
        &aws.endpoint,
        &format!("arn:aws:iam::123456789012:role/{name}-query-role"),
        &web_token,
        &format!("{}.{name}-manifests", lake.namespace),
        &format!("{}.{name}-registry", lake.namespace),
        &format!("{name}-bucket"),
        "warehouse",
    ]);
    assert!(ok, "{}", lake.diagnostics(&format!("{out}\n{err}")));
    let results: serde_json::Value =
        serde_json::from_str(out.lines().last().unwrap_or_default()).unwrap();
    for write in [
        "SQL INSERT",
        "SQL CREATE TABLE",
        "SQL DROP TABLE",
        "ADBC ingest (DoPut)",
    ] {
        assert!(
            results[write]
                .as_str()
                .is_some_and(|r| r.contains("PERMISSION_DENIED") || r.contains("PermissionDenied")),
            "{write} through query was not refused: {results}"
        );
    }
    for refused in [
        "dynamodb:PutItem",
        "dynamodb:DeleteItem",
        "s3:PutObject",
        "s3:DeleteObject",
        "dynamodb:GetItem registry",
        "dynamodb:Query registry",
    ] {
        assert!(
            results[refused]
                .as_str()
                .is_some_and(|r| r.starts_with("403 ")),
            "{refused} with the query pod's credentials was not refused: {results}"
        );
    }
    // The same credentials do read: the refusals are the policy, not broken credentials.
    assert_eq!(results["s3:GetObject"], "allowed", "{results}");
    assert_eq!(results["dynamodb:Query"], "allowed", "{results}");
    // `lake selftest` in each pod, with its own configuration and credentials, agrees.
    let (metadata_pod, _) = lake.pod("metadata");
    for (pod, role) in [(&query_pod, "query"), (&metadata_pod, "metadata")] {
        let out = agent().exec(&lake.namespace, pod, &["selftest"]);
        let said = output_text(&out);
        assert!(out.status.success(), "{role} selftest failed:\n{said}");
        assert!(
            said.contains(&format!("{role} selftest: ")) && !said.contains("FAILED"),
            "{said}"
        );
    }
    let said = output_text(&agent().exec(&lake.namespace, &query_pod, &["selftest"]));
    assert!(said.contains("ok query is refused writes to"), "{said}");
    // The operator's own post-rollout selftest Jobs agree.
    lake.kubectl_ok(&[
        "wait",
        "--for=condition=SelfTestPassed",
        &format!("lakecluster/{name}"),
        "-n",
        &lake.namespace,
        "--timeout=60s",
    ]);

    // No registry: query's configuration names no registry table at all.
    let config = kubectl(&[
        "get",
        "configmap",
        &format!("{name}-query"),
        "-n",
        &lake.namespace,
        "-o",
        "jsonpath={.data}",
    ]);
    assert!(!config.contains("REGISTRY"), "{config}");

    kubectl(&["delete", "namespace", &lake.namespace, "--wait=false"]);
    eventually("the lake's ports are still open", 60, || {
        !port_open(&query_ip, 8815) && !port_open(&metadata_ip, 8816)
    });
    eprintln!(
        "e2e_query_credentials_refused_every_write: {:?}",
        started.elapsed()
    );
}

async fn admin_sdk() -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new(Moto::REGION))
        .endpoint_url(moto().endpoint())
        .credentials_provider(Credentials::new("admin", "testing", None, None, "e2e"))
        .load()
        .await
}

/// Deleting a LakeCluster: its finalizer's cleanup per `deletionPolicy`, then garbage collection
/// of its objects, so its processes stop. `Retain` (the default) keeps both tables, protected;
/// `Delete` removes them; the warehouse's files stay either way (the operator never deletes data
/// in S3), and both remove the cluster's inline policies from its roles.
#[tokio::test(flavor = "multi_thread")]
async fn e2e_deletion_policies() {
    let started = Instant::now();
    let (retained, deleted) = tokio::join!(
        Lake::apply(),
        Lake::apply_with("  deletionPolicy: Delete\n")
    );
    let sdk = admin_sdk().await;
    let (ddb, iam) = (
        aws_sdk_dynamodb::Client::new(&sdk),
        aws_sdk_iam::Client::new(&sdk),
    );
    for lake in [&retained, &deleted] {
        lake.wait_ready(180);
        lake.load_orders();
    }
    for lake in [&retained, &deleted] {
        let (_, query_ip) = lake.pod("query");
        kubectl(&[
            "delete",
            "lakecluster",
            &lake.name,
            "-n",
            &lake.namespace,
            "--timeout=120s",
        ]);
        // Garbage collection removes the Deployments; the node stops their processes.
        eventually("the deleted lake still answers", 90, || {
            !port_open(&query_ip, 8815)
        });
    }

    let tables = |lake: &Lake| {
        [
            format!("{}.{}-registry", lake.namespace, lake.name),
            format!("{}.{}-manifests", lake.namespace, lake.name),
        ]
    };
    for table in tables(&retained) {
        let described = ddb.describe_table().table_name(&table).send().await;
        let described = described.unwrap_or_else(|e| panic!("Retain lost {table}: {e:?}"));
        assert_eq!(
            described.table.unwrap().deletion_protection_enabled(),
            Some(true),
            "{table}"
        );
    }
    for table in tables(&deleted) {
        assert!(
            ddb.describe_table()
                .table_name(&table)
                .send()
                .await
                .is_err(),
            "Delete kept {table}"
        );
    }
    for lake in [&retained, &deleted] {
        // ListObjectsV2, unsigned (the shared emulator does not enforce IAM).
        let listing = lake_testkit::http(
            moto().port(),
            "GET",
            &format!(
                "/{}-bucket?list-type=2&prefix=warehouse/sales/orders.lance/",
                lake.name
            ),
        );
        assert!(
            listing.contains("<Key>warehouse/sales/orders.lance/"),
            "{}: the warehouse's files are gone: {listing}",
            lake.name
        );
        for role in ["query", "metadata"] {
            let policy = iam
                .get_role_policy()
                .role_name(format!("{}-{role}-role", lake.name))
                .policy_name(format!("lake.{}.{}", lake.namespace, lake.name))
                .send()
                .await;
            assert!(
                policy.is_err(),
                "{}: the {role} role kept its grant",
                lake.name
            );
        }
        kubectl(&["delete", "namespace", &lake.namespace, "--wait=false"]);
    }
    eprintln!("e2e_deletion_policies: {:?}", started.elapsed());
}

/// Scaling query to 3 and changing its image roll the pods (new ReplicaSet, old pods stopped);
/// a client that keeps querying the ready pods throughout gets every answer.
#[tokio::test(flavor = "multi_thread")]
async fn e2e_rollout_keeps_answering() {
    let started = Instant::now();
    let lake = Lake::apply().await;
    lake.wait_ready(180);
    let (old_pod, _) = lake.pod("query");
    let token = lake.token("query");
    lake.load_orders();

    let dir = tempfile::tempdir().unwrap();
    let stop = dir.path().join("stop");
    let selector = format!(
        "app.kubernetes.io/instance={},app.kubernetes.io/component=query",
        lake.name
    );
    let client = Command::new(lake_testkit::venv_tool("python"))
        .arg("e2e/tests/it/rollout_client.py")
        .args([lake.namespace.as_str(), &selector, &token])
        .arg(&stop)
        .envs(lake.client_env())
        .env("KUBECTL", controlplane_tool("kubectl"))
        .env("KUBECONFIG", control_plane().kubeconfig())
        .current_dir(workspace_root())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));

    let rollout = Instant::now();
    kubectl(&[
        "patch",
        "lakecluster",
        &lake.name,
        "-n",
        &lake.namespace,
        "--type=merge",
        "-p",
        r#"{"spec":{"query":{"replicas":3,"image":"ghcr.io/acme/lake:2"}}}"#,
    ]);
    // The operator applies the change; then the Deployment controller rolls it out.
    eventually("the query Deployment did not change", 30, || {
        kubectl(&[
            "get",
            "deployment",
            &format!("{}-query", lake.name),
            "-n",
            &lake.namespace,
            "-o",
            "jsonpath={.spec.replicas} {.spec.template.spec.containers[0].image}",
        ]) == "3 ghcr.io/acme/lake:2"
    });
    lake.kubectl_ok(&[
        "rollout",
        "status",
        &format!("deployment/{}-query", lake.name),
        "-n",
        &lake.namespace,
        "--timeout=120s",
    ]);
    lake.wait_ready(60);
    let rolled = rollout.elapsed();
    let images = kubectl(&[
        "get",
        "pods",
        "-n",
        &lake.namespace,
        "-l",
        &selector,
        "--field-selector=status.phase=Running",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name}={.spec.containers[0].image}{\"\\n\"}{end}",
    ]);
    let new_pods: Vec<&str> = images
        .lines()
        .filter_map(|l| l.strip_suffix("=ghcr.io/acme/lake:2"))
        .collect();
    assert_eq!(new_pods.len(), 3, "{images}");
    eventually("the old pod is still there", 60, || {
        !kubectl(&["get", "pods", "-n", &lake.namespace, "-o", "name"]).contains(&old_pod)
    });
    std::thread::sleep(Duration::from_secs(2));

    std::fs::write(&stop, b"").unwrap();
    let out = client.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap();
    assert_eq!(
        report["unanswered"],
        serde_json::json!([]),
        "queries went unanswered during the rollout: {report}"
    );
    let served = report["served"].as_object().unwrap();
    assert!(
        served.contains_key(&old_pod),
        "the old pod answered nothing: {report}"
    );
    assert!(
        new_pods.iter().any(|p| served.contains_key(*p)),
        "no new pod answered: {report}"
    );
    eprintln!(
        "rollout to 3 replicas of a new image in {rolled:?}: {} queries answered, {} retried on another pod",
        report["answered"], report["retries"]
    );
    kubectl(&["delete", "namespace", &lake.namespace, "--wait=false"]);
    eprintln!("e2e_rollout_keeps_answering: {:?}", started.elapsed());
}

#[test]
fn selftest_help_documents_both_roles() {
    let out = Command::new(binary("lake"))
        .args(["selftest", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{help}");
    for role in [
        "The query role",
        "The metadata role",
        "nothing is ever written",
    ] {
        assert!(
            help.contains(role),
            "`lake selftest --help` lacks {role:?}: {help}"
        );
    }
}

/// Every call needs its endpoint's token, and the client verifies TLS: no token or the other
/// role's token is UNAUTHENTICATED; plaintext, a foreign CA or a wrong name fail to connect.
#[tokio::test(flavor = "multi_thread")]
async fn e2e_authentication_required() {
    let started = Instant::now();
    let lake = Lake::apply().await;
    lake.wait_ready(180);
    let (_, query_ip) = lake.pod("query");
    let (_, metadata_ip) = lake.pod("metadata");
    let (ok, out, err) = lake.client(&[
        "e2e/tests/it/auth_check.py",
        &Lake::url(&metadata_ip, "metadata"),
        &lake.token("metadata"),
        &Lake::url(&query_ip, "query"),
        &lake.token("query"),
    ]);
    assert!(ok, "{}", lake.diagnostics(&format!("{out}\n{err}")));
    for check in [
        "ok query without a token",
        "ok a query token on metadata",
        "ok query with its token over verified TLS",
        "ok plaintext to the TLS endpoint",
        "ok a CA that did not sign the certificate",
        "ok a name the certificate does not carry",
    ] {
        assert!(out.contains(check), "{check} missing:\n{out}");
    }
    kubectl(&["delete", "namespace", &lake.namespace, "--wait=false"]);
    eprintln!("e2e_authentication_required: {:?}", started.elapsed());
}

/// `lake-operator render -o manifests` output applies and starts: a lake deleted with `Retain`
/// keeps its tables; rendered offline with its cluster id (and `tls: Disabled`, roles as ARNs),
/// with the token Secrets created by hand as docs/operator.md says, the manifests bring the
/// same data back — no LakeCluster, no operator.
#[tokio::test(flavor = "multi_thread")]
async fn e2e_offline_manifests_start_on_retained_tables() {
    let started = Instant::now();
    let lake = Lake::apply().await;
    lake.wait_ready(180);
    lake.load_orders();
    let (ns, name) = (lake.namespace.clone(), lake.name.clone());
    let uid = kubectl(&[
        "get",
        "lake",
        &name,
        "-n",
        &ns,
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    let (_, query_ip) = lake.pod("query");
    kubectl(&["delete", "lakecluster", &name, "-n", &ns, "--timeout=120s"]);
    eventually("the deleted lake still answers", 90, || {
        !port_open(&query_ip, 8815)
    });

    let dir = tempfile::tempdir().unwrap();
    let offline = dir.path().join("offline.yaml");
    std::fs::write(
        &offline,
        format!(
            r#"apiVersion: lake.dev/v1alpha1
kind: LakeCluster
metadata: {{name: {name}, namespace: {ns}}}
spec:
  storage: {{s3: {{bucket: {name}-bucket, prefix: warehouse, region: {region}, endpoint: "{endpoint}"}}}}
  iam:
    queryRole: arn:aws:iam::123456789012:role/{name}-query-role
    metadataRole: arn:aws:iam::123456789012:role/{name}-metadata-role
  query: {{replicas: 1, image: "ghcr.io/acme/lake:1"}}
  metadata: {{image: "ghcr.io/acme/lake:1"}}
  tls: Disabled
"#,
            region = Moto::REGION,
            endpoint = moto().endpoint(),
        ),
    )
    .unwrap();
    let out = Command::new(binary("lake-operator"))
        .args(["render", "-f"])
        .arg(&offline)
        .args(["-o", "manifests", "--cluster-id", &uid])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    let manifests = String::from_utf8_lossy(&out.stdout).into_owned();
    for role in ["query", "metadata"] {
        sh(&format!(
            "kubectl create secret generic {name}-{role}-token -n {ns} \
               --from-literal=tokens=\"$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n')\""
        ));
    }
    let out = control_plane().run(&["apply", "-f", "-"], Some(&manifests));
    assert!(out.status.success(), "{}", output_text(&out));
    for role in ["query", "metadata"] {
        lake.kubectl_ok(&[
            "rollout",
            "status",
            &format!("deployment/{name}-{role}"),
            "-n",
            &ns,
            "--timeout=120s",
        ]);
    }
    let (_, query_ip) = lake.pod("query");
    let token = |role: &str| {
        sh(&format!(
            "kubectl get secret {name}-{role}-token -n {ns} -o jsonpath='{{.data.tokens}}' | base64 -d"
        ))
    };
    // The retained rows are back; the metadata token is still no query token.
    let (ok, out, err) = lake.client(&[
        "e2e/tests/it/token_check.py",
        &format!("grpc://{query_ip}:8815"),
        &token("query"),
        &token("metadata"),
    ]);
    assert!(ok, "{}", lake.diagnostics(&format!("{out}\n{err}")));
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
    eventually("the offline lake's port is still open", 60, || {
        !port_open(&query_ip, 8815)
    });
    eprintln!(
        "e2e_offline_manifests_start_on_retained_tables: {:?}",
        started.elapsed()
    );
}

/// The node agent runs a Job's pod to completion: the Job controller sees it Succeeded (exit 0)
/// or Failed (not restarted under `restartPolicy: Never`).
#[test]
fn the_node_agent_completes_jobs() {
    agent();
    let ns = unique("jobs");
    kubectl(&["create", "namespace", &ns]);
    for (job, command, condition) in [
        ("ok", "--version", "Complete"),
        ("fails", "no-such-command", "Failed"),
    ] {
        let manifest = serde_json::json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": job, "namespace": ns},
            "spec": {"backoffLimit": 0, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "lake", "image": "ghcr.io/acme/lake:1", "args": [command]}],
            }}},
        });
        let out = control_plane().run(&["apply", "-f", "-"], Some(&manifest.to_string()));
        assert!(out.status.success(), "{}", output_text(&out));
        let out = control_plane().run(
            &[
                "wait",
                &format!("--for=condition={condition}"),
                &format!("job/{job}"),
                "-n",
                &ns,
                "--timeout=60s",
            ],
            None,
        );
        assert!(
            out.status.success(),
            "job {job} is not {condition}: {}\n{}",
            output_text(&out),
            output_text(&control_plane().run(&["get", "pods", "-n", &ns, "-o", "yaml"], None))
        );
    }
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
}

/// The development mode: a local lake is one StatefulSet pod running both roles (`lake local`)
/// on a PersistentVolumeClaim the control plane provisions. Rows written before the pod is
/// deleted are read from its replacement; deleting the lake (deletionPolicy Delete) deletes the
/// claim and its volume's directory.
#[tokio::test(flavor = "multi_thread")]
async fn e2e_local_dev_mode_survives_restart() {
    let started = Instant::now();
    let lake = Lake::apply_local("  deletionPolicy: Delete\n");
    lake.wait_ready(180);
    eprintln!("kubectl apply → Ready in {:?}", started.elapsed());
    let (ns, name) = (lake.namespace.clone(), lake.name.clone());
    let jsonpath = |kind: &str, object: &str, path: &str| {
        kubectl(&[
            "get",
            kind,
            object,
            "-n",
            &ns,
            "-o",
            &format!("jsonpath={path}"),
        ])
    };
    let pod = format!("{name}-local-0");
    let claim = format!("data-{pod}");
    assert_eq!(jsonpath("pvc", &claim, "{.status.phase}"), "Bound");
    let volume = jsonpath("pvc", &claim, "{.spec.volumeName}");
    let dir = kubectl(&["get", "pv", &volume, "-o", "jsonpath={.spec.hostPath.path}"]);
    assert!(dir.starts_with("/tmp/hostpath_pv/"), "{dir}");
    // One pod, no per-role Deployments, no selftest Jobs (the stores are its own files).
    let deployments = kubectl(&["get", "deploy,jobs", "-n", &ns, "-o", "name"]);
    assert!(deployments.trim().is_empty(), "{deployments}");
    let conditions = jsonpath("lake", &name, "{.status.conditions[*].type}");
    assert!(!conditions.contains("SelfTestPassed"), "{conditions}");

    let ip = || jsonpath("pod", &pod, "{.status.podIP}");
    let first_ip = ip();
    let (query, metadata) = (
        Lake::url(&first_ip, "query"),
        Lake::url(&first_ip, "metadata"),
    );
    // Each endpoint checks its own tokens: both Secrets, one process, one certificate
    // carrying both Services' names (the clients verify each port against its own name).
    let (ok, out, err) = lake.client(&[
        "e2e/tests/it/clients.py",
        &metadata,
        &lake.token("metadata"),
        &query,
        &lake.token("query"),
    ]);
    assert!(
        ok,
        "{}",
        lake.diagnostics(&format!("clients:\n{out}\n{err}"))
    );
    let (ok, out, err) = lake.client(&[
        "e2e/tests/it/token_check.py",
        &metadata,
        &lake.token("metadata"),
        &lake.token("query"),
    ]);
    assert!(
        ok,
        "a query token must not open metadata: {}",
        lake.diagnostics(&format!("{out}\n{err}"))
    );

    // Restart: the StatefulSet brings back a pod of the same name on the same claim.
    let old_uid = jsonpath("pod", &pod, "{.metadata.uid}");
    lake.kubectl_ok(&["delete", "pod", &pod, "-n", &ns, "--timeout=60s"]);
    eventually("the pod was not replaced", 90, || {
        let out = control_plane().run(
            &[
                "get",
                "pod",
                &pod,
                "-n",
                &ns,
                "-o",
                "jsonpath={.metadata.uid}",
            ],
            None,
        );
        out.status.success() && !String::from_utf8_lossy(&out.stdout).contains(&old_uid)
    });
    lake.kubectl_ok(&[
        "wait",
        "--for=condition=Ready",
        &format!("pod/{pod}"),
        "-n",
        &ns,
        "--timeout=90s",
    ]);
    lake.wait_ready(90);
    let (ok, out, err) = lake.client(&[
        "e2e/tests/it/token_check.py",
        &Lake::url(&ip(), "query"),
        &lake.token("query"),
        &lake.token("metadata"),
    ]);
    assert!(
        ok,
        "the rows written before the restart: {}",
        lake.diagnostics(&format!("{out}\n{err}"))
    );
    assert!(
        std::path::Path::new(&dir).join("_lake").is_dir(),
        "the stores live on the claim's volume ({dir})"
    );

    // deletionPolicy Delete: the claim goes with the lake, and the volume's directory with it.
    kubectl(&["delete", "lakecluster", &name, "-n", &ns, "--timeout=120s"]);
    eventually("the claim's directory is still there", 120, || {
        !std::path::Path::new(&dir).exists()
    });
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
    eprintln!(
        "e2e_local_dev_mode_survives_restart: {:?}",
        started.elapsed()
    );
}
