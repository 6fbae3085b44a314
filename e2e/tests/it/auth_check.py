"""Every call needs its endpoint's token, and TLS is verified: usage
auth_check.py METADATA_URL METADATA_TOKEN QUERY_URL QUERY_TOKEN

No token, or the other endpoint's token, is UNAUTHENTICATED (the token never echoed); plaintext
to a TLS endpoint, a CA that did not sign the server's certificate, or a name the certificate
does not carry, fail the connection; the right CA and name succeed."""

import datetime
import sys

import adbc_driver_manager
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

import lake_e2e
from lake_e2e import check, refused, sql

METADATA, METADATA_TOKEN, QUERY, QUERY_TOKEN = sys.argv[1:5]


def another_ca():
    """A CA of the same name that did not sign anything of the lake's."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "lake impostor CA")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM).decode()


refused("query without a token", QUERY, None)
refused("metadata without a token", METADATA, None)
refused("a query token on metadata", METADATA, QUERY_TOKEN)
refused("a metadata token on query", QUERY, METADATA_TOKEN)
check("query with its token over verified TLS", sql(QUERY, QUERY_TOKEN, "SELECT 41 + 1") == [(42,)])


def fails(name, url, **tls):
    try:
        sql(url, QUERY_TOKEN, "SELECT 1", **tls)
    except adbc_driver_manager.Error as e:
        check(name, True, str(e))
        return
    raise AssertionError(f"{name}: the query ran")


fails("plaintext to the TLS endpoint", QUERY.replace("grpc+tls://", "grpc://"))
fails("a CA that did not sign the certificate", QUERY, ca=another_ca())
fails("a name the certificate does not carry", QUERY, hostname="evil.example.com")
print(f"{lake_e2e.passed} passed, 0 failed")
