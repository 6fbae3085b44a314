//! Hostile and careless clients against a real `lake local`: nothing written outside the rules,
//! the server never taken down, nothing half-done left behind. The SQL-level cases run as a
//! Python peer (real ADBC and raw pyarrow.flight, `hostile_suite.py`); what needs raw bytes or
//! process control is here.

use crate::support::LocalLake;
use arrow::array::{Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::sql::{CommandStatementIngest, ProstMessageExt};
use arrow_flight::{FlightData, FlightDescriptor};
use lake_testkit::python;
use prost::Message;
use std::process::Command;
use std::time::{Duration, Instant};

mod budgets;
mod do_get;
mod limits;

use limits::IMPATIENT;

/// `lake sql`, the statement on its command line or, when long, on its standard input.
fn lake_sql(endpoint: &str, sql: &str) -> (bool, String, String) {
    let long = sql.len() > 64 * 1024;
    let mut child = Command::new(env!("CARGO_BIN_EXE_lake"))
        .args([
            "sql",
            endpoint,
            if long { "-" } else { sql },
            "--format",
            "csv",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let text = if long { sql.to_owned() } else { String::new() };
    let writer = std::thread::spawn(move || std::io::Write::write_all(&mut stdin, text.as_bytes()));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn sql_ok(endpoint: &str, sql: &str) -> String {
    let (ok, stdout, stderr) = lake_sql(endpoint, sql);
    assert!(ok, "{sql}: {stderr}");
    stdout
}

#[test]
fn hostile_clients_sql_handles_and_paths() {
    let lake = LocalLake::start();
    let outside = tempfile::tempdir().unwrap();
    let data = lake.dir.path().canonicalize().unwrap();
    let (ok, stdout, stderr) = python(&[
        "runtime/tests/it/hostile_suite.py",
        &lake.query,
        &lake.metadata,
        data.to_str().unwrap(),
        outside.path().to_str().unwrap(),
    ]);
    assert!(ok, "hostile suite failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
    assert!(
        std::fs::read_dir(outside.path()).unwrap().next().is_none(),
        "a file appeared outside the lake"
    );
}

/// A compressed Arrow IPC body whose first buffer declares `declared` uncompressed bytes.
fn forged_ingest(declared: i64) -> Vec<FlightData> {
    let schema = std::sync::Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, false)]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![std::sync::Arc::new(Int64Array::from_iter_values(0..1024))],
    )
    .unwrap();
    let options = arrow::ipc::writer::IpcWriteOptions::default()
        .try_with_compression(Some(arrow::ipc::CompressionType::LZ4_FRAME))
        .unwrap();
    let (_, encoded) = arrow::ipc::writer::IpcDataGenerator::default()
        .encode(
            &batch,
            &mut arrow::ipc::writer::DictionaryTracker::new(false),
            &options,
            &mut Default::default(),
        )
        .unwrap();
    let mut data: FlightData = encoded.into();
    // The first buffer holding data starts with its declared uncompressed length.
    let message = arrow::ipc::root_as_message(&data.data_header).unwrap();
    let buffers = message.header_as_record_batch().unwrap().buffers().unwrap();
    let first = buffers.iter().find(|b| b.length() >= 8).unwrap();
    let at = first.offset() as usize;
    let mut body = data.data_body.to_vec();
    body[at..at + 8].copy_from_slice(&declared.to_le_bytes());
    data.data_body = body.into();
    let command = CommandStatementIngest {
        table: "t".into(),
        schema: Some("sales".into()),
        table_definition_options: None,
        ..Default::default()
    };
    let descriptor = FlightDescriptor::new_cmd(command.as_any().encode_to_vec());
    let schema_data: FlightData = arrow_flight::SchemaAsIpc::new(&schema, &options).into();
    vec![schema_data.with_descriptor(descriptor), data]
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_clients_compressed_ipc_cannot_exhaust_memory() {
    let lake = LocalLake::start();
    sql_ok(&lake.metadata, "CREATE SCHEMA sales");
    let channel =
        tonic::transport::Endpoint::from_shared(lake.metadata.replace("grpc://", "http://"))
            .unwrap()
            .connect()
            .await
            .unwrap();
    let mut client = FlightServiceClient::new(channel);
    // 2^45 bytes: arrow would try to allocate it before decompressing and abort the process.
    let refused = client
        .do_put(futures::stream::iter(forged_ingest(1 << 45)))
        .await;
    let status = match refused {
        Err(status) => status,
        Ok(response) => {
            let mut stream = response.into_inner();
            loop {
                match stream.message().await {
                    Err(status) => break status,
                    Ok(Some(_)) => continue,
                    Ok(None) => panic!("the forged ingest was accepted"),
                }
            }
        }
    };
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status}");
    assert!(status.message().contains("decompressed"), "{status}");
    // The server is up, and nothing was created.
    assert_eq!(sql_ok(&lake.query, "SELECT 1 AS one"), "one\n1\n");
    let (ok, _, stderr) = lake_sql(&lake.query, "SELECT * FROM sales.t");
    assert!(!ok && stderr.contains("not found"), "{stderr}");
}

#[test]
fn hostile_clients_an_unreadable_table_hides_nothing_else() {
    let lake = LocalLake::start();
    sql_ok(&lake.metadata, "CREATE SCHEMA sales");
    sql_ok(&lake.metadata, "CREATE TABLE sales.good (id BIGINT)");
    sql_ok(&lake.metadata, "CREATE TABLE sales.bad (id BIGINT)");
    sql_ok(&lake.metadata, "INSERT INTO sales.good VALUES (1)");
    // Corrupt every manifest of one table (a disk fault, a bad copy).
    let versions = lake.dir.path().join("sales/bad.lance/_versions");
    for entry in std::fs::read_dir(&versions).unwrap() {
        std::fs::write(entry.unwrap().path(), b"not a lance manifest").unwrap();
    }
    let columns = sql_ok(
        &lake.query,
        "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'sales'",
    );
    assert!(columns.contains("good,id"), "{columns}");
    let (ok, stdout, stderr) = python(&["-c", GET_TABLES, &lake.query]);
    assert!(ok, "{stdout}{stderr}");
    assert!(
        stdout.contains("good 1") && stdout.contains("bad 0"),
        "{stdout}"
    );
    let (ok, _, stderr) = lake_sql(&lake.query, "SELECT * FROM sales.bad");
    assert!(!ok && stderr.contains("sales.bad"), "{stderr}");
    let data = lake.dir.path().canonicalize().unwrap();
    assert!(
        !stderr.contains(data.to_str().unwrap()),
        "the data directory reached the client: {stderr}"
    );
    // EXPLAIN names Lance's scan by its object-store path: the directory without its slash.
    let plan = sql_ok(&lake.query, "EXPLAIN SELECT * FROM sales.good");
    let bare = data.to_str().unwrap().trim_start_matches('/');
    assert!(
        !plan.contains(bare) && plan.contains("<data>/sales/good.lance"),
        "the data directory reached the client: {plan}"
    );
    assert_eq!(sql_ok(&lake.query, "SELECT id FROM sales.good"), "id\n1\n");
}

/// GetTables with schemas (what ADBC's get_objects and JDBC's getColumns read): `name ncols`.
const GET_TABLES: &str = r#"
import sys, adbc_driver_flightsql.dbapi as flightsql
with flightsql.connect(sys.argv[1], autocommit=True) as conn:
    objects = conn.adbc_get_objects(depth="all", db_schema_filter="sales").read_all().to_pylist()
    for catalog in objects:
        for schema in catalog["catalog_db_schemas"] or []:
            for table in schema["db_schema_tables"] or []:
                print(table["table_name"], len(table["table_columns"] or []))
"#;

#[test]
fn hostile_clients_a_write_finishes_when_the_client_gives_up() {
    let lake = LocalLake::start();
    sql_ok(&lake.metadata, "CREATE SCHEMA sales");
    for i in 0..30 {
        sql_ok(
            &lake.metadata,
            &format!("CREATE TABLE sales.t{i} AS SELECT CAST({i} AS BIGINT) AS id"),
        );
    }
    // Each client's deadline expires long before its CREATE TABLE … AS has written its rows,
    // some while it is still being planned.
    let (ok, stdout, stderr) = python(&["-c", IMPATIENT, &lake.metadata]);
    assert!(ok, "{stdout}{stderr}");
    assert_eq!(stdout.matches("gave up").count(), 6, "{stdout}");
    // Every write ran to completion anyway: registered, and every row there. (Generous: a
    // loaded 2-core machine is slow.)
    for k in 0..6 {
        let deadline = Instant::now() + Duration::from_secs(240);
        let count = format!("SELECT count(*) AS n FROM sales.big{k}");
        loop {
            let (ok, stdout, stderr) = lake_sql(&lake.query, &count);
            if ok {
                assert_eq!(stdout, "n\n200030\n", "sales.big{k}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "sales.big{k} never appeared: {stderr}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let registered = sql_ok(
        &lake.metadata,
        "SELECT count(*) AS n FROM information_schema.tables WHERE table_name LIKE 'big%'",
    );
    assert_eq!(registered, "n\n6\n");
}

/// An Arrow IPC stream whose record batch's first compressed buffer declares `declared`
/// uncompressed bytes (a stage file for COPY INTO).
fn forged_ipc_stream(declared: i64) -> Vec<u8> {
    use arrow::ipc::writer::{DictionaryTracker, IpcDataGenerator, IpcWriteOptions, write_message};
    let schema = std::sync::Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![std::sync::Arc::new(Int64Array::from_iter_values(0..1024))],
    )
    .unwrap();
    let options = IpcWriteOptions::default()
        .try_with_compression(Some(arrow::ipc::CompressionType::LZ4_FRAME))
        .unwrap();
    let generator = IpcDataGenerator::default();
    let mut tracker = DictionaryTracker::new(false);
    let mut out = Vec::new();
    let schema_message =
        generator.schema_to_bytes_with_dictionary_tracker(&schema, &mut tracker, &options);
    write_message(&mut out, schema_message, &options).unwrap();
    let (_, mut encoded) = generator
        .encode(&batch, &mut tracker, &options, &mut Default::default())
        .unwrap();
    let message = arrow::ipc::root_as_message(&encoded.ipc_message).unwrap();
    let buffers = message.header_as_record_batch().unwrap().buffers().unwrap();
    let at = buffers.iter().find(|b| b.length() >= 8).unwrap().offset() as usize;
    encoded.arrow_data[at..at + 8].copy_from_slice(&declared.to_le_bytes());
    write_message(&mut out, encoded, &options).unwrap();
    out.extend_from_slice(&[0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0]);
    out
}

#[test]
fn hostile_clients_a_forged_stage_file_cannot_exhaust_memory() {
    let lake = LocalLake::start();
    sql_ok(&lake.metadata, "CREATE SCHEMA sales");
    sql_ok(&lake.metadata, "CREATE TABLE sales.t (id BIGINT)");
    let stage = lake.dir.path().join("_stage/in");
    std::fs::create_dir_all(&stage).unwrap();
    std::fs::write(stage.join("evil.arrows"), forged_ipc_stream(1 << 45)).unwrap();
    std::fs::write(stage.join("fine.arrows"), forged_ipc_stream(8192)).unwrap();
    let (ok, _, stderr) = lake_sql(&lake.metadata, "COPY INTO sales.t FROM 'in/evil.arrows'");
    assert!(!ok && stderr.contains("decompressed"), "{stderr}");
    // The server is up and nothing was loaded.
    assert_eq!(
        sql_ok(&lake.query, "SELECT count(*) AS n FROM sales.t"),
        "n\n0\n"
    );
}

fn peak_rss_mb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap()
        / 1024
}

/// A Parquet "bomb": 40M zeros in one zstd page, 320 MB once uncompressed, a few hundred KB on
/// disk. The decoder would allocate and fill the whole page; it is refused from its header.
#[test]
fn hostile_clients_a_parquet_bomb_is_refused_before_decoding() {
    use parquet::basic::{Compression, ZstdLevel};
    use parquet::file::properties::WriterProperties;
    let lake = LocalLake::start();
    sql_ok(&lake.metadata, "CREATE SCHEMA sales");
    sql_ok(&lake.metadata, "CREATE TABLE sales.t (id BIGINT)");
    let stage = lake.dir.path().join("_stage/in");
    std::fs::create_dir_all(&stage).unwrap();
    let schema = std::sync::Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_dictionary_enabled(false)
        .set_data_page_size_limit(usize::MAX)
        .set_data_page_row_count_limit(usize::MAX)
        .set_write_batch_size(1 << 20)
        .set_max_row_group_row_count(None)
        .build();
    let file = std::fs::File::create(stage.join("bomb.parquet")).unwrap();
    let mut writer =
        parquet::arrow::ArrowWriter::try_new(file, schema.clone(), Some(props)).unwrap();
    let zeros = RecordBatch::try_new(
        schema,
        vec![std::sync::Arc::new(Int64Array::from(vec![0; 40_000_000]))],
    )
    .unwrap();
    writer.write(&zeros).unwrap();
    writer.close().unwrap();
    drop(zeros);
    let size = std::fs::metadata(stage.join("bomb.parquet")).unwrap().len();
    assert!(size < 4 << 20, "the bomb is {size} bytes");

    let before = peak_rss_mb(lake.child.id());
    let (ok, _, stderr) = lake_sql(&lake.metadata, "COPY INTO sales.t FROM 'in/bomb.parquet'");
    let grew = peak_rss_mb(lake.child.id()) - before;
    assert!(!ok, "the bomb was loaded");
    assert!(
        stderr.contains("a page of 320000000 bytes once uncompressed, above the 268435456 allowed"),
        "{stderr}"
    );
    assert!(grew < 100, "the server's peak RSS grew by {grew} MB");
    assert_eq!(
        sql_ok(&lake.query, "SELECT count(*) AS n FROM sales.t"),
        "n\n0\n"
    );
}
