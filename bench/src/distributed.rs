//! Distributed query bench: TPC-H Q1, Q6 (scan and aggregate) and Q3 (joins) on one core (a
//! single `lake local` pinned to core 0) beside two workers each pinned to its own core (`lake
//! local --query-workers 2`, worker i on core i), same data, same run; and a small statement
//! (below the distribution threshold) with and without workers. On one machine, unpinned
//! numbers mean nothing: one process already uses every core.
//!
//! Goals (issue 29): Q1 and Q6 ≥ 1.7× faster with two workers; the small statement ≤ 1.05× its
//! time without workers.
//!
//! Run: `bench/run distributed [SCALE] [REPEATS] [THRESHOLD_MB] [DATA_DIR]` (release build; SCALE 2:
//! lineitem 12M rows; THRESHOLD_MB 256, `--distributed-threshold-mb`, the small statement's
//! table far below it).

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use lake_client::LakeClient;
use lake_testkit::tpch;

/// Memory for the statements (Q3's joins at scale 2), the same in both runs.
const LIMITS: [&str; 4] = [
    "--memory-limit-mb",
    "6144",
    "--query-memory-limit-mb",
    "4096",
];

struct Lake {
    child: Child,
    query: String,
}

impl Lake {
    /// `lake local` on `data` with `extra` flags, under `taskset -c cores` if given.
    fn start(lake: &str, data: &std::path::Path, extra: &[&str], cores: Option<&str>) -> Self {
        use std::io::BufRead;
        let mut command = match cores {
            Some(cores) => {
                let mut c = Command::new("taskset");
                c.args(["-c", cores, lake]);
                c
            }
            None => Command::new(lake),
        };
        command
            .args(["local", "--data"])
            .arg(data)
            .args([
                "--query-addr",
                "127.0.0.1:0",
                "--metadata-addr",
                "127.0.0.1:0",
            ])
            .args(LIMITS)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = command
            .spawn()
            .expect("lake local starts (taskset from util-linux)");
        let mut lines = std::io::BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let query = loop {
            let line = lines
                .next()
                .and_then(Result::ok)
                .expect("lake local prints its endpoints");
            if let Some(rest) = line.trim().strip_prefix("query") {
                break rest
                    .split_whitespace()
                    .next()
                    .expect("an endpoint")
                    .to_owned();
            }
        };
        // Its stdout drained, so that nothing it prints later blocks it.
        std::thread::spawn(move || lines.for_each(drop));
        Self { child, query }
    }

    /// The worker processes it started (its children).
    fn workers(&self) -> Vec<u32> {
        let pid = self.child.id();
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .map(|p| p.parse().expect("a pid"))
            .collect()
    }

    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn client(url: &str) -> LakeClient {
    let stage = Arc::new(object_store::memory::InMemory::new());
    LakeClient::with_stage(url, stage, Default::default())
        .await
        .expect("a client of lake local")
}

/// The median time of `repeats` runs of `sql` after one warm-up, and its row count.
async fn time(client: &LakeClient, sql: &str, repeats: usize) -> (Duration, usize) {
    let mut rows = 0;
    let mut times = Vec::new();
    for i in 0..=repeats {
        let started = Instant::now();
        let batches: Vec<_> = client
            .query(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .try_collect()
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        if i > 0 {
            times.push(started.elapsed());
        }
        rows = batches.iter().map(|b| b.num_rows()).sum();
    }
    times.sort();
    (times[times.len() / 2], rows)
}

/// Whether `sql` ran distributed (its analyzed plan has distributed stages).
async fn explained(client: &LakeClient, sql: &str) -> bool {
    let batches: Vec<arrow::array::RecordBatch> = client
        .query(&format!("EXPLAIN ANALYZE {sql}"))
        .await
        .unwrap_or_else(|e| panic!("EXPLAIN ANALYZE {sql}: {e}"))
        .try_collect()
        .await
        .unwrap_or_else(|e| panic!("EXPLAIN ANALYZE {sql}: {e}"));
    arrow::util::pretty::pretty_format_batches(&batches)
        .map(|text| text.to_string().contains("DistributedExec"))
        .unwrap_or(false)
}

const SMALL: &str = "SELECT count(*), sum(r_regionkey) FROM tpch.region";

fn statements() -> Vec<(&'static str, &'static str)> {
    vec![
        ("Q1", tpch::QUERIES[0]),
        ("Q6", tpch::QUERIES[5]),
        ("Q3", tpch::QUERIES[2]),
        ("small", SMALL),
    ]
}

async fn run(lake: &Lake, repeats: usize) -> Vec<(Duration, usize)> {
    let client = client(&lake.query).await;
    let mut out = Vec::new();
    for (name, sql) in statements() {
        // A few milliseconds: a median of 5 is noise; of 200, a measurement.
        let repeats = if name == "small" {
            repeats.max(200)
        } else {
            repeats
        };
        out.push(time(&client, sql, repeats).await);
    }
    out
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let lake = args
        .get(1)
        .expect("usage: distributed LAKE_BINARY [SCALE] [REPEATS]")
        .clone();
    let scale: f64 = args
        .get(2)
        .map_or(2.0, |s| s.parse().expect("SCALE: a number"));
    let repeats: usize = args
        .get(3)
        .map_or(5, |s| s.parse().expect("REPEATS: a whole number"));
    let threshold = args.get(4).map_or("256", String::as_str).to_owned();
    // A DATA_DIR keeps the lake for the next run, which then loads nothing.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let data = args
        .get(5)
        .map_or_else(|| dir.path().join("lake"), std::path::PathBuf::from);
    let loaded = data.join("_lake").exists();

    // Load: region (the small statement's table), customer, orders and lineitem, the big two in
    // 16 commits (fragments) each.
    if !loaded {
        let loading = Lake::start(&lake, &data, &[], None);
        let started = Instant::now();
        {
            let client = client(&loading.query).await;
            tpch::load(
                &client,
                scale,
                &[
                    ("region", 1),
                    ("customer", 4),
                    ("orders", 16),
                    ("lineitem", 16),
                ],
            )
            .await;
        }
        println!(
            "TPC-H scale {scale} (lineitem, orders, customer, region) loaded in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        loading.stop();
    }

    // One core: the whole lake on core 0.
    let single = Lake::start(&lake, &data, &[], Some("0"));
    let one = run(&single, repeats).await;
    single.stop();

    // Two workers, worker i on core i; the query process (the coordinator) on core 0 too, so a
    // statement it keeps to itself has one core, as in the run before.
    let spread = Lake::start(
        &lake,
        &data,
        &[
            "--query-workers",
            "2",
            "--distributed-threshold-mb",
            &threshold,
        ],
        Some("0"),
    );
    let workers = spread.workers();
    assert_eq!(workers.len(), 2, "two worker processes");
    for (core, pid) in workers.iter().enumerate() {
        let pinned = Command::new("taskset")
            // Every thread (-a): the worker's runtime threads exist already, on core 0.
            .args(["-a", "-p", "-c", &core.to_string(), &pid.to_string()])
            .stdout(Stdio::null())
            .status()
            .expect("taskset runs");
        assert!(pinned.success(), "taskset -p worker {pid}");
    }
    let two = run(&spread, repeats).await;
    let distributed = {
        let client = client(&spread.query).await;
        let mut out = Vec::new();
        for (_, sql) in statements() {
            out.push(explained(&client, sql).await);
        }
        out
    };
    spread.stop();

    println!(
        "\n{:<6} {:>10} {:>14} {:>8}  {:<12} goal",
        "", "1 core ms", "2 workers ms", "ratio", "distributed"
    );
    for ((((name, _), (a, rows_a)), (b, rows_b)), spread) in
        statements().iter().zip(&one).zip(&two).zip(&distributed)
    {
        assert_eq!(
            rows_a, rows_b,
            "{name}: the two runs' answers differ in rows"
        );
        let (ms_a, ms_b) = (a.as_secs_f64() * 1e3, b.as_secs_f64() * 1e3);
        let (ratio, goal) = if *name == "small" {
            let r = ms_b / ms_a;
            (
                r,
                if r <= 1.05 {
                    "met (≤ 1.05× without workers)"
                } else {
                    "MISSED (≤ 1.05× without workers)"
                },
            )
        } else {
            let r = ms_a / ms_b;
            let goal = match *name {
                "Q1" | "Q6" if r >= 1.7 => "met (≥ 1.7× faster)",
                "Q1" | "Q6" => "MISSED (≥ 1.7× faster)",
                _ => "(joins: reported)",
            };
            (r, goal)
        };
        let spread = if *spread { "yes" } else { "no" };
        println!("{name:<6} {ms_a:>10.1} {ms_b:>14.1} {ratio:>7.2}×  {spread:<12} {goal}");
    }
}
