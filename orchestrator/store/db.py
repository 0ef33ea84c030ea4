"""The state database's connection, transactions and schema version.

One SQLite file (``state/queue.db``) holds the home's durable state: messages and their
replies, pauses, held requests, tasks, chats and the chat apps' own records, usage. It
is opened in WAL mode with ``synchronous=FULL`` (a committed row is on disk) by the
repositories of this package; no SQL is written anywhere else.

Its shape carries a version (``PRAGMA user_version``), brought up to date by the ordered
migrations of ``store.schema``, each in one transaction with its version: a migration
stopped midway leaves the old version, and the next open completes it. Only the holder
of the home's lock migrates (the daemon, or a command when no daemon runs); a command
facing an older file while a daemon runs is refused, and a file newer than this code is
refused, naming both versions, before anything in it changes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from orchestrator.errors import OrchestratorError
from orchestrator.limits import STATE_RESERVE_BYTES
from orchestrator.store.schema import Migration, SchemaBehind, SchemaTooNew, bring_up_to_date

__all__ = ["SchemaBehind", "SchemaTooNew"]  # raised when a file is opened

log = logging.getLogger("orchestrator.queue")  # the name operators know its lines by
T = TypeVar("T")
Row = tuple[object, ...]
SQLITE_FULL = 13
RESERVE_FILE = "reserve"


class QueueCorrupt(OrchestratorError):
    """The state database cannot be read."""


class QueueFull(OrchestratorError):
    """The state database cannot commit: the disk holding it is full."""


def connect(path: Path, synchronous: str = "FULL") -> sqlite3.Connection:
    """A connection to ``path`` as every store uses one: WAL, autocommit (transactions
    are explicit), a 30 s busy timeout, usable from any thread (callers serialize)."""
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={synchronous}")
    return db


def _is_full(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return code == SQLITE_FULL or "database or disk is full" in str(exc)


class StateDB:
    """One connection to the state database, with its lock, its transactions and its
    schema brought up to date (``migrate``: whether this process may migrate it)."""

    def __init__(
        self,
        path: Path,
        reserve: Reserve | None = None,
        *,
        synchronous: str = "FULL",
        migrate: bool = True,
        behind_hint: str | None = None,
    ) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.reserve = reserve
        self.synchronous = synchronous
        self._lock = threading.RLock()
        # reads that must not wait behind a write's sync have a connection of their own
        # (opened at the first such read, once the schema is up to date)
        self._reader: sqlite3.Connection | None = None
        self._read_lock = threading.RLock()
        self._closed = False
        self.migrated: list[Migration] = []  # what opening it applied
        try:
            self._db = connect(path, synchronous)
            try:
                self.version, self.migrated = bring_up_to_date(self._db, path, migrate, behind_hint)
            except BaseException:
                self._db.close()
                raise
        except sqlite3.DatabaseError as exc:
            if _is_full(exc):
                raise QueueFull(
                    f"cannot open {path}: the disk is full", hint="free some space, then retry"
                ) from None
            raise QueueCorrupt(
                f"{path} is not a usable SQLite database ({exc})",
                hint="`orchestrator doctor` explains; `orchestrator doctor --repair-queue` "
                "moves it aside and starts a new queue with the messages it can still read",
            ) from None

    def close(self) -> None:
        with self._lock:
            self._db.close()
        with self._read_lock:
            self._closed = True
            if self._reader is not None:
                self._reader.close()
                self._reader = None

    @contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """The reader's connection, for what runs inside: one snapshot of what was
        committed when its first read began. In WAL mode a reader never waits for the
        writer, so a read here does not wait behind another thread's synced commit (the
        writer's connection, under its lock, does). Not for reads inside a transaction:
        they would not see its uncommitted writes."""
        with self._read_lock:
            reader = self._open_reader()
            reader.execute("BEGIN")
            try:
                yield reader
            finally:
                reader.execute("COMMIT")  # ends the read: nothing was written

    def _open_reader(self) -> sqlite3.Connection:
        """The reader's connection, opened at its first use (under ``_read_lock``)."""
        if self._closed:  # never made again: the file may have been moved aside
            raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
        if self._reader is None:
            self._reader = connect(self.path, self.synchronous)
        return self._reader

    @contextmanager
    def _tx(self, durable: bool = True) -> Iterator[sqlite3.Connection]:
        with self._lock:
            lighter = not durable and self.synchronous == "FULL"
            if lighter:
                self._db.execute("PRAGMA synchronous=NORMAL")
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    yield self._db
                    self._db.execute("COMMIT")
                except BaseException:
                    # SQLite may have rolled back already (a full disk does that).
                    if self._db.in_transaction:
                        self._db.execute("ROLLBACK")
                    raise
            finally:
                if lighter:
                    self._db.execute(f"PRAGMA synchronous={self.synchronous}")

    def transaction(self, work: Callable[[sqlite3.Connection], T], *, durable: bool = True) -> T:
        """Run ``work(db)`` in one write transaction. When the disk is full, the reserve
        file is released once and the transaction tried again: the state must still
        commit. ``durable=False``: the commit is not synced to the disk by itself (in
        WAL mode it survives a crash of the process, and the next durable commit syncs
        it too): for a change whose loss at a power cut is harmless."""
        for attempt in range(2):
            try:
                with self._tx(durable) as db:
                    return work(db)
            except sqlite3.OperationalError as exc:
                if not _is_full(exc):
                    raise
                if attempt == 0 and self.reserve is not None and self.reserve.release():
                    log.error("the disk holding %s is full: released the reserve", self.path)
                    continue
                raise QueueFull(
                    f"cannot commit to {self.path}: the disk is full",
                    hint="free some space; nothing committed is lost",
                ) from None
        raise AssertionError("unreachable")

    def read(self, sql: str, args: tuple[object, ...] = ()) -> list[Row]:
        """The rows of one query. Outside the writer's lock it runs on the reader's
        connection (what was committed, without waiting behind a write's sync); a thread
        holding the lock (in a transaction, or between reads that must agree) reads on
        the writer's, and sees its own writes."""
        with self._reading_connection() as db:
            return list(db.execute(sql, args).fetchall())

    def read_one(self, sql: str, args: tuple[object, ...] = ()) -> Row | None:
        """The first row of one query (or None), read as ``read`` reads."""
        with self._reading_connection() as db:
            cursor = db.execute(sql, args)
            try:
                row: Row | None = cursor.fetchone()
            finally:
                cursor.close()  # the statement ends here, and with it the read
            return row

    @contextmanager
    def _reading_connection(self) -> Iterator[sqlite3.Connection]:
        if self._lock._is_owned():  # type: ignore[attr-defined]  # (threading.Condition's test)
            yield self._db
            return
        with self._read_lock:
            yield self._open_reader()


class Reserve:
    """A file of RESERVE bytes kept in state/, released when the disk fills so the state
    database can still commit; made again once there is room."""

    def __init__(self, state_dir: Path, size: int = STATE_RESERVE_BYTES) -> None:
        self.path = state_dir / RESERVE_FILE
        self.size = size

    def ensure(self) -> bool:
        """Make the reserve when missing and there is room for twice its size; True when
        it is in place."""
        try:
            if os.stat(self.path).st_size >= self.size:
                return True
        except FileNotFoundError:
            pass
        try:
            free = os.statvfs(self.path.parent)
        except OSError:
            return False
        if free.f_bavail * free.f_frsize < 2 * self.size:
            return False
        tmp = self.path.with_name(RESERVE_FILE + ".tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                os.posix_fallocate(fd, 0, self.size)  # real blocks, not a sparse file
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            return False
        return True

    def release(self) -> bool:
        """Delete the reserve; True when there was one to free."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            return False
        return True


@dataclass(frozen=True)
class Snapshot:
    """What a copy of the state database holds: its versions and a few counts."""

    schema: int
    layout: int  # the home's layout version it records (1: none recorded)
    messages: dict[str, int]  # by state
    tasks: int
    bindings: int


def snapshot(source: Path, target: Path) -> Snapshot:
    """Copy the state database ``source`` into the new file ``target`` with SQLite's
    online backup API, in one step: a consistent state while a daemon writes (never a
    copy of the live file, which may be caught between two writes). The copy is made a
    single file (no write-ahead log) and checked. QueueCorrupt when it cannot be read."""
    if not source.is_file():
        raise QueueCorrupt(f"{source} does not exist", hint="is this an orchestrator home?")
    try:
        src = sqlite3.connect(source, timeout=30, isolation_level=None)
        try:
            dst = sqlite3.connect(target, isolation_level=None)
            try:
                src.backup(dst)  # pages=-1: every page under one read transaction
                dst.execute("PRAGMA journal_mode=DELETE")
                check = dst.execute("PRAGMA quick_check").fetchone()
                if not check or check[0] != "ok":
                    raise QueueCorrupt(f"the copy of {source} fails its check: {check}")
                return _summary(dst)
            finally:
                dst.close()
        finally:
            src.close()
    except sqlite3.DatabaseError as exc:
        raise QueueCorrupt(
            f"{source} cannot be copied: {exc}",
            hint="`orchestrator doctor` explains; `orchestrator doctor --repair-queue` "
            "starts a new queue with the messages it can still read",
        ) from None


def _summary(db: sqlite3.Connection) -> Snapshot:
    from orchestrator.store.schema import HOME_LAYOUT, schema_version

    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}

    def count(table: str) -> int:
        return (
            int(db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]) if table in tables else 0
        )

    layout = 1
    if "home" in tables:
        row = db.execute("SELECT value FROM home WHERE key=?", (HOME_LAYOUT,)).fetchone()
        layout = int(row[0]) if row and str(row[0]).isdigit() else 1
    messages = (
        {
            str(s): int(n)
            for s, n in db.execute("SELECT state, COUNT(*) FROM messages GROUP BY state")
        }
        if "messages" in tables
        else {}
    )
    return Snapshot(schema_version(db), layout, messages, count("tasks"), count("bindings"))
