"""A Flight SQL server for ADBC's bulk ingest built from off-the-shelf parts: pyarrow.flight's
C++ gRPC server receiving the rows and pylance's `write_dataset` writing them as they arrive.
It is what any server on Lance pays for the transport plus Lance's writer, beside lake doing the
same work; a table whose name starts with `discard` is received and decoded but not written
(the transport alone).

Runs in a process of its own (`start()`), so its CPU is its own and it shares no GIL with the
client.
"""

import os
import tempfile

import lance
import pyarrow as pa
import pyarrow.flight as flight

from floor_peer import _fields, _unpack
from local_lake import _varint, serve_in_process


def _aligned(reader):
    """`reader`'s batches with each column copied once: gRPC hands pyarrow buffers that are not
    aligned for their types, which Lance refuses (arrow-rs makes the same copy when it decodes a
    Flight message)."""
    for batch in reader:
        columns = [pa.concat_arrays([column, column[:0]]) for column in batch.columns]
        yield pa.record_batch(columns, schema=batch.schema)


class IngestPeer(flight.FlightServerBase):
    def __init__(self, root, location="grpc://127.0.0.1:0"):
        super().__init__(location)
        self.root = root
        self.writes = 0

    def do_put(self, context, descriptor, reader, writer):
        name, body = _unpack(descriptor.command)
        if name != "CommandStatementIngest":
            raise flight.FlightUnimplementedError(name)
        table = _fields(body)[2].decode()
        rows = reader.to_reader()
        if table.startswith("discard"):
            count = sum(batch.num_rows for batch in rows)
        else:
            self.writes += 1
            target = os.path.join(self.root, f"{table}-{self.writes}.lance")
            written = lance.write_dataset(pa.RecordBatchReader.from_batches(rows.schema, _aligned(rows)), target)
            count = written.count_rows()
        # DoPutUpdateResult: field 1, record_count, a varint.
        writer.write(pa.py_buffer(b"\x08" + _varint(count)))


def start():
    """The server in a process of its own: (process, grpc URL)."""
    return serve_in_process(__file__)


if __name__ == "__main__":
    server = IngestPeer(tempfile.mkdtemp(prefix="lake-bench-ingest-peer-"))
    print(server.port, flush=True)
    server.serve()
