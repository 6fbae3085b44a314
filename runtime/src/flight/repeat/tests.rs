use std::sync::Arc;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::Int64Type;
use datafusion::execution::memory_pool::{
    GreedyMemoryPool, MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation,
};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};

use super::BoundRepetition;

/// A session whose queries may hold 64 MiB, with the rule (or without it: the control).
fn session(guarded: bool) -> SessionContext {
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_pool(Arc::new(GreedyMemoryPool::new(64 << 20)))
        .build_arc()
        .unwrap();
    let mut state = SessionStateBuilder::new()
        .with_config(SessionConfig::new())
        .with_runtime_env(runtime)
        .with_default_features();
    if guarded {
        state = state.with_physical_optimizer_rule(Arc::new(BoundRepetition));
    }
    SessionContext::new_with_state(state.build())
}

async fn run(guarded: bool, sql: &str) -> datafusion::common::Result<Vec<RecordBatch>> {
    session(guarded).sql(sql).await?.collect().await
}

/// The sum of the first column (Int64) of every batch.
fn sum(batches: &[RecordBatch]) -> i64 {
    batches
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().iter().flatten())
        .sum()
}

/// `sql` is refused with RESOURCE_EXHAUSTED, its message naming `naming` and the limit.
async fn refused(sql: &str, naming: &str) {
    let e = match run(true, sql).await {
        Err(e) => e,
        Ok(_) => panic!("{sql}: not refused"),
    };
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(error) = next {
        if let Some(status) = error.downcast_ref::<tonic::Status>() {
            assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{sql}: {e}");
            assert!(
                status.message().contains(naming)
                    && status.message().contains("LAKE_QUERY_MEMORY_LIMIT_MB"),
                "{sql}: {e}"
            );
            return;
        }
        next = error.source();
    }
    panic!("{sql}: {e}");
}

/// A 100 KB value in one row (not a constant: a column the planner cannot fold).
const WIDE: &str =
    "SELECT repeat(CAST(value AS VARCHAR), 100000) AS s, value FROM generate_series(1, 1)";

#[tokio::test]
async fn a_join_refuses_to_repeat_a_row_past_the_budget() {
    // 100 KB into each of 8,192 rows: 800 MB in one batch.
    for join in [
        "CROSS JOIN generate_series(1, 10000) g",
        "JOIN generate_series(1, 10000) g ON g.value >= w.value",
    ] {
        let sql = format!("SELECT length(w.s) FROM ({WIDE}) w {join}");
        refused(&sql, "join may repeat a row").await;
    }
    // The same join of a narrow row answers, as it does without the rule.
    let narrow = "SELECT CAST(length(w.s) AS BIGINT) FROM (SELECT repeat(CAST(value AS VARCHAR), 10) AS s \
                  FROM generate_series(1, 1)) w CROSS JOIN generate_series(1, 10000)";
    assert_eq!(sum(&run(true, narrow).await.unwrap()), 100_000);
    assert_eq!(sum(&run(false, narrow).await.unwrap()), 100_000);
}

#[tokio::test]
async fn unnest_counts_the_rows_it_repeats() {
    // The 100 KB row once per element: 1 GB.
    refused(
        &format!("SELECT length(s) FROM (SELECT s, unnest(range(10000)) FROM ({WIDE}))"),
        "UNNEST would build",
    )
    .await;
    let small = "SELECT unnest(range(10000)) AS n";
    assert_eq!(sum(&run(true, small).await.unwrap()), 49_995_000);
}

#[tokio::test]
async fn window_functions_count_what_they_copy() {
    // first_value copies a 100 KB value into each of 1,000 rows of one partition: 100 MB (the
    // input itself, 165 KB, fits).
    let values = "SELECT repeat(CAST(value AS VARCHAR), CAST(100000 / (value * value) AS BIGINT)) \
                  AS s FROM generate_series(1, 1000)";
    refused(
        &format!("SELECT length(first_value(s) OVER ()) FROM ({values})"),
        "window function may copy",
    )
    .await;
    // A running array_agg holds every row before it: 100,000 rows, 40 GB.
    refused(
        "SELECT cardinality(array_agg(value) OVER (ORDER BY value)) \
         FROM generate_series(1, 100000)",
        "array_agg",
    )
    .await;
    let small = "SELECT CAST(cardinality(array_agg(value) OVER (ORDER BY value)) AS BIGINT) \
                 FROM generate_series(1, 100)";
    assert_eq!(sum(&run(true, small).await.unwrap()), 5050);
    // Fixed-size results are not measured.
    let ranks = "SELECT row_number() OVER (ORDER BY value) FROM generate_series(1, 100000)";
    let batches = run(true, ranks).await.unwrap();
    assert_eq!(
        batches.iter().map(|b| b.column(0).len()).sum::<usize>(),
        100_000
    );
}

#[tokio::test]
async fn a_join_takes_its_inputs_in_slices() {
    // UNNEST makes one batch of 100,000 rows: a cross join repeats the other side's row into
    // each of them, in one output batch (as it does without the rule: the control).
    let sql = "SELECT CAST(length(w.s) AS BIGINT) FROM (SELECT repeat('x', 1000) || \
               CAST(value AS VARCHAR) AS s FROM generate_series(1, 1)) w \
               CROSS JOIN (SELECT unnest(range(100000)) AS n) many";
    let largest = |batches: &[RecordBatch]| batches.iter().map(RecordBatch::num_rows).max();
    let control = run(false, sql).await.unwrap();
    assert!(largest(&control) > Some(8192), "{:?}", largest(&control));
    let batches = run(true, sql).await.unwrap();
    assert_eq!(sum(&batches), 100_100_000);
    assert!(largest(&batches) <= Some(8192), "{:?}", largest(&batches));
}

#[tokio::test]
async fn window_functions_count_what_they_hold() {
    // `max(value) OVER ()` holds all 10M rows (80 MB) before it emits one.
    refused(
        "SELECT max(value) OVER () FROM generate_series(1, 10000000)",
        "holds its whole input",
    )
    .await;
    // A frame that reaches 100,000 rows ahead holds 20,000 rows of 5 KB (100 MB) at once,
    // and copies as many, though each batch of 8,192 would fit.
    refused(
        "SELECT length(first_value(s) OVER (ROWS BETWEEN CURRENT ROW AND 100000 FOLLOWING)) \
         FROM (SELECT repeat(CAST(value AS VARCHAR), 1000) AS s \
         FROM generate_series(10000, 29999))",
        "window function",
    )
    .await;
    // … whatever the function returns.
    refused(
        "SELECT length(s) + count(*) OVER (ROWS BETWEEN CURRENT ROW AND 20000000 FOLLOWING) \
         FROM (SELECT arrow_cast(repeat(CAST(value AS VARCHAR), 300), 'Utf8') AS s \
         FROM generate_series(1000, 200000))",
        "rows it waits on",
    )
    .await;
    let small = "SELECT max(value) OVER () FROM generate_series(1, 1000)";
    assert_eq!(sum(&run(true, small).await.unwrap()), 1_000_000);
    // A frame that ends at the current row holds a batch at a time (twice: see `held`): 100 MB
    // of input in all answers under a 64 MiB budget …
    let behind = |strings: &str| {
        format!(
            "SELECT CAST(length(first_value(s) OVER (ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)) \
             AS BIGINT) FROM (SELECT arrow_cast(repeat(CAST(value AS VARCHAR), 500), '{strings}') \
             AS s FROM generate_series(10000, 49999))"
        )
    };
    assert_eq!(sum(&run(true, &behind("Utf8")).await.unwrap()), 100_000_000);
    // … unless its strings are views: appending a view array to those it holds keeps their
    // data buffers, so the operator keeps every batch's values to the end.
    refused(&behind("Utf8View"), "holds its whole input").await;
}

#[tokio::test]
async fn unnest_counts_a_list_it_copies_at_every_level() {
    // `c` (3,000 one-element lists) is copied once per element at the first level: 3,000
    // copies of it.
    refused(
        "SELECT count(*) FROM (SELECT unnest(c) AS a, unnest(unnest(c)) AS b \
         FROM (SELECT array_repeat(make_array(value), 3000) AS c FROM generate_series(1, 1)))",
        "UNNEST would build",
    )
    .await;
}

/// `wide`: 100,000 rows of 2,400 bytes (240 MB, nearly four times the session's budget),
/// declared sorted on `value` (so that `ORDER BY value` sorts nothing).
fn wide(guarded: bool) -> SessionContext {
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{Field, Schema};
    use datafusion::datasource::MemTable;
    use datafusion::prelude::col;
    let schema = Arc::new(Schema::new(vec![
        Field::new("value", arrow::datatypes::DataType::Int64, false),
        Field::new("s", arrow::datatypes::DataType::Utf8, false),
    ]));
    let batches = (100_000i64..200_000)
        .step_by(8192)
        .map(|from| {
            let values: Vec<i64> = (from..(from + 8192).min(200_000)).collect();
            let s: StringArray = values
                .iter()
                .map(|v| Some(v.to_string().repeat(400)))
                .collect();
            RecordBatch::try_new(
                Arc::clone(&schema),
                vec![Arc::new(Int64Array::from(values)), Arc::new(s)],
            )
            .unwrap()
        })
        .collect();
    let table = MemTable::try_new(Arc::clone(&schema), vec![batches])
        .unwrap()
        .with_sort_order(vec![vec![col("value").sort(true, false)]]);
    // One partition, as it is stored: two would be sorted again.
    let ctx = one_partition(session(guarded));
    ctx.register_table("wide", Arc::new(table)).unwrap();
    ctx
}

/// `ctx`, planning on one partition (the default is one per core).
fn one_partition(ctx: SessionContext) -> SessionContext {
    ctx.state_ref()
        .write()
        .config_mut()
        .options_mut()
        .execution
        .target_partitions = 1;
    ctx
}

async fn run_wide(guarded: bool, sql: &str) -> datafusion::common::Result<Vec<RecordBatch>> {
    wide(guarded).sql(sql).await?.collect().await
}

#[tokio::test]
async fn window_functions_count_the_rows_they_reach_back_to() {
    // Each keeps the 50,000 rows behind its current row (120 MB), whatever it returns.
    for f in [
        "length(lag(s, 50000) OVER ())",
        "count(s) OVER (ROWS BETWEEN 50000 PRECEDING AND CURRENT ROW)",
        "length(first_value(s) OVER (ROWS BETWEEN 50000 PRECEDING AND CURRENT ROW))",
        "count(s) OVER (ORDER BY value RANGE BETWEEN 50000 PRECEDING AND CURRENT ROW)",
        // … or ahead of it.
        "length(lead(s, 50000) OVER ())",
        "count(s) OVER (ORDER BY value RANGE BETWEEN CURRENT ROW AND 50000 FOLLOWING)",
    ] {
        let sql = format!("SELECT {f} FROM wide");
        let e = run_wide(true, &sql).await.err();
        let status = e.as_ref().and_then(status_of);
        assert!(
            status.is_some_and(|s| s.code() == tonic::Code::ResourceExhausted
                && s.message().contains("rows its frames reach back to")),
            "{sql}: {e:?}"
        );
    }
    // Reaching a few rows, or none, they answer over all 240 MB, as they do without the rule.
    for (f, total) in [
        ("length(lag(s, 3) OVER ())", 239_992_800),
        (
            "count(s) OVER (ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING)",
            299_998,
        ),
        ("length(first_value(s) OVER (ORDER BY value))", 240_000_000),
        ("length(last_value(s) OVER (ORDER BY value))", 240_000_000),
        (
            "count(s) OVER (ORDER BY value RANGE BETWEEN 10 PRECEDING AND 10 FOLLOWING)",
            2_099_890,
        ),
        ("row_number() OVER (ORDER BY value)", 5_000_050_000),
    ] {
        let sql = format!("SELECT CAST({f} AS BIGINT) FROM wide");
        for guarded in [true, false] {
            let got = run_wide(guarded, &sql)
                .await
                .unwrap_or_else(|e| panic!("{sql} ({guarded}): {e}"));
            assert_eq!(sum(&got), total, "{sql} ({guarded})");
        }
    }
}

/// The RESOURCE_EXHAUSTED status somewhere in `e`'s chain.
fn status_of(e: &datafusion::common::DataFusionError) -> Option<&tonic::Status> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(error) = next {
        if let Some(status) = error.downcast_ref::<tonic::Status>() {
            return Some(status);
        }
        next = error.source();
    }
    None
}

#[tokio::test]
async fn a_running_aggregate_counts_its_own_partition() {
    // 1,000 partitions of 100 rows: each value holds at most 100 numbers, though the input
    // holds 100,000 (a whole-input measure would refuse it).
    let sql = "SELECT CAST(cardinality(array_agg(value) OVER (PARTITION BY value % 1000 \
               ORDER BY value)) AS BIGINT) FROM generate_series(1, 100000)";
    assert_eq!(sum(&run(true, sql).await.unwrap()), 5_050_000);
    // One partition of them all still grows past the budget.
    refused(
        "SELECT cardinality(array_agg(value) OVER (PARTITION BY value % 1 ORDER BY value)) \
         FROM generate_series(1, 100000)",
        "array_agg",
    )
    .await;
}

#[tokio::test]
async fn window_functions_count_what_they_emit_at_the_end() {
    // All 30,000 rows are peers: nothing is emitted before the input ends, then each row gets
    // a copy of the 5 KB first value (150 MB at once, though a batch's worth, 41 MB, fits).
    refused(
        "SELECT length(first_value(s) OVER (ORDER BY g)) FROM (SELECT value / 1000000 AS g, \
         arrow_cast(CASE WHEN value = 1 THEN repeat('x', 5000) ELSE 'y' END, 'Utf8') AS s \
         FROM generate_series(1, 30000))",
        "window function may copy",
    )
    .await;
}

#[tokio::test]
async fn window_aggregates_count_what_they_keep() {
    // A running DISTINCT count keeps every value before the current row: 100,000 of 1 KB,
    // 100 MB.
    refused(
        "SELECT count(DISTINCT s) OVER (ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) \
         FROM (SELECT arrow_cast(repeat(CAST(value AS VARCHAR), 200), 'Utf8') AS s \
         FROM generate_series(10000, 109999))",
        "rows of its input at once",
    )
    .await;
    // A sliding max of strings keeps the largest so far beside each row of its frame: the
    // 1 KB value beside 100,000 rows, 100 MB.
    refused(
        "SELECT length(max(s) OVER (ROWS BETWEEN 100000 PRECEDING AND CURRENT ROW)) FROM \
         (SELECT arrow_cast(CASE WHEN value = 1 THEN repeat('x', 1000) ELSE 'y' END, 'Utf8') \
         AS s FROM generate_series(1, 100000))",
        "rows of its input at once",
    )
    .await;
    // A running count, or max, keeps one value: over the same 100 MB they answer.
    for f in ["count(s)", "max(s)"] {
        let sql = format!(
            "SELECT {f} OVER (ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) \
             FROM (SELECT arrow_cast(repeat(CAST(value AS VARCHAR), 200), 'Utf8') AS s \
             FROM generate_series(10000, 109999))"
        );
        let batches = run(true, &sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        assert_eq!(
            batches.iter().map(RecordBatch::num_rows).sum::<usize>(),
            100_000
        );
    }
}

/// What the pool of `ctx` has reserved once `sql` emitted its first batch, and once its stream
/// ended.
async fn reserved_while_emitting(ctx: &SessionContext, sql: &str) -> (usize, usize) {
    use futures::StreamExt;
    let pool = Arc::clone(&ctx.runtime_env().memory_pool);
    let mut stream = ctx.sql(sql).await.unwrap().execute_stream().await.unwrap();
    let first = stream.next().await;
    assert!(matches!(first, Some(Ok(_))), "{sql}: {first:?}");
    let emitting = pool.reserved();
    while let Some(batch) = stream.next().await {
        batch.unwrap();
    }
    drop(stream);
    (emitting, pool.reserved())
}

/// A 64 MiB pool that notes what it holds whenever a window's output batch is counted.
#[derive(Debug)]
struct Noting {
    inner: GreedyMemoryPool,
    at_output: std::sync::Mutex<Vec<usize>>,
}

impl std::fmt::Display for Noting {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("noting")
    }
}

impl MemoryPool for Noting {
    fn name(&self) -> &str {
        "noting"
    }

    fn register(&self, consumer: &MemoryConsumer) {
        self.inner.register(consumer)
    }

    fn unregister(&self, consumer: &MemoryConsumer) {
        self.inner.unregister(consumer)
    }

    fn grow(&self, reservation: &MemoryReservation, n: usize) {
        self.inner.grow(reservation, n);
        if reservation
            .consumer()
            .name()
            .starts_with("lake: a window function's output")
        {
            self.at_output.lock().unwrap().push(self.inner.reserved());
        }
    }

    fn shrink(&self, reservation: &MemoryReservation, n: usize) {
        self.inner.shrink(reservation, n)
    }

    fn try_grow(
        &self,
        reservation: &MemoryReservation,
        n: usize,
    ) -> datafusion::common::Result<()> {
        self.inner.try_grow(reservation, n)
    }

    fn reserved(&self) -> usize {
        self.inner.reserved()
    }

    fn memory_limit(&self) -> MemoryLimit {
        self.inner.memory_limit()
    }
}

#[tokio::test]
async fn a_window_keeps_its_reservation_until_it_has_emitted() {
    // The operator computes its output only once its input ended (and it dropped the input's
    // stream): the 24 MB it holds stay reserved while it computes them — still there when its
    // first output batch is counted — and go once that batch is out (whoever takes it reserves
    // it); nothing stays after the stream.
    let pool = Arc::new(Noting {
        inner: GreedyMemoryPool::new(64 << 20),
        at_output: Default::default(),
    });
    let state = SessionStateBuilder::new_from_existing(wide(true).state())
        .with_runtime_env(
            RuntimeEnvBuilder::new()
                .with_memory_pool(pool.clone())
                .build_arc()
                .unwrap(),
        )
        .build();
    let ctx = SessionContext::new_with_state(state);
    let sql = "SELECT count(s) OVER () FROM (SELECT * FROM wide LIMIT 10000)";
    let (emitting, after) = reserved_while_emitting(&ctx, sql).await;
    let at_output = pool.at_output.lock().unwrap().clone();
    assert!(
        at_output.first().is_some_and(|held| *held >= 24_000_000),
        "held when the first output batch was counted: {at_output:?}"
    );
    assert!(
        emitting < 1_000_000,
        "{emitting} bytes still reserved once it was out"
    );
    assert_eq!(after, 0, "reserved after the stream ended");
}

#[tokio::test]
async fn a_join_reserves_the_batch_it_built() {
    use futures::StreamExt;
    // A 3 KB row repeated 30,000 times: batches of 25 MB, on one partition.
    let sql = "SELECT w.s FROM (SELECT repeat(CAST(value AS VARCHAR), 3000) AS s \
               FROM generate_series(1, 1)) w CROSS JOIN generate_series(1, 30000)";
    let one = || one_partition(session(true));
    // The batch the join built is counted while it is passed on, and no longer.
    let (emitting, after) = reserved_while_emitting(&one(), sql).await;
    assert!(
        emitting >= 3000 * 8192,
        "{emitting} bytes counted while emitting"
    );
    assert_eq!(after, 0, "counted after the stream ended");
    // Once another operator of the statement holds 110 MiB, the next batch takes the query past
    // twice its budget: refused (DataFusion's join itself counts none of it).
    let ctx = one();
    let mut stream = ctx.sql(sql).await.unwrap().execute_stream().await.unwrap();
    assert!(matches!(stream.next().await, Some(Ok(_))));
    let other = MemoryConsumer::new("another operator").register(&ctx.runtime_env().memory_pool);
    other.grow(110 << 20);
    let e = stream.next().await.and_then(Result::err);
    let status = e.as_ref().and_then(status_of);
    assert!(
        status.is_some_and(|s| s.code() == tonic::Code::ResourceExhausted
            && s.message().contains("the rows a cross join built")
            && s.message().contains("LAKE_QUERY_MEMORY_LIMIT_MB")),
        "{e:?}"
    );
}
