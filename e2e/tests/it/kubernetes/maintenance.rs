//! The maintenance authority on Kubernetes: the CronJob's Job runs `lake maintain` in the
//! maintenance identity, on an emulator that enforces IAM, and the cluster's status says how it
//! went.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn e2e_maintenance_runs_in_its_own_identity() {
    let started = Instant::now();
    // The emulator's request log is read after the pass: the server must outlive the test.
    let enforced: &'static Moto = Box::leak(Box::new(lake_testkit::dedicated_moto()));
    let (aws, name) = enforced_aws(enforced).await;
    let lake = Lake::apply_with_iam(
        &name,
        &aws,
        &format!("    maintenanceRole: {name}-maintenance-role\n"),
        // Statements time out after 5 s, so the grace may be 5 s: versions go a pass later.
        "  queryTimeoutSeconds: 5\n  maintenance:\n    schedule: \"@hourly\"\n    suspend: true\n    retentionSeconds: 0\n    graceSeconds: 5\n",
    );
    lake.wait_ready(180);
    let ns = &lake.namespace;
    let cron_job = format!("{name}-maintenance");
    let spec = kubectl(&[
        "get",
        "cronjob",
        &cron_job,
        "-n",
        ns,
        "-o",
        "jsonpath={.spec.schedule} {.spec.suspend} {.spec.concurrencyPolicy} {.spec.jobTemplate.spec.template.spec.serviceAccountName}",
    ]);
    assert_eq!(spec, format!("@hourly true Forbid {cron_job}"));
    let config = kubectl(&[
        "get",
        "configmap",
        &cron_job,
        "-n",
        ns,
        "-o",
        "jsonpath={.data}",
    ]);
    assert!(
        config.contains("LAKE_ROLE") && !config.contains("REGISTRY"),
        "{config}"
    );

    // Rows carrying a marker, written and deleted through metadata.
    let (_, metadata_ip) = lake.pod("metadata");
    let marker = unique("erase-me");
    let (ok, out, err) = lake.client(&[
        "e2e/tests/it/maintenance_check.py",
        "write",
        &Lake::url(&metadata_ip, "metadata"),
        &lake.token("metadata"),
        &marker,
    ]);
    assert!(ok, "{}", lake.diagnostics(&format!("{out}\n{err}")));
    let holding = || {
        let (ok, out, err) = lake_testkit::python(&[
            "e2e/tests/it/maintenance_check.py",
            "holding",
            &aws.endpoint,
            &aws.operator_key,
            &aws.operator_secret,
            &format!("{name}-bucket"),
            &marker,
        ]);
        assert!(ok, "{out}\n{err}");
        serde_json::from_str::<serde_json::Value>(out.trim()).unwrap()
    };
    let before = holding();
    assert!(
        !before["holding"].as_array().unwrap().is_empty(),
        "the deleted rows are not in storage before a pass: {before}"
    );

    // Two passes of the CronJob, started as the guide says (`kubectl create job --from`; the
    // schedule is suspended so that none starts meanwhile): the first compacts the deleted
    // rows out of the data (a new version), the second — once the grace has passed — removes
    // the versions that still held them, with their files and manifest rows.
    let recording = enforced.start_recording();
    let status = |path: &str| {
        let out = control_plane().run(
            &[
                "get",
                "lake",
                &name,
                "-n",
                ns,
                "-o",
                &format!("jsonpath={{.status.maintenance.{path}}}"),
            ],
            None,
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let mut passes = Vec::new();
    for pass in ["first", "second"] {
        let job = format!("{cron_job}-{pass}");
        kubectl(&[
            "create",
            "job",
            &job,
            "-n",
            ns,
            &format!("--from=cronjob/{cron_job}"),
        ]);
        let deadline = Instant::now() + Duration::from_secs(120);
        while status("lastPass.job") != job {
            assert!(
                Instant::now() < deadline,
                "{}",
                lake.diagnostics(&format!("the {pass} pass ({job}) did not finish in 120 s"))
            );
            std::thread::sleep(Duration::from_millis(500));
        }
        assert_eq!(
            status("lastPass.outcome"),
            "Succeeded",
            "{}",
            lake.diagnostics(&format!("maintenance pass {job}"))
        );
        passes.push(job);
        // Past the grace (5 s) before the next pass, so it may remove what this one replaced.
        std::thread::sleep(Duration::from_secs(6));
    }
    assert_eq!(
        holding()["holding"],
        serde_json::json!([]),
        "the deleted rows are still in storage after {passes:?}"
    );
    let log = recording.stop();
    assert!(
        passes.len() >= 2,
        "one pass cannot both compact and remove: {passes:?}"
    );
    // What the passes said (the Job's pod, run by the node agent).
    let said: String = passes
        .iter()
        .flat_map(|job| {
            let pods = kubectl(&[
                "get",
                "pods",
                "-n",
                ns,
                "-l",
                &format!("job-name={job}"),
                "-o",
                "jsonpath={.items[*].metadata.name}",
            ]);
            pods.split_whitespace()
                .map(|pod| agent().logs(ns, pod))
                .collect::<Vec<_>>()
        })
        .collect();
    eprintln!("maintenance passes {passes:?}:\n{said}");
    assert!(
        said.contains("s.notes: ok") && said.contains("deleted rows erased 1"),
        "{said}"
    );
    lake.kubectl_ok(&[
        "wait",
        "--for=condition=Maintained",
        &format!("lakecluster/{name}"),
        "-n",
        ns,
        "--timeout=60s",
    ]);
    assert_eq!(status("consecutiveFailures"), "0");

    // In the maintenance identity: its pods presented tokens of its own ServiceAccount for the
    // maintenance role, and the emulator, enforcing IAM, let that role delete.
    let role_arn = format!("arn:aws:iam::123456789012:role/{name}-maintenance-role");
    let presented = web_identity_tokens(&log, &role_arn);
    assert!(!presented.is_empty(), "no pod assumed {role_arn}");
    for token in &presented {
        assert_eq!(
            claims(token)["sub"],
            format!("system:serviceaccount:{ns}:{cron_job}"),
        );
    }

    // The selftest Jobs ran in every role, maintenance's included.
    lake.kubectl_ok(&[
        "wait",
        "--for=condition=SelfTestPassed",
        &format!("lakecluster/{name}"),
        "-n",
        ns,
        "--timeout=60s",
    ]);
    let message = kubectl(&[
        "get",
        "lake",
        &name,
        "-n",
        ns,
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"SelfTestPassed\")].message}",
    ]);
    assert!(message.contains("maintenance"), "{message}");

    kubectl(&["delete", "namespace", ns, "--wait=false"]);
    eprintln!(
        "e2e_maintenance_runs_in_its_own_identity: {:?}",
        started.elapsed()
    );
}
