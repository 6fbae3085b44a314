"""A Flight SQL server that does nothing: the floor any server's prepared statement pays through
ADBC (the client, gRPC and the round trips: DoPut of the bound row, GetFlightInfo, DoGet).

It answers CreatePreparedStatement with a handle, takes the bound parameters, and answers every
execution with the same ten rows, built once. Benches run it beside lake to say how much of a
measured time no server can remove (the search bench's `ADBC floor`).
"""

import pyarrow as pa
import pyarrow.flight as flight

from local_lake import _field, serve_in_process

SQL = "type.googleapis.com/arrow.flight.protocol.sql."


def _fields(message):
    """The length-delimited and varint fields of a protobuf message, by number."""
    out, at = {}, 0
    while at < len(message):
        key, at = _read_varint(message, at)
        if key & 7 == 0:
            out[key >> 3], at = _read_varint(message, at)
            continue
        if key & 7 != 2:
            raise ValueError(f"unexpected wire type {key & 7}")
        length, at = _read_varint(message, at)
        out[key >> 3] = message[at:at + length]
        at += length
    return out


def _read_varint(data, at):
    n, shift = 0, 0
    while True:
        byte = data[at]
        at += 1
        n |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return n, at


def _any(name, body):
    return _field(1, (SQL + name).encode()) + _field(2, body)


def _unpack(data):
    """(message name, body) of an `Any`."""
    fields = _fields(data)
    return fields[1].decode().removeprefix(SQL), fields.get(2, b"")


class FloorServer(flight.FlightServerBase):
    """Answers a prepared statement's calls with `rows`, doing no work per call."""

    def __init__(self, rows, location="grpc://127.0.0.1:0"):
        super().__init__(location)
        self.rows = rows
        self.schema_ipc = rows.schema.serialize().to_pybytes()

    def do_action(self, context, action):
        if action.type == "CreatePreparedStatement":
            name, _ = _unpack(action.body.to_pybytes())
            assert name == "ActionCreatePreparedStatementRequest", name
            result = _field(1, b"h") + _field(2, self.schema_ipc)
            return [flight.Result(_any("ActionCreatePreparedStatementResult", result))]
        if action.type == "ClosePreparedStatement":
            return []
        raise flight.FlightUnimplementedError(action.type)

    def do_put(self, context, descriptor, reader, writer):
        name, _ = _unpack(descriptor.command)
        assert name == "CommandPreparedStatementQuery", name
        reader.read_all()

    def get_flight_info(self, context, descriptor):
        name, _ = _unpack(descriptor.command)
        if name != "CommandPreparedStatementQuery":
            raise flight.FlightUnimplementedError(name)
        endpoint = flight.FlightEndpoint(b"t", [])
        return flight.FlightInfo(self.rows.schema, descriptor, [endpoint], self.rows.num_rows, -1)

    def do_get(self, context, ticket):
        return flight.RecordBatchStream(self.rows)


def top_ten():
    """Ten rows shaped like a top-10 search's answer (id, distance)."""
    return pa.table({"id": pa.array(range(10), pa.int64()), "d": pa.array([0.5] * 10, pa.float32())})


def start():
    """The server in a process of its own: (process, grpc URL)."""
    return serve_in_process(__file__)


if __name__ == "__main__":
    server = FloorServer(top_ten())
    print(server.port, flush=True)
    server.serve()
