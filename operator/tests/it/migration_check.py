"""After a migration: usage migration_check.py QUERY_URL TOKEN OPTIONS_JSON WAREHOUSE SOURCE_TABLE MIGRATED_TABLE NAME...

For each dataset sales.<NAME>: pylance opens it through `s3+ddb://` with the original lake's
manifest table and with the migrated one — same latest version, same rows — and the query
endpoint's SQL returns the same rows. Prints one JSON summary line."""

import json
import sys

import adbc_driver_flightsql.dbapi as flightsql
import lance

URL, TOKEN, OPTIONS, WAREHOUSE, SOURCE, MIGRATED = sys.argv[1:7]
NAMES = sys.argv[7:]
options = json.loads(OPTIONS)
checked = {"datasets": 0, "rows": 0, "versions": {}}
client = {"adbc.flight.sql.authorization_header": f"Bearer {TOKEN}"}
with flightsql.connect(URL, autocommit=True, db_kwargs=client) as conn, conn.cursor() as cur:
    for name in NAMES:
        uri = f"s3+ddb://{WAREHOUSE}/sales/{name}.lance?ddbTableName="
        before = lance.dataset(uri + SOURCE, storage_options=options)
        after = lance.dataset(uri + MIGRATED, storage_options=options)
        assert after.version == before.version, (name, before.version, after.version)
        rows = sorted(before.to_table().to_pylist(), key=lambda r: r["id"])
        assert sorted(after.to_table().to_pylist(), key=lambda r: r["id"]) == rows, name
        cur.execute(f"SELECT id, name FROM sales.{name} ORDER BY id")
        served = [{"id": i, "name": n} for i, n in cur.fetchall()]
        assert served == rows, (name, served[:3], rows[:3])
        checked["datasets"] += 1
        checked["rows"] += len(rows)
        checked["versions"][name] = after.version
print(json.dumps(checked))
