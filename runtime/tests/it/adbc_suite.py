"""Client peers against a running `lake local`: ADBC Flight SQL (the Python DB-API driver) and raw
pyarrow.flight. usage: adbc_suite.py QUERY_URL METADATA_URL. Exits non-zero on the first failure.
"""

import sys

import adbc_driver_flightsql.dbapi as flightsql
import adbc_driver_manager
import pyarrow as pa
import pyarrow.flight as flight

from flightsql_commands import command, pb_string
from suite import check, done

QUERY, METADATA = sys.argv[1], sys.argv[2]


def expect_error(name, cursor, sql, code, fragment):
    try:
        cursor.execute(sql)
        cursor.fetchall()
    except adbc_driver_manager.Error as e:
        text = str(e)
        check(name, code in text and fragment in text, text)
        return
    raise AssertionError(f"{name}: {sql!r} succeeded")


meta = flightsql.connect(METADATA, autocommit=True)
query = flightsql.connect(QUERY, autocommit=True)

with meta.cursor() as cur:
    cur.execute("CREATE SCHEMA sales")
    cur.fetchall()
    cur.execute("CREATE TABLE sales.orders (id BIGINT, item VARCHAR, price DOUBLE)")
    cur.fetchall()
    cur.execute("INSERT INTO sales.orders VALUES (1, 'tea', 2.5), (2, 'cake', 4.0), (3, 'pie', 3.25)")
    check("insert returns the row count", cur.fetchall() == [(3,)])
    cur.execute("INSERT INTO sales.orders SELECT id + 10, item, price * 2 FROM sales.orders")
    check("insert select", cur.fetchall() == [(3,)])
    cur.execute("DELETE FROM sales.orders WHERE id = 2")
    check("delete returns the row count", cur.fetchall() == [(1,)])
    cur.execute("CREATE TABLE sales.gone (x INT)")
    cur.fetchall()
    cur.execute("DROP TABLE sales.gone")
    cur.fetchall()
    expect_error("duplicate table", cur, "CREATE TABLE sales.orders (x INT)", "ALREADY_EXISTS", "sales.orders")
    # Bound parameters: one row through a query's prepared statement, many through
    # executemany (one DoPut of every row): each statement is one commit.
    cur.execute("CREATE TABLE sales.bound (id BIGINT, item VARCHAR, price DOUBLE)")
    cur.fetchall()
    cur.execute("INSERT INTO sales.bound VALUES (?, ?, ?)", parameters=(99, "bound", 1.0))
    check("a parameterised insert returns its row count", cur.fetchall() == [(1,)])
    cur.executemany("INSERT INTO sales.bound VALUES (?, ?, ?)", [(100 + i, f"many-{i}", i * 0.5) for i in range(500)])
    cur.execute('SELECT count(*), min(id), max(id), count(item) FROM sales."bound@v3"')
    check("executemany lands as one version", cur.fetchall() == [(501, 99, 599, 501)])
    try:
        cur.execute("DELETE FROM sales.bound WHERE id = ?", parameters=(99,))
        cur.fetchall()
        raise AssertionError("a parameterised delete ran")
    except adbc_driver_manager.Error as e:
        check("parameters elsewhere than INSERT are refused, not run unbound", "parameters bind only to INSERT" in str(e), str(e))
    cur.execute("SELECT count(*) FROM sales.bound")
    check("the refused delete deleted nothing", cur.fetchall() == [(501,)])
    try:
        cur.executemany("INSERT INTO sales.bound VALUES (?, ?, ?)", [(i, "x" * 24, 0.5) for i in range(300_000)])
        raise AssertionError("12 MB of bound rows were taken")
    except adbc_driver_manager.Error as e:
        check("bound rows over the limit are refused", "send fewer rows" in str(e), str(e))
    cur.execute("SELECT count(*) FROM sales.bound")
    check("the refused batch wrote nothing", cur.fetchall() == [(501,)])
    cur.execute("DROP TABLE sales.bound")
    cur.fetchall()

points = pa.table({"k": pa.array([1, 2, 3], pa.int64()), "v": pa.array(["a", "b", "c"])})
fewer = pa.table({"k": pa.array([7, 8], pa.int64()), "v": pa.array(["x", "y"])})


def expect_ingest_error(name, cursor, table, data, mode, code):
    try:
        cursor.adbc_ingest(table, data, mode=mode, db_schema_name="sales")
    except adbc_driver_manager.Error as e:
        check(name, code in str(e), str(e))
        return
    raise AssertionError(f"{name}: ingest succeeded")


with meta.cursor() as cur:
    check("ingest create", cur.adbc_ingest("points", points, mode="create", db_schema_name="sales") == 3)
    expect_ingest_error("ingest create over an existing table", cur, "points", points, "create", "ALREADY_EXISTS")
    check("ingest append", cur.adbc_ingest("points", points, mode="append", db_schema_name="sales") == 3)
    check("ingest replace", cur.adbc_ingest("points", fewer, mode="replace", db_schema_name="sales") == 2)
    check("ingest create_append", cur.adbc_ingest("more", points, mode="create_append", db_schema_name="sales") == 3)
    check("ingest create_append again", cur.adbc_ingest("more", points, mode="create_append", db_schema_name="sales") == 3)
    expect_ingest_error("ingest append to a missing table", cur, "missing", points, "append", "NOT_FOUND")

with query.cursor() as cur:
    expect_ingest_error("ingest on query", cur, "points", points, "append", "PermissionDenied")
    cur.execute("SELECT k FROM sales.points ORDER BY k")
    check("replace left only the new rows", cur.fetchall() == [(7,), (8,)])
    cur.execute('SELECT count(*) FROM sales."points@v1"')
    check("time travel to version 1", cur.fetchall() == [(3,)])
    cur.execute('SELECT count(*) FROM sales."points@v2"')
    check("time travel to version 2", cur.fetchall() == [(6,)])
    cur.execute("SELECT count(*) FROM sales.more")
    check("create_append appended", cur.fetchall() == [(6,)])

with query.cursor() as cur:
    cur.execute("SELECT id, item, price FROM sales.orders ORDER BY id")
    rows = cur.fetchall()
    check("select sees every committed write", [r[0] for r in rows] == [1, 3, 11, 12, 13], rows)
    cur.execute("SELECT item FROM sales.orders WHERE id > ? AND price < ? ORDER BY id", parameters=(1, 7.0))
    rows = cur.fetchall()
    check("prepared statement with parameters", rows == [("pie",), ("tea",), ("pie",)], rows)
    cur.execute("SELECT count(*) AS n, sum(price) AS total FROM sales.orders")
    check("aggregate", cur.fetchall() == [(5, 2.5 + 3.25 + 5.0 + 8.0 + 6.5)])
    cur.execute("SELECT * FROM sales.orders WHERE id < 0")
    table = cur.fetch_arrow_table()
    check("empty result still has the schema", table.num_rows == 0 and table.schema.names == ["id", "item", "price"])
    expect_error("bad SQL", cur, "SELEC 1", "INVALID_ARGUMENT", "SELEC")
    expect_error("unknown table", cur, "SELECT * FROM sales.nope", "NOT_FOUND", "nope")
    expect_error("insert on query", cur, "INSERT INTO sales.orders VALUES (9, 'x', 1.0)", "PermissionDenied", METADATA)
    expect_error("DDL on query", cur, "CREATE TABLE sales.t2 (x INT)", "PermissionDenied", METADATA)
    expect_error("delete on query", cur, "DELETE FROM sales.orders", "PermissionDenied", METADATA)

for depth in ["catalogs", "db_schemas", "tables", "all"]:
    objects = query.adbc_get_objects(depth=depth).read_all().to_pylist()
    check(f"get_objects depth={depth}", objects[0]["catalog_name"] == "lake", objects)
objects = query.adbc_get_objects(depth="all").read_all().to_pylist()
tables = objects[0]["catalog_db_schemas"][0]["db_schema_tables"]
check("get_objects lists tables", [t["table_name"] for t in tables] == ["more", "orders", "points"], tables)
orders = next(t for t in tables if t["table_name"] == "orders")
check("get_objects lists columns", [c["column_name"] for c in orders["table_columns"]] == ["id", "item", "price"])
schema = query.adbc_get_table_schema("orders", db_schema_filter="sales")
check("table schema lookup", schema.names == ["id", "item", "price"] and schema.field("price").type == pa.float64(), schema)
check("table types", query.adbc_get_table_types() == ["TABLE"])
info = query.adbc_get_info()
check("sql info names the server", info.get("vendor_name") == "lake", info)

# A second client peer: raw pyarrow.flight, with hand-encoded Flight SQL commands.
client = flight.FlightClient(QUERY)
info = client.get_flight_info(flight.FlightDescriptor.for_command(command("CommandGetTables")))
listed = client.do_get(info.endpoints[0].ticket).read_all().to_pylist()
check("pyarrow.flight lists tables", [(t["db_schema_name"], t["table_name"]) for t in listed] == [("sales", "more"), ("sales", "orders"), ("sales", "points")], listed)
info = client.get_flight_info(flight.FlightDescriptor.for_command(command("CommandStatementQuery", pb_string(1, "SELECT id FROM sales.orders ORDER BY id"))))
result = client.do_get(info.endpoints[0].ticket).read_all()
check("pyarrow.flight reads a table", result.column("id").to_pylist() == [1, 3, 11, 12, 13])
check("FlightInfo schema equals the DoGet schema", info.schema == result.schema, (info.schema, result.schema))

select = flight.FlightDescriptor.for_command(command("CommandStatementQuery", pb_string(1, "SELECT id FROM sales.orders ORDER BY id")))
check("GetSchema of a query equals its DoGet schema", client.get_schema(select).schema == result.schema)
tables_cmd = flight.FlightDescriptor.for_command(command("CommandGetTables"))
check("GetSchema of a catalog command", client.get_schema(tables_cmd).schema == client.get_flight_info(tables_cmd).schema)
with query.cursor() as cur:
    schema = cur.adbc_execute_schema("SELECT item, price * 2 AS doubled FROM sales.orders")
    cur.execute("SELECT item, price * 2 AS doubled FROM sales.orders")
    check("ADBC execute_schema equals the result schema", schema == cur.fetch_arrow_table().schema, schema)
insert = flight.FlightDescriptor.for_command(command("CommandStatementQuery", pb_string(1, "INSERT INTO sales.orders VALUES (99, 'x', 1.0)")))
try:
    client.get_schema(insert)
    raise AssertionError("GetSchema of a write on query succeeded")
except OSError as e:  # pyarrow reports PERMISSION_DENIED as "unauthorized"
    check("GetSchema of a write on query is PERMISSION_DENIED", "unauthorized" in str(e) and METADATA in str(e), str(e))
meta_client = flight.FlightClient(METADATA)
meta_client.get_schema(insert)
with query.cursor() as cur:
    cur.execute("SELECT count(*) FROM sales.orders WHERE id = 99")
    check("GetSchema never runs the write", cur.fetchall() == [(0,)])

info = client.get_flight_info(flight.FlightDescriptor.for_command(command("CommandGetPrimaryKeys", pb_string(3, "orders"))))
keys = client.do_get(info.endpoints[0].ticket).read_all()
check("primary keys: none, with the spec's schema", keys.num_rows == 0 and keys.schema.names[:4] == ["catalog_name", "db_schema_name", "table_name", "column_name"], keys.schema)
for keys_command in ("CommandGetExportedKeys", "CommandGetImportedKeys"):
    info = client.get_flight_info(flight.FlightDescriptor.for_command(command(keys_command, pb_string(3, "orders"))))
    keys = client.do_get(info.endpoints[0].ticket).read_all()
    check(f"{keys_command}: none, with the spec's schema",
          keys.num_rows == 0 and keys.schema.names[:3] == ["pk_catalog_name", "pk_db_schema_name", "pk_table_name"],
          keys.schema)
try:
    client.get_flight_info(flight.FlightDescriptor.for_command(command("CommandStatementSubstraitPlan")))
    raise AssertionError("Substrait plans should be unimplemented")
except pa.ArrowNotImplementedError as e:  # pyarrow's mapping of gRPC UNIMPLEMENTED
    check("unsupported requests answer UNIMPLEMENTED", "unimplemented" in str(e), str(e))

info = client.get_flight_info(flight.FlightDescriptor.for_command(command("CommandGetXdbcTypeInfo")))
types = client.do_get(info.endpoints[0].ticket).read_all().to_pylist()
names = [t["type_name"] for t in types]
check("xdbc type info lists the DDL types", {"BIGINT", "VARCHAR", "DOUBLE", "TIMESTAMP"} <= set(names), names)
info = client.get_flight_info(flight.FlightDescriptor.for_command(command("CommandGetXdbcTypeInfo", bytes([0x08, 0x0C]))))
only = client.do_get(info.endpoints[0].ticket).read_all().to_pylist()
check("xdbc type info filters by data type", [t["type_name"] for t in only] == ["VARCHAR"], only)

# GetSqlInfo with no ids: everything, as JDBC's DatabaseMetaData asks for it.
info = client.get_flight_info(flight.FlightDescriptor.for_command(command("CommandGetSqlInfo")))
sql_info = {row["info_name"]: row["value"] for row in client.do_get(info.endpoints[0].ticket).read_all().to_pylist()}
check("sql info: read-only on query", sql_info.get(3) is True, sql_info.get(3))
check("sql info: identifiers fold to lower case", sql_info.get(503) == 3, sql_info.get(503))
check("sql info: keywords", "SELECT" in (sql_info.get(508) or []), len(sql_info.get(508) or []))
check("sql info: numeric functions from DataFusion", {"abs", "sqrt"} <= set(sql_info.get(509) or []), sql_info.get(509))
check("sql info: string functions", {"lower", "upper"} <= set(sql_info.get(510) or []), sql_info.get(510))
check("sql info: datetime functions", "date_trunc" in (sql_info.get(512) or []), sql_info.get(512))
check("sql info: schema term", sql_info.get(529) == "schema", sql_info.get(529))

closed = list(client.do_action(flight.Action("CloseSession", b"")))
check("CloseSession is tolerated", len(closed) == 1 and closed[0].body.to_pybytes() == b"\x08\x01", closed)
try:
    list(client.do_action(flight.Action("Reboot", b"")))
    raise AssertionError("an unknown action succeeded")
except pa.ArrowNotImplementedError as e:
    check("unknown actions are UNIMPLEMENTED", "Reboot" in str(e), str(e))
check("ListActions advertises CloseSession", "CloseSession" in [a.type for a in client.list_actions()])

done()
