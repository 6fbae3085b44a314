//! Index DDL (docs/guides/search.md): `CREATE INDEX`, `SHOW INDEXES`, `DROP INDEX` on the
//! metadata endpoint, through the `lake sql` commands the guide shows; the query endpoint lists
//! indices and refuses to change them.

use std::sync::Arc;

use arrow::array::{FixedSizeListArray, Float32Array, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use lake_client::{IngestMode, LakeClient};

use crate::support::{LocalLake, lake_sql};

pub(crate) fn ok(endpoint: &str, statement: &str) -> String {
    let (ok, out, err) = lake_sql(endpoint, statement);
    assert!(ok, "{statement}: {out}{err}");
    out
}

fn refused(endpoint: &str, statement: &str) -> String {
    let (ok, out, err) = lake_sql(endpoint, statement);
    assert!(!ok, "{statement} succeeded: {out}");
    err
}

/// The rows `SHOW INDEXES FROM table` prints, without the header: (name, columns, type,
/// indexed, unindexed).
fn indexes(endpoint: &str, table: &str) -> Vec<Vec<String>> {
    ok(endpoint, &format!("SHOW INDEXES FROM {table}"))
        .lines()
        .map(|l| {
            l.split('|')
                .map(|c| c.trim().to_owned())
                .filter(|c| !c.is_empty())
                .collect::<Vec<_>>()
        })
        .filter(|cells| cells.len() == 5 && cells[0] != "index_name")
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn index_ddl_builds_lists_and_drops() {
    let lake = LocalLake::start();
    let (q, m) = (lake.query.clone(), lake.metadata.clone());
    ok(&m, "CREATE SCHEMA s");
    ok(&m, "CREATE TABLE s.t (id BIGINT, name VARCHAR)");
    ok(
        &m,
        "INSERT INTO s.t VALUES (1, 'red fish'), (2, 'blue fish'), (3, 'one fish')",
    );
    ok(&m, "CREATE INDEX ids ON s.t USING BTREE (id)");
    ok(&m, "CREATE INDEX names ON s.t USING INVERTED (name)");
    assert_eq!(
        indexes(&q, "s.t"),
        [
            ["ids", "id", "BTree", "3", "0"],
            ["names", "name", "Inverted", "3", "0"]
        ]
    );
    // Rows appended since: not in the index yet (maintenance brings it up to date).
    ok(&m, "INSERT INTO s.t VALUES (4, 'two fish')");
    assert_eq!(indexes(&q, "s.t")[0], ["ids", "id", "BTree", "3", "1"]);
    // What the index serves still answers every row.
    assert!(ok(&q, "SELECT name FROM s.t WHERE id = 4").contains("two fish"));

    let err = refused(&m, "CREATE INDEX ids ON s.t USING BITMAP (id)");
    assert!(
        err.contains("AlreadyExists:") && err.contains("ids"),
        "{err}"
    );
    ok(
        &m,
        "CREATE INDEX IF NOT EXISTS ids ON s.t USING BITMAP (id)",
    );
    for (statement, says) in [
        (
            "CREATE INDEX x ON s.t USING BTREE (nope)",
            "\"nope\" does not exist",
        ),
        (
            "CREATE INDEX x ON s.t USING INVERTED (id)",
            "needs a text column",
        ),
        (
            "CREATE INDEX x ON s.t USING IVF_PQ (name)",
            "needs a vector column",
        ),
        (
            "CREATE INDEX x ON s.t USING BTREE (id) WITH (metric = 'l2')",
            "index option metric",
        ),
        (
            "CREATE INDEX x ON s.t USING GIST (id)",
            "unknown index type",
        ),
    ] {
        let err = refused(&m, statement);
        assert!(
            err.contains("InvalidArgument:") && err.contains(says),
            "{statement}: {err}"
        );
    }
    let err = refused(&m, "CREATE INDEX x ON s.nope USING BTREE (id)");
    assert!(err.contains("NotFound:"), "{err}");
    let err = refused(&q, "SHOW INDEXES FROM s.nope");
    assert!(err.contains("NotFound:") && err.contains("s.nope"), "{err}");
    let err = refused(&q, "SHOW INDEXES FROM s.t WHERE 1");
    assert!(
        err.contains("InvalidArgument:") && err.contains("unexpected"),
        "{err}"
    );

    ok(&m, "DROP INDEX ids ON s.t");
    assert_eq!(indexes(&q, "s.t").len(), 1);
    let err = refused(&m, "DROP INDEX ids ON s.t");
    assert!(err.contains("NotFound:") && err.contains("ids"), "{err}");
    ok(&m, "DROP INDEX IF EXISTS ids ON s.t");

    // A vector index, from vectors ingested as Arrow (SQL has no fixed-size list literal).
    let dim = 16;
    let item = Arc::new(Field::new("item", DataType::Float32, true));
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("emb", DataType::FixedSizeList(item.clone(), dim), true),
    ]));
    let rows = 1000;
    let values =
        Float32Array::from_iter_values((0..rows * dim).map(|i| ((i * 7919) % 1000) as f32));
    let vectors = FixedSizeListArray::new(item, dim, Arc::new(values), None);
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from_iter_values(0..i64::from(rows))),
            Arc::new(vectors),
        ],
    )
    .unwrap();
    let client = LakeClient::connect(&q).await.unwrap();
    client
        .ingest("s", "v", IngestMode::Create, vec![batch])
        .await
        .unwrap();
    ok(
        &m,
        "CREATE INDEX emb_idx ON s.v USING IVF_PQ (emb) WITH (metric = 'cosine', num_partitions = 4)",
    );
    assert_eq!(
        indexes(&q, "s.v"),
        [["emb_idx", "emb", "IVF_PQ", "1000", "0"]]
    );
    let err = refused(
        &m,
        "CREATE INDEX e2 ON s.v USING IVF_PQ (emb) WITH (num_sub_vectors = 3)",
    );
    assert!(err.contains("must divide"), "{err}");
}

/// Index DDL is a write: the query endpoint refuses it, and nothing changes.
#[tokio::test(flavor = "multi_thread")]
async fn index_ddl_is_refused_on_query() {
    let lake = LocalLake::start();
    let (q, m) = (lake.query.clone(), lake.metadata.clone());
    ok(&m, "CREATE SCHEMA s");
    ok(&m, "CREATE TABLE s.t (id BIGINT)");
    ok(&m, "INSERT INTO s.t VALUES (1), (2)");
    ok(&m, "CREATE INDEX ids ON s.t USING BTREE (id)");
    for statement in [
        "CREATE INDEX more ON s.t USING BITMAP (id)",
        "DROP INDEX ids ON s.t",
    ] {
        let err = refused(&q, statement);
        assert!(err.contains("PermissionDenied:"), "{statement}: {err}");
        assert!(
            err.contains("read-only query endpoint"),
            "{statement}: {err}"
        );
    }
    assert_eq!(indexes(&q, "s.t"), [["ids", "id", "BTree", "2", "0"]]);
}
