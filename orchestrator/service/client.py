"""Talking to a running daemon from another process (the command line, doctor): its
facts file and its control socket. Imports nothing of the daemon itself, so a command
that only asks it something starts quickly."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from orchestrator import wire
from orchestrator.errors import DaemonNotRunning, OrchestratorError
from orchestrator.home import CONTROL_SOCKET as SOCKET_NAME
from orchestrator.home import FACTS_FILE, Home, lock_holder


def daemon_facts(home: Home) -> dict[str, Any] | None:
    """What the running daemon wrote about itself, when one holds the lock."""
    holder = lock_holder(home)
    if holder is None:
        return None
    try:
        facts: dict[str, Any] = json.loads((home.state_dir / FACTS_FILE).read_text())
    except (OSError, ValueError):
        facts = {}
    if facts.get("pid") != holder:
        facts = {"pid": holder}
    return facts


def control_request(home: Home, message: dict[str, Any], timeout: float = 330.0) -> dict[str, Any]:
    """One request to the daemon's CLI channel; DaemonNotRunning when none answers."""
    path = home.state_dir / SOCKET_NAME
    try:
        return wire.request(path, message, timeout)
    except wire.NoPeer:
        raise DaemonNotRunning(
            f"no orchestrator daemon answers at {path}", hint="start it with: orchestrator up"
        ) from None
    except (OSError, wire.ProtocolError) as exc:
        raise OrchestratorError(f"the daemon at {path} failed to answer: {exc}") from None


def control_stream(
    home: Home, message: dict[str, Any], timeout: float = 330.0
) -> Iterator[dict[str, Any]]:
    """Frames from the daemon's CLI channel for one request, until it closes its answer
    (``send`` with ``stream``: replies as they are stored, then the final answer)."""
    import socket as socketlib

    path = home.state_dir / SOCKET_NAME
    deadline = time.monotonic() + timeout
    sock = socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        try:
            wire.connect_no_follow(sock, path)
        except wire.NoPeer:
            raise DaemonNotRunning(
                f"no orchestrator daemon answers at {path}", hint="start it with: orchestrator up"
            ) from None
        try:
            wire.send_frame(sock, message, deadline)
            while (frame := wire.recv_frame(sock, deadline)) is not None:
                yield frame
                if "reply" not in frame:
                    return
        except (OSError, wire.ProtocolError) as exc:
            raise OrchestratorError(f"the daemon at {path} failed to answer: {exc}") from None
        raise OrchestratorError(f"the daemon at {path} closed the connection without answering")
    finally:
        sock.close()


def daemon_running(home: Home) -> bool:
    try:
        return bool(control_request(home, {"op": "ping"}, timeout=2).get("ok"))
    except OrchestratorError:
        return False
