use std::sync::Arc;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::Int64Type;
use datafusion::execution::memory_pool::GreedyMemoryPool;
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
         FROM (SELECT repeat(CAST(value AS VARCHAR), 300) AS s FROM generate_series(1000, 200000))",
        "holds its whole input",
    )
    .await;
    let small = "SELECT max(value) OVER () FROM generate_series(1, 1000)";
    assert_eq!(sum(&run(true, small).await.unwrap()), 1_000_000);
    // A frame that ends at the current row holds a batch at a time: 100 MB of input in all
    // answers under a 64 MiB budget.
    let behind = "SELECT CAST(length(first_value(s) OVER (ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)) \
                  AS BIGINT) FROM (SELECT repeat(CAST(value AS VARCHAR), 1000) AS s \
                  FROM generate_series(10000, 29999))";
    assert_eq!(sum(&run(true, behind).await.unwrap()), 100_000_000);
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
