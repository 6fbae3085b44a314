"""Hand-encoded Flight SQL commands for raw pyarrow.flight peers (pyarrow has no Flight SQL
client): an `Any` wrapping a command message whose fields are strings."""


def pb_string(field, value):
    """One length-delimited protobuf field."""
    data = value if isinstance(value, bytes) else value.encode()
    length, out = len(data), bytearray()
    while True:
        byte = length & 0x7F
        length >>= 7
        out.append(byte | (0x80 if length else 0))
        if not length:
            break
    return bytes([field << 3 | 2]) + bytes(out) + data


def command(name, body=b""):
    """`Any{type_url: arrow.flight.protocol.sql.<name>, value: body}`."""
    return pb_string(1, f"type.googleapis.com/arrow.flight.protocol.sql.{name}") + pb_string(2, body)
