"""Maintenance bench: what a pass buys a table of many small commits, and what it costs beside
pylance doing the same, in one run on the same machine (docs/guides/maintenance.md).

1. `lake local`; COMMITS single-row INSERTs into b.small (each its own commit, as a service
   writing one row at a time), and the same rows in one INSERT into b.bulk.
2. Through ADBC: a full scan and a point query (`WHERE id = k`) of b.small, and the point query
   of b.bulk: medians of REPEATS after one warm-up.
3. `lake local` stops; the data directory is copied. `lake maintain --data` runs one pass on
   it (retention 0, grace 0: every old version goes; both tables), its own time as it reports
   it; pylance's `compact_files` + `cleanup_old_versions` run on the copy's two datasets, timed
   in-process.
4. `lake local` again: the scan and the point query of b.small after the pass.

Goals: scan after ≥ 5× faster than before; point query after ≤ 2× b.bulk's; the pass ≤ 1.2×
pylance's compaction + cleanup.

usage: maintenance.py LAKE_BINARY [COMMITS] [REPEATS]
"""

import datetime
import glob
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import adbc_driver_flightsql.dbapi as flightsql
import lance

from local_lake import Lake

LAKE = sys.argv[1]
COMMITS = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
REPEATS = int(sys.argv[3]) if len(sys.argv) > 3 else 7
POINT = COMMITS // 2


def median_time(fn):
    result = fn()
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def query(url, sql):
    def run():
        with flightsql.connect(url) as conn, conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetch_arrow_table().num_rows
    return run


def reads(lake, table):
    scan, rows = median_time(query(lake.query, f"SELECT * FROM b.{table}"))
    point, hits = median_time(query(lake.query, f"SELECT * FROM b.{table} WHERE id = {POINT}"))
    if rows != COMMITS or hits != 1:
        raise RuntimeError(f"b.{table}: {rows} rows, {hits} hits")
    return scan, point


def main():
    root = tempfile.mkdtemp(prefix="lake-maintenance-bench-")
    data = os.path.join(root, "lake")
    try:
        lake = Lake(LAKE, data)
        with flightsql.connect(lake.metadata) as conn, conn.cursor() as cur:
            for sql in ["CREATE SCHEMA b",
                        "CREATE TABLE b.small (id BIGINT, name VARCHAR, value DOUBLE)",
                        "CREATE TABLE b.bulk (id BIGINT, name VARCHAR, value DOUBLE)"]:
                cur.execute(sql)
            t0 = time.perf_counter()
            for i in range(COMMITS):
                cur.execute("INSERT INTO b.small VALUES (?, ?, ?)", (i, f"name-{i:012}", i * 0.5))
            writes = time.perf_counter() - t0
            values = ", ".join(f"({i}, 'name-{i:012}', {i * 0.5})" for i in range(COMMITS))
            cur.execute(f"INSERT INTO b.bulk VALUES {values}")
        before_scan, before_point = reads(lake, "small")
        _, bulk_point = reads(lake, "bulk")
        lake.stop()

        copy = os.path.join(root, "copy")
        shutil.copytree(data, copy)
        out = subprocess.run([LAKE, "maintain", "--data", data, "--retention-seconds", "0",
                              "--grace-seconds", "0"], capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"lake maintain failed:\n{out.stdout}{out.stderr}")
        lake_pass = float(re.search(r"failed in ([0-9.]+) s", out.stdout).group(1))
        summary = [line for line in out.stdout.splitlines() if line.startswith("b.small")]

        # Both tables, as lake's pass maintains both.
        datasets = sorted(d for d in glob.glob(os.path.join(copy, "*", "*.lance")) if os.path.isdir(d))
        small_dir = next(d for d in datasets if d.endswith("small.lance"))
        t0 = time.perf_counter()
        for dataset_dir in datasets:
            lance.dataset(dataset_dir).optimize.compact_files(
                target_rows_per_fragment=1024 * 1024, materialize_deletions_threshold=0.0)
            cleaned = lance.dataset(dataset_dir).cleanup_old_versions(
                older_than=datetime.timedelta(0), delete_unverified=True)
            if dataset_dir == small_dir:
                removed = cleaned
        pylance_pass = time.perf_counter() - t0
        fragments = len(lance.dataset(small_dir).get_fragments())

        lake = Lake(LAKE, data)
        after_scan, after_point = reads(lake, "small")
        lake.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)

    print(f"{COMMITS} single-row commits in {writes:.1f} s ({writes / COMMITS * 1e3:.1f} ms each)")
    print(f"lake's pass: {summary[0] if summary else '?'}")
    print(f"pylance: {fragments} fragment(s) after compaction, {removed.old_versions} versions "
          f"and {removed.bytes_removed} bytes removed")
    rows = [
        ("scan of b.small, before / after the pass", before_scan, after_scan, "≥ 5×", after_scan * 5 <= before_scan),
        ("point query of b.small after / of b.bulk", after_point, bulk_point, "≤ 2×", after_point <= 2 * bulk_point),
        ("the pass: lake / pylance compact+cleanup", lake_pass, pylance_pass, "≤ 1.2×", lake_pass <= 1.2 * pylance_pass),
    ]
    print(f"{'measure':<44} {'a (ms)':>10} {'b (ms)':>10} {'a/b':>8}  goal")
    for name, a, b, goal, met in rows:
        print(f"{name:<44} {a * 1e3:>10.1f} {b * 1e3:>10.1f} {a / b:>8.2f}  {goal} {'met' if met else 'MISSED'}")
    print(f"(point query before the pass: {before_point * 1e3:.1f} ms, "
          f"{before_point / bulk_point:.1f}× b.bulk's)")


main()
