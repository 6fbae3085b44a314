//! Rollouts that keep answering, and Jobs run to completion by the node agent.

use super::*;

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
    let client = lake_testkit::python_command()
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
