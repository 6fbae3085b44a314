"""`lake local` as a process, for the benches that drive it through its endpoints."""

import subprocess
import sys
import threading
import time


class Lake:
    """`lake local` on `data`, as a process; both endpoints printed on stdout."""

    def __init__(self, binary, data):
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [binary, "local", "--data", data, "--query-addr", "127.0.0.1:0", "--metadata-addr", "127.0.0.1:0"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        urls = {}
        while len(urls) < 2:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("lake local exited")
            parts = line.split()
            if parts and parts[0] in ("query", "metadata"):
                urls[parts[0]] = parts[1]
        threading.Thread(target=lambda: self.proc.stdout.read(), daemon=True).start()
        self.query, self.metadata = urls["query"], urls["metadata"]

    def status(self, field):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def serve_in_process(script):
    """Runs a peer server's `script` (which prints its port) in a process of its own, so a
    client in this interpreter does not contend for its GIL: (process, grpc URL). Stop it with
    `process.kill()`."""
    process = subprocess.Popen([sys.executable, script], stdout=subprocess.PIPE, text=True)
    port = int(process.stdout.readline())
    return process, f"grpc://127.0.0.1:{port}"


def _varint(n):
    """A protobuf varint."""
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        out += bytes([byte | (0x80 if n else 0)])
        if not n:
            return out


def _field(number, data):
    """A protobuf length-delimited field holding `data` (bytes)."""
    return bytes([(number << 3) | 2]) + _varint(len(data)) + data


def statement_query(sql):
    """A Flight SQL CommandStatementQuery for `sql`, packed in a google.protobuf.Any: the
    command a raw pyarrow.flight client sends (no ADBC in between)."""
    return _field(1, b"type.googleapis.com/arrow.flight.protocol.sql.CommandStatementQuery") + _field(
        2, _field(1, sql.encode()))
