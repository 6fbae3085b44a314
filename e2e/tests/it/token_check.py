"""After a token rotation: usage token_check.py URL NEW_TOKEN OLD_TOKEN — the new token is
accepted, the old one refused (UNAUTHENTICATED, not echoed)."""

import sys

import adbc_driver_manager

from lake_e2e import sql

URL, NEW, OLD = sys.argv[1:4]


def run(token):
    return sql(URL, token, "SELECT count(*) FROM sales.orders")


assert run(NEW) == [(1000,)], "the new token is not accepted"
print("ok the new token is accepted")
try:
    run(OLD)
    raise SystemExit("the old token still works")
except adbc_driver_manager.Error as e:
    assert "UNAUTHENTICATED" in str(e) or "Unauthenticated" in str(e), str(e)
    assert OLD not in str(e), "the old token is echoed"
print("ok the old token is refused")
