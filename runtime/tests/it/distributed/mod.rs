//! Distributed query (docs/guides/distributed.md): `lake local --query-workers N` spreads a
//! statement over N worker processes, with the answers a single process gives, one table
//! version per statement, clean failures, and a worker port only the lake's own processes
//! may use.

mod kubernetes;
mod tpch;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{Array, Float32Array, Float64Array, RecordBatch};
use arrow::datatypes::DataType;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use futures::TryStreamExt;
use lake_client::{ClientError, LakeClient};

use crate::support::LocalLake;

/// `lake local` flags: `workers` worker processes, every statement distributed, a task per
/// fragment (the tests' tables are small).
fn distributed(workers: usize) -> Vec<String> {
    vec![
        "--query-workers".into(),
        workers.to_string(),
        "--distributed-threshold-mb".into(),
        "0".into(),
        "--distributed-task-mb".into(),
        "0".into(),
    ]
}

fn start(flags: &[String]) -> LocalLake {
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    LocalLake::start_with(&flags)
}

async fn client(lake: &LocalLake) -> LakeClient {
    let stage = Arc::new(object_store::memory::InMemory::new());
    LakeClient::with_stage(&lake.query, stage, Default::default())
        .await
        .unwrap()
}

async fn batches(client: &LakeClient, sql: &str) -> Result<Vec<RecordBatch>, ClientError> {
    client.query(sql).await?.try_collect().await
}

/// Each row of `batches` as text, floating-point values to 9 significant digits (a sum's last
/// bits depend on the order it was added up in, which distribution changes).
fn rows(batches: &[RecordBatch]) -> Vec<String> {
    let options = FormatOptions::default().with_null("NULL");
    let mut out = Vec::new();
    for batch in batches {
        let columns: Vec<Box<dyn Fn(usize) -> String>> = batch
            .columns()
            .iter()
            .map(|column| -> Box<dyn Fn(usize) -> String> {
                let column = column.clone();
                match column.data_type() {
                    DataType::Float64 | DataType::Float32 => Box::new(move |i| {
                        if column.is_null(i) {
                            return "NULL".into();
                        }
                        let v = match column.as_any().downcast_ref::<Float64Array>() {
                            Some(a) => a.value(i),
                            None => f64::from(
                                column
                                    .as_any()
                                    .downcast_ref::<Float32Array>()
                                    .unwrap()
                                    .value(i),
                            ),
                        };
                        format!("{v:.8e}")
                    }),
                    _ => {
                        let options = options.clone();
                        Box::new(move |i| {
                            ArrayFormatter::try_new(column.as_ref(), &options)
                                .unwrap()
                                .value(i)
                                .to_string()
                        })
                    }
                }
            })
            .collect();
        for i in 0..batch.num_rows() {
            out.push(columns.iter().map(|c| c(i)).collect::<Vec<_>>().join(" | "));
        }
    }
    out
}

async fn answer(client: &LakeClient, sql: &str) -> Vec<String> {
    rows(
        &batches(client, sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}")),
    )
}

/// `<schema>.t (id BIGINT, <group> BIGINT)` with ids 1..=6·rows and `group` = id % `modulo`,
/// in six commits (six fragments of `rows` rows each), the schema created first.
async fn six_commits(client: &LakeClient, schema: &str, group: &str, rows: i64, modulo: i64) {
    client
        .execute(&format!("CREATE SCHEMA {schema}"))
        .await
        .unwrap();
    client
        .execute(&format!(
            "CREATE TABLE {schema}.t (id BIGINT, {group} BIGINT)"
        ))
        .await
        .unwrap();
    for i in 0..6 {
        client
            .execute(&format!(
                "INSERT INTO {schema}.t SELECT value, value % {modulo} \
                 FROM generate_series({}, {})",
                i * rows + 1,
                (i + 1) * rows
            ))
            .await
            .unwrap();
    }
}

/// The text of `EXPLAIN ANALYZE sql` (the plan as it ran, stage by stage).
async fn analyzed(client: &LakeClient, sql: &str) -> String {
    let batches = batches(client, &format!("EXPLAIN ANALYZE {sql}"))
        .await
        .unwrap_or_else(|e| panic!("EXPLAIN ANALYZE {sql}: {e}"));
    rows(&batches).join("\n")
}

/// The fragment groups of each task of the distributed scans in an analyzed plan (`tN:
/// LakeScanExec: … fragments=[[…], …]` lines).
fn scan_tasks(plan: &str) -> Vec<Vec<u64>> {
    plan.lines()
        .filter(|l| l.contains(": LakeScanExec:"))
        .filter_map(|l| {
            let rest = l.split("fragments=").nth(1)?;
            let groups = &rest[..rest.find("]]")? + 2];
            Some(
                groups
                    .split(|c: char| !c.is_ascii_digit())
                    .filter(|s| !s.is_empty())
                    .map(|s| s.parse().unwrap())
                    .collect(),
            )
        })
        .collect()
}

/// The TPC-H answers of one lake: every query's rows, in the order it returned them.
async fn tpch_answers(client: &LakeClient) -> Vec<Vec<String>> {
    let mut all = Vec::new();
    for sql in tpch::QUERIES {
        all.push(answer(client, sql).await);
    }
    // At this scale a few queries' parameters select nothing; most must, or the comparison
    // says little.
    let answered = all.iter().filter(|rows| !rows.is_empty()).count();
    assert!(
        answered >= 18,
        "only {answered} of 22 TPC-H queries returned rows"
    );
    all
}

#[tokio::test(flavor = "multi_thread")]
async fn distributed_results_equal_single_node() {
    // Single process first, then the same data directory with three workers.
    let lake = LocalLake::start();
    let single = {
        let client = client(&lake).await;
        tpch::generate(&client, 0.01, 6).await;
        tpch_answers(&client).await
    };
    let dir = lake.stop();
    let lake = LocalLake::start_in(
        dir,
        &distributed(3)
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    assert_eq!(lake.workers.len(), 3, "three workers listed");
    let client = client(&lake).await;
    let spread = tpch_answers(&client).await;
    for (i, (one, many)) in single.iter().zip(&spread).enumerate() {
        assert_eq!(one, many, "TPC-H Q{}: distributed answer differs", i + 1);
    }
    // And they were distributed: the scan of lineitem ran as several tasks.
    let plan = analyzed(&client, tpch::QUERIES[0]).await;
    assert!(
        plan.contains("DistributedExec"),
        "Q1 was not distributed:\n{plan}"
    );
    assert!(
        scan_tasks(&plan).len() >= 2,
        "Q1's scan ran as one task:\n{plan}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn distributed_scan_runs_on_every_worker() {
    let lake = start(&distributed(3));
    let client = client(&lake).await;
    six_commits(&client, "d", "g", 1000, 7).await;
    let sql = "SELECT count(*), count(DISTINCT id), sum(id) FROM d.t WHERE g <> 99";
    assert_eq!(
        answer(&client, sql).await,
        vec!["6000 | 6000 | 18003000".to_owned()],
        "no row missing, none twice"
    );
    let plan = analyzed(&client, sql).await;
    let tasks = scan_tasks(&plan);
    // The library routes a stage's tasks round-robin over the workers: as many tasks as
    // workers is every worker.
    assert_eq!(tasks.len(), 3, "one scan task per worker:\n{plan}");
    let mut seen = BTreeSet::new();
    for task in &tasks {
        assert!(!task.is_empty(), "a task read nothing:\n{plan}");
        for fragment in task {
            assert!(
                seen.insert(*fragment),
                "fragment {fragment} read twice:\n{plan}"
            );
        }
    }
    assert_eq!(seen, (0..6).collect(), "every fragment read once:\n{plan}");
    // `%` by a constant is planned as lake's own function (modulo.rs): workers decode it by
    // name, in the scan's filter and in the plan above it.
    let sql = "SELECT count(*), sum(id % 7) FROM d.t WHERE id % 3 = 0";
    assert_eq!(answer(&client, sql).await, vec!["2000 | 6002".to_owned()]);
    assert_eq!(
        scan_tasks(&analyzed(&client, sql).await).len(),
        3,
        "{sql} was not spread"
    );
    // So are the regular expression operator and the LIKE pattern's check (patterns.rs).
    let sql = "SELECT count(*), sum(id) FROM d.t WHERE CAST(id AS VARCHAR) ~ '^1.*7$' \
               AND CAST(g AS VARCHAR) LIKE CAST(g AS VARCHAR)";
    assert_eq!(answer(&client, sql).await, vec!["111 | 151737".to_owned()]);
    assert_eq!(
        scan_tasks(&analyzed(&client, sql).await).len(),
        3,
        "{sql} was not spread"
    );
    // A statement that also reads what only this process has (information_schema) runs here.
    let sql = "SELECT count(*) FROM information_schema.tables i JOIN d.t ON d.t.id = 1 \
               WHERE i.table_schema = 'd'";
    assert_eq!(answer(&client, sql).await, vec!["1".to_owned()]);
}

#[tokio::test(flavor = "multi_thread")]
async fn distributed_reads_one_version() {
    // Rows 1..=2H; a writer deletes pairs (k, H + k) for k = 1, 2, …, one commit each. Any one
    // version has count = 2H - 2k and smallest ids k + 1 and H + k + 1 in each half; a read that
    // mixed versions across tasks (each half is in other fragments) breaks that.
    const H: i64 = 3000;
    let lake = start(&distributed(3));
    let client = client(&lake).await;
    six_commits(&client, "v", "g", 1000, 1).await;
    let writer = {
        let client = client.clone();
        tokio::spawn(async move {
            for k in 1..=40 {
                client
                    .execute(&format!("DELETE FROM v.t WHERE id IN ({k}, {})", H + k))
                    .await
                    .unwrap();
            }
        })
    };
    let sql = format!(
        "SELECT count(*), min(id) FILTER (WHERE id <= {H}), min(id) FILTER (WHERE id > {H}) \
         FROM v.t"
    );
    let mut reads = 0;
    while !writer.is_finished() || reads < 5 {
        let row = answer(&client, &sql).await;
        let values: Vec<i64> = row[0].split(" | ").map(|v| v.parse().unwrap()).collect();
        let deleted = (2 * H - values[0]) / 2;
        assert_eq!(
            (values[1], values[2]),
            (deleted + 1, H + deleted + 1),
            "read {reads}: {row:?} is no single version's answer"
        );
        reads += 1;
    }
    writer.await.unwrap();
    let plan = analyzed(&client, &sql).await;
    assert!(
        scan_tasks(&plan).len() >= 2,
        "the count was not distributed:\n{plan}"
    );
}

/// The worker processes `lake local` started (its children).
fn worker_pids(lake: &LocalLake) -> Vec<i32> {
    let pid = lake.child.id();
    let children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    children
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn distributed_worker_loss_fails_cleanly() {
    let lake = start(&distributed(3));
    let client = client(&lake).await;
    six_commits(&client, "w", "k", 4000, 2).await;
    let pids = worker_pids(&lake);
    assert_eq!(pids.len(), 3, "three worker processes");
    // A join of 288 million rows (seconds): long enough to lose a worker in the middle of it.
    let slow = "SELECT count(*) FROM w.t a JOIN w.t b ON a.k = b.k";
    let running = {
        let client = client.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            (batches(&client, slow).await, started.elapsed())
        })
    };
    // The join's keys are two, so the join runs on one or two of the three workers; the one
    // lost must be one still working for the statement (a worker whose share is done may go
    // without failing it): the one that used the most CPU time in the last second.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before: Vec<u64> = pids.iter().map(|&p| cpu_ticks(&[p])).collect();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let busiest = pids
        .iter()
        .zip(&before)
        .max_by_key(|&(&p, &ticks)| cpu_ticks(&[p]).saturating_sub(ticks))
        .map(|(&p, _)| p)
        .unwrap();
    assert!(
        !running.is_finished(),
        "the statement ended before the worker was lost"
    );
    // SAFETY: kill(2) on a pid this test's lake started.
    assert_eq!(unsafe { libc::kill(busiest, libc::SIGKILL) }, 0);
    let (result, took) = tokio::time::timeout(Duration::from_secs(60), running)
        .await
        .expect("the statement hung after its worker was lost")
        .unwrap();
    match result {
        Ok(batches) => panic!(
            "a statement that lost a worker answered: {:?}",
            rows(&batches)
        ),
        Err(e) => {
            let text = e.to_string();
            assert!(
                text.contains("Unavailable") || text.contains("unavailable"),
                "not UNAVAILABLE (retryable) after {took:?}: {text}"
            );
        }
    }
    // The next statements run on the workers that remain, once they have been checked again
    // (every second; a loaded machine may take a few checks, and a statement planned before
    // then fails retryable too).
    let sql = "SELECT count(*) FROM w.t WHERE k = 1";
    let checked = Instant::now();
    let plan = loop {
        assert!(
            checked.elapsed() < Duration::from_secs(30),
            "the lake did not serve on the two remaining workers within 30 s"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        let answered = batches(&client, sql).await;
        let plan = batches(&client, &format!("EXPLAIN ANALYZE {sql}")).await;
        match (answered, plan) {
            (Ok(answered), Ok(plan)) => {
                assert_eq!(rows(&answered), vec!["12000".to_owned()]);
                break rows(&plan).join("\n");
            }
            (Err(e), _) | (_, Err(e)) => assert!(
                e.to_string().contains("Unavailable"),
                "not UNAVAILABLE (retryable): {e}"
            ),
        }
    };
    assert_eq!(scan_tasks(&plan).len(), 2, "two workers remain:\n{plan}");
}

mod port;
mod served;

#[tokio::test(flavor = "multi_thread")]
async fn distributed_workers_keep_the_statement_limits() {
    // A join whose every output batch would hold 8192 copies of a 20 KB value (160 MiB): past
    // a 64 MiB statement, refused by the join's guard — on the worker that runs the join, which
    // decoded the guard and set it up again with its own budget.
    let mut flags = distributed(3);
    flags.extend(["--query-memory-limit-mb".to_owned(), "64".to_owned()]);
    let lake = start(&flags);
    let client = client(&lake).await;
    six_commits(&client, "m", "g", 1000, 2).await;
    // The side holding the values is small (20 rows: the join's own memory is a few hundred
    // KiB); each of its rows meets 3000 of the other side.
    let sql = "SELECT max(length(a.s)) FROM \
               (SELECT g, repeat('x', 20000 + g) AS s FROM m.t WHERE id <= 20) a \
               JOIN m.t b ON a.g = b.g";
    let refused = batches(&client, sql)
        .await
        .expect_err("the join ran past the budget");
    let text = refused.to_string();
    assert!(
        text.contains("ResourceExhausted") && text.contains("LAKE_QUERY_MEMORY_LIMIT_MB"),
        "{text}"
    );
    // Every worker is still there, and serves.
    assert_eq!(worker_pids(&lake).len(), 3);
    for pid in worker_pids(&lake) {
        assert!(
            std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "worker {pid} died"
        );
    }
    assert_eq!(
        answer(&client, "SELECT count(*) FROM m.t").await,
        vec!["6000"]
    );
}

/// CPU time the processes have used, in clock ticks (`utime` + `stime` of /proc/<pid>/stat).
fn cpu_ticks(pids: &[i32]) -> u64 {
    pids.iter()
        .map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // Fields after the command name (which may hold spaces), from field 3 on.
            let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
            field(14).unwrap_or(0) + field(15).unwrap_or(0)
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread")]
async fn distributed_cancel_stops_every_worker() {
    let lake = start(&distributed(3));
    let client = client(&lake).await;
    six_commits(&client, "x", "k", 4000, 2).await;
    let pids = worker_pids(&lake);
    assert_eq!(pids.len(), 3);
    let slow = "SELECT count(*) FROM x.t a JOIN x.t b ON a.k = b.k";
    let running = {
        let client = client.clone();
        tokio::spawn(async move { batches(&client, slow).await })
    };
    // The workers are busy with it …
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let before = cpu_ticks(&pids);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let busy = cpu_ticks(&pids) - before;
    assert!(
        !running.is_finished(),
        "the statement ended before it was cancelled"
    );
    assert!(
        busy >= 20,
        "the workers were not working on the statement ({busy} ticks in 1 s)"
    );
    // … the client gives up (its call dropped, as a client deadline does) …
    running.abort();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // … and every worker stops.
    let before = cpu_ticks(&pids);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let after = cpu_ticks(&pids) - before;
    assert!(
        after <= 10,
        "the workers went on after the statement was cancelled ({after} ticks in 1 s, {busy} before)"
    );
}

#[test]
fn lake_local_starts_at_most_64_workers() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lake"))
        .args(["local", "--data"])
        .arg(dir.path())
        .args(["--query-workers", "65"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "65 workers were accepted");
    assert!(stderr.contains("--query-workers"), "{stderr}");
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "a refused start wrote to the data directory"
    );
}
