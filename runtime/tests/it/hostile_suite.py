"""Hostile and careless clients against a running `lake local`, through real ADBC and raw
pyarrow.flight. usage: hostile_suite.py QUERY_URL METADATA_URL DATA_DIR OUTSIDE_DIR

Each case asserts the secure outcome: the refusal and its gRPC code, nothing written outside the
lake (checked on disk), the data intact, and the server still answering.
"""

import json
import os
import sys
import time

import adbc_driver_flightsql.dbapi as flightsql
import adbc_driver_manager
import pyarrow as pa
import pyarrow.flight as flight

from flightsql_commands import command, pb_string
from suite import check, done

QUERY, METADATA, DATA, OUTSIDE = sys.argv[1:5]


def refused(name, conn, sql, code, fragment=""):
    """`sql` fails with `code` (and `fragment` in the message); returns the message."""
    with conn.cursor() as cur:
        try:
            cur.execute(sql)
            cur.fetchall()
        except adbc_driver_manager.Error as e:
            text = str(e)
            check(name, code in text and fragment in text, text)
            return text
    raise AssertionError(f"{name}: {sql[:120]!r} succeeded")


def rows(conn, sql):
    with conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetchall()


def alive(name):
    check(f"{name}: the query endpoint still answers", rows(query, "SELECT 1") == [(1,)])
    check(f"{name}: the metadata endpoint still answers", rows(meta, "SELECT 2") == [(2,)])


def nothing_outside(name):
    check(f"{name}: nothing written outside the lake", os.listdir(OUTSIDE) == [], os.listdir(OUTSIDE))


meta = flightsql.connect(METADATA, autocommit=True)
query = flightsql.connect(QUERY, autocommit=True)
rows(meta, "CREATE SCHEMA sales")
rows(meta, "CREATE TABLE sales.orders (id BIGINT, item VARCHAR)")
rows(meta, "INSERT INTO sales.orders VALUES (1, 'tea'), (2, 'cake')")
ORDERS = [(1, "tea"), (2, "cake")]


def intact(name):
    check(f"{name}: the data is intact", sorted(rows(query, "SELECT * FROM sales.orders")) == ORDERS)


# 1. Writes outside the rules: no file interface but the stage, whatever wraps it.
target = os.path.join(OUTSIDE, "x.csv")
manifest_dir = os.path.join(DATA, "sales", "orders.lance", "_versions")
for endpoint, conn in [("query", query), ("metadata", meta)]:
    for sql in [
        f"EXPLAIN ANALYZE COPY (SELECT 1 AS a) TO '{target}' STORED AS CSV",
        f"COPY (SELECT 1 AS a) TO '{target}' STORED AS CSV",
        f"EXPLAIN ANALYZE COPY (SELECT 1 AS a) TO '{manifest_dir}/99.manifest' STORED AS CSV",
        f"CREATE EXTERNAL TABLE leak (a INT) STORED AS CSV LOCATION '{OUTSIDE}/'",
    ]:
        refused(f"{endpoint}: {sql.split(' (')[0].split(' leak')[0]}", conn, sql, "PermissionDenied", "stage")
    refused(f"{endpoint}: EXPLAIN ANALYZE INSERT", conn,
            "EXPLAIN ANALYZE INSERT INTO sales.orders VALUES (3, 'pie')", "PermissionDenied")
nothing_outside("COPY TO / CREATE EXTERNAL TABLE")
check("no manifest was forged", sorted(os.listdir(manifest_dir)) == sorted(
    f for f in os.listdir(manifest_dir) if not f.startswith("99")), os.listdir(manifest_dir))
intact("COPY TO")
alive("COPY TO")

# 2. Semantics that would silently differ from the SQL: refused, naming the clause.
for sql, code, fragment in [
    ("INSERT OVERWRITE sales.orders VALUES (9, 'x')", "Unimplemented", "INSERT OVERWRITE"),
    ("REPLACE INTO sales.orders VALUES (9, 'x')", "", ""),
    ("CREATE OR REPLACE TABLE sales.orders (id BIGINT)", "Unimplemented", "OR REPLACE"),
    ("CREATE TEMPORARY TABLE sales.tmp (id BIGINT)", "Unimplemented", "emporary"),
    ("CREATE SCHEMA other.x", "NotFound", "other"),
]:
    with meta.cursor() as cur:
        try:
            cur.execute(sql)
            cur.fetchall()
            raise AssertionError(f"{sql!r} succeeded")
        except adbc_driver_manager.Error as e:
            text = str(e)
            # REPLACE INTO may not even parse in the generic dialect: any refusal but success.
            check(f"refused: {sql}", code in text and fragment in text, text)
check("no schema x was created in the lake catalog",
      ("x",) not in rows(query, "SELECT schema_name FROM information_schema.schemata"))
intact("semantics")

# 3. Ingest conforms by name and without loss, like COPY INTO; nothing lands as NULL.
rows(meta, "CREATE TABLE sales.typed (id INT, name VARCHAR)")
with meta.cursor() as cur:
    reordered = pa.table({"name": ["a"], "id": pa.array([7], pa.int32())})
    check("ingest matches columns by name",
          cur.adbc_ingest("typed", reordered, mode="append", db_schema_name="sales") == 1)
for label, data, column in [
    ("a value that does not fit", pa.table({"id": pa.array([2 ** 40], pa.int64()), "name": ["b"]}), '"id"'),
    ("a lossy type", pa.table({"id": pa.array([1.5], pa.float64()), "name": ["c"]}), '"id"'),
    ("a missing column", pa.table({"id": pa.array([1], pa.int32())}), '"name"'),
    ("an extra column", pa.table({"id": pa.array([1], pa.int32()), "name": ["d"], "x": [1]}), '"x"'),
]:
    with meta.cursor() as cur:
        try:
            cur.adbc_ingest("typed", data, mode="append", db_schema_name="sales")
            raise AssertionError(f"ingest of {label} succeeded")
        except adbc_driver_manager.Error as e:
            check(f"ingest refuses {label}, naming the column", "InvalidArgument" in str(e) and column in str(e), str(e))
check("only the conforming row landed, intact", rows(query, "SELECT id, name FROM sales.typed") == [(7, "a")])

# 4. A column's encoding choice (Lance's field metadata) that Lance cannot take: refused before
# a byte is written, naming the column and the key. Lance panics on some of these deep in its
# encoder, and an empty create would have made them the table's, failing every later append.
def encoded(key, value, n):
    field = pa.field("label", pa.string(), metadata={key: value})
    return pa.Table.from_arrays([pa.array([f"v{i % 10}" for i in range(n)], pa.string())], schema=pa.schema([field]))
def empty_create(table):
    # ADBC sends nothing for a table without rows: the schema alone, through pyarrow.flight.
    options = b"\x0a\x02\x08\x01"  # table definition: create, fail if it exists
    cmd = command("CommandStatementIngest", options + pb_string(2, "encoded") + pb_string(3, "sales"))
    writer, reader = flight.FlightClient(METADATA).do_put(flight.FlightDescriptor.for_command(cmd), table.schema)
    writer.done_writing()
    reader.read()
    writer.close()
for key, value in [("lance-encoding:dict-size-ratio", "5"), ("lance-encoding:dict-max-size", "x"),
                   ("lance-encoding:compression", "bogus"), ("lance-encoding:structural-encoding", "sparse"),
                   ("lance-encoding:compresion", "zstd")]:
    with meta.cursor() as cur:
        try:
            cur.adbc_ingest("encoded", encoded(key, value, 50_000), mode="create", db_schema_name="sales")
            raise AssertionError(f"ingest of {key} = {value} succeeded")
        except adbc_driver_manager.Error as e:
            check(f"ingest refuses {key} = {value}, naming the column",
                  "InvalidArgument" in str(e) and key in str(e) and '"label"' in str(e), str(e))
    try:
        empty_create(encoded(key, value, 0))
        raise AssertionError(f"an empty create with {key} = {value} succeeded")
    except (flight.FlightError, pa.ArrowInvalid) as e:
        check(f"an empty create with {key} = {value} is refused too",
              isinstance(e, pa.ArrowInvalid) and key in str(e) and '"label"' in str(e), f"{type(e).__name__}: {e}")
check("the refused creates left no table", ("encoded",) not in rows(
    query, "SELECT table_name FROM information_schema.tables WHERE table_schema = 'sales'"))
with meta.cursor() as cur:
    cur.adbc_ingest("encoded", encoded("lance-encoding:compression", "zstd", 50_000), mode="create",
                    db_schema_name="sales")
check("a good encoding choice is written", rows(query, "SELECT count(*) FROM sales.encoded") == [(50_000,)])
alive("encoding choices")

# 5. One request never takes the process down.
refused("a 100k-term expression", query, "SELECT " + "+".join(["1"] * 100_000), "InvalidArgument", "nest")
refused("a 100k-long IS NULL chain", query, "SELECT 1" + " IS NULL" * 100_000, "InvalidArgument", "nest")
refused("a 30,000-long CASE chain", query, "SELECT " + " + ".join(["CASE WHEN true THEN 1 END"] * 30_000), "InvalidArgument", "nest")
refused("a 100k-deep parenthesis", query, "SELECT " + "(" * 100_000 + "1" + ")" * 100_000, "InvalidArgument")
check("a 1,500-term expression is evaluated",
      rows(query, "SELECT " + "+".join(["1"] * 1500)) == [(1500,)])
alive("deep expression")
N = 2 ** 45
for sql in [f"SELECT repeat('x', {N})", f"SELECT repeat(arrow_cast('x', 'LargeUtf8'), {N})",
            f"SELECT repeat(arrow_cast('x', 'Utf8View'), {N})", f"SELECT lpad('x', {N})",
            f"SELECT rpad(arrow_cast('x', 'LargeUtf8'), {N}, 'ab')", f"SELECT array_repeat(1, {N})",
            "SELECT repeat(repeat('x', 1048576), 1048576)",
            f"SELECT repeat(item, {N}) FROM sales.orders",
            "SELECT array_repeat(array_repeat(1, 30000000), 30000000)",
            "SELECT array_resize([1], 1000000000000)",
            "SELECT replace(repeat('x', 1000000), 'x', repeat('y', 100000))",
            "SELECT regexp_replace(repeat('x', 1000000), 'x', repeat('y', 100000))"]:
    with query.cursor() as cur:
        try:
            cur.execute(sql)
            cur.fetchall()
            raise AssertionError(f"{sql} succeeded")
        except adbc_driver_manager.Error as e:
            check(f"{sql}: refused", "ResourceExhausted" in str(e), str(e))
# Each table a statement names is looked up while it is planned: naming thousands is refused
# before any lookup, naming a few hundred that do not exist is an ordinary NOT_FOUND.
many = " UNION ALL ".join(f"SELECT 1 FROM nowhere.t{i}" for i in range(300))
refused("a statement naming 300 tables", query, many, "InvalidArgument", "at most 256")
refused("a missing table in a missing schema", query, "SELECT * FROM nowhere.t", "NotFound", "nowhere.t")
alive("many table names")
check("a modest repeat still works", rows(query, "SELECT repeat('ab', 3) AS r") == [("ababab",)])
check("a large scalar repeated zero times per row is not copied per row", rows(query,
      "SELECT count(*) FROM (SELECT repeat(arrow_cast(repeat('x', 20000000), 'LargeUtf8'), value * 0) AS r "
      "FROM generate_series(1, 8192))") == [(8192,)])
check("modest replace and regexp_replace still work", rows(query,
      "SELECT replace('abc', 'b', 'xx'), regexp_replace('abc', 'b', 'yy')") == [("axxc", "ayyc")])
alive("huge allocations")

# Forged and altered statement handles: refused, the server unharmed.
client = flight.FlightClient(QUERY)
for label, handle in [
    ("forged JSON handle", json.dumps({"Sql": "SELECT 1"}).encode()),
    ("forged bound handle", json.dumps({"Bound": {"sql": "SELECT $1", "params": [0] * 64}}).encode()),
    ("garbage handle", b"\x00" * 40),
]:
    cmd = command("CommandPreparedStatementQuery", pb_string(1, handle))
    try:
        client.get_flight_info(flight.FlightDescriptor.for_command(cmd))
        raise AssertionError(f"{label} accepted")
    except (flight.FlightError, pa.ArrowInvalid) as e:
        check(f"{label}: refused", "unknown statement handle" in str(e), str(e))
# A genuine handle, altered by one byte.
with query.cursor() as cur:
    cur.adbc_prepare("SELECT 41 + 1 AS answer")
    cur.execute("SELECT 41 + 1 AS answer")
    check("a genuine prepared statement still works", cur.fetchall() == [(42,)])
try:
    ticket = client.get_flight_info(flight.FlightDescriptor.for_command(
        command("CommandStatementQuery", pb_string(1, b"SELECT 1")))).endpoints[0].ticket
    altered = bytearray(ticket.ticket)
    altered[-3] ^= 1
    client.do_get(flight.Ticket(bytes(altered))).read_all()
    raise AssertionError("an altered ticket was served")
except (flight.FlightError, pa.ArrowInvalid) as e:
    check("an altered ticket: refused", "unknown statement handle" in str(e) or "INVALID" in str(e).upper(), str(e))

# A zero-row parameter batch (and a two-row one) for a prepared query.
with query.cursor() as cur:
    cur.adbc_prepare("SELECT ? AS v")
    for n in [0, 2]:
        try:
            cur.execute("SELECT ? AS v", parameters=pa.record_batch([pa.array([7] * n)], names=["p"]))
            cur.fetchall()
        except adbc_driver_manager.Error as e:
            check(f"{n} parameter rows: a clean error", "InvalidArgument" in str(e) or "parameter" in str(e), str(e))
alive("handles and parameters")

# 11. No server path in what clients are told.
plan = "\n".join(str(r) for r in rows(query, "EXPLAIN SELECT * FROM sales.orders"))
check("EXPLAIN names no server path", DATA not in plan and "sales" in plan, plan)
analyzed = "\n".join(str(r) for r in rows(query, "EXPLAIN ANALYZE SELECT * FROM sales.orders"))
check("EXPLAIN ANALYZE names no server path", DATA not in analyzed, analyzed)

done()
