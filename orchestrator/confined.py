"""The confined file layer: how host code touches folders a group's container can write.

A container may change anything under its writable mounts (``memory/``, ``files/``,
``sessions/``, its runtime folder) between two of our system calls: swap a folder for a
symlink, put a FIFO where a file was. The host runs as root, so a path walked twice is an
attack surface (the ``docker cp`` symlink-exchange race, CVE-2018-15664). Here every path
is resolved one component at a time from a directory descriptor with ``O_NOFOLLOW``, so a
symlink anywhere on the way is refused rather than followed; only regular files are read
(opened non-blocking, then checked on the descriptor, so a FIFO never blocks); reads are
capped; writes are an exclusive temporary file renamed inside the same descriptor;
ownership and modes change through descriptors or ``*at`` calls that never follow a link.

A component walk costs one ``openat`` per folder and works on every kernel and
filesystem, which ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`` does not (and Python
does not expose it). Standard library only: the in-container memory hook imports this.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat

# typing, dataclasses and pathlib are not imported: the memory hook imports this module
# at every fresh context, and they would double its start-up time
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path
    from typing import BinaryIO

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
Owner = tuple[int, int]
INHERIT = "inherit"  # files the host makes belong to the owner of the folder they are in


class UnsafePath(OSError):
    """A path the layer refuses: a symlink, a special file, too large, or malformed."""

    def __init__(
        self, shown: str, reason: str, code: int = errno.EPERM, kind: str | None = None
    ) -> None:
        super().__init__(code, f"{shown}: {reason}")
        self.shown = shown
        self.reason = reason
        self.kind = kind  # what was found, when the refusal is about a file type

    def __str__(self) -> str:
        return f"{self.shown}: {self.reason}"


def kind_of(mode: int) -> str:
    """A few words for a file type, for messages."""
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device file"


def split(relative: str) -> list[str]:
    """The components of a relative path; UnsafePath for absolute paths, '..', NUL."""
    if not isinstance(relative, str) or "\x00" in relative or relative.startswith("/"):
        raise UnsafePath(repr(relative), "not a relative path", errno.EINVAL)
    parts = [p for p in relative.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafePath(relative, "'..' is not allowed", errno.EINVAL)
    return parts


class Usage:
    """What a folder holds: ``files``, their apparent ``bytes`` (regular files) and the
    ``disk_bytes`` allocated for every entry (what fills a disk)."""

    __slots__ = ("bytes", "disk_bytes", "files")

    def __init__(self, files: int, bytes: int, disk_bytes: int) -> None:
        self.files, self.bytes, self.disk_bytes = files, bytes, disk_bytes

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Usage) and (self.files, self.bytes, self.disk_bytes) == (
            other.files,
            other.bytes,
            other.disk_bytes,
        )

    def __hash__(self) -> int:
        return hash((self.files, self.bytes, self.disk_bytes))

    def __repr__(self) -> str:
        return f"Usage(files={self.files}, bytes={self.bytes}, disk_bytes={self.disk_bytes})"


class ConfinedDir:
    """A folder held open by descriptor; every operation is relative to it.

    Use as a context manager, or call ``close``. ``shown`` is how messages name it.
    """

    def __init__(self, fd: int, shown: str) -> None:
        self.fd = fd
        self.shown = shown

    # opening

    @classmethod
    def open(cls, base: Path | str, relative: str = "", *, create: bool = False) -> ConfinedDir:
        """Open ``relative`` under the trusted folder ``base``.

        ``base`` is the host's own (such as ``groups/``); it is opened as given. Every
        component of ``relative`` must be a real folder (``create`` makes missing ones).
        """
        fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        root = cls(fd, str(base))
        if not split(relative):
            return root
        with root:
            return root.open_dir(relative, create=create)

    def open_dir(
        self,
        relative: str,
        *,
        create: bool = False,
        mode: int = 0o755,
        owner: Owner | str | None = None,
    ) -> ConfinedDir:
        """A new ConfinedDir for the folder at ``relative`` (the caller closes it).

        Missing folders are made when ``create`` is set, with ``mode`` and ``owner``
        (given once, at creation: no later walk is needed).
        """
        fd = os.dup(self.fd)
        shown = self.shown
        try:
            for part in split(relative):
                shown = f"{shown}/{part}"
                if create:
                    self._mkdir(fd, part, shown, mode, owner)
                try:
                    child = os.open(part, _DIR, dir_fd=fd)
                except OSError as exc:
                    raise self._refusal(fd, part, shown, exc, "a folder") from None
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return ConfinedDir(fd, shown)

    def make_dir(
        self, name: str, *, mode: int = 0o755, owner: Owner | str | None = INHERIT
    ) -> bool:
        """Make the folder ``name`` here unless it exists; True when this call made it."""
        if split(name) != [name]:
            raise UnsafePath(name, "must be a single name", errno.EINVAL)
        return self._mkdir(self.fd, name, f"{self.shown}/{name}", mode, owner)

    def _mkdir(
        self, dir_fd: int, name: str, shown: str, mode: int, owner: Owner | str | None
    ) -> bool:
        try:
            os.mkdir(name, 0o700, dir_fd=dir_fd)
        except FileExistsError:
            return False
        # Owner and mode once, on a descriptor of what we made: no walk later. If the
        # name was swapped already, the open refuses it.
        try:
            fd = os.open(name, _DIR, dir_fd=dir_fd)
        except OSError as exc:
            raise self._refusal(dir_fd, name, shown, exc, "a folder") from None
        try:
            target = self._owner(dir_fd, owner)
            if target is not None:
                os.fchown(fd, *target)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        return True

    @staticmethod
    def _owner(dir_fd: int, owner: Owner | str | None) -> Owner | None:
        if owner is None or os.geteuid() != 0:
            return None
        if owner == INHERIT:
            st = os.fstat(dir_fd)
            return st.st_uid, st.st_gid
        assert isinstance(owner, tuple)
        return owner

    @staticmethod
    def _refusal(dir_fd: int, name: str, shown: str, exc: OSError, expected: str) -> OSError:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENXIO, errno.EOPNOTSUPP):
            try:
                mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
            except OSError:
                return exc
            kind = kind_of(mode)
            return UnsafePath(shown, f"is {kind}, not {expected}", exc.errno, kind)
        exc.filename = shown
        return exc

    @contextlib.contextmanager
    def _at(self, relative: str) -> Iterator[tuple[int, str, str]]:
        """(descriptor of the folder holding the last component, its name, how to show
        it); the folders on the way are walked without following links."""
        parts = split(relative)
        if not parts:
            raise UnsafePath(self.shown, "names a folder, not a file", errno.EISDIR)
        shown = f"{self.shown}/{'/'.join(parts)}"
        if len(parts) == 1:
            yield self.fd, parts[0], shown
            return
        with self.open_dir("/".join(parts[:-1])) as parent:
            yield parent.fd, parts[-1], shown

    def _dup(self) -> ConfinedDir:
        return ConfinedDir(os.dup(self.fd), self.shown)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> ConfinedDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # looking

    def lstat(self, relative: str) -> os.stat_result | None:
        """The entry's own status (a symlink is not followed), or None when missing or
        when a folder on the way is not a real folder."""
        try:
            with self._at(relative) as (dir_fd, name, _):
                return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except (FileNotFoundError, UnsafePath, NotADirectoryError):
            return None

    def entries(self) -> list[os.DirEntry[str]]:
        """This folder's entries, sorted by name (their ``stat`` does not follow links)."""
        with os.scandir(self.fd) as it:
            return sorted(it, key=lambda e: e.name)

    # reading

    def _open_regular(self, relative: str) -> tuple[int, os.stat_result, str]:
        """(a descriptor, its status, how to show it) of the regular file at
        ``relative``, opened without following a link or waiting on a FIFO; the
        caller closes it. UnsafePath for anything but a regular file."""
        with self._at(relative) as (dir_fd, name, shown):
            try:
                fd = os.open(name, _READ, dir_fd=dir_fd)
            except OSError as exc:
                raise self._refusal(dir_fd, name, shown, exc, "a regular file") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            kind = kind_of(st.st_mode)
            raise UnsafePath(shown, f"is {kind}, not a regular file", kind=kind)
        return fd, st, shown

    def read_bytes(self, relative: str, limit: int, *, truncate: bool = False) -> bytes:
        """A regular file's bytes, at most ``limit`` of them.

        A larger file is UnsafePath, or with ``truncate`` its first ``limit`` bytes.
        A symlink, FIFO, socket or device is UnsafePath (a FIFO never blocks);
        FileNotFoundError when missing.
        """
        fd, st, shown = self._open_regular(relative)
        try:
            if st.st_size > limit and not truncate:
                raise UnsafePath(
                    shown, f"is {st.st_size:,} bytes, over the {limit:,}-byte read limit"
                )
            chunks: list[bytes] = []
            left = limit
            while left > 0:
                chunk = os.read(fd, min(left, 1 << 20))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
            if left == 0 and not truncate and os.read(fd, 1):
                raise UnsafePath(shown, f"grew past the {limit:,}-byte read limit")
            return b"".join(chunks)
        finally:
            os.close(fd)

    def copy_to(self, relative: str, out: BinaryIO, limit: int) -> int:
        """Copy a regular file into ``out`` (a file of the host's own), in pieces, and
        return how many bytes: at most ``limit`` (UnsafePath when the file is larger, or
        grows past it while it is read). Refuses what read_bytes refuses."""
        fd, st, shown = self._open_regular(relative)
        try:
            if st.st_size > limit:
                raise UnsafePath(
                    shown, f"is {st.st_size:,} bytes, over the {limit:,}-byte limit", errno.EFBIG
                )
            copied = 0
            while chunk := os.read(fd, 1 << 20):
                copied += len(chunk)
                if copied > limit:
                    raise UnsafePath(shown, f"grew past the {limit:,}-byte limit", errno.EFBIG)
                out.write(chunk)
            return copied
        finally:
            os.close(fd)

    def sha256(self, relative: str) -> tuple[str, int]:
        """(the sha256 hex digest, the size) of a regular file, read in pieces: a file of
        any size costs no more memory than a piece. Refuses what read_bytes refuses."""
        import hashlib

        fd, _st, _shown = self._open_regular(relative)
        try:
            digest, size = hashlib.sha256(), 0
            while chunk := os.read(fd, 1 << 20):
                digest.update(chunk)
                size += len(chunk)
            return digest.hexdigest(), size
        finally:
            os.close(fd)

    def reading(self, relative: str) -> tuple[BinaryIO, os.stat_result]:
        """The regular file at ``relative`` opened for reading, and its status taken on
        the descriptor; the caller closes it. Refuses what read_bytes refuses (a FIFO
        never blocks); the file may still grow or shrink while it is read."""
        fd, st, _shown = self._open_regular(relative)
        try:
            os.set_blocking(fd, True)
        except OSError:
            os.close(fd)
            raise
        return os.fdopen(fd, "rb"), st

    def read_text(self, relative: str, limit: int, *, truncate: bool = False) -> str:
        """As read_bytes, decoded as UTF-8 (UnicodeDecodeError when it is not)."""
        return self.read_bytes(relative, limit, truncate=truncate).decode("utf-8")

    # writing

    def write_atomic(
        self,
        relative: str,
        data: bytes | str,
        *,
        mode: int = 0o644,
        owner: Owner | str | None = INHERIT,
    ) -> None:
        """Replace the file at ``relative`` atomically: readers see the old bytes or the
        new ones. A symlink there is replaced, never followed; a folder is refused."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        with self._at(relative) as (dir_fd, name, shown):
            tmp = self._write_temp(dir_fd, name, data, mode, owner)
            try:
                os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except OSError as exc:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp, dir_fd=dir_fd)
                if exc.errno in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
                    raise UnsafePath(shown, "is a folder; not replaced", exc.errno) from None
                raise
            os.fsync(dir_fd)

    def create_exclusive(
        self,
        relative: str,
        data: bytes | str,
        *,
        mode: int = 0o644,
        owner: Owner | str | None = INHERIT,
        sync_folder: bool = True,
    ) -> bool:
        """Create the file with ``data`` unless the name exists (of any kind); False then.

        Written to a temporary name and hard-linked into place, so creation is exclusive
        and nobody ever sees a partial file. ``sync_folder=False``: the caller syncs the
        folder itself, once for several files (``sync``).
        """
        if isinstance(data, str):
            data = data.encode("utf-8")
        with self._at(relative) as (dir_fd, name, _):
            tmp = self._write_temp(dir_fd, name, data, mode, owner)
            try:
                os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except FileExistsError:
                return False
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp, dir_fd=dir_fd)
            if sync_folder:
                os.fsync(dir_fd)
            return True

    def sync(self) -> None:
        """Sync this folder (its entries: files linked or folders made in it)."""
        os.fsync(self.fd)

    def _write_temp(
        self, dir_fd: int, name: str, data: bytes, mode: int, owner: Owner | str | None
    ) -> str:
        tmp = f".{name[:100]}.{os.urandom(6).hex()}.tmp"
        fd = os.open(tmp, _CREATE, 0o600, dir_fd=dir_fd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            target = self._owner(dir_fd, owner)
            if target is not None:
                os.fchown(fd, *target)
            os.fchmod(fd, mode)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        os.close(fd)
        return tmp

    def create_file(self, relative: str, *, mode: int = 0o600) -> BinaryIO:
        """A new regular file at ``relative``, opened for writing (the caller writes,
        fsyncs and closes it). FileExistsError when the name exists, of any kind: nothing
        is replaced or followed."""
        with self._at(relative) as (dir_fd, name, _):
            fd = os.open(name, _CREATE, mode, dir_fd=dir_fd)
        return os.fdopen(fd, "wb")

    def append(self, relative: str, data: bytes | str, *, mode: int = 0o644) -> int:
        """Append to a regular file (created when missing); the file's size afterwards."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        with self._at(relative) as (dir_fd, name, shown):
            try:
                fd = os.open(name, _APPEND, mode, dir_fd=dir_fd)
            except OSError as exc:
                raise self._refusal(dir_fd, name, shown, exc, "a regular file") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                kind = kind_of(st.st_mode)
                raise UnsafePath(shown, f"is {kind}, not a regular file", kind=kind)
            os.write(fd, data)
            os.fsync(fd)
            return os.fstat(fd).st_size
        finally:
            os.close(fd)

    def make_file(
        self, relative: str, *, mode: int = 0o644, owner: Owner | str | None = INHERIT
    ) -> bool:
        """Create an empty regular file unless the name exists; True when created."""
        return self.create_exclusive(relative, b"", mode=mode, owner=owner)

    # trees

    def walk(
        self, *, hidden: bool = True
    ) -> Iterator[tuple[str, ConfinedDir, list[os.DirEntry[str]]]]:
        """Top-down: (relative folder, the folder opened, its entries). Symlinked or
        vanished folders are not entered; without ``hidden``, names starting with '.'
        are left out. Each ConfinedDir is closed after its step."""
        stack: list[tuple[str, ConfinedDir]] = [("", self._dup())]
        while stack:
            rel, folder = stack.pop()
            with folder:
                try:
                    entries = folder.entries()
                except OSError:
                    continue
                if not hidden:
                    entries = [e for e in entries if not e.name.startswith(".")]
                yield rel, folder, entries
                for entry in reversed(entries):
                    if entry.is_dir(follow_symlinks=False):
                        try:
                            child = folder.open_dir(entry.name)
                        except OSError:
                            continue  # swapped or removed since it was listed
                        stack.append((f"{rel}/{entry.name}" if rel else entry.name, child))

    def usage(self) -> Usage:
        """Regular files, their bytes, and the disk blocks of everything in this tree."""
        files = size = disk = 0
        for _rel, _folder, entries in self.walk():
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                disk += st.st_blocks * 512
                if stat.S_ISREG(st.st_mode):
                    files += 1
                    size += st.st_size
        return Usage(files, size, disk)

    def chown_tree(self, uid: int, gid: int) -> int:
        """Give this folder and everything under it to uid:gid without following a
        symlink (a link itself changes owner, never its target); entries changed."""
        changed = 0
        st = os.fstat(self.fd)
        if (st.st_uid, st.st_gid) != (uid, gid):
            os.fchown(self.fd, uid, gid)
            changed += 1
        for _rel, folder, entries in self.walk():
            for entry in entries:
                try:
                    est = entry.stat(follow_symlinks=False)
                    if (est.st_uid, est.st_gid) != (uid, gid):
                        os.chown(entry.name, uid, gid, dir_fd=folder.fd, follow_symlinks=False)
                        changed += 1
                except FileNotFoundError:
                    continue
        return changed

    def move(self, source: str, target: str) -> None:
        """Rename ``source`` to ``target`` (both relative here, the folders on the way
        walked without following links); the entry moves as it is (a symlink as a link).
        FileExistsError when ``target`` exists: nothing is replaced."""
        with (
            self._at(source) as (src_fd, src_name, _),
            self._at(target) as (
                dst_fd,
                dst_name,
                shown,
            ),
        ):
            try:
                os.stat(dst_name, dir_fd=dst_fd, follow_symlinks=False)
            except FileNotFoundError:
                pass
            else:
                raise FileExistsError(errno.EEXIST, f"{shown} exists; nothing was moved")
            os.rename(src_name, dst_name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
            os.fsync(dst_fd)
            os.fsync(src_fd)

    def unlink(self, relative: str) -> None:
        """Remove the file (or link) at ``relative``; a folder is refused."""
        with self._at(relative) as (dir_fd, name, _):
            os.unlink(name, dir_fd=dir_fd)
            os.fsync(dir_fd)

    def remove_empty_dir(self, relative: str) -> bool:
        """Remove the folder at ``relative`` if it is empty; False when it is missing or
        holds something."""
        try:
            with self._at(relative) as (dir_fd, name, _):
                os.rmdir(name, dir_fd=dir_fd)
        except (FileNotFoundError, UnsafePath, NotADirectoryError):
            return False
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                return False
            raise
        return True

    def remove_tree(self, name: str) -> bool:
        """Delete the entry ``name`` in this folder and, for a folder, all it holds.
        Symlinks are removed, never followed; an entry swapped while we work is looked
        at again. False when it did not exist."""
        if split(name) != [name]:
            raise UnsafePath(name, "must be a single name", errno.EINVAL)
        removed = False
        for _attempt in range(_REMOVE_PASSES):
            try:
                st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
            except FileNotFoundError:
                return removed
            try:
                if stat.S_ISDIR(st.st_mode):
                    with self.open_dir(name) as child:
                        child._empty()
                    os.rmdir(name, dir_fd=self.fd)
                else:
                    os.unlink(name, dir_fd=self.fd)
                return True
            except FileNotFoundError:
                removed = True
            except OSError as exc:
                # swapped for a link (UnsafePath), a folder (EISDIR), a file (ENOTDIR),
                # or refilled (ENOTEMPTY): look again
                if not isinstance(exc, UnsafePath) and exc.errno not in _RETRY_ERRNOS:
                    raise
        raise OSError(
            errno.ENOTEMPTY, f"{self.shown}/{name}: still changing after {_REMOVE_PASSES} passes"
        )

    def _empty(self) -> None:
        for entry in self.entries():
            self.remove_tree(entry.name)


_REMOVE_PASSES = 20
_RETRY_ERRNOS = (errno.EISDIR, errno.ENOTDIR, errno.ENOTEMPTY, errno.EEXIST, errno.ELOOP)


def open_group_dir(groups_dir: Path, folder: str) -> ConfinedDir:
    """The group folder ``groups/<folder>``, refused when it is not a real folder."""
    return ConfinedDir.open(groups_dir, folder)
