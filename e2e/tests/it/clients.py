"""The clients of an end-to-end lake: usage clients.py METADATA_URL METADATA_TOKEN QUERY_URL QUERY_TOKEN.

Writes through metadata with ADBC ingest (its token), reads through query with SQL (its token).
TLS as lake_e2e.py says. Prints one line per check, then a JSON summary line."""

import json
import sys

import pyarrow as pa

from lake_e2e import check, connect

METADATA, METADATA_TOKEN, QUERY, QUERY_TOKEN = sys.argv[1:5]

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

print(json.dumps({"passed": 2}))
