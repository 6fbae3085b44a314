//! Clients that try to exhaust the server: impatient and idle ones, too many, too big.

use super::*;

/// Sends `CREATE TABLE sales.bigK AS …` for K in 0..6, each giving up after 50 ms, and prints
/// what each call ended with. Reading the 30 tables of its UNION makes planning yield many times
/// before the write starts (a client that gave up in such a pause once lost its write), and the
/// 200,000 rows are still being written when the client leaves.
pub(super) const IMPATIENT: &str = r#"
import sys, time, pyarrow.flight as flight
sys.path.insert(0, "runtime/tests/it")
from flightsql_commands import command, pb_string
client = flight.FlightClient(sys.argv[1])
# Connected first: on a loaded machine, connecting alone outlasted the first 50 ms deadline, and
# a statement the server never received is owed nothing.
client.get_flight_info(flight.FlightDescriptor.for_command(command("CommandStatementQuery", pb_string(1, b"SELECT 1"))))
union = " UNION ALL ".join(f"SELECT id FROM sales.t{i}" for i in range(30))
for k in range(6):
    sql = f"CREATE TABLE sales.big{k} AS SELECT id FROM ({union} UNION ALL SELECT value AS id FROM generate_series(1, 200000))"
    descriptor = flight.FlightDescriptor.for_command(command("CommandStatementQuery", pb_string(1, sql.encode())))
    try:
        client.get_flight_info(descriptor, flight.FlightCallOptions(timeout=0.05))
        print("finished in time")
    except flight.FlightError as e:
        text = str(e).lower()
        timed_out = isinstance(e, flight.FlightTimedOutError) or "deadline" in text or "timeout" in text
        print("gave up" if timed_out else f"failed: {type(e).__name__}: {e}")
# The connection stays open a while: a client that closes it at once can take a statement the
# server has not yet read along with it (nothing was received, so nothing is owed).
time.sleep(2)
"#;

pub(super) const DRAINED: &str = r#"
import os, signal, sys, time, pyarrow as pa, pyarrow.flight as flight
sys.path.insert(0, "runtime/tests/it")
from flightsql_commands import command, pb_string
from lake_checks import Checks
query, meta, pid = sys.argv[1], sys.argv[2], int(sys.argv[3])
checks = Checks()
N = 200_000
# A query in flight: its first batch read, the rest still to come.
q = flight.FlightClient(query)
info = q.get_flight_info(flight.FlightDescriptor.for_command(command(
    "CommandStatementQuery", pb_string(1, b"SELECT value FROM generate_series(1, 2000000)"))))
rows = q.do_get(info.endpoints[0].ticket)
first = rows.read_chunk().data.num_rows
# A write in flight: an ingest (create) with its first batch sent.
options = b"\x0a\x02\x08\x01"
cmd = command("CommandStatementIngest", options + pb_string(2, "drained") + pb_string(3, "sales"))
schema = pa.schema([("id", pa.int64())])
writer, reader = flight.FlightClient(meta).do_put(flight.FlightDescriptor.for_command(cmd), schema)
writer.write_batch(pa.record_batch([pa.array(range(N))], schema=schema))
time.sleep(0.3)
os.kill(pid, signal.SIGTERM)
time.sleep(1.0)
try:
    flight.FlightClient(query).get_flight_info(flight.FlightDescriptor.for_command(command(
        "CommandStatementQuery", pb_string(1, b"SELECT 1"))), flight.FlightCallOptions(timeout=5))
    checks.check("a new call after SIGTERM is refused", False, "it was served")
except flight.FlightError as e:
    checks.check("a new call after SIGTERM is refused", True)
writer.write_batch(pa.record_batch([pa.array(range(N, 2 * N))], schema=schema))
writer.done_writing()
result = reader.read()
writer.close()
checks.check("the write in flight finished", result is not None, "no result")
rest = rows.read_all().num_rows
checks.check(f"the query in flight sent every row ({first} + {rest})", first + rest == 2_000_000,
             f"{first + rest} rows")
checks.done()
"#;

/// SIGTERM (what Kubernetes sends a pod): new calls are refused, the calls in flight — a query
/// streaming its rows, an ingest still receiving them — finish within the grace period, and the
/// process stops cleanly with what they wrote committed.
#[test]
fn hostile_clients_sigterm_drains_and_stops() {
    let mut lake = LocalLake::start_with(&["--shutdown-grace", "20"]);
    sql_ok(&lake.metadata, "CREATE SCHEMA sales");
    let pid = lake.child.id();
    let started = Instant::now();
    let (ok, stdout, stderr) =
        python(&["-c", DRAINED, &lake.query, &lake.metadata, &pid.to_string()]);
    assert!(ok, "{stdout}{stderr}");
    assert!(stdout.contains("3 passed, 0 failed"), "{stdout}");
    let status = loop {
        if let Some(status) = lake.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(40),
            "lake local did not stop after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    // Stopped, not killed: what the drained write committed is there for the next start.
    let lake = LocalLake::start_in(lake.stop(), &[]);
    assert_eq!(
        sql_ok(&lake.query, "SELECT count(*) AS n FROM sales.drained"),
        "n\n400000\n"
    );
}

pub(super) const GOVERNED: &str = r#"
import sys, time, adbc_driver_flightsql.dbapi as flightsql, adbc_driver_manager
query = sys.argv[1]
def run(sql):
    with flightsql.connect(query, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetchall()
def refused(label, sql, code):
    started = time.monotonic()
    try:
        run(sql)
    except adbc_driver_manager.Error as e:
        assert code in str(e), f"{label}: {e}"
        print(f"ok {label} ({time.monotonic() - started:.1f} s)")
        return
    raise AssertionError(f"{label}: it ran")
# Time: 10^10 rows of cross join; the 2 s limit stops it.
refused("past its time limit", "SELECT count(*) FROM generate_series(1, 100000) a CROSS JOIN generate_series(1, 100000) b", "DeadlineExceeded")
# Memory: an aggregate of three million values does not fit in 8 MiB (and cannot spill).
refused("over its memory limit", "SELECT array_agg(value) FROM generate_series(1, 3000000)", "ResourceExhausted")
# Concurrency: one slot; a stream held open takes it.
holder = flightsql.connect(query, autocommit=True)
cur = holder.cursor()
cur.execute("SELECT * FROM generate_series(1, 100000000)")
reader = cur.fetch_record_batch()
reader.read_next_batch()
refused("one query too many", "SELECT 1", "ResourceExhausted")
# The holder never reads again: at its deadline (2 s) the slot is taken back anyway.
time.sleep(2.5)
assert run("SELECT 1") == [(1,)], "the unread stream kept its slot past its deadline"
print("ok a stream its client stopped reading loses its slot at the deadline")
cur.close(); holder.close()
print("4 passed, 0 failed")
"#;

#[test]
fn hostile_clients_resource_limits() {
    let lake = LocalLake::start_with(&[
        "--query-timeout-seconds",
        "2",
        "--query-memory-limit-mb",
        "8",
        "--max-concurrent-queries",
        "1",
    ]);
    let (ok, stdout, stderr) = python(&["-c", GOVERNED, &lake.query]);
    assert!(ok, "{stdout}{stderr}");
    assert!(stdout.contains("4 passed, 0 failed"), "{stdout}");
    // Still serving, and within limits a query runs as usual.
    assert_eq!(sql_ok(&lake.query, "SELECT 41 + 1 AS n"), "n\n42\n");
    let (ok, _, stderr) = Command::new(env!("CARGO_BIN_EXE_lake"))
        .args([
            "local",
            "--data",
            "/nonexistent-never",
            "--max-concurrent-queries",
            "0",
        ])
        .output()
        .map(|o| {
            (
                o.status.success(),
                (),
                String::from_utf8_lossy(&o.stderr).into_owned(),
            )
        })
        .unwrap();
    assert!(!ok && stderr.contains("above 0"), "{stderr}");
}

pub(super) const BIG_WRITES: &str = r#"
import os, sys, pyarrow as pa, pyarrow.parquet as pq, adbc_driver_flightsql.dbapi as flightsql
from lake_checks import Checks, ensure
metadata, pid, stage = sys.argv[1], sys.argv[2], sys.argv[3]
N = 30_000_000  # 240 MB of int64 once decoded
checks = Checks()
def mb(field):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field):
            return int(line.split()[1]) // 1024
    raise RuntimeError(f"no {field} for {pid}")
def grew(run):
    # The peak is reset before each step (clear_refs 5: VmHWM = VmRSS), so each step is
    # measured from where it starts, not against an earlier step's peak.
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")
    before = mb("VmRSS")
    result = run()
    return result, mb("VmHWM") - before
zeros = pa.table({"id": pa.array([0] * N, pa.int64())})
os.makedirs(os.path.join(stage, "in"), exist_ok=True)
pq.write_table(zeros, os.path.join(stage, "in", "zeros.parquet"), compression="zstd", row_group_size=1_000_000)
chunked = pa.Table.from_batches(zeros.to_batches(max_chunksize=1_000_000))
with flightsql.connect(metadata, autocommit=True) as conn, conn.cursor() as cur:
    # The probe sees memory held: 30M values aggregated into one list are held at once.
    _, held = grew(lambda: (cur.execute("SELECT cardinality(array_agg(value)) FROM generate_series(1, 30000000)"), cur.fetchall())[1])
    checks.check(f"the probe sees a statement that holds 240 MB (+{held} MB)", held >= 150, f"+{held} MB")
    cur.execute("CREATE SCHEMA s"); cur.fetchall()
    cur.execute("CREATE TABLE s.z (id BIGINT)"); cur.fetchall()
    for label, run in [
        ("COPY INTO", lambda: (cur.execute("COPY INTO s.z FROM 'in/zeros.parquet'"), cur.fetchall()[0][0])[1]),
        ("ingest append", lambda: cur.adbc_ingest("z", chunked, mode="append", db_schema_name="s")),
        ("INSERT ... SELECT", lambda: (cur.execute("INSERT INTO s.z SELECT value * 0 FROM generate_series(1, 30000000)"), cur.fetchall()[0][0])[1]),
        ("ingest create", lambda: cur.adbc_ingest("c", chunked, mode="create", db_schema_name="s")),
        ("ingest replace", lambda: cur.adbc_ingest("c", chunked, mode="replace", db_schema_name="s")),
        ("CREATE TABLE ... AS SELECT", lambda: (cur.execute("CREATE TABLE s.ctas AS SELECT value * 0 AS id FROM generate_series(1, 30000000)"), cur.fetchall()[0][0])[1]),
    ]:
        rows, up = grew(run)
        ensure(rows == N, f"{label}: {rows} rows")
        checks.check(f"{label}: {rows} rows, peak RSS +{up} MB", up < 120, f"held the rows in memory: +{up} MB for 240 MB of rows")
    for table, n in [("s.z", 3 * N), ("s.c", N), ("s.ctas", N)]:
        cur.execute(f"SELECT count(*) FROM {table}")
        ensure(cur.fetchall() == [(n,)], f"{table} lost rows")
checks.done()
"#;

/// Writes stream into their one commit: 240 MB of rows each through COPY INTO, ADBC ingest
/// (append, create, replace), INSERT … SELECT and CREATE TABLE … AS SELECT, with the server's
/// peak memory growing by less than half of that.
#[test]
fn hostile_clients_writes_larger_than_memory_stream() {
    let lake = LocalLake::start();
    let stage = lake.dir.path().join("_stage");
    let pid = lake.child.id().to_string();
    let (ok, stdout, stderr) = python(&[
        "-c",
        BIG_WRITES,
        &lake.metadata,
        &pid,
        stage.to_str().unwrap(),
    ]);
    assert!(ok, "{stdout}{stderr}");
    assert!(stdout.contains("7 passed, 0 failed"), "{stdout}");
    eprint!("{stdout}");
}

pub(super) const IDLE_INGEST: &str = r#"
import sys, threading, time, pyarrow as pa, pyarrow.flight as flight, adbc_driver_flightsql.dbapi as flightsql
sys.path.insert(0, "runtime/tests/it")
from flightsql_commands import command, pb_string
from lake_checks import Checks
meta, limit = sys.argv[1], float(sys.argv[2])
checks = Checks()
def sql(q):
    with flightsql.connect(meta, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(q)
        return cur.fetchall()
sql("CREATE SCHEMA sales"); sql("CREATE TABLE sales.t (id BIGINT)")
# ADBC ingest, append mode (table_definition_options { if_exists: APPEND }), by hand.
options = b"\x0a\x02\x10\x02"
cmd = command("CommandStatementIngest", options + pb_string(2, "t") + pb_string(3, "sales"))
schema = pa.schema([("id", pa.int64())])
writer, reader = flight.FlightClient(meta).do_put(flight.FlightDescriptor.for_command(cmd), schema)
writer.write_batch(pa.record_batch([pa.array([1, 2, 3])], schema=schema))
# The ingest streams into the table, holding its lock, and then sends nothing: when does the
# server stop it?
stopped = {}
def wait_for_the_server():
    try:
        reader.read()
        stopped["at"] = time.monotonic()
        # The call's status comes with its end.
        writer.close()
        stopped["error"] = None
    except Exception as e:
        stopped.setdefault("at", time.monotonic())
        stopped["error"] = e
watcher = threading.Thread(target=wait_for_the_server)
watcher.start()
time.sleep(0.5)
started = time.monotonic()
rows = sql("INSERT INTO sales.t VALUES (9)")
finished = time.monotonic()
watcher.join(limit + 10)
error = stopped.get("error")
checks.check("the idle ingest was stopped with DEADLINE_EXCEEDED",
             isinstance(error, flight.FlightTimedOutError) and "sent nothing" in str(error), repr(error))
checks.check(f"the other write waited for the ingest's lock ({finished - started:.1f} s)",
             "at" in stopped and finished >= stopped["at"] - 1.0,
             f"it finished {stopped.get('at', 0) - finished:.1f} s before the ingest was stopped")
checks.check("and no longer than the time limit", finished - started <= limit + 1.5,
             f"it waited {finished - started:.1f} s")
checks.check("the other write went through", rows == [(1,)], repr(rows))
checks.check("the idle ingest committed nothing", sql("SELECT id FROM sales.t") == [(9,)])
try:
    writer.close()
except Exception:
    pass
checks.done()
"#;

/// A streaming ingest holds its table's lock: a client that stops sending must not block the
/// table's other writes for longer than the endpoint's time limit.
#[test]
fn hostile_clients_an_idle_ingest_does_not_hold_the_table() {
    let lake = LocalLake::start_with(&["--query-timeout-seconds", "3"]);
    let (ok, stdout, stderr) = python(&["-c", IDLE_INGEST, &lake.metadata, "3"]);
    assert!(ok, "{stdout}{stderr}");
    assert!(stdout.contains("5 passed, 0 failed"), "{stdout}");
    eprint!("{stdout}");
}

pub(super) const FAILED_INGESTS: &str = r#"
import sys, time, pyarrow as pa, pyarrow.flight as flight, adbc_driver_flightsql.dbapi as flightsql
sys.path.insert(0, "runtime/tests/it")
from flightsql_commands import command, pb_string
query, meta = sys.argv[1], sys.argv[2]
def sql(url, q):
    with flightsql.connect(url, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(q)
        return cur.fetchall()
def abandoned(options, table, schema, batch):
    # An ingest that sends one batch, then nothing: the server stops it at its time limit.
    cmd = command("CommandStatementIngest", options + pb_string(2, table) + pb_string(3, "s"))
    writer, reader = flight.FlightClient(meta).do_put(flight.FlightDescriptor.for_command(cmd), schema)
    writer.write_batch(batch)
    time.sleep(3.5)
    try:
        writer.done_writing(); reader.read(); writer.close()
    except Exception as e:
        return e
    return None
sql(meta, "CREATE SCHEMA s"); sql(meta, "CREATE TABLE s.r (id BIGINT)"); sql(meta, "INSERT INTO s.r VALUES (1), (2), (3)")
names = pa.schema([("name", pa.string())])
failed = abandoned(b"\x0a\x02\x10\x03", "r", names, pa.record_batch([pa.array(["x"] * 1000)], schema=names))
assert isinstance(failed, flight.FlightTimedOutError), f"the abandoned replace: {failed!r}"
print("ok the abandoned replace failed with DEADLINE_EXCEEDED:", str(failed).splitlines()[0][:100])
assert sql(query, "SELECT id FROM s.r ORDER BY id") == [(1,), (2,), (3,)], "the failed replace changed the rows"
with flightsql.connect(meta, autocommit=True) as conn, conn.cursor() as cur:
    # The registration still has the old schema: an append of BIGINT ids conforms.
    cur.adbc_ingest("r", pa.table({"id": pa.array([4], pa.int64())}), mode="append", db_schema_name="s")
assert sql(query, "SELECT id FROM s.r ORDER BY id") == [(1,), (2,), (3,), (4,)]
print("ok the failed replace left the rows and the registration as they were")
failed = abandoned(b"\x0a\x02\x08\x01", "n", names, pa.record_batch([pa.array(["x"] * 1000)], schema=names))
assert isinstance(failed, flight.FlightTimedOutError), f"the abandoned create: {failed!r}"
tables = [t for (t,) in sql(meta, "SELECT table_name FROM information_schema.tables WHERE table_schema = 's'")]
assert "n" not in tables, f"the failed create left a table: {tables}"
assert sql(meta, "CREATE TABLE s.n (x INT)") == [(0,)], "the failed create's registration was not withdrawn"
print("ok the failed create left nothing behind")
print("3 passed, 0 failed")
"#;

/// A streamed ingest that fails part-way (here its client goes quiet) changes nothing: a
/// `replace` keeps the old rows and the old registration, a `create` leaves no table and no
/// registration behind.
#[test]
fn hostile_clients_a_failed_streamed_ingest_changes_nothing() {
    let lake = LocalLake::start_with(&["--query-timeout-seconds", "2"]);
    let (ok, stdout, stderr) = python(&["-c", FAILED_INGESTS, &lake.query, &lake.metadata]);
    assert!(ok, "{stdout}{stderr}");
    assert!(stdout.contains("3 passed, 0 failed"), "{stdout}");
    eprint!("{stdout}");
}
