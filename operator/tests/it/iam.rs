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
    maintenanceRole: arn:aws:iam::{ACCOUNT}:role/lake-maintenance
  query: {{image: lake:1}}
  metadata: {{image: lake:1}}
  maintenance: {{}}
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
        "maintenanceRole": format!("arn:aws:iam::{ACCOUNT}:role/lake-maintenance"),
        "query": doc("query"),
        "metadata": doc("metadata"),
        "maintenance": doc("maintenance"),
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
        total > 500,
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
        format!("ok maintenance allowed dynamodb:BatchWriteItem arn:aws:dynamodb:eu-west-1:123456789012:table/{manifests}"),
        format!("ok maintenance denied dynamodb:GetItem arn:aws:dynamodb:eu-west-1:123456789012:table/{registry}"),
        format!("ok maintenance denied dynamodb:DeleteTable arn:aws:dynamodb:eu-west-1:123456789012:table/{manifests}"),
        "ok maintenance allowed s3:DeleteObject arn:aws:s3:::acme-lake/analytics/x".to_owned(),
        "ok query denied s3:DeleteObject arn:aws:s3:::acme-lake/analytics/x".to_owned(),
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

/// One SQL statement through `lake sql`.
fn lake_sql(url: &str, token: &str, sql: &str) {
    let out = std::process::Command::new(lake_testkit::binary("lake"))
        .args(["sql", url, sql, "--token", token])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{sql}: {}",
        lake_testkit::output_text(&out)
    );
}

/// The maintenance role under moto's IAM enforcement, its own server: credentials holding only
/// the rendered maintenance policy run a whole `lake maintain` pass (compaction, erasure,
/// version removal) on a real lake, and are refused the registry (reads and writes), deleting
/// the manifest table and writing outside the warehouse; credentials holding only the query
/// policy are still refused every delete.
#[tokio::test(flavor = "multi_thread")]
async fn maintenance_role_is_least_privilege() {
    use lake_common::plan::Role;
    use std::io::BufRead;
    let moto = lake_testkit::dedicated_moto();
    let name = lake_testkit::unique("maint");
    let bucket = format!("{name}-bucket");
    let uid = lake_testkit::unique("uid");
    let cluster: LakeCluster = serde_yaml::from_str(&format!(
        r#"
apiVersion: lake.dev/v1alpha1
kind: LakeCluster
metadata: {{name: {name}, namespace: data, uid: {uid}}}
spec:
  storage: {{s3: {{bucket: {bucket}, prefix: wh, region: us-east-1, endpoint: "{endpoint}"}}}}
  iam:
    queryRole: arn:aws:iam::{ACCOUNT}:role/lake-query
    metadataRole: arn:aws:iam::{ACCOUNT}:role/lake-metadata
    maintenanceRole: arn:aws:iam::{ACCOUNT}:role/lake-maintenance
  query: {{image: lake:1}}
  metadata: {{image: lake:1}}
  maintenance: {{retentionSeconds: 0}}
"#,
        endpoint = moto.endpoint(),
    ))
    .unwrap();
    let validated = validate(&cluster).unwrap();
    let plan = plan::plan(&validated, &IamInputs::default());
    let document = |role: &str| {
        let policy = plan.policies.iter().find(|p| p.role.to_string() == role);
        policy.unwrap().document.clone()
    };
    let table = |authority| {
        let t = plan.tables.iter().find(|t| t.authority == authority);
        t.unwrap().name.as_str().to_owned()
    };
    let (registry, manifest) = (
        table(lake_common::schema::Authority::Registry),
        table(lake_common::schema::Authority::Manifests),
    );

    // The lake, set up by an administrator while enforcement is off: its tables (with markers),
    // its bucket, and rows carrying a marker written and deleted through the metadata role.
    let admin = aws_sdk_dynamodb::Client::new(
        &aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new("us-east-1"))
            .endpoint_url(moto.endpoint())
            .credentials_provider(aws_credential_types::Credentials::new(
                "admin", "testing", None, None, "tests",
            ))
            .load()
            .await,
    );
    for desired in &plan.tables {
        lake_operator::apply::tables::ensure(&admin, desired, false)
            .await
            .unwrap();
    }
    moto.create_bucket(&bucket);
    let aws_env = |command: &mut std::process::Command, key: &str, secret: &str| {
        command
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("AWS_ACCESS_KEY_ID", key)
            .env("AWS_SECRET_ACCESS_KEY", secret)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ENDPOINT_URL", moto.endpoint())
            .env("AWS_EC2_METADATA_DISABLED", "true");
    };
    let dir = tempfile::tempdir().unwrap();
    let token = lake_testkit::unique("token");
    std::fs::write(dir.path().join("tokens"), format!("{token}\n")).unwrap();
    let (metadata_vars, _) = lake_operator::plan::workloads::config(&validated, Role::Metadata);
    let mut serve = std::process::Command::new(lake_testkit::binary("lake"));
    serve
        .arg("serve")
        .env_clear()
        .envs(
            metadata_vars
                .iter()
                .filter(|(k, _)| !k.starts_with("LAKE_TLS_")),
        )
        .env("LAKE_FLIGHT_ADDR", "127.0.0.1:0")
        .env("LAKE_TOKEN_FILE", dir.path().join("tokens"))
        .stdout(std::process::Stdio::piped());
    aws_env(&mut serve, "admin", "testing");
    let mut metadata = serve.spawn().unwrap();
    let mut line = String::new();
    std::io::BufReader::new(metadata.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    assert!(url.starts_with("grpc://"), "metadata did not start: {line}");
    let marker = lake_testkit::unique("erase-me");
    for sql in [
        "CREATE SCHEMA s".to_owned(),
        "CREATE TABLE s.t (id BIGINT, note VARCHAR)".to_owned(),
        "INSERT INTO s.t VALUES (1, 'keep')".to_owned(),
        format!("INSERT INTO s.t VALUES (2, '{marker}'), (3, 'keep too')"),
        format!("DELETE FROM s.t WHERE note = '{marker}'"),
    ] {
        lake_sql(&url, &token, &sql);
    }
    let _ = metadata.kill();
    let _ = metadata.wait();

    // Users holding exactly the rendered policies; then enforcement on.
    let write = |file: &str, value: &serde_json::Value| {
        let path = dir.path().join(file);
        std::fs::write(&path, value.to_string()).unwrap();
        path.display().to_string()
    };
    let script = "operator/tests/it/maintenance_enforced.py";
    let (ok, stdout, stderr) = lake_testkit::python(&[
        script,
        "users",
        moto.endpoint(),
        &write("maintenance.json", &document("maintenance")),
        &write("query.json", &document("query")),
        &bucket,
        "wh",
    ]);
    assert!(ok, "{stdout}\n{stderr}");
    let keys_file = write("keys.json", &serde_json::from_str(stdout.trim()).unwrap());
    let keys: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    let holding = || {
        let (ok, stdout, stderr) = lake_testkit::python(&[
            script,
            "holding",
            moto.endpoint(),
            &keys_file,
            &bucket,
            &marker,
        ]);
        assert!(ok, "{stdout}\n{stderr}");
        serde_json::from_str::<serde_json::Value>(stdout.trim()).unwrap()
    };
    let before = holding();
    assert!(
        !before["holding"].as_array().unwrap().is_empty(),
        "the deleted rows are not in storage before the pass: {before}"
    );

    // The pass, in the maintenance role's environment and credentials only.
    let job = validated.maintenance.as_ref().unwrap();
    let mut maintain = std::process::Command::new(lake_testkit::binary("lake"));
    // As the CronJob runs it, but with no grace: the versions holding the rows go now.
    let mut args = lake_operator::plan::maintenance::args(job);
    let grace = args.iter().position(|a| a == "--grace-seconds").unwrap();
    args[grace + 1] = "0".into();
    maintain
        .args(args)
        .env_clear()
        .envs(lake_operator::plan::maintenance::config(&validated).unwrap());
    aws_env(
        &mut maintain,
        keys["maintenance"]["id"].as_str().unwrap(),
        keys["maintenance"]["secret"].as_str().unwrap(),
    );
    let out = maintain.output().unwrap();
    let text = lake_testkit::output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("s.t: ok") && text.contains("1 tables, 0 failed"),
        "{text}"
    );
    let after = holding();
    assert_eq!(
        after["holding"],
        serde_json::json!([]),
        "objects still holding the deleted rows after the pass: {after}"
    );

    // `lake selftest` in the maintenance role agrees with its credentials, and fails with
    // query's (which may not write the manifest table).
    let selftest = |who: &str| {
        let mut command = std::process::Command::new(lake_testkit::binary("lake"));
        command
            .arg("selftest")
            .env_clear()
            .envs(lake_operator::plan::maintenance::config(&validated).unwrap());
        aws_env(
            &mut command,
            keys[who]["id"].as_str().unwrap(),
            keys[who]["secret"].as_str().unwrap(),
        );
        command.output().unwrap()
    };
    let own = selftest("maintenance");
    let said = lake_testkit::output_text(&own);
    assert!(own.status.success(), "{said}");
    assert!(
        said.contains("maintenance selftest: 5 passed, 0 failed"),
        "{said}"
    );
    let query = selftest("query");
    let said = lake_testkit::output_text(&query);
    assert!(!query.status.success(), "{said}");
    assert!(said.contains("FAILED maintenance may write"), "{said}");

    // What neither role may do. The object probed is one the pass kept.
    let (ok, stdout, stderr) = lake_testkit::python(&[
        script,
        "holding",
        moto.endpoint(),
        &keys_file,
        &bucket,
        "keep too",
    ]);
    assert!(ok, "{stdout}\n{stderr}");
    let kept: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    let object = kept["holding"][0].as_str().unwrap().to_owned();
    let (ok, stdout, stderr) = lake_testkit::python(&[
        script,
        "probe",
        moto.endpoint(),
        &keys_file,
        &registry,
        &manifest,
        &bucket,
        &object,
        "wh",
    ]);
    assert!(ok, "{stdout}\n{stderr}");
    let results: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    for refused in [
        "maintenance dynamodb:PutItem registry",
        "maintenance dynamodb:DeleteItem registry",
        "maintenance dynamodb:GetItem registry",
        "maintenance dynamodb:Query registry",
        "maintenance dynamodb:DeleteTable manifest",
        "maintenance s3:PutObject outside the warehouse",
        "maintenance s3:DeleteObject outside the warehouse",
        "maintenance s3:GetObject stage",
        "maintenance s3:DeleteObject stage",
        "query dynamodb:DeleteItem manifest",
        "query dynamodb:BatchWriteItem manifest",
        "query s3:DeleteObject warehouse",
        "query s3:DeleteObjects warehouse",
    ] {
        assert!(
            results[refused]
                .as_str()
                .is_some_and(|r| r.starts_with("403 ") || r.starts_with("400 AccessDenied")),
            "{refused} was not refused: {results}"
        );
    }
    assert_eq!(
        results["the probed object survived"], "allowed",
        "{results}"
    );
    assert_eq!(results["the staged file survived"], "allowed", "{results}");
    assert_eq!(
        results["maintenance s3:DeleteObjects mixed"],
        serde_json::json!({"deleted": ["wh/probe/inside"], "refused": ["elsewhere/outside"],
            "left": ["elsewhere/outside"]}),
        "{results}"
    );
}
