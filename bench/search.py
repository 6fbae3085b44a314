"""Search bench: lake's vector and full-text search through Flight SQL beside pylance, in one run.

1. A top-10 vector search (`ORDER BY array_distance(emb, $1) LIMIT 10`, the vector bound as a
   prepared statement's parameter, through ADBC) on ROWS x 128 float32 vectors with an IVF_PQ
   index, p50 and p99, vs pylance `to_table(nearest=…)` in-process on the same dataset with the
   same search parameters (lake's defaults: nprobes 20, refine factor 10). Goal: <= 1.5x p50.
   Beside it, ADBC's floor: the same prepared search against a Flight SQL server that does
   nothing (floor_peer.py), in a process of its own.
2. The same SQL on a copy of the table without the index (DataFusion's exact top-k). Goal: the
   index >= 20x faster at p50. Recall@10 of the index against it is printed too.
3. A full-text search (`fts('s.docs', 'words') ORDER BY _score DESC LIMIT 10`) on DOCS rows with
   an INVERTED index vs pylance `to_table(full_text_query=…, limit=10)`.

usage: search.py LAKE_BINARY [ROWS] [QUERIES]
"""

import os
import shutil
import statistics
import sys
import tempfile
import time

import adbc_driver_flightsql.dbapi as flightsql
import lance
import numpy as np
import pyarrow as pa
import pyarrow.flight as flight

import floor_peer
from local_lake import Lake, statement_query
from report import Report

LAKE = sys.argv[1]
ROWS = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
QUERIES = int(sys.argv[3]) if len(sys.argv) > 3 else 200
DIM = 128
DOCS = 200_000
EXACT_QUERIES = 10
WORDS = ["fish", "red", "blue", "tank", "water", "cat", "boat", "river", "sea", "net",
         "lake", "rain", "sun", "moon", "star", "tree", "leaf", "rock", "sand", "wind"]
SEARCH = "SELECT id, array_distance(emb, $1) AS d FROM s.{} ORDER BY d LIMIT 10"


def vectors(rng, rows):
    centres = rng.normal(size=(max(rows // 100, 1), DIM)).astype(np.float32)
    out = np.empty((rows, DIM), np.float32)
    for start in range(0, rows, 100_000):
        n = min(100_000, rows - start)
        out[start:start + n] = centres[rng.integers(0, len(centres), n)] + 0.3 * rng.normal(size=(n, DIM))
    return out


def ingest(cur, table, data):
    batches = data.to_batches(max_chunksize=8192)
    cur.adbc_ingest(table, pa.RecordBatchReader.from_batches(data.schema, batches), mode="create",
                    db_schema_name="s")


def percentiles(times):
    times = sorted(times)
    return statistics.median(times) * 1000, times[min(len(times) - 1, int(len(times) * 0.99))] * 1000


def timed(fn, items):
    fn(items[0])  # warm-up
    out = []
    for item in items:
        started = time.perf_counter()
        fn(item)
        out.append(time.perf_counter() - started)
    return out


def main():
    data = tempfile.mkdtemp(prefix="lake-bench-search-")
    report = Report()
    try:
        run(data, report)
    finally:
        shutil.rmtree(data, ignore_errors=True)
    print(f"\nsearch bench: {ROWS:,} x {DIM} float32 vectors (IVF_PQ, l2), {QUERIES} queries "
          f"({EXACT_QUERIES} without the index); {DOCS:,} documents (INVERTED)")
    report.print()


def run(data, report):
    rng = np.random.default_rng(1)
    vecs = vectors(rng, ROWS)
    emb = pa.FixedSizeListArray.from_arrays(pa.array(vecs.ravel(), pa.float32()), DIM)
    table = pa.table({"id": pa.array(np.arange(ROWS), pa.int64()), "emb": emb})
    words = np.array(WORDS)
    bodies = [" ".join(words[rng.integers(0, len(WORDS), rng.integers(3, 12))]) for _ in range(DOCS)]
    docs = pa.table({"id": pa.array(np.arange(DOCS), pa.int64()), "body": pa.array(bodies)})
    queries = [vecs[i] + 0.3 * rng.normal(size=DIM).astype(np.float32)
               for i in rng.integers(0, ROWS, QUERIES)]
    texts = [" ".join(rng.choice(WORDS, 2, replace=False)) for _ in range(QUERIES)]

    lake = Lake(LAKE, data)
    try:
        with flightsql.connect(lake.metadata) as meta, meta.cursor() as cur:
            cur.execute("CREATE SCHEMA s")
            ingest(cur, "v", table)
            ingest(cur, "flat", table)
            ingest(cur, "docs", docs)
            started = time.perf_counter()
            cur.execute("CREATE INDEX e ON s.v USING IVF_PQ (emb) WITH (metric = 'l2')")
            build = time.perf_counter() - started
            cur.execute("CREATE INDEX b ON s.docs USING INVERTED (body)")
        print(f"IVF_PQ build: {build:.1f} s")
        dataset = lance.dataset(os.path.join(data, "s", "v.lance"))
        docs_dataset = lance.dataset(os.path.join(data, "s", "docs.lance"))
        with flightsql.connect(lake.query) as conn, conn.cursor() as cur:
            def lake_search(table):
                sql = SEARCH.format(table)
                cur.adbc_prepare(sql)

                def once(q):
                    params = pa.record_batch([pa.array([q], pa.list_(pa.float32()))], names=["$1"])
                    cur.execute(sql, params)
                    return [r[0] for r in cur.fetchall()]
                return once

            indexed = lake_search("v")
            lake_times = timed(indexed, queries)

            def pylance(q):
                return dataset.to_table(
                    nearest={"column": "emb", "q": q, "k": 10, "minimum_nprobes": 20, "refine_factor": 10},
                    columns=["id"])
            peer_times = timed(pylance, queries)

            # Where the time goes: the same search from a raw pyarrow.flight client (the vector
            # inline, GetFlightInfo + DoGet: no ADBC, no bind), and ADBC's floor for a prepared
            # statement with a bound parameter that does nothing.
            raw = flight.FlightClient(lake.query)

            def raw_search(q):
                literal = "[" + ",".join(repr(float(x)) for x in q) + "]"
                command = statement_query(
                    f"SELECT id, array_distance(emb, {literal}) AS d FROM s.v ORDER BY d LIMIT 10")
                info = raw.get_flight_info(flight.FlightDescriptor.for_command(command))
                return raw.do_get(info.endpoints[0].ticket).read_all()
            raw_times = timed(raw_search, queries)
            cur.adbc_prepare("SELECT $1 AS v")

            def adbc_floor(q):
                params = pa.record_batch([pa.array([q], pa.list_(pa.float32()))], names=["$1"])
                cur.execute("SELECT $1 AS v", params)
                return cur.fetchall()
            floor_times = timed(adbc_floor, queries)

            # The same prepared search against a Flight SQL server that does nothing (answers
            # ten rows built once): what the client and its three round trips cost any server.
            floor_server, floor_url = floor_peer.start()
            try:
                with flightsql.connect(floor_url) as floor_conn, floor_conn.cursor() as floor_cur:
                    sql = SEARCH.format("v")
                    floor_cur.adbc_prepare(sql)

                    def nothing_server(q):
                        params = pa.record_batch([pa.array([q], pa.list_(pa.float32()))], names=["$1"])
                        floor_cur.execute(sql, params)
                        return floor_cur.fetchall()
                    nothing_times = timed(nothing_server, queries)
            finally:
                floor_server.kill()
            exact = lake_search("flat")
            exact_times = timed(exact, queries[:EXACT_QUERIES])
            found = sum(len(set(indexed(q)) & set(exact(q))) for q in queries[:EXACT_QUERIES])

            def fts(text):
                cur.execute(f"SELECT id, _score FROM fts('s.docs', '{text}') ORDER BY _score DESC LIMIT 10")
                return cur.fetchall()
            fts_times = timed(fts, texts)
            fts_peer = timed(lambda t: docs_dataset.to_table(full_text_query=t, limit=10, columns=["id"]), texts)

        lake50, lake99 = percentiles(lake_times)
        peer50, peer99 = percentiles(peer_times)
        exact50, _ = percentiles(exact_times)
        fts50, fts99 = percentiles(fts_times)
        ftspeer50, ftspeer99 = percentiles(fts_peer)
        report.add("top-10 vector search p50 (ADBC vs pylance nearest)", lake50, peer50, "ms", 1.5)
        report.add("top-10 vector search p99 (ADBC vs pylance nearest)", lake99, peer99, "ms", None)
        report.add("  the same search, raw pyarrow.flight client, p50", percentiles(raw_times)[0], peer50,
                   "ms", 1.5)
        report.add("  ADBC prepared SELECT $1 with the vector bound, p50", percentiles(floor_times)[0], None,
                   "ms", None)
        nothing50 = percentiles(nothing_times)[0]
        report.add("  the prepared search against a do-nothing Flight SQL server (ADBC's floor), p50",
                   nothing50, None, "ms", None)
        # A server whose search took as long as pylance's whole call, after that floor. (A
        # server can do better only by overlapping the two: lake starts a read at its
        # GetFlightInfo, while the client turns the FlightInfo into a DoGet.)
        report.add("  that floor + pylance's time, one after the other, vs pylance", nothing50 + peer50,
                   peer50, "ms", None)
        # Here "lake" is the SQL without the index and "peer" the same SQL with it.
        report.add("top-10 p50 without the index / with it", exact50, lake50, "ms", 20,
                   higher_is_better=True)
        report.add(f"recall@10 vs exact ({EXACT_QUERIES} queries)", found / (10 * EXACT_QUERIES), None, "", None)
        report.add("full-text top-10 p50 (fts() vs pylance)", fts50, ftspeer50, "ms", None)
        report.add("full-text top-10 p99 (fts() vs pylance)", fts99, ftspeer99, "ms", None)
    finally:
        lake.stop()


if __name__ == "__main__":
    main()
