"""Authentication against `lake local --query-token-file`: usage auth_suite.py QUERY_URL TOKEN."""

import sys

import adbc_driver_flightsql.dbapi as flightsql
import adbc_driver_manager
import pyarrow.flight as flight
from suite import check, done

QUERY, TOKEN = sys.argv[1], sys.argv[2]


def refused(name, **kwargs):
    try:
        with flightsql.connect(QUERY, autocommit=True, **kwargs) as conn, conn.cursor() as cur:
            cur.execute("SELECT 1")
            cur.fetchall()
    except adbc_driver_manager.Error as e:
        check(name, "Unauthenticated" in str(e) or "UNAUTHENTICATED" in str(e), str(e))
        check(f"{name}: the token is not echoed", TOKEN not in str(e), str(e))
        return
    raise AssertionError(f"{name}: the query ran")


refused("no credentials")
refused("wrong password", db_kwargs={"username": "analyst", "password": "not-the-token"})

with flightsql.connect(QUERY, autocommit=True, db_kwargs={"username": "analyst", "password": TOKEN}) as conn:
    with conn.cursor() as cur:
        cur.execute("SELECT 41 + 1 AS answer")
        check("basic credentials via Handshake", cur.fetchall() == [(42,)])

header = {"adbc.flight.sql.authorization_header": f"Bearer {TOKEN}"}
with flightsql.connect(QUERY, autocommit=True, db_kwargs=header) as conn, conn.cursor() as cur:
    cur.execute("SELECT 1 AS one")
    check("bearer token header", cur.fetchall() == [(1,)])

client = flight.FlightClient(QUERY)
name, value = client.authenticate_basic_token("analyst", TOKEN)
check("pyarrow handshake returns a Bearer header", value == f"Bearer {TOKEN}".encode(), value)
options = flight.FlightCallOptions(headers=[(name, value)])
check("pyarrow with the bearer header", len(client.list_actions(options)) > 0)

done()
