"""A site's own certificate authority for the sandbox: what an air-gapped site's mirror of the hub and the
release feed is signed by, and what its Sparks trust in their system store. Made once per checkout under
.sandbox/tls/ (or a directory a test names): ca.pem, and server.pem (certificate) with server.key for the
names the forge answers to."""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

# The forge's name on the sandbox networks, and loopback for the unit tests.
SERVER_NAMES = ("forge", "localhost", "127.0.0.1", "::1")


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "ds4-fleet sandbox site"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common)])  # fmt: skip


def _write(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.chmod(tmp, mode)
    tmp.replace(path)


def _certificate(subject: str, issuer: x509.Name, public_key, signer, extensions) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = x509.CertificateBuilder(
        subject_name=_name(subject),
        issuer_name=issuer,
        public_key=public_key,
        serial_number=x509.random_serial_number(),
        not_valid_before=now - datetime.timedelta(days=1),
        not_valid_after=now + datetime.timedelta(days=3650),
    )
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical=critical)
    return builder.sign(signer, hashes.SHA256())


def _alt_names() -> x509.SubjectAlternativeName:
    names = []
    for name in SERVER_NAMES:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            names.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(names)


def ensure(directory: Path) -> dict[str, Path]:
    """The CA and the server's certificate and key in DIRECTORY, made when any is missing; their paths."""
    paths = {name: directory / name for name in ("ca.pem", "server.pem", "server.key")}
    if all(path.exists() for path in paths.values()):
        return paths
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = "ds4-fleet sandbox site CA"
    usage = {name: False for name in ("content_commitment", "key_encipherment", "data_encipherment",
                                      "key_agreement", "encipher_only", "decipher_only")}  # fmt: skip
    ca = _certificate(ca_name, _name(ca_name), ca_key.public_key(), ca_key, [
        (x509.BasicConstraints(ca=True, path_length=0), True),
        (x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, **usage), True),
        (x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False),
    ])  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    server = _certificate("forge", ca.subject, key.public_key(), ca_key, [
        (_alt_names(), False),
        (x509.BasicConstraints(ca=False, path_length=None), True),
        (x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), False),
        (x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False),
    ])  # fmt: skip
    # The key last: a directory with all three is whole. A throw-away test key, root's alone all the same.
    _write(paths["ca.pem"], ca.public_bytes(serialization.Encoding.PEM), 0o644)
    _write(paths["server.pem"], server.public_bytes(serialization.Encoding.PEM), 0o644)
    encoding, private = serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8
    _write(paths["server.key"], key.private_bytes(encoding, private, serialization.NoEncryption()), 0o600)
    return paths
