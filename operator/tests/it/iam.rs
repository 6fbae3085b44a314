//! The IAM proof: the operator's rendered policies, evaluated by @cloud-copilot/iam-simulate over
//! every DynamoDB table action and the S3 requests the roles make (or must not).

use lake_operator::crd::LakeCluster;
use lake_operator::plan::{self, IamInputs};
use lake_operator::validate::validate;
use lake_testkit::{node, node_modules};

const ACCOUNT: &str = "123456789012";

/// A cluster whose roles are ARNs in `ACCOUNT` (the policies need no AWS lookup).
fn cluster(name: &str, bucket: &str, prefix: &str, region: &str) -> LakeCluster {
    serde_yaml::from_str(&format!(
        r#"
apiVersion: lake.dev/v1alpha1
kind: LakeCluster
metadata: {{name: {name}, namespace: data}}
spec:
  storage: {{s3: {{bucket: {bucket}, prefix: {prefix}, region: {region}}}}}
  iam:
    queryRole: arn:aws:iam::{ACCOUNT}:role/lake-query
    metadataRole: arn:aws:iam::{ACCOUNT}:role/lake-metadata
  query: {{image: lake:1}}
  metadata: {{image: lake:1}}
"#
    ))
    .unwrap()
}

#[test]
fn policies_grant_least_privilege_in_the_iam_simulator() {
    let cluster = cluster("analytics", "acme-lake", "analytics", "eu-west-1");
    let validated = validate(&cluster).unwrap();
    let plan = plan::plan(&validated, &IamInputs::default());
    let doc = |role: &str| {
        plan.policies
            .iter()
            .find(|p| p.role.to_string() == role)
            .unwrap()
            .document
            .clone()
    };
    let table = |name: &str| format!("arn:aws:dynamodb:eu-west-1:{ACCOUNT}:table/{name}");
    // The defaults the plan derived (`<namespace>-<name>-…`), not names assumed here.
    let table_name = |authority| {
        plan.tables
            .iter()
            .find(|t| t.authority == authority)
            .unwrap()
            .name
            .clone()
    };
    let input = serde_json::json!({
        "account": ACCOUNT,
        "queryRole": format!("arn:aws:iam::{ACCOUNT}:role/lake-query"),
        "metadataRole": format!("arn:aws:iam::{ACCOUNT}:role/lake-metadata"),
        "query": doc("query"),
        "metadata": doc("metadata"),
        "registry": table(&table_name(lake_common::schema::Authority::Registry)),
        "manifest": table(&table_name(lake_common::schema::Authority::Manifests)),
        "other": table("someone-elses-table"),
        "bucket": "acme-lake",
        "prefix": "analytics",
    });
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("input.json");
    std::fs::write(&file, input.to_string()).unwrap();
    let modules = node_modules().display().to_string();
    let (ok, stdout, stderr) = node(&[
        "operator/tests/it/iam_matrix.mjs",
        &modules,
        &file.display().to_string(),
    ]);
    let wrong: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("WRONG") || l.starts_with("ERROR"))
        .collect();
    assert!(
        ok,
        "the simulator disagreed:\n{}\n{stderr}",
        wrong.join("\n")
    );
    let summary = stdout.lines().last().unwrap_or_default();
    let total: usize = summary
        .split(" of ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(
        total > 300,
        "the matrix is smaller than expected: {summary}"
    );
    // The decisions the issue names, spelled out.
    let (registry, manifests) = (
        table_name(lake_common::schema::Authority::Registry),
        table_name(lake_common::schema::Authority::Manifests),
    );
    for line in [
        format!("ok query allowed dynamodb:GetItem arn:aws:dynamodb:eu-west-1:123456789012:table/{manifests}"),
        format!("ok query allowed dynamodb:Query arn:aws:dynamodb:eu-west-1:123456789012:table/{manifests}"),
        format!("ok query denied dynamodb:PutItem arn:aws:dynamodb:eu-west-1:123456789012:table/{manifests}"),
        format!("ok query denied dynamodb:GetItem arn:aws:dynamodb:eu-west-1:123456789012:table/{registry}"),
        format!("ok metadata allowed dynamodb:PutItem arn:aws:dynamodb:eu-west-1:123456789012:table/{registry}"),
        "ok metadata denied dynamodb:PutItem arn:aws:dynamodb:eu-west-1:123456789012:table/someone-elses-table".to_owned(),
        "ok query denied s3:PutObject arn:aws:s3:::acme-lake/analytics/_stage/in/a.csv".to_owned(),
        "ok metadata denied s3:GetObject arn:aws:s3:::acme-lake/other-prefix/x".to_owned(),
    ] {
        assert!(stdout.contains(&line), "missing decision: {line}\n{stdout}");
    }
}

/// moto with IAM enforcement on, its own server: credentials that hold only the rendered query
/// policy are refused DynamoDB writes and S3 writes, and may read the warehouse.
#[test]
fn query_credentials_are_refused_writes_under_enforcement() {
    let moto = lake_testkit::dedicated_moto();
    // ACCOUNT is moto's account id too.
    let cluster = cluster("enforced", "enforced-bucket", "wh", "us-east-1");
    let plan = plan::plan(&validate(&cluster).unwrap(), &IamInputs::default());
    let query = &plan
        .policies
        .iter()
        .find(|p| p.role.to_string() == "query")
        .unwrap()
        .document;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("query.json");
    std::fs::write(&file, query.to_string()).unwrap();
    let (ok, stdout, stderr) = lake_testkit::python(&[
        "operator/tests/it/iam_enforced.py",
        moto.endpoint(),
        &file.display().to_string(),
        "enforced-manifests",
        "enforced-bucket",
        "wh",
    ]);
    assert!(ok, "{stdout}\n{stderr}");
    let results: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    for refused in [
        "dynamodb:PutItem",
        "dynamodb:DeleteItem",
        "s3:PutObject warehouse",
        "s3:PutObject stage",
        "s3:DeleteObject warehouse",
        "s3:GetObject other prefix",
    ] {
        assert!(
            // HTTP 403: AccessDenied (S3) or the DynamoDB equivalent.
            results[refused]
                .as_str()
                .is_some_and(|r| r.starts_with("403 ")),
            "{refused} was not refused: {results}"
        );
    }
    assert_eq!(results["s3:GetObject warehouse"], "allowed", "{results}");
}
