"""Runs one moto server for one test process, and stops it when that process goes away.

Started by lake-testkit with a pipe on stdin: prints "PORT <n>" once the server listens on a free
loopback port, then blocks on stdin. When the test process exits (however it exits), the pipe
closes, stdin reaches EOF, and the server stops; no server outlives the tests that needed it.
"""

import logging
import os
import sys
import tempfile

# The request recorder (off until a test starts it) writes here, not into the caller's directory.
_recording = tempfile.NamedTemporaryFile(prefix="moto-recording-", suffix=".jsonl", delete=False)
os.environ["MOTO_RECORDER_FILEPATH"] = _recording.name

import threading  # noqa: E402

from moto.moto_api._internal.recorder.models import Recorder  # noqa: E402
from moto.server import ThreadedMotoServer  # noqa: E402  (reads the variable at import)

# moto's recorder appends each record with two writes (the JSON, then a newline) from whichever
# server thread handles the request, so concurrent requests (multipart parts, parallel tests)
# interleave and corrupt each other's lines. One record at a time keeps every line whole.
_record_lock = threading.Lock()
_record_request = Recorder._record_request


def _record_one_at_a_time(self, *args, **kwargs):
    with _record_lock:
        return _record_request(self, *args, **kwargs)


Recorder._record_request = _record_one_at_a_time

# AWS serves AssumeRoleWithWebIdentity (and AssumeRoleWithSAML) unsigned: the token is the
# credential. With IAM enforcement on, moto demands a signature for them too (a KeyError on the
# missing Authorization header, answered 500), so workload identity (IRSA) could not be tested
# against an enforcing emulator. Exempt exactly those actions, as AWS does.
from moto.core.authorization import ActionAuthenticatorMixin  # noqa: E402

_UNSIGNED_BY_DESIGN = {"AssumeRoleWithWebIdentity", "AssumeRoleWithSAML"}
_authorize = ActionAuthenticatorMixin._authenticate_and_authorize_action


def _authorize_except_unsigned(self, *args, **kwargs):
    try:
        action = self._get_action()
    except Exception:  # not a query-protocol request: nothing to exempt
        action = None
    if action in _UNSIGNED_BY_DESIGN and "Authorization" not in self.headers:
        return None
    return _authorize(self, *args, **kwargs)


ActionAuthenticatorMixin._authenticate_and_authorize_action = _authorize_except_unsigned

# moto authorises DynamoDB requests against the resource "*", so with enforcement on a policy
# scoped to table ARNs (lake's least-privilege policies) allows nothing at all. AWS authorises
# against the table's ARN: give moto the table a request names. A batch naming several tables
# gets "*", which a table-scoped policy does not allow (moto checks one resource per request).
from moto.dynamodb.responses import DynamoHandler  # noqa: E402


def _dynamodb_resource(self):
    body = self.body if isinstance(self.body, dict) else {}
    batch = list(body.get("RequestItems") or {})
    table = body.get("TableName") or (batch[0] if len(batch) == 1 else None)
    if table:
        return f"arn:aws:dynamodb:{self.region}:{self.current_account}:table/{table}"
    return "*" if batch else body.get("ResourceArn") or "*"


DynamoHandler._determine_resource = _dynamodb_resource


def main() -> None:
    # One line per request on stderr drowns test output; errors still show.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    _, port = server.get_host_and_port()
    # The recorder's file is read directly by the tests (large recordings come back chunked over
    # HTTP, which a plain reader would corrupt).
    print(f"PORT {port} RECORDING {_recording.name}", flush=True)
    sys.stdin.read()
    server.stop()
    os.unlink(_recording.name)


if __name__ == "__main__":
    main()
