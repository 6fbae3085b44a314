"""A distributed statement on a LakeCluster's query pods: usage distributed_check.py METADATA_URL
METADATA_TOKEN QUERY_URL QUERY_TOKEN.

Writes a table in six commits (six fragments) through metadata, then asks query — whose pods are
all workers — until its EXPLAIN ANALYZE shows the scan spread over at least two tasks (the pods
find each other within seconds of being ready), with disjoint fragments; the answer must equal
the single-node answer (metadata plans alone, and the rows themselves). Prints one line per check,
then a JSON summary line."""

import json
import re
import sys
import time

import pyarrow as pa

from lake_e2e import check, connect

METADATA, METADATA_TOKEN, QUERY, QUERY_TOKEN = sys.argv[1:5]

ROWS, COMMITS = 2000, 6
SQL = "SELECT count(*) AS n, count(DISTINCT g) AS groups, sum(id) AS total FROM spread.t WHERE g <> 3"
expected = [(sum(1 for i in range(ROWS * COMMITS) if i % 7 != 3),
             6,
             sum(i for i in range(ROWS * COMMITS) if i % 7 != 3))]

with connect(METADATA, METADATA_TOKEN) as conn, conn.cursor() as cur:
    cur.execute("CREATE SCHEMA spread")
    cur.fetchall()
    for c in range(COMMITS):
        ids = range(c * ROWS, (c + 1) * ROWS)
        part = pa.table({"id": pa.array(ids, pa.int64()), "g": pa.array([i % 7 for i in ids], pa.int64())})
        cur.adbc_ingest("t", part, mode="create" if c == 0 else "append", db_schema_name="spread")
    cur.execute(SQL)
    single = cur.fetchall()
check("the single-node answer is the rows'", single == expected, (single, expected))


def scan_tasks(plan):
    """The fragment groups of each distributed scan task in an analyzed plan."""
    tasks = []
    for line in plan.splitlines():
        if ": LakeScanExec:" in line and "fragments=" in line:
            groups = line.split("fragments=", 1)[1]
            groups = groups[: groups.index("]]") + 2]
            tasks.append([int(n) for n in re.findall(r"\d+", groups)])
    return tasks


with connect(QUERY, QUERY_TOKEN) as conn, conn.cursor() as cur:
    tasks, plan = [], ""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        cur.execute("EXPLAIN ANALYZE " + SQL)
        plan = "\n".join(" | ".join(str(v) for v in row) for row in cur.fetchall())
        tasks = scan_tasks(plan)
        if len(tasks) >= 2:
            break
        time.sleep(1)
    check("the scan ran as tasks on several query pods", len(tasks) >= 2, plan)
    fragments = [f for task in tasks for f in task]
    check("no fragment twice", len(fragments) == len(set(fragments)) == COMMITS, tasks)
    cur.execute(SQL)
    rows = cur.fetchall()
    check("the distributed answer is the single-node answer", rows == single, (rows, single))

print(json.dumps({"passed": 4, "tasks": len(tasks)}))
