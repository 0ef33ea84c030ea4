"""Runners on real Unix sockets for unit tests of the host side: a well-behaved echo, and
the hostile ones a container can run in place of ours (it may replace runner.sock)."""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator import wire

Behaviour = Callable[[socket.socket, dict[str, Any]], None]


def bind_unix(path: Path) -> socket.socket:
    """Bind at ``path`` even when it is longer than a socket address allows."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(f"/proc/self/fd/{fd}/{path.name}")
    finally:
        os.close(fd)
    sock.listen(64)
    return sock


def echo(conn: socket.socket, request: dict[str, Any]) -> None:
    turn = request["turn"]
    wire.send_frame(
        conn, {"ok": True, "turn_id": turn["turn_id"], "replies": [f"echo: {turn['text']}"]}
    )


def drip(conn: socket.socket, request: dict[str, Any]) -> None:
    """A frame header, then a byte every 0.2 s: never done, never idle for long."""
    conn.sendall(struct.pack(">I", 1000))
    while True:
        time.sleep(0.2)
        conn.sendall(b" ")


def silent(conn: socket.socket, request: dict[str, Any]) -> None:
    """Takes the turn and says nothing until the connection is closed."""
    conn.recv(1)


class FakeRunner:
    """Serves ``runner.sock`` at ``path`` in threads; pings are always answered."""

    def __init__(self, path: Path, behaviour: Behaviour = echo) -> None:
        self.path = path
        self.behaviour = behaviour
        self.turns: list[dict[str, Any]] = []
        self.sock = bind_unix(path)
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                while (request := wire.recv_frame(conn)) is not None:
                    if request.get("op") == "ping":
                        wire.send_frame(conn, {"ok": True})
                        continue
                    self.turns.append(request["turn"])
                    self.behaviour(conn, request)
            except (OSError, wire.ProtocolError):
                return

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(OSError):
            self.sock.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
