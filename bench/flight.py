"""Flight bench: lake's Flight SQL endpoints beside their peers, in one run, against the goals.

Every measure runs lake and its peer in the same run on the same machine, warmed up once each,
and prints both, the ratio and the goal (docs/performance.md explains each):

1. SELECT * of a ROWS-row table through ADBC from `lake local`, vs a raw pyarrow.flight server
   streaming the same Arrow batches from memory (the transport's limit); and each client to both
   (the same pyarrow.flight client, and ADBC reading the raw server as a Flight SQL statement),
   which splits the gap into the server's share and the client's; and the same client against
   that server sending the table as pylance scans it from its Lance files (off-the-shelf parts
   doing lake's work).
2. A filtered aggregate through ADBC, vs pylance scanning the same Lance dataset in-process and
   DuckDB over that dataset (the faster of the two is the peer).
3. `SELECT 1` round trip p50: ADBC vs a raw pyarrow.flight server's GetFlightInfo+DoGet of one
   row; and the same pyarrow.flight client sending `SELECT 1` to lake (the server's own cost).
4. A point lookup `WHERE id = k` p50 vs pylance `to_table(filter=…)`.
5. ADBC bulk ingest of the table, vs pylance `write_dataset` of the same batches; and the same
   ingest into a server of off-the-shelf parts (pyarrow.flight receiving, pylance writing), and
   into that server discarding the rows (the transport alone).
6. 16 concurrent ADBC clients running small queries, vs 1 client: queries per second.
7. `lake local` start → first answer, idle RSS after start, and the server's peak RSS
   streaming the table out and ingesting it in (fresh servers, so each peak is its own).

The emulator scan (S3 + DynamoDB) is in `bench/run storage`.

usage: flight.py LAKE_BINARY [ROWS] [REPEATS]
"""

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import adbc_driver_flightsql.dbapi as flightsql
import duckdb
import lance
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight

import floor_peer
import ingest_peer
from local_lake import Lake, statement_query
from report import Report

LAKE = sys.argv[1]
ROWS = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000_000
REPEATS = int(sys.argv[3]) if len(sys.argv) > 3 else 5
CLIENTS = 16
SMALL_QUERIES = 640


SELECT_ONE = statement_query("SELECT 1")
SELECT_ALL_SQL = b"SELECT * FROM big.t"
SELECT_ALL = statement_query(SELECT_ALL_SQL.decode())


class MemoryServer(flight.FlightServerBase):
    """The transport's limit: a pyarrow.flight server answering from memory."""

    def __init__(self, table, dataset=None):
        super().__init__("grpc://127.0.0.1:0")
        self.table = table
        self.dataset = dataset
        self.one = pa.table({"one": pa.array([1], pa.int64())})

    def get_flight_info(self, context, descriptor):
        if is_select_all(descriptor.command):
            # What ADBC sends for `SELECT * FROM big.t`: answered with the table, so ADBC can
            # read the raw server too.
            endpoint = flight.FlightEndpoint(b"t", [])
            return flight.FlightInfo(self.table.schema, descriptor, [endpoint], self.table.num_rows, -1)
        if flight_sql_command(descriptor.command) is not None:
            # Any other Flight SQL command (ADBC asks for SqlInfo when it connects).
            raise flight.FlightUnimplementedError("not a Flight SQL server")
        return flight.FlightInfo(self.one.schema, descriptor, [flight.FlightEndpoint(b"one", [])], 1, -1)

    def do_get(self, context, ticket):
        if ticket.ticket == b"lance":
            # The table read from its Lance files by pylance as the rows are sent: what a server
            # of off-the-shelf parts pays for the same read, in batches of lake's size (faster
            # than pylance's default: 151 against 189 ms a read, 2026-12-06).
            return flight.RecordBatchStream(self.dataset.scanner(batch_size=65_536).to_reader())
        return flight.RecordBatchStream(self.one if ticket.ticket == b"one" else self.table)

    def list_actions(self, context):
        return []


def flight_sql_command(command):
    """(name, body) of a Flight SQL command packed in an `Any`, or None for other bytes."""
    try:
        fields = floor_peer._fields(command)
        if fields[1].decode().startswith(floor_peer.SQL):
            return floor_peer._unpack(command)
    except (KeyError, IndexError, ValueError):
        pass
    return None


def is_select_all(command):
    """Whether `command` is a Flight SQL statement `SELECT * FROM big.t` (as ADBC or
    `statement_query` packs it)."""
    name, body = flight_sql_command(command) or (None, b"")
    try:
        return name == "CommandStatementQuery" and floor_peer._fields(body).get(1) == SELECT_ALL_SQL
    except (IndexError, ValueError):
        return False


def adbc_select_all(conn):
    """`SELECT * FROM big.t` through ADBC, the whole result."""
    with conn.cursor() as cur:
        cur.execute(SELECT_ALL_SQL.decode())
        return cur.fetch_arrow_table()


def median_time(fn, repeats=REPEATS):
    """Median wall time of `fn` over `repeats` runs, after one warm-up run; and its result."""
    result = fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def p50(fn, n=50):
    return median_time(fn, n)[0]


def queries_per_second(endpoint, clients, sql, total):
    """`total` runs of `sql` split over `clients` concurrent ADBC connections (threads: the
    driver releases the GIL while it waits), after each has run it once."""
    connections = [flightsql.connect(endpoint, autocommit=True) for _ in range(clients)]
    start = threading.Barrier(clients + 1)
    errors = []

    def run(conn):
        def once():
            with conn.cursor() as cur:
                cur.execute(sql)
                cur.fetchall()
        try:
            once()
            start.wait()
            for _ in range(total // clients):
                once()
        except Exception as e:  # reported after the join
            errors.append(e)
            start.abort()

    threads = [threading.Thread(target=run, args=(c,)) for c in connections]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    for c in connections:
        c.close()
    if errors:
        raise errors[0]
    return (total // clients) * clients / elapsed


def first_answer(data):
    """Seconds from starting `lake local` on `data` to the first answer of `SELECT 1` through
    ADBC; the server's RSS (MiB) once started (serving, idle), and once it has answered one
    statement and gone idle again."""
    lake = Lake(LAKE, data)
    try:
        started_rss = lake.status("VmRSS")
        with flightsql.connect(lake.query, autocommit=True) as conn, conn.cursor() as cur:
            cur.execute("SELECT 1")
            cur.fetchall()
            elapsed = time.perf_counter() - lake.started
        time.sleep(0.5)
        return elapsed, started_rss, lake.status("VmRSS")
    finally:
        lake.stop()


def main():
    data = tempfile.mkdtemp(prefix="lake-bench-")
    report = Report()
    try:
        run(data, report)
    finally:
        shutil.rmtree(data, ignore_errors=True)
    print(f"\nflight bench: {ROWS:,} rows x 4 int64, median of {REPEATS} after a warm-up; "
          f"p50 of 50 for round trips; {CLIENTS} clients x {SMALL_QUERIES // CLIENTS} queries")
    report.print()


def run(data, report):
    lake = Lake(LAKE, data)
    with flightsql.connect(lake.metadata, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("CREATE SCHEMA big")
        cur.execute(f"CREATE TABLE big.t AS SELECT value AS id, value * 2 AS a, value * 3 AS b, "
                    f"value * 5 AS c FROM generate_series(1, {ROWS})")
        cur.execute("CREATE TABLE big.small AS SELECT value AS id FROM generate_series(1, 1000)")
    lake.stop()

    # Start-up and idle memory, on the data directory holding the table.
    starts = [first_answer(data) for _ in range(REPEATS)]
    start_s = statistics.median(s for s, _, _ in starts)
    idle_rss = statistics.median(r for _, r, _ in starts)
    answered_rss = statistics.median(r for _, _, r in starts)

    # Round trips first, on a fresh server and a fresh client (a client holding a large result
    # slows its own calls: ADBC's Go runtime then has a large heap to collect).
    lake = Lake(LAKE, data)
    conn = flightsql.connect(lake.query, autocommit=True)
    one = pa.table({"one": pa.array([1], pa.int64())})
    server = MemoryServer(one)
    threading.Thread(target=server.serve, daemon=True).start()
    client = flight.FlightClient(f"grpc://127.0.0.1:{server.port}")

    def adbc_select_one():
        with conn.cursor() as cur:
            cur.execute("SELECT 1")
            return cur.fetchall()

    def raw_select_one():
        info = client.get_flight_info(flight.FlightDescriptor.for_command(b"SELECT 1"))
        return client.do_get(info.endpoints[0].ticket).read_all()

    lake_client = flight.FlightClient(lake.query)

    def raw_client_select_one():
        info = lake_client.get_flight_info(flight.FlightDescriptor.for_command(SELECT_ONE))
        return lake_client.do_get(info.endpoints[0].ticket).read_all()

    raw_one = p50(raw_select_one)
    report.add("SELECT 1 p50 via ADBC vs raw GetFlightInfo+DoGet", p50(adbc_select_one) * 1e3,
               raw_one * 1e3, "ms", 2)
    report.add("  the same pyarrow.flight client to both", p50(raw_client_select_one) * 1e3,
               raw_one * 1e3, "ms", 2)
    report.add("  ListActions p50 (the per-RPC floor)", p50(lambda: list(lake_client.list_actions())) * 1e3,
               p50(lambda: list(client.list_actions())) * 1e3, "ms", 2)
    server.shutdown()
    conn.close()
    lake.stop()

    # Reads, on a fresh server, so its peak RSS is the read's.
    lake = Lake(LAKE, data)
    conn = flightsql.connect(lake.query, autocommit=True)

    lake_select, table = median_time(lambda: adbc_select_all(conn))
    assert table.num_rows == ROWS
    mb = table.nbytes / 1e6
    read_rss = lake.status("VmHWM")

    lake_client = flight.FlightClient(lake.query)

    def raw_client_select_all():
        info = lake_client.get_flight_info(flight.FlightDescriptor.for_command(SELECT_ALL))
        return lake_client.do_get(info.endpoints[0].ticket).read_all()

    lake_raw_select, _ = median_time(raw_client_select_all)

    # The table's Lance dataset, as pylance opens it: the scan peer here, the aggregate's below.
    dataset = lance.dataset(os.path.join(data, "big", "t.lance"))
    server = MemoryServer(table, dataset)
    threading.Thread(target=server.serve, daemon=True).start()
    client = flight.FlightClient(f"grpc://127.0.0.1:{server.port}")
    raw_select, raw = median_time(lambda: client.do_get(flight.Ticket(b"t")).read_all())
    assert raw.num_rows == ROWS
    del raw
    lance_select, raw = median_time(lambda: client.do_get(flight.Ticket(b"lance")).read_all())
    assert raw.num_rows == ROWS
    del raw
    raw_conn = flightsql.connect(f"grpc://127.0.0.1:{server.port}", autocommit=True)
    adbc_raw_select, raw = median_time(lambda: adbc_select_all(raw_conn))
    assert raw.num_rows == ROWS
    raw_conn.close()
    report.add(f"SELECT * {ROWS:,} rows via ADBC vs raw pyarrow.flight", mb / lake_select,
               mb / raw_select, "MB/s", 0.9, higher_is_better=True)
    report.add("  the same pyarrow.flight client to both", mb / lake_raw_select,
               mb / raw_select, "MB/s", 0.9, higher_is_better=True)
    report.add("  ADBC to both (the raw server as a Flight SQL statement)", mb / lake_select,
               mb / adbc_raw_select, "MB/s", 0.9, higher_is_better=True)
    report.add("  the same client to pyarrow.flight sending a pylance scan", mb / lake_raw_select,
               mb / lance_select, "MB/s", None)
    server.shutdown()
    del raw, table

    # The filtered aggregate, against the faster of pylance in-process and DuckDB.
    predicate = "id % 7 = 0 AND b > 1000"
    aggregate = f"SELECT count(*), sum(a) FROM big.t WHERE {predicate}"

    def adbc_aggregate():
        with conn.cursor() as cur:
            cur.execute(aggregate)
            return tuple(cur.fetchall()[0])

    def pylance_aggregate():
        t = dataset.to_table(columns=["a"], filter=predicate)
        return (t.num_rows, pc.sum(t.column("a")).as_py())

    duck = duckdb.connect()
    duck.register("t", dataset)

    def duckdb_aggregate():
        return tuple(duck.execute(f"SELECT count(*), sum(a) FROM t WHERE {predicate}").fetchone())

    lake_agg, lake_answer = median_time(adbc_aggregate)
    pylance_agg, pylance_answer = median_time(pylance_aggregate)
    duckdb_agg, duckdb_answer = median_time(duckdb_aggregate)
    assert lake_answer == pylance_answer == duckdb_answer, (lake_answer, pylance_answer, duckdb_answer)
    report.add(f"filtered aggregate vs pylance ({pylance_agg * 1e3:.0f} ms) / DuckDB ({duckdb_agg * 1e3:.0f} ms)",
               lake_agg * 1e3, min(pylance_agg, duckdb_agg) * 1e3, "ms", 1.1)

    # Point lookups: keys spread over the table, the same keys for both.
    keys = [1 + (i * 7_919_993) % ROWS for i in range(51)]

    def lookups(fn):
        fn(keys[0])
        times = []
        for k in keys[1:]:
            t0 = time.perf_counter()
            fn(k)
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    def adbc_lookup(k):
        with conn.cursor() as cur:
            cur.execute(f"SELECT * FROM big.t WHERE id = {k}")
            rows = cur.fetchall()
        assert len(rows) == 1 and rows[0][0] == k, rows

    def pylance_lookup(k):
        assert dataset.to_table(filter=f"id = {k}").num_rows == 1

    report.add(f"point lookup WHERE id = k p50 vs pylance", lookups(adbc_lookup) * 1e3,
               lookups(pylance_lookup) * 1e3, "ms", 1.5)

    # JDBC (row by row through ResultSet, as BI tools read) beside ADBC, the same 1M rows.
    million = f"SELECT * FROM big.t WHERE id <= {min(ROWS, 1_000_000)}"
    jar = os.path.join(os.environ["LAKE_CACHE"], "clients", "flight-sql-jdbc-driver-18.3.0.jar")
    suite = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runtime", "tests", "clients",
                         "JdbcConformance.java")

    def jdbc_select():
        out = subprocess.run(["java", "--add-opens=java.base/java.nio=ALL-UNNAMED", "-cp", jar, suite,
                              "--select-all", lake.query, million], capture_output=True, text=True, check=True)
        line = next(l for l in out.stdout.splitlines() if " rows in " in l)
        return float(line.split(" rows in ")[1].split()[0])

    def adbc_million():
        with conn.cursor() as cur:
            cur.execute(million)
            return cur.fetch_arrow_table()

    jdbc_s = statistics.median(jdbc_select() for _ in range(3))
    adbc_s, million_table = median_time(adbc_million, 3)
    million_mb = million_table.nbytes / 1e6
    report.add("SELECT * 1M rows via JDBC (ResultSet) vs ADBC", million_mb / jdbc_s, million_mb / adbc_s,
               "MB/s", None)

    # Concurrency: many small queries at once against one.
    small = "SELECT sum(id) FROM big.small"
    one_client = queries_per_second(lake.query, 1, small, SMALL_QUERIES // 4)
    many_clients = queries_per_second(lake.query, CLIENTS, small, SMALL_QUERIES)
    report.add(f"{CLIENTS} concurrent clients vs 1, small queries", many_clients, one_client,
               "q/s", 1.6, higher_is_better=True)
    conn.close()
    lake.stop()

    # Ingest: the same batches through ADBC into a fresh server, and through pylance.
    source = dataset.to_table()
    nbytes = source.nbytes / 1e6
    lake = Lake(LAKE, data)
    ingests = []
    with flightsql.connect(lake.metadata, autocommit=True) as conn:
        for i in range(max(1, REPEATS // 2)):
            with conn.cursor() as cur:
                t0 = time.perf_counter()
                cur.adbc_ingest(f"copy{i}", source, mode="create", db_schema_name="big")
                ingests.append(time.perf_counter() - t0)
    ingest_rss = lake.status("VmHWM")
    lake.stop()
    writes = []
    for i in range(max(1, REPEATS // 2)):
        target = os.path.join(data, f"peer{i}.lance")
        t0 = time.perf_counter()
        lance.write_dataset(source, target, mode="create")
        writes.append(time.perf_counter() - t0)
    report.add("ADBC ingest vs pylance write_dataset", nbytes / statistics.median(ingests),
               nbytes / statistics.median(writes), "MB/s", 0.8, higher_is_better=True)

    # The same ADBC ingest into off-the-shelf parts (pyarrow.flight's C++ gRPC server writing
    # with pylance), and into that server discarding the rows: what the transport costs any
    # server, beside what lake pays for it.
    peer, peer_url = ingest_peer.start()
    try:
        with flightsql.connect(peer_url, autocommit=True) as conn:
            def peer_ingest(table):
                with conn.cursor() as cur:
                    t0 = time.perf_counter()
                    cur.adbc_ingest(table, source, mode="create", db_schema_name="big")
                    return time.perf_counter() - t0
            peer_ingest("warm")
            peer_ingest("discard-warm")
            peer_writes = [peer_ingest(f"copy{i}") for i in range(max(1, REPEATS // 2))]
            transport = [peer_ingest(f"discard{i}") for i in range(max(1, REPEATS // 2))]
    finally:
        peer.kill()
    report.add("  ADBC ingest vs pyarrow.flight + pylance server", nbytes / statistics.median(ingests),
               nbytes / statistics.median(peer_writes), "MB/s", None)
    report.add("  that server's transport alone vs pylance", nbytes / statistics.median(transport),
               nbytes / statistics.median(writes), "MB/s", None)

    report.add("lake local start -> first answer", start_s, None, "s", None, limit=0.5)
    report.add("idle RSS after start", idle_rss, None, "MiB", None, limit=64)
    report.add("  idle RSS after one statement", answered_rss, None, "MiB", None)
    report.add(f"peak RSS streaming {mb:.0f} MB out", read_rss, None, "MiB", None, limit=512)
    report.add(f"peak RSS ingesting {nbytes:.0f} MB", ingest_rss, None, "MiB", None, limit=512)


if __name__ == "__main__":
    main()
