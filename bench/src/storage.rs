//! Storage bench: append throughput and latest-version open latency of lake's engine, on local
//! disk and on the AWS emulator (S3 + DynamoDB manifests), side by side with pylance doing the
//! same on the same backend in the same run. Prints a table and lake/pylance ratios.
//!
//! Run: `bench/run storage` (release build). Arguments: [COMMITS] [ROWS_PER_COMMIT] [OPENS].

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{Float64Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use aws_credential_types::Credentials;
use lake_common::plan::{
    AuthorityPlan, AuthorityRequest, ManifestStore, PlanFields, RegistryStore, StorageRequest,
};
use lake_runtime::aws::AwsConnection;
use lake_runtime::aws::ConnectOptions;
use lake_runtime::catalog::{NamespaceName, TableName};
use lake_runtime::context::{MetadataContext, QueryContext};
use lake_runtime::engine::TableRef;
use lake_runtime::provision;
use lake_testkit::{moto, python, unique};

const REGION: &str = "us-east-1";

struct Numbers {
    rows_per_s: f64,
    mb_per_s: f64,
    open_p50_ms: f64,
    open_p95_ms: f64,
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("name", DataType::Utf8, true),
        Field::new("value", DataType::Float64, true),
    ]))
}

fn batch(start: i64, rows: i64) -> RecordBatch {
    let ids: Vec<i64> = (start..start + rows).collect();
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(ids.clone())),
            Arc::new(StringArray::from(
                ids.iter()
                    .map(|i| format!("name-{i:012}"))
                    .collect::<Vec<_>>(),
            )),
            Arc::new(Float64Array::from(
                ids.iter().map(|i| *i as f64 * 0.5).collect::<Vec<_>>(),
            )),
        ],
    )
    .expect("bench batch")
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

async fn run_lake(
    plan: &AuthorityPlan,
    cluster: Option<&str>,
    options: &ConnectOptions,
    commits: i64,
    rows: i64,
    opens: usize,
) -> Numbers {
    let metadata = MetadataContext::open(&plan.metadata(), cluster, options)
        .await
        .expect("metadata");
    let t = TableRef::new(
        NamespaceName::parse("bench").expect("a valid namespace"),
        TableName::parse("appends").expect("a valid table name"),
    );
    metadata
        .registry()
        .create_namespace(&t.namespace)
        .await
        .expect("namespace");
    metadata
        .create_table(&t, schema(), vec![batch(-1, 1)])
        .await
        .expect("create");
    let batches: Vec<RecordBatch> = (0..commits).map(|c| batch(c * rows, rows)).collect();
    let bytes: usize = batches.iter().map(RecordBatch::get_array_memory_size).sum();
    let started = Instant::now();
    for b in batches {
        metadata
            .engine()
            .append(&t, schema(), vec![b])
            .await
            .expect("append");
    }
    let elapsed = started.elapsed().as_secs_f64();

    let query = QueryContext::open(&plan.query(), cluster, options)
        .await
        .expect("query");
    let mut times = Vec::with_capacity(opens);
    for _ in 0..opens {
        let started = Instant::now();
        let dataset = query.engine().open(&t, None).await.expect("open");
        times.push(started.elapsed());
        assert_eq!(dataset.version().version, 1 + commits as u64);
    }
    times.sort();
    Numbers {
        rows_per_s: (commits * rows) as f64 / elapsed,
        mb_per_s: bytes as f64 / 1e6 / elapsed,
        open_p50_ms: percentile(&times, 0.5),
        open_p95_ms: percentile(&times, 0.95),
    }
}

fn run_pylance(
    uri: &str,
    options: &serde_json::Value,
    commits: i64,
    rows: i64,
    opens: usize,
) -> Numbers {
    let (ok, stdout, stderr) = python(&[
        "bench/storage_peer.py",
        uri,
        &options.to_string(),
        &commits.to_string(),
        &rows.to_string(),
        &opens.to_string(),
    ]);
    assert!(ok, "pylance peer failed:\n{stdout}\n{stderr}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("peer JSON");
    let f = |k: &str| {
        v[k].as_f64()
            .unwrap_or_else(|| panic!("peer output lacks {k}: {v}"))
    };
    Numbers {
        rows_per_s: f("rows_per_s"),
        mb_per_s: f("mb_per_s"),
        open_p50_ms: f("open_p50_ms"),
        open_p95_ms: f("open_p95_ms"),
    }
}

/// Median seconds of `repeats` full scans (`SELECT *`) of the bench table through
/// `lake serve --role query` on `plan` (the whole query path: Flight SQL over loopback,
/// DataFusion, Lance on S3 with DynamoDB manifests), after one warm-up scan; and the rows seen.
async fn scan_through_query(plan: &AuthorityPlan, cluster: &str, repeats: usize) -> (f64, usize) {
    use std::io::BufRead;
    let config = lake_common::config::RuntimeConfig::for_role(
        plan,
        lake_common::plan::Role::Query,
        Some(cluster.to_owned()),
        "127.0.0.1:0".parse().expect("address"),
        None,
    );
    // `bench/run` builds lake beside this bench.
    let lake = std::env::current_exe()
        .expect("own path")
        .with_file_name("lake");
    let mut child = std::process::Command::new(&lake)
        .arg("serve")
        .env_clear()
        .envs(config.to_vars())
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("LAKE_AUTH", "none")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", lake.display()));
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the endpoint line");
    let endpoint = line
        .trim()
        .strip_prefix("query ")
        .unwrap_or_else(|| panic!("lake serve printed {line:?}"))
        .to_owned();
    let stage = Arc::new(object_store::memory::InMemory::new());
    let client = lake_client::LakeClient::with_stage(&endpoint, stage, Default::default())
        .await
        .expect("connect");
    let scan = || async {
        use futures::TryStreamExt;
        let batches: Vec<RecordBatch> = client
            .query("SELECT * FROM bench.appends")
            .await
            .expect("query")
            .try_collect()
            .await
            .expect("rows");
        batches.iter().map(RecordBatch::num_rows).sum::<usize>()
    };
    let mut rows = scan().await;
    let mut times = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        let started = Instant::now();
        rows = scan().await;
        times.push(started.elapsed());
    }
    let _ = child.kill();
    let _ = child.wait();
    times.sort();
    (times[times.len() / 2].as_secs_f64(), rows)
}

/// pylance's median full scans of the same dataset, through the same manifest table: opened
/// afresh each time (cold caches), and through one kept `lance.Session` (warm caches, as lake's
/// endpoint keeps them); and the rows seen.
fn scan_pylance(uri: &str, options: &serde_json::Value, repeats: usize) -> (f64, f64, usize) {
    let (ok, stdout, stderr) = python(&[
        "bench/storage_peer.py",
        "--scan",
        uri,
        &options.to_string(),
        &repeats.to_string(),
    ]);
    assert!(ok, "pylance scan failed:\n{stdout}\n{stderr}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("peer JSON");
    (
        v["scan_s"].as_f64().expect("scan_s"),
        v["scan_session_s"].as_f64().expect("scan_session_s"),
        v["rows"].as_u64().expect("rows") as usize,
    )
}

fn print_row(backend: &str, engine: &str, n: &Numbers) {
    println!(
        "{backend:<10} {engine:<8} {:>14.0} {:>10.2} {:>12.2} {:>12.2}",
        n.rows_per_s, n.mb_per_s, n.open_p50_ms, n.open_p95_ms
    );
}

fn print_ratio(backend: &str, lake: &Numbers, peer: &Numbers) {
    println!(
        "{backend:<10} lake/pylance: append rows/s x{:.2}, open p50 x{:.2} (lower is faster)",
        lake.rows_per_s / peer.rows_per_s,
        lake.open_p50_ms / peer.open_p50_ms
    );
}

#[tokio::main]
async fn main() {
    let args: Vec<i64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let commits = args.first().copied().unwrap_or(20);
    let rows = args.get(1).copied().unwrap_or(50_000);
    let opens = args.get(2).copied().unwrap_or(50) as usize;
    println!(
        "storage bench: {commits} commits x {rows} rows (id int64, name utf8, value f64), {opens} opens of the latest version\n"
    );
    println!(
        "{:<10} {:<8} {:>14} {:>10} {:>12} {:>12}",
        "backend", "engine", "append rows/s", "MB/s", "open p50 ms", "open p95 ms"
    );

    // Local disk: lake (embedded manifest store) vs pylance (its default local commit).
    let dir = tempfile::tempdir().expect("tempdir");
    let local = AuthorityPlan::new(
        &AuthorityRequest {
            cluster_name: "bench".into(),
            storage: StorageRequest::Local {
                path: dir.path().join("lake").display().to_string(),
            },
            registry_table: None,
            manifest_table: None,
            legacy_table: None,
            dynamodb_endpoint: None,
        },
        &PlanFields::SPEC,
    )
    .expect("local plan");
    let options = ConnectOptions::default();
    let lake_local = run_lake(&local, None, &options, commits, rows, opens).await;
    print_row("local", "lake", &lake_local);
    let peer_uri = dir.path().join("pylance/bench.lance").display().to_string();
    let peer_local = run_pylance(&peer_uri, &serde_json::json!({}), commits, rows, opens);
    print_row("local", "pylance", &peer_local);

    // The emulator: S3 data + DynamoDB manifests, for both.
    let moto = moto();
    let bucket = unique("bench");
    moto.create_bucket(&bucket);
    let cloud = AuthorityPlan::new(
        &AuthorityRequest {
            cluster_name: unique("bench"),
            storage: StorageRequest::S3 {
                bucket: bucket.clone(),
                prefix: "wh".into(),
                region: REGION.into(),
                endpoint: Some(moto.endpoint().into()),
            },
            registry_table: None,
            manifest_table: None,
            legacy_table: None,
            dynamodb_endpoint: Some(moto.endpoint().into()),
        },
        &PlanFields::SPEC,
    )
    .expect("cloud plan");
    let credentials = Credentials::new("testing", "testing", None, None, "bench");
    let options = ConnectOptions {
        credentials: Some(credentials),
        ..Default::default()
    };
    let aws = AwsConnection::new(cloud.aws().expect("aws"), &options).await;
    let (RegistryStore::DynamoDb { table: registry }, ManifestStore::DynamoDb { table: manifest }) =
        (cloud.registry(), cloud.manifests())
    else {
        unreachable!("a cloud plan has DynamoDB stores")
    };
    provision::dynamo_tables(&aws.dynamodb(), registry, manifest, "bench-cluster")
        .await
        .expect("provision");
    let lake_cloud = run_lake(
        &cloud,
        Some("bench-cluster"),
        &options,
        commits,
        rows,
        opens,
    )
    .await;
    print_row("emulator", "lake", &lake_cloud);
    let peer_table = unique("peer-manifests");
    provision::create_dynamo_table(
        &aws.dynamodb(),
        &peer_table,
        lake_common::schema::Authority::Manifests.key_schema(),
    )
    .await
    .expect("peer table");
    let peer_options = serde_json::json!({
        "aws_endpoint": moto.endpoint(), "dynamodb_endpoint": moto.endpoint(), "allow_http": "true",
        "aws_access_key_id": "testing", "aws_secret_access_key": "testing", "aws_region": REGION,
    });
    let peer_uri = format!("s3+ddb://{bucket}/peer/bench.lance?ddbTableName={peer_table}");
    let peer_cloud = run_pylance(&peer_uri, &peer_options, commits, rows, opens);
    print_row("emulator", "pylance", &peer_cloud);

    println!();
    print_ratio("local", &lake_local, &peer_local);
    print_ratio("emulator", &lake_cloud, &peer_cloud);

    // Full scans of lake's emulator table: the query endpoint vs pylance, same dataset.
    let (lake_scan, lake_rows) = scan_through_query(&cloud, "bench-cluster", 5).await;
    let manifest_table = match cloud.manifests() {
        ManifestStore::DynamoDb { table } => table.to_string(),
        ManifestStore::Embedded { .. } => unreachable!("a cloud plan"),
    };
    let lake_uri =
        format!("s3+ddb://{bucket}/wh/bench/appends.lance?ddbTableName={manifest_table}");
    let (peer_fresh, peer_kept, peer_rows) = scan_pylance(&lake_uri, &peer_options, 5);
    assert_eq!(lake_rows, peer_rows, "both scans read the whole table");
    // The goal is against the faster peer: pylance with its caches kept, as lake keeps its own.
    let peer_scan = peer_fresh.min(peer_kept);
    println!(
        "emulator   full scan of {lake_rows} rows, median of 5: lake query endpoint {lake_scan:.3} s, \
         pylance {peer_fresh:.3} s opened afresh, {peer_kept:.3} s through one kept session; \
         lake/faster pylance x{:.2} (goal <= 1.2)",
        lake_scan / peer_scan
    );
}
