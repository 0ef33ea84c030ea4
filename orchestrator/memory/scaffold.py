"""The idempotent memory scaffold of a group.

Creates ``memory/``, ``memory/system/`` and, only where missing, ``memory/index.md``,
``memory/system/index.md`` and ``memory/system/definition.md``. It never overwrites,
never follows a symlink and never writes outside the group folder. Each file is written
to a temporary name and hard-linked into place, which fails if the name exists: creation
is exclusive (like O_EXCL) and no reader ever sees a partial file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

MEMORY_DIR = "memory"
SYSTEM_DIR = "system"
# (folder inside memory/ or "", file name, template)
SCAFFOLD_FILES = (
    ("", "index.md", "memory/index.md.j2"),
    (SYSTEM_DIR, "index.md", "memory/system/index.md.j2"),
    (SYSTEM_DIR, "definition.md", "memory/system/definition.md.j2"),
)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class ScaffoldReport:
    """What one scaffold run created (paths relative to the group folder) and found wrong."""

    created: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.problems


def _is_complete(group_dir: Path) -> bool:
    """Fast path: a handful of lstat calls, no writes, no template rendering."""
    memory = group_dir / MEMORY_DIR
    system = memory / SYSTEM_DIR
    try:
        for folder in (group_dir, memory, system):
            if not stat.S_ISDIR(os.lstat(folder).st_mode):
                return False
        for sub, name, _ in SCAFFOLD_FILES:
            if not stat.S_ISREG(os.lstat(memory / sub / name if sub else memory / name).st_mode):
                return False
    except OSError:
        return False
    return True


def _open_or_make_dir(parent_fd: int, name: str, shown: str, report: ScaffoldReport) -> int | None:
    try:
        os.mkdir(name, 0o755, dir_fd=parent_fd)
        report.created.append(shown + "/")
    except FileExistsError:
        pass
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            kind = _kind_of(parent_fd, name)
            report.problems.append(f"{shown} is {kind}, not a folder; left untouched")
        else:
            report.problems.append(f"{shown}: cannot open ({exc.strerror})")
        return None


def _kind_of(dir_fd: int, name: str) -> str:
    try:
        mode = os.lstat(name, dir_fd=dir_fd).st_mode
    except OSError:
        return "missing"
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISREG(mode):
        return "a regular file"
    return "a special file"


def _create_exclusive(dir_fd: int, name: str, content: bytes) -> bool:
    """Create ``name`` in ``dir_fd`` with ``content``; False if the name already exists."""
    tmp = f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    fd = os.open(
        tmp,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o644,
        dir_fd=dir_fd,
    )
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        except FileExistsError:
            return False
        os.fsync(dir_fd)
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dir_fd)


def scaffold_memory(group_dir: Path) -> ScaffoldReport:
    """Create what is missing of the memory tree in ``group_dir``; report what is wrong.

    Safe to run concurrently from several processes: each file is created exactly once.
    """
    report = ScaffoldReport()
    if _is_complete(group_dir):
        return report
    try:
        group_fd = os.open(group_dir, _DIR_FLAGS)
    except OSError as exc:
        report.problems.append(f"{group_dir}: cannot open the group folder ({exc.strerror})")
        return report
    fds: dict[str, int | None] = {}
    try:
        memory_fd = _open_or_make_dir(group_fd, MEMORY_DIR, MEMORY_DIR, report)
        fds[""] = memory_fd
        fds[SYSTEM_DIR] = (
            _open_or_make_dir(memory_fd, SYSTEM_DIR, f"{MEMORY_DIR}/{SYSTEM_DIR}", report)
            if memory_fd is not None
            else None
        )
        from orchestrator.templates import render

        for sub, name, template in SCAFFOLD_FILES:
            dir_fd = fds[sub]
            shown = "/".join(p for p in (MEMORY_DIR, sub, name) if p)
            if dir_fd is None:
                continue
            kind = _kind_of(dir_fd, name)
            if kind == "a regular file":
                continue
            if kind != "missing":
                report.problems.append(f"{shown} is {kind}, not a regular file; left untouched")
                continue
            if _create_exclusive(dir_fd, name, render(template).encode("utf-8")):
                report.created.append(shown)
            elif _kind_of(dir_fd, name) != "a regular file":
                report.problems.append(
                    f"{shown} appeared as {_kind_of(dir_fd, name)}; left untouched"
                )
    finally:
        for fd in fds.values():
            if fd is not None:
                os.close(fd)
        os.close(group_fd)
    return report
