"""Flight bench: lake's query endpoint beside its peers, in one run.

1. SELECT * of a 10M-row table through ADBC from `lake local`, vs a raw pyarrow.flight server
   serving the same Arrow batches from memory (the transport's limit).
2. A filtered aggregate through ADBC, vs pylance scanning the same Lance dataset in-process.
3. Small calls, p50 of 50: `SELECT 1` through ADBC vs a raw pyarrow.flight server's
   GetFlightInfo+DoGet of one row; the same pyarrow.flight client sending `SELECT 1` to lake as a
   Flight SQL command (the server's cost without ADBC's); a bare ListActions on each (the per-RPC
   floor).
Prints times, ratios, and the lake server's peak RSS.

usage: flight.py LAKE_BINARY [ROWS] [REPEATS]
"""

import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import adbc_driver_flightsql.dbapi as flightsql
import lance
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight

LAKE, ROWS, REPEATS = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 10_000_000, int(sys.argv[3]) if len(sys.argv) > 3 else 5


def start_lake(data):
    proc = subprocess.Popen(
        [LAKE, "local", "--data", data, "--query-addr", "127.0.0.1:0", "--metadata-addr", "127.0.0.1:0"],
        stdout=subprocess.PIPE, text=True)
    urls = {}
    while len(urls) < 2:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError("lake local exited")
        parts = line.split()
        if parts and parts[0] in ("query", "metadata"):
            urls[parts[0]] = parts[1]
    threading.Thread(target=lambda: proc.stdout.read(), daemon=True).start()
    return proc, urls["query"], urls["metadata"]


def _field(number, data):
    """A protobuf length-delimited field holding `data` (bytes)."""
    size, n = b"", len(data)
    while True:
        byte, n = n & 0x7F, n >> 7
        size += bytes([byte | (0x80 if n else 0)])
        if not n:
            return bytes([(number << 3) | 2]) + size + data


# CommandStatementQuery { query: "SELECT 1" } packed in a google.protobuf.Any.
SELECT_ONE = _field(1, b"type.googleapis.com/arrow.flight.protocol.sql.CommandStatementQuery") + _field(
    2, _field(1, b"SELECT 1"))


def peak_rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def timed(fn):
    times = []
    result = None
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


class MemoryServer(flight.FlightServerBase):
    def __init__(self, table):
        super().__init__("grpc://127.0.0.1:0")
        self.table = table
        self.one = pa.table({"one": pa.array([1], pa.int64())})

    def get_flight_info(self, context, descriptor):
        return flight.FlightInfo(self.one.schema, descriptor, [flight.FlightEndpoint(b"one", [])], 1, -1)

    def do_get(self, context, ticket):
        return flight.RecordBatchStream(self.one if ticket.ticket == b"one" else self.table)

    def list_actions(self, context):
        return []


def p50(fn, n=50):
    fn()  # warm the connection
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    data = tempfile.mkdtemp(prefix="lake-bench-")
    proc, query, metadata = start_lake(data)
    try:
        with flightsql.connect(metadata, autocommit=True) as conn, conn.cursor() as cur:
            cur.execute("CREATE SCHEMA big")
            cur.fetchall()
            cur.execute(f"CREATE TABLE big.t AS SELECT value AS id, value * 2 AS a, value * 3 AS b, value * 5 AS c FROM generate_series(1, {ROWS})")
            cur.fetchall()
        # Measure reads on a fresh server, so its peak RSS is the read's.
        proc.terminate()
        proc.wait()
        proc, query, _ = start_lake(data)
        conn = flightsql.connect(query, autocommit=True)

        def adbc_select_all():
            with conn.cursor() as cur:
                cur.execute("SELECT * FROM big.t")
                return cur.fetch_arrow_table()

        lake_select, table = timed(adbc_select_all)
        assert table.num_rows == ROWS
        nbytes = table.nbytes

        server = MemoryServer(table)
        threading.Thread(target=server.serve, daemon=True).start()
        client = flight.FlightClient(f"grpc://127.0.0.1:{server.port}")
        raw_select, raw = timed(lambda: client.do_get(flight.Ticket(b"t")).read_all())
        assert raw.num_rows == ROWS

        def adbc_select_one():
            with conn.cursor() as cur:
                cur.execute("SELECT 1")
                return cur.fetchall()

        def raw_select_one():
            info = client.get_flight_info(flight.FlightDescriptor.for_command(b"SELECT 1"))
            return client.do_get(info.endpoints[0].ticket).read_all()

        lake_client = flight.FlightClient(query)

        def raw_client_select_one():
            # The same pyarrow.flight client as the peer's row, speaking Flight SQL to lake: the
            # server's own cost, without ADBC's client overhead.
            info = lake_client.get_flight_info(flight.FlightDescriptor.for_command(SELECT_ONE))
            return lake_client.do_get(info.endpoints[0].ticket).read_all()

        lake_one = p50(adbc_select_one)
        lake_raw_one = p50(raw_client_select_one)
        raw_one = p50(raw_select_one)
        lake_rpc = p50(lambda: list(lake_client.list_actions()))
        raw_rpc = p50(lambda: list(client.list_actions()))
        server.shutdown()

        predicate = "id % 7 = 0 AND b > 1000"

        def adbc_aggregate():
            with conn.cursor() as cur:
                cur.execute(f"SELECT count(*), sum(a) FROM big.t WHERE {predicate}")
                return cur.fetchall()[0]

        dataset = lance.dataset(os.path.join(data, "big", "t.lance"))

        def pylance_aggregate():
            t = dataset.to_table(columns=["a"], filter=predicate)
            return (t.num_rows, pc.sum(t.column("a")).as_py())

        lake_agg, lake_answer = timed(adbc_aggregate)
        peer_agg, peer_answer = timed(pylance_aggregate)
        assert tuple(lake_answer) == tuple(peer_answer), (lake_answer, peer_answer)
        rss = peak_rss_mb(proc.pid)
        conn.close()
    finally:
        proc.terminate()
        proc.wait()

    mb = nbytes / 1e6
    print(f"flight bench: {ROWS:,} rows x 4 int64 ({mb:.0f} MB), median of {REPEATS}")
    print(f"{'measure':<44} {'lake':>10} {'peer':>10} {'lake/peer':>10}")
    print(f"{'SELECT * via ADBC vs raw pyarrow.flight (s)':<44} {lake_select:>10.3f} {raw_select:>10.3f} {lake_select / raw_select:>10.2f}")
    print(f"{'  throughput (MB/s)':<44} {mb / lake_select:>10.0f} {mb / raw_select:>10.0f}")
    print(f"{'filtered aggregate vs pylance in-process (s)':<44} {lake_agg:>10.3f} {peer_agg:>10.3f} {lake_agg / peer_agg:>10.2f}")
    print(f"{'SELECT 1 round trip p50 vs raw GetFlightInfo+DoGet (ms)':<44} {lake_one * 1e3:>10.2f} {raw_one * 1e3:>10.2f} {lake_one / raw_one:>10.2f}")
    print(f"{'  same client (pyarrow.flight) to both (ms)':<44} {lake_raw_one * 1e3:>10.2f} {raw_one * 1e3:>10.2f} {lake_raw_one / raw_one:>10.2f}")
    print(f"{'ListActions p50 vs raw pyarrow.flight (ms)':<44} {lake_rpc * 1e3:>10.2f} {raw_rpc * 1e3:>10.2f} {lake_rpc / raw_rpc:>10.2f}")
    print(f"lake server peak RSS: {rss:.0f} MB")


if __name__ == "__main__":
    main()
