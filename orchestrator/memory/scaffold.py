"""The idempotent memory scaffold of a group.

Creates ``memory/``, ``memory/system/`` and, only where missing, ``memory/index.md``,
``memory/system/index.md`` and ``memory/system/definition.md``. It never overwrites,
never follows a symlink and never writes outside the group folder: every step goes
through the confined file layer. Each file is written to a temporary name and
hard-linked into place, which fails if the name exists: creation is exclusive (like
O_EXCL) and no reader ever sees a partial file. New folders and files belong to the
owner of the folder they are made in (the group's container user), given once.
"""

from __future__ import annotations

import functools
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.confined import INHERIT, ConfinedDir, Owner, UnsafePath, kind_of

MEMORY_DIR = "memory"
SYSTEM_DIR = "system"
# (folder inside memory/ or "", file name, template)
SCAFFOLD_FILES = (
    ("", "index.md", "memory/index.md.j2"),
    (SYSTEM_DIR, "index.md", "memory/system/index.md.j2"),
    (SYSTEM_DIR, "definition.md", "memory/system/definition.md.j2"),
)


@dataclass
class ScaffoldReport:
    """What one scaffold run created (paths relative to the group folder) and found wrong."""

    created: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.problems


def _is_complete(group: ConfinedDir) -> bool:
    """Fast path: a few ``*at`` status calls on descriptors, no writes, no rendering."""
    try:
        with group.open_dir(MEMORY_DIR) as memory:
            if not stat.S_ISREG(os.stat("index.md", dir_fd=memory.fd, follow_symlinks=False)[0]):
                return False
            with memory.open_dir(SYSTEM_DIR) as system:
                for name in ("index.md", "definition.md"):
                    if not stat.S_ISREG(os.stat(name, dir_fd=system.fd, follow_symlinks=False)[0]):
                        return False
    except OSError:
        return False
    return True


def _open_or_make(
    parent: ConfinedDir, name: str, shown: str, report: ScaffoldReport, owner: Owner | str | None
) -> ConfinedDir | None:
    try:
        made = parent.make_dir(name, owner=owner)
        folder = parent.open_dir(name)
    except UnsafePath as exc:
        report.problems.append(f"{shown} {exc.reason}; left untouched")
        return None
    except OSError as exc:
        report.problems.append(f"{shown}: cannot open ({exc.strerror})")
        return None
    if made:
        report.created.append(shown + "/")
    return folder


def scaffold_memory(group_dir: Path, *, owner: Owner | str | None = INHERIT) -> ScaffoldReport:
    """Create what is missing of the memory tree in ``group_dir``; report what is wrong.

    ``group_dir`` itself must be a real folder (it is the host's, under ``groups/``).
    Safe to run concurrently from several processes: each file is created exactly once.
    ``owner`` of what is made: by default the owner of the folder it is made in.
    """
    report = ScaffoldReport()
    try:
        group = ConfinedDir.open(group_dir.parent, group_dir.name)
    except OSError as exc:
        reason = exc.reason if isinstance(exc, UnsafePath) else exc.strerror
        report.problems.append(f"{group_dir}: cannot open the group folder ({reason})")
        return report
    with group:
        if _is_complete(group):
            return report
        memory = _open_or_make(group, MEMORY_DIR, MEMORY_DIR, report, owner)
        if memory is None:
            return report
        with memory:
            system = _open_or_make(memory, SYSTEM_DIR, f"{MEMORY_DIR}/{SYSTEM_DIR}", report, owner)
            folders = {"": memory, SYSTEM_DIR: system}
            try:
                _create_files(folders, report, owner)
                if report.created:  # each folder synced once, for all it gained
                    for folder in (system, memory, group):
                        if folder is not None:
                            folder.sync()
            finally:
                if system is not None:
                    system.close()
    return report


@functools.cache
def _text(template: str) -> bytes:
    """A scaffold file's text (the templates take no variables: rendered once)."""
    from orchestrator.templates import render

    return render(template).encode("utf-8")


def _create_files(
    folders: dict[str, ConfinedDir | None], report: ScaffoldReport, owner: Owner | str | None
) -> None:
    for sub, name, template in SCAFFOLD_FILES:
        folder = folders[sub]
        if folder is None:
            continue
        shown = "/".join(p for p in (MEMORY_DIR, sub, name) if p)
        st = folder.lstat(name)
        if st is not None:
            if not stat.S_ISREG(st.st_mode):
                report.problems.append(
                    f"{shown} is {kind_of(st.st_mode)}, not a regular file; left untouched"
                )
            continue
        if folder.create_exclusive(name, _text(template), owner=owner, sync_folder=False):
            report.created.append(shown)
            continue
        st = folder.lstat(name)
        if st is None or not stat.S_ISREG(st.st_mode):
            kind = "missing" if st is None else kind_of(st.st_mode)
            report.problems.append(f"{shown} appeared as {kind}; left untouched")
