//! The checked-in CRD matches the Rust types, and it and the samples pass real validators.

use lake_operator::crd::crd_yaml;
use lake_testkit::{python, venv_tool, workspace_root};
use std::process::Command;

#[test]
fn checked_in_crd_matches_generated() {
    let path = workspace_root().join("crds/lakecluster.yaml");
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    let generated = crd_yaml().unwrap();
    if checked_in != generated {
        let diff = similar::TextDiff::from_lines(&checked_in, &generated);
        panic!(
            "crds/lakecluster.yaml is out of date; regenerate it with\n  \
             scripts/cargo run -p lake-operator -- crd > crds/lakecluster.yaml\n\n{}",
            diff.unified_diff().header("checked in", "generated")
        );
    }
}

#[test]
fn crd_passes_kubernetes_validate_strict() {
    let out = Command::new(venv_tool("kubernetes-validate"))
        .args(["--strict", "crds/lakecluster.yaml"])
        .current_dir(workspace_root())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kubernetes-validate --strict rejected the CRD:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("passed for resource customresourcedefinition/lakeclusters.lake.dev"),
        "{stdout}"
    );
}

#[test]
fn samples_validate_against_the_crd_schema() {
    let (ok, stdout, stderr) = python(&[
        "operator/tests/it/validate_cr.py",
        "crds/lakecluster.yaml",
        "config/samples/lakecluster-cloud.yaml",
        "config/samples/lakecluster-local.yaml",
    ]);
    assert!(ok, "samples do not match the CRD schema:\n{stdout}{stderr}");
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("valid ")).count(),
        2,
        "{stdout}"
    );
}

#[test]
fn schema_validator_rejects_what_the_schema_forbids() {
    // The validator above must be able to fail: replicas 0 and a bad table name are rejected.
    let (ok, stdout, _) = python(&[
        "operator/tests/it/validate_cr.py",
        "crds/lakecluster.yaml",
        "operator/tests/fixtures/many-errors.yaml",
    ]);
    assert!(!ok, "{stdout}");
    assert!(stdout.contains("spec.query.replicas"), "{stdout}");
    assert!(stdout.contains("spec.tables.registry"), "{stdout}");
}
