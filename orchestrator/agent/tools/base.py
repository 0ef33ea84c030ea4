"""What every tool shares: the spec the model sees, the modes, the refusal, the locks."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TURN, FLUSH = "turn", "flush"


class ToolError(Exception):
    """A tool call the runner refuses; the message goes back to the model."""


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]


def schema(required: list[str], **props: str) -> dict[str, Any]:
    """A JSON schema of an object with these properties (name=JSON type)."""
    return {
        "type": "object",
        "required": required,
        "additionalProperties": False,
        "properties": {k: {"type": t} for k, t in props.items()},
    }


class FileLocks:
    """One lock per file, shared by every turn of a runner: a read-modify-write of a file
    (an index that several conversations update) is never interleaved with another."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    def of(self, path: Path) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(str(path), threading.Lock())
