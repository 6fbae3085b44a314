"""Session options against a running `lake local`: ADBC's current schema (SetSessionOptions and
GetSessionOptions, carried in a cookie), and the cookie honoured by an endpoint that never saw the
SetSessionOptions call (no server state). usage: session_options.py QUERY_URL METADATA_URL.
Prints "ok <check>" lines; exits non-zero on the first failure.
"""

import sys
import time

import adbc_driver_flightsql.dbapi as flightsql
import adbc_driver_manager
import pyarrow as pa
import pyarrow.flight as flight

from flightsql_commands import command, pb_string
from suite import check, done

QUERY, METADATA = sys.argv[1], sys.argv[2]
NS = f"sess_{time.time_ns()}"
# ADBC drops cookies unless asked to keep them.
COOKIES = {"adbc.flight.sql.rpc.with_cookie_middleware": "true"}


def rows(conn, sql):
    with conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetchall()


def fails(conn, sql):
    try:
        rows(conn, sql)
    except adbc_driver_manager.Error as e:
        return str(e)
    raise AssertionError(f"{sql!r} succeeded")


# ADBC: the connection's current schema is a session option; unqualified names resolve in it,
# on both endpoints, for reads, writes and bulk ingest.
meta = flightsql.connect(METADATA, db_kwargs=COOKIES, autocommit=True)
query = flightsql.connect(QUERY, db_kwargs=COOKIES, autocommit=True)
rows(meta, f"CREATE SCHEMA {NS}")
check(
    "without a schema, an unqualified write is refused naming the option",
    "session's schema" in fails(meta, "CREATE TABLE t (id BIGINT)"),
)
meta.adbc_connection.set_options(**{"adbc.connection.db_schema": NS})
check("GetSessionOptions reports the schema", meta.adbc_current_db_schema == NS, meta.adbc_current_db_schema)
check("and lake's catalog", meta.adbc_current_catalog == "lake", meta.adbc_current_catalog)
rows(meta, "CREATE TABLE t (id BIGINT, name VARCHAR)")
check("INSERT into an unqualified table", rows(meta, "INSERT INTO t VALUES (1, 'tea'), (2, 'cake')") == [(2,)])
with meta.cursor() as cur:
    cur.execute("INSERT INTO t VALUES (?, ?)", parameters=(3, "jam"))
    cur.fetchall()
    cur.adbc_ingest("ingested", pa.table({"id": [7]}), mode="create")
check("the ingest landed in the session's schema", rows(meta, f"SELECT id FROM {NS}.ingested") == [(7,)])
check("DELETE from an unqualified table", rows(meta, "DELETE FROM t WHERE id = 2") == [(1,)])
query.adbc_connection.set_options(**{"adbc.connection.db_schema": NS})
check("SELECT from an unqualified table", rows(query, "SELECT id, name FROM t ORDER BY id") == [(1, "tea"), (3, "jam")])
with query.cursor() as cur:
    cur.execute("SELECT name FROM t WHERE id = ?", parameters=(3,))
    check("a prepared statement resolves in it too", cur.fetchall() == [("jam",)])
check("a qualified name still names its own schema", rows(query, f"SELECT count(*) FROM {NS}.t") == [(2,)])
check("SHOW INDEXES of an unqualified table", rows(query, "SHOW INDEXES FROM t") == [])
try:
    query.adbc_connection.set_options(**{"adbc.connection.db_schema": "Not-A-Schema"})
    raise AssertionError("an invalid schema name was accepted")
except adbc_driver_manager.Error as e:
    check("an invalid schema name is refused", "Not-A-Schema" in str(e) or "INVALID" in str(e).upper(), e)
check("the refused name changed nothing", query.adbc_current_db_schema == NS, query.adbc_current_db_schema)

# Another connection keeps its own session: names stay unqualified-refused there.
other = flightsql.connect(QUERY, db_kwargs=COOKIES, autocommit=True)
missing = fails(other, "SELECT * FROM t")
check("another connection has no schema", "NOT_FOUND" in missing and "lake.default.t" in missing, missing)
check("nor for SHOW INDEXES", "session's schema" in fails(other, "SHOW INDEXES FROM t"))
other.close()

# Raw Flight: the cookie from one endpoint's SetSessionOptions works on the other endpoint,
# which never saw the call: the session lives in the cookie, not in a server.

def set_schema_request(schema):
    """SetSessionOptionsRequest { session_options: { "schema": { string_value: schema } } }."""
    entry = pb_string(1, "schema") + pb_string(2, pb_string(1, schema))
    return pb_string(1, entry)


class Cookies(flight.ClientMiddlewareFactory):
    def __init__(self):
        self.cookies = []

    def start_call(self, info):
        factory = self

        class Middleware(flight.ClientMiddleware):
            def received_headers(self, headers):
                factory.cookies += headers.get("set-cookie", [])

        return Middleware()


jar = Cookies()
client = flight.FlightClient(QUERY, middleware=[jar])
list(client.do_action(flight.Action("SetSessionOptions", set_schema_request(NS))))
cookie = "; ".join(c.split(";")[0] for c in jar.cookies)
check("SetSessionOptions answers with a cookie", cookie.startswith("lake_schema="), jar.cookies)
elsewhere = flight.FlightClient(METADATA)
options = flight.FlightCallOptions(headers=[(b"cookie", cookie.encode())])
info = elsewhere.get_flight_info(
    flight.FlightDescriptor.for_command(command("CommandStatementQuery", pb_string(1, "SELECT count(*) AS n FROM t"))),
    options,
)
table = elsewhere.do_get(info.endpoints[0].ticket, options).read_all()
check("the other endpoint resolves the cookie's schema", table.column("n").to_pylist() == [2], table)
# A ticket carries the session it was issued in: redeemed again (its kept plan is gone after the
# first DoGet, so it is planned again) without any cookie, it still reads the session's t.
with_cookie = flight.FlightCallOptions(headers=[(b"cookie", cookie.encode())])
info = client.get_flight_info(
    flight.FlightDescriptor.for_command(command("CommandStatementQuery", pb_string(1, "SELECT count(*) AS n FROM t"))),
    with_cookie,
)
first = client.do_get(info.endpoints[0].ticket, with_cookie).read_all()
again = flight.FlightClient(QUERY).do_get(info.endpoints[0].ticket).read_all()
check("a ticket redeemed again without the cookie keeps its session", again.equals(first), (first, again))
closed = list(client.do_action(flight.Action("CloseSession", b"")))
check("CloseSession clears the cookie", any("Max-Age=0" in c for c in jar.cookies), jar.cookies)
# RESTORE names its table as any statement does: version 3 held (1, 2, 3), before the DELETE.
rows(meta, "RESTORE TABLE t TO VERSION 3")
check("RESTORE of an unqualified table", rows(query, f"SELECT id FROM {NS}.t ORDER BY id") == [(1,), (2,), (3,)])
done()
