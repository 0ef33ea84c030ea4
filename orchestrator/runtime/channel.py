"""The host's side of the runner socket in ``state/run/<folder>/runner.sock``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator import wire
from orchestrator.errors import OrchestratorError

SOCKET_NAME = "runner.sock"


class RunnerUnavailable(OrchestratorError):
    """The runner in the container does not answer."""


class RunnerClient:
    def __init__(self, socket_path: Path, timeout: float = 60.0) -> None:
        self.socket_path = socket_path
        self.timeout = timeout

    def request(self, message: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        try:
            return wire.request(
                self.socket_path, message, self.timeout if timeout is None else timeout
            )
        except (OSError, wire.ProtocolError) as exc:
            raise RunnerUnavailable(f"runner at {self.socket_path}: {exc}") from None

    def ping(self, timeout: float = 2.0) -> bool:
        try:
            return bool(self.request({"op": "ping"}, timeout=timeout).get("ok"))
        except RunnerUnavailable:
            return False

    def turn(self, turn: dict[str, Any]) -> dict[str, Any]:
        return self.request({"op": "turn", "turn": turn})
