//! `lake plan`: the process-level view of the configuration contract.

use std::process::{Command, Output};
use std::time::Duration;

use crate::support::exited_within;

fn lake_plan(vars: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lake"));
    cmd.arg("plan");
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("LAKE_")) {
        cmd.env_remove(k);
    }
    cmd.envs(vars.iter().copied()).output().unwrap()
}

#[test]
fn query_process_plans_manifests_only() {
    let out = lake_plan(&[
        ("LAKE_ROLE", "query"),
        ("LAKE_WAREHOUSE", "s3://acme-lake/analytics"),
        ("LAKE_AWS_REGION", "eu-west-1"),
        ("LAKE_MANIFEST_DYNAMODB_TABLE", "analytics-manifests"),
        ("LAKE_CLUSTER_ID", "uid-1"),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["plan"]["role"], "query");
    assert_eq!(plan["plan"]["manifest_access"], "read-only");
    assert_eq!(
        plan["plan"]["manifests"]["dynamo-db"]["table"],
        "analytics-manifests"
    );
    assert!(!plan.to_string().contains("registry"), "{plan}");
}

#[test]
fn aliased_tables_stop_the_process_before_it_connects() {
    let out = lake_plan(&[
        ("LAKE_ROLE", "metadata"),
        ("LAKE_WAREHOUSE", "s3://acme-lake/analytics"),
        ("LAKE_AWS_REGION", "eu-west-1"),
        ("LAKE_MANIFEST_DYNAMODB_TABLE", "shared"),
        ("LAKE_REGISTRY_DYNAMODB_TABLE", "shared"),
        ("LAKE_CLUSTER_ID", "uid-1"),
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("LAKE_REGISTRY_DYNAMODB_TABLE")
            && stderr.contains("LAKE_MANIFEST_DYNAMODB_TABLE"),
        "{stderr}"
    );
}

/// `lake serve` never serves openly by omission: without a token file it refuses to start,
/// before it opens anything, unless `LAKE_AUTH=none` says so (and it warns).
#[test]
fn serve_refuses_to_start_without_authentication() {
    use std::io::BufRead;
    let data = tempfile::tempdir().unwrap();
    let warehouse = data.path().join("lake");
    let serve = |extra: &[(&str, &str)]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lake"));
        cmd.arg("serve");
        for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("LAKE_")) {
            cmd.env_remove(k);
        }
        cmd.env("LAKE_ROLE", "metadata")
            .env("LAKE_WAREHOUSE", &warehouse)
            .env("LAKE_FLIGHT_ADDR", "127.0.0.1:0")
            .envs(extra.iter().copied());
        cmd
    };
    // A server that starts anyway never exits by itself: waiting for its output would hang.
    let out = exited_within(serve(&[]), Duration::from_secs(30))
        .expect("it served without authentication (still running after 30 s)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "it served without authentication");
    assert!(
        stderr.contains("LAKE_TOKEN_FILE") && stderr.contains("LAKE_AUTH=none"),
        "{stderr}"
    );
    assert!(
        !warehouse.exists(),
        "it opened the warehouse before refusing"
    );

    let out = exited_within(
        serve(&[("LAKE_AUTH", "none"), ("LAKE_TOKEN_FILE", "/x")]),
        Duration::from_secs(30),
    )
    .expect("it served with contradicting settings (still running after 30 s)");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("LAKE_AUTH"));

    let mut child = serve(&[("LAKE_AUTH", "none")])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("metadata grpc://127.0.0.1:"), "{line:?}");
    child.kill().unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("serving without authentication"),
        "{stderr}"
    );
}

/// `lake local` without tokens serves only this machine: an address others can reach needs
/// tokens, or LAKE_AUTH=none said out loud (and logged).
#[test]
fn local_refuses_to_expose_itself_without_tokens() {
    use std::io::BufRead;
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().join("lake");
    let local = |auth: Option<&str>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lake"));
        cmd.args(["local", "--data"]).arg(&dir).args([
            "--query-addr",
            "0.0.0.0:0",
            "--metadata-addr",
            "127.0.0.1:0",
        ]);
        for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("LAKE_")) {
            cmd.env_remove(k);
        }
        if let Some(auth) = auth {
            cmd.env("LAKE_AUTH", auth);
        }
        cmd
    };
    let out = exited_within(local(None), Duration::from_secs(30))
        .expect("it served 0.0.0.0 without authentication (still running after 30 s)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "it served without authentication");
    assert!(
        stderr.contains("0.0.0.0") && stderr.contains("--query-token-file"),
        "{stderr}"
    );
    assert!(!dir.exists(), "it created the lake before refusing");

    let mut child = local(Some("none"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("lake local: data in"), "{line:?}");
    child.kill().unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("without authentication"), "{stderr}");
}
