"""Checks for the Python peers lake's Rust tests run.

Every check raises or counts explicitly: never `assert`, which `python -O` and PYTHONOPTIMIZE
strip, so that a stripped check cannot pass without checking. The tally a test reads is counted,
never typed in.
"""

import sys


def ensure(condition, message=""):
    """`assert condition, message`, which optimization cannot remove."""
    if not condition:
        raise AssertionError(message)


class Checks:
    """Named checks, counted; `done()` prints the tally and exits non-zero on any failure."""

    def __init__(self):
        self.passed = 0
        self.failed = []

    def check(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            print(f"ok {name}", flush=True)
        else:
            self.failed.append(name)
            print(f"FAILED {name}: {detail}", flush=True)
        return ok

    def done(self):
        print(f"{self.passed} passed, {len(self.failed)} failed", flush=True)
        if self.failed:
            sys.exit(1)


def objects_holding(s3, bucket, marker):
    """Every object of `bucket` read raw with the boto3 client `s3`: {"objects": n, "holding":
    [keys whose bytes contain `marker`]} (erasure is proven on the bytes, not on what a reader
    returns)."""
    objects, found = 0, []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for o in page.get("Contents", []):
            objects += 1
            if marker.encode() in s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read():
                found.append(o["Key"])
    return {"objects": objects, "holding": found}
