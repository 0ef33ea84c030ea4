"""The host's side of the runner socket in ``state/run/<folder>/runner.sock``."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from orchestrator.errors import OrchestratorError
from orchestrator.wire import ProtocolError, recv_frame, send_frame

SOCKET_NAME = "runner.sock"


class RunnerUnavailable(OrchestratorError):
    """The runner in the container does not answer."""


class RunnerClient:
    def __init__(self, socket_path: Path, timeout: float = 60.0) -> None:
        self.socket_path = socket_path
        self.timeout = timeout

    def request(self, message: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout if timeout is None else timeout)
        try:
            sock.connect(str(self.socket_path))
            send_frame(sock, message)
            answer = recv_frame(sock)
        except (OSError, ProtocolError) as exc:
            raise RunnerUnavailable(f"runner at {self.socket_path}: {exc}") from None
        finally:
            sock.close()
        if answer is None:
            raise RunnerUnavailable(f"runner at {self.socket_path} closed the connection")
        return answer

    def ping(self, timeout: float = 2.0) -> bool:
        try:
            return bool(self.request({"op": "ping"}, timeout=timeout).get("ok"))
        except RunnerUnavailable:
            return False

    def turn(self, turn: dict[str, Any]) -> dict[str, Any]:
        return self.request({"op": "turn", "turn": turn})
