//! `lake plan`: the process-level view of the configuration contract.

use std::process::{Command, Output};

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
