"""The runner's side of a backend whose runners dial the daemon (Swarm).

The runner listens on no address others can reach (the shell's egress forwarder, with
the web gate, is on the container's loopback). It keeps RUNNER_SPARE_CONNECTIONS open to
the daemon's runner port, each TLS 1.3 with the group's credential (a Swarm secret: its
certificate and key, and the CA that signed the daemon's certificate, which is checked
against the name dialled). The daemon takes one per turn and sends the frames it would
send on the runner's Unix socket; when the first frame comes on a connection, the
runner opens another in its place. A daemon that is away is dialled again with a
growing pause.
"""

from __future__ import annotations

import contextlib
import logging
import random
import re
import socket
import ssl
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.limits import (
    RUNNER_DIAL_BACKOFF_FIRST_SECONDS,
    RUNNER_DIAL_BACKOFF_MAX_SECONDS,
    RUNNER_DIAL_TIMEOUT_SECONDS,
    RUNNER_SPARE_CONNECTIONS,
)

if TYPE_CHECKING:
    from orchestrator.agent.serve import RunnerServer

log = logging.getLogger(__name__)
_PEM_CERT = re.compile(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----\s*", re.S)


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) as a pair; ValueError for anything else."""
    host, sep, port = address.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"not HOST:PORT: {address!r}")
    return host, int(port)


def client_context(credential: Path) -> ssl.SSLContext:
    """TLS 1.3 with the group's credential (a PEM file: its certificate, its key, then
    the CA's certificate, which is the only one trusted)."""
    data = credential.read_bytes()
    certificates = _PEM_CERT.findall(data)
    if len(certificates) < 2:
        raise ValueError(f"{credential} holds no certificate and CA")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.load_verify_locations(cadata=certificates[-1].decode())
    context.load_cert_chain(credential)
    return context  # PROTOCOL_TLS_CLIENT: the daemon's certificate and name are checked


class Dialer:
    """Keeps ``spare`` connections to ``address`` open for ``server``'s turns."""

    def __init__(
        self,
        server: RunnerServer,
        address: str,
        credential: Path,
        spare: int = RUNNER_SPARE_CONNECTIONS,
    ) -> None:
        self.server = server
        self.host, self.port = split_address(address)
        self.context = client_context(credential)
        self.spare = spare
        self._cond = threading.Condition()
        self._unused: set[ssl.SSLSocket] = set()
        self.dialled = 0

    def dial(self) -> ssl.SSLSocket:
        """One connection to the daemon, its TLS handshake done."""
        raw = socket.create_connection((self.host, self.port), timeout=RUNNER_DIAL_TIMEOUT_SECONDS)
        try:
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            conn = self.context.wrap_socket(raw, server_hostname=self.host)
        except BaseException:
            raw.close()
            raise
        conn.settimeout(None)
        return conn

    def run(self) -> None:
        """Until the server stops: keep ``spare`` unused connections open."""
        backoff = RUNNER_DIAL_BACKOFF_FIRST_SECONDS
        while not self.server.stopping.is_set():
            with self._cond:
                while len(self._unused) >= self.spare and not self.server.stopping.is_set():
                    self._cond.wait(0.5)
            if self.server.stopping.is_set():
                break
            try:
                conn = self.dial()
            except (OSError, ssl.SSLError) as exc:
                log.warning(
                    "cannot reach the daemon at %s:%d (%s); again in %.1fs",
                    self.host,
                    self.port,
                    exc,
                    backoff,
                )
                self.server.stopping.wait(backoff * random.uniform(0.8, 1.2))
                backoff = min(backoff * 2, RUNNER_DIAL_BACKOFF_MAX_SECONDS)
                continue
            backoff = RUNNER_DIAL_BACKOFF_FIRST_SECONDS
            self.dialled += 1
            with self._cond:
                self._unused.add(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()
        self.close()

    def _serve(self, conn: ssl.SSLSocket) -> None:
        def taken() -> None:
            with self._cond:
                self._unused.discard(conn)
                self._cond.notify_all()

        try:
            self.server.serve_connection(conn, on_first_frame=taken)
        finally:
            taken()  # closed before any frame (the daemon dropped it): open another

    def close(self) -> None:
        """Close the unused connections, so the daemon sees them go at once."""
        with self._cond:
            for conn in list(self._unused):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
            self._unused.clear()
            self._cond.notify_all()
