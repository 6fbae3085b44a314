"""Real Lance commits for a legacy fixture: usage legacy_write.py METADATA_URL TOKEN DATASETS VERSIONS.

Through a v2 metadata endpoint: CREATE SCHEMA sales, then per dataset CREATE TABLE sales.t<d> and
VERSIONS inserts of three rows each (one commit each). Prints the table names as JSON."""

import json
import sys

import adbc_driver_flightsql.dbapi as flightsql

URL, TOKEN, DATASETS, VERSIONS = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
options = {"adbc.flight.sql.authorization_header": f"Bearer {TOKEN}"}
names = [f"t{d}" for d in range(DATASETS)]
with flightsql.connect(URL, autocommit=True, db_kwargs=options) as conn, conn.cursor() as cur:
    cur.execute("CREATE SCHEMA sales")
    cur.fetchall()
    for d, name in enumerate(names):
        cur.execute(f"CREATE TABLE sales.{name} (id BIGINT, name VARCHAR)")
        cur.fetchall()
        for v in range(VERSIONS):
            rows = ", ".join(f"({d * 1000 + v * 10 + i}, 'd{d} v{v} r{i}')" for i in range(3))
            cur.execute(f"INSERT INTO sales.{name} VALUES {rows}")
            cur.fetchall()
print(json.dumps(names))
