//! No single statement may take the process down or fill its disk: each case runs against a
//! `lake local` whose address space is limited as a pod's memory is (an allocation past it
//! aborts the process), and the server must refuse the statement, keep answering, and stay
//! within its configured memory.

use super::*;

/// The server's address space: enough for its threads' stacks and heap (and far below what
/// the statements below would allocate unbounded).
const ADDRESS_SPACE: u64 = 6 << 30;
/// What the endpoints' queries may hold, MiB (`--memory-limit-mb`), and one query.
const MEMORY_MB: u64 = 512;
const QUERY_MEMORY_MB: u64 = 256;
/// What the process holds besides its queries' memory: code, Lance's caches, buffers.
const BASELINE_MB: u64 = 256;

fn limited(extra: &[&str]) -> LocalLake {
    let memory = MEMORY_MB.to_string();
    let query = QUERY_MEMORY_MB.to_string();
    let mut args = vec![
        "--memory-limit-mb",
        &memory,
        "--query-memory-limit-mb",
        &query,
    ];
    args.extend_from_slice(extra);
    LocalLake::start_limited(&args, ADDRESS_SPACE)
}

/// `sql` on `endpoint` is refused with `code`; the server is still up and answering both
/// endpoints.
fn refused(lake: &mut LocalLake, endpoint: &str, sql: &str, code: &str) -> String {
    let (ok, _, stderr) = lake_sql(endpoint, sql);
    let alive = lake.child.try_wait().unwrap();
    assert!(
        alive.is_none(),
        "{sql}: the server died ({alive:?}): {stderr}"
    );
    assert!(!ok, "{sql}: accepted");
    assert!(stderr.contains(code), "{sql}: not {code}: {stderr}");
    assert_eq!(sql_ok(&lake.query, "SELECT 41 + 1 AS n"), "n\n42\n");
    assert_eq!(sql_ok(&lake.metadata, "SELECT 1 AS n"), "n\n1\n");
    stderr
}

fn assert_within_memory(lake: &LocalLake) {
    let peak = lake.peak_rss() >> 20;
    assert!(
        peak < MEMORY_MB + BASELINE_MB,
        "the server's peak RSS was {peak} MiB (limit {MEMORY_MB} MiB for queries)"
    );
}

/// DELETE's predicate is planned in the statement's own session: its functions count against
/// the query's budget (Lance once constant-folded it in a context of its own and aborted the
/// process), and finding the rows keeps the time limit. Nothing is deleted by a refused one.
#[test]
fn delete_predicates_are_bounded() {
    // The limit leaves a debug build on two busy cores room for the deletes that must succeed
    // (3 s did not, in 2 of 4 full runs); the slow one below takes minutes unbounded.
    let mut lake = limited(&["--query-timeout-seconds", "15"]);
    let meta = lake.metadata.clone();
    sql_ok(&meta, "CREATE SCHEMA s");
    sql_ok(&meta, "CREATE TABLE s.t (id BIGINT, name VARCHAR)");
    sql_ok(
        &meta,
        "INSERT INTO s.t SELECT value, 'row-' || value FROM generate_series(1, 300000)",
    );
    let count = |lake: &LocalLake| sql_ok(&lake.query, "SELECT count(*) AS n FROM s.t");
    // A constant: 2^45 bytes.
    refused(
        &mut lake,
        &meta,
        "DELETE FROM s.t WHERE repeat(arrow_cast('x', 'LargeUtf8'), 35184372088832) = 'y'",
        "ResourceExhausted",
    );
    // Per row, while Lance scans: every name repeated 10^11 times.
    refused(
        &mut lake,
        &meta,
        "DELETE FROM s.t WHERE repeat(name, 100000000000) = 'y'",
        "ResourceExhausted",
    );
    // Finding the rows takes longer than the 15 s limit (an edit distance of ~600 characters
    // per row, each batch within the function's bound of steps per call, in little memory):
    // stopped, nothing deleted.
    refused(
        &mut lake,
        &meta,
        "DELETE FROM s.t WHERE levenshtein(repeat(name, 60), repeat(name, 61)) < 0",
        "DeadlineExceeded",
    );
    // `||` is an operator, not a function: 60 copies of 100 rows of 1 MB, while Lance scans.
    sql_ok(&meta, "CREATE TABLE s.wide (name VARCHAR)");
    sql_ok(
        &meta,
        "INSERT INTO s.wide SELECT repeat(CAST(value % 10 AS VARCHAR), 1000000) \
         FROM generate_series(1, 100)",
    );
    refused(
        &mut lake,
        &meta,
        &format!(
            "DELETE FROM s.wide WHERE length({}) = 0",
            vec!["name"; 60].join(" || ")
        ),
        "ResourceExhausted",
    );
    assert_eq!(
        sql_ok(&lake.query, "SELECT count(*) AS n FROM s.wide"),
        "n\n100\n"
    );
    refused(
        &mut lake,
        &meta,
        "DELETE FROM s.t WHERE id IN (SELECT id FROM s.t)",
        "subquery",
    );
    assert_eq!(count(&lake), "n\n300000\n");
    // Within bounds, a delete deletes.
    assert_eq!(
        sql_ok(
            &meta,
            "DELETE FROM s.t WHERE id <= 10 OR name = 'row-300000'"
        ),
        "rows\n11\n"
    );
    assert_eq!(count(&lake), "n\n299989\n");
    // Regular expressions and LIKE patterns are counted calls in a predicate too (patterns.rs):
    // a literal pattern, and one that names a column.
    assert_eq!(
        sql_ok(
            &meta,
            "DELETE FROM s.t WHERE name ~ '^row-29999[0-8]$' \
             OR name LIKE concat('row-2999', CAST(id % 1 AS VARCHAR), '7')"
        ),
        "rows\n10\n"
    );
    assert_eq!(count(&lake), "n\n299979\n");
    assert_within_memory(&lake);
}

/// However a statement is written, what its expressions produce counts against the one
/// per-query budget: functions that multiply their input are bounded before they allocate,
/// and values that coexist add up.
#[test]
fn no_statement_outgrows_the_query_budget() {
    let mut lake = limited(&[]);
    let query = lake.query.clone();
    for sql in [
        // 100,000 numbers joined by 100 KB: 10 GB of text.
        "SELECT length(array_to_string(range(100000), repeat('x', 100000)))",
        // 10^12 elements, for a count.
        "SELECT cardinality(range(1000000000000))",
        "SELECT cardinality(generate_series(1, 1000000000000))",
        // Each value within any per-call cap, together four times the budget.
        "SELECT length(concat(repeat('x', 200000000), repeat('x', 200000000), \
         repeat('x', 200000000), repeat('x', 200000000)))",
        // Through the SQL planner's own function objects (array literals, `||` on arrays).
        "SELECT cardinality([repeat('x', 200000000), repeat('x', 200000000)])",
        "SELECT cardinality(array_repeat('x', 2000000000))",
        "SELECT length(lpad('x', 1000000000))",
        // One constant of 200 MB, folded while planning, then copied into each of 100 rows.
        "SELECT repeat('x', 200000000) AS s FROM generate_series(1, 100)",
        "SELECT cardinality(array_replace_all(array_repeat('a', 1000000), 'a', repeat('x', 1000)))",
        // A constant argument is copied into every row of a call over a column: 1 MB, 10,000
        // times.
        "SELECT length(concat(CAST(value AS VARCHAR), repeat('x', 1000000))) \
         FROM generate_series(1, 10000)",
        // … and into every row of an operator: `||` is no function.
        "SELECT length(CAST(value AS VARCHAR) || repeat('x', 1000000)) FROM generate_series(1, 10000)",
        // A fixed-size type of 2^31 elements a row.
        "SELECT arrow_cast(make_array(value), 'FixedSizeList(2147483647, Int64)') \
         FROM generate_series(1, 10)",
        // The same inside a list: each element 16 GiB.
        "SELECT arrow_cast(make_array(make_array(value)), \
         'List(FixedSizeList(2147483647, Int64))') FROM generate_series(1, 1)",
        // 160 KB a row, under any per-value cap but 1.3 GB a batch.
        "SELECT arrow_cast(make_array(value), 'FixedSizeList(20000, Int64)') \
         FROM generate_series(1, 10)",
        // A 16 KiB sketch per group, a million groups: four times the process's memory
        // before the aggregate counted them.
        "SELECT count(d) FROM (SELECT approx_distinct(value) AS d \
         FROM generate_series(1, 1000000) GROUP BY value % 1000000)",
        // Regular expressions, measured before a function compiles them: 8,000 capture groups
        // searched (8 GB of slots), a million class escapes parsed (6 GB); constant, folded,
        // from a subquery, through an operator. Each aborted the process.
        "SELECT cardinality(regexp_match(repeat('a', 100), repeat('(a?)', 8000)))",
        "SELECT count(*) FROM (SELECT repeat('a', 100) || value AS s FROM generate_series(1, 3)) \
         WHERE cardinality(regexp_match(s, repeat('(a?)', 8000))) > 0",
        "SELECT regexp_like('abc', repeat('\\w', 1000000))",
        "SELECT count(*) FROM generate_series(1, 3) WHERE regexp_like(CAST(value AS VARCHAR), \
         (SELECT repeat('\\w', 1000000)))",
        "SELECT count(*) FROM generate_series(1, 3) WHERE CAST(value AS VARCHAR) ~ \
         repeat('\\pL', 1000000)",
    ]
    .into_iter()
    .map(String::from)
    // A short literal pattern matched against a constant: DataFusion folded it with its own
    // kernel (6,000 capture slots in 125,000 states: 6 GB each table).
    .chain([
        format!("SELECT repeat('b', 200) ~ '{}(?:a{{0,250}}){{0,250}}'", "()".repeat(3000)),
        format!(
            "SELECT regexp_like(repeat('b', 200), '{}(?:a{{0,250}}){{0,250}}')",
            "()".repeat(3000)
        ),
        // … and against a column DataFusion simplifies into a constant (lake counts the CASE
        // first; the pattern's measure in `short_literal` guards what this does not reach).
        format!(
            "SELECT count(*) FROM generate_series(1, 3) WHERE CASE WHEN false THEN \
             CAST(value AS VARCHAR) ELSE repeat('b', 200) END ~ '{}(?:a{{0,250}}){{0,250}}'",
            "()".repeat(3000)
        ),
        // A constant text matched against a column of patterns is copied into every row: 4 MB,
        // 8,192 times.
        String::from(
            "SELECT count(*) FROM generate_series(1, 100000) WHERE \
             arrow_cast(repeat('b', 4000000), 'LargeUtf8') ~ CAST(value % 2 AS VARCHAR)",
        ),
    ])
    .chain(beyond_functions())
    {
        let sql = sql.as_str();
        let stderr = refused(&mut lake, &query, sql, "ResourceExhausted");
        assert!(
            stderr.contains("LAKE_QUERY_MEMORY_LIMIT_MB") || stderr.contains("per value"),
            "{sql}: {stderr}"
        );
    }
    // 2,000 constants of 4,000 bytes each, each under the size that expands one alone: 8 MB
    // a row.
    let wide = format!(
        "SELECT {} FROM generate_series(1, 10000)",
        (0..2000)
            .map(|i| format!("repeat('x', 4000) AS c{i}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    refused(&mut lake, &query, &wide, "ResourceExhausted");
    // A series whose step may not advance (1 month - 28 days, from a February 1st) looped
    // forever: refused before it runs.
    let stderr = refused(
        &mut lake,
        &query,
        "SELECT cardinality(generate_series(TIMESTAMP '2023-02-01', TIMESTAMP '2024-01-01', \
         INTERVAL '1 month' - INTERVAL '28 days'))",
        "InvalidArgument",
    );
    assert!(stderr.contains("pull both ways"), "{stderr}");
    // A LIKE pattern is compiled a row at a time by Arrow, uncounted: its length is bounded,
    // a literal's while planning (an 8 MB one took 3 GB).
    for sql in [
        String::from(
            "SELECT count(*) FROM generate_series(1, 3) WHERE CAST(value AS VARCHAR) LIKE \
             (SELECT repeat('a%', 4000000))",
        ),
        String::from(
            "SELECT count(*) FROM generate_series(1, 3) WHERE CAST(value AS VARCHAR) ILIKE \
             repeat('a%', 4000000)",
        ),
        format!(
            "SELECT count(*) FROM generate_series(1, 3) WHERE CAST(value AS VARCHAR) LIKE '{}'",
            "a_".repeat(40000)
        ),
    ] {
        let stderr = refused(&mut lake, &query, &sql, "InvalidArgument");
        assert!(stderr.contains("LIKE: a pattern of"), "{stderr}");
    }
    // A table function's arguments are simplified by DataFusion before lake's rules run.
    let stderr = refused(
        &mut lake,
        &query,
        "SELECT count(*) FROM generate_series(1, CASE WHEN 'a' ~ repeat('\\w', 1000000) \
         THEN 2 ELSE 3 END)",
        "InvalidArgument",
    );
    assert!(stderr.contains("may not use ~"), "{stderr}");
    // DataFusion plans an EXPLAIN's statement before it refuses a nested EXPLAIN.
    let stderr = refused(
        &mut lake,
        &query,
        "EXPLAIN EXPLAIN SELECT count(*) FROM generate_series(1, CASE WHEN 'a' ~ \
         repeat('\\w', 1000000) THEN 2 ELSE 3 END)",
        "InvalidArgument",
    );
    assert!(stderr.contains("may not use ~"), "{stderr}");
    // A long LIKE pattern Arrow never compiles (a substring test), and a constant alternation
    // of 10,000 words (compiled once, not copied into every row), answer.
    assert_eq!(
        sql_ok(
            &query,
            &format!(
                "SELECT count(*) AS n FROM generate_series(1, 3) WHERE CAST(value AS VARCHAR) \
                 LIKE '%{}%'",
                "x".repeat(70000)
            )
        ),
        "n\n0\n"
    );
    assert_eq!(
        sql_ok(
            &query,
            &format!(
                "SELECT count(*) AS n FROM generate_series(1, 20000) WHERE CAST(value AS VARCHAR) \
                 ~ '^({})$'",
                (1..=10000)
                    .map(|i| i.to_string())
                    .collect::<Vec<_>>()
                    .join("|")
            )
        ),
        "n\n10000\n"
    );
    // Patterns from a column, within their bounds, match: a LIKE, and an alternation of 2,000
    // words.
    assert_eq!(
        sql_ok(
            &query,
            "SELECT count(*) AS n FROM generate_series(1, 20000) WHERE CAST(value AS VARCHAR) \
             LIKE ('%' || CAST(value % 10 AS VARCHAR))"
        ),
        "n\n20000\n"
    );
    assert_eq!(
        sql_ok(
            &query,
            "SELECT count(*) AS n FROM generate_series(1, 20000) WHERE CAST(value AS VARCHAR) ~ \
             ('^(' || (SELECT string_agg(CAST(value AS VARCHAR), '|') \
             FROM generate_series(1, 2000)) || ')$')"
        ),
        "n\n2000\n"
    );
    // A percentile sketch of 2^31 centroids reserved 32 GiB when it first merged values.
    for sql in [
        "SELECT approx_percentile_cont(value, 0.5, 2147483647) FROM generate_series(1, 10)",
        "SELECT approx_percentile_cont(0.5, 2147483647) WITHIN GROUP (ORDER BY value) \
         FROM generate_series(1, 10)",
    ] {
        let stderr = refused(&mut lake, &query, sql, "InvalidArgument");
        assert!(stderr.contains("centroids"), "{stderr}");
    }
    assert_eq!(
        sql_ok(
            &query,
            "SELECT approx_percentile_cont(value, 0.5, 1000) AS p FROM generate_series(1, 9)"
        ),
        "p\n5.0\n"
    );
    // Within the budget, the same functions work.
    assert_eq!(
        sql_ok(
            &query,
            "SELECT length(array_to_string(range(1000), ',')) AS n, \
             cardinality(range(100000)) AS c, length(concat(repeat('x', 1000), 'y')) AS l"
        ),
        "n,c,l\n3889,100000,1001\n"
    );
    // Small subqueries as keys keep their results and names.
    assert_eq!(
        sql_ok(
            &query,
            "SELECT (SELECT 'k') AS g, count(*) AS n, max(CASE (SELECT 'a') WHEN 'a' THEN value END) \
             AS m FROM generate_series(1, 10) GROUP BY (SELECT 'k') ORDER BY (SELECT 1), n DESC"
        ),
        "g,n,m\nk,10,10\n"
    );
    // A thousand sketches fit, each close to its group's 1,000 values.
    assert_eq!(
        sql_ok(
            &query,
            "SELECT count(*) AS n, min(d) >= 950 AND max(d) <= 1050 AS close FROM \
             (SELECT approx_distinct(value) AS d FROM generate_series(1, 1000000) \
             GROUP BY value % 1000)"
        ),
        "n,close\n1000,true\n"
    );
    // A join repeats a 20 KB row: 8,192 copies of it fit.
    assert_eq!(
        sql_ok(
            &query,
            "SELECT sum(length(w.s)) AS j FROM (SELECT repeat(CAST(value AS VARCHAR), 20000) AS s \
             FROM generate_series(1, 1)) w CROSS JOIN generate_series(1, 10000)"
        ),
        "j\n200000000\n"
    );
    // A window over 1 GB (twice what the endpoints may hold) that reaches one row each way
    // holds a batch at a time.
    assert_eq!(
        sql_ok(
            &query,
            "SELECT sum(c) AS c FROM (SELECT count(s) OVER (ROWS BETWEEN 1 PRECEDING AND \
             1 FOLLOWING) AS c FROM (SELECT repeat(arrow_cast('y', 'Utf8'), 2000 + value % 2) \
             AS s FROM generate_series(1, 500000)))"
        ),
        "c\n1499998\n"
    );
    assert_within_memory(&lake);
}

/// Work that never yields — constants folded while planning, one function over a batch —
/// outlived the endpoint's timer: each function call checks the statement's deadline first, and
/// an edit distance is refused above its steps' bound. The worker is free again soon after the
/// deadline, not after the whole fold.
#[test]
fn functions_stop_at_the_statement_deadline() {
    let mut lake = limited(&["--query-timeout-seconds", "2"]);
    let query = lake.query.clone();
    let stderr = refused(
        &mut lake,
        &query,
        "SELECT levenshtein(repeat('a', 1000000), repeat('b', 1000000))",
        "ResourceExhausted",
    );
    assert!(stderr.contains("steps"), "{stderr}");
    // Every element of one list against every element of the other: 10^10 comparisons.
    let stderr = refused(
        &mut lake,
        &query,
        "SELECT array_has_any(range(value, 100000 + value), range(100000 + value, 200000 + value)) \
         FROM generate_series(1, 1)",
        "ResourceExhausted",
    );
    assert!(
        stderr.contains("array_has_any") && stderr.contains("steps"),
        "{stderr}"
    );
    assert_eq!(
        sql_ok(
            &query,
            "SELECT array_has_any(range(value, 1000 + value), range(999 + value, 2000 + value)) \
             AS a FROM generate_series(1, 1)"
        ),
        "a\ntrue\n"
    );
    // A pattern per row, each a few MB compiled: DataFusion kept every compiled one of a batch
    // and the process died at a few thousand rows. They are compiled a group at a time within
    // the budget, and the deadline stops them.
    let stderr = refused(
        &mut lake,
        &query,
        "SELECT count(*) FROM generate_series(1, 100000) WHERE regexp_like(CAST(value AS \
         VARCHAR), '(' || repeat('a{100}', 100) || ')' || CAST(value AS VARCHAR))",
        "DeadlineExceeded",
    );
    assert!(stderr.contains("LAKE_QUERY_TIMEOUT_SECONDS"), "{stderr}");
    refused(
        &mut lake,
        &query,
        "SELECT count(*) FROM generate_series(1, 100000) WHERE CAST(value AS VARCHAR) ~* \
         ('(' || repeat('a{100}', 100) || ')' || CAST(value AS VARCHAR))",
        "DeadlineExceeded",
    );
    // The same through `SIMILAR TO` (DataFusion runs it as `~`), through a pattern that varies
    // without naming a column, and through `regexp_replace`'s `g` (no flag of the pattern).
    for sql in [
        "SELECT count(*) FROM generate_series(1, 100000) WHERE arrow_cast(CAST(value AS \
         VARCHAR), 'Utf8') SIMILAR TO arrow_cast('(' || repeat('a{100}', 100) || ')' || \
         CAST(value AS VARCHAR), 'Utf8')",
        "SELECT count(*) FROM generate_series(1, 100000) WHERE CAST(value AS VARCHAR) ~ \
         ('(' || repeat('a{100}', 100) || ')' || CAST(random() AS VARCHAR))",
        "SELECT count(regexp_replace(CAST(value AS VARCHAR), '(' || repeat('a{100}', 100) || \
         ')' || CAST(value AS VARCHAR), 'x', 'g')) FROM generate_series(1, 100000)",
    ] {
        refused(&mut lake, &query, sql, "DeadlineExceeded");
    }
    // A LIKE pattern per row, each compiled by Arrow into a regular expression in one call no
    // deadline stops (8,192 of 4 KB: a minute): refused by what compiling them takes.
    let stderr = refused(
        &mut lake,
        &query,
        "SELECT count(*) FROM generate_series(1, 100000) WHERE 'x' LIKE \
         (repeat('a_', 2000) || CAST(value AS VARCHAR))",
        "ResourceExhausted",
    );
    assert!(stderr.contains("steps"), "{stderr}");
    // Patterns from a column that repeat are compiled once per batch, and match as they did.
    let starts_with_remainder = (1..=20000u32)
        .filter(|v| v.to_string().starts_with(&(v % 100).to_string()))
        .count();
    assert_eq!(
        sql_ok(
            &query,
            "SELECT count(*) AS n FROM generate_series(1, 20000) WHERE CAST(value AS VARCHAR) ~ \
             ('^' || CAST(value % 100 AS VARCHAR))"
        ),
        format!("n\n{starts_with_remainder}\n")
    );
    // 40 edit distances of 10^8 steps each, all folded while the statement is planned.
    let sum = (0..40)
        .map(|i| {
            format!(
                "levenshtein(repeat('a', {}), repeat('b', 10000))",
                10000 + i
            )
        })
        .collect::<Vec<_>>()
        .join(" + ");
    let stderr = refused(
        &mut lake,
        &query,
        &format!("SELECT {sum}"),
        "DeadlineExceeded",
    );
    assert!(stderr.contains("LAKE_QUERY_TIMEOUT_SECONDS"), "{stderr}");
    assert_within_memory(&lake);
}

/// A row of 1 MB, from a column (not a constant the planner folds).
const WIDE_ROW: &str =
    "SELECT repeat(CAST(value AS VARCHAR), 1000000) AS s, value FROM generate_series(1, 1)";

/// Two rows of 100 MB and 50 MB.
const TWO_ROWS: &str = "SELECT value, repeat('x', CAST(100000000 / value AS BIGINT)) AS s \
                        FROM generate_series(1, 2)";

/// A scalar subquery of 10 MB: a constant the planner cannot fold, known only when it runs.
const BIG_SUBQUERY: &str =
    "(SELECT repeat(CAST(value AS VARCHAR), 10000000) FROM generate_series(1, 1))";

/// Statements whose memory is taken by operators, not functions: `||`, joins, UNNEST and
/// window functions copy values no function call counted.
fn beyond_functions() -> Vec<String> {
    vec![
        // `||` on a column: 60 copies of a 100 MB value (the operator was evaluated outside
        // every count).
        format!(
            "SELECT length({}) FROM (SELECT arrow_cast(repeat(CAST(value AS VARCHAR), \
             100000000), 'LargeUtf8') AS s FROM generate_series(1, 1))",
            vec!["s"; 60].join(" || ")
        ),
        // Capture groups each copy what they match: 60 of a 100 MB match.
        format!(
            "SELECT cardinality(regexp_match(s, '{}x*{}')) FROM (SELECT \
             repeat(chr(CAST(119 + value AS INT)), 100000000) AS s FROM generate_series(1, 1))",
            "(".repeat(60),
            ")".repeat(60)
        ),
        // A join repeats a 1 MB row into each row of a batch of 8,192: 8 GB.
        format!("SELECT length(w.s) FROM ({WIDE_ROW}) w CROSS JOIN generate_series(1, 10000)"),
        format!(
            "SELECT length(w.s) FROM ({WIDE_ROW}) w JOIN generate_series(1, 10000) g \
             ON g.value >= w.value"
        ),
        // UNNEST repeats the row's other columns once per element: 10 GB.
        format!("SELECT length(s) FROM (SELECT s, unnest(range(10000)) FROM ({WIDE_ROW}))"),
        // A window function copies the first row's 100 MB into each of 10,000 rows.
        String::from(
            "SELECT length(first_value(s) OVER (ORDER BY value)) FROM (SELECT value, \
         repeat(CAST(value AS VARCHAR), CAST(100000000 / (value * value) AS BIGINT)) AS s \
         FROM generate_series(1, 10000))",
        ),
        // Copies that multiply nothing, 70 of a 100 MB value side by side in one batch: CASE (an
        // expression) and a function that returns about what it is given.
        format!(
            "SELECT {} FROM ({TWO_ROWS})",
            (1..=70)
                .map(|i| format!("CASE WHEN value * {i} = {i} THEN s END AS c{i}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        format!(
            "SELECT {} FROM ({TWO_ROWS})",
            (1..=70)
                .map(|i| format!("ltrim(s, 'a{i}') AS c{i}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        // A scalar subquery's 100 MB value copied into each of 8,192 rows: 800 GB.
        String::from(
            "SELECT (SELECT repeat(CAST(value AS VARCHAR), 100000000) FROM \
             generate_series(1, 1)) AS x FROM generate_series(1, 10000)",
        ),
        // … and the same through a cast, which copies its one value into every row too: 10 MB
        // into 8,192 rows, 80 GB (the process died of it).
        String::from(
            "SELECT arrow_cast((SELECT repeat(CAST(value AS VARCHAR), 10000000) FROM \
             generate_series(1, 1)), 'LargeBinary') AS x FROM generate_series(1, 10000)",
        ),
        // A 10 MB scalar subquery as a key is copied into every row the operator evaluates it
        // for, 8,192 rows a batch: sort keys (the process died of ORDER BY and of an aggregate's
        // ORDER BY), grouping and window keys, DISTINCT ON, an IN probe and a CASE operand.
        format!(
            "SELECT value FROM generate_series(1, 10000) ORDER BY {BIG_SUBQUERY}, value LIMIT 1"
        ),
        format!("SELECT array_agg(value ORDER BY {BIG_SUBQUERY}) FROM generate_series(1, 10000)"),
        format!("SELECT count(*) FROM generate_series(1, 10000) GROUP BY {BIG_SUBQUERY}"),
        format!("SELECT count(*) OVER (ORDER BY {BIG_SUBQUERY}) FROM generate_series(1, 10000)"),
        format!(
            "SELECT count(*) OVER (PARTITION BY {BIG_SUBQUERY}) FROM generate_series(1, 10000)"
        ),
        format!("SELECT DISTINCT ON ({BIG_SUBQUERY}) value FROM generate_series(1, 10000)"),
        format!(
            "SELECT count(*) FROM generate_series(1, 10000) WHERE {BIG_SUBQUERY} IN \
             (CAST(value AS VARCHAR), CAST(value + 1 AS VARCHAR), CAST(value + 2 AS VARCHAR))"
        ),
        format!(
            "SELECT CASE {BIG_SUBQUERY} WHEN CAST(value AS VARCHAR) THEN 1 END \
             FROM generate_series(1, 10000)"
        ),
        // A window over the whole input holds all of it: 100,000 rows of 10 KB, 1 GB, each
        // batch of 80 MB within the budget.
        String::from(
            "SELECT max(length(s)) OVER () FROM (SELECT repeat('y', 10000) || \
             CAST(value AS VARCHAR) AS s FROM generate_series(1, 100000))",
        ),
        // A frame reaching far ahead holds the rows it reaches before emitting, and first_value
        // copies a 30 KB value into each of them: 3 GB twice over, though each batch of 8,192
        // rows (240 MB) would fit.
        String::from(
            "SELECT length(first_value(s) OVER (ROWS BETWEEN CURRENT ROW AND 1000000 \
             FOLLOWING)) FROM (SELECT repeat('y', 30000) || CAST(value AS VARCHAR) AS s \
             FROM generate_series(1, 100000))",
        ),
        // Window functions keep the rows behind the current one, whatever they return: the
        // last 1,000,000 rows of 5 KB (5 GB of them here), each batch within the budget.
        String::from(
            "SELECT length(lag(s, 1000000) OVER ()) FROM (SELECT repeat(arrow_cast('y', 'Utf8'), \
             5000 + value % 2) AS s FROM generate_series(1, 1000000))",
        ),
        String::from(
            "SELECT count(s) OVER (ROWS BETWEEN 1000000 PRECEDING AND CURRENT ROW) FROM \
             (SELECT repeat(arrow_cast('y', 'Utf8'), 5000 + value % 2) AS s \
             FROM generate_series(1, 1000000))",
        ),
        // A running array_agg holds every row before it: 200,000 rows, 160 GB.
        String::from(
            "SELECT sum(cardinality(a)) FROM (SELECT array_agg(value) OVER (ORDER BY value) AS a \
         FROM generate_series(1, 200000))",
        ),
    ]
}

/// Spill files of every statement of an endpoint count against one disk budget, in the spill
/// directory it was given: past it, RESOURCE_EXHAUSTED naming the limit, and nothing is left
/// behind. With room, the same sort spills and runs in the same memory.
#[test]
fn spill_stays_inside_its_budget() {
    let spill = tempfile::tempdir().unwrap();
    let dir = spill.path().join("spill");
    // A sort of 3M rows in 24 MiB: it must spill.
    let sort = "SELECT max(r) AS r FROM (SELECT row_number() OVER (ORDER BY value DESC) AS r \
                FROM generate_series(1, 3000000))";
    let start = |spill_mb: &str| {
        LocalLake::start_limited(
            &[
                "--memory-limit-mb",
                "64",
                "--query-memory-limit-mb",
                "24",
                "--spill-dir",
                dir.to_str().unwrap(),
                "--spill-limit-mb",
                spill_mb,
            ],
            ADDRESS_SPACE,
        )
    };
    let mut lake = start("1");
    let query = lake.query.clone();
    let stderr = refused(&mut lake, &query, sort, "ResourceExhausted");
    assert!(stderr.contains("LAKE_SPILL_LIMIT_MB"), "{stderr}");
    let left: Vec<_> = walk(&dir).into_iter().filter(|p| p.is_file()).collect();
    assert!(left.is_empty(), "spill files left behind: {left:?}");
    drop(lake);

    let lake = start("512");
    assert_eq!(sql_ok(&lake.query, sort), "r\n3000000\n");
    let left: Vec<_> = walk(&dir).into_iter().filter(|p| p.is_file()).collect();
    assert!(left.is_empty(), "spill files left behind: {left:?}");
    assert!(lake.peak_rss() >> 20 < 64 + BASELINE_MB);
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(walk(&path));
        }
        found.push(path);
    }
    found
}

/// A Parquet footer declaring a list of 2^31 - 1 row groups in a few bytes: decoded, it asked
/// for hundreds of gigabytes before reading one. Refused from the footer's bytes; and a large
/// stage file is read in ranges, never whole.
#[test]
fn forged_parquet_footers_are_refused() {
    let mut lake = limited(&[]);
    let meta = lake.metadata.clone();
    sql_ok(&meta, "CREATE SCHEMA s");
    sql_ok(&meta, "CREATE TABLE s.t (id BIGINT)");
    let stage = lake.dir.path().join("_stage/in");
    std::fs::create_dir_all(&stage).unwrap();
    // FileMetaData { version: 1, schema: [], num_rows: 0, row_groups: list<struct> of 2^31-1 }.
    let mut footer = vec![0x15, 2, 0x19, 0x0c, 0x16, 0, 0x19, 0xfc];
    footer.extend([0xff, 0xff, 0xff, 0xff, 0x07]);
    footer.extend([0u8; 64]);
    let mut file = b"PAR1".to_vec();
    file.extend(&footer);
    file.extend((footer.len() as u32).to_le_bytes());
    file.extend(b"PAR1");
    std::fs::write(stage.join("forged.parquet"), &file).unwrap();
    let stderr = refused(
        &mut lake,
        &meta,
        "COPY INTO s.t FROM 'in/forged.parquet'",
        "InvalidArgument",
    );
    assert!(stderr.contains("2147483647 elements"), "{stderr}");
    // A footer length past the file.
    let n = file.len();
    file[n - 8..n - 4].copy_from_slice(&u32::MAX.to_le_bytes());
    std::fs::write(stage.join("long.parquet"), &file).unwrap();
    refused(
        &mut lake,
        &meta,
        "COPY INTO s.t FROM 'in/long.parquet'",
        "InvalidArgument",
    );

    // 24M distinct ids, uncompressed: a 190 MB file, loaded with the server's peak memory
    // growing by far less than the file.
    let rows: i64 = 24_000_000;
    let schema = std::sync::Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    let props = parquet::file::properties::WriterProperties::builder()
        .set_compression(parquet::basic::Compression::UNCOMPRESSED)
        .set_dictionary_enabled(false)
        .build();
    let out = std::fs::File::create(stage.join("big.parquet")).unwrap();
    let mut writer =
        parquet::arrow::ArrowWriter::try_new(out, schema.clone(), Some(props)).unwrap();
    for start in (0..rows).step_by(1 << 20) {
        let end = (start + (1 << 20)).min(rows);
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![std::sync::Arc::new(Int64Array::from_iter_values(
                start..end,
            ))],
        )
        .unwrap();
        writer.write(&batch).unwrap();
    }
    writer.close().unwrap();
    let size_mb = std::fs::metadata(stage.join("big.parquet")).unwrap().len() >> 20;
    assert!(size_mb > 150, "{size_mb} MiB");
    let before = lake.peak_rss() >> 20;
    assert_eq!(
        sql_ok(&meta, "COPY INTO s.t FROM 'in/big.parquet'"),
        format!("rows\n{rows}\n")
    );
    let grew = (lake.peak_rss() >> 20).saturating_sub(before);
    assert!(
        grew < size_mb / 2,
        "the server's peak RSS grew by {grew} MiB loading a {size_mb} MiB file"
    );
    assert_eq!(
        sql_ok(&lake.query, "SELECT count(*) AS n, max(id) AS m FROM s.t"),
        format!("n,m\n{rows},{}\n", rows - 1)
    );
}

/// What a statement makes the server do before its rows flow — planning it, describing it,
/// listing tables with their schemas — takes one of the endpoint's slots like a query; the
/// SQL's size and the relations it chains are bounded before it is parsed.
#[test]
fn planning_is_governed_like_a_query() {
    let mut lake = limited(&["--max-concurrent-queries", "1"]);
    let query = lake.query.clone();
    // 20,000 UNIONs: depth 0 in the expression check, a plan as deep as it is long.
    let unions = vec!["SELECT 1 AS n"; 20_000].join(" UNION ALL ");
    let stderr = refused(&mut lake, &query, &unions, "InvalidArgument");
    assert!(stderr.contains("relations"), "{stderr}");
    let joins = format!(
        "SELECT 1 FROM (SELECT 1 AS a) t0{}",
        (1..5_000)
            .map(|i| format!(" JOIN (SELECT 1 AS a) t{i} ON true"))
            .collect::<String>()
    );
    refused(&mut lake, &query, &joins, "InvalidArgument");
    let long = format!("SELECT '{}'", "x".repeat(2 << 20));
    let meta = lake.metadata.clone();
    let stderr = refused(&mut lake, &meta, &long, "InvalidArgument");
    assert!(stderr.contains("bytes of SQL"), "{stderr}");
    // 600 queries of a WITH list, each built on the one before.
    let chain = format!(
        "WITH a0 AS (SELECT 1 AS x){} SELECT * FROM a599",
        (1..600)
            .map(|i| format!(", a{i} AS (SELECT x FROM a{})", i - 1))
            .collect::<String>()
    );
    let stderr = refused(&mut lake, &query, &chain, "InvalidArgument");
    assert!(stderr.contains("relations"), "{stderr}");
    // 40 queries, each using the one before twice: 2^40 steps once the analyzer copies them.
    let doubling = format!(
        "WITH a0 AS (SELECT 1 AS x){} SELECT count(*) FROM a40",
        (1..=40)
            .map(|i| format!(
                ", a{i} AS (SELECT x FROM a{p} UNION ALL SELECT x FROM a{p})",
                p = i - 1
            ))
            .collect::<String>()
    );
    let stderr = refused(&mut lake, &query, &doubling, "InvalidArgument");
    assert!(stderr.contains("plans into more than"), "{stderr}");
    // A few hundred are fine.
    let some = vec!["SELECT 1 AS n"; 300].join(" UNION ALL ");
    assert_eq!(
        sql_ok(&query, &format!("SELECT count(*) AS c FROM ({some})")),
        "c\n300\n"
    );

    // The endpoint's one slot held by a stream: planning, describing and listing wait their
    // turn like queries (RESOURCE_EXHAUSTED), instead of running beside it.
    let (ok, stdout, stderr) = python(&["-c", HELD_SLOT, &query]);
    assert!(ok, "{stdout}{stderr}");
    assert!(stdout.contains("4 passed, 0 failed"), "{stdout}");
}

const HELD_SLOT: &str = r#"
import sys, adbc_driver_flightsql.dbapi as flightsql, adbc_driver_manager, pyarrow.flight as flight
sys.path.insert(0, "runtime/tests/it")
from flightsql_commands import command, pb_string
from lake_checks import Checks
query = sys.argv[1]
checks = Checks()
holder = flightsql.connect(query, autocommit=True)
cur = holder.cursor()
cur.execute("SELECT * FROM generate_series(1, 100000000)")
cur.fetch_record_batch().read_next_batch()
client = flight.FlightClient(query)
def refused(label, call):
    try:
        call()
    except Exception as e:  # pyarrow raises RESOURCE_EXHAUSTED as ArrowInvalid or FlightError
        checks.check(label, "esource exhausted" in str(e).replace("RESOURCE_EXHAUSTED", "resource exhausted")
                     or "queries are already running" in str(e), str(e))
        return
    checks.check(label, False, "it ran beside the held stream")
refused("GetFlightInfo plans in a slot", lambda: client.get_flight_info(
    flight.FlightDescriptor.for_command(command("CommandStatementQuery", pb_string(1, b"SELECT 1")))))
refused("GetSchema plans in a slot", lambda: client.get_schema(
    flight.FlightDescriptor.for_command(command("CommandStatementQuery", pb_string(1, b"SELECT 1")))))
refused("CreatePreparedStatement plans in a slot", lambda: list(client.do_action(flight.Action(
    "CreatePreparedStatement", command("ActionCreatePreparedStatementRequest", pb_string(1, b"SELECT 1"))))))
refused("GetTables with schemas lists in a slot", lambda: client.get_flight_info(
    flight.FlightDescriptor.for_command(command("CommandGetTables", b"\x28\x01"))).endpoints and
    client.do_get(client.get_flight_info(flight.FlightDescriptor.for_command(
        command("CommandGetTables", b"\x28\x01"))).endpoints[0].ticket).read_all())
cur.close(); holder.close()
checks.done()
"#;
