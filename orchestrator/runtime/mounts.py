"""Extra mounts from group.yaml, honored only under a root listed in the mount allowlist.

The allowlist lives outside the home and is never mounted into any container (default
``~/.config/orchestrator/mount-allowlist.yaml``; a missing file means no extra mounts)::

    roots:
      - path: /srv/shared-docs
        writable: false        # may mounts under this root be writable? default false

Paths are resolved (realpath) before any check. Sensitive names are always refused.
A mount is read-only unless both the mount and its root allow writes.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import InvalidConfig, MountRefused
from orchestrator.groups.config import MountRequest
from orchestrator.runtime.base import BindMount
from orchestrator.validate import MappingReader
from orchestrator.yamldoc import load_yaml_file

EXTRA_DIR = "/workspace/extra"
# Names never mounted, at any depth of the path, nor as an entry of a mounted folder.
BLOCKED_NAMES = (
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".gcloud",
    ".config/gcloud",
    ".kube",
    ".docker",
    ".env",
    ".env.*",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".git-credentials",
    "id_rsa*",
    "id_ecdsa*",
    "id_ed25519*",
    "id_dsa*",
    "credentials",
    "credentials.*",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "docker.sock",
    "mount-allowlist.yaml",
    "orchestrator.yaml",
)


@dataclass(frozen=True)
class AllowedRoot:
    path: Path  # resolved
    writable: bool


def load_allowlist(path: Path, home_root: Path) -> list[AllowedRoot] | None:
    """The allowlisted roots, or None when the file does not exist."""
    if not path.exists():
        return None
    resolved = Path(os.path.realpath(path))
    home = Path(os.path.realpath(home_root))
    if resolved == home or home in resolved.parents:
        raise InvalidConfig(
            f"{path}: the mount allowlist must live outside the orchestrator home {home}",
            hint="move it, e.g. to ~/.config/orchestrator/mount-allowlist.yaml",
        )
    doc = load_yaml_file(path)
    reader = MappingReader(doc, doc.data)
    reader.reject_unknown(["roots"])
    roots_raw = reader.raw("roots", [])
    if not isinstance(roots_raw, list):
        raise reader.fail("roots", "must be a list of {path, writable} mappings")
    roots: list[AllowedRoot] = []
    for index, item in enumerate(roots_raw):
        entry = MappingReader(doc, item, ("roots", index))
        entry.reject_unknown(["path", "writable"])
        raw_path = entry.text("path", max_chars=4096)
        if not raw_path.startswith(("/", "~")):
            raise entry.fail("path", f"got {raw_path!r}; expected an absolute path")
        roots.append(
            AllowedRoot(
                Path(os.path.realpath(Path(raw_path).expanduser())),
                entry.boolean("writable", False),
            )
        )
    return roots


def _blocked_component(path: Path) -> str | None:
    text = path.as_posix()
    for pattern in BLOCKED_NAMES:
        if "/" in pattern and f"/{pattern}" in text:
            return pattern
        for part in path.parts:
            if fnmatch.fnmatch(part, pattern):
                return part
    return None


def _blocked_entry(folder: Path) -> str | None:
    try:
        names = os.listdir(folder)
    except OSError:
        return None
    for name in names:
        if any(fnmatch.fnmatch(name, pattern) for pattern in BLOCKED_NAMES if "/" not in pattern):
            return name
    return None


def resolve_mount(
    request: MountRequest,
    roots: list[AllowedRoot] | None,
    *,
    allowlist_path: Path,
    protected: tuple[Path, ...],
) -> BindMount:
    """Check one requested mount; MountRefused says why it cannot be granted."""
    shown = f"mount {request.name!r} ({request.host_path})"
    if roots is None:
        raise MountRefused(
            f"{shown}: no mount allowlist at {allowlist_path}, so no extra mounts are allowed",
            hint="list allowed roots in that file (see README, Extra mounts)",
        )
    if ".." in Path(request.host_path).parts:
        raise MountRefused(
            f"{shown}: '..' is not allowed in a mount path", hint="write the path without '..'"
        )
    source = Path(os.path.realpath(Path(request.host_path).expanduser()))
    if not source.exists():
        raise MountRefused(f"{shown}: {source} does not exist")
    blocked = _blocked_component(source)
    if blocked:
        raise MountRefused(f"{shown}: {source} contains {blocked!r}, which is never mounted")
    if source.is_dir():
        inside = _blocked_entry(source)
        if inside:
            raise MountRefused(
                f"{shown}: {source} holds {inside!r}, which is never mounted",
                hint="mount a folder that holds no secrets",
            )
    for guarded in protected:
        guarded = Path(os.path.realpath(guarded))
        if source == guarded or guarded in source.parents or source in guarded.parents:
            raise MountRefused(
                f"{shown}: {source} overlaps {guarded}, the orchestrator's own files",
                hint="mount a folder outside the orchestrator home and config",
            )
    matching = [r for r in roots if source == r.path or r.path in source.parents]
    # The most specific root decides whether writes are allowed.
    root = max(matching, key=lambda r: len(r.path.parts), default=None)
    if root is None:
        where = ", ".join(str(r.path) for r in roots) or "none listed"
        raise MountRefused(
            f"{shown}: {source} is not under an allowlisted root ({where})",
            hint=f"add a root to {allowlist_path}",
        )
    if request.writable and not root.writable:
        raise MountRefused(
            f"{shown}: writable requested, but root {root.path} allows read-only mounts only",
            hint=f"set writable: true on that root in {allowlist_path}, or drop writable",
        )
    return BindMount(str(source), f"{EXTRA_DIR}/{request.name}", read_only=not request.writable)


def resolve_mounts(
    requests: tuple[MountRequest, ...],
    *,
    allowlist_path: Path,
    home_root: Path,
) -> tuple[BindMount, ...]:
    if not requests:
        return ()
    roots = load_allowlist(allowlist_path, home_root)
    protected = (home_root, allowlist_path.parent)
    return tuple(
        resolve_mount(r, roots, allowlist_path=allowlist_path, protected=protected)
        for r in requests
    )
