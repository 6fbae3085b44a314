"""pylance side of the storage bench: the same appends and latest-version opens as lake's engine.

usage: storage_peer.py URI OPTIONS_JSON COMMITS ROWS OPENS  → one JSON line of numbers.
       storage_peer.py --scan URI OPTIONS_JSON REPEATS  → median full-scan times of an existing
       dataset, after one warm-up scan: opened afresh each time, and through one kept session.
"""

import json
import sys
import time

import lance
import pyarrow as pa


def batch(start: int, rows: int) -> pa.Table:
    ids = list(range(start, start + rows))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([f"name-{i:012}" for i in ids], pa.string()),
            "value": pa.array([i * 0.5 for i in ids], pa.float64()),
        }
    )


def scan(uri: str, options: dict, repeats: int) -> None:
    """Two peers: the dataset opened afresh each time (a script's cold caches), and opened again
    through one kept `lance.Session` (warm caches, as lake's query endpoint keeps them)."""
    rows = 0

    def median(open_latest) -> float:
        nonlocal rows
        open_latest().to_table()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            # The latest version, as a query would: the dataset is opened again each time.
            rows = open_latest().to_table().num_rows
            times.append(time.perf_counter() - t0)
        times.sort()
        return times[len(times) // 2]

    fresh = median(lambda: lance.dataset(uri, storage_options=options))
    session = lance.Session()
    kept = median(lambda: lance.dataset(uri, storage_options=options, session=session))
    print(json.dumps({"scan_s": fresh, "scan_session_s": kept, "rows": rows}))


def main() -> None:
    if sys.argv[1] == "--scan":
        scan(sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4]))
        return
    uri, options = sys.argv[1], json.loads(sys.argv[2])
    commits, rows, opens = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    lance.write_dataset(batch(-1, 1), uri, mode="create", storage_options=options)
    tables = [batch(c * rows, rows) for c in range(commits)]
    nbytes = sum(t.nbytes for t in tables)
    started = time.perf_counter()
    for t in tables:
        lance.write_dataset(t, uri, mode="append", storage_options=options)
    elapsed = time.perf_counter() - started
    times = []
    for _ in range(opens):
        t0 = time.perf_counter()
        ds = lance.dataset(uri, storage_options=options)
        times.append(time.perf_counter() - t0)
        assert ds.version == 1 + commits, ds.version
    times.sort()
    pick = lambda p: times[round((len(times) - 1) * p)] * 1e3  # noqa: E731
    print(
        json.dumps(
            {
                "rows_per_s": commits * rows / elapsed,
                "mb_per_s": nbytes / 1e6 / elapsed,
                "open_p50_ms": pick(0.5),
                "open_p95_ms": pick(0.95),
            }
        )
    )


if __name__ == "__main__":
    main()
