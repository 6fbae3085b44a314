//! The Rust SDK (lake-client) and `lake stage` against real servers: stage discovery from the
//! query endpoint alone, direct stage I/O, COPY INTO, and (on the emulator) proof that stage
//! bytes never pass through the servers.

use std::process::Command;
use std::sync::Arc;

use arrow::array::{Array, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use arrow_flight::Action;
use bytes::Bytes;
use futures::TryStreamExt;
use lake_client::{ClientError, ConnectOptions, IngestMode, LakeClient};
use lake_common::plan::Role;
use lake_common::stage::{DESCRIBE_STAGE_ACTION, StageBackend, StageDescriptor};
use lake_testkit::{moto, unique};

use crate::support::{CloudLake, LocalLake, Served, requests_of, test_certificates};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Runtime::new().unwrap()
}

async fn rows(lake: &LakeClient, sql: &str) -> Vec<RecordBatch> {
    lake.query(sql).await.unwrap().try_collect().await.unwrap()
}

async fn count(lake: &LakeClient, table: &str) -> i64 {
    let batches = rows(lake, &format!("SELECT count(*) AS n FROM {table}")).await;
    batches[0]
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap()
        .value(0)
}

fn server_code(e: &ClientError) -> tonic::Code {
    match e {
        ClientError::Server { code, .. } => *code,
        other => panic!("expected a server error, got {other}"),
    }
}

#[test]
fn managed_stage_action_returns_configured_descriptor() {
    let lake = LocalLake::start();
    rt().block_on(async {
        let mut client = lake_client::flight_sql(&lake.query, None, None)
            .await
            .unwrap();
        let results: Vec<_> = client
            .do_action(Action::new(DESCRIBE_STAGE_ACTION, ""))
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        assert_eq!(results.len(), 1, "exactly one result");
        let descriptor = StageDescriptor::decode(&results[0].body).unwrap();
        let root = lake.dir.path().canonicalize().unwrap().join("_stage");
        assert_eq!(
            descriptor.backend,
            StageBackend::Local {
                root: root.display().to_string()
            }
        );
        let listed: Vec<String> = client
            .inner_mut()
            .list_actions(arrow_flight::Empty {})
            .await
            .unwrap()
            .into_inner()
            .map_ok(|a| a.r#type)
            .try_collect()
            .await
            .unwrap();
        assert!(
            listed.iter().any(|a| a == DESCRIBE_STAGE_ACTION),
            "{listed:?}"
        );
        let unknown = client
            .do_action(Action::new("lake.stage.explode", ""))
            .await
            .unwrap_err();
        assert!(
            unknown.to_string().contains("lake.stage.explode"),
            "{unknown}"
        );
        // The server survived it.
        assert!(
            client
                .do_action(Action::new(DESCRIBE_STAGE_ACTION, ""))
                .await
                .is_ok()
        );
    });
}

#[test]
fn client_discovers_local_stage_from_query() {
    let server = LocalLake::start();
    rt().block_on(async {
        let lake = LakeClient::connect(&server.query).await.unwrap();
        assert_eq!(lake.metadata_endpoint(), Some(server.metadata.as_str()));
        assert!(matches!(
            lake.stage_descriptor().map(|d| &d.backend),
            Some(StageBackend::Local { .. })
        ));

        // SQL: writes go to metadata, reads to query.
        lake.execute("CREATE SCHEMA sales").await.unwrap();
        lake.execute("CREATE TABLE sales.orders (id BIGINT, item VARCHAR, price DOUBLE)")
            .await
            .unwrap();
        assert_eq!(
            lake.execute("INSERT INTO sales.orders VALUES (1, 'tea', 2.5), (2, 'cake', 4.0)")
                .await
                .unwrap(),
            2
        );
        let batches = rows(&lake, "SELECT item FROM sales.orders ORDER BY id").await;
        let items = batches[0]
            .column(0)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!((items.value(0), items.value(1)), ("tea", "cake"));

        // The stage: whole and ranged reads, straight from the stage directory.
        let data: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        lake.stage()
            .put("blobs/data.bin", Bytes::from(data.clone()))
            .await
            .unwrap();
        assert!(server.dir.path().join("_stage/blobs/data.bin").exists());
        assert_eq!(lake.stage().get("blobs/data.bin").await.unwrap(), data);
        for range in [0..1u64, 500..501, 999..1000, 10..990] {
            let got = lake
                .stage()
                .get_range("blobs/data.bin", range.clone())
                .await
                .unwrap();
            assert_eq!(
                got,
                data[range.start as usize..range.end as usize],
                "{range:?}"
            );
        }
        for past in [995..1005u64, 1000..1001] {
            let err = lake
                .stage()
                .get_range("blobs/data.bin", past)
                .await
                .unwrap_err();
            assert!(
                matches!(err, ClientError::RangePastEnd { size: 1000, .. }),
                "{err}"
            );
            assert!(
                err.to_string().contains("past its end (1000 bytes)"),
                "{err}"
            );
        }
        assert_eq!(
            lake.stage().head("blobs/data.bin").await.unwrap().size,
            1000
        );
        let listed = lake.stage().list("blobs/").await.unwrap();
        assert_eq!(listed.len(), 1);

        // Traversal is refused before any I/O, and nothing appears outside the stage.
        let before = std::fs::read_dir(server.dir.path()).unwrap().count();
        for bad in ["../escape.bin", "/tmp/escape.bin", "blobs/../../escape.bin"] {
            let err = lake
                .stage()
                .put(bad, Bytes::from_static(b"x"))
                .await
                .unwrap_err();
            assert!(matches!(err, ClientError::Path(_)), "{bad}: {err}");
            assert!(matches!(
                lake.stage().get(bad).await,
                Err(ClientError::Path(_))
            ));
        }
        assert_eq!(
            std::fs::read_dir(server.dir.path()).unwrap().count(),
            before
        );
        assert!(!server.dir.path().join("escape.bin").exists());

        // COPY INTO from the stage: CSV, Parquet and Arrow IPC, a folder in one commit.
        lake.stage()
            .put(
                "in/a.csv",
                Bytes::from_static(b"id,item,price\n3,jam,1.5\n4,pie,6.0\n"),
            )
            .await
            .unwrap();
        lake.stage()
            .put("in/b.parquet", parquet_file())
            .await
            .unwrap();
        lake.stage().put("in/c.arrow", ipc_file()).await.unwrap();
        let loaded = lake
            .execute("COPY INTO sales.orders FROM 'in/'")
            .await
            .unwrap();
        assert_eq!(loaded, 2 + 3 + 1);
        assert_eq!(count(&lake, "sales.orders").await, 8);
        // v1 create, v2 insert, v3 the whole folder: one commit.
        assert_eq!(count(&lake, "sales.\"orders@v3\"").await, 8);
        let err = lake
            .query("SELECT * FROM sales.\"orders@v4\"")
            .await
            .err()
            .expect("no version 4");
        assert_eq!(server_code(&err), tonic::Code::NotFound, "{err}");

        // A bad file commits nothing; the error names the column.
        lake.stage()
            .put("bad/x.csv", Bytes::from_static(b"id,item\n5,x\n"))
            .await
            .unwrap();
        let err = lake
            .execute("COPY INTO sales.orders FROM 'bad/x.csv'")
            .await
            .unwrap_err();
        assert_eq!(server_code(&err), tonic::Code::InvalidArgument, "{err}");
        assert!(err.to_string().contains("CSV header"), "{err}");
        lake.stage()
            .put("bad/y.arrow", wrong_type_ipc())
            .await
            .unwrap();
        let err = lake
            .execute("COPY INTO sales.orders FROM 'bad/y.arrow'")
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("column \"price\" is Utf8"),
            "{err}"
        );
        let err = lake
            .execute("COPY INTO sales.orders FROM 'nothing/here.csv'")
            .await
            .unwrap_err();
        assert_eq!(server_code(&err), tonic::Code::NotFound, "{err}");
        assert_eq!(
            count(&lake, "sales.orders").await,
            8,
            "nothing was committed"
        );

        // Bulk ingest through the SDK.
        let ingested = lake
            .ingest(
                "sales",
                "more",
                IngestMode::Create,
                vec![orders_batch(10..13)],
            )
            .await
            .unwrap();
        assert_eq!(ingested, 3);
        assert_eq!(count(&lake, "sales.more").await, 3);

        lake.stage().delete("blobs/data.bin").await.unwrap();
        assert!(matches!(
            lake.stage().get("blobs/data.bin").await,
            Err(ClientError::NotFound(_))
        ));
    });
}

fn orders_batch(ids: std::ops::Range<i64>) -> RecordBatch {
    let n = ids.end - ids.start;
    RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("item", DataType::Utf8, true),
            Field::new("price", DataType::Float64, true),
        ])),
        vec![
            Arc::new(Int64Array::from_iter_values(ids)),
            Arc::new(StringArray::from_iter_values(
                (0..n).map(|i| format!("item{i}")),
            )),
            Arc::new(Float64Array::from_iter_values((0..n).map(|i| i as f64))),
        ],
    )
    .unwrap()
}

fn parquet_file() -> Bytes {
    let batch = orders_batch(20..23);
    let mut out = Vec::new();
    let mut writer = parquet::arrow::ArrowWriter::try_new(&mut out, batch.schema(), None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    Bytes::from(out)
}

fn ipc_file() -> Bytes {
    let batch = orders_batch(30..31);
    let mut out = Vec::new();
    let mut writer = arrow::ipc::writer::FileWriter::try_new(&mut out, &batch.schema()).unwrap();
    writer.write(&batch).unwrap();
    writer.finish().unwrap();
    drop(writer);
    Bytes::from(out)
}

fn wrong_type_ipc() -> Bytes {
    let batch = RecordBatch::try_from_iter(vec![
        ("id", Arc::new(Int64Array::from(vec![1])) as _),
        ("item", Arc::new(StringArray::from(vec!["x"])) as _),
        ("price", Arc::new(StringArray::from(vec!["cheap"])) as _),
    ])
    .unwrap();
    let mut out = Vec::new();
    let mut writer = arrow::ipc::writer::StreamWriter::try_new(&mut out, &batch.schema()).unwrap();
    writer.write(&batch).unwrap();
    writer.finish().unwrap();
    drop(writer);
    Bytes::from(out)
}

/// `lake <args>` with only `access_key` as AWS identity; (success, stdout, stderr).
fn lake_cli(access_key: &str, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_lake"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("AWS_ACCESS_KEY_ID", access_key)
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn sdk_discovers_s3_stage_and_streams_directly() {
    let lake = rt().block_on(CloudLake::new());
    let moto = moto();
    let query_key = unique("QUERYKEY").to_uppercase();
    let metadata_key = unique("METAKEY").to_uppercase();
    let sdk_key = unique("SDKKEY").to_uppercase();
    let dir = tempfile::tempdir().unwrap();
    // 20 MiB: three multipart parts.
    let big: Vec<u8> = (0..20 * 1024 * 1024u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(dir.path().join("big.bin"), &big).unwrap();
    std::fs::write(
        dir.path().join("orders.csv"),
        "id,name\n1,tea\n2,cake\n3,jam\n",
    )
    .unwrap();
    let file = |name: &str| dir.path().join(name).display().to_string();

    let recording = moto.start_recording();
    let metadata = Served::start(&lake, Role::Metadata, &metadata_key, None);
    let query = Served::start(&lake, Role::Query, &query_key, Some(&metadata.endpoint));
    let endpoint = ["--endpoint", query.endpoint.as_str()];
    let stage = |args: &[&str]| {
        let mut all = vec!["stage"];
        all.extend_from_slice(&endpoint);
        all.extend_from_slice(args);
        lake_cli(&sdk_key, &all)
    };
    let put = stage(&["put", &file("big.bin"), "uploads/big.bin"]);
    let put_csv = stage(&["put", &file("orders.csv"), "in/orders.csv"]);
    let get = stage(&["get", "uploads/big.bin", "--output", &file("back.bin")]);
    let ls = stage(&["ls", "uploads/"]);
    let escape = stage(&["put", &file("orders.csv"), "../escape.csv"]);
    let sql = |s: &str| lake_cli(&sdk_key, &["sql", &metadata.endpoint, s]);
    let ddl = [
        sql("CREATE SCHEMA sales"),
        sql("CREATE TABLE sales.orders (id BIGINT, name VARCHAR)"),
        sql("COPY INTO sales.orders FROM 'in/orders.csv'"),
    ];
    let read = lake_cli(
        &sdk_key,
        &[
            "sql",
            &query.endpoint,
            "SELECT sum(id) AS s FROM sales.orders",
            "--format",
            "csv",
        ],
    );
    let rm = stage(&["rm", "uploads/big.bin"]);
    drop(query);
    drop(metadata);
    let log = recording.stop();

    assert!(put.0, "put failed: {put:?}");
    assert!(put.1.contains(&format!("({} bytes)", big.len())), "{put:?}");
    assert!(put_csv.0, "{put_csv:?}");
    assert!(get.0, "get failed: {get:?}");
    assert_eq!(std::fs::read(file("back.bin")).unwrap(), big);
    assert!(
        ls.0 && ls.1.contains("uploads/big.bin") && ls.1.contains(&big.len().to_string()),
        "{ls:?}"
    );
    assert!(
        !escape.0 && escape.2.contains("would leave the stage"),
        "{escape:?}"
    );
    for (ok, out, err) in &ddl {
        assert!(ok, "{out}\n{err}");
    }
    assert!(read.0 && read.1.trim().ends_with('6'), "{read:?}");
    assert!(rm.0, "{rm:?}");

    // The stage object's bytes went between the SDK and the emulator only.
    let stage_key = "wh/_stage/uploads/big.bin";
    let sdk = requests_of(&log, &sdk_key);
    let sdk_put_bytes: usize = log
        .iter()
        .filter(|e| {
            e["method"] == "PUT"
                && e["url"].as_str().is_some_and(|u| u.contains(stage_key))
                && e["headers"]
                    .to_string()
                    .contains(&format!("Credential={sdk_key}/"))
        })
        .map(|e| {
            e["headers"]
                .as_object()
                .and_then(|h| {
                    h.iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                })
                .and_then(|(_, v)| v.as_str()?.parse::<usize>().ok())
                .unwrap_or(0)
        })
        .sum();
    assert_eq!(
        sdk_put_bytes,
        big.len(),
        "the SDK uploaded the file in parts itself"
    );
    assert!(
        sdk.iter()
            .any(|(s, m, u)| s == "s3" && m == "GET" && u.contains(stage_key)),
        "the SDK downloaded it itself: {sdk:?}"
    );
    for key in [&query_key, &metadata_key] {
        let touched: Vec<_> = requests_of(&log, key)
            .into_iter()
            .filter(|(_, _, u)| u.contains("uploads"))
            .collect();
        assert!(
            touched.is_empty(),
            "a server touched the uploaded object: {touched:?}"
        );
    }
    // COPY INTO read the CSV with the metadata role's identity.
    assert!(
        requests_of(&log, &metadata_key)
            .iter()
            .any(|(s, m, u)| s == "s3" && m == "GET" && u.contains("_stage/in/orders.csv")),
        "metadata did not read the staged CSV"
    );
}

/// A LakeCluster's two roles have two tokens (two Secrets): the SDK sends the query token to
/// query only and the metadata token to metadata only, so reads and writes both work with
/// per-role tokens; a client given no metadata token cannot write. Over TLS, a metadata
/// endpoint or a stage the server advertises in plaintext is refused before anything is sent
/// there.
#[test]
fn sdk_uses_a_token_per_role() {
    const READ: &str = "read-t0ken";
    const WRITE: &str = "wr1te-t0ken";
    let secrets = tempfile::tempdir().unwrap();
    let file = |name: &str, token: &str| {
        let path = secrets.path().join(name);
        std::fs::write(&path, format!("{token}\n")).unwrap();
        path.display().to_string()
    };
    let (query_tokens, metadata_tokens) = (file("query", READ), file("metadata", WRITE));
    let lake = LocalLake::start_with(&[
        "--query-token-file",
        &query_tokens,
        "--metadata-token-file",
        &metadata_tokens,
    ]);
    let options = |query: Option<&str>, metadata: Option<&str>| ConnectOptions {
        query_token: query.map(str::to_owned),
        metadata_token: metadata.map(str::to_owned),
        tls_ca: None,
    };
    rt().block_on(async {
        let both = LakeClient::connect_with(&lake.query, options(Some(READ), Some(WRITE)))
            .await
            .unwrap();
        both.execute("CREATE SCHEMA roles").await.unwrap();
        both.execute("CREATE TABLE roles.t (id BIGINT)")
            .await
            .unwrap();
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, true)]));
        let batch =
            RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![1, 2, 3]))]).unwrap();
        assert_eq!(
            both.ingest("roles", "t", IngestMode::Append, vec![batch])
                .await
                .unwrap(),
            3
        );
        assert_eq!(count(&both, "roles.t").await, 3);

        let reader = LakeClient::connect_with(&lake.query, options(Some(READ), None))
            .await
            .unwrap();
        assert_eq!(count(&reader, "roles.t").await, 3);
        let refused = reader.execute("DROP TABLE roles.t").await.unwrap_err();
        assert_eq!(
            server_code(&refused),
            tonic::Code::Unauthenticated,
            "{refused}"
        );
        // The write token is no read token.
        assert!(
            LakeClient::connect_with(&lake.query, options(Some(WRITE), Some(WRITE)))
                .await
                .is_err()
        );
        assert_eq!(count(&both, "roles.t").await, 3);
    });

    // `lake stage` takes both tokens, from flags or the environment.
    let out = Command::new(env!("CARGO_BIN_EXE_lake"))
        .args(["stage", "--endpoint", &lake.query, "ls", ""])
        .env("LAKE_QUERY_TOKEN", READ)
        .env("LAKE_METADATA_TOKEN", WRITE)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // TLS: a query endpoint advertising plaintext for writes, then for the stage.
    let certs = tempfile::tempdir().unwrap();
    test_certificates(certs.path());
    let pem = |name: &str| certs.path().join(name).display().to_string();
    let (cert, key) = (pem("server.pem"), pem("server.key"));
    let tls = [
        ("LAKE_TLS_CERT_FILE", cert.as_str()),
        ("LAKE_TLS_KEY_FILE", key.as_str()),
    ];
    let cloud = rt().block_on(CloudLake::new());
    let ca = std::fs::read(pem("ca.pem")).unwrap();
    for (advertised, what) in [
        ("grpc://127.0.0.1:9", "metadata endpoint"),
        // moto's S3 is plain http.
        ("grpc+tls://127.0.0.1:9", "stage"),
    ] {
        let served =
            Served::start_with(&cloud, Role::Query, &unique("key"), Some(advertised), &tls);
        assert!(
            served.endpoint.starts_with("grpc+tls://"),
            "{}",
            served.endpoint
        );
        let refused = rt().block_on(LakeClient::connect_with(
            &served.endpoint,
            ConnectOptions {
                tls_ca: Some(ca.clone()),
                ..Default::default()
            },
        ));
        match refused {
            Err(ClientError::Downgrade { what: w, .. }) => assert_eq!(w, what),
            Err(other) => panic!("{advertised}: {other}"),
            Ok(_) => panic!("{advertised}: a TLS client accepted a plaintext {what}"),
        }
    }
}
