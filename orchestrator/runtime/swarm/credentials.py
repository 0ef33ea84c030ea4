"""The daemon's certificate authority for runner connections (the Swarm backend).

A group's runner dials the daemon, and both sides show a certificate: the daemon one
for its name on the runner network, the runner one issued to its group. Both are signed
by a CA the daemon makes in ``state/swarm/`` (its key never leaves the host). A group's
credential (its key, its certificate, the CA's certificate) reaches its service as a
Swarm secret, never as an environment variable or a label, and the fingerprint of its
certificate is a label of the service: the daemon files a connection under the group
its certificate names only when it shows that very certificate (``hub.py``), so a
forged or stale credential is refused, and one group's is worth nothing to another.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import hashlib
import os
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.errors import InvalidConfig
from orchestrator.fsatomic import write_atomic
from orchestrator.limits import RUNNER_CREDENTIAL_DAYS

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePrivateKey
    from cryptography.x509 import Certificate

CA_CERT, CA_KEY, SERVER, LOCK = "ca.pem", "ca.key", "server.pem", ".lock"


@dataclass(frozen=True)
class Credential:
    """One group's credential: the PEM bundle its runner reads (its certificate, its
    key, then the CA's certificate) and the certificate's sha256 fingerprint."""

    bundle: bytes
    fingerprint: str


@dataclass(frozen=True)
class Peer:
    """Who a runner connection's certificate says it is."""

    group: str
    home: str
    fingerprint: str


def fingerprint(der: bytes) -> str:
    return hashlib.sha256(der).hexdigest()


def _new_key() -> EllipticCurvePrivateKey:
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: EllipticCurvePrivateKey) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _pem_cert(cert: Certificate) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)


class Authority:
    """The CA in ``folder`` (made at first use) for the home ``home_id``: it issues and
    revokes group credentials and makes the daemon's TLS context."""

    def __init__(self, folder: Path, home_id: str) -> None:
        self.folder = folder
        self.home_id = home_id
        self._ca: tuple[Certificate, EllipticCurvePrivateKey] | None = None

    # the files, made and read under an exclusive lock (the daemon and a CLI command
    # may issue at the same time)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.folder, 0o700)
        fd = os.open(self.folder / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _load_ca(self) -> tuple[Certificate, EllipticCurvePrivateKey]:
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        if self._ca is not None:
            return self._ca
        with self._locked():
            cert_path, key_path = self.folder / CA_CERT, self.folder / CA_KEY
            if not cert_path.exists() or not key_path.exists():
                self._make_ca(cert_path, key_path)
            try:
                cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
                key = serialization.load_pem_private_key(key_path.read_bytes(), None)
            except (OSError, ValueError) as exc:
                raise InvalidConfig(
                    f"the runner CA in {self.folder} cannot be read ({exc})",
                    hint=f"move {self.folder} aside: a new CA is made and every group's "
                    "service is made again with a new credential at its next start",
                ) from None
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise InvalidConfig(f"{key_path} is not the key this CA makes (EC P-256)")
        self._ca = (cert, key)
        return self._ca

    def _make_ca(self, cert_path: Path, key_path: Path) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.x509.oid import NameOID

        key = _new_key()
        name = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, self.home_id),
                x509.NameAttribute(NameOID.COMMON_NAME, f"orchestrator runner CA {self.home_id}"),
            ]
        )
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=RUNNER_CREDENTIAL_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=False,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(key, hashes.SHA256())
        )
        write_atomic(key_path, _pem_key(key), mode=0o600)
        write_atomic(cert_path, _pem_cert(cert), mode=0o644)

    def ca_pem(self) -> bytes:
        return _pem_cert(self._load_ca()[0])

    def _leaf(
        self, subject: list[tuple[Any, str]], *, server_name: str | None
    ) -> tuple[Certificate, EllipticCurvePrivateKey]:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.x509.oid import ExtendedKeyUsageOID

        ca_cert, ca_key = self._load_ca()
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server_name else ExtendedKeyUsageOID.CLIENT_AUTH
        key = _new_key()
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(oid, value) for oid, value in subject]))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=RUNNER_CREDENTIAL_DAYS))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([usage]),
                critical=False,
            )
        )
        if server_name:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.DNSName(server_name)]), critical=False
            )
        return builder.sign(ca_key, hashes.SHA256()), key

    # group credentials

    def issue(self, group: str) -> Credential:
        """A new credential for ``group`` (its service records which one it was given)."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.x509.oid import NameOID

        cert, key = self._leaf(
            [(NameOID.ORGANIZATION_NAME, self.home_id), (NameOID.COMMON_NAME, group)],
            server_name=None,
        )
        found = fingerprint(cert.public_bytes(serialization.Encoding.DER))
        return Credential(_pem_cert(cert) + _pem_key(key) + self.ca_pem(), found)

    # the daemon's side

    def server_context(self, name: str) -> ssl.SSLContext:
        """The daemon's TLS context: a new certificate for ``name`` (what runners dial),
        TLS 1.3 only, a certificate from this CA required of every runner."""
        from cryptography.x509.oid import NameOID

        cert, key = self._leaf([(NameOID.COMMON_NAME, name)], server_name=name)
        with self._locked():
            write_atomic(self.folder / SERVER, _pem_cert(cert) + _pem_key(key), mode=0o600)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_3
        context.load_cert_chain(self.folder / SERVER)
        context.load_verify_locations(cadata=self.ca_pem().decode())
        context.verify_mode = ssl.CERT_REQUIRED
        context.num_tickets = 0  # nothing is resumed: every connection shows its certificate
        return context

    def identify(self, conn: ssl.SSLSocket) -> Peer:
        """Who a connection's (CA-verified) certificate names; ValueError when it names
        no group of this home."""
        der = conn.getpeercert(binary_form=True)
        details = conn.getpeercert()
        if not der or not details:
            raise ValueError("no certificate")
        names: dict[str, str] = {}
        for rdn in details.get("subject", ()):
            for pair in rdn:
                names[str(pair[0])] = str(pair[1])
        group, home = names.get("commonName", ""), names.get("organizationName", "")
        if home != self.home_id or not group:
            raise ValueError(f"a credential of another home ({home or 'none'})")
        return Peer(group, home, fingerprint(der))
