"""The clients of an end-to-end lake: usage clients.py METADATA_URL METADATA_TOKEN QUERY_URL QUERY_TOKEN.

Writes through metadata with ADBC ingest (its token), reads through query with SQL (its token),
and checks each endpoint refuses the other's token and no token at all. Prints one line per check,
then a JSON summary line."""

import json
import sys

import adbc_driver_flightsql.dbapi as flightsql
import adbc_driver_manager
import pyarrow as pa

METADATA, METADATA_TOKEN, QUERY, QUERY_TOKEN = sys.argv[1:5]
passed = 0


def check(name, condition, detail=""):
    global passed
    if not condition:
        raise AssertionError(f"{name}: {detail}")
    passed += 1
    print(f"ok {name}", flush=True)


def connect(url, token):
    kwargs = {}
    if token is not None:
        kwargs["db_kwargs"] = {"adbc.flight.sql.authorization_header": f"Bearer {token}"}
    return flightsql.connect(url, autocommit=True, **kwargs)


def refused(name, url, token, sql="SELECT 1"):
    try:
        with connect(url, token) as conn, conn.cursor() as cur:
            cur.execute(sql)
            cur.fetchall()
    except adbc_driver_manager.Error as e:
        text = str(e)
        check(name, "Unauthenticated" in text or "UNAUTHENTICATED" in text, text)
        if token:
            check(f"{name}: the token is not echoed", token not in text, text)
        return
    raise AssertionError(f"{name}: it ran")


orders = pa.table({"id": pa.array(range(1, 1001), pa.int64()),
                   "amount": pa.array([i * 0.5 for i in range(1, 1001)], pa.float64())})
with connect(METADATA, METADATA_TOKEN) as conn, conn.cursor() as cur:
    cur.execute("CREATE SCHEMA sales")
    cur.fetchall()
    check("ingest through metadata", cur.adbc_ingest("orders", orders, mode="create", db_schema_name="sales") == 1000)

with connect(QUERY, QUERY_TOKEN) as conn, conn.cursor() as cur:
    cur.execute("SELECT count(*) AS n, sum(amount) AS total FROM sales.orders")
    rows = cur.fetchall()
    check("SQL through query", rows == [(1000, sum(i * 0.5 for i in range(1, 1001)))], rows)

refused("query without a token", QUERY, None)
refused("metadata without a token", METADATA, None)
refused("a query token on metadata", METADATA, QUERY_TOKEN)
refused("a metadata token on query", QUERY, METADATA_TOKEN)

print(json.dumps({"passed": passed}))
