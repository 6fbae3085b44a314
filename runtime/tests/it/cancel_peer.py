"""Cancellation = dropping the stream: a client cancels a DoGet of a long query and the server
stops working on it. usage: cancel_peer.py QUERY_URL METADATA_URL SERVER_PID.
"""

import os
import sys
import time

import adbc_driver_flightsql.dbapi as flightsql
import pyarrow as pa
import pyarrow.flight as flight

from flightsql_commands import command, pb_string

QUERY, METADATA, PID = sys.argv[1], sys.argv[2], int(sys.argv[3])
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds():
    """The server's user + system CPU time so far."""
    with open(f"/proc/{PID}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def busy(seconds):
    start = cpu_seconds()
    time.sleep(seconds)
    return cpu_seconds() - start


with flightsql.connect(METADATA) as conn, conn.cursor() as cur:
    cur.execute("CREATE SCHEMA sales")
    conn.commit()
    cur.adbc_ingest("big", pa.table({"k": pa.array(range(100_000), pa.int64())}), mode="create", db_schema_name="sales")


# 10^10 pairs: far longer than this script runs, and no row leaves until the end.
sql = "SELECT count(*) FROM sales.big a CROSS JOIN sales.big b WHERE (a.k + b.k) % 7 = 3"
client = flight.FlightClient(QUERY)
descriptor = flight.FlightDescriptor.for_command(command("CommandStatementQuery", pb_string(1, sql)))
info = client.get_flight_info(descriptor)
idle = busy(1.0)
reader = client.do_get(info.endpoints[0].ticket)
reader.schema  # the stream is open and the query is running
working = busy(2.0)
if working < 0.5:
    raise SystemExit(f"the query is not running: the server used {working:.2f} s of CPU in 2 s (idle: {idle:.2f} s)")
reader.cancel()
# An operator finishes the batch it is on before its task yields, so allow a few seconds for
# the work to stop; a query that is not cancelled keeps the server busy for hours.
cancelled = time.monotonic()
while True:
    window = busy(0.5)
    if window < 0.05:
        break
    if time.monotonic() - cancelled > 10:
        raise SystemExit(f"the server kept working after the client cancelled: {window:.2f} s of CPU in the last 0.5 s")
stopped = time.monotonic() - cancelled
print(f"server CPU: idle {idle:.2f} s/s, running {working / 2:.2f} s/s; idle again {stopped:.1f} s after the cancel")
print("ok")
