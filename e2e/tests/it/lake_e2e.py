"""What the end-to-end client scripts share: connecting to a lake endpoint as its clients do.

TLS: for grpc+tls:// URLs the CA comes from $LAKE_E2E_CA (the PEM file the cluster publishes in
its `<name>-ca` ConfigMap) and the name the server's certificate must carry from
$LAKE_E2E_TLS_NAMES ("PORT=NAME,…": the Service name of the role on that port; the scripts reach
pods by IP, as there is no cluster DNS)."""

import os

import adbc_driver_flightsql.dbapi as flightsql
import adbc_driver_manager

passed = 0


def check(name, condition, detail=""):
    global passed
    if not condition:
        raise AssertionError(f"{name}: {detail}")
    passed += 1
    print(f"ok {name}", flush=True)


def tls_options(url, ca=None, hostname=None):
    if not url.startswith("grpc+tls://"):
        return {}
    port = url.rsplit(":", 1)[1]
    names = dict(p.split("=", 1) for p in os.environ.get("LAKE_E2E_TLS_NAMES", "").split(",") if p)
    if ca is None:
        with open(os.environ["LAKE_E2E_CA"]) as f:
            ca = f.read()
    return {
        "adbc.flight.sql.client_option.tls_root_certs": ca,
        "adbc.flight.sql.client_option.tls_override_hostname": hostname or names[port],
    }


def connect(url, token=None, ca=None, hostname=None):
    kwargs = tls_options(url, ca, hostname)
    if token is not None:
        kwargs["adbc.flight.sql.authorization_header"] = f"Bearer {token}"
    return flightsql.connect(url, autocommit=True, db_kwargs=kwargs)


def sql(url, token, statement, **tls):
    with connect(url, token, **tls) as conn, conn.cursor() as cur:
        cur.execute(statement)
        return cur.fetchall()


def refused(name, url, token, code="UNAUTHENTICATED", **tls):
    """The statement fails with `code` (ADBC's text for it), and the token is not echoed."""
    try:
        sql(url, token, "SELECT 1", **tls)
    except adbc_driver_manager.Error as e:
        text = str(e)
        words = {"UNAUTHENTICATED": ("Unauthenticated", "UNAUTHENTICATED")}.get(code, (code,))
        check(name, any(w in text for w in words), text)
        if token:
            check(f"{name}: the token is not echoed", token not in text, text)
        return
    raise AssertionError(f"{name}: it ran")
