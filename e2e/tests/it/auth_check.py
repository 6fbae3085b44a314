"""Every call needs its endpoint's token, and TLS is verified: usage
auth_check.py METADATA_URL METADATA_TOKEN QUERY_URL QUERY_TOKEN

No token, or the other endpoint's token, is UNAUTHENTICATED (the token never echoed); plaintext
to a TLS endpoint, a CA that did not sign the server's certificate, or a name the certificate
does not carry, fail the connection; the right CA and name succeed."""

import datetime
import os
import socket
import ssl
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


def fails(name, url, because, **tls):
    """The connection fails for the TLS reason `because` names (any of its texts), nothing else:
    a closed port or a refused token must not pass for a TLS refusal."""
    try:
        sql(url, QUERY_TOKEN, "SELECT 1", **tls)
    except adbc_driver_manager.Error as e:
        text = str(e)
        check(name, any(b in text for b in because), text)
        return
    raise AssertionError(f"{name}: the query ran")


def handshake(url, ca, hostname):
    """A TLS handshake with Python's own ssl, independent of the driver: the verify code of the
    failure, or None when it succeeds."""
    host, port = url.split("://", 1)[1].rsplit(":", 1)
    context = ssl.create_default_context(cadata=ca)
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        try:
            with context.wrap_socket(raw, server_hostname=hostname):
                return None
        except ssl.SSLCertVerificationError as e:
            return e.verify_code


names = dict(p.split("=", 1) for p in os.environ["LAKE_E2E_TLS_NAMES"].split(","))
service = names[QUERY.rsplit(":", 1)[1]]
with open(os.environ["LAKE_E2E_CA"]) as f:
    lake_ca = f.read()
check("the right CA and name complete a TLS handshake", handshake(QUERY, lake_ca, service) is None)
# OpenSSL's X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY (20), X509_V_ERR_HOSTNAME_MISMATCH (62).
code = handshake(QUERY, another_ca(), service)
check("a foreign CA fails the handshake's verification", code == 20, f"verify code {code}")
code = handshake(QUERY, lake_ca, "evil.example.com")
check("a foreign name fails the handshake's verification", code == 62, f"verify code {code}")

# The same through the driver, each for its own reason. Plaintext to the TLS port (open, as the
# handshake above shows) gets no HTTP/2 server preface.
fails("plaintext to the TLS endpoint", QUERY.replace("grpc+tls://", "grpc://"),
      ("server preface", "connection closed", "EOF", "http2: frame too large"))
fails("a CA that did not sign the certificate", QUERY, ("certificate signed by unknown authority",),
      ca=another_ca())
fails("a name the certificate does not carry", QUERY, ("not evil.example.com",),
      hostname="evil.example.com")
print(f"{lake_e2e.passed} passed, 0 failed")
