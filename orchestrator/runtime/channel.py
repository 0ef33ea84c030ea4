"""The host's side of a turn: the connection to a group's runner (with the Docker
backend, the socket in ``state/run/<folder>/runner.sock``).

A turn is one connection: the host sends the turn, then reads frames until the turn's
result arrives, all before one deadline for the whole turn (a runner that drips bytes
cannot hold a worker longer). Another thread may cancel a turn; that shuts its socket,
which ends every blocking read at once.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from orchestrator import wire
from orchestrator.errors import OrchestratorError

SOCKET_NAME = "runner.sock"
PING_TIMEOUT_SECONDS = 2.0
# A frame from the runner that carries "req" is a request during the turn; the answer
# goes back on the same connection. Anything else is the turn's result.
REQUEST_KEY = "req"
RequestHandler = Callable[[dict[str, Any], int], dict[str, Any]]  # (frame, its bytes)
# Requests answered on a connection with no relay (a turn delivered by hand, not by the
# daemon) before the turn is failed: enough for a runner that degrades, not a loop.
UNRELAYED_REQUESTS_PER_TURN = 16


def no_relay() -> RequestHandler:
    """A handler that refuses every request: the runner carries on without the host."""
    seen = 0

    def refuse(frame: dict[str, Any], size: int) -> dict[str, Any]:
        nonlocal seen
        seen += 1
        if seen > UNRELAYED_REQUESTS_PER_TURN:
            raise wire.ProtocolError(
                f"more than {UNRELAYED_REQUESTS_PER_TURN} requests on a turn without a relay"
            )
        return {
            REQUEST_KEY: frame.get(REQUEST_KEY),
            "ok": False,
            "error": "no host relay on this turn (it was not delivered by the daemon)",
        }

    return refuse


class RunnerUnavailable(OrchestratorError):
    """Nothing answers on the runner socket: the container needs starting."""


class TurnFailed(OrchestratorError):
    """The turn's connection failed, stalled past its deadline, or was cancelled."""


class Cancel:
    """A handle another thread uses to stop a turn in flight."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self.cancelled = False

    def attach(self, sock: socket.socket) -> None:
        with self._lock:
            self._sock = sock
            if self.cancelled:
                self._shut(sock)

    def detach(self) -> None:
        with self._lock:
            self._sock = None

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            if self._sock is not None:
                self._shut(self._sock)

    @staticmethod
    def _shut(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


class RunnerEndpoint(Protocol):
    """How the host reaches one group's runner: a backend gives it (the Docker backend a
    Unix socket the host dials; a backend whose runners dial the daemon hands over the
    connection one of them opened)."""

    def connect(self, timeout: float) -> socket.socket:
        """A stream connection to the runner, with ``timeout`` set on it (the caller
        closes it); RunnerUnavailable when no runner is there to answer. A backend whose
        runners dial in returns the connection its runner opened, once that runner has
        shown the group's credential."""

    def describe(self) -> str:
        """Where the runner is, for people (a path)."""

    def release(self, sock: socket.socket) -> None:
        """Done with a connection whose last exchange ended cleanly (its answer read
        whole): closed, or kept for the next turn by a backend whose runners dial in
        (a TLS handshake saved). A connection that failed is closed, never released."""


@dataclass(frozen=True)
class UnixSocketEndpoint:
    """The runner's socket in the group's runtime folder; dialled without following a
    symlink the container may have put there."""

    path: Path

    def connect(self, timeout: float) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            wire.connect_no_follow(sock, self.path)
        except wire.NoPeer as exc:
            sock.close()
            raise RunnerUnavailable(f"runner at {self.path}: {exc}") from None
        except BaseException:
            sock.close()
            raise
        return sock

    def describe(self) -> str:
        return str(self.path)

    def release(self, sock: socket.socket) -> None:
        sock.close()  # a new connection costs nothing here


class RunnerClient:
    def __init__(self, endpoint: RunnerEndpoint | Path) -> None:
        self.endpoint = UnixSocketEndpoint(endpoint) if isinstance(endpoint, Path) else endpoint

    def ping(self, timeout: float = PING_TIMEOUT_SECONDS) -> bool:
        deadline = time.monotonic() + timeout
        try:
            sock = self.endpoint.connect(timeout)
        except (OSError, RunnerUnavailable):
            return False
        try:
            wire.send_frame(sock, {"op": "ping"}, deadline)
            answer = wire.recv_frame(sock, deadline)
        except (OSError, wire.ProtocolError):
            sock.close()
            return False
        if answer is None:
            sock.close()
            return False
        self.endpoint.release(sock)
        return bool(answer.get("ok"))

    def turn(
        self,
        turn: dict[str, Any],
        *,
        timeout: float,
        cancel: Cancel | None = None,
        handle: RequestHandler | None = None,
        request_limit: Callable[[], int] = lambda: wire.MAX_FRAME_BYTES,
        op: str = "turn",
    ) -> dict[str, Any]:
        """Deliver ``turn`` and return its result frame, within ``timeout`` seconds
        (``op`` "flush": the runner flushes its sessions instead, protocol.FLUSH_OP).

        Frames carrying ``req`` before the result are requests: ``handle(frame, size)``
        answers each (without a handler, each is refused with an error answer, up to
        UNRELAYED_REQUESTS_PER_TURN, so the runner carries on without the host; a
        handler refuses a frame by raising wire.ProtocolError, which fails the turn).
        ``request_limit`` gives the largest frame accepted next. RunnerUnavailable when
        nothing listens; TurnFailed for everything after the connection was made.
        """
        deadline = time.monotonic() + timeout
        cancel = cancel or Cancel()
        handle = handle or no_relay()
        sock = self.endpoint.connect(timeout)
        done = False
        try:
            cancel.attach(sock)
            try:
                wire.send_frame(sock, {"op": op, "turn": turn}, deadline)
                while True:
                    received = wire.recv_sized(sock, deadline, request_limit())
                    if received is None:
                        raise wire.ProtocolError("the runner closed the turn without answering")
                    frame, size = received
                    if REQUEST_KEY not in frame:
                        done = True
                        return frame
                    wire.send_frame(sock, handle(frame, size), deadline)
            except TimeoutError:
                raise TurnFailed(f"the turn did not finish within {timeout:g}s") from None
            except (OSError, wire.ProtocolError) as exc:
                if cancel.cancelled:
                    raise TurnFailed("the turn was cancelled") from None
                raise TurnFailed(f"runner at {self.endpoint.describe()}: {exc}") from None
        finally:
            cancel.detach()
            if done and not cancel.cancelled:
                self.endpoint.release(sock)  # its answer read whole: at a frame's end
            else:
                sock.close()
