//! From `kubectl apply` to SQL, and what each role refuses (writes on query, calls without
//! a token).

use super::*;

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
    // Each pod's process runs as the pods say (runAsUser/runAsGroup/fsGroup 65532), not as the
    // test's user: a pod that only works as root would fail here, as in a cluster.
    for pod in [&query_pod, &metadata_pod] {
        let pids = agent().pids(&lake.namespace, pod);
        assert!(!pids.is_empty(), "{pod} runs no process");
        for pid in pids {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
            let field = |name: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(|v| v.split_whitespace().collect::<Vec<_>>())
                    .unwrap_or_default()
            };
            assert_eq!(field("Uid:"), ["65532"; 4], "{pod}: {status}");
            assert_eq!(field("Gid:"), ["65532"; 4], "{pod}: {status}");
            assert_eq!(field("Groups:"), ["65532"], "{pod}: {status}");
        }
    }
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
