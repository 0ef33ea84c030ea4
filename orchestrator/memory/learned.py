"""Learned behaviors: a group's creator-approved standing rules, kept by the host.

``groups/<folder>/learned-behaviors.md`` is host-owned and never mounted: the runner asks
the host for it at each fresh context (relay op ``standing.get``), so a write shows at
the container's next fresh context, and the model changes it only through the
``learned.write`` request, which the host grants from its own record of the turn's
sender (see ``decide_write``). Writes are serialized per group (a lock file, so the
daemon and the CLI never interleave) and atomic: an exclusive temporary file in the
group folder, fsync, rename, fsync of the folder. Reads go through a cache that is
checked against the file's identity, so an edit by hand shows at the next fresh context.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from orchestrator.confined import ConfinedDir, UnsafePath
from orchestrator.limits import LEARNED_READ_MAX_BYTES
from orchestrator.protocol import (
    CREATOR,
    INSTRUCTIONS_FILE,
    LEARNED_FILE,
    NOT_PERSISTED,
    PERSISTED,
    UNKNOWN,
)


class HeldWrite(Protocol):
    """What applying a held write needs of it (a store.held.HeldRequest)."""

    @property
    def id(self) -> int: ...
    @property
    def content(self) -> str: ...
    @property
    def sender(self) -> str: ...
    @property
    def message_id(self) -> str: ...
    @property
    def channel(self) -> str: ...
    @property
    def chat(self) -> str: ...
    def to_dict(self) -> dict[str, object]: ...


LOCK_FILE = ".learned.lock"
_LOCK_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(frozen=True)
class Outcome:
    """The answer to a write: PERSISTED, NOT_PERSISTED or PERSISTENCE_UNKNOWN, and why."""

    status: str
    detail: str

    def __str__(self) -> str:
        return f"{self.status}: {self.detail}"

    @property
    def persisted(self) -> bool:
        return self.status == PERSISTED


@dataclass(frozen=True)
class StoreInfo:
    path: Path
    exists: bool
    size: int
    modified: float | None
    problem: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "path": str(self.path),
            "exists": self.exists,
            "size": self.size,
            "modified": self.modified,
            "problem": self.problem,
        }


_cache_guard = threading.Lock()
_cache: dict[tuple[str, str], tuple[tuple[int, int, int, int], str]] = {}


class LearnedStore:
    """One group's learned-behaviors file."""

    def __init__(self, groups_dir: Path, folder: str) -> None:
        self.groups_dir = Path(groups_dir)
        self.folder = folder
        self.path = self.groups_dir / folder / LEARNED_FILE
        self._key = (str(self.groups_dir), folder)

    def _open_group(self) -> ConfinedDir:
        return ConfinedDir.open(self.groups_dir, self.folder)

    # reading

    def read(self) -> str:
        """The store's text ('' when the file is missing); UnsafePath when it is not a
        regular file, UnicodeDecodeError when it is not UTF-8."""
        with self._open_group() as group:
            return self._read_in(group)

    def _read_in(self, group: ConfinedDir) -> str:
        st = group.lstat(LEARNED_FILE)
        if st is None:
            return ""
        stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        with _cache_guard:
            known = _cache.get(self._key)
        if known is not None and known[0] == stamp and stat.S_ISREG(st.st_mode):
            return known[1]
        try:
            data = group.read_bytes(LEARNED_FILE, LEARNED_READ_MAX_BYTES, truncate=True)
        except FileNotFoundError:
            return ""
        text = data.decode("utf-8")
        with _cache_guard:
            _cache[self._key] = (stamp, text)
        return text

    def info(self) -> StoreInfo:
        try:
            with self._open_group() as group:
                st = group.lstat(LEARNED_FILE)
        except OSError as exc:
            return StoreInfo(self.path, False, 0, None, str(exc))
        if st is None:
            return StoreInfo(self.path, False, 0, None)
        problem = None if stat.S_ISREG(st.st_mode) else "not a regular file"
        return StoreInfo(self.path, True, st.st_size, st.st_mtime, problem)

    # writing

    @contextlib.contextmanager
    def locked(self) -> Iterator[ConfinedDir]:
        """The group folder, with this store's write lock held (across processes)."""
        with self._open_group() as group:
            try:
                fd = os.open(LOCK_FILE, _LOCK_FLAGS, 0o600, dir_fd=group.fd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise UnsafePath(f"{group.shown}/{LOCK_FILE}", "is a symlink") from None
                raise
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise UnsafePath(f"{group.shown}/{LOCK_FILE}", "is not a regular file")
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield group
            finally:
                os.close(fd)  # releases the lock

    def replace(self, content: str) -> Outcome:
        """Replace the whole store with ``content``, atomically and durably."""
        try:
            with self.locked() as group:
                return self._replace_locked(group, content)
        except OSError as exc:  # the group folder or its lock
            return Outcome(NOT_PERSISTED, f"the store could not be locked: {_why(exc)}")

    def _replace_locked(self, group: ConfinedDir, content: str) -> Outcome:
        data = content.encode("utf-8")
        _remove_stale_temps(group)
        before = _read_or_none(group)
        try:
            group.write_atomic(LEARNED_FILE, data, mode=0o644, owner=None)
        except OSError as exc:
            return self._after_failure(group, data, before, exc)
        st = group.lstat(LEARNED_FILE)
        if st is not None:
            with _cache_guard:
                _cache[self._key] = ((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns), content)
        return Outcome(
            PERSISTED,
            f"learned behaviors replaced ({len(content):,} characters); they apply from the "
            "next fresh context",
        )

    def _after_failure(
        self, group: ConfinedDir, data: bytes, before: bytes | None, exc: OSError
    ) -> Outcome:
        """Tell an unchanged store from one whose state is not known."""
        now = _read_or_none(group)
        if now == before and now != data:
            return Outcome(NOT_PERSISTED, f"the write failed ({_why(exc)}); nothing changed")
        return Outcome(UNKNOWN, f"the write failed after it began ({_why(exc)})")


def _read_or_none(group: ConfinedDir) -> bytes | None:
    try:
        return group.read_bytes(LEARNED_FILE, LEARNED_READ_MAX_BYTES, truncate=True)
    except OSError:
        return None


def _remove_stale_temps(group: ConfinedDir) -> None:
    """Temporary files a crashed write left behind (the store itself is intact)."""
    prefix = f".{LEARNED_FILE}."
    try:
        entries = group.entries()
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith(prefix) and entry.name.endswith(".tmp"):
            with contextlib.suppress(OSError):
                os.unlink(entry.name, dir_fd=group.fd)


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror and not isinstance(exc, UnsafePath):
        return exc.strerror
    return str(exc)


def read_instructions(groups_dir: Path, folder: str) -> str:
    """The operator's ``instructions.prepend.md`` ('' when missing or unreadable)."""
    try:
        with ConfinedDir.open(groups_dir, folder) as group:
            data = group.read_bytes(INSTRUCTIONS_FILE, LEARNED_READ_MAX_BYTES, truncate=True)
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace")


def write_refusal(
    *, trust: str, sender: str, creators: tuple[str, ...], content: object, max_chars: int
) -> str | None:
    """Why a learned-behaviors write from this turn is refused, or None.

    ``trust`` and ``sender`` come from the host's own record of the message the turn
    answers; the sender must also still be among the group's ``creators``."""
    if trust != CREATOR or sender not in creators:
        who = f"{sender!r} ({trust})" if trust != CREATOR else f"{sender!r}"
        return (
            f"only the group's creators may change learned behaviors; this turn answers "
            f"{who}, who is not one"
        )
    if not isinstance(content, str):
        return "content must be text"
    from orchestrator.validate import hiding_problem, text_problem

    if problem := text_problem(content, multiline=True) or hiding_problem(content):
        return f"the content is refused: {problem}"
    if len(content) > max_chars:
        return (
            f"the content is {len(content):,} characters; the limit is {max_chars:,} "
            "(group.yaml learned_max_chars)"
        )
    return None


def apply_held(
    groups_dir: Path, folder: str, request: HeldWrite, approved_by: str
) -> tuple[bool, str]:
    """Apply a held learned-behaviors write (the applier relay.approvals names for the
    kind): the store replaced with exactly the request's content, and the change recorded
    as the requester's, with who approved it. (applied, what happened)."""
    from orchestrator.memory.history import LEARNED_WRITE, Provenance, record_quietly

    outcome = LearnedStore(groups_dir, folder).replace(request.content)
    if outcome.persisted:
        record_quietly(
            groups_dir,
            folder,
            Provenance(
                LEARNED_WRITE,
                sender=request.sender,
                trust=CREATOR,
                message_id=request.message_id,
                channel=request.channel,
                chat=request.chat,
                note=f"held request {request.id} approved by {approved_by}",
            ),
        )
    return outcome.persisted, outcome.detail if outcome.persisted else str(outcome)


def report(
    groups_dir: Path, folder: str, creators: tuple[str, ...], pending: Sequence[HeldWrite]
) -> dict[str, object]:
    """The store as ``group show`` and ``learned show`` describe it, with the changes
    ``pending`` for it (the caller reads them from the state database)."""
    info = LearnedStore(groups_dir, folder).info()
    return {
        **info.to_dict(),
        "writers": list(creators),
        "pending": [r.to_dict() for r in pending],
    }
