"""The runner's side of requests to the host during a turn.

A turn is one connection the host opened. While the turn runs, the runner may ask the
host for things on that same connection: a frame ``{"req": n, "op": ..., ...}``, then the
host's answer ``{"req": n, "ok": ..., ...}``. No listening socket, no new trust: the host
attributes each request to the message it is delivering, and it decides sender and trust
from its own record, never from anything sent here.
"""

from __future__ import annotations

import select
import socket
import threading
from typing import Any

from orchestrator import wire


class HostRequestFailed(Exception):
    """The host answered a request with an error (or the link broke)."""

    def __init__(self, message: str, answer: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.answer = answer or {}


class HostLink:
    """Requests from one turn to the host, one at a time."""

    def __init__(self, sock: socket.socket, frame_limit: int = wire.MAX_FRAME_BYTES) -> None:
        self.sock = sock
        self.frame_limit = frame_limit  # what the host accepts for the largest request
        self._next = 0
        self._lock = threading.Lock()

    def closed(self) -> bool:
        """True when the host has closed the turn's connection (it cancelled the turn):
        between requests the host sends nothing, so anything readable means that."""
        if not self._lock.acquire(blocking=False):
            return False  # a request is under way: the host is there
        try:
            ready, _, _ = select.select([self.sock], [], [], 0)
            if not ready:
                return False
            try:
                return self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
            except BlockingIOError:
                return False
            except OSError:
                return True
        finally:
            self._lock.release()

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send one request and return the host's answer; HostRequestFailed when the
        answer says it failed or the connection fails."""
        with self._lock:
            self._next += 1
            number = self._next
            try:
                wire.send_frame(
                    self.sock, {**fields, "req": number, "op": op}, limit=self.frame_limit
                )
                answer = wire.recv_frame(self.sock)
            except (OSError, wire.ProtocolError) as exc:
                raise HostRequestFailed(f"{op}: the link to the host failed: {exc}") from None
        if answer is None:
            raise HostRequestFailed(f"{op}: the host closed the turn")
        if answer.get("req") != number:
            raise HostRequestFailed(f"{op}: the host answered request {answer.get('req')!r}")
        if not answer.get("ok"):
            raise HostRequestFailed(f"{op}: {answer.get('error') or 'refused'}", answer)
        return answer
