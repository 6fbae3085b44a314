//! Vector search in plain SQL (docs/guides/search.md): `ORDER BY <distance>(emb, <vector>)
//! LIMIT k` served by a vector index, with the values and order of the SQL function.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{AsArray, FixedSizeListArray, Float32Array, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Float64Type, Int64Type, Schema};
use futures::TryStreamExt;
use lake_client::{IngestMode, LakeClient};

use crate::clients::{go, java};
use crate::search::ok;
use crate::support::{LocalLake, lake_sql};

/// Deterministic vectors clustered around `clusters` centres (embeddings are clustered;
/// uniform noise is the one case no IVF index serves well): splitmix64 and Box–Muller.
struct Vectors {
    state: u64,
}

impl Vectors {
    fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn normal(&mut self) -> f32 {
        let (u, v) = (self.uniform().max(1e-12), self.uniform());
        ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
    }

    /// `rows` vectors of `dim` values near `clusters` random centres.
    fn clustered(&mut self, rows: usize, dim: usize, clusters: usize) -> Vec<Vec<f32>> {
        let centres: Vec<Vec<f32>> = (0..clusters)
            .map(|_| (0..dim).map(|_| self.normal()).collect())
            .collect();
        (0..rows)
            .map(|_| {
                let c = &centres[(self.next() % clusters as u64) as usize];
                c.iter().map(|x| x + 0.3 * self.normal()).collect()
            })
            .collect()
    }

    /// A vector near `v` (a query near the data, as real queries are).
    fn near(&mut self, v: &[f32]) -> Vec<f32> {
        v.iter().map(|x| x + 0.3 * self.normal()).collect()
    }
}

/// Batches of (id, cat = id % 100, emb) for `vectors`, ids from `first`.
fn batches(vectors: &[Vec<f32>], first: i64) -> Vec<RecordBatch> {
    let dim = i32::try_from(vectors[0].len()).unwrap();
    let item = Arc::new(Field::new("item", DataType::Float32, true));
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("cat", DataType::Int64, false),
        Field::new("emb", DataType::FixedSizeList(item.clone(), dim), true),
    ]));
    vectors
        .chunks(8192)
        .enumerate()
        .map(|(n, chunk)| {
            let start = first + i64::try_from(n * 8192).unwrap();
            let ids = start..start + i64::try_from(chunk.len()).unwrap();
            let values = Float32Array::from_iter_values(chunk.iter().flatten().copied());
            RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(Int64Array::from_iter_values(ids.clone())),
                    Arc::new(Int64Array::from_iter_values(ids.map(|i| i % 100))),
                    Arc::new(FixedSizeListArray::new(
                        item.clone(),
                        dim,
                        Arc::new(values),
                        None,
                    )),
                ],
            )
            .unwrap()
        })
        .collect()
}

/// A local lake with `s.v` holding `vectors` (ids 0..).
async fn lake_with(vectors: &[Vec<f32>]) -> (LocalLake, LakeClient) {
    lake_started(LocalLake::start(), vectors).await
}

async fn lake_started(lake: LocalLake, vectors: &[Vec<f32>]) -> (LocalLake, LakeClient) {
    ok(&lake.metadata, "CREATE SCHEMA s");
    let client = LakeClient::connect(&lake.query).await.unwrap();
    client
        .ingest("s", "v", IngestMode::Create, batches(vectors, 0))
        .await
        .unwrap();
    (lake, client)
}

/// `v` as a SQL array literal.
fn literal(v: &[f32]) -> String {
    let values: Vec<String> = v.iter().map(|x| format!("{:?}", f64::from(*x))).collect();
    format!("[{}]", values.join(", "))
}

async fn rows(client: &LakeClient, sql: &str) -> Vec<RecordBatch> {
    client
        .query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .try_collect()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// (id, d) of a result whose first column is `id` and second a Float64 distance.
async fn ids_and_distances(client: &LakeClient, sql: &str) -> Vec<(i64, f64)> {
    rows(client, sql)
        .await
        .iter()
        .flat_map(|b| {
            let ids = b.column(0).as_primitive::<Int64Type>().clone();
            let d = b.column(1).as_primitive::<Float64Type>().clone();
            (0..b.num_rows()).map(move |i| (ids.value(i), d.value(i)))
        })
        .collect()
}

/// The physical plan EXPLAIN prints for `sql`.
async fn physical_plan(client: &LakeClient, sql: &str) -> String {
    let batches = rows(client, &format!("EXPLAIN {sql}")).await;
    let mut plan = String::new();
    for b in &batches {
        let kind = b.column(0).as_string::<i32>();
        let text = b.column(1).as_string::<i32>();
        for i in 0..b.num_rows() {
            if kind.value(i) == "physical_plan" {
                plan.push_str(text.value(i));
            }
        }
    }
    plan
}

/// The plan `EXPLAIN ANALYZE` prints for `sql` (as it ran).
async fn analyzed(client: &LakeClient, sql: &str) -> String {
    let batches = rows(client, &format!("EXPLAIN ANALYZE {sql}")).await;
    let mut plan = String::new();
    for b in &batches {
        let text = b.column(1).as_string::<i32>();
        for i in 0..b.num_rows() {
            plan.push_str(text.value(i));
        }
    }
    plan
}

fn uses_an_index(plan: &str) -> bool {
    plan.contains("ANNSubIndex") && plan.contains("ANNIvfPartition")
}

const DIM: usize = 16;

/// The index answers a search; without one (or for another metric, another direction, or a
/// search the index cannot serve) DataFusion's exact top-k does.
#[tokio::test(flavor = "multi_thread")]
async fn vector_search_uses_the_index() {
    let vectors = Vectors::new(1).clustered(4000, DIM, 20);
    let (lake, client) = lake_with(&vectors).await;
    let q = literal(&vectors[7]);
    let search = format!("SELECT id FROM s.v ORDER BY cosine_distance(emb, {q}) LIMIT 5");

    let plan = physical_plan(&client, &search).await;
    assert!(!uses_an_index(&plan) && plan.contains("TopK"), "{plan}");

    ok(
        &lake.metadata,
        "CREATE INDEX e ON s.v USING IVF_FLAT (emb) WITH (metric = 'cosine', num_partitions = 8)",
    );
    let plan = physical_plan(&client, &search).await;
    assert!(uses_an_index(&plan), "{plan}");
    // k rows from an index run in one partition: nothing dealt out to workers and merged back.
    for spread in ["RepartitionExec", "SortPreservingMergeExec"] {
        assert!(!plan.contains(spread), "{plan}");
    }
    // The forms a search takes: the distance named in the select list, an alias, OFFSET, a
    // WHERE clause, the literal first.
    for served in [
        format!("SELECT id, cosine_distance(emb, {q}) AS d FROM s.v ORDER BY d LIMIT 5"),
        format!("SELECT x.id FROM s.v AS x ORDER BY cosine_distance(x.emb, {q}) LIMIT 5 OFFSET 5"),
        format!("SELECT id FROM s.v WHERE cat < 50 ORDER BY cosine_distance({q}, emb) LIMIT 5"),
    ] {
        let plan = physical_plan(&client, &served).await;
        assert!(uses_an_index(&plan), "{served}: {plan}");
    }
    // What the index cannot serve is answered exactly.
    for exact in [
        // Another metric than the index's.
        format!("SELECT id FROM s.v ORDER BY array_distance(emb, {q}) LIMIT 5"),
        // The farthest, not the nearest.
        format!("SELECT id FROM s.v ORDER BY cosine_distance(emb, {q}) DESC LIMIT 5"),
        // Rows without a vector first.
        format!("SELECT id FROM s.v ORDER BY cosine_distance(emb, {q}) NULLS FIRST LIMIT 5"),
        // No limit.
        format!("SELECT id FROM s.v ORDER BY cosine_distance(emb, {q})"),
        // A second sort key.
        format!("SELECT id FROM s.v ORDER BY cosine_distance(emb, {q}), id LIMIT 5"),
        // Not a constant vector.
        "SELECT a.id FROM s.v a JOIN s.v b ON a.id = b.id ORDER BY cosine_distance(a.emb, b.emb) LIMIT 5".to_owned(),
        // An aggregate in between.
        format!(
            "SELECT cat, min(cosine_distance(emb, {q})) AS d FROM s.v GROUP BY cat ORDER BY d LIMIT 5"
        ),
    ] {
        let plan = physical_plan(&client, &exact).await;
        assert!(!uses_an_index(&plan), "{exact}: {plan}");
    }
}

/// For each metric, the rows, distances and order of a search served by an index are those of
/// the SQL function evaluated on every row; rows appended after the index was built (not in it
/// yet) are found too.
#[tokio::test(flavor = "multi_thread")]
async fn vector_search_values_match_the_sql_function() {
    let mut generator = Vectors::new(2);
    let vectors = generator.clustered(3000, DIM, 20);
    let (lake, client) = lake_with(&vectors).await;
    let query = generator.near(&vectors[11]);
    // A row appended after the indices: the nearest of all to the query.
    client
        .ingest(
            "s",
            "v",
            IngestMode::Append,
            batches(std::slice::from_ref(&query), 1_000_000),
        )
        .await
        .unwrap();
    let q = literal(&query);
    for (metric, function, order) in [
        ("l2", "array_distance", "ASC"),
        ("cosine", "cosine_distance", "ASC"),
        // Descending puts rows without a vector first unless told otherwise (they have no
        // product; an index never returns them): NULLS LAST is what a search means.
        ("dot", "inner_product", "DESC NULLS LAST"),
    ] {
        // IVF_FLAT with every partition probed (8 <= the default nprobes): the index's
        // candidates are exactly the nearest, so the answer must equal the exact one.
        ok(
            &lake.metadata,
            &format!(
                "CREATE INDEX e_{metric} ON s.v USING IVF_FLAT (emb) \
                 WITH (metric = '{metric}', num_partitions = 8)"
            ),
        );
        let search =
            format!("SELECT id, {function}(emb, {q}) AS d FROM s.v ORDER BY d {order} LIMIT 10");
        let plan = physical_plan(&client, &search).await;
        assert!(uses_an_index(&plan), "{metric}: {plan}");
        let got = ids_and_distances(&client, &search).await;

        // The function on every row, sorted here.
        let mut every = ids_and_distances(
            &client,
            &format!("SELECT id, {function}(emb, {q}) FROM s.v"),
        )
        .await;
        every.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        if order != "ASC" {
            every.reverse();
        }
        let exact: HashMap<i64, f64> = every.iter().copied().collect();
        assert_eq!(got.len(), 10, "{metric}");
        for (id, d) in &got {
            assert_eq!(
                exact[id].to_bits(),
                d.to_bits(),
                "{metric}: the distance of row {id}"
            );
        }
        assert_eq!(
            got.iter().map(|r| r.0).collect::<Vec<_>>(),
            every[..10].iter().map(|r| r.0).collect::<Vec<_>>(),
            "{metric}: the rows and their order"
        );
        if metric != "dot" {
            // (The largest product is not the query itself.)
            assert_eq!(
                got[0].0, 1_000_000,
                "{metric}: the appended row, not in the index"
            );
        }
        ok(&lake.metadata, &format!("DROP INDEX e_{metric} ON s.v"));
    }
}

/// A selective WHERE clause applies before the search: k rows, all matching, the nearest of
/// those that match.
#[tokio::test(flavor = "multi_thread")]
async fn vector_search_filter_returns_k_rows() {
    let vectors = Vectors::new(3).clustered(5000, DIM, 20);
    let (lake, client) = lake_with(&vectors).await;
    ok(
        &lake.metadata,
        "CREATE INDEX e ON s.v USING IVF_FLAT (emb) WITH (metric = 'l2', num_partitions = 8)",
    );
    let q = literal(&vectors[3]);
    // 1% of the rows match (cat = id % 100).
    let search = format!(
        "SELECT id, array_distance(emb, {q}) AS d FROM s.v WHERE cat = 42 ORDER BY d LIMIT 10"
    );
    let plan = physical_plan(&client, &search).await;
    assert!(uses_an_index(&plan), "{plan}");
    let got = ids_and_distances(&client, &search).await;
    assert_eq!(got.len(), 10);
    assert!(got.iter().all(|(id, _)| id % 100 == 42), "{got:?}");
    let mut exact = ids_and_distances(
        &client,
        &format!("SELECT id, array_distance(emb, {q}) FROM s.v WHERE cat = 42"),
    )
    .await;
    exact.sort_by(|a, b| a.1.total_cmp(&b.1));
    assert_eq!(got, exact[..10]);
}

/// 100,000 × 128 float32 vectors, an IVF_PQ index with its defaults: recall@10 at the
/// documented default nprobes (20) and refine factor (10), against the exact answer computed
/// here, is at least 0.95.
#[tokio::test(flavor = "multi_thread")]
async fn vector_search_recall() {
    const ROWS: usize = 100_000;
    const DIM: usize = 128;
    const QUERIES: usize = 40;
    let mut generator = Vectors::new(4);
    let vectors = generator.clustered(ROWS, DIM, 1000);
    let (lake, client) = lake_with(&vectors).await;
    ok(
        &lake.metadata,
        "CREATE INDEX e ON s.v USING IVF_PQ (emb) WITH (metric = 'l2')",
    );
    let mut found = 0;
    for n in 0..QUERIES {
        let query = generator.near(&vectors[(n * 2477) % ROWS]);
        let search = format!(
            "SELECT id, array_distance(emb, {}) AS d FROM s.v ORDER BY d LIMIT 10",
            literal(&query)
        );
        if n == 0 {
            let plan = physical_plan(&client, &search).await;
            assert!(uses_an_index(&plan), "{plan}");
        }
        let got: Vec<i64> = ids_and_distances(&client, &search)
            .await
            .iter()
            .map(|r| r.0)
            .collect();
        let mut exact: Vec<(f32, usize)> = vectors
            .iter()
            .enumerate()
            .map(|(i, v)| {
                (
                    v.iter().zip(&query).map(|(a, b)| (a - b) * (a - b)).sum(),
                    i,
                )
            })
            .collect();
        exact.select_nth_unstable_by(10, |a, b| a.0.total_cmp(&b.0));
        found += exact[..10]
            .iter()
            .filter(|(_, i)| got.contains(&i64::try_from(*i).unwrap()))
            .count();
    }
    let recall = found as f64 / (QUERIES * 10) as f64;
    eprintln!("recall@10 = {recall}");
    assert!(recall >= 0.95, "recall@10 = {recall}");
}

/// The first column of each printed row, and whether the client saw the index used, from a
/// client program's output (`<id>` lines, then `index <bool>`).
fn client_answer(name: &str, out: &std::process::Output) -> (Vec<i64>, bool) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{name}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut ids = Vec::new();
    let mut index = None;
    for line in stdout.lines() {
        if let Some(used) = line.strip_prefix("index ") {
            index = Some(used == "true" || used == "True");
        } else if let Ok(id) = line.trim().parse() {
            ids.push(id);
        }
    }
    (
        ids,
        index.unwrap_or_else(|| panic!("{name} said nothing of the index: {stdout}")),
    )
}

/// A prepared search with the vector bound as `$1`: a list from ADBC (Python) and JDBC, text
/// from Go (database/sql binds no lists); each gets the exact nearest rows from the index.
#[tokio::test(flavor = "multi_thread")]
async fn vector_search_through_prepared_statements() {
    let mut generator = Vectors::new(5);
    let vectors = generator.clustered(3000, DIM, 20);
    let (lake, client) = lake_with(&vectors).await;
    ok(
        &lake.metadata,
        "CREATE INDEX e ON s.v USING IVF_FLAT (emb) WITH (metric = 'cosine', num_partitions = 8)",
    );
    let query = generator.near(&vectors[100]);
    let mut every = ids_and_distances(
        &client,
        &format!(
            "SELECT id, cosine_distance(emb, {}) FROM s.v",
            literal(&query)
        ),
    )
    .await;
    every.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    let expected: Vec<i64> = every[..10].iter().map(|r| r.0).collect();
    let text: Vec<String> = query.iter().map(|x| format!("{x:?}")).collect();
    let text = text.join(",");
    let by_list = "SELECT id FROM s.v ORDER BY cosine_distance(emb, $1) LIMIT 10";
    let by_text = "SELECT id FROM s.v \
                   ORDER BY cosine_distance(emb, CAST(string_to_array($1, ',') AS FLOAT[])) LIMIT 10";

    let adbc = r#"
import sys
import pyarrow as pa
import adbc_driver_flightsql.dbapi as flightsql
endpoint, sql, text = sys.argv[1], sys.argv[2], sys.argv[3]
vector = pa.array([[float(v) for v in text.split(",")]], pa.list_(pa.float32()))
params = pa.record_batch([vector], names=["$1"])
with flightsql.connect(endpoint) as conn, conn.cursor() as cur:
    cur.adbc_prepare(sql)
    cur.execute(sql, params)
    for (id,) in cur.fetchall():
        print(id)
    cur.execute("EXPLAIN " + sql, params)
    print("index", any("ANNSubIndex" in plan for _, plan in cur.fetchall()))
"#;
    let out = lake_testkit::python_command()
        .args(["-c", adbc, &lake.query, by_list, &text])
        .output()
        .unwrap();
    let jdbc = java("VectorSearch.java", &[&lake.query, by_list, &text])
        .output()
        .unwrap();
    let go = go(&["search", &lake.query, by_text, &text])
        .output()
        .unwrap();
    for (name, out) in [("ADBC", out), ("JDBC", jdbc), ("Go", go)] {
        let (ids, index) = client_answer(name, &out);
        assert_eq!(ids, expected, "{name}: the nearest rows");
        assert!(index, "{name}: the search did not use the index");
    }
}

/// `vector_search(…)`: the table's columns and Lance's `_distance` (squared for l2), a WHERE
/// clause applied before the search, options and arguments checked by name; a table that
/// does not resolve is NOT_FOUND, a path is not a table.
#[tokio::test(flavor = "multi_thread")]
async fn vector_search_function_returns_columns_and_distance() {
    let vectors = Vectors::new(7).clustered(3000, DIM, 20);
    let (lake, client) = lake_with(&vectors).await;
    ok(
        &lake.metadata,
        "CREATE INDEX e ON s.v USING IVF_PQ (emb) WITH (metric = 'l2', num_partitions = 8, num_sub_vectors = 4)",
    );
    let q = literal(&vectors[9]);
    let batches = rows(
        &client,
        &format!("SELECT * FROM vector_search('s.v', {q}, 'emb', 5) ORDER BY _distance"),
    )
    .await;
    let names: Vec<_> = batches[0]
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(names, ["id", "cat", "emb", "_distance"]);
    let found = ids_and_distances(
        &client,
        &format!(
            "SELECT id, CAST(_distance AS DOUBLE) AS d FROM vector_search('s.v', {q}, 'emb', 5) \
             ORDER BY _distance"
        ),
    )
    .await;
    // Refined (the default refine factor): the query's own row at distance 0; the others at
    // the squared Euclidean distance.
    assert_eq!(found[0], (9, 0.0));
    let exact = ids_and_distances(
        &client,
        &format!(
            "SELECT id, array_distance(emb, {q}) FROM s.v WHERE id IN ({})",
            found
                .iter()
                .map(|r| r.0.to_string())
                .collect::<Vec<_>>()
                .join(",")
        ),
    )
    .await;
    for (id, d) in &found {
        let e = exact.iter().find(|r| r.0 == *id).unwrap().1;
        assert!(
            (d - e * e).abs() < 1e-3 * (1.0 + e * e),
            "row {id}: {d} vs {}",
            e * e
        );
    }
    let filtered = ids_and_distances(
        &client,
        &format!(
            "SELECT id, CAST(_distance AS DOUBLE) AS d FROM vector_search('s.v', {q}, 'emb', 5, \
             '{{\"nprobes\": 1}}') WHERE cat = 42"
        ),
    )
    .await;
    assert_eq!(filtered.len(), 5, "{filtered:?}");
    assert!(
        filtered.iter().all(|(id, _)| id % 100 == 42),
        "{filtered:?}"
    );

    for (sql, says) in [
        (
            format!("SELECT * FROM vector_search('s.nope', {q}, 'emb', 5)"),
            "NotFound: vector_search: table s.nope not found",
        ),
        (
            "SELECT * FROM vector_search('/etc/passwd', [1.0], 'emb', 5)".to_owned(),
            "InvalidArgument:",
        ),
        (
            format!("SELECT * FROM vector_search('s.v', {q}, 'id', 5)"),
            "\"id\" is Int64, not a vector",
        ),
        (
            "SELECT * FROM vector_search('s.v', [1.0, 2.0], 'emb', 5)".to_owned(),
            "must be 16 finite numbers",
        ),
        (
            format!("SELECT * FROM vector_search('s.v', {q}, 'emb', 0)"),
            "k is a whole number from 1 to 10000",
        ),
        (
            format!("SELECT * FROM vector_search('s.v', {q}, 'emb', 5, '{{\"nprobe\": 3}}')"),
            "unknown option \"nprobe\"",
        ),
        (
            format!(
                "SELECT * FROM vector_search('s.v', {q}, 'emb', 2000, '{{\"refine_factor\": 100}}')"
            ),
            "more than 100000 candidates",
        ),
        (
            format!("SELECT * FROM vector_search('s.v', {q})"),
            "vector_search takes",
        ),
        (
            "SELECT * FROM vector_search('s.v', $1, 'emb', 5)".to_owned(),
            "takes literal arguments",
        ),
    ] {
        let (ok, out, err) = lake_sql(&lake.query, &sql);
        assert!(!ok, "{sql}: {out}");
        assert!(err.contains(says), "{sql}: {err}");
    }
}

/// `fts(…)` ranks as Lance's own full-text search does (pylance on the same dataset): the same
/// rows, order and scores, for words and for Lance's query JSON.
#[tokio::test(flavor = "multi_thread")]
async fn fts_matches_lance() {
    let lake = LocalLake::start();
    ok(&lake.metadata, "CREATE SCHEMA s");
    ok(
        &lake.metadata,
        "CREATE TABLE s.docs (id BIGINT, body VARCHAR)",
    );
    let words = [
        "fish", "red", "blue", "tank", "water", "cat", "boat", "river", "sea", "net",
    ];
    let mut generator = Vectors::new(8);
    let values: Vec<String> = (0..400)
        .map(|id| {
            let n = 2 + generator.next() % 8;
            let text: Vec<&str> = (0..n)
                .map(|_| words[(generator.next() % words.len() as u64) as usize])
                .collect();
            format!("({id}, '{}')", text.join(" "))
        })
        .collect();
    ok(
        &lake.metadata,
        &format!("INSERT INTO s.docs VALUES {}", values.join(", ")),
    );
    ok(
        &lake.metadata,
        "CREATE INDEX b ON s.docs USING INVERTED (body)",
    );
    let client = LakeClient::connect(&lake.query).await.unwrap();
    let uri = lake.dir.path().join("s/docs.lance");
    let peer = r#"
import sys, json
import lance
from lance.query import MatchQuery
uri, kind, text = sys.argv[1], sys.argv[2], sys.argv[3]
query = text if kind == "words" else MatchQuery(text, "body")
table = lance.dataset(uri).to_table(full_text_query=query, columns=["id"])
print(json.dumps([[i, s] for i, s in zip(table["id"].to_pylist(), table["_score"].to_pylist())]))
"#;
    for (kind, text, sql) in [
        ("words", "fish tank", "'fish tank'"),
        (
            "match",
            "red boat",
            r#"'{"match": {"column": "body", "terms": "red boat"}}'"#,
        ),
    ] {
        // Every match (there are fewer than 1,000), ranked here.
        let mut ours = ids_and_distances(
            &client,
            &format!(
                "SELECT id, CAST(_score AS DOUBLE) AS score FROM fts('s.docs', {sql}) LIMIT 1000"
            ),
        )
        .await;
        ours.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let (okay, out, err) =
            lake_testkit::python(&["-c", peer, uri.to_str().unwrap(), kind, text]);
        assert!(okay, "pylance: {out}{err}");
        let mut theirs: Vec<(i64, f64)> = serde_json::from_str(out.trim()).unwrap();
        theirs.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        assert!(!ours.is_empty(), "{kind}: nothing found");
        // Scores are float32 (JSON's text of them parses back to the same float32).
        let as_f32 = |rows: Vec<(i64, f64)>| -> Vec<(i64, f32)> {
            rows.into_iter().map(|(id, s)| (id, s as f32)).collect()
        };
        let ours = as_f32(ours);
        assert_eq!(
            ours,
            as_f32(theirs),
            "{kind}: lake's fts and pylance's full_text_search"
        );
        // The k best: Lance ranks only as many (its search's rows), the scores are the best k.
        let top =
            format!("SELECT id, _score FROM fts('s.docs', {sql}) ORDER BY _score DESC LIMIT 5");
        let plan = analyzed(&client, &top).await;
        let search = plan
            .lines()
            .find(|l| l.contains("MatchQuery:"))
            .unwrap_or_else(|| panic!("{kind}: no search in {plan}"));
        assert!(
            search.contains("output_rows=5,"),
            "{kind}: all matches ranked: {search}"
        );
        let best: Vec<f32> = rows(&client, &top)
            .await
            .iter()
            .flat_map(|b| {
                b.column(1)
                    .as_primitive::<arrow::datatypes::Float32Type>()
                    .values()
                    .to_vec()
            })
            .collect();
        assert_eq!(
            best,
            ours[..5].iter().map(|r| r.1).collect::<Vec<_>>(),
            "{kind}"
        );
    }
    // A query that would enumerate the vocabulary is refused before Lance runs it.
    let fuzzy = r#"'{"match": {"column": "body", "terms": "fish", "fuzziness": 9}}'"#;
    let (okay, out, err) = lake_sql(
        &lake.query,
        &format!("SELECT id FROM fts('s.docs', {fuzzy}) LIMIT 5"),
    );
    assert!(!okay, "{out}");
    assert!(
        err.contains("InvalidArgument") && err.contains("fuzziness is at most 2"),
        "{err}"
    );
}

/// With distributed query on (every statement planned for 2 workers), a search served by an
/// index runs where it is planned (its plan has no scan to deal out) and answers the exact
/// nearest rows; a sort no index serves is planned for distribution as before.
#[tokio::test(flavor = "multi_thread")]
async fn a_search_is_kept_local_under_distributed_query() {
    let mut generator = Vectors::new(9);
    let vectors = generator.clustered(3000, DIM, 20);
    let lake = LocalLake::start_with(&[
        "--query-workers",
        "2",
        "--distributed-threshold-mb",
        "0",
        "--distributed-task-mb",
        "0",
    ]);
    let (lake, client) = lake_started(lake, &vectors[..1000]).await;
    // Several fragments: what a distributed plan deals out.
    for (n, part) in vectors[1000..].chunks(500).enumerate() {
        let first = 1000 + 500 * i64::try_from(n).unwrap();
        client
            .ingest("s", "v", IngestMode::Append, batches(part, first))
            .await
            .unwrap();
    }
    ok(
        &lake.metadata,
        "CREATE INDEX e ON s.v USING IVF_FLAT (emb) WITH (metric = 'l2', num_partitions = 8)",
    );
    let q = literal(&generator.near(&vectors[5]));
    let search = format!("SELECT id, array_distance(emb, {q}) AS d FROM s.v ORDER BY d LIMIT 10");
    let plan = analyzed(&client, &search).await;
    // (`LakeScanExec` is the scan of a statement planned for distribution.)
    assert!(
        uses_an_index(&plan) && !plan.contains("LakeScanExec"),
        "{plan}"
    );
    let got = ids_and_distances(&client, &search).await;
    let mut every = ids_and_distances(
        &client,
        &format!("SELECT id, array_distance(emb, {q}) FROM s.v"),
    )
    .await;
    every.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    assert_eq!(got, every[..10]);
    let plan = analyzed(
        &client,
        &format!("SELECT id FROM s.v ORDER BY array_distance(emb, {q})"),
    )
    .await;
    assert!(
        plan.contains("LakeScanExec"),
        "not planned for distribution: {plan}"
    );
}

/// `contains_tokens(col, 'words')` filters rows holding every word; an INVERTED index built
/// without stemming and without a token length limit serves it (Lance's condition), the
/// default one does not (the filter is then evaluated row by row, with the same answer).
#[tokio::test(flavor = "multi_thread")]
async fn contains_tokens_is_served_by_an_inverted_index() {
    let lake = LocalLake::start();
    let m = &lake.metadata;
    ok(m, "CREATE SCHEMA s");
    ok(m, "CREATE TABLE s.docs (id BIGINT, body VARCHAR)");
    ok(
        m,
        "INSERT INTO s.docs VALUES (1, 'red fish blue fish'), (2, 'one fish two fish red fish'), \
         (3, 'a red cat'), (4, 'fishing')",
    );
    let client = LakeClient::connect(&lake.query).await.unwrap();
    let search = "SELECT id FROM s.docs WHERE contains_tokens(body, 'red fish') ORDER BY id";
    let ids = |batches: Vec<RecordBatch>| -> Vec<i64> {
        batches
            .iter()
            .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
            .collect()
    };
    let served = |plan: &str| plan.contains("ScalarIndexQuery") && plan.contains("(Inverted)");
    for (options, by_index) in [
        ("", false),
        (" WITH (stem = false, max_token_length = 0)", true),
    ] {
        ok(
            m,
            &format!("CREATE INDEX b ON s.docs USING INVERTED (body){options}"),
        );
        let plan = physical_plan(&client, search).await;
        assert_eq!(served(&plan), by_index, "{options}: {plan}");
        assert_eq!(ids(rows(&client, search).await), [1, 2], "{options}");
        ok(m, "DROP INDEX b ON s.docs");
    }
    // Lance's function reads the first row's words for every row: only a literal is taken.
    let (okay, _, err) = lake_sql(
        &lake.query,
        "SELECT id FROM s.docs WHERE contains_tokens(body, body)",
    );
    assert!(
        !okay && err.contains("the words are a string literal"),
        "{err}"
    );
    let (okay, _, err) = lake_sql(
        m,
        "CREATE INDEX c ON s.docs USING INVERTED (body) WITH (stem = 'maybe')",
    );
    assert!(
        !okay && err.contains("index option stem = \"maybe\": true or false"),
        "{err}"
    );
    let (okay, _, err) = lake_sql(
        m,
        "CREATE INDEX c ON s.docs USING INVERTED (body) WITH (metric = 'l2')",
    );
    assert!(
        !okay && err.contains("not an option of an INVERTED index"),
        "{err}"
    );
}

/// `lake.vector.*` are session options (ADBC's `adbc.flight.sql.session.option.<name>`): a
/// connection turns the index off or probes more partitions, within bounds, and no other
/// connection sees it.
#[tokio::test(flavor = "multi_thread")]
async fn vector_settings_are_session_options() {
    let vectors = Vectors::new(6).clustered(3000, DIM, 20);
    let (lake, _client) = lake_with(&vectors).await;
    ok(
        &lake.metadata,
        "CREATE INDEX e ON s.v USING IVF_FLAT (emb) WITH (metric = 'cosine', num_partitions = 8)",
    );
    let search = format!(
        "EXPLAIN SELECT id FROM s.v ORDER BY cosine_distance(emb, {}) LIMIT 5",
        literal(&vectors[3])
    );
    let adbc = r#"
import sys
import adbc_driver_flightsql.dbapi as flightsql
import adbc_driver_manager
endpoint, sql = sys.argv[1], sys.argv[2]
OPTION = "adbc.flight.sql.session.option."
COOKIES = {"adbc.flight.sql.rpc.with_cookie_middleware": "true"}

def plan(conn):
    with conn.cursor() as cur:
        cur.execute(sql)
        return " ".join(p for _, p in cur.fetchall())

with flightsql.connect(endpoint, db_kwargs=COOKIES) as conn, flightsql.connect(endpoint, db_kwargs=COOKIES) as other:
    print("default", "ANNSubIndex" in plan(conn))
    conn.adbc_connection.set_options(**{OPTION + "lake.vector.nprobes": "7"})
    print("nprobes", "minimum_nprobes=7" in plan(conn), plan(conn))
    conn.adbc_connection.set_options(**{OPTION + "lake.vector.use_index": "false"})
    print("off", "ANNSubIndex" in plan(conn))
    print("other", "ANNSubIndex" in plan(other))
    try:
        conn.adbc_connection.set_options(**{OPTION + "lake.vector.nprobes": "100000000"})
        print("bounded", False)
    except adbc_driver_manager.Error as e:
        print("bounded", "INVALID" in str(e).upper(), e)
"#;
    let out = lake_testkit::python_command()
        .args(["-c", adbc, &lake.query, &search])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let said = |what: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{what} ")))
            .map(|rest| rest.starts_with("True"))
            .unwrap_or_else(|| {
                panic!(
                    "no {what}: {stdout}\n{}",
                    String::from_utf8_lossy(&out.stderr)
                )
            })
    };
    assert!(said("default"), "the index serves by default: {stdout}");
    assert!(
        said("nprobes"),
        "the session's nprobes reached Lance: {stdout}"
    );
    assert!(
        !said("off"),
        "use_index = false still used the index: {stdout}"
    );
    assert!(
        said("other"),
        "another connection saw the setting: {stdout}"
    );
    assert!(
        said("bounded"),
        "an unbounded nprobes was accepted: {stdout}"
    );
}
