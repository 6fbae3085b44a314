//! `RESTORE TABLE … TO VERSION n | TO TIMESTAMP '…'` (docs/guides/recovery.md): a bad write
//! undone in SQL, through the `lake sql` commands the guide shows.

use std::path::Path;
use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use lake_client::{IngestMode, LakeClient};

use crate::support::{LocalLake, lake_sql, maintain_now};

fn ok(endpoint: &str, statement: &str) -> String {
    let (ok, out, err) = lake_sql(endpoint, statement);
    assert!(ok, "{statement}: {out}{err}");
    out
}

/// The ids of `table` (a name, or `name@vN` quoted), in order, as `lake sql` prints them.
fn ids(endpoint: &str, table: &str) -> Vec<i64> {
    ok(endpoint, &format!("SELECT id FROM {table} ORDER BY id"))
        .lines()
        .filter_map(|l| l.trim().trim_matches('|').trim().parse().ok())
        .collect()
}

/// The error of a statement that must fail: (stderr).
fn refused(endpoint: &str, statement: &str) -> String {
    let (ok, out, err) = lake_sql(endpoint, statement);
    assert!(!ok, "{statement} succeeded: {out}");
    err
}

/// Now, as an RFC 3339 time with milliseconds.
fn now() -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    arrow::temporal_conversions::timestamp_ms_to_datetime(ms)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

/// A DELETE and an INSERT undone by RESTORE: the table's rows are the old version's again, in
/// one new commit; time travel still reaches the versions in between; TO TIMESTAMP picks the
/// newest version committed by then; a version retention removed is NOT_FOUND, naming what is
/// kept; a restore across a schema change registers the old schema with it.
#[tokio::test(flavor = "multi_thread")]
async fn restore_table_to_version() {
    let lake = LocalLake::start();
    let client = LakeClient::connect(&lake.query).await.unwrap();
    let (q, m) = (lake.query.clone(), lake.metadata.clone());
    // The guide shows these statements (docs/guides/recovery.md): keep them the same.
    let guide = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/guides/recovery.md"),
    )
    .unwrap();
    for statement in [
        "CREATE TABLE s.t (id BIGINT, name VARCHAR)",
        "INSERT INTO s.t VALUES (1, 'a'), (2, 'b'), (3, 'c')",
        "DELETE FROM s.t WHERE id = 2",
        "INSERT INTO s.t VALUES (4, 'd')",
        "RESTORE TABLE s.t TO VERSION 2",
        "RESTORE TABLE s.t TO TIMESTAMP '",
    ] {
        assert!(guide.contains(statement), "the guide lacks {statement:?}");
    }
    ok(&m, "CREATE SCHEMA s");
    ok(&m, "CREATE TABLE s.t (id BIGINT, name VARCHAR)"); // v1
    ok(&m, "INSERT INTO s.t VALUES (1, 'a'), (2, 'b'), (3, 'c')"); // v2
    ok(&m, "DELETE FROM s.t WHERE id = 2"); // v3: the mistake
    ok(&m, "INSERT INTO s.t VALUES (4, 'd')"); // v4
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let after_v4 = now();
    std::thread::sleep(std::time::Duration::from_millis(1100));

    ok(&m, "RESTORE TABLE s.t TO VERSION 2"); // v5
    assert_eq!(ids(&q, "s.t"), [1, 2, 3]);
    assert_eq!(ids(&q, "s.\"t@v5\""), [1, 2, 3]);
    // The versions in between are still there.
    assert_eq!(ids(&q, "s.\"t@v3\""), [1, 3]);
    assert_eq!(ids(&q, "s.\"t@v4\""), [1, 3, 4]);
    // The newest version committed by then: v4.
    ok(&m, &format!("RESTORE TABLE s.t TO TIMESTAMP '{after_v4}'")); // v6
    assert_eq!(ids(&q, "s.t"), [1, 3, 4]);

    // A version the table never had, and a time before it existed: NOT_FOUND, naming what is kept.
    for statement in [
        "RESTORE TABLE s.t TO VERSION 99",
        "RESTORE TABLE s.t TO TIMESTAMP '2001-01-01T00:00:00Z'",
    ] {
        let err = refused(&m, statement);
        assert!(err.contains("NotFound:"), "{statement}: {err}");
        assert!(err.contains("keeps versions 1 to 6"), "{statement}: {err}");
    }
    let err = refused(&m, "RESTORE TABLE s.nope TO VERSION 1");
    assert!(err.contains("NotFound:") && err.contains("s.nope"), "{err}");
    let err = refused(&m, "RESTORE TABLE s.t TO VERSION x");
    assert!(
        err.contains("InvalidArgument:") && err.contains("version number"),
        "{err}"
    );

    // A schema change (an ingest that replaces the table), undone: rows and schema come back.
    let changed = Arc::new(Schema::new(vec![Field::new("label", DataType::Utf8, true)]));
    let batch =
        RecordBatch::try_new(changed, vec![Arc::new(StringArray::from(vec!["x"]))]).unwrap();
    client
        .ingest("s", "t", IngestMode::Replace, vec![batch])
        .await
        .unwrap(); // v7
    let err = refused(&q, "SELECT id FROM s.t");
    assert!(err.contains("id"), "{err}");
    ok(&m, "RESTORE TABLE s.t TO VERSION 6"); // v8
    assert_eq!(ids(&q, "s.t"), [1, 3, 4]);
    let appended = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
        ])),
        vec![
            Arc::new(Int64Array::from(vec![5])),
            Arc::new(StringArray::from(vec!["e"])),
        ],
    )
    .unwrap();
    // The registration has the restored schema: an append of it is accepted.
    client
        .ingest("s", "t", IngestMode::Append, vec![appended])
        .await
        .unwrap(); // v9
    assert_eq!(ids(&q, "s.t"), [1, 3, 4, 5]);

    // Retention removed the old versions: they cannot be restored, and the error says why.
    let dir = lake.stop();
    let maintained = maintain_now(dir.path());
    assert!(
        maintained.status.success(),
        "{}",
        String::from_utf8_lossy(&maintained.stderr)
    );
    let lake = LocalLake::start_in(dir, &[]);
    let err = refused(&lake.metadata, "RESTORE TABLE s.t TO VERSION 2");
    assert!(err.contains("NotFound:"), "{err}");
    assert!(err.contains("retention"), "{err}");
    let dir: &Path = lake.dir.path();
    assert!(
        !err.contains(&dir.display().to_string()),
        "no server path: {err}"
    );
}

/// RESTORE is a write: the query endpoint refuses it and the table is unchanged.
#[tokio::test(flavor = "multi_thread")]
async fn restore_is_refused_on_query() {
    let lake = LocalLake::start();
    let client = LakeClient::connect(&lake.query).await.unwrap();
    ok(&lake.metadata, "CREATE SCHEMA s");
    ok(&lake.metadata, "CREATE TABLE s.t (id BIGINT)");
    ok(&lake.metadata, "INSERT INTO s.t VALUES (1)");
    ok(&lake.metadata, "INSERT INTO s.t VALUES (2)");
    let err = refused(&lake.query, "RESTORE TABLE s.t TO VERSION 2");
    assert!(err.contains("PermissionDenied:"), "{err}");
    assert!(err.contains("read-only query endpoint"), "{err}");
    // Also as a prepared statement or an update: every path a client has.
    let prepared = client.query("RESTORE TABLE s.t TO VERSION 2").await;
    assert!(prepared.is_err(), "a RESTORE ran as a query");
    assert_eq!(ids(&lake.query, "s.t"), [1, 2]);
    let err = refused(&lake.query, "SELECT * FROM s.\"t@v4\"");
    assert!(err.contains("NotFound:"), "no new version: {err}");
}
