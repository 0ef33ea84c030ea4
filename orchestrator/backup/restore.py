"""``orchestrator --home DIR restore FILE`` and ``orchestrator backup --verify FILE``.

A restore goes into an empty home only (a folder that is empty or does not exist yet).
The archive is read once: its head first (a backup newer than this release is refused
before anything is written), then every member into a staging folder inside the new
home, each hashed as it is written; only when the manifest matches what was read is
anything moved into place (``home/`` into the home, ``state/`` into its state folder,
wherever the restored orchestrator.yaml or ORCHESTRATOR_STATE_DIR puts it). A refused
archive leaves the folder as it was. Only regular files and folders are ever made: a
member of any other type refuses the archive (a backup never holds one). Modes keep no
setuid, setgid or sticky bit; files belong to whoever restores (the daemon gives each
group's writable folders to its container's user at start, as it always does).

Files the home names outside itself are put where the restored configuration names
them when nothing is there; an existing one is never replaced: the archived copy goes
beside it (``NAME.restored-<time>``) and the report says so. The home gets an identity
of its own (it is not the same home's ``state/home-id``), so its containers never take
the original's; restoring beside the original on one engine needs another ``project``
when orchestrator.yaml names one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from orchestrator.backup.archive import (
    CHUNK,
    HOME,
    OUTSIDE,
    STATE,
    BackupInvalid,
    Head,
    Manifest,
    Member,
    check_versions,
    fsync_path,
    read_archive,
    supported_versions,
)
from orchestrator.backup.create import ALLOWLIST, SECRETS
from orchestrator.config import load_config
from orchestrator.confined import ConfinedDir
from orchestrator.errors import BadInput, OrchestratorError
from orchestrator.home import CONFIG_FILE, Home, state_dir_of
from orchestrator.limits import BACKUP_PROGRESS_SECONDS

Progress = Callable[[str], None]


class RestoreFailed(OrchestratorError):
    """The restore could not write what the archive holds; nothing was put in place."""


@dataclass
class RestoreReport:
    archive: Path
    home: Path
    state_dir: Path
    head: Head
    manifest: Manifest
    groups: list[str] = field(default_factory=list)
    outside: list[tuple[str, str, str]] = field(default_factory=list)  # (what, path, how)

    def to_dict(self) -> dict[str, object]:
        return {
            "archive": str(self.archive),
            "home": str(self.home),
            "state_dir": str(self.state_dir),
            "release": self.head.release,
            "created": self.head.created,
            "versions": self.head.versions,
            "secrets": self.head.secrets,
            "summary": self.head.summary,
            "files": len(self.manifest.files),
            "bytes": self.manifest.bytes,
            "groups": self.groups,
            "skipped_at_backup": [{"name": n, "why": w} for n, w in self.manifest.skipped],
            "secrets_left_out": self.manifest.secrets_left_out,
            "outside": [{"what": a, "path": b, "how": c} for a, b, c in self.outside],
        }


@dataclass
class VerifyReport:
    archive: Path
    head: Head
    manifest: Manifest

    def to_dict(self) -> dict[str, object]:
        return {
            "archive": str(self.archive),
            "ok": True,
            "release": self.head.release,
            "created": self.head.created,
            "versions": self.head.versions,
            "secrets": self.head.secrets,
            "summary": self.head.summary,
            "files": len(self.manifest.files),
            "bytes": self.manifest.bytes,
            "groups": _groups(self.manifest),
            "skipped_at_backup": [{"name": n, "why": w} for n, w in self.manifest.skipped],
            "secrets_left_out": self.manifest.secrets_left_out,
        }


def _groups(manifest: Manifest) -> list[str]:
    prefix = f"{HOME}/groups/"
    return sorted(
        d.removeprefix(prefix)
        for d in manifest.dirs
        if d.startswith(prefix) and "/" not in d.removeprefix(prefix) and d[len(prefix)] != "."
    )


def _refuse_newer(archive: Path) -> Callable[[Head], None]:
    supported = supported_versions()
    return lambda head: check_versions(head, str(archive), supported)


def verify_backup(archive: Path, progress: Progress = lambda _: None) -> VerifyReport:
    """Check ``archive`` whole without restoring it: its versions, every member's type,
    name and checksum against its manifest. BackupInvalid or FileTooNew when it fails."""
    counter = _Counter(progress)
    head, manifest = read_archive(archive, _refuse_newer(archive), counter.member)
    return VerifyReport(archive, head, manifest)


class _Counter:
    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.files = 0
        self._said = time.monotonic()

    def member(self, member: Member, stream: BinaryIO | None) -> None:
        if stream is None:
            return
        self.files += 1
        now = time.monotonic()
        if now - self._said >= BACKUP_PROGRESS_SECONDS:
            self._said = now
            self.progress(f"  {self.files:,} files read ({member.name})")


def restore_backup(archive: Path, home: Home, progress: Progress = lambda _: None) -> RestoreReport:
    """Restore ``archive`` into the empty home ``home``; see the module docstring.
    BadInput when the home is not empty, BackupInvalid or FileTooNew when the archive
    is refused, RestoreFailed when it cannot be written: in each case nothing changes."""
    root = home.root
    made_root = _empty_home(root)
    staging = root / f".restore-{os.urandom(4).hex()}"
    os.mkdir(staging, 0o700)
    moved: list[tuple[Path, Path]] = []
    try:
        with ConfinedDir.open(staging) as target:
            writer = _Writer(target, progress, archive)
            progress(f"reading {archive}")
            head, manifest = read_archive(archive, _refuse_newer(archive), writer.member)
            writer.finish_dirs()
        config_file = staging / HOME / CONFIG_FILE
        state_dir = state_dir_of(root, config_file)
        _check_state_dir(root, state_dir)
        sync_filesystem(staging)  # every file written is on disk before any is put in place
        for entry in sorted((staging / HOME).iterdir()) if (staging / HOME).is_dir() else []:
            _move(entry, root / entry.name, moved)
        if (staging / STATE).is_dir():
            with contextlib.suppress(FileNotFoundError):
                state_dir.rmdir()  # an empty one was allowed
            state_dir.parent.mkdir(parents=True, exist_ok=True)
            _move(staging / STATE, state_dir, moved)
        report = RestoreReport(archive, root, state_dir, head, manifest, _groups(manifest))
        _outside(staging, root, manifest, report)
    except BaseException:
        for source, placed in reversed(moved):
            with contextlib.suppress(OSError):
                os.rename(placed, source)
        shutil.rmtree(staging, ignore_errors=True)
        if made_root:
            with contextlib.suppress(OSError):
                root.rmdir()
        raise
    shutil.rmtree(staging)
    fsync_path(root)
    progress(f"restored {len(manifest.files):,} files into {root}")
    return report


def sync_filesystem(path: Path) -> None:
    """Flush to disk everything written on the file system holding ``path`` (syncfs:
    one call for a whole restored tree, where a fsync per file costs a disk flush each),
    or on every file system where syncfs cannot be had."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    syncfs = getattr(ctypes.CDLL(name, use_errno=True), "syncfs", None) if name else None
    if syncfs is None:
        os.sync()
        return
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if syncfs(fd) != 0:
            os.sync()
    finally:
        os.close(fd)


def _empty_home(root: Path) -> bool:
    """Refuse a home that holds anything; make it when it does not exist (True then)."""
    try:
        st = os.lstat(root)
    except FileNotFoundError:
        if not root.parent.is_dir():
            raise BadInput(f"{root.parent} does not exist; make it first") from None
        os.mkdir(root, 0o755)
        return True
    if not stat.S_ISDIR(st.st_mode):
        raise BadInput(f"{root} is not a folder; a restore needs an empty one")
    if _holds_anything(root):
        raise BadInput(
            f"{root} is not empty; a restore goes into an empty home only",
            hint="pass --home with a new folder (it is made), then start it there",
        )
    return False


def _holds_anything(folder: Path) -> bool:
    with os.scandir(folder) as entries:
        return any(True for _ in entries)


def _check_state_dir(root: Path, state_dir: Path) -> None:
    if state_dir == root / STATE:
        return
    try:
        held = _holds_anything(state_dir)
    except FileNotFoundError:
        return
    except NotADirectoryError:
        held = True
    if held:
        raise BadInput(
            f"the restored orchestrator.yaml puts state_dir at {state_dir}, which is not "
            "empty; nothing was restored",
            hint="set ORCHESTRATOR_STATE_DIR to an empty folder for the restore and after",
        )


def _move(source: Path, target: Path, moved: list[tuple[Path, Path]]) -> None:
    if target.exists() or target.is_symlink():
        raise RestoreFailed(f"{target} appeared during the restore; nothing was replaced")
    try:
        os.rename(source, target)
    except OSError as exc:
        if exc.errno != errno.EXDEV:  # another file system: a state_dir elsewhere
            raise RestoreFailed(f"cannot move {source} to {target}: {exc.strerror}") from None
        shutil.copytree(source, target, symlinks=True, copy_function=shutil.copy2)
        sync_filesystem(target)
        shutil.rmtree(source)
        return
    moved.append((source, target))


class _Writer:
    """Writes each member into the staging folder through the confined layer."""

    def __init__(self, target: ConfinedDir, progress: Progress, archive: Path) -> None:
        self.archive = archive
        self.target = target
        self.progress = progress
        self.dirs: list[Member] = []
        self.files = 0
        self._written: set[str] = set()  # the names of the files written so far
        self._parent: tuple[str, ConfinedDir] | None = None
        self._said = time.monotonic()

    def _folder(self, name: str) -> ConfinedDir:
        if self._parent is not None and self._parent[0] == name:
            return self._parent[1]
        if self._parent is not None:
            self._parent[1].close()
        folder = self.target.open_dir(name, create=True, mode=0o700, owner=None)
        self._parent = (name, folder)
        return folder

    def _twice(self, name: str) -> BackupInvalid:
        return BackupInvalid(
            f"{self.archive}: holds {name!r} twice (two files, or a file and "
            "the folder of other members)"
        )

    def member(self, member: Member, stream: BinaryIO | None) -> None:
        parts = member.name.split("/")
        for end in range(1, len(parts)):
            if (above := "/".join(parts[:end])) in self._written:
                raise self._twice(above)  # a file, then members inside it
        try:
            if stream is None:
                self._folder(member.name)
                self.dirs.append(member)
                return
            parent, _, base = member.name.rpartition("/")
            with self._folder(parent).create_file(base) as out:
                while chunk := stream.read(CHUNK):
                    out.write(chunk)
                out.flush()
                os.fchmod(out.fileno(), member.mode)
                os.utime(out.fileno(), (member.mtime, member.mtime))
        except FileExistsError:
            raise self._twice(member.name) from None
        except OSError as exc:
            raise RestoreFailed(f"cannot write {member.name}: {exc}") from None
        self._written.add(member.name)
        self.files += 1
        now = time.monotonic()
        if now - self._said >= BACKUP_PROGRESS_SECONDS:
            self._said = now
            self.progress(f"  {self.files:,} files written ({member.name})")

    def finish_dirs(self) -> None:
        """Each folder's mode and time, deepest first (its files are written by now)."""
        if self._parent is not None:
            self._parent[1].close()
            self._parent = None
        for member in sorted(self.dirs, key=lambda m: m.name.count("/"), reverse=True):
            with self.target.open_dir(member.name) as folder:
                os.fchmod(folder.fd, member.mode | 0o700)  # the owner keeps its way in
                os.utime(folder.fd, (member.mtime, member.mtime))


def _outside(staging: Path, root: Path, manifest: Manifest, report: RestoreReport) -> None:
    """Put the files the home names outside itself where the restored configuration
    names them; never over an existing one."""
    if not manifest.outside:
        return
    try:
        config = load_config(Home(root))
    except OrchestratorError as exc:
        for name, was in manifest.outside.items():
            report.outside.append((name, was, f"not placed: {exc.message}"))
        return
    places = {f"{OUTSIDE}/{ALLOWLIST}": config.mount_allowlist,
              f"{OUTSIDE}/{SECRETS}": config.secrets_file}  # fmt: skip
    what = {f"{OUTSIDE}/{ALLOWLIST}": "mount allowlist", f"{OUTSIDE}/{SECRETS}": "secrets file"}
    for name in sorted(manifest.outside):
        dest = places.get(name)
        label = what.get(name, name)
        source = staging / name
        if dest is None:
            report.outside.append((label, manifest.outside[name], "not placed: not configured"))
            continue
        report.outside.append((label, str(dest), _place(source, dest)))


def _place(source: Path, dest: Path) -> str:
    data = source.read_bytes()
    mode = stat.S_IMODE(os.stat(source).st_mode)
    if dest.exists() or dest.is_symlink():  # a dangling symlink too: never written through
        if dest.is_file() and dest.read_bytes() == data:
            return "already there, the same"
        aside = dest.with_name(
            f"{dest.name}.restored-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
        )
        _write_new(aside, data, mode)
        return f"another file is there: the archived one is at {aside}"
    dest.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    _write_new(dest, data, mode)
    return "written"


def _write_new(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
        out.flush()
        os.fchmod(out.fileno(), mode)
        os.fsync(out.fileno())
    fsync_path(path.parent)
