//! `lake-operator render -f FILE`: the offline plan, and plan errors before any client exists.

use lake_testkit::workspace_root;
use std::process::{Command, Output};

fn render(file: &str, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lake-operator"))
        .args(["render", "-f", file])
        .args(extra)
        .current_dir(workspace_root())
        // No cluster and no AWS are reachable: render must not need either.
        .env("KUBECONFIG", "/nonexistent")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env_remove("AWS_ACCESS_KEY_ID")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn cloud_sample_renders_separate_authorities_per_role() {
    let out = render("config/samples/lakecluster-cloud.yaml", &["-o", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();

    let query = &plan["roles"]["query"];
    let metadata = &plan["roles"]["metadata"];
    assert_eq!(
        query["connection"]["manifests"]["dynamo-db"]["table"],
        "analytics-manifests"
    );
    assert_eq!(query["connection"]["manifest_access"], "read-only");
    assert_eq!(query["connection"]["provisioning"], "never");
    assert_eq!(
        query["config"]["LAKE_MANIFEST_DYNAMODB_TABLE"],
        "analytics-manifests"
    );
    assert!(
        !query.to_string().contains("analytics-registry"),
        "the query role must not see the registry: {query}"
    );
    assert_eq!(
        metadata["connection"]["registry"]["dynamo-db"]["table"],
        "analytics-registry"
    );
    assert_eq!(
        metadata["config"]["LAKE_REGISTRY_DYNAMODB_TABLE"],
        "analytics-registry"
    );
    assert_eq!(
        query["endpoint"],
        "grpc+tls://analytics-query.data.svc:8815"
    );
    assert_eq!(
        query["config"]["LAKE_METADATA_ENDPOINT"],
        "grpc+tls://analytics-metadata.data.svc:8816"
    );
    assert_eq!(
        plan["cluster"]["authority"]["warehouse"],
        "s3://acme-lake/analytics"
    );
}

#[test]
fn local_sample_renders_embedded_stores() {
    let out = render("config/samples/lakecluster-local.yaml", &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let yaml = text(&out.stdout);
    assert!(yaml.contains("/var/lib/lake/_lake/registry.redb"), "{yaml}");
    assert!(
        yaml.contains("/var/lib/lake/_lake/manifests.redb"),
        "{yaml}"
    );
    // One pod runs both roles from its claim: no per-role Deployment, no LAKE_* ConfigMap.
    assert!(yaml.contains("kind: StatefulSet"), "{yaml}");
    assert!(!yaml.contains("kind: Deployment"), "{yaml}");
    assert!(!yaml.contains("LAKE_ROLE"), "{yaml}");
    // Offline manifests need no cluster id: a local lake has no table markers.
    let out = render(
        "config/samples/lakecluster-local.yaml",
        &["-o", "manifests"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn aliased_tables_are_rejected_naming_both_fields() {
    let out = render("operator/tests/fixtures/aliased-tables.yaml", &[]);
    assert!(!out.status.success());
    assert!(
        out.stdout.is_empty(),
        "no plan is printed for an invalid spec"
    );
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("spec.tables.registry") && stderr.contains("spec.tables.manifest"),
        "{stderr}"
    );
    assert!(stderr.contains("analytics-shared"), "{stderr}");
}

#[test]
fn every_error_is_reported_in_one_pass() {
    let out = render("operator/tests/fixtures/many-errors.yaml", &[]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    for field in [
        "spec.storage.s3.bucket",
        "spec.tables.registry",
        "spec.query.replicas",
        "spec.metadata.image",
    ] {
        assert!(stderr.contains(field), "{field} missing from:\n{stderr}");
    }
}

#[test]
fn unknown_fields_are_rejected() {
    let out = render("operator/tests/fixtures/typo.yaml", &[]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("spec.tabels: unknown field"), "{stderr}");
}

#[test]
fn a_missing_file_is_a_clear_error() {
    let out = render("does/not/exist.yaml", &[]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("cannot read does/not/exist.yaml"));
}

#[test]
fn crd_subcommand_prints_the_checked_in_crd() {
    let out = Command::new(env!("CARGO_BIN_EXE_lake-operator"))
        .arg("crd")
        .output()
        .unwrap();
    assert!(out.status.success());
    let checked_in = std::fs::read(workspace_root().join("crds/lakecluster.yaml")).unwrap();
    assert!(
        out.stdout == checked_in,
        "`lake-operator crd` differs from crds/lakecluster.yaml"
    );
}

const SAMPLES: [&str; 2] = ["lakecluster-cloud", "lakecluster-local"];

/// A sample with its roles given as ARNs (what `-o manifests` needs), in `dir`.
fn with_role_arns(sample: &str, dir: &std::path::Path) -> String {
    let text =
        std::fs::read_to_string(workspace_root().join(format!("config/samples/{sample}.yaml")))
            .unwrap()
            .replace(
                "queryRole: lake-query",
                "queryRole: arn:aws:iam::123456789012:role/lake-query",
            )
            .replace(
                "metadataRole: lake-metadata",
                "metadataRole: arn:aws:iam::123456789012:role/lake-metadata",
            )
            .replace(
                "maintenanceRole: lake-maintenance",
                "maintenanceRole: arn:aws:iam::123456789012:role/lake-maintenance",
            );
    let path = dir.join(format!("{sample}-arns.yaml"));
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// `-o manifests` prints only what can be applied and start: it needs the cluster id the
/// tables' markers carry, refuses placeholders for what only reconcile can look up, and leaves
/// out owner references (no LakeCluster owns objects applied by hand).
#[test]
fn manifests_need_a_cluster_id_and_no_placeholder() {
    let dir = tempfile::tempdir().unwrap();
    let sample = "config/samples/lakecluster-cloud.yaml";
    let out = render(sample, &["-o", "manifests"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--cluster-id"),
        "{}",
        text(&out.stderr)
    );
    let out = render(sample, &["-o", "manifests", "--cluster-id", "not a uid!"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--cluster-id \"not a uid!\""),
        "{}",
        text(&out.stderr)
    );
    // Role names: their account is only known to reconcile (GetRole).
    let out = render(
        sample,
        &[
            "-o",
            "manifests",
            "--cluster-id",
            "0f4c2d1e-aaaa-bbbb-cccc-123456789012",
        ],
    );
    assert!(!out.status.success(), "{}", text(&out.stdout));
    let said = text(&out.stderr);
    assert!(
        said.contains("placeholder") && said.contains("ARNs"),
        "{said}"
    );

    let file = with_role_arns("lakecluster-cloud", dir.path());
    let out = render(
        &file,
        &[
            "-o",
            "manifests",
            "--cluster-id",
            "0f4c2d1e-aaaa-bbbb-cccc-123456789012",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let manifests = text(&out.stdout);
    assert!(
        manifests.contains("LAKE_CLUSTER_ID: 0f4c2d1e-aaaa-bbbb-cccc-123456789012"),
        "{manifests}"
    );
    assert!(!manifests.contains("ownerReferences"), "{manifests}");
    assert!(
        !manifests.contains('<'),
        "a placeholder was printed: {manifests}"
    );
}

#[test]
fn rendered_objects_pass_kubernetes_validate_strict() {
    let dir = tempfile::tempdir().unwrap();
    for sample in SAMPLES {
        let file = with_role_arns(sample, dir.path());
        let out = render(&file, &["-o", "manifests", "--cluster-id", "4d3c2b1a"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let file = dir.path().join(format!("{sample}.yaml"));
        std::fs::write(&file, &out.stdout).unwrap();
        let check = Command::new(lake_testkit::venv_tool("kubernetes-validate"))
            .arg("--strict")
            .arg(&file)
            .output()
            .unwrap();
        let report = text(&check.stdout);
        assert!(
            check.status.success(),
            "{sample}: kubernetes-validate --strict failed:\n{report}{}",
            text(&check.stderr)
        );
        // S3: ConfigMap, ServiceAccount, Deployment, Service per role, query's PDB and
        // metadata's NetworkPolicy, and maintenance's ConfigMap, ServiceAccount, CronJob. Local: one ServiceAccount, StatefulSet and NetworkPolicy,
        // and both roles' Services.
        let kinds: &[(&str, usize)] = match sample {
            "lakecluster-local" => &[
                ("serviceaccount", 1),
                ("statefulset", 1),
                ("service", 2),
                ("networkpolicy", 1),
            ],
            _ => &[
                ("configmap", 3),
                ("serviceaccount", 3),
                ("deployment", 2),
                ("service", 3),
                ("poddisruptionbudget", 1),
                ("networkpolicy", 2),
                ("cronjob", 1),
                ("role", 1),
                ("rolebinding", 1),
            ],
        };
        let total: usize = kinds.iter().map(|(_, n)| n).sum();
        assert_eq!(
            report.matches(" passed for resource ").count(),
            total,
            "{report}"
        );
        for (kind, n) in kinds {
            assert_eq!(
                report
                    .matches(&format!("passed for resource {kind}/"))
                    .count(),
                *n,
                "{kind}: {report}"
            );
        }
    }
}

/// The samples' full render (plan summary, IAM policies, every object) is checked in under
/// `operator/tests/golden/`; `LAKE_UPDATE_GOLDEN=1` rewrites the files after a deliberate change.
#[test]
fn samples_render_their_golden_files() {
    for sample in SAMPLES {
        let out = render(&format!("config/samples/{sample}.yaml"), &[]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let rendered = text(&out.stdout);
        let path = workspace_root().join(format!("operator/tests/golden/{sample}.yaml"));
        if std::env::var_os("LAKE_UPDATE_GOLDEN").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &rendered).unwrap();
            continue;
        }
        let golden = std::fs::read_to_string(&path).unwrap_or_default();
        if golden != rendered {
            let diff = similar::TextDiff::from_lines(&golden, &rendered);
            panic!(
                "the render of {sample} changed; if that is intended, run\n  \
                 LAKE_UPDATE_GOLDEN=1 scripts/cargo test -p lake-operator --test it render\n\n{}",
                diff.unified_diff().header("golden", "rendered")
            );
        }
    }
}

/// `render --allowlist`: the administrator's check offline. A refused spec exits 1 naming the
/// field; a malformed allowlist is an error naming what is wrong; an allowing one renders.
#[test]
fn render_checks_the_allowlist() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let sample = "config/samples/lakecluster-cloud.yaml";
    let other_team = write(
        "other.yaml",
        "namespaces:\n  data:\n    roles: [payments-*]\n    storage: [{bucket: acme-lake, prefix: analytics}]\n",
    );
    let out = render(sample, &["--allowlist", &other_team]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a refused spec rendered");
    assert!(
        stderr.contains("spec.iam.queryRole") && stderr.contains("spec.iam.metadataRole"),
        "{stderr}"
    );
    let typo = write(
        "typo.yaml",
        "namespaces:\n  data:\n    rolez: [lake-query]\n",
    );
    let out = render(sample, &["--allowlist", &typo]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("rolez"),
        "{stderr}"
    );
    // The sample names its own tables: outside the namespace's default names, refused
    // unless the allowlist lists them.
    let default_tables = write(
        "default-tables.yaml",
        "namespaces:\n  data:\n    roles: [lake-query, lake-metadata]\n    storage: [{bucket: acme-lake, prefix: analytics}]\n",
    );
    let out = render(sample, &["--allowlist", &default_tables]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && stderr.contains("spec.tables.registry")
            && stderr.contains("spec.tables.manifest"),
        "{stderr}"
    );
    let allowed = write(
        "ok.yaml",
        "namespaces:\n  data:\n    roles: [lake-query, lake-metadata, lake-maintenance]\n    storage: [{bucket: acme-lake, prefix: analytics}]\n    tables: [analytics-*]\n",
    );
    let out = render(sample, &["--allowlist", &allowed]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
