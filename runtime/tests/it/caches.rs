//! What the query path caches (one Lance session per engine, tables resolved without listing the
//! warehouse) never serves a stale table: each case runs after the query process has read the
//! table, so whatever it cached is there to be wrongly reused.

use std::sync::Arc;

use arrow::array::{Array, Int64Array, StringArray};
use arrow::record_batch::RecordBatch;
use futures::TryStreamExt;
use lake_client::{ClientError, LakeClient};
use lake_common::plan::Role;
use lake_testkit::python;

use crate::support::{CloudLake, LocalLake, Served, table};

async fn client(query: &str, metadata: &str) -> LakeClient {
    // An in-memory stage: these tests never use the stage, and discovery would need credentials.
    let stage = Arc::new(object_store::memory::InMemory::new());
    let client = LakeClient::with_stage(query, stage, Default::default())
        .await
        .unwrap();
    assert_eq!(client.metadata_endpoint(), Some(metadata));
    client
}

async fn rows(client: &LakeClient, sql: &str) -> Result<Vec<RecordBatch>, ClientError> {
    client.query(sql).await?.try_collect().await
}

/// The `column` of every row of `sql`'s answer, as text.
async fn column(client: &LakeClient, sql: &str, column: &str) -> Vec<String> {
    let batches = rows(client, sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let mut out = Vec::new();
    for batch in &batches {
        let values = batch
            .column_by_name(column)
            .unwrap_or_else(|| panic!("{sql}: no column {column} in {:?}", batch.schema()));
        if let Some(ints) = values.as_any().downcast_ref::<Int64Array>() {
            out.extend(ints.iter().map(|v| format!("{v:?}")));
        } else if let Some(strings) = values.as_any().downcast_ref::<StringArray>() {
            out.extend(strings.iter().map(|v| v.unwrap_or("NULL").to_owned()));
        } else {
            panic!("{sql}: column {column} is {:?}", values.data_type());
        }
    }
    out
}

fn some(values: &[i64]) -> Vec<String> {
    values.iter().map(|v| format!("{:?}", Some(*v))).collect()
}

/// The cases, against a query endpoint whose process is not the writer's.
async fn never_stale(client: &LakeClient, pylance_append: Option<&dyn Fn()>) {
    client.execute("CREATE SCHEMA cache").await.unwrap();
    client
        .execute("CREATE TABLE cache.t AS SELECT 1 AS id")
        .await
        .unwrap();
    let ids = "SELECT id FROM cache.t ORDER BY id";
    assert_eq!(column(client, ids, "id").await, some(&[1]));

    // A write on metadata is seen by the next query.
    client
        .execute("INSERT INTO cache.t VALUES (2)")
        .await
        .unwrap();
    assert_eq!(column(client, ids, "id").await, some(&[1, 2]));

    // Time travel reads the version it names, before and after its entry is cached.
    for _ in 0..2 {
        assert_eq!(
            column(client, "SELECT id FROM cache.\"t@v1\"", "id").await,
            some(&[1])
        );
        assert_eq!(
            column(client, "SELECT id FROM cache.\"t@v2\" ORDER BY id", "id").await,
            some(&[1, 2])
        );
    }

    // A commit by another Lance writer (pylance, through the same manifest store).
    if let Some(append) = pylance_append {
        append();
        assert_eq!(column(client, ids, "id").await.len(), 3);
    }

    // Dropped and created again under the same name: versions restart at 1 with other
    // columns and rows; nothing of the old table answers, not even for `@v1`.
    client.execute("DROP TABLE cache.t").await.unwrap();
    let gone = rows(client, ids).await.unwrap_err();
    assert!(gone.to_string().contains("not found"), "{gone}");
    client
        .execute("CREATE TABLE cache.t AS SELECT 'new' AS name, 10 AS id")
        .await
        .unwrap();
    assert_eq!(column(client, ids, "id").await, some(&[10]));
    assert_eq!(
        column(client, "SELECT name FROM cache.\"t@v1\"", "name").await,
        ["new"]
    );
    let missing = rows(client, "SELECT id FROM cache.\"t@v2\"")
        .await
        .unwrap_err();
    assert!(
        missing.to_string().to_lowercase().contains("not found")
            || missing.to_string().contains("version"),
        "{missing}"
    );

    // A table created since the last statement is queryable and listed at once, in a
    // namespace the query process has never seen.
    client.execute("CREATE SCHEMA fresh").await.unwrap();
    client
        .execute("CREATE TABLE fresh.n AS SELECT 5 AS id")
        .await
        .unwrap();
    assert_eq!(
        column(client, "SELECT id FROM fresh.n", "id").await,
        some(&[5])
    );
    let listed = "SELECT table_schema || '.' || table_name AS t FROM information_schema.tables \
                  WHERE table_catalog = 'lake' AND table_schema <> 'information_schema' ORDER BY t";
    assert_eq!(column(client, listed, "t").await, ["cache.t", "fresh.n"]);
    client.execute("DROP TABLE fresh.n").await.unwrap();
    assert_eq!(column(client, listed, "t").await, ["cache.t"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn caches_never_serve_a_stale_table_on_local_disk() {
    let lake = LocalLake::start();
    let client = client(&lake.query, &lake.metadata).await;
    never_stale(&client, None).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn caches_never_serve_a_stale_table_on_s3_and_dynamodb() {
    let lake = CloudLake::new().await;
    let metadata = Served::start(&lake, Role::Metadata, "testing", None);
    let query = Served::start(&lake, Role::Query, "testing", Some(&metadata.endpoint));
    let client = client(&query.endpoint, &metadata.endpoint).await;
    let uri = lake.pylance_uri(&table("cache", "t"));
    let options = lake.pylance_options().to_string();
    let append = || {
        let script = "import sys, json, lance, pyarrow as pa\n\
                      lance.write_dataset(pa.table({'id': pa.array([3], pa.int64())}), sys.argv[1], \
                      mode='append', storage_options=json.loads(sys.argv[2]))";
        let (ok, stdout, stderr) = python(&["-c", script, &uri, &options]);
        assert!(ok, "pylance append failed:\n{stdout}\n{stderr}");
    };
    never_stale(&client, Some(&append)).await;
}

/// Listing the warehouse is one S3 LIST per namespace: statements that only name tables never
/// list it; those that enumerate it (`information_schema`) do, as the request log shows.
#[tokio::test(flavor = "multi_thread")]
async fn only_statements_that_enumerate_tables_list_the_warehouse() {
    let lake = CloudLake::new().await;
    let query_key = lake_testkit::unique("QUERYKEY").to_uppercase();
    let metadata = Served::start(&lake, Role::Metadata, "testing", None);
    let query = Served::start(&lake, Role::Query, &query_key, Some(&metadata.endpoint));
    let client = client(&query.endpoint, &metadata.endpoint).await;
    client.execute("CREATE SCHEMA listed").await.unwrap();
    client
        .execute("CREATE TABLE listed.t AS SELECT 1 AS id")
        .await
        .unwrap();
    let lists = |log: &[serde_json::Value]| {
        crate::support::requests_of(log, &query_key)
            .into_iter()
            .filter(|(service, method, url)| {
                service == "s3" && method == "GET" && url.contains("list-type")
            })
            .count()
    };

    let recording = lake_testkit::moto().start_recording();
    for _ in 0..10 {
        assert_eq!(
            column(&client, "SELECT id FROM listed.t", "id").await,
            some(&[1])
        );
    }
    let log = recording.stop();
    assert!(
        !crate::support::requests_of(&log, &query_key).is_empty(),
        "the query process's requests were recorded"
    );
    assert_eq!(lists(&log), 0, "a SELECT listed the warehouse");

    let recording = lake_testkit::moto().start_recording();
    let listed = "SELECT table_name FROM information_schema.tables WHERE table_schema = 'listed'";
    assert_eq!(column(&client, listed, "table_name").await, ["t"]);
    let log = recording.stop();
    assert!(
        lists(&log) > 0,
        "information_schema did not list the warehouse"
    );
}
