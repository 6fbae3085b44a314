//! The query role's DynamoDB footprint: it touches the manifest table only, and only with read
//! actions; recorded by an SDK interceptor in-process, and at the emulator for `lake serve`.

use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::interceptors::BeforeSerializationInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, SharedInterceptor};
use aws_sdk_dynamodb::error::BoxError;
use aws_sdk_dynamodb::operation::{
    batch_write_item::BatchWriteItemInput, create_table::CreateTableInput,
    delete_item::DeleteItemInput, describe_table::DescribeTableInput, get_item::GetItemInput,
    put_item::PutItemInput, query::QueryInput, scan::ScanInput, update_item::UpdateItemInput,
    update_table::UpdateTableInput,
};
use lake_common::plan::Role;
use lake_runtime::aws::ConnectOptions;
use lake_runtime::context::{MetadataContext, QueryContext};

use crate::support::{CloudLake, Served, credentials, requests_of, seed, table};

/// Records (action, table) of every DynamoDB call.
#[derive(Debug, Default, Clone)]
struct Recorder(Arc<Mutex<Vec<(String, String)>>>);

impl Recorder {
    fn calls(&self) -> Vec<(String, String)> {
        self.0.lock().unwrap().clone()
    }
}

impl Intercept for Recorder {
    fn name(&self) -> &'static str {
        "lake-test-recorder"
    }

    fn read_before_execution(
        &self,
        context: &BeforeSerializationInterceptorContextRef<'_>,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let input = context.input();
        macro_rules! classify {
            ($($ty:ty => $name:literal, |$i:ident| $table:expr;)*) => {
                $(if let Some($i) = input.downcast_ref::<$ty>() {
                    (String::from($name), $table)
                } else)* {
                    ("unknown".to_owned(), String::new())
                }
            };
        }
        let call = classify! {
            GetItemInput => "GetItem", |i| i.table_name().unwrap_or_default().to_owned();
            QueryInput => "Query", |i| i.table_name().unwrap_or_default().to_owned();
            ScanInput => "Scan", |i| i.table_name().unwrap_or_default().to_owned();
            DescribeTableInput => "DescribeTable", |i| i.table_name().unwrap_or_default().to_owned();
            PutItemInput => "PutItem", |i| i.table_name().unwrap_or_default().to_owned();
            UpdateItemInput => "UpdateItem", |i| i.table_name().unwrap_or_default().to_owned();
            DeleteItemInput => "DeleteItem", |i| i.table_name().unwrap_or_default().to_owned();
            BatchWriteItemInput => "BatchWriteItem", |i| format!("{:?}", i.request_items().map(|m| m.keys().collect::<Vec<_>>()));
            CreateTableInput => "CreateTable", |i| i.table_name().unwrap_or_default().to_owned();
            UpdateTableInput => "UpdateTable", |i| i.table_name().unwrap_or_default().to_owned();
        };
        self.0.lock().unwrap().push(call);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn cloud_query_reads_only_the_manifest_table() {
    let lake = CloudLake::new().await;
    let metadata = lake.metadata().await;
    let t = table("sales", "orders");
    seed(&metadata, &t, &[0..10, 10..20]).await;

    let recorder = Recorder::default();
    let recording = ConnectOptions {
        credentials: Some(credentials()),
        dynamodb_interceptors: vec![SharedInterceptor::new(recorder.clone())],
    };
    let query = QueryContext::open(&lake.plan.query(), Some(&lake.cluster), &recording)
        .await
        .unwrap();
    query.engine().list_tables().await.unwrap();
    query.engine().open(&t, None).await.unwrap();
    query.engine().open(&t, Some(1)).await.unwrap();
    query.engine().versions(&t).await.unwrap();

    let calls = recorder.calls();
    assert!(!calls.is_empty(), "the recorder saw nothing");
    for (action, table) in &calls {
        assert!(
            matches!(action.as_str(), "GetItem" | "Query"),
            "query made a {action} call: {calls:?}"
        );
        assert_eq!(
            table,
            &lake.manifest_table(),
            "query touched another table: {calls:?}"
        );
    }
    // And the metadata side, recorded the same way, does use the registry: the recorder works.
    let recorder = Recorder::default();
    let recording = ConnectOptions {
        credentials: Some(credentials()),
        dynamodb_interceptors: vec![SharedInterceptor::new(recorder.clone())],
    };
    MetadataContext::open(&lake.plan.metadata(), Some(&lake.cluster), &recording)
        .await
        .unwrap();
    assert!(
        recorder
            .calls()
            .iter()
            .any(|(_, t)| t == &lake.registry_table())
    );
}

#[test]
fn served_query_process_reads_only_the_manifest_table() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let lake = runtime.block_on(CloudLake::new());
    let moto = lake_testkit::moto();
    let query_key = lake_testkit::unique("QUERYKEY").to_uppercase();
    let metadata_key = lake_testkit::unique("METAKEY").to_uppercase();

    let recording = moto.start_recording();
    let metadata = Served::start(&lake, Role::Metadata, &metadata_key, None);
    let query = Served::start(&lake, Role::Query, &query_key, Some(&metadata.endpoint));
    let script = r#"
import sys
import adbc_driver_flightsql.dbapi as flightsql
query, metadata = sys.argv[1], sys.argv[2]
with flightsql.connect(metadata) as conn, conn.cursor() as cur:
    cur.execute("CREATE SCHEMA sales")
    cur.execute("CREATE TABLE sales.orders (id BIGINT, item VARCHAR)")
    cur.execute("INSERT INTO sales.orders VALUES (1, 'tea'), (2, 'cake')")
    cur.execute("INSERT INTO sales.orders VALUES (3, 'jam')")
    conn.commit()
with flightsql.connect(query) as conn, conn.cursor() as cur:
    cur.execute("SELECT id FROM sales.orders ORDER BY id")
    assert [r[0] for r in cur.fetchall()] == [1, 2, 3]
    cur.execute('SELECT count(*) FROM sales."orders@v2"')
    assert cur.fetchall()[0][0] == 2
    objects = conn.adbc_get_objects(depth="all").read_all().to_pylist()
    assert objects[0]["catalog_db_schemas"][0]["db_schema_tables"][0]["table_name"] == "orders"
    try:
        cur.execute("INSERT INTO sales.orders VALUES (4, 'x')")
        raise SystemExit("query accepted a write")
    except flightsql.ProgrammingError as e:
        assert "metadata endpoint" in str(e), e
print("ok")
"#;
    let (ok, stdout, stderr) =
        lake_testkit::python(&["-c", script, &query.endpoint, &metadata.endpoint]);
    drop(query);
    drop(metadata);
    let log = recording.stop();
    assert!(ok, "client failed:\n{stdout}\n{stderr}");

    let query_calls = requests_of(&log, &query_key);
    let dynamo: Vec<_> = query_calls.iter().filter(|c| c.0 == "dynamodb").collect();
    assert!(
        !dynamo.is_empty(),
        "no DynamoDB request of the query process was recorded: {query_calls:?}"
    );
    for (_, action, table) in &dynamo {
        assert!(
            matches!(action.as_str(), "GetItem" | "Query"),
            "query made a {action} call: {dynamo:?}"
        );
        assert_eq!(table, &lake.manifest_table(), "query touched {table}");
    }
    for (service, method, path) in query_calls.iter().filter(|c| c.0 == "s3") {
        assert!(
            matches!(method.as_str(), "GET" | "HEAD"),
            "query wrote to {service}: {method} {path}"
        );
    }
    // The recording works: the metadata process's writes went through the same log.
    let metadata_calls = requests_of(&log, &metadata_key);
    assert!(
        metadata_calls
            .iter()
            .any(|(_, action, table)| action == "PutItem" && table == &lake.registry_table()),
        "no registry write of the metadata process was recorded: {metadata_calls:?}"
    );
}
