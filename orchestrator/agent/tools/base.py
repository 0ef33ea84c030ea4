"""What every tool shares: the spec the model sees, the modes, the refusal, the locks, the
opening of a file the agent may have replaced."""

from __future__ import annotations

import errno
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

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


class NotRegular(OSError):
    """What ``open_regular`` found is a folder, a FIFO, a device or a socket (``mode``)."""

    def __init__(self, path: Path, mode: int) -> None:
        super().__init__(errno.EINVAL, "not a regular file", str(path))
        self.mode = mode


def open_regular(path: Path) -> tuple[BinaryIO, int]:
    """``path`` opened for reading, and its size then: a symlink at its end is refused
    (OSError) rather than followed, a FIFO does not block the open, and anything but a
    regular file raises NotRegular."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    # checked before fdopen, which raises IsADirectoryError on a folder
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise NotRegular(path, info.st_mode)
    return os.fdopen(fd, "rb"), info.st_size
