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
from moto.server import DomainDispatcherApplication, create_backend_app  # noqa: E402
# (moto reads the variable at import)
from waitress.server import create_server  # noqa: E402

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

# moto checks a DynamoDB write's condition and then writes, with nothing between the two held,
# and serves requests on several threads: two conditional puts of one key (two writers
# committing the same Lance version) could both succeed, which DynamoDB never allows — an
# acknowledged commit was then lost (`concurrent_appenders_all_land`, under load). Writes run
# one at a time, as the check-and-write is atomic in DynamoDB (a batch's items each on their
# own, as in DynamoDB).
from moto.dynamodb.models import DynamoDBBackend  # noqa: E402

_dynamodb_writes = threading.RLock()


def _one_write_at_a_time(write):
    def locked(*args, **kwargs):
        with _dynamodb_writes:
            return write(*args, **kwargs)

    return locked


for _write in ("put_item", "update_item", "delete_item", "transact_write_items"):
    setattr(DynamoDBBackend, _write, _one_write_at_a_time(getattr(DynamoDBBackend, _write)))

# DynamoDB's TagResource overwrites the value of a key the resource already has; moto appends a
# second tag of that key, and ListTagsOfResource then answers the old value first (a re-attached
# table kept the deleted cluster's uid). Overwrite, as DynamoDB does.
def _tag_resource_overwriting(self, arn, tags):
    for table in self.tables.values():
        if table.table_arn == arn:
            kept = [t for t in table.tags if t["Key"] not in tags]
            table.tags = kept + [{"Key": k, "Value": v} for k, v in tags.items()]


DynamoDBBackend.tag_resource = _tag_resource_overwriting

# S3 authorises DeleteObjects per key (s3:DeleteObject on each key's ARN); moto authorises the
# whole request against the bucket's ARN, so a policy scoped to a prefix (lake's) is refused
# every key of a batch. Authorise each key as AWS does, and let moto's own per-key pass (which
# reads only bucket policies) refuse the keys the identity may not delete.
import xmltodict  # noqa: E402
from moto.iam.access_control import PermissionResult  # noqa: E402
from moto.s3.models import FakeBucket  # noqa: E402
from moto.s3.responses import S3Response  # noqa: E402

_denied_keys = threading.local()
_bucket_permission = FakeBucket.get_permission


def _permission_with_identity(self, action, resource):
    if action == "s3:DeleteObject" and resource in getattr(_denied_keys, "arns", ()):
        return PermissionResult.DENIED
    return _bucket_permission(self, action, resource)


FakeBucket.get_permission = _permission_with_identity
_bucket_post = S3Response._bucket_response_post


def _delete_keys_authorised_per_key(self, request, bucket_name):
    if request.headers.get("Content-Length"):
        self.path = self._get_path(request)  # what is_delete_keys reads
    if not request.headers.get("Content-Length") or not self.is_delete_keys():
        return _bucket_post(self, request, bucket_name)
    self.data["Action"] = "DeleteObject"
    objects = xmltodict.parse(self.body, strip_whitespace=False)["Delete"].get("Object", [])
    denied = set()
    for obj in objects if isinstance(objects, list) else [objects]:
        try:
            self._authenticate_and_authorize_s3_action(bucket_name=bucket_name, key_name=obj["Key"])
        except Exception as e:  # a refusal; anything else (a bad signature) is the request's answer
            if "AccessDenied" not in type(e).__name__:
                raise
            denied.add(f"arn:aws:s3:::{bucket_name}/{obj['Key']}")
    _denied_keys.arns = denied
    try:
        return self._bucket_response_delete_keys(bucket_name)
    finally:
        _denied_keys.arns = ()


S3Response._bucket_response_post = _delete_keys_authorised_per_key


# moto finds the backend of every request by listing its package directory (a listdir and a
# stat per service, twice per request: once for the Host header, once for the host it infers
# from the signature) and matching hundreds of URL patterns, all under one lock: a third of the
# emulator's CPU time under the tests' load. Neither the directory nor a host's backend changes
# while the server runs: list once, remember each host's answer.
import moto.backends  # noqa: E402
from moto.moto_server.werkzeug_app import DomainDispatcherApplication as _Dispatcher  # noqa: E402

_modules = frozenset(moto.backends.list_of_moto_modules())
moto.backends.list_of_moto_modules = lambda: _modules
_backend_for_host = _Dispatcher.get_backend_for_host
_backends: dict = {}


def _remembered_backend_for_host(self, host):
    if host not in _backends:
        _backends[host] = _backend_for_host(self, host)
    return _backends[host]


_Dispatcher.get_backend_for_host = _remembered_backend_for_host


# Every request looks its service's backend up per account, and each lookup takes a global lock
# and searches the list of backends in use with a Python equality per entry: a fifth of the
# emulator's CPU. A backend that already holds the account is in that list (both are set
# together under the lock, and a reset clears both): answer it without the lock.
from moto.core.base_backend import BackendDict  # noqa: E402

_create_account_backend = BackendDict._create_account_specific_backend


def _existing_account_backend(self, account_id):
    if not dict.__contains__(self, account_id):
        _create_account_backend(self, account_id)


BackendDict._create_account_specific_backend = _existing_account_backend


def main() -> None:
    # moto's own server (werkzeug's development server) answers every request with
    # "Connection: close": each request then costs a new connection and a new thread, about half
    # the emulator's CPU time under the tests' load. waitress serves the same application with
    # keep-alive and a fixed pool of threads. (waitress drops headers with an underscore in
    # their name, as werkzeug does; lake sends none.)
    logging.getLogger("waitress").setLevel(logging.ERROR)
    server = create_server(
        DomainDispatcherApplication(create_backend_app),
        host="127.0.0.1",
        port=0,
        threads=8,
        # Every test of a process shares this server, each with its own clients and pools.
        connection_limit=4096,
        backlog=1024,
        asyncore_use_poll=True,
        max_request_body_size=16 << 30,
        channel_timeout=600,
        ident=None,
    )
    threading.Thread(target=server.run, daemon=True).start()
    # The recorder's file is read directly by the tests (large recordings come back chunked over
    # HTTP, which a plain reader would corrupt).
    print(f"PORT {server.effective_port} RECORDING {_recording.name}", flush=True)
    sys.stdin.read()
    server.close()
    os.unlink(_recording.name)


if __name__ == "__main__":
    main()
