"""The daemon's runner port: where the runners of a dial-in backend (Swarm) connect.

Runners never listen. Each keeps a few connections open to this port (TLS 1.3, a
certificate both ways; ``credentials.py``); a connection whose certificate is the one
its group's service was given, coming from that service's own task (``admit``), is kept
unused under that group. A turn takes one (``take``) and sends today's frames on it, as
on a connection to a runner's Unix socket; a turn whose answer was read whole gives it
back for the next (``give_back``: no handshake per turn), any other closes it. A
connection that shows no certificate, a forged one or another group's (or its own from
elsewhere) is closed after its handshake and logged; handshakes are bounded in number
and time, and one group's unused connections in number, so a hostile runner cannot hold
the port.

Other processes of the home (the CLI inside the daemon's container, or on its host)
reach a runner through the daemon: ``runners.sock`` in ``state/swarm/`` (a host-only
folder) hands them a runner connection of the group they name, relayed byte for byte.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator import wire
from orchestrator.errors import OrchestratorError
from orchestrator.limits import (
    RUNNER_CONNECTION_WAIT_SECONDS,
    RUNNER_HANDSHAKE_TIMEOUT_SECONDS,
    RUNNER_HANDSHAKES_AT_ONCE,
    RUNNER_IDLE_PER_GROUP,
    RUNNER_KEEPALIVE_IDLE_SECONDS,
    RUNNER_KEEPALIVE_INTERVAL_SECONDS,
    RUNNER_KEEPALIVE_PROBES,
    RUNNER_RELAY_REQUEST_SECONDS,
    RUNNER_RELAYS_AT_ONCE,
)
from orchestrator.runtime.channel import RunnerUnavailable
from orchestrator.runtime.swarm.credentials import Authority, Peer

log = logging.getLogger(__name__)
RELAY_SOCKET = "runners.sock"


def keep_alive(sock: socket.socket) -> None:
    """TCP keepalive, so an unused connection whose runner vanished (its node lost) is
    found dead in under a minute rather than at the next turn's deadline."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in (
        ("TCP_KEEPIDLE", RUNNER_KEEPALIVE_IDLE_SECONDS),
        ("TCP_KEEPINTVL", RUNNER_KEEPALIVE_INTERVAL_SECONDS),
        ("TCP_KEEPCNT", RUNNER_KEEPALIVE_PROBES),
    ):
        if hasattr(socket, option):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)


def _readable(sock: socket.socket) -> bool:
    ready, _, _ = select.select([sock], [], [], 0)
    return bool(ready)


# (who the certificate names, the address it came from) -> why it is refused, or None
Admit = Callable[[Peer, str], "str | None"]


class RunnerHub:
    """Listens on ``hosts`` x ``port`` for runners; ``take`` hands a turn one of a
    group's connections. ``admit(peer, address)`` says why a connection whose
    certificate (verified against the CA) names ``peer`` is refused, or None; asked at
    each handshake. ``relay_dir``: where ``runners.sock`` is made for the home's other
    processes."""

    def __init__(
        self,
        authority: Authority,
        admit: Admit,
        *,
        server_name: str,
        hosts: Sequence[str],
        port: int,
        relay_dir: Path | None = None,
    ) -> None:
        self.authority = authority
        self.admit = admit
        self.server_name = server_name
        self.hosts = tuple(hosts)
        self.port = port
        self.relay_dir = relay_dir
        self.context: ssl.SSLContext | None = None
        self._idle: dict[str, deque[ssl.SSLSocket]] = {}
        self._cond = threading.Condition()
        self._handshakes = threading.BoundedSemaphore(RUNNER_HANDSHAKES_AT_ONCE)
        self._relays = threading.BoundedSemaphore(RUNNER_RELAYS_AT_ONCE)
        self._listeners: list[socket.socket] = []
        self._relay: socket.socket | None = None
        self._stopping = threading.Event()
        self.refused = 0  # connections closed after their handshake or for want of one

    # starting and stopping

    def start(self) -> None:
        """Bind the runner port on every host (and the relay socket), then accept in
        threads of their own. OSError when a port is taken."""
        self.context = self.authority.server_context(self.server_name)
        for host in self.hosts:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            listener = socket.socket(family, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((host, self.port))
            listener.listen(128)
            self._listeners.append(listener)
        if self.relay_dir is not None:
            self._relay = self._bind_relay(self.relay_dir)
        for listener in self._listeners:
            threading.Thread(
                target=self._accept, args=(listener,), daemon=True, name="runner-port"
            ).start()
        if self._relay is not None:
            threading.Thread(target=self._accept_relays, daemon=True, name="runner-relay").start()
        log.info(
            "runner port open on %s (port %d) for runners dialling %s",
            ", ".join(self.hosts),
            self.port,
            self.server_name,
        )

    @property
    def bound(self) -> list[tuple[str, int]]:
        """(host, port) of each listener, as bound (port 0 asks for a free one)."""
        return [listener.getsockname()[:2] for listener in self._listeners]

    def close(self) -> None:
        self._stopping.set()
        listeners = [*self._listeners, *([self._relay] if self._relay is not None else [])]
        for listener in listeners:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in accept()
            with contextlib.suppress(OSError):
                listener.close()
        if self._relay is not None and self.relay_dir is not None:
            with contextlib.suppress(FileNotFoundError):
                (self.relay_dir / RELAY_SOCKET).unlink()
        with self._cond:
            for pool in self._idle.values():
                for conn in pool:
                    with contextlib.suppress(OSError):
                        conn.close()
            self._idle.clear()
            self._cond.notify_all()

    # runners' connections

    def _accept(self, listener: socket.socket) -> None:
        while not self._stopping.is_set():
            try:
                raw, address = listener.accept()
            except OSError:
                if self._stopping.is_set():
                    return
                time.sleep(0.05)  # out of descriptors, say: do not spin
                continue
            if not self._handshakes.acquire(blocking=False):
                self.refused += 1
                log.warning("runner port: too many handshakes at once; closed %s", address[0])
                raw.close()
                continue
            threading.Thread(
                target=self._admit, args=(raw, address[0]), daemon=True, name="runner-admit"
            ).start()

    def _admit(self, raw: socket.socket, where: str) -> None:
        try:
            assert self.context is not None
            raw.settimeout(RUNNER_HANDSHAKE_TIMEOUT_SECONDS)
            try:
                conn = self.context.wrap_socket(raw, server_side=True)
            except (ssl.SSLError, OSError) as exc:
                self.refused += 1
                log.warning("runner port: refused a connection from %s: %s", where, exc)
                raw.close()
                return
            try:
                peer = self.authority.identify(conn)
                problem = self.admit(peer, where)
                if problem is not None:
                    raise ValueError(problem)
            except (ValueError, OrchestratorError) as exc:  # the latter: the engine away
                self.refused += 1
                log.warning("runner port: refused a connection from %s: %s", where, exc)
                with contextlib.suppress(OSError):
                    conn.close()
                return
            conn.settimeout(None)
            keep_alive(conn)
            self._file(peer.group, conn)
        finally:
            self._handshakes.release()

    def _file(self, group: str, conn: ssl.SSLSocket) -> None:
        with self._cond:
            if self._stopping.is_set():
                conn.close()
                return
            pool = self._idle.setdefault(group, deque())
            pool.append(conn)
            while len(pool) > RUNNER_IDLE_PER_GROUP:
                with contextlib.suppress(OSError):
                    pool.popleft().close()  # the oldest: the likeliest to be dead
            self._cond.notify_all()

    def give_back(self, group: str, conn: ssl.SSLSocket) -> None:
        """A connection of ``group``'s whose turn ended cleanly: kept for the next one (a
        runner that says anything more on it before then loses it at ``take``)."""
        try:
            conn.settimeout(None)
        except OSError:
            return
        self._file(group, conn)

    def idle(self, group: str) -> int:
        """How many unused connections ``group``'s runner has open now."""
        with self._cond:
            return len(self._idle.get(group, ()))

    def take(self, group: str, timeout: float) -> ssl.SSLSocket:
        """One of ``group``'s unused connections (the newest live one), with ``timeout``
        set on it; waits up to RUNNER_CONNECTION_WAIT_SECONDS for one to come.
        RunnerUnavailable when none does."""
        deadline = time.monotonic() + min(timeout, RUNNER_CONNECTION_WAIT_SECONDS)
        with self._cond:
            while True:
                pool = self._idle.get(group)
                while pool:
                    conn = pool.pop()
                    if conn.pending() or _readable(conn):  # an unused one says nothing
                        with contextlib.suppress(OSError):
                            conn.close()
                        continue
                    conn.settimeout(timeout)
                    return conn
                left = deadline - time.monotonic()
                if left <= 0 or self._stopping.is_set():
                    raise RunnerUnavailable(
                        f"no runner of group {group!r} is connected to the daemon's runner port"
                    )
                self._cond.wait(left)

    # the home's other processes

    def _bind_relay(self, folder: Path) -> socket.socket:
        import os

        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = folder / RELAY_SOCKET
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            sock.bind(str(path))
        finally:
            os.umask(old)
        sock.listen(16)
        return sock

    def _accept_relays(self) -> None:
        assert self._relay is not None
        while not self._stopping.is_set():
            try:
                conn, _ = self._relay.accept()
            except OSError:
                if self._stopping.is_set():
                    return
                time.sleep(0.05)
                continue
            if not self._relays.acquire(blocking=False):
                conn.close()
                continue
            threading.Thread(target=self._relay_one, args=(conn,), daemon=True).start()

    def _relay_one(self, local: socket.socket) -> None:
        try:
            with local:
                deadline = time.monotonic() + RUNNER_RELAY_REQUEST_SECONDS
                try:
                    request = wire.recv_frame(local, deadline)
                except (OSError, wire.ProtocolError):
                    return
                group = str((request or {}).get("group", ""))
                try:
                    runner = self.take(group, RUNNER_RELAY_REQUEST_SECONDS)
                except RunnerUnavailable as exc:
                    with contextlib.suppress(OSError, wire.ProtocolError):
                        wire.send_frame(local, {"ok": False, "error": exc.message}, deadline)
                    return
                with runner:
                    try:
                        wire.send_frame(local, {"ok": True}, deadline)
                    except (OSError, wire.ProtocolError):
                        return
                    splice(local, runner)
        finally:
            self._relays.release()


def splice(local: socket.socket, runner: ssl.SSLSocket) -> None:
    """Copy bytes both ways until either side closes, in one thread (an SSL socket must
    not be read and written from two at once)."""
    local.settimeout(None)
    runner.settimeout(None)
    while True:
        if runner.pending():
            ready: list[Any] = [runner]
        else:
            ready, _, _ = select.select([local, runner], [], [])
        for source in ready:
            target = runner if source is local else local
            try:
                data = source.recv(65536)
            except ssl.SSLWantReadError:
                continue
            except OSError:
                return
            if not data:
                return
            try:
                target.sendall(data)
            except OSError:
                return


@dataclass(frozen=True)
class HubEndpoint:
    """A group's runner as the daemon reaches it: a connection its runner opened."""

    hub: RunnerHub
    group: str

    def connect(self, timeout: float) -> socket.socket:
        return self.hub.take(self.group, timeout)

    def describe(self) -> str:
        return f"the runner port ({self.group})"

    def release(self, sock: socket.socket) -> None:
        assert isinstance(sock, ssl.SSLSocket)
        self.hub.give_back(self.group, sock)


@dataclass(frozen=True)
class RelayEndpoint:
    """A group's runner as another process of the home reaches it: through the
    daemon's ``runners.sock``."""

    path: Path
    group: str

    def connect(self, timeout: float) -> socket.socket:
        deadline = time.monotonic() + timeout
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            try:
                wire.connect_no_follow(sock, self.path)
            except wire.NoPeer:
                raise RunnerUnavailable(
                    f"no daemon relays runner connections at {self.path}: with the swarm "
                    "backend, runners connect to the daemon, and other processes reach "
                    "them through it (start it)"
                ) from None
            try:
                wire.send_frame(sock, {"op": "runner", "group": self.group}, deadline)
                answer = wire.recv_frame(sock, deadline)
            except (OSError, wire.ProtocolError) as exc:
                raise RunnerUnavailable(f"the daemon at {self.path} did not relay: {exc}") from None
            if not answer or not answer.get("ok"):
                raise RunnerUnavailable(str((answer or {}).get("error", "refused")))
        except BaseException:
            sock.close()
            raise
        return sock

    def describe(self) -> str:
        return f"{self.path} ({self.group})"

    def release(self, sock: socket.socket) -> None:
        sock.close()  # the daemon closes the runner's end of the relay
