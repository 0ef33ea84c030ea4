"""The backup archive: its format, written and read with every member checked.

A tar file (gzip-compressed when its name ends in ``.tar.gz`` or ``.tgz``) of regular
files and folders only, under three roots: ``home/`` (orchestrator.yaml, groups/, the
installed skills, orchestrator.env), ``state/`` (the state database's snapshot and the
state files worth keeping) and ``outside/`` (files the home names outside itself: the
mount allowlist, the secrets file). Its first member, ``orchestrator-backup.json`` (the
head), names the format, the release that wrote it and the versions of what it holds,
so that a reader refuses a newer backup before it writes anything. Its last,
``orchestrator-backup.manifest.json``, holds the size and sha256 of every member,
computed from the bytes as they were written, and what was left out and why.

Reading goes through the archive once, hashing each member, and refuses (BackupInvalid,
naming the archive and the member) a member of any other type (a symlink, a hard link,
a device, a FIFO: a backup never holds one, so its presence means the file was made or
changed by something else), a name outside the three roots or with ``..``, a name seen
twice, a member the manifest does not list or lists otherwise, and a manifest entry
with no member. A damaged compressed stream fails its own check on the way.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import stat
import tarfile
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, BinaryIO, cast

from orchestrator.errors import BadInput, OrchestratorError
from orchestrator.limits import BACKUP_HEAD_MAX_BYTES, BACKUP_MANIFEST_MAX_BYTES, BACKUP_SPOOL_BYTES
from orchestrator.versions import BACKUP_FORMAT_VERSION, RELEASE

HEAD = "orchestrator-backup.json"
MANIFEST = "orchestrator-backup.manifest.json"
HOME, STATE, OUTSIDE = "home", "state", "outside"
ROOTS = (HOME, STATE, OUTSIDE)
SUFFIXES = (".tar", ".tar.gz", ".tgz")
GZIP_LEVEL = 3  # most of the size gain of 6 or 9 on Markdown, at a fraction of their time
CHUNK = 1024 * 1024


class BackupInvalid(OrchestratorError):
    """A file that is not a whole, unchanged backup; nothing was restored from it."""


def compressed(path: Path) -> bool:
    """Whether an archive of this name is gzip-compressed; BadInput for another suffix."""
    name = path.name
    if not name.endswith(SUFFIXES):
        raise BadInput(
            f"{path}: a backup's name ends in .tar, .tar.gz or .tgz",
            hint="for example: --to orchestrator-backup.tar.gz",
        )
    return not name.endswith(".tar")


@dataclass(frozen=True)
class Head:
    """The archive's first member: what wrote it and the versions of what it holds."""

    format: int
    release: str
    created: float
    versions: dict[str, int]  # schema, layout, group_file, config_file, transcript
    source: dict[str, str]  # the home it was taken from: path, project
    secrets: bool  # orchestrator.env and the secrets file are in it
    summary: dict[str, Any] = field(default_factory=dict)  # counts, for people

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "release": self.release,
            "created": self.created,
            "versions": self.versions,
            "source": self.source,
            "secrets": self.secrets,
            "summary": self.summary,
        }

    @classmethod
    def from_json(cls, data: Any, shown: str) -> Head:
        try:
            versions = data["versions"]
            head = cls(
                format=int(data["format"]),
                release=str(data["release"]),
                created=float(data["created"]),
                versions={str(k): int(v) for k, v in versions.items()},
                source={str(k): str(v) for k, v in data.get("source", {}).items()},
                secrets=bool(data.get("secrets", False)),
                summary=dict(data.get("summary") or {}),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BackupInvalid(f"{shown}: its head ({HEAD}) is not one: {exc}") from None
        return head


@dataclass
class Manifest:
    """The archive's last member: every member's size and sha256, and what was left out."""

    files: dict[str, tuple[int, str]] = field(default_factory=dict)
    dirs: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (name, why)
    outside: dict[str, str] = field(default_factory=dict)  # outside/<name> -> its path then
    secrets_left_out: list[str] = field(default_factory=list)  # what --include-secrets adds
    head_sha256: str = ""

    def to_json(self, head: Head) -> dict[str, Any]:
        return {
            "format": head.format,
            "release": head.release,
            "versions": head.versions,
            "head_sha256": self.head_sha256,
            "files": {name: [size, digest] for name, (size, digest) in self.files.items()},
            "dirs": self.dirs,
            "skipped": [list(s) for s in self.skipped],
            "outside": self.outside,
            "secrets_left_out": self.secrets_left_out,
        }

    @classmethod
    def from_json(cls, data: Any, shown: str) -> Manifest:
        try:
            return cls(
                files={str(k): (int(v[0]), str(v[1])) for k, v in data["files"].items()},
                dirs=[str(d) for d in data["dirs"]],
                skipped=[(str(a), str(b)) for a, b in data.get("skipped", [])],
                outside={str(k): str(v) for k, v in data.get("outside", {}).items()},
                secrets_left_out=[str(s) for s in data.get("secrets_left_out", [])],
                head_sha256=str(data["head_sha256"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise BackupInvalid(f"{shown}: its manifest ({MANIFEST}) is not one: {exc}") from None

    @property
    def bytes(self) -> int:
        return sum(size for size, _ in self.files.values())


def _json_bytes(data: dict[str, Any]) -> bytes:
    return json.dumps(data, ensure_ascii=True, sort_keys=True).encode()


class ArchiveWriter:
    """Writes members to an open file, hashing each; ``finish`` adds the manifest."""

    def __init__(self, out: BinaryIO, *, gzipped: bool, spool_dir: Path) -> None:
        self._gzip = gzip.GzipFile(fileobj=out, mode="wb", compresslevel=GZIP_LEVEL, mtime=0) \
            if gzipped else None  # fmt: skip
        # GzipFile is a binary stream; typeshed does not call it IO[bytes]
        stream = cast(IO[bytes], self._gzip) if self._gzip is not None else out
        # closed by finish (the writer lives across many calls)
        self._tar = tarfile.open(fileobj=stream, mode="w|", format=tarfile.PAX_FORMAT)  # noqa: SIM115
        self.manifest = Manifest()
        self._spool_dir = spool_dir
        self._names: set[str] = set()

    def _info(
        self, name: str, kind: bytes, mode: int, mtime: float, size: int = 0
    ) -> tarfile.TarInfo:
        if name in self._names:
            raise OrchestratorError(f"{name} would be archived twice")
        self._names.add(name)
        info = tarfile.TarInfo(name)
        info.type = kind
        info.mode = stat.S_IMODE(mode) & 0o777  # never setuid, setgid or sticky
        info.mtime = int(mtime)
        info.size = size
        info.uname = info.gname = ""
        return info

    def add_head(self, head: Head) -> None:
        data = _json_bytes(head.to_json())
        self.manifest.head_sha256 = hashlib.sha256(data).hexdigest()
        self._tar.addfile(self._info(HEAD, tarfile.REGTYPE, 0o600, head.created, len(data)),
                          io.BytesIO(data))  # fmt: skip

    def add_dir(self, name: str, mode: int, mtime: float) -> None:
        self._tar.addfile(self._info(name, tarfile.DIRTYPE, mode, mtime))
        self.manifest.dirs.append(name)

    def add_file(self, name: str, source: BinaryIO, limit: int, mode: int, mtime: float) -> int:
        """Archive at most ``limit`` bytes of ``source`` (its size when it was opened: a
        file that grows meanwhile is archived as it was then); the bytes archived."""
        with tempfile.SpooledTemporaryFile(BACKUP_SPOOL_BYTES, dir=str(self._spool_dir)) as held:
            digest, size = hashlib.sha256(), 0
            while size < limit and (chunk := source.read(min(CHUNK, limit - size))):
                held.write(chunk)
                digest.update(chunk)
                size += len(chunk)
            held.seek(0)
            self._tar.addfile(self._info(name, tarfile.REGTYPE, mode, mtime, size), held)
        self.manifest.files[name] = (size, digest.hexdigest())
        return size

    def finish(self, head: Head) -> None:
        data = _json_bytes(self.manifest.to_json(head))
        info = self._info(MANIFEST, tarfile.REGTYPE, 0o600, time.time(), len(data))
        self._tar.addfile(info, io.BytesIO(data))
        self._tar.close()
        if self._gzip is not None:
            self._gzip.close()

    def discard(self) -> None:
        """Close the streams of an archive given up on, while its file is still open: one
        left to the garbage collector would write to the file closed by then."""
        with contextlib.suppress(OSError, ValueError):
            self._tar.close()
        if self._gzip is not None:
            with contextlib.suppress(OSError, ValueError):
                self._gzip.close()


@dataclass(frozen=True)
class Member:
    """A member as a reader's consumer sees it: its name, whether it is a folder, its
    mode and time; a file's bytes come from the stream handed with it."""

    name: str
    is_dir: bool
    mode: int
    mtime: float


OnMember = Callable[[Member, BinaryIO | None], None]


def check_name(name: str, shown: str) -> None:
    """BackupInvalid unless ``name`` is a relative path under one of the roots, without
    '..', '.' or empty components."""
    parts = name.split("/")
    if (
        not name
        or len(name) > 4096
        or "\x00" in name
        or name.startswith("/")
        or parts[0] not in ROOTS
        or any(p in ("", ".", "..") for p in parts)
    ):
        raise BackupInvalid(f"{shown}: holds a member named {name!r}, outside what a backup holds")


class _Hashing:
    """A member's stream that hashes what is read of it."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.digest = hashlib.sha256()
        self.size = 0

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size)
        self.digest.update(data)
        self.size += len(data)
        return data

    def drain(self) -> None:
        while self.read(CHUNK):
            pass


def _small(tar: tarfile.TarFile, info: tarfile.TarInfo, limit: int, shown: str) -> bytes:
    if not info.isreg() or info.size > limit:
        raise BackupInvalid(f"{shown}: its {info.name} is not a file of at most {limit:,} bytes")
    stream = tar.extractfile(info)
    assert stream is not None
    return stream.read()


def read_archive(
    path: Path, check_head: Callable[[Head], None], on_member: OnMember | None = None
) -> tuple[Head, Manifest]:
    """Go through the archive at ``path`` once: the head (given to ``check_head``, which
    may refuse it before anything else is read), every member (given to ``on_member``
    with its stream, for a file), then the manifest, checked against what was read.
    BackupInvalid for anything a backup cannot hold or that does not match."""
    shown = str(path)
    try:
        handle = open(path, "rb")  # noqa: SIM115 (closed below)
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror}") from None
    try:
        return _read(handle, shown, check_head, on_member)
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:  # a damaged stream
        raise BackupInvalid(f"{shown}: not a whole archive ({exc})") from None
    finally:
        handle.close()


def _read(
    handle: BinaryIO, shown: str, check_head: Callable[[Head], None], on_member: OnMember | None
) -> tuple[Head, Manifest]:
    try:
        tar = tarfile.open(fileobj=handle, mode="r|*")  # noqa: SIM115 (closed below)
    except TypeError:  # tarfile's reading of a gzip header cut short: ord() of b""
        raise BackupInvalid(
            f"{shown}: not a whole archive (its gzip header is cut short)"
        ) from None
    with tar:
        members: Iterator[tarfile.TarInfo] = iter(tar)
        first = next(members, None)
        if first is None or first.name != HEAD:
            raise BackupInvalid(f"{shown}: not an orchestrator backup (no {HEAD} first)")
        head_bytes = _small(tar, first, BACKUP_HEAD_MAX_BYTES, shown)
        try:
            head = Head.from_json(json.loads(head_bytes), shown)
        except ValueError as exc:
            raise BackupInvalid(f"{shown}: its head ({HEAD}) is not JSON: {exc}") from None
        check_head(head)
        seen_files: dict[str, tuple[int, str]] = {}
        seen_dirs: set[str] = set()
        manifest: Manifest | None = None
        for info in members:
            if manifest is not None:
                raise BackupInvalid(f"{shown}: holds {info.name!r} after its manifest")
            if info.name == MANIFEST:
                data = _small(tar, info, BACKUP_MANIFEST_MAX_BYTES, shown)
                try:
                    manifest = Manifest.from_json(json.loads(data), shown)
                except ValueError as exc:
                    raise BackupInvalid(f"{shown}: its manifest is not JSON: {exc}") from None
                continue
            check_name(info.name, shown)
            if info.name in seen_files or info.name in seen_dirs:
                raise BackupInvalid(f"{shown}: holds {info.name!r} twice")
            member = Member(info.name, info.isdir(), info.mode & 0o777, float(info.mtime))
            if info.isdir():
                seen_dirs.add(info.name)
                if on_member is not None:
                    on_member(member, None)
            elif info.isreg():
                stream = tar.extractfile(info)
                assert stream is not None
                hashing = _Hashing(stream)
                if on_member is not None:
                    on_member(member, hashing)  # type: ignore[arg-type]
                hashing.drain()
                seen_files[info.name] = (hashing.size, hashing.digest.hexdigest())
            else:
                raise BackupInvalid(
                    f"{shown}: holds {_kind(info)} at {info.name!r}; a backup holds regular "
                    "files and folders only (nothing was restored from it)"
                )
    if manifest is None:
        raise BackupInvalid(f"{shown}: ends without its manifest ({MANIFEST}): cut short?")
    _compare(shown, head_bytes, seen_files, seen_dirs, manifest)
    return head, manifest


def _kind(info: tarfile.TarInfo) -> str:
    if info.issym():
        return "a symlink"
    if info.islnk():
        return "a hard link"
    if info.isfifo():
        return "a FIFO"
    if info.ischr() or info.isblk():
        return "a device file"
    return f"a member of type {info.type!r}"


def _compare(
    shown: str,
    head_bytes: bytes,
    files: dict[str, tuple[int, str]],
    dirs: set[str],
    manifest: Manifest,
) -> None:
    problems: list[str] = []
    if hashlib.sha256(head_bytes).hexdigest() != manifest.head_sha256:
        problems.append(f"{HEAD} differs from what was written")
    for name, (size, digest) in sorted(files.items()):
        listed = manifest.files.get(name)
        if listed is None:
            problems.append(f"{name} is not in the manifest")
        elif listed != (size, digest):
            problems.append(
                f"{name} is {size:,} bytes with sha256 {digest[:12]}..., the manifest says "
                f"{listed[0]:,} bytes and {listed[1][:12]}..."
            )
    problems += [f"{name} is missing" for name in sorted(set(manifest.files) - set(files))]
    problems += [f"folder {name} is missing" for name in sorted(set(manifest.dirs) - set(dirs))]
    problems += [
        f"folder {n} is not in the manifest" for n in sorted(set(dirs) - set(manifest.dirs))
    ]
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise BackupInvalid(
            f"{shown}: does not match its manifest: " + "; ".join(problems[:3]) + more,
            hint="the archive was damaged or changed after it was written; use another backup",
        )


def check_versions(head: Head, shown: str, supported: dict[str, int]) -> None:
    """Refuse (BackupTooNew) a head whose format or versions are newer than ``supported``
    (this release's)."""
    from orchestrator.versions import FileTooNew

    newer = [
        f"{what} {found} (this release reads up to {supported[what]})"
        for what, found in sorted({"format": head.format, **head.versions}.items())
        if what in supported and found > supported[what]
    ]
    if newer:
        raise FileTooNew(
            f"{shown} was written by release {head.release}, newer than this orchestrator "
            f"({RELEASE}): " + ", ".join(newer) + "; nothing was restored",
            hint="restore it with that release or a newer one",
        )


def supported_versions() -> dict[str, int]:
    """What this release reads, by the keys of a head's versions."""
    from orchestrator.store.schema import LATEST
    from orchestrator.versions import (
        CONFIG_FILE_VERSION,
        GROUP_FILE_VERSION,
        LAYOUT_VERSION,
        TRANSCRIPT_VERSION,
    )

    return {
        "format": BACKUP_FORMAT_VERSION,
        "schema": LATEST,
        "layout": LAYOUT_VERSION,
        "group_file": GROUP_FILE_VERSION,
        "config_file": CONFIG_FILE_VERSION,
        "transcript": TRANSCRIPT_VERSION,
    }


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
