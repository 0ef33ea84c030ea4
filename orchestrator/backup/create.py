"""``orchestrator backup``: a consistent archive of a home, taken while its daemon runs.

What goes in, in this order:

- the state database, copied with SQLite's online backup API in one step (never a
  copy of the live file), first: every message accepted before that moment is in the
  archive, and the folders archived after it are at least as new (a turn they show that
  the copy still has in flight is delivered again after a restore, and the runner
  answers a turn it finished with the replies it recorded);
- ``orchestrator.yaml``, the installed skills and the groups' folders (each group's
  whole folder: ``group.yaml``, memory, files, sessions, its history in ``.history/``,
  learned behaviors, instructions, ``.memory-migration/``, and ``groups/.removed/``),
  read through the confined file layer: a symlink, FIFO, socket or device found there
  (a container may have put it there) is never archived, and is listed as left out;
  a group's history is read under its lock, so no change is caught half-written;
- the state files worth keeping (when each group last consolidated, the chat's line
  history); not the search indexes (rebuilt from memory), logs or runtime folders;
- outside the home: the mount allowlist, and with ``include_secrets`` the secrets file
  and ``orchestrator.env`` (left out otherwise, and listed so a restore says so).

The archive is written beside its name and renamed into place once complete and on
disk, mode 0600 (it holds every conversation); an existing file is never replaced.
"""

from __future__ import annotations

import os
import stat
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.backup.archive import (
    HOME,
    OUTSIDE,
    STATE,
    ArchiveWriter,
    Head,
    compressed,
    fsync_path,
)
from orchestrator.config import OrchestratorConfig, load_config
from orchestrator.confined import ConfinedDir, UnsafePath, kind_of
from orchestrator.errors import BadInput, OrchestratorError
from orchestrator.home import Home
from orchestrator.limits import BACKUP_PROGRESS_SECONDS
from orchestrator.memory.history import History
from orchestrator.store.db import Snapshot, snapshot
from orchestrator.store.messages import QUEUE_FILE
from orchestrator.versions import (
    BACKUP_FORMAT_VERSION,
    CONFIG_FILE_VERSION,
    GROUP_FILE_VERSION,
    LAYOUT_VERSION,
    RELEASE,
    TRANSCRIPT_VERSION,
)

Progress = Callable[[str], None]
ENV_FILE = "orchestrator.env"  # in the home: the daemon's secrets (systemd's EnvironmentFile)
SKILL_DIRS = ("skills", "skills-by-group")  # installed skills (orchestrator.skills.catalog)
STATE_FILES = ("consolidated.json", "chat-history")  # state worth keeping besides the queue
ALLOWLIST, SECRETS = "mount-allowlist.yaml", "secrets.yaml"  # names under outside/


@dataclass
class BackupReport:
    path: Path
    size: int  # of the archive
    head: Head
    files: int = 0
    bytes: int = 0  # of the files archived
    groups: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    secrets_left_out: list[str] = field(default_factory=list)
    outside: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {
            "path": str(self.path),
            "size": self.size,
            "release": self.head.release,
            "versions": self.head.versions,
            "secrets": self.head.secrets,
            "summary": self.head.summary,
            "files": self.files,
            "bytes": self.bytes,
            "groups": self.groups,
            "skipped": [{"name": n, "why": w} for n, w in self.skipped],
            "secrets_left_out": self.secrets_left_out,
            "outside": self.outside,
        }


def default_target(project: str) -> Path:
    """A dated archive name in the current folder."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return Path.cwd() / f"orchestrator-backup-{project}-{stamp}.tar.gz"


def create_backup(
    home: Home,
    to: Path | None = None,
    *,
    include_secrets: bool = False,
    progress: Progress = lambda _: None,
) -> BackupReport:
    """Write a backup of ``home`` to ``to`` (default: a dated name in the current folder)
    and report what it holds. BadInput for a name that exists, ends otherwise than .tar,
    .tar.gz or .tgz, or lies inside what it would archive."""
    config = load_config(home)
    target = (to or default_target(config.project)).absolute()
    gzipped = compressed(target)
    _check_target(home, target)
    with tempfile.TemporaryDirectory(prefix=".orchestrator-backup-", dir=target.parent) as tmp:
        work = Path(tmp)
        started = time.monotonic()
        db = home.state_dir / QUEUE_FILE
        snap: Snapshot | None = None
        if db.exists():
            progress("copying the state database (SQLite's online backup)")
            snap = snapshot(db, work / QUEUE_FILE)
        head = Head(
            format=BACKUP_FORMAT_VERSION,
            release=RELEASE,
            created=time.time(),
            versions={
                **({"schema": snap.schema} if snap else {}),
                "layout": snap.layout if snap else LAYOUT_VERSION,
                "group_file": GROUP_FILE_VERSION,
                "config_file": CONFIG_FILE_VERSION,
                "transcript": TRANSCRIPT_VERSION,
            },
            source={"home": str(home.root), "project": config.project},
            secrets=include_secrets,
            summary=(
                {"messages": snap.messages, "tasks": snap.tasks, "bindings": snap.bindings}
                if snap
                else {}
            ),
        )
        partial = target.with_name(f".{target.name}.partial-{os.urandom(4).hex()}")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            with os.fdopen(fd, "wb") as out:
                writer = ArchiveWriter(out, gzipped=gzipped, spool_dir=work)
                try:
                    report = _write(
                        home, config, writer, head, snap, work, include_secrets, progress
                    )
                    writer.finish(head)
                except BaseException:
                    writer.discard()
                    raise
                out.flush()
                os.fsync(out.fileno())
            try:
                os.link(partial, target)  # never replaces a file made meanwhile
            except FileExistsError:
                raise BadInput(f"{target} exists; nothing was replaced") from None
            fsync_path(target.parent)
        finally:
            partial.unlink(missing_ok=True)
        report.path, report.size = target, target.stat().st_size
        manifest = writer.manifest
        report.files, report.bytes = len(manifest.files), manifest.bytes
        report.skipped, report.secrets_left_out = manifest.skipped, manifest.secrets_left_out
        report.outside = manifest.outside
        progress(
            f"wrote {target} ({report.size:,} bytes, {report.files:,} files) in "
            f"{time.monotonic() - started:.1f}s"
        )
        return report


def _check_target(home: Home, target: Path) -> None:
    if target.exists() or target.is_symlink():
        raise BadInput(f"{target} exists; a backup never replaces a file", hint="name another")
    if not target.parent.is_dir():
        raise BadInput(f"{target.parent} is not a folder")
    real = Path(os.path.realpath(target.parent))
    for inside in (home.groups_dir, home.state_dir, *(home.root / d for d in SKILL_DIRS)):
        root = Path(os.path.realpath(inside))
        if real == root or root in real.parents:
            raise BadInput(
                f"{target} is inside {inside}, which the backup archives",
                hint="write it outside the home's groups/, state/ and skills folders",
            )


class _Tree:
    """Archives folders through the confined layer, counting and telling progress."""

    def __init__(self, writer: ArchiveWriter, progress: Progress) -> None:
        self.writer = writer
        self.progress = progress
        self.files = 0
        self.bytes = 0
        self._said = time.monotonic()

    def skip(self, name: str, why: str) -> None:
        self.writer.manifest.skipped.append((name, why))

    def file(self, folder: ConfinedDir, entry: str, name: str) -> None:
        try:
            source, st = folder.reading(entry)
        except FileNotFoundError:
            return  # removed since it was listed
        except UnsafePath as exc:  # swapped for a link, a FIFO... since it was listed
            self.skip(name, exc.kind or exc.reason)
            return
        with source:
            self.bytes += self.writer.add_file(name, source, st.st_size, st.st_mode, st.st_mtime)
        self.files += 1
        now = time.monotonic()
        if now - self._said >= BACKUP_PROGRESS_SECONDS:
            self._said = now
            self.progress(f"  {self.files:,} files, {self.bytes:,} bytes so far ({name})")

    def tree(self, base: ConfinedDir, name: str) -> None:
        """``base`` and everything under it, as ``name``/...: folders and regular files;
        anything else is left out and listed."""
        st = os.fstat(base.fd)
        self.writer.add_dir(name, st.st_mode, st.st_mtime)
        for rel, folder, entries in base.walk():
            prefix = f"{name}/{rel}" if rel else name
            for entry in entries:
                member = f"{prefix}/{entry.name}"
                try:
                    est = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if stat.S_ISDIR(est.st_mode):
                    self.writer.add_dir(member, est.st_mode, est.st_mtime)
                elif stat.S_ISREG(est.st_mode):
                    self.file(folder, entry.name, member)
                else:
                    self.skip(member, kind_of(est.st_mode))


def _write(
    home: Home,
    config: OrchestratorConfig,
    writer: ArchiveWriter,
    head: Head,
    snap: Snapshot | None,
    work: Path,
    include_secrets: bool,
    progress: Progress,
) -> BackupReport:
    report = BackupReport(Path(), 0, head)
    tree = _Tree(writer, progress)
    writer.add_head(head)
    writer.add_dir(STATE, 0o700, time.time())
    if snap is not None:
        with open(work / QUEUE_FILE, "rb") as copy:
            size = os.fstat(copy.fileno()).st_size
            writer.add_file(f"{STATE}/{QUEUE_FILE}", copy, size, 0o600, time.time())
    if home.state_dir.is_dir():
        with ConfinedDir.open(home.state_dir) as state:
            for name in STATE_FILES:
                if state.lstat(name) is not None:
                    tree.file(state, name, f"{STATE}/{name}")
    with ConfinedDir.open(home.root) as root:
        writer.add_dir(HOME, 0o755, time.time())
        if root.lstat(home.config_file.name) is not None:
            tree.file(root, home.config_file.name, f"{HOME}/{home.config_file.name}")
        if root.lstat(ENV_FILE) is not None:
            if include_secrets:
                tree.file(root, ENV_FILE, f"{HOME}/{ENV_FILE}")
            else:
                writer.manifest.secrets_left_out.append(str(home.root / ENV_FILE))
        for name in SKILL_DIRS:
            st = root.lstat(name)
            if st is not None and stat.S_ISDIR(st.st_mode):
                with root.open_dir(name) as skills:
                    tree.tree(skills, f"{HOME}/{name}")
    _groups(home, tree, report, progress)
    writer.add_dir(OUTSIDE, 0o700, time.time())
    _outside(config.mount_allowlist, ALLOWLIST, tree)
    if config.secrets_file is not None:
        if include_secrets:
            _outside(config.secrets_file, SECRETS, tree)
        elif config.secrets_file.exists():
            writer.manifest.secrets_left_out.append(str(config.secrets_file))
    return report


def _groups(home: Home, tree: _Tree, report: BackupReport, progress: Progress) -> None:
    if not home.groups_dir.is_dir():
        return
    with ConfinedDir.open(home.groups_dir) as groups:
        st = os.fstat(groups.fd)
        tree.writer.add_dir(f"{HOME}/groups", st.st_mode, st.st_mtime)
        for entry in groups.entries():
            name = f"{HOME}/groups/{entry.name}"
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(st.st_mode):
                tree.file(groups, entry.name, name)
                continue
            if not stat.S_ISDIR(st.st_mode):
                tree.skip(name, kind_of(st.st_mode))
                continue
            try:
                folder = groups.open_dir(entry.name)
            except (FileNotFoundError, UnsafePath):
                continue  # removed or swapped since it was listed
            before = tree.files
            with folder:
                if entry.name.startswith("."):  # .removed/: archives of removed groups
                    tree.tree(folder, name)
                else:
                    with History(home.groups_dir, entry.name).held():
                        tree.tree(folder, name)
                    report.groups.append(entry.name)
            progress(f"{name.removeprefix(HOME + '/')}: {tree.files - before:,} files")


def _outside(path: Path, name: str, tree: _Tree) -> None:
    """A file the home names outside itself, when it is a regular file."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise OrchestratorError(f"cannot read {path}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        tree.skip(str(path), kind_of(st.st_mode))
        return
    with ConfinedDir.open(path.parent) as folder:
        tree.file(folder, path.name, f"{OUTSIDE}/{name}")
    tree.writer.manifest.outside[f"{OUTSIDE}/{name}"] = str(path)
