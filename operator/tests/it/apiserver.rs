//! What only a real API server shows: the shipped manifests install, and the CRD's rules (its
//! OpenAPI schema and CEL validations) are enforced by kube-apiserver itself, with kubectl's exit
//! code and message — not by a client-side evaluation of the same rules.

use super::control::{installed, kubectl, operator_kubeconfig, text};
use lake_testkit::{control_plane, unique};

mod crd;
mod running;

fn cluster(name: &str, spec: serde_json::Value) -> String {
    serde_json::json!({
        "apiVersion": "lake.dev/v1alpha1",
        "kind": "LakeCluster",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    })
    .to_string()
}

fn spec(storage: serde_json::Value, tables: serde_json::Value, replicas: i64) -> serde_json::Value {
    serde_json::json!({
        "storage": storage,
        "tables": tables,
        "query": {"image": "img", "replicas": replicas},
        "metadata": {"image": "img"},
    })
}

fn s3() -> serde_json::Value {
    serde_json::json!({"s3": {"bucket": "acme-lake", "region": "eu-west-1"}})
}

/// `kubectl apply` of `manifest` is refused by the API server with `message`.
fn refused(manifest: &str, message: &str) {
    let out = kubectl(&["apply", "-f", "-"], Some(manifest));
    let said = text(&out);
    assert!(!out.status.success(), "accepted: {manifest}\n{said}");
    assert!(
        said.contains(message),
        "refused without {message:?}: {said}"
    );
}

/// `lake-operator run` as a process, authenticated as its own ServiceAccount (a TokenRequest
/// token) and so holding exactly the RBAC of `config/rbac`; stopped when dropped.
struct Operator {
    child: std::process::Child,
    /// Where it serves /metrics.
    metrics: u16,
    _dir: tempfile::TempDir,
}

impl Operator {
    /// `lake_operator_reconciles_total`: the reconcile passes run so far.
    fn passes(&self) -> u64 {
        let response = lake_testkit::http(self.metrics, "GET", "/metrics");
        response
            .lines()
            .find_map(|l| l.strip_prefix("lake_operator_reconciles_total "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no reconcile count in /metrics: {response}"))
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_operator(namespace: &str) -> Operator {
    start_operator_with(namespace, &[])
}

fn start_operator_with(namespace: &str, extra: &[&str]) -> Operator {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = operator_kubeconfig(dir.path());
    let metrics = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_lake-operator"))
        .args(["run", "--namespace", namespace, "--metrics-addr"])
        .arg(format!("127.0.0.1:{metrics}"))
        .args(extra)
        .env("KUBECONFIG", &kubeconfig)
        // The test kubeconfig skips TLS verification; kube warns on every connection.
        .env("RUST_LOG", "warn,kube_client::client::tls=error")
        .spawn()
        .unwrap();
    Operator {
        child,
        metrics,
        _dir: dir,
    }
}

/// Marks every scheduled, not yet ready pod of `namespace` Ready, as a kubelet would once its
/// containers run. Returns how many it marked.
fn kubelet_marks_pods_ready(namespace: &str) -> usize {
    let out = kubectl(
        &[
            "get",
            "pods",
            "-n",
            namespace,
            "-o",
            "jsonpath={range .items[?(@.spec.nodeName)]}{.metadata.name} {.status.phase}{\"\\n\"}{end}",
        ],
        None,
    );
    let listing = String::from_utf8_lossy(&out.stdout).into_owned();
    let status = lake_testkit::ready_pod_status().to_string();
    let mut marked = 0;
    for line in listing.lines() {
        let mut words = line.split_whitespace();
        let (Some(pod), phase) = (words.next(), words.next()) else {
            continue;
        };
        if phase == Some("Running") {
            continue;
        }
        let out = kubectl(
            &[
                "patch",
                "pod",
                pod,
                "-n",
                namespace,
                "--subresource=status",
                "--type=strategic",
                "-p",
                &status,
            ],
            None,
        );
        assert!(out.status.success(), "marking {pod} Ready: {}", text(&out));
        marked += 1;
    }
    marked
}

/// Applies `config/samples/lakecluster-local.yaml` (cluster `dev`) in `namespace`.
fn apply_sample(namespace: &str) {
    let sample = std::fs::read_to_string(
        lake_testkit::workspace_root().join("config/samples/lakecluster-local.yaml"),
    )
    .unwrap()
    .replace("namespace: default", &format!("namespace: {namespace}"));
    let out = kubectl(&["apply", "-f", "-"], Some(&sample));
    assert!(out.status.success(), "{}", text(&out));
}

/// A new namespace for one test.
fn new_namespace() -> String {
    let namespace = unique("lake");
    let out = kubectl(&["create", "namespace", &namespace], None);
    assert!(out.status.success(), "{}", text(&out));
    namespace
}

/// A namespace with the operator running for it and the local sample applied, taken to Ready
/// (scheduled pods marked Ready as a kubelet would). Returns the namespace and the operator.
fn sample_ready() -> (String, Operator) {
    installed();
    let namespace = new_namespace();
    let operator = start_operator(&namespace);
    apply_sample(&namespace);
    wait_ready(&namespace);
    (namespace, operator)
}

/// Marks pods Ready until the sample reports Ready (at most 40 s).
fn wait_ready(namespace: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(40);
    let mut marked = 0;
    loop {
        marked += kubelet_marks_pods_ready(namespace);
        let out = kubectl(
            &[
                "wait",
                "--for=condition=Ready",
                "lakecluster/dev",
                "-n",
                namespace,
                "--timeout=2s",
            ],
            None,
        );
        if out.status.success() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not Ready after 40 s ({marked} pods marked): {}\n{}\n{}",
            text(&out),
            text(&kubectl(
                &["describe", "lakecluster", "dev", "-n", namespace],
                None
            )),
            text(&kubectl(
                &["get", "sts,pods,pvc,events", "-n", namespace, "-o", "wide"],
                None
            ))
        );
    }
}

#[test]
fn kubectl_apply_to_ready() {
    let (namespace, _operator) = sample_ready();
    // The workloads' pods (the selftest Jobs' pods carry no lake labels).
    let pods = text(&kubectl(
        &[
            "get",
            "pods",
            "-n",
            &namespace,
            "-l",
            "app.kubernetes.io/name=lake",
            "-o",
            "jsonpath={.items[*].spec.nodeName}",
        ],
        None,
    ));
    assert_eq!(
        pods.split_whitespace().count(),
        1,
        "the local sample's one pod (both roles) bound to the node: {pods}"
    );
    let out = kubectl(&["get", "lake", "-n", &namespace], None);
    let table = text(&out);
    let header = table.lines().next().unwrap_or_default();
    for column in ["NAME", "READY", "QUERY ENDPOINT", "AGE"] {
        assert!(
            header.contains(column),
            "`kubectl get lake` lacks {column}: {table}"
        );
    }
    assert!(
        table.lines().nth(1).is_some_and(|row| row.contains("True")),
        "{table}"
    );
    // A local lake runs no selftest Jobs (only its pod may open its stores); an S3 lake's are
    // run by the operator process in e2e_kubectl_apply_to_sql.
    let jobs = text(&kubectl(
        &["get", "jobs", "-n", &namespace, "-o", "name"],
        None,
    ));
    assert!(jobs.trim().is_empty(), "{jobs}");
    let described = text(&kubectl(
        &["describe", "lakecluster", "dev", "-n", &namespace],
        None,
    ));
    let events = described.split("Events:").nth(1).unwrap_or_default();
    assert!(
        events
            .lines()
            .any(|l| l.contains("lake-operator") || l.contains("Reconcile")),
        "no operator Event in kubectl describe: {described}"
    );
}

/// What the operator does in a cluster's namespace, as (API group, resource, verb): watched and
/// patched LakeClusters, the objects it renders (created and server-side applied), Secrets it
/// creates and never reads, Events. Derived from the operator's code (`controller.rs`'s owned
/// kinds, `apply::*`), not from `config/rbac`, so a rule added there is caught here.
const NEEDS: &[(&str, &str, &[&str])] = &[
    (
        "lake.dev",
        "lakeclusters",
        &["get", "list", "watch", "patch"],
    ),
    ("lake.dev", "lakeclusters/status", &["get", "patch"]),
    ("lake.dev", "lakeclusters/finalizers", &["update"]),
    (
        "",
        "configmaps",
        &["get", "list", "watch", "create", "patch", "delete"],
    ),
    ("", "services", &["get", "list", "watch", "create", "patch"]),
    (
        "",
        "serviceaccounts",
        &["get", "list", "watch", "create", "patch", "delete"],
    ),
    ("", "secrets", &["create"]),
    // Distributed query: the query ServiceAccount's Role, and what it grants.
    (
        "rbac.authorization.k8s.io",
        "roles",
        &["get", "create", "patch"],
    ),
    (
        "rbac.authorization.k8s.io",
        "rolebindings",
        &["get", "create", "patch"],
    ),
    ("discovery.k8s.io", "endpointslices", &["list", "watch"]),
    ("", "pods", &["list", "watch"]),
    (
        "apps",
        "deployments",
        &["get", "list", "watch", "create", "patch"],
    ),
    (
        "apps",
        "statefulsets",
        &["get", "list", "watch", "create", "patch"],
    ),
    (
        "policy",
        "poddisruptionbudgets",
        &["get", "list", "watch", "create", "patch"],
    ),
    ("batch", "jobs", &["get", "list", "watch", "create"]),
    // The maintenance CronJob, deleted when spec.maintenance goes.
    (
        "batch",
        "cronjobs",
        &["get", "list", "watch", "create", "patch", "delete"],
    ),
    (
        "networking.k8s.io",
        "networkpolicies",
        &["get", "list", "watch", "create", "patch"],
    ),
    ("events.k8s.io", "events", &["create", "patch"]),
];
/// And in its own namespace, besides: its leader-election Lease.
const NEEDS_OWN: &[(&str, &str, &[&str])] =
    &[("coordination.k8s.io", "leases", &["get", "create", "patch"])];

type Rule = (String, String, String);

fn expand(needs: &[(&str, &str, &[&str])]) -> std::collections::BTreeSet<Rule> {
    needs
        .iter()
        .flat_map(|(group, resource, verbs)| {
            verbs
                .iter()
                .map(move |v| (group.to_string(), resource.to_string(), v.to_string()))
        })
        .collect()
}

/// Every (group, resource, verb) the holder of `kubeconfig` may use in `namespace`, as the API
/// server's SelfSubjectRulesReview says (the list `kubectl auth can-i --list` prints).
fn rules(kubeconfig: &std::path::Path, namespace: &str) -> std::collections::BTreeSet<Rule> {
    let review = serde_json::json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectRulesReview",
        "spec": {"namespace": namespace},
    });
    let mut child = std::process::Command::new(lake_testkit::controlplane_tool("kubectl"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        // Client-side validation lists CRDs first, which an account bound to nothing may not.
        .args(["create", "--validate=false", "-f", "-", "-o", "json"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(
        &mut child.stdin.take().unwrap(),
        review.to_string().as_bytes(),
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "SelfSubjectRulesReview: {}",
        text(&out)
    );
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["status"]["incomplete"], false, "{answer}");
    let strings = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .map(|s| s.as_str().unwrap().to_owned())
            .collect()
    };
    let mut found = std::collections::BTreeSet::new();
    for rule in answer["status"]["resourceRules"].as_array().unwrap() {
        assert!(
            strings(&rule["resourceNames"]).is_empty(),
            "a rule limited to names: {rule}"
        );
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                for verb in strings(&rule["verbs"]) {
                    found.insert((group.clone(), resource.clone(), verb));
                }
            }
        }
    }
    found
}

/// `kubectl auth can-i` as the holder of `kubeconfig`: yes, no, or (any other outcome: an expired
/// token, a misspelt resource kubectl warns about) a failed test — never read as a "no".
fn can(kubeconfig: &std::path::Path, verb: &str, resource: &str, namespace: &str) -> bool {
    // `resource[/subresource]`; kubectl reads `a/b` as resource a named b.
    let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
    let out = std::process::Command::new(lake_testkit::controlplane_tool("kubectl"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["auth", "can-i", verb, resource, "-n", namespace])
        .arg(format!("--subresource={subresource}"))
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        String::from_utf8_lossy(&out.stderr).trim().to_owned(),
    );
    match (out.status.code(), stdout.as_str()) {
        (Some(0), "yes") if stderr.is_empty() => true,
        (Some(1), no) if no.starts_with("no") && stderr.is_empty() => false,
        _ => panic!("can-i {verb} {resource}/{subresource} in {namespace}: {stdout} {stderr}"),
    }
}

/// The operator's own ServiceAccount, with exactly `config/rbac`, may do what the operator does
/// (the reconcile to Ready in `kubectl_apply_to_ready` runs with it) and nothing else: the
/// whole list of what it may do, less what every account may (an unbound account's list), is
/// exactly [`NEEDS`] (and [`NEEDS_OWN`] in its namespace).
#[test]
fn operator_runs_with_only_its_rbac() {
    installed();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = operator_kubeconfig(dir.path());
    // An account bound to nothing: what any authenticated account may do.
    let nobody = lake_testkit::unique("nobody");
    let out = kubectl(
        &["create", "serviceaccount", &nobody, "-n", "default"],
        None,
    );
    assert!(out.status.success(), "{}", text(&out));
    let bare_dir = tempfile::tempdir().unwrap();
    let bare = lake_testkit::control_plane().service_account_kubeconfig(
        "default",
        &nobody,
        bare_dir.path(),
    );
    for (namespace, needs) in [
        ("default", expand(NEEDS)),
        (
            "lake-system",
            expand(NEEDS).union(&expand(NEEDS_OWN)).cloned().collect(),
        ),
    ] {
        let everyone = rules(&bare, namespace);
        let own: std::collections::BTreeSet<Rule> = rules(&kubeconfig, namespace)
            .difference(&everyone)
            .cloned()
            .collect();
        let extra: Vec<_> = own.difference(&needs).collect();
        let missing: Vec<_> = needs.difference(&own).collect();
        assert!(
            extra.is_empty() && missing.is_empty(),
            "in {namespace}: config/rbac grants more than the operator needs: {extra:?}; \
             and less: {missing:?}"
        );
    }
    // The same through `kubectl auth can-i`, one question at a time, each answered yes or no.
    let can =
        |verb: &str, resource: &str, namespace: &str| can(&kubeconfig, verb, resource, namespace);
    assert!(can("patch", "leases.coordination.k8s.io", "lake-system"));
    assert!(!can("patch", "leases.coordination.k8s.io", "default"));
    for (verb, resource) in [
        ("watch", "lakeclusters.lake.dev"),
        ("patch", "lakeclusters.lake.dev/status"),
        ("update", "lakeclusters.lake.dev/finalizers"),
        ("create", "secrets"),
    ] {
        assert!(
            can(verb, resource, "default"),
            "the operator may not {verb} {resource}"
        );
    }
    for (verb, resource, namespace) in [
        ("get", "secrets", "kube-system"),
        ("get", "secrets", "default"),
        ("list", "secrets", "default"),
        ("create", "pods", "default"),
        ("delete", "deployments.apps", "default"),
        ("create", "serviceaccounts/token", "default"),
        ("update", "lakeclusters.lake.dev/status", "default"),
        ("create", "pods/exec", "default"),
    ] {
        assert!(
            !can(verb, resource, namespace),
            "the operator may {verb} {resource} in {namespace}"
        );
    }
    kubectl(
        &["delete", "serviceaccount", &nobody, "-n", "default"],
        None,
    );
}

/// Polls `f` until it is true (at most `seconds`).
fn eventually(what: &str, seconds: u64, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
    while !f() {
        assert!(
            std::time::Instant::now() < deadline,
            "{what} after {seconds} s"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

fn jsonpath(kind: &str, namespace: &str, path: &str) -> String {
    let out = kubectl(
        &[
            "get",
            kind,
            "-n",
            namespace,
            "-o",
            &format!("jsonpath={path}"),
        ],
        None,
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Write requests (not get/list/watch) the operator's ServiceAccount made in `namespace`, from
/// the audit log (other tests' operators share the account: their Lease renewals are elsewhere).
fn operator_writes(namespace: &str) -> Vec<String> {
    let log = std::fs::read_to_string(control_plane().audit_log()).unwrap_or_default();
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| {
            e["stage"] == "ResponseComplete"
                && e["user"]["username"] == "system:serviceaccount:lake-system:lake-operator"
                && e["objectRef"]["namespace"] == namespace
                && !matches!(e["verb"].as_str(), Some("get" | "list" | "watch"))
        })
        .map(|e| format!("{} {}", e["verb"], e["requestURI"]))
        .collect()
}
