"""Durable file writes: a reader sees the old content or the new one, never a partial file."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

# an exclusive temporary name beside the target (tempfile is not imported: the runner
# imports this module at its start, and tempfile brings shutil and the archive modules)
_TMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes | str, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` atomically (temp file, fsync, rename, fsync dir).

    A symlink at ``path`` is replaced by a regular file, never followed.
    """
    if isinstance(data, str):
        data = data.encode("utf-8")
    directory = path.parent
    while True:
        tmp = str(directory / f".{path.name}.{os.urandom(6).hex()}.tmp")
        try:
            fd = os.open(tmp, _TMP_FLAGS, 0o600)
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(directory)
