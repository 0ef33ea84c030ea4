"""Disk: what each group uses, what is free, and how limits are enforced here.

A group's limit (group.yaml ``container.disk``) covers its folders on the host: memory,
sessions and files. Where the filesystem holding them is mounted with project quotas
the kernel could enforce it; this implementation measures instead (a soft limit), after
each turn and periodically, through the confined file layer. A group over its limit is
paused with a lease that refuses new messages until space is freed.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from orchestrator.confined import ConfinedDir
from orchestrator.protocol import FILES_DIR, MEMORY_DIR, SESSIONS_DIR

DISK_HOLDER = "disk"  # the holder name of disk pause leases
GROUP_DATA = (
    MEMORY_DIR,
    SESSIONS_DIR,
    FILES_DIR,
    ".history",
)  # the history counts toward the limit


def group_disk_usage(groups_dir: Path, folder: str) -> int:
    """Bytes of disk the group's writable folders take (allocated blocks, so a sparse
    file counts for what it really uses); a folder that cannot be opened counts 0."""
    total = 0
    try:
        group = ConfinedDir.open(groups_dir, folder)
    except OSError:
        return 0
    with group:
        for name in GROUP_DATA:
            try:
                with group.open_dir(name) as data:
                    total += data.usage().disk_bytes
            except OSError:
                continue
    return total


@dataclass(frozen=True)
class FreeSpace:
    path: str
    free_bytes: int
    total_bytes: int

    def to_dict(self) -> dict[str, object]:
        return {"path": self.path, "free_bytes": self.free_bytes, "total_bytes": self.total_bytes}


def free_space(path: Path) -> FreeSpace | None:
    """Space left for unprivileged writers on the filesystem holding ``path``."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return FreeSpace(str(path), st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize)


def _unmangle(field: str) -> str:
    """A field of /proc/self/mounts as it names a path: the kernel writes a space, a tab,
    a newline and a backslash in it as octal escapes (\\040, \\011, \\012, \\134)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), field)


def mount_options(path: Path) -> tuple[str, str, set[str]] | None:
    """(mount point, filesystem type, options) of the mount holding ``path``."""
    try:
        real = os.path.realpath(path)
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return None
    best: tuple[str, str, set[str]] | None = None
    for line in lines:
        fields = line.split()
        if len(fields) < 4:
            continue
        point = _unmangle(fields[1])
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best[0])):
            best = (point, fields[2], set(fields[3].split(",")))
    return best


def limit_mode(path: Path) -> str:
    """How group disk limits hold on the filesystem of ``path``, in one sentence."""
    found = mount_options(path)
    where = f"{found[1]} at {found[0]}" if found else "an unknown filesystem"
    quotas = found is not None and bool(found[2] & {"prjquota", "pquota", "prjjquota"})
    if quotas:
        return (
            f"soft: measured after each turn and every minute ({where} has project quotas, "
            "which this version does not set)"
        )
    return f"soft: measured after each turn and every minute ({where} has no project quotas)"


def over_limit_reason(folder: str, used: int, limit: int) -> str:
    return (
        f"group {folder!r} is over its disk limit ({used / 1024**2:.1f} MiB of "
        f"{limit / 1024**2:.1f} MiB); it answers again once space in its memory, sessions "
        "or files is freed"
    )
