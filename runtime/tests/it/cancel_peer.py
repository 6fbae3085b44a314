"""Cancellation, both ways a client has: dropping the DoGet stream of a long query, and the
CancelFlightInfo action naming its FlightInfo. Each time the server stops working on it.
usage: cancel_peer.py QUERY_URL METADATA_URL SERVER_PID.
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


# The tests run beside other test binaries on two cores: the server may get a small share of a
# core, so "working" and "stopped" are judged by CPU time accumulated over generous deadlines, not
# by a rate over a fixed window.
DEADLINE = 30


def wait_idle(what):
    """Seconds until the server is idle again after `what`; fails after DEADLINE s. An operator
    finishes the batch it is on before its task yields, so the work takes a moment to stop (longer
    on a crowded machine); a query that is not cancelled keeps the server busy for hours."""
    cancelled = time.monotonic()
    while True:
        window = busy(0.5)
        if window < 0.05:
            return time.monotonic() - cancelled
        if time.monotonic() - cancelled > DEADLINE:
            raise SystemExit(f"the server kept working after {what}: {window:.2f} s of CPU in the last 0.5 s")


def wait_working(what, cpu):
    """Seconds until the server has spent `cpu` seconds of CPU on `what`; fails after DEADLINE s."""
    start, began = cpu_seconds(), time.monotonic()
    while cpu_seconds() - start < cpu:
        if time.monotonic() - began > DEADLINE:
            raise SystemExit(f"{what} is not running: the server used {cpu_seconds() - start:.2f} s of CPU in {DEADLINE} s")
        time.sleep(0.1)
    return time.monotonic() - began


def cancel_flight_info(info):
    """The CancelFlightInfo action: CancelFlightInfoRequest { info } → CancelFlightInfoResult."""
    data = info.serialize()
    size, n = b"", len(data)
    while True:
        byte, n = n & 0x7F, n >> 7
        size += bytes([byte | (0x80 if n else 0)])
        if not n:
            break
    results = list(client.do_action(flight.Action("CancelFlightInfo", b"\x0a" + size + data)))
    return results[0].body.to_pybytes()


CANCELLED, NOT_CANCELLABLE = b"\x08\x01", b"\x08\x03"


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

# GetFlightInfo starts the query (Flight SQL executes a statement there): the server works on it
# before any DoGet, and a query whose DoGet never comes stops after a grace (2 s), its slot freed.
idle = busy(1.0)
info = client.get_flight_info(descriptor)
started = wait_working("the query its GetFlightInfo started", 0.5)
abandoned = wait_idle("a started query whose DoGet never came")
print(f"server CPU: idle {idle:.2f} s in 1 s; 0.5 s of CPU {started:.1f} s after GetFlightInfo, "
      f"with no DoGet; idle again {abandoned:.1f} s later")
# Its ticket still runs: planned again.
reader = client.do_get(info.endpoints[0].ticket)
reader.schema
wait_working("the abandoned query's ticket", 0.5)
reader.cancel()
wait_idle("the client closed the stream")

info = client.get_flight_info(descriptor)
reader = client.do_get(info.endpoints[0].ticket)
reader.schema  # the stream is open and the query is running
working = wait_working("the query", 1.0)
reader.cancel()
stopped = wait_idle("the client closed the stream")
print(f"1 s of CPU in {working:.1f} s running; idle again {stopped:.1f} s after the cancel")

# CancelFlightInfo while the DoGet runs: the stream ends CANCELLED (never as if complete) and the
# server stops.
info = client.get_flight_info(descriptor)
reader = client.do_get(info.endpoints[0].ticket)
reader.schema
wait_working("the second query", 0.5)
status = cancel_flight_info(info)
if status != CANCELLED:
    raise SystemExit(f"CancelFlightInfo answered {status!r}, not CANCELLED")
try:
    reader.read_all()
    raise SystemExit("the cancelled stream ended as if complete")
except (flight.FlightError, KeyboardInterrupt) as e:
    # pyarrow's read_all turns a CANCELLED status into KeyboardInterrupt (as if the user pressed
    # Ctrl-C), raised while handling the FlightCancelledError.
    e = e.__context__ if isinstance(e, KeyboardInterrupt) else e
    if "cancel" not in str(e).lower():
        raise SystemExit(f"the cancelled stream failed, but not as cancelled: {e}")
stopped = wait_idle("CancelFlightInfo")
print(f"idle again {stopped:.1f} s after CancelFlightInfo")
if cancel_flight_info(info) != NOT_CANCELLABLE:
    raise SystemExit("a finished query was cancelled again")

# CancelFlightInfo before the DoGet: the query its GetFlightInfo started stops, the ticket is
# refused.
info = client.get_flight_info(descriptor)
wait_working("the query its GetFlightInfo started", 0.2)
if cancel_flight_info(info) != CANCELLED:
    raise SystemExit("a planned query was not cancelled")
wait_idle("CancelFlightInfo before the DoGet")
try:
    client.do_get(info.endpoints[0].ticket).read_all()
    raise SystemExit("the ticket of a cancelled query still ran")
except (flight.FlightError, KeyboardInterrupt) as e:
    # pyarrow's read_all turns a CANCELLED status into KeyboardInterrupt (as if the user pressed
    # Ctrl-C), raised while handling the FlightCancelledError.
    e = e.__context__ if isinstance(e, KeyboardInterrupt) else e
    if "cancel" not in str(e).lower():
        raise SystemExit(f"the cancelled ticket failed, but not as cancelled: {e}")
print("ok")
