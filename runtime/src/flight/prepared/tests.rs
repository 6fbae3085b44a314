use std::sync::Arc;
use std::time::Duration;

use arrow::array::{AsArray, Int64Array, RecordBatch};
use arrow::datatypes::{Int64Type, Schema};

use super::*;
use crate::catalog::{NamespaceName, TableName};
use crate::flight::sql::testing;

/// A warehouse with table `s.t`, an endpoint's sessions and its prepared plans.
struct Endpoint {
    base: testing::Endpoint,
    prepared: PreparedPlans,
}

fn table() -> TableRef {
    TableRef::new(
        NamespaceName::parse("s").unwrap(),
        TableName::parse("t").unwrap(),
    )
}

/// Rows `ids` of (id, v = id * 10).
fn rows(ids: std::ops::Range<i64>) -> RecordBatch {
    RecordBatch::try_from_iter([
        (
            "id",
            Arc::new(Int64Array::from_iter_values(ids.clone())) as _,
        ),
        (
            "v",
            Arc::new(Int64Array::from_iter_values(ids.map(|i| i * 10))) as _,
        ),
    ])
    .unwrap()
}

fn schema() -> Arc<Schema> {
    rows(0..1).schema()
}

impl Endpoint {
    async fn new() -> Self {
        let base = testing::Endpoint::new();
        base.engine
            .create(&table(), schema(), vec![rows(0..100)])
            .await
            .unwrap();
        Self {
            base,
            prepared: PreparedPlans::default(),
        }
    }

    fn engine(&self) -> &crate::engine::WriteEngine {
        &self.base.engine
    }

    fn session(&self, bytes: usize) -> SessionContext {
        self.base.statement(bytes)
    }

    /// Table `s.<name>` made of `batch`.
    async fn create(&self, name: &str, batch: RecordBatch) {
        let table = TableRef::new(
            NamespaceName::parse("s").unwrap(),
            TableName::parse(name).unwrap(),
        );
        self.engine()
            .create(&table, batch.schema(), vec![batch])
            .await
            .unwrap();
    }

    /// `sql` with `values` bound, planned in `ctx` as a prepared read's execution plans it.
    async fn planned(
        &self,
        ctx: &SessionContext,
        sql: &str,
        values: Vec<ScalarValue>,
    ) -> Result<Statement, Status> {
        self.prepared
            .plan(
                self.engine().reader(),
                ctx,
                sql,
                Some(values),
                &SessionOptions::default(),
            )
            .await
    }

    /// The plan `sql` with `values` bound comes to, as its DoGet would receive it.
    async fn shown_plan(&self, sql: &str, values: Vec<ScalarValue>) -> String {
        self.bound_plan(sql, values)
            .await
            .display_indent()
            .to_string()
    }

    /// The plan `sql` with `values` bound comes to.
    async fn bound_plan(&self, sql: &str, values: Vec<ScalarValue>) -> LogicalPlan {
        let ctx = self.session(1 << 30);
        let planned = self.planned(&ctx, sql, values).await.unwrap();
        let Statement::Read(read) = planned else {
            panic!("{sql}: not a read");
        };
        read.plan().clone()
    }

    /// `sql` with `values` bound, run as a prepared read runs, in a statement of `bytes`.
    async fn run_in(
        &self,
        bytes: usize,
        sql: &str,
        values: Vec<ScalarValue>,
    ) -> Result<Vec<RecordBatch>, Status> {
        let ctx = self.session(bytes);
        let planned = self.planned(&ctx, sql, values).await?;
        let Statement::Read(ReadPlan::Optimized(plan)) = planned else {
            panic!("{sql}: not a prepared read optimized before it was bound: {planned:?}");
        };
        assert!(
            plan.get_parameter_fields().unwrap().is_empty(),
            "{sql}: a parameter was left unbound: {plan}"
        );
        let state = ctx.state();
        let physical = state
            .query_planner()
            .create_physical_plan(&plan, &state)
            .await
            .map_err(sql::status)?;
        let task = sql::task_context(&state).map_err(sql::status)?;
        datafusion::physical_plan::collect(physical, task)
            .await
            .map_err(sql::status)
    }

    async fn run(&self, sql: &str, values: Vec<ScalarValue>) -> Vec<RecordBatch> {
        self.run_in(1 << 30, sql, values)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    async fn ints(&self, sql: &str, values: Vec<ScalarValue>) -> Vec<i64> {
        let batches = self.run(sql, values).await;
        let mut out: Vec<i64> = batches
            .iter()
            .flat_map(|b| {
                let column = b.column(0).as_primitive::<Int64Type>();
                (0..column.len())
                    .map(|i| column.value(i))
                    .collect::<Vec<_>>()
            })
            .collect();
        out.sort_unstable();
        out
    }
}

fn int(v: i64) -> ScalarValue {
    ScalarValue::Int64(Some(v))
}

/// A prepared read is planned once: each execution after the first binds its own values into
/// the kept plan and gets their answer.
#[tokio::test]
async fn a_prepared_read_is_planned_once_and_answers_each_binding() {
    let endpoint = Endpoint::new().await;
    let sql = "SELECT v FROM s.t WHERE id = $1 OR id = $2 + 1";
    for (a, b) in [(5, 7), (9, 40), (99, 0)] {
        assert_eq!(
            endpoint.ints(sql, vec![int(a), int(b)]).await,
            {
                let mut want = vec![a * 10, (b + 1) * 10];
                want.sort_unstable();
                want
            },
            "${a}, ${b}"
        );
    }
    assert_eq!(endpoint.prepared.len(), 1);
    assert_eq!(
        endpoint.prepared.hits(),
        2,
        "the kept plan answered the later executions"
    );
    // Other types bound: a plan of its own, coerced as those values written in would be.
    assert_eq!(
        endpoint
            .ints(
                "SELECT v FROM s.t WHERE id = $1 OR id = $2 + 1",
                vec![ScalarValue::Int32(Some(3)), ScalarValue::Float64(Some(4.0))]
            )
            .await,
        vec![30, 50]
    );
    assert_eq!(endpoint.prepared.len(), 2);
}

/// A kept plan is used only while its table is at the version it was planned at: rows
/// appended since, or a table dropped and made again (its versions numbered alike), are read.
#[tokio::test]
async fn a_kept_plan_is_not_used_once_its_table_moves() {
    let endpoint = Endpoint::new().await;
    let sql = "SELECT count(*) FROM s.t WHERE id >= $1";
    assert_eq!(endpoint.ints(sql, vec![int(90)]).await, vec![10]);
    endpoint
        .engine()
        .append(&table(), schema(), vec![rows(100..105)])
        .await
        .unwrap();
    assert_eq!(endpoint.ints(sql, vec![int(90)]).await, vec![15]);
    assert_eq!(endpoint.prepared.hits(), 0);
    assert_eq!(endpoint.ints(sql, vec![int(100)]).await, vec![5]);
    assert_eq!(endpoint.prepared.hits(), 1);

    endpoint.engine().drop_table(&table()).await.unwrap();
    endpoint
        .engine()
        .create(&table(), schema(), vec![rows(0..3)])
        .await
        .unwrap();
    endpoint
        .engine()
        .append(&table(), schema(), vec![rows(1000..1001)])
        .await
        .unwrap();
    // Version 2 again, other rows.
    assert_eq!(endpoint.ints(sql, vec![int(0)]).await, vec![4]);
    assert_eq!(endpoint.prepared.hits(), 1);
}

/// A plan that reads the clock is made for each execution: the optimizer folds `now()` into
/// the plan.
#[tokio::test]
async fn a_plan_that_reads_the_clock_is_not_kept() {
    let endpoint = Endpoint::new().await;
    let sql = "SELECT CAST(now() AS BIGINT) + $1 FROM s.t WHERE id = 0";
    let first = endpoint.ints(sql, vec![int(0)]).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let second = endpoint.ints(sql, vec![int(0)]).await;
    assert!(second[0] > first[0], "{first:?} then {second:?}");
    assert_eq!(endpoint.prepared.len(), 0);
}

/// A kept plan runs under the budget of the statement that uses it, not the one that made it:
/// the call the first statement could afford is refused in a smaller one, and the bound value
/// is checked as if it had been written in.
#[tokio::test]
async fn a_kept_plan_counts_against_each_statements_budget() {
    let endpoint = Endpoint::new().await;
    let sql = "SELECT CAST(length(repeat('x', $1)) AS BIGINT) FROM s.t WHERE id = 0";
    assert_eq!(
        endpoint.ints(sql, vec![int(4_000_000)]).await,
        vec![4_000_000]
    );
    let refused = endpoint
        .run_in(64 * 1024, sql, vec![int(4_000_000)])
        .await
        .expect_err("4 MB of text in a 64 KiB statement");
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted, "{refused}");
    assert_eq!(endpoint.prepared.hits(), 1);
    // A large bound value copied into every row counts as a large literal does.
    let large = ScalarValue::Utf8(Some("x".repeat(200 * 1024)));
    let copied = endpoint
        .run_in(1024 * 1024, "SELECT $1 FROM s.t", vec![large])
        .await
        .expect_err("a 200 KiB value in each of 100 rows, in 1 MiB");
    assert_eq!(copied.code(), tonic::Code::ResourceExhausted, "{copied}");
}

/// A cast of a bound value is folded as a constant written in would be: the scan is given the
/// value, not a cast.
#[tokio::test]
async fn a_bound_value_reaches_the_scan_as_a_constant() {
    let endpoint = Endpoint::new().await;
    let shown = endpoint
        .shown_plan(
            "SELECT v FROM s.t WHERE id = $1",
            vec![ScalarValue::Int32(Some(7))],
        )
        .await;
    assert!(
        shown.contains("s.t.id = Int64(7)"),
        "the scan's filter is not a constant: {shown}"
    );
}

/// `SELECT v FROM s.t WHERE v > $1 AND id IN (<first>, <first + 1>, …)`, `n` values long.
fn in_list(first: i64, n: i64) -> String {
    let list: Vec<String> = (first..first + n).map(|i| i.to_string()).collect();
    format!(
        "SELECT v FROM s.t WHERE v > $1 AND id IN ({})",
        list.join(",")
    )
}

/// Kept plans hold at most [`MAX_WEIGHT`] together and a plan heavier than
/// [`MAX_PLAN_WEIGHT`] is not kept: any client may prepare many large statements, and the
/// query process has a memory limit. The least recently used go first.
#[tokio::test]
async fn kept_plans_are_bounded_in_memory() {
    let endpoint = Endpoint::new().await;
    let heavy = in_list(0, 20_000);
    assert_eq!(endpoint.ints(&heavy, vec![int(980)]).await, vec![990]);
    assert_eq!(
        endpoint.prepared.len(),
        0,
        "a plan of 20,000 constants was kept"
    );

    let light = "SELECT v FROM s.t WHERE id = $1";
    assert_eq!(endpoint.ints(light, vec![int(4)]).await, vec![40]);
    let statements: Vec<String> = (0..40).map(|first| in_list(first, 2_000)).collect();
    for sql in &statements {
        assert_eq!(endpoint.ints(sql, vec![int(985)]).await, vec![990]);
        let weight = endpoint.prepared.weight();
        assert!(weight <= MAX_WEIGHT, "{weight} bytes kept");
    }
    assert!(
        endpoint.prepared.len() < statements.len(),
        "{} plans of 2,000 constants kept",
        endpoint.prepared.len()
    );
    let hits = endpoint.prepared.hits();
    endpoint.ints(&statements[39], vec![int(0)]).await;
    assert_eq!(
        endpoint.prepared.hits(),
        hits + 1,
        "the newest plan was evicted"
    );
    endpoint.ints(light, vec![int(5)]).await;
    assert_eq!(
        endpoint.prepared.hits(),
        hits + 1,
        "the oldest plan was kept"
    );
}

/// `s.v`: ten rows of (id, emb: two float32s, 2 × id and 2 × id + 1).
fn vectors() -> RecordBatch {
    use arrow::array::{FixedSizeListArray, Float32Array};
    use arrow::datatypes::{DataType, Field};
    let item = Arc::new(Field::new("item", DataType::Float32, true));
    let emb = FixedSizeListArray::try_new(
        item,
        2,
        Arc::new(Float32Array::from_iter_values((0..20).map(|i| i as f32))),
        None,
    )
    .unwrap();
    RecordBatch::try_from_iter([
        ("id", Arc::new(Int64Array::from_iter_values(0..10)) as _),
        ("emb", Arc::new(emb) as _),
    ])
    .unwrap()
}

/// A kept plan holds no statement's budget — its calls and its searches' vectors (an
/// expression of the parameter, as Go sends a vector) are bound to each execution's own.
#[tokio::test]
async fn a_kept_plan_holds_no_statements_budget() {
    let endpoint = Endpoint::new().await;
    endpoint.create("v", vectors()).await;
    let sql = "SELECT id FROM s.v WHERE length(CAST(id AS VARCHAR)) > 0 \
               ORDER BY array_distance(emb, CAST(string_to_array($1, ',') AS FLOAT[])) LIMIT 1";
    for (text, nearest) in [("8,9", 4), ("2.5,3", 1), ("8,9", 4)] {
        assert_eq!(
            endpoint.ints(sql, vec![ScalarValue::from(text)]).await,
            vec![nearest],
            "{text}"
        );
    }
    assert_eq!(endpoint.prepared.hits(), 2);
    let [kept] = endpoint.prepared.kept().try_into().unwrap();
    let vectors = crate::flight::search::parameter_vectors(&kept);
    assert_eq!(vectors.len(), 1, "no search of a parameter: {kept}");
    let mut exprs = vectors;
    let _ = kept.apply_with_subqueries(|node| {
        exprs.extend(node.expressions());
        Ok(TreeNodeRecursion::Continue)
    });
    for e in exprs {
        assert!(!bounded::holds_a_budget(&e), "bound to a statement: {e}");
    }
}

/// A kept plan's later values are bound in place (only the expressions that hold them replaced
/// and simplified, schemas kept) when binding its first values so left every schema as
/// DataFusion's binding made it; the plan each execution gets is the one DataFusion's binding
/// of its values gives.
#[tokio::test]
async fn a_kept_plan_binds_its_values_in_place_as_datafusion_would() {
    let float = |v: f64| ScalarValue::Float64(Some(v));
    let cases = [
        (
            "SELECT v FROM s.t WHERE id = $1 OR id = $2 + 1",
            vec![int(5), int(7)],
            vec![int(9), int(40)],
            Binding::InPlace,
        ),
        (
            "SELECT id, v + $1 AS w FROM s.t WHERE id < $2 ORDER BY w DESC LIMIT 3",
            vec![int(1), int(50)],
            vec![int(-4), int(20)],
            Binding::InPlace,
        ),
        (
            "SELECT v FROM s.t WHERE id IN (SELECT id FROM s.t WHERE v > $1) AND v < $2",
            vec![float(300.0), int(900)],
            vec![float(10.0), int(100)],
            Binding::InPlace,
        ),
        (
            "SELECT id FROM s.v ORDER BY array_distance(emb, CAST(string_to_array($1, ',') AS FLOAT[])) LIMIT 2",
            vec![ScalarValue::from("8,9")],
            vec![ScalarValue::from("2.5,3")],
            Binding::InPlace,
        ),
        (
            "SELECT $1 AS x, v FROM s.t WHERE id = 3",
            vec![int(1)],
            vec![int(2)],
            Binding::InPlace,
        ),
        // `round`'s scale is its second argument's value: the first values give the kept
        // schema's type, later ones another, bound as DataFusion binds.
        (
            "SELECT round(CAST(v AS DECIMAL(38,4)), $1) AS r FROM s.t WHERE id < 3",
            vec![ScalarValue::Int32(Some(4))],
            vec![ScalarValue::Int32(Some(2))],
            Binding::InPlace,
        ),
        // Values the statement refuses first: bound as DataFusion binds.
        (
            "SELECT id FROM s.v ORDER BY array_distance(emb, CAST(string_to_array($1, ',') AS FLOAT[])) LIMIT 2",
            vec![ScalarValue::from("1,two")],
            vec![ScalarValue::from("2.5,3")],
            Binding::Recompute,
        ),
    ];
    for (sql, first, later, binding) in cases {
        let kept = Endpoint::new().await;
        kept.create("v", vectors()).await;
        let _ = kept.run_in(1 << 30, sql, first).await;
        let in_place = kept.bound_plan(sql, later.clone()).await;
        assert_eq!(kept.prepared.hits(), 1, "{sql}: not kept");
        assert_eq!(kept.prepared.bindings(), vec![binding], "{sql}");
        let fresh = Endpoint::new().await;
        fresh.create("v", vectors()).await;
        let recomputed = fresh.bound_plan(sql, later.clone()).await;
        assert_eq!(
            in_place.display_indent().to_string(),
            recomputed.display_indent().to_string(),
            "{sql}"
        );
        assert!(
            same_schemas(&schemas(&in_place), &schemas(&recomputed)),
            "{sql}: {:?} against {:?}",
            in_place.schema(),
            recomputed.schema()
        );
        assert_eq!(
            kept.run(sql, later.clone()).await,
            fresh.run(sql, later).await,
            "{sql}"
        );
    }
}

/// A kept plan is bound in place only if its schemas would come out the same: the same names
/// and types, and nullable wherever binding makes them.
#[test]
fn schemas_kept_in_place_must_match_those_binding_makes() {
    use arrow::datatypes::{DataType, Field};
    use datafusion::common::DFSchema;
    let schema =
        |fields: Vec<Field>| vec![Arc::new(DFSchema::try_from(Schema::new(fields)).unwrap())];
    let bound = schema(vec![Field::new("d", DataType::Float64, false)]);
    assert!(same_schemas(&bound, &bound));
    // A kept schema may say a column can be null where the value makes it cannot.
    let nullable = schema(vec![Field::new("d", DataType::Float64, true)]);
    assert!(same_schemas(&nullable, &bound));
    assert!(!same_schemas(&bound, &nullable));
    for other in [
        schema(vec![Field::new("d", DataType::Float32, false)]),
        schema(vec![Field::new("e", DataType::Float64, false)]),
        schema(vec![]),
        vec![],
    ] {
        assert!(!same_schemas(&other, &bound), "{other:?}");
    }
}

/// A prepared read of a version the statement names is kept for it while that version stays
/// what it was, whatever the latest is.
#[tokio::test]
async fn a_plan_of_a_named_version_is_kept() {
    let endpoint = Endpoint::new().await;
    endpoint
        .engine()
        .append(&table(), schema(), vec![rows(100..105)])
        .await
        .unwrap();
    let sql = "SELECT count(*) FROM s.\"t@v1\" WHERE id >= $1";
    assert_eq!(endpoint.ints(sql, vec![int(90)]).await, vec![10]);
    assert_eq!(endpoint.ints(sql, vec![int(95)]).await, vec![5]);
    assert_eq!(endpoint.prepared.hits(), 1);
}

/// An EXPLAIN (which holds the plan's text after every rule) is not kept.
#[tokio::test]
async fn an_explain_is_not_kept() {
    let endpoint = Endpoint::new().await;
    endpoint
        .run("EXPLAIN SELECT v FROM s.t WHERE id = $1", vec![int(3)])
        .await;
    assert_eq!(endpoint.prepared.len(), 0);
}

/// A value bound for a narrower column (a client's BIGINT for an INT column) reaches the scan
/// as that column's constant, as DataFusion makes of one written in: `n = 7`, not
/// `CAST(n AS BIGINT) = 7`, which no index or statistic serves.
#[tokio::test]
async fn a_wider_value_reaches_a_narrower_columns_scan_as_its_constant() {
    use arrow::array::Int32Array;
    let endpoint = Endpoint::new().await;
    let batch =
        RecordBatch::try_from_iter([("n", Arc::new(Int32Array::from_iter_values(0..10)) as _)])
            .unwrap();
    endpoint.create("n", batch).await;
    for _ in 0..2 {
        let shown = endpoint
            .shown_plan("SELECT n FROM s.n WHERE n = $1", vec![int(7)])
            .await;
        assert!(
            shown.contains("s.n.n = Int32(7)"),
            "the scan's filter is not the column's constant: {shown}"
        );
    }
    assert_eq!(endpoint.prepared.hits(), 1);
}

/// A bound value that is no vector of the column — text that is no number, another length —
/// gets the SQL function's own error, as it would written in, first and from a kept plan; a
/// good value after it is still answered.
#[tokio::test]
async fn a_value_that_is_no_vector_gets_the_functions_error() {
    let endpoint = Endpoint::new().await;
    endpoint.create("v", vectors()).await;
    let sql = "SELECT id FROM s.v \
               ORDER BY array_distance(emb, CAST(string_to_array($1, ',') AS FLOAT[])) LIMIT 1";
    for (text, names) in [
        ("1,two", "Cannot cast string 'two'"),
        (
            "1,2,3",
            "array_distance: Both arrays must have the same length",
        ),
        ("1,two", "Cannot cast string 'two'"),
    ] {
        let refused = endpoint
            .run_in(1 << 30, sql, vec![ScalarValue::from(text)])
            .await
            .expect_err(text);
        assert_eq!(
            refused.code(),
            tonic::Code::InvalidArgument,
            "{text}: {refused}"
        );
        assert!(refused.message().contains(names), "{text}: {refused}");
    }
    assert_eq!(
        endpoint.ints(sql, vec![ScalarValue::from("8,9")]).await,
        vec![4]
    );
    assert_eq!(
        endpoint.prepared.hits(),
        3,
        "the kept plan answered after the first"
    );
}
