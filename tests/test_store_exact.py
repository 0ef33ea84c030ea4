"""The state store's modules, exactly: the connection's settings, transactions and their
durability, the reader's connection, the reserve, snapshots (db); held requests; the
home's record; the metrics' reads; and the chats' bindings, pairings and channel records.
Exact SQL effects (the rows left), messages, boundaries and orders."""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import BadInput
from orchestrator.store import db as dbmod
from orchestrator.store.chats import (
    APPROVED,
    CODE_ALPHABET,
    PENDING,
    REJECTED,
    SENDING,
    SENT,
    UNKNOWN,
    Binding,
    ChatStore,
    Pairing,
    new_code,
    normalize_code,
    parse_chat_ref,
)
from orchestrator.store.db import (
    QueueCorrupt,
    QueueFull,
    Reserve,
    Snapshot,
    StateDB,
    _is_full,
    connect,
    snapshot,
)
from orchestrator.store.held import HeldRequest, HeldRequests, content_sha256
from orchestrator.store.homerecord import HomeRecord, Upgrade
from orchestrator.store.messages import DEAD, DONE, INFLIGHT, QUEUED, MessageQueue
from orchestrator.store.metrics import GroupQueue, MetricsStore, UsageTotal
from orchestrator.store.schema import LATEST
from orchestrator.store.usage import Call, UsageStore


def _raw(path: Path, sql: str, args: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
    """The rows of ``sql`` read on a connection of the test's own (what was committed)."""
    con = sqlite3.connect(path)
    try:
        return list(con.execute(sql, args).fetchall())
    finally:
        con.close()


@pytest.fixture
def queue(tmp_path: Path) -> MessageQueue:
    return MessageQueue(tmp_path / "state" / "queue.db")


# db: connections


def test_connect_sets_wal_the_given_sync_a_30s_wait_autocommit_and_any_thread(
    tmp_path: Path,
) -> None:
    con = connect(tmp_path / "x.db", "NORMAL")
    try:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert con.execute("PRAGMA synchronous").fetchone()[0] == 1
        assert con.execute("PRAGMA busy_timeout").fetchone()[0] == 30_000
        assert con.isolation_level is None
        con.execute("CREATE TABLE t (x)")
        con.execute("INSERT INTO t VALUES (1)")
        assert not con.in_transaction  # autocommit: nothing left open
        seen: list[object] = []
        thread = threading.Thread(
            target=lambda: seen.append(con.execute("SELECT x FROM t").fetchone()[0])
        )
        thread.start()
        thread.join()
        assert seen == [1]
    finally:
        con.close()
    default = connect(tmp_path / "y.db")
    try:
        assert default.execute("PRAGMA synchronous").fetchone()[0] == 2
    finally:
        default.close()


def test_is_full_by_the_error_code_or_by_the_message() -> None:
    by_message = sqlite3.OperationalError("database or disk is full")
    assert _is_full(by_message) is True
    other = sqlite3.OperationalError("database is locked")
    assert _is_full(other) is False
    coded = sqlite3.OperationalError("something else")
    coded.sqlite_errorcode = 13  # type: ignore[attr-defined]
    assert _is_full(coded) is True
    coded.sqlite_errorcode = 14  # type: ignore[attr-defined]
    assert _is_full(coded) is False


def test_a_state_db_makes_its_folders_and_records_what_it_was_given(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "queue.db"
    reserve = Reserve(tmp_path)
    db = StateDB(path, reserve)
    try:
        assert db.path == path
        assert db.reserve is reserve
        assert db.synchronous == "FULL"
        assert db.version == LATEST
        assert [m.version for m in db.migrated] == list(range(1, LATEST + 1))
        assert db._db.execute("PRAGMA synchronous").fetchone()[0] == 2
        assert db.read("PRAGMA synchronous") == [(2,)]  # the reader's is the same
    finally:
        db.close()
    again = StateDB(path, synchronous="NORMAL")  # the folder exists already
    try:
        assert again.reserve is None
        assert again.synchronous == "NORMAL"
        assert again.migrated == []
        assert again._db.execute("PRAGMA synchronous").fetchone()[0] == 1
        assert again.read("PRAGMA synchronous") == [(1,)]  # the reader's too
    finally:
        again.close()


def test_a_file_that_is_not_a_database_is_refused_as_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    path.write_bytes(b"this is not a database at all, not even close" * 100)
    with pytest.raises(QueueCorrupt) as caught:
        StateDB(path)
    assert caught.value.message == (
        f"{path} is not a usable SQLite database (file is not a database)"
    )
    assert caught.value.hint == (
        "`orchestrator doctor` explains; `orchestrator doctor --repair-queue` moves it aside"
        " and starts a new queue with the messages it can still read"
    )


def test_a_full_disk_at_the_open_is_queue_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(path: Path, synchronous: str = "FULL") -> sqlite3.Connection:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(dbmod, "connect", full)
    path = tmp_path / "queue.db"
    with pytest.raises(QueueFull) as caught:
        StateDB(path)
    assert caught.value.message == f"cannot open {path}: the disk is full"
    assert caught.value.hint == "free some space, then retry"


class _Recording(sqlite3.Connection):
    closed: list[str] = []

    def close(self) -> None:
        _Recording.closed.append("closed")
        super().close()


def test_a_refused_open_closes_its_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "queue.db"
    StateDB(path).close()
    con = sqlite3.connect(path)
    con.execute(f"PRAGMA user_version = {LATEST + 1}")
    con.close()

    def recording(path: Path, synchronous: str = "FULL") -> sqlite3.Connection:
        return sqlite3.connect(path, isolation_level=None, factory=_Recording)

    monkeypatch.setattr(dbmod, "connect", recording)
    _Recording.closed = []
    with pytest.raises(dbmod.SchemaTooNew):
        StateDB(path)
    assert _Recording.closed == ["closed"]


def test_a_file_newer_than_this_code_is_named_in_the_refusal(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    StateDB(path).close()
    con = sqlite3.connect(path)
    con.execute(f"PRAGMA user_version = {LATEST + 1}")
    con.close()
    with pytest.raises(dbmod.SchemaTooNew) as caught:
        StateDB(path)
    assert caught.value.message == (
        f"{path} is at schema version {LATEST + 1}, newer than this orchestrator understands"
        f" (version {LATEST}); nothing was changed"
    )


def test_the_hint_of_a_file_behind_is_the_one_given(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    StateDB(path).close()
    con = sqlite3.connect(path)
    con.execute(f"PRAGMA user_version = {LATEST - 1}")
    con.close()
    with pytest.raises(dbmod.SchemaBehind) as caught:
        StateDB(path, migrate=False, behind_hint="stop the daemon first")
    assert caught.value.hint == "stop the daemon first"


def test_close_closes_both_connections_and_the_reader_is_never_opened_again(
    tmp_path: Path,
) -> None:
    db = StateDB(tmp_path / "queue.db")
    assert db.read("SELECT 1") == [(1,)]
    reader = db._reader
    assert reader is not None
    db.close()
    assert db._reader is None
    with pytest.raises(sqlite3.ProgrammingError):
        reader.execute("SELECT 1")
    with pytest.raises(sqlite3.ProgrammingError):
        db._db.execute("SELECT 1")
    with pytest.raises(sqlite3.ProgrammingError) as caught:
        db.read("SELECT 1")
    assert str(caught.value) == "Cannot operate on a closed database."
    assert db._reader is None


def test_close_before_any_read_opens_no_reader(tmp_path: Path) -> None:
    db = StateDB(tmp_path / "queue.db")
    db.close()
    assert db._reader is None
    closed = r"^Cannot operate on a closed database\.$"
    with pytest.raises(sqlite3.ProgrammingError, match=closed), db.reading():
        pass


def test_reading_is_one_snapshot_and_ends_its_read(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    db = StateDB(path)
    try:
        db.transaction(lambda c: c.execute("CREATE TABLE t (x)"))
        db.transaction(lambda c: c.execute("INSERT INTO t VALUES (1)"))
        with db.reading() as reader:
            assert reader.in_transaction
            assert reader.execute("SELECT COUNT(*) FROM t").fetchone()[0] == 1
            db.transaction(lambda c: c.execute("INSERT INTO t VALUES (2)"))
            assert reader.execute("SELECT COUNT(*) FROM t").fetchone()[0] == 1  # its snapshot
        assert reader is db._reader
        assert not reader.in_transaction
        assert db.read("SELECT COUNT(*) FROM t") == [(2,)]
    finally:
        db.close()


def test_a_transaction_commits_or_rolls_back_all_of_its_work(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    db = StateDB(path)
    try:
        db.transaction(lambda c: c.execute("CREATE TABLE t (x)"))

        def half(c: sqlite3.Connection) -> None:
            c.execute("INSERT INTO t VALUES (1)")
            raise KeyError("stop")

        with pytest.raises(KeyError):
            db.transaction(half)
        assert not db._db.in_transaction
        assert _raw(path, "SELECT x FROM t") == []
        assert db.transaction(lambda c: c.execute("INSERT INTO t VALUES (2)").rowcount) == 1
        assert not db._db.in_transaction
        assert _raw(path, "SELECT x FROM t") == [(2,)]
    finally:
        db.close()


def test_a_transaction_holds_the_write_lock_from_its_start(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    db = StateDB(path)
    try:
        db.transaction(lambda c: c.execute("CREATE TABLE t (x)"))
        other = sqlite3.connect(path, timeout=0)

        def work(c: sqlite3.Connection) -> str:
            try:
                other.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                return str(exc)
            other.execute("ROLLBACK")
            return "not locked"

        assert db.transaction(work) == "database is locked"
        other.close()
    finally:
        db.close()


def test_a_transaction_not_durable_skips_the_sync_for_itself_only(tmp_path: Path) -> None:
    db = StateDB(tmp_path / "queue.db")
    sync = "PRAGMA synchronous"
    try:
        assert db.transaction(lambda c: c.execute(sync).fetchone()[0]) == 2
        assert db.transaction(lambda c: c.execute(sync).fetchone()[0], durable=False) == 1
        assert db._db.execute(sync).fetchone()[0] == 2

        def fails(c: sqlite3.Connection) -> None:
            raise KeyError("x")

        with pytest.raises(KeyError):
            db.transaction(fails, durable=False)
        assert db._db.execute(sync).fetchone()[0] == 2
    finally:
        db.close()
    normal = StateDB(tmp_path / "queue.db", synchronous="NORMAL")
    try:
        assert normal.transaction(lambda c: c.execute(sync).fetchone()[0], durable=False) == 1
        assert normal._db.execute(sync).fetchone()[0] == 1
        assert normal.transaction(lambda c: c.execute(sync).fetchone()[0]) == 1
    finally:
        normal.close()


class _Reserve:
    def __init__(self, answers: list[bool]) -> None:
        self.answers = answers
        self.calls = 0

    def release(self) -> bool:
        self.calls += 1
        return self.answers.pop(0)


def _full_then(outcomes: list[object]) -> Any:
    def work(c: sqlite3.Connection) -> object:
        outcome = outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    return work


FULL = "database or disk is full"


def test_a_full_disk_releases_the_reserve_once_and_tries_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "queue.db"
    reserve = _Reserve([True])
    db = StateDB(path, reserve)  # type: ignore[arg-type]
    try:
        caplog.set_level(logging.ERROR, "orchestrator.queue")
        work = _full_then([sqlite3.OperationalError(FULL), "done"])
        assert db.transaction(work) == "done"
        assert reserve.calls == 1
        assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
            (
                "orchestrator.queue",
                logging.ERROR,
                f"the disk holding {path} is full: released the reserve",
            )
        ]
    finally:
        db.close()


def test_a_disk_still_full_after_the_reserve_is_queue_full(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    reserve = _Reserve([True, True])
    db = StateDB(path, reserve)  # type: ignore[arg-type]
    try:
        work = _full_then([sqlite3.OperationalError(FULL), sqlite3.OperationalError(FULL), 1])
        with pytest.raises(QueueFull) as caught:
            db.transaction(work)
        assert caught.value.message == f"cannot commit to {path}: the disk is full"
        assert caught.value.hint == "free some space; nothing committed is lost"
        assert reserve.calls == 1
    finally:
        db.close()


def test_a_full_disk_with_no_reserve_left_or_none_is_queue_full_at_once(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    reserve = _Reserve([False])
    db = StateDB(path, reserve)  # type: ignore[arg-type]
    try:
        with pytest.raises(QueueFull):
            db.transaction(_full_then([sqlite3.OperationalError(FULL), 1]))
        assert reserve.calls == 1
    finally:
        db.close()
    bare = StateDB(path)
    try:
        with pytest.raises(QueueFull):
            bare.transaction(_full_then([sqlite3.OperationalError(FULL), 1]))
    finally:
        bare.close()


def test_another_operational_error_is_raised_as_it_is(tmp_path: Path) -> None:
    reserve = _Reserve([True])
    db = StateDB(tmp_path / "queue.db", reserve)  # type: ignore[arg-type]
    try:
        with pytest.raises(sqlite3.OperationalError, match=r"^database is locked$"):
            db.transaction(_full_then([sqlite3.OperationalError("database is locked"), 1]))
        assert reserve.calls == 0
    finally:
        db.close()


def test_reads_inside_a_transaction_see_its_writes_and_outside_what_was_committed(
    tmp_path: Path,
) -> None:
    db = StateDB(tmp_path / "queue.db")
    try:
        db.transaction(lambda c: c.execute("CREATE TABLE t (x)"))
        assert db.read("SELECT x FROM t") == []
        assert db.read_one("SELECT x FROM t") is None

        def work(c: sqlite3.Connection) -> tuple[object, object]:
            c.execute("INSERT INTO t VALUES (5), (6)")
            return db.read("SELECT x FROM t ORDER BY x"), db.read_one("SELECT x FROM t")

        assert db.transaction(work) == ([(5,), (6,)], (5,))
        assert db.read("SELECT x FROM t WHERE x>?", (5,)) == [(6,)]
        assert db.read_one("SELECT x FROM t WHERE x<?", (6,)) == (5,)
        assert db.read_one("SELECT x FROM t ORDER BY x DESC") == (6,)
        assert isinstance(db.read("SELECT x FROM t"), list)
    finally:
        db.close()


def test_reads_outside_the_lock_run_on_the_readers_connection(tmp_path: Path) -> None:
    db = StateDB(tmp_path / "queue.db")
    try:
        assert db._reader is None
        db.read("SELECT 1")
        reader = db._reader
        assert reader is not None and reader is not db._db
        db.read_one("SELECT 1")
        assert db._reader is reader  # opened once
    finally:
        db.close()


# db: the reserve


def test_the_reserve_is_made_at_its_size_in_state(tmp_path: Path) -> None:
    reserve = Reserve(tmp_path, size=8192)
    assert reserve.path == tmp_path / "reserve"
    assert reserve.size == 8192
    assert reserve.ensure() is True
    assert reserve.path.stat().st_size == 8192
    assert reserve.path.stat().st_mode & 0o777 == 0o600
    assert not (tmp_path / "reserve.tmp").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reserve"]
    assert Reserve(tmp_path).size == 16 * 1024**2


def test_a_reserve_of_its_size_is_kept_and_a_short_one_made_again(tmp_path: Path) -> None:
    path = tmp_path / "reserve"
    path.write_bytes(b"x" * 4096)
    assert Reserve(tmp_path, size=4096).ensure() is True
    assert path.read_bytes() == b"x" * 4096  # kept as it was
    assert Reserve(tmp_path, size=4095).ensure() is True
    assert path.read_bytes() == b"x" * 4096
    assert Reserve(tmp_path, size=4097).ensure() is True
    assert path.stat().st_size == 4097
    assert path.read_bytes() == b"\0" * 4097


def test_a_reserve_is_made_only_with_room_for_twice_its_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Free:
        f_bavail = 10
        f_frsize = 100

    monkeypatch.setattr(dbmod.os, "statvfs", lambda path: Free())
    assert Reserve(tmp_path, size=501).ensure() is False
    assert not (tmp_path / "reserve").exists()
    assert Reserve(tmp_path, size=500).ensure() is True
    assert (tmp_path / "reserve").stat().st_size == 500


def test_a_reserve_where_its_folder_is_missing_is_not_made(tmp_path: Path) -> None:
    assert Reserve(tmp_path / "missing", size=10).ensure() is False


def test_a_reserve_that_cannot_be_written_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fails(fd: int, offset: int, size: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(dbmod.os, "posix_fallocate", fails)
    assert Reserve(tmp_path, size=10).ensure() is False
    assert list(tmp_path.iterdir()) == []


def test_a_reserve_whose_replace_fails_removes_its_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[object, object]] = []

    def fails(src: object, dst: object) -> None:
        calls.append((src, dst))
        raise OSError(18, "cross-device")

    monkeypatch.setattr(dbmod.os, "replace", fails)
    assert Reserve(tmp_path, size=10).ensure() is False
    assert calls == [(tmp_path / "reserve.tmp", tmp_path / "reserve")]
    assert list(tmp_path.iterdir()) == []


def test_a_reserve_is_allocated_and_synced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    real_fallocate, real_fsync = os.posix_fallocate, os.fsync

    def fallocate(fd: int, offset: int, size: int) -> None:
        calls.append(("fallocate", offset, size))
        real_fallocate(fd, offset, size)

    def fsync(fd: int) -> None:
        calls.append("fsync")
        real_fsync(fd)

    monkeypatch.setattr(dbmod.os, "posix_fallocate", fallocate)
    monkeypatch.setattr(dbmod.os, "fsync", fsync)
    assert Reserve(tmp_path, size=10).ensure() is True
    assert calls == [("fallocate", 0, 10), "fsync"]


def test_a_reserve_made_over_a_stale_temporary_file_truncates_it(tmp_path: Path) -> None:
    (tmp_path / "reserve.tmp").write_bytes(b"y" * 100)
    assert Reserve(tmp_path, size=10).ensure() is True
    assert (tmp_path / "reserve").read_bytes() == b"\0" * 10


def test_a_reserve_whose_temporary_file_cannot_be_opened_is_not_made(tmp_path: Path) -> None:
    (tmp_path / "reserve.tmp").mkdir()  # neither opened nor unlinked: both fail
    assert Reserve(tmp_path, size=10).ensure() is False
    assert (tmp_path / "reserve.tmp").is_dir()
    assert not (tmp_path / "reserve").exists()


def test_release_deletes_the_reserve_once(tmp_path: Path) -> None:
    reserve = Reserve(tmp_path, size=10)
    assert reserve.release() is False
    assert reserve.ensure() is True
    assert reserve.release() is True
    assert not reserve.path.exists()
    assert reserve.release() is False


# db: snapshots


def _put(queue: MessageQueue, group: str = "g", text: str = "hi") -> Any:
    return queue.enqueue(
        group=group, session="s", chat="c", thread=None, sender="a", trust="member",
        text=text, channel="cli",
    )  # fmt: skip


def test_a_snapshot_is_a_single_checked_file_with_its_counts(
    tmp_path: Path, queue: MessageQueue
) -> None:
    first, second, third = _put(queue), _put(queue), _put(queue)
    queue.transaction(
        lambda c: c.execute("UPDATE messages SET state=? WHERE id=?", (DONE, first.id))
    )
    ChatStore(queue).bind("bot", "1", "g", now=1.0)
    ChatStore(queue).bind("bot", "2", "g", now=1.0)
    target = tmp_path / "copy.db"
    found = snapshot(queue.path, target)
    from orchestrator.versions import LAYOUT_VERSION

    assert found == Snapshot(LATEST, LAYOUT_VERSION, {QUEUED: 2, DONE: 1}, 0, 2)
    assert _raw(target, "PRAGMA journal_mode") == [("delete",)]
    assert not Path(str(target) + "-wal").exists()
    assert _raw(target, "SELECT COUNT(*) FROM messages") == [(3,)]
    assert second.id != third.id


def test_a_snapshot_reads_the_layout_the_home_records(tmp_path: Path, queue: MessageQueue) -> None:
    queue.transaction(lambda c: c.execute("UPDATE home SET value='9' WHERE key='layout'"))
    assert snapshot(queue.path, tmp_path / "a.db").layout == 9
    queue.transaction(lambda c: c.execute("UPDATE home SET value='x9' WHERE key='layout'"))
    assert snapshot(queue.path, tmp_path / "b.db").layout == 1
    queue.transaction(lambda c: c.execute("DELETE FROM home WHERE key='layout'"))
    assert snapshot(queue.path, tmp_path / "c.db").layout == 1


def test_a_snapshot_of_a_file_without_the_tables_counts_none(tmp_path: Path) -> None:
    source = tmp_path / "old.db"
    con = sqlite3.connect(source)
    con.execute("CREATE TABLE other (x)")
    con.execute("PRAGMA user_version = 3")
    con.commit()
    con.close()
    assert snapshot(source, tmp_path / "copy.db") == Snapshot(3, 1, {}, 0, 0)


def test_a_snapshot_counts_tasks(tmp_path: Path) -> None:
    source = tmp_path / "old.db"
    con = sqlite3.connect(source)
    con.execute("CREATE TABLE tasks (x)")
    con.execute("CREATE TABLE bindings (x)")
    con.execute("CREATE TABLE home (key, value)")
    con.execute("INSERT INTO tasks VALUES (1), (2), (3)")
    con.execute("INSERT INTO bindings VALUES (1)")
    con.execute("INSERT INTO home VALUES ('release', '7'), ('layout', '4')")
    con.commit()
    con.close()
    assert snapshot(source, tmp_path / "copy.db") == Snapshot(0, 4, {}, 3, 1)


def test_a_snapshot_of_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(QueueCorrupt) as caught:
        snapshot(tmp_path / "none.db", tmp_path / "copy.db")
    assert caught.value.message == f"{tmp_path / 'none.db'} does not exist"
    assert caught.value.hint == "is this an orchestrator home?"
    with pytest.raises(QueueCorrupt, match="does not exist"):
        snapshot(tmp_path, tmp_path / "copy.db")  # a folder is not the file


def test_a_snapshot_of_a_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "queue.db"
    source.write_bytes(b"not a database, not at all" * 200)
    with pytest.raises(QueueCorrupt) as caught:
        snapshot(source, tmp_path / "copy.db")
    assert caught.value.message == f"{source} cannot be copied: file is not a database"
    assert caught.value.hint == (
        "`orchestrator doctor` explains; `orchestrator doctor --repair-queue` starts a new"
        " queue with the messages it can still read"
    )


def test_a_snapshot_waits_30s_for_a_writer_and_opens_both_files_in_autocommit(
    tmp_path: Path, queue: MessageQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_connect = sqlite3.connect
    calls: list[tuple[object, dict[str, Any]]] = []

    def connecting(path: Any, **kwargs: Any) -> sqlite3.Connection:
        calls.append((path, kwargs))
        return real_connect(path, **kwargs)

    monkeypatch.setattr(dbmod.sqlite3, "connect", connecting)
    target = tmp_path / "copy.db"
    snapshot(queue.path, target)
    assert calls == [
        (queue.path, {"timeout": 30, "isolation_level": None}),
        (target, {"isolation_level": None}),
    ]


def test_a_snapshot_whose_check_fails_is_refused(
    tmp_path: Path, queue: MessageQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_connect = sqlite3.connect

    class Checked(sqlite3.Connection):
        def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:  # type: ignore[override]
            if sql == "PRAGMA quick_check":
                return super().execute("SELECT 'page 3 is never used'")
            return super().execute(sql, *args)

    def connecting(path: Any, **kwargs: Any) -> sqlite3.Connection:
        return real_connect(path, factory=Checked, **kwargs)

    monkeypatch.setattr(dbmod.sqlite3, "connect", connecting)
    with pytest.raises(QueueCorrupt) as caught:
        snapshot(queue.path, tmp_path / "copy.db")
    assert caught.value.message == (
        f"the copy of {queue.path} fails its check: ('page 3 is never used',)"
    )
    assert caught.value.hint is None


# held requests


def _hold(held: HeldRequests, **changes: Any) -> HeldRequest:
    fields: dict[str, Any] = dict(
        group="g", kind="learned", content="be brief", channel="cli", chat="c", thread=None,
        sender="ann", message_id="m1", chat_approvable=True, ttl=100.0, now=1000.0,
    )  # fmt: skip
    fields.update(changes)
    return held.hold(**fields)


def test_a_held_request_is_stored_with_every_field(queue: MessageQueue) -> None:
    held = HeldRequests(queue)
    made = _hold(held, thread="t7", chat_approvable=False)
    digest = content_sha256("be brief")
    assert made == HeldRequest(
        made.id, "g", "learned", "be brief", digest, "cli", "c", "t7", "ann", "m1", False,
        1000.0, 1100.0,
    )  # fmt: skip
    assert made.id == 1
    assert _raw(queue.path, "SELECT * FROM held_requests") == [
        (1, "g", "learned", "be brief", digest, "cli", "c", "t7", "ann", "m1", 0, 1000.0, 1100.0)
    ]
    assert held.get(1) == made
    assert held.get(2) is None
    second = _hold(held, chat_approvable=True)
    assert second.id == 2
    assert held.get(2) == second
    assert held.get(2).chat_approvable is True  # type: ignore[union-attr]
    assert held.get(2).thread is None  # type: ignore[union-attr]


def test_content_sha256_is_the_hex_digest_of_the_utf8_text() -> None:
    assert content_sha256("é") == (
        "4a99557e4033c3539de2eb65472017cad5f9557f7a0625a09f1c3f6e2ba69c4c"
    )


def test_a_held_request_as_a_dict(queue: MessageQueue) -> None:
    made = _hold(HeldRequests(queue), content="12345")
    assert made.to_dict() == {
        "id": 1, "group": "g", "kind": "learned", "chars": 5, "sha256": content_sha256("12345"),
        "channel": "cli", "chat": "c", "thread": None, "sender": "ann", "message_id": "m1",
        "chat_approvable": True, "created": 1000.0, "expires": 1100.0,
    }  # fmt: skip


def test_waiting_requests_by_group_kind_and_chat_oldest_first(queue: MessageQueue) -> None:
    held = HeldRequests(queue)
    a = _hold(held, group="g", kind="learned", channel="cli", chat="c")
    b = _hold(held, group="h", kind="learned", channel="cli", chat="c")
    c = _hold(held, group="g", kind="package", channel="tg", chat="c")
    d = _hold(held, group="g", kind="learned", channel="cli", chat="d")
    ids = lambda found: [r.id for r in found]  # noqa: E731
    assert ids(held.waiting(now=1000.0)) == [a.id, b.id, c.id, d.id]
    assert ids(held.waiting("g", now=1000.0)) == [a.id, c.id, d.id]
    assert ids(held.waiting(kind="package", now=1000.0)) == [c.id]
    assert ids(held.waiting(channel="cli", now=1000.0)) == [a.id, b.id, d.id]
    assert ids(held.waiting(chat="d", now=1000.0)) == [d.id]
    assert ids(held.waiting("g", kind="learned", channel="cli", chat="c", now=1000.0)) == [a.id]
    assert held.waiting(now=1000.0)[0] == a


def test_a_request_waits_until_its_expiry_and_is_pruned_from_it(queue: MessageQueue) -> None:
    held = HeldRequests(queue)
    a = _hold(held, ttl=100.0)  # expires 1100
    b = _hold(held, ttl=200.0)  # expires 1200
    assert [r.id for r in held.waiting(now=1099.5)] == [a.id, b.id]
    assert [r.id for r in held.waiting(now=1100.0)] == [b.id]
    assert held.get(a.id) == a  # expired, still there
    assert held.prune(now=1099.0) == 0
    assert held.prune(now=1100.0) == 1
    assert held.get(a.id) is None
    assert held.get(b.id) == b
    assert held.prune(now=5000.0) == 1
    assert _raw(queue.path, "SELECT COUNT(*) FROM held_requests") == [(0,)]


def test_drop_forgets_one_request(queue: MessageQueue) -> None:
    held = HeldRequests(queue)
    a, b = _hold(held), _hold(held)
    assert held.drop(a.id) is True
    assert held.drop(a.id) is False
    assert [r.id for r in held.waiting(now=0.0)] == [b.id]


# the home's record


def test_a_new_home_records_its_layout_and_release(queue: MessageQueue) -> None:
    from orchestrator.versions import LAYOUT_VERSION, RELEASE

    record = HomeRecord(queue)
    assert record.layout() == LAYOUT_VERSION
    assert record.release() == RELEASE
    assert record.journal() == []
    assert record.unreported() == []


def test_the_layout_is_1_when_none_or_no_number_is_recorded(queue: MessageQueue) -> None:
    record = HomeRecord(queue)
    queue.transaction(lambda c: c.execute("UPDATE home SET value='3x' WHERE key='layout'"))
    assert record.layout() == 1
    queue.transaction(lambda c: c.execute("DELETE FROM home"))
    assert record.layout() == 1
    assert record.release() is None


def test_set_layout_and_release_record_and_journal(queue: MessageQueue) -> None:
    record = HomeRecord(queue)
    queue.transaction(lambda c: c.execute("DELETE FROM home"))
    record.set_layout(5, "moved the groups", "1.0")
    assert record.layout() == 5
    record.set_layout(6, "moved them again", "1.1")
    assert record.layout() == 6
    assert _raw(queue.path, "SELECT key, value FROM home") == [("layout", "6")]
    record.set_release("1.2", None)
    assert record.release() == "1.2"
    record.set_release("1.3", "release 1.2 -> 1.3")
    assert record.release() == "1.3"
    assert sorted(_raw(queue.path, "SELECT key, value FROM home")) == [
        ("layout", "6"), ("release", "1.3"),
    ]  # fmt: skip
    journal = record.journal()
    assert [(u.id, u.release, u.what) for u in journal] == [
        (1, "1.0", "moved the groups"),
        (2, "1.1", "moved them again"),
        (3, "1.3", "release 1.2 -> 1.3"),
    ]
    assert all(isinstance(u.at, float) and u.at > 1e9 for u in journal)
    assert record.unreported() == journal
    record.mark_reported(journal[:2])
    assert record.unreported() == journal[2:]
    assert record.journal() == journal
    assert _raw(queue.path, "SELECT id, reported FROM upgrades ORDER BY id") == [
        (1, 1), (2, 1), (3, 0),
    ]  # fmt: skip
    assert Upgrade(3, 5.0, "1.3", "w").to_dict() == {"at": 5.0, "release": "1.3", "what": "w"}


def test_the_journal_is_in_the_order_of_its_ids(queue: MessageQueue) -> None:
    queue.transaction(
        lambda c: c.executemany(
            "INSERT INTO upgrades (id, at, release, what, reported) VALUES (?,?,?,?,?)",
            [(7, 1.0, "b", "second", 0), (3, 2.0, "a", "first", 0), (5, 3.0, "c", "mid", 1)],
        )
    )
    record = HomeRecord(queue)
    assert record.journal() == [
        Upgrade(3, 2.0, "a", "first"), Upgrade(5, 3.0, "c", "mid"), Upgrade(7, 1.0, "b", "second"),
    ]  # fmt: skip
    assert record.unreported() == [Upgrade(3, 2.0, "a", "first"), Upgrade(7, 1.0, "b", "second")]


# metrics


def test_queue_by_group_counts_each_state_and_the_oldest_queued(queue: MessageQueue) -> None:
    metrics = MetricsStore(queue)
    assert metrics.queue_by_group() == {}
    messages = [_put(queue, "g") for _ in range(6)] + [_put(queue, "h")]
    states = [QUEUED, QUEUED, INFLIGHT, DEAD, DEAD, DONE, DONE]
    created = [50.0, 40.0, 30.0, 20.0, 10.0, 5.0, 1.0]
    for message, state, at in zip(messages, states, created, strict=True):
        queue.transaction(
            lambda c, m=message, s=state, t=at: c.execute(
                "UPDATE messages SET state=?, created=? WHERE id=?", (s, t, m.id)
            )
        )
    assert metrics.queue_by_group() == {"g": GroupQueue(2, 1, 2, 40.0)}
    queue.transaction(
        lambda c: c.execute("UPDATE messages SET state=? WHERE id=?", (INFLIGHT, messages[6].id))
    )
    assert metrics.queue_by_group() == {
        "g": GroupQueue(2, 1, 2, 40.0),
        "h": GroupQueue(0, 1, 0, None),
    }
    assert GroupQueue() == GroupQueue(0, 0, 0, None)


def _call(**changes: Any) -> Call:
    fields: dict[str, Any] = dict(
        message_id="m", group="g", provider="p", model="x", purpose="turn", started=100.0,
        latency_ms=10.0, input_tokens=1, output_tokens=2, outcome="ok",
    )  # fmt: skip
    fields.update(changes)
    return Call(**fields)


def test_usage_after_sums_the_new_rows_by_their_kind(queue: MessageQueue) -> None:
    usage = UsageStore(queue.path)
    try:
        metrics = MetricsStore(usage)
        assert metrics.usage_after(0) == (0, [])
        assert metrics.usage_after(5) == (5, [])
        usage.record(_call(cache_read_tokens=3, cache_write_tokens=4, cost=0.5, currency="EUR"))
        usage.record(_call(input_tokens=10, output_tokens=20, cost=0.25, currency="EUR"))
        usage.record(_call(group="h", outcome="failed"))
        last, totals = metrics.usage_after(0)
        assert last == 3
        assert sorted(totals, key=lambda t: t.group) == [
            UsageTotal("g", "p", "x", "turn", "ok", "EUR", 2, 11, 22, 3, 4, 0.75),
            UsageTotal("h", "p", "x", "turn", "failed", None, 1, 1, 2, 0, 0, None),
        ]
        assert metrics.usage_after(3) == (3, [])
        assert metrics.usage_after(2) == (
            3, [UsageTotal("h", "p", "x", "turn", "failed", None, 1, 1, 2, 0, 0, None)],
        )  # fmt: skip
        assert metrics.usage_after(7) == (7, [])
    finally:
        usage.close()


def test_usage_after_reads_no_row_above_the_last_id_it_found(
    queue: MessageQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    usage = UsageStore(queue.path)
    try:
        for _ in range(3):
            usage.record(_call())
        metrics = MetricsStore(usage)
        real_read_one = usage.read_one

        def then_one_more(sql: str, args: tuple[object, ...] = ()) -> Any:
            row = real_read_one(sql, args)
            usage.record(_call(input_tokens=100))  # committed meanwhile
            return row

        monkeypatch.setattr(usage, "read_one", then_one_more)
        last, totals = metrics.usage_after(1)
        assert last == 3
        assert [(t.calls, t.input_tokens) for t in totals] == [(2, 2)]
    finally:
        usage.close()


# chats: codes and references


def test_a_new_code_is_two_fours_of_the_alphabet() -> None:
    for _ in range(50):
        code = new_code()
        assert len(code) == 9 and code[4] == "-"
        assert all(c in CODE_ALPHABET for c in code[:4] + code[5:])
    assert len({new_code() for _ in range(50)}) > 40


def test_normalize_code_takes_any_case_spaces_and_dashes() -> None:
    assert normalize_code("abcd-2345") == "ABCD-2345"
    assert normalize_code(" ab cd 23-45 ") == "ABCD-2345"
    assert normalize_code("ABCD2345") == "ABCD-2345"
    assert normalize_code("a\tbcd\n2345") == "ABCD-2345"
    for bad in ("ABCD-234", "ABCD-23456", "ABCD-2340", "ABCO-2345", "ABCD_2345", ""):
        with pytest.raises(BadInput) as caught:
            normalize_code(bad)
        assert caught.value.message == (
            f"{bad!r} is not a pairing code; a code is 8 letters and digits such as ABCD-2345"
        )
        assert caught.value.hint == "orchestrator pair --list shows the codes waiting"


def test_parse_chat_ref_takes_account_and_chat() -> None:
    assert parse_chat_ref("mybot:123") == ("mybot", "123")
    assert parse_chat_ref("a:-100:x") == ("a", "-100:x")
    assert parse_chat_ref("0_-b:!room:example.org") == ("0_-b", "!room:example.org")
    assert parse_chat_ref("a" * 40 + ":1") == ("a" * 40, "1")
    assert parse_chat_ref("a:" + "9" * 200) == ("a", "9" * 200)
    assert parse_chat_ref("a:Az09_.@:!+=-") == ("a", "Az09_.@:!+=-")
    for bad in ("mybot", "mybot:", ":1", "Bot:1", "_b:1", "a" * 41 + ":1", "a b:1", "-a:1"):
        with pytest.raises(BadInput) as caught:
            parse_chat_ref(bad)
        assert caught.value.message == f"{bad!r} is not ACCOUNT:CHAT_ID"
        assert caught.value.hint == (
            "such as mybot:123456789 (the channel account's name, then the chat's id; "
            "orchestrator pair --list shows chats waiting to be paired)"
        )
    for chat in ("9" * 201, "a b", "a/b", "é"):
        with pytest.raises(BadInput) as caught:
            parse_chat_ref("a:" + chat)
        assert caught.value.message == (
            f"chat id {chat!r} has characters no chat id has, or is too long"
        )
        assert caught.value.hint is None


# chats: bindings


def test_bind_stores_the_binding_and_returns_it(queue: MessageQueue) -> None:
    chats = ChatStore(queue)
    binding = chats.bind("bot", "1", "g", title="Team", now=5.0)
    assert binding == Binding("bot", "1", "g", "mention", "member", "Team", 5.0)
    assert _raw(queue.path, "SELECT * FROM bindings") == [
        ("bot", "1", "g", "mention", "member", "Team", 5.0)
    ]
    assert chats.binding("bot", "1") == binding
    assert chats.binding("bot", "2") is None
    assert chats.binding("other", "1") is None
    again = chats.bind("bot", "1", "g", activation="always", trust="guest", now=6.0)
    assert again == Binding("bot", "1", "g", "always", "guest", None, 6.0)
    assert _raw(queue.path, "SELECT * FROM bindings") == [
        ("bot", "1", "g", "always", "guest", None, 6.0)
    ]
    assert binding.to_dict() == {
        "account": "bot", "chat": "1", "group": "g", "activation": "mention",
        "trust": "member", "title": "Team", "created": 5.0,
    }  # fmt: skip


def test_bind_without_a_time_takes_the_clock(queue: MessageQueue) -> None:
    binding = ChatStore(queue).bind("bot", "1", "g")
    assert binding.created > 1e9
    assert _raw(queue.path, "SELECT created FROM bindings") == [(binding.created,)]


def test_bind_refuses_another_group_an_activation_or_a_trust(queue: MessageQueue) -> None:
    chats = ChatStore(queue)
    chats.bind("bot", "1", "g", now=5.0)
    with pytest.raises(BadInput) as caught:
        chats.bind("bot", "1", "h", now=6.0)
    assert caught.value.message == "chat bot:1 is bound to group 'g'; a chat is bound to one group"
    assert caught.value.hint == "orchestrator unbind bot:1 first"
    with pytest.raises(BadInput) as caught:
        chats.bind("bot", "2", "g", activation="never")
    assert caught.value.message == "activation 'never': expected one of mention, always"
    with pytest.raises(BadInput) as caught:
        chats.bind("bot", "2", "g", trust="creator")
    assert caught.value.message == (
        "trust 'creator': expected one of member, guest (creators are named one by one in "
        "group.yaml)"
    )
    assert _raw(queue.path, "SELECT account, chat, group_folder FROM bindings") == [
        ("bot", "1", "g")
    ]
    chats.bind("other", "1", "h", now=7.0)  # the same chat id of another account
    assert chats.binding("other", "1") == Binding("other", "1", "h", "mention", "member", None, 7.0)


def test_unbind_removes_one_binding(queue: MessageQueue) -> None:
    chats = ChatStore(queue)
    one = chats.bind("bot", "1", "g", now=5.0)
    two = chats.bind("bot", "2", "g", now=5.0)
    other = chats.bind("ot", "1", "g", now=5.0)
    assert chats.unbind("bot", "1") == one
    assert chats.unbind("bot", "1") is None
    assert chats.bindings() == [two, other]


def test_bindings_of_a_group_or_an_account_in_order(queue: MessageQueue) -> None:
    chats = ChatStore(queue)
    b3 = chats.bind("b", "3", "g", now=1.0)
    a2 = chats.bind("a", "2", "h", now=1.0)
    b1 = chats.bind("b", "1", "h", now=1.0)
    a9 = chats.bind("a", "9", "g", now=1.0)
    assert chats.bindings() == [a2, a9, b1, b3]
    assert chats.bindings(group="h") == [a2, b1]
    assert chats.bindings(account="b") == [b1, b3]
    assert chats.bindings(group="g", account="a") == [a9]
    assert chats.bindings(group="x") == []


def test_bound_trust_of_a_chat_in_a_group(queue: MessageQueue) -> None:
    chats = ChatStore(queue)
    chats.bind("a", "1", "g", trust="guest", now=1.0)
    chats.bind("b", "1", "g", trust="member", now=1.0)
    chats.bind("c", "2", "g", trust="guest", now=1.0)
    assert chats.bound_trust("g", "a", "1") == "guest"
    assert chats.bound_trust("g", "b", "1") == "member"
    assert chats.bound_trust("g", None, "1") == "member"  # the highest of any account
    assert chats.bound_trust("g", None, "2") == "guest"
    assert chats.bound_trust("h", None, "1") is None
    assert chats.bound_trust("g", "a", "2") is None
    assert chats.bound_trust("h", "a", "1") is None


def test_move_chat_moves_the_binding_and_pending_pairings(queue: MessageQueue) -> None:
    chats = ChatStore(queue)
    chats.bind("bot", "old", "g", now=1.0)
    chats.bind("ot", "old", "h", now=1.0)
    pending, _ = chats.request_pairing("bot", "old", title=None, requested_by=None, now=10.0)
    used, _ = chats.request_pairing("bot", "old2", title=None, requested_by=None, now=10.0)
    assert pending is not None and used is not None
    queue.transaction(
        lambda c: c.execute(
            "UPDATE pairings SET chat='old', state=? WHERE code=?", (REJECTED, used.code)
        )
    )
    other, _ = chats.request_pairing("ot", "old", title=None, requested_by=None, now=10.0)
    assert other is not None
    assert chats.move_chat("bot", "old", "new") is True
    assert chats.binding("bot", "new") == Binding("bot", "new", "g", "mention", "member", None, 1.0)
    assert chats.binding("bot", "old") is None
    assert chats.binding("ot", "old") is not None
    assert sorted(_raw(queue.path, "SELECT code, chat FROM pairings")) == sorted(
        [(pending.code, "new"), (used.code, "old"), (other.code, "old")]
    )
    assert chats.move_chat("bot", "gone", "other") is False


def test_move_chat_to_a_bound_id_moves_nothing(queue: MessageQueue) -> None:
    chats = ChatStore(queue)
    chats.bind("bot", "old", "g", now=1.0)
    chats.bind("bot", "new", "h", now=1.0)
    pending, _ = chats.request_pairing("bot", "old", title=None, requested_by=None, now=10.0)
    assert pending is not None
    assert chats.move_chat("bot", "old", "new") is False
    assert chats.binding("bot", "old") is not None
    assert chats.binding("bot", "new").group == "h"  # type: ignore[union-attr]
    assert _raw(queue.path, "SELECT chat FROM pairings") == [("old",)]


# chats: pairing


def test_request_pairing_makes_a_code_once_per_chat(queue: MessageQueue) -> None:
    chats = ChatStore(queue)
    made, new = chats.request_pairing("bot", "1", title="T", requested_by="ann", now=100.0)
    assert new is True and made is not None
    assert made == Pairing(made.code, "bot", "1", "T", "ann", PENDING, 100.0, 3700.0, None, None)
    assert normalize_code(made.code) == made.code
    assert _raw(queue.path, "SELECT * FROM pairings") == [
        (made.code, "bot", "1", "T", "ann", PENDING, 100.0, 3700.0, None, None)
    ]
    again, new = chats.request_pairing("bot", "1", title="T2", requested_by="bob", now=3699.0)
    assert (again, new) == (made, False)
    after, new = chats.request_pairing("bot", "1", title=None, requested_by=None, now=3700.0)
    assert new is True and after is not None and after.code != made.code
    assert after.expires == 7300.0
    # the newest live one is named
    latest, new = chats.request_pairing("bot", "1", title=None, requested_by=None, now=3701.0)
    assert (latest, new) == (after, False)
    assert made.to_dict() == {
        "code": made.code, "account": "bot", "chat": "1", "title": "T", "requested_by": "ann",
        "state": PENDING, "created": 100.0, "expires": 3700.0, "group": None, "decided": None,
    }  # fmt: skip


def test_request_pairing_names_the_newest_of_two_live_codes(queue: MessageQueue) -> None:
    chats = ChatStore(queue)
    first, _ = chats.request_pairing("bot", "1", title=None, requested_by=None, now=100.0)
    assert first is not None
    queue.transaction(
        lambda c: c.execute(
            "INSERT INTO pairings VALUES ('ZZZZ-2222','bot','1',NULL,NULL,?,200.0,9000.0,NULL,"
            "NULL)",
            (PENDING,),
        )
    )
    found, new = chats.request_pairing("bot", "1", title=None, requested_by=None, now=300.0)
    assert new is False and found is not None and found.code == "ZZZZ-2222"


def test_request_pairing_ignores_decided_codes_and_other_chats(queue: MessageQueue) -> None:
    chats = ChatStore(queue)
    first, _ = chats.request_pairing("bot", "1", title=None, requested_by=None, now=100.0)
    assert first is not None
    chats.reject(first.code, now=101.0)
    second, new = chats.request_pairing("bot", "1", title=None, requested_by=None, now=102.0)
    assert new is True and second is not None and second.code != first.code
    other, new = chats.request_pairing("bot", "2", title=None, requested_by=None, now=102.0)
    assert new is True and other is not None and other.code != second.code
    elsewhere, new = chats.request_pairing("ot", "1", title=None, requested_by=None, now=102.0)
    assert new is True and elsewhere is not None


def test_an_account_has_at_most_cap_codes_waiting(queue: MessageQueue) -> None:
    chats = ChatStore(queue)
    for chat in ("1", "2"):
        made, new = chats.request_pairing("bot", chat, title=None, requested_by=None, now=100.0,
                                          cap=2, ttl=50.0)  # fmt: skip
        assert new is True and made is not None
    assert chats.request_pairing(
        "bot", "3", title=None, requested_by=None, now=149.0, cap=2, ttl=50.0
    ) == (None, False)
    # another account has its own cap
    made, new = chats.request_pairing("ot", "3", title=None, requested_by=None, now=149.0, cap=2)
    assert new is True
    # expired codes do not count
    made, new = chats.request_pairing(
        "bot", "3", title=None, requested_by=None, now=150.0, cap=2, ttl=50.0
    )
    assert new is True and made is not None and made.expires == 200.0


def test_an_account_at_cap_minus_one_gets_a_code_and_decided_ones_do_not_count(
    queue: MessageQueue,
) -> None:
    chats = ChatStore(queue)
    made, _ = chats.request_pairing("bot", "1", title=None, requested_by=None, now=100.0, cap=2)
    assert made is not None
    made2, new = chats.request_pairing("bot", "2", title=None, requested_by=None, now=100.0,
                                       cap=2)  # fmt: skip
    assert new is True and made2 is not None
    chats.reject(made.code, now=101.0)
    made3, new = chats.request_pairing("bot", "3", title=None, requested_by=None, now=102.0,
                                       cap=2)  # fmt: skip
    assert new is True and made3 is not None
    assert chats.request_pairing("bot", "4", title=None, requested_by=None, now=102.0,
                                 cap=2) == (None, False)  # fmt: skip
    assert chats.request_pairing("bot", "4", title=None, requested_by=None, now=102.0,
                                 cap=0) == (None, False)  # fmt: skip


def test_the_default_cap_is_twenty_codes(queue: MessageQueue) -> None:
    chats = ChatStore(queue)
    for chat in range(20):
        _, new = chats.request_pairing("bot", str(chat), title=None, requested_by=None, now=1.0)
        assert new is True
    assert chats.request_pairing("bot", "20", title=None, requested_by=None, now=1.0) == (
        None,
        False,
    )


def test_a_code_taken_already_is_drawn_again(
    queue: MessageQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    import orchestrator.store.chats as chatsmod

    chats = ChatStore(queue)
    codes = iter(["AAAA-2222", "AAAA-2222", "AAAA-2222", "BBBB-3333"])
    monkeypatch.setattr(chatsmod, "new_code", lambda: next(codes))
    first, _ = chats.request_pairing("bot", "1", title=None, requested_by=None, now=1.0)
    second, _ = chats.request_pairing("bot", "2", title=None, requested_by=None, now=1.0)
    assert first is not None and second is not None
    assert (first.code, second.code) == ("AAAA-2222", "BBBB-3333")


def test_pairings_waiting_newest_first_or_every_one(queue: MessageQueue) -> None:
    chats = ChatStore(queue)
    a, _ = chats.request_pairing("bot", "1", title=None, requested_by=None, now=100.0, ttl=10.0)
    b, _ = chats.request_pairing("bot", "2", title=None, requested_by=None, now=200.0, ttl=10.0)
    c, _ = chats.request_pairing("bot", "3", title=None, requested_by=None, now=150.0, ttl=100.0)
    assert a is not None and b is not None and c is not None
    chats.reject(c.code, now=151.0)
    rejected = chats.pairings(everything=True, now=0.0)[1]
    assert rejected.code == c.code and rejected.state == REJECTED and rejected.decided == 151.0
    assert [p.code for p in chats.pairings(now=105.0)] == [b.code, a.code]
    assert [p.code for p in chats.pairings(now=110.0)] == [b.code]
    assert [p.code for p in chats.pairings(now=209.0)] == [b.code]
    assert chats.pairings(now=210.0) == []
    assert [p.code for p in chats.pairings(now=210.0, everything=True)] == [b.code, c.code, a.code]
    assert len(chats.pairings()) == 0  # the clock is far past them


def test_approve_binds_the_chat_and_uses_the_code_up(queue: MessageQueue) -> None:
    chats = ChatStore(queue)
    made, _ = chats.request_pairing("bot", "1", title="Team", requested_by="ann", now=100.0)
    assert made is not None
    code = made.code.lower().replace("-", "")
    binding = chats.approve(code, "g", activation="always", trust="guest", now=200.0)
    assert binding == Binding("bot", "1", "g", "always", "guest", "Team", 200.0)
    assert chats.binding("bot", "1") == binding
    assert _raw(queue.path, "SELECT state, group_folder, decided FROM pairings") == [
        (APPROVED, "g", 200.0)
    ]
    with pytest.raises(BadInput) as caught:
        chats.approve(made.code, "g", now=201.0)
    assert (
        caught.value.message
        == f"pairing code {made.code} was approved already; a code is good once"
    )
    assert caught.value.hint == "ask in the chat again for a new code"


def test_approve_with_the_defaults(queue: MessageQueue) -> None:
    chats = ChatStore(queue)
    made, _ = chats.request_pairing("bot", "1", title=None, requested_by=None, now=100.0)
    assert made is not None
    assert chats.approve(made.code, "g", now=101.0) == Binding(
        "bot", "1", "g", "mention", "member", None, 101.0
    )


def test_reject_uses_the_code_up_without_binding(queue: MessageQueue) -> None:
    chats = ChatStore(queue)
    made, _ = chats.request_pairing("bot", "1", title=None, requested_by=None, now=100.0)
    assert made is not None
    assert chats.reject(made.code, now=150.0) == made
    assert chats.bindings() == []
    assert _raw(queue.path, "SELECT state, group_folder, decided FROM pairings") == [
        (REJECTED, None, 150.0)
    ]
    with pytest.raises(BadInput) as caught:
        chats.reject(made.code, now=151.0)
    assert (
        caught.value.message
        == f"pairing code {made.code} was rejected already; a code is good once"
    )


def test_an_unknown_or_expired_code_is_refused(queue: MessageQueue) -> None:
    chats = ChatStore(queue)
    with pytest.raises(BadInput) as caught:
        chats.approve("ABCD-2345", "g", now=1.0)
    assert caught.value.message == "no pairing code ABCD-2345"
    assert caught.value.hint == "orchestrator pair --list shows the codes waiting"
    made, _ = chats.request_pairing("bot", "1", title=None, requested_by=None, now=0.0, ttl=60.0)
    assert made is not None
    with pytest.raises(BadInput) as caught:
        chats.reject(made.code, now=60.0)
    assert caught.value.message == f"pairing code {made.code} expired 1970-01-01 00:01 UTC"
    assert caught.value.hint == "a message from the chat gets a new code"
    assert chats.reject(made.code, now=59.5).code == made.code
    with pytest.raises(BadInput, match="is not a pairing code"):
        chats.approve("nope", "g")


def test_approve_of_a_chat_bound_elsewhere_leaves_the_code(queue: MessageQueue) -> None:
    chats = ChatStore(queue)
    chats.bind("bot", "1", "h", now=1.0)
    made, _ = chats.request_pairing("bot", "1", title=None, requested_by=None, now=100.0)
    assert made is not None
    with pytest.raises(BadInput, match="is bound to group 'h'"):
        chats.approve(made.code, "g", now=101.0)
    assert _raw(queue.path, "SELECT state FROM pairings") == [(PENDING,)]


# chats: inbound


def _enqueue(queue: MessageQueue, claim: Any = None, channel: str = "tg") -> Any:
    return queue.enqueue(
        group="g", session="s", chat="c", thread=None, sender="a", trust="member", text="hi",
        channel=channel, claim=claim,
    )  # fmt: skip


def test_an_update_is_queued_once(queue: MessageQueue) -> None:
    chats = ChatStore(queue)
    assert chats.was_queued("bot", "u1") is False
    first = _enqueue(queue, chats.inbound_claim("bot", "u1", "chat1", "pm1"))
    assert chats.was_queued("bot", "u1") is True
    assert chats.was_queued("ot", "u1") is False
    assert chats.was_queued("bot", "u2") is False
    rows = _raw(
        queue.path,
        "SELECT account, update_id, message_id, platform_chat, platform_message FROM"
        " channel_inbound",
    )
    assert rows == [("bot", "u1", first.id, "chat1", "pm1")]
    again = _enqueue(queue, chats.inbound_claim("bot", "u1", "chat1", "pm1"))
    assert again.id == first.id
    assert _raw(queue.path, "SELECT COUNT(*) FROM messages") == [(1,)]
    other = _enqueue(queue, chats.inbound_claim("ot", "u1", "chat9", None))
    assert other.id != first.id
    assert chats.inbound_of(first.id) == ("chat1", "pm1")
    assert chats.inbound_of(other.id) == ("chat9", None)
    assert chats.inbound_of("none") is None


def test_an_update_recorded_without_a_message_names_the_new_one(queue: MessageQueue) -> None:
    chats = ChatStore(queue)
    queue.transaction(
        lambda c: c.execute(
            "INSERT INTO channel_inbound (account, update_id, message_id, platform_chat,"
            " platform_message, at) VALUES ('bot', 'u1', NULL, 'c', NULL, 1.0)"
        )
    )
    claim = chats.inbound_claim("bot", "u1", "c", None)
    names: list[object] = []

    class M:
        id = "new-id"

    queue.transaction(lambda c: names.append(claim(c, M())))
    assert names == ["new-id"]


# chats: outbound


def test_a_reply_is_claimed_once_then_finished(queue: MessageQueue) -> None:
    chats = ChatStore(queue)
    assert chats.claim_send("m", 0, "bot") is True
    assert chats.claim_send("m", 0, "bot") is False
    assert chats.claim_send("m", 1, "bot") is True
    assert chats.sent("m") == {0: (SENDING, []), 1: (SENDING, [])}
    assert _raw(queue.path, "SELECT message_id, seq, account, state, platform_ids, error FROM"
                " channel_outbound ORDER BY seq") == [
        ("m", 0, "bot", SENDING, None, None), ("m", 1, "bot", SENDING, None, None),
    ]  # fmt: skip
    chats.finish_send("m", 0, SENT, platform_ids=["10", "11"])
    chats.finish_send("m", 1, "failed", error="too big")
    assert chats.sent("m") == {0: (SENT, ["10", "11"]), 1: ("failed", [])}
    assert _raw(queue.path, "SELECT seq, state, platform_ids, error FROM channel_outbound"
                " ORDER BY seq") == [
        (0, SENT, '["10", "11"]', None), (1, "failed", None, "too big"),
    ]  # fmt: skip
    assert chats.sent("other") == {}


def test_release_send_forgets_only_a_claim_in_flight(queue: MessageQueue) -> None:
    chats = ChatStore(queue)
    chats.claim_send("m", 0, "bot")
    chats.claim_send("m", 1, "bot")
    chats.claim_send("n", 0, "bot")
    chats.finish_send("m", 1, SENT, platform_ids=[])
    chats.release_send("m", 1)
    chats.release_send("m", 0)
    assert chats.sent("m") == {1: (SENT, [])}
    assert chats.sent("n") == {0: (SENDING, [])}
    assert chats.claim_send("m", 0, "bot") is True


def test_in_flight_sends_of_an_account(queue: MessageQueue) -> None:
    chats = ChatStore(queue)
    chats.claim_send("m", 0, "bot")
    chats.claim_send("m", 1, "bot")
    chats.claim_send("n", 0, "ot")
    chats.finish_send("m", 1, SENT)
    assert chats.in_flight_sends("bot") == [("m", 0)]
    assert chats.in_flight_sends("ot") == [("n", 0)]
    assert chats.in_flight_sends("none") == []


def test_unconfirmed_sends_are_marked_unknown(queue: MessageQueue) -> None:
    chats = ChatStore(queue)
    for message, seq, at in (("m", 0, 10.0), ("m", 1, 20.0), ("n", 0, 30.0)):
        queue.transaction(
            lambda c, m=message, s=seq, t=at: c.execute(
                "INSERT INTO channel_outbound (message_id, seq, account, state, at)"
                " VALUES (?,?,?,?,?)",
                (m, s, "bot", SENDING, t),
            )
        )
    queue.transaction(
        lambda c: c.execute(
            "INSERT INTO channel_outbound (message_id, seq, account, state, at)"
            " VALUES ('o', 0, 'ot', ?, 1.0)",
            (SENDING,),
        )
    )
    assert chats.unconfirmed("bot", before=20.0) == [("m", 0)]
    assert _raw(queue.path, "SELECT message_id, seq, state, error FROM channel_outbound"
                " ORDER BY message_id, seq") == [
        ("m", 0, UNKNOWN, "the daemon stopped while it was being sent"),
        ("m", 1, SENDING, None),
        ("n", 0, SENDING, None),
        ("o", 0, SENDING, None),
    ]  # fmt: skip
    assert sorted(chats.unconfirmed("bot")) == [("m", 1), ("n", 0)]
    assert chats.in_flight_sends("bot") == []
    assert chats.in_flight_sends("ot") == [("o", 0)]
    assert chats.unconfirmed("bot") == []


def test_unsent_replies_of_a_channel_oldest_first(queue: MessageQueue) -> None:
    chats = ChatStore(queue)
    first = _enqueue(queue)
    second = _enqueue(queue)
    third = _enqueue(queue, channel="cli")
    fourth = _enqueue(queue)
    for message, seqs in ((first, (0, 1)), (second, (0,)), (third, (0,)), (fourth, ())):
        for seq in seqs:
            queue.transaction(
                lambda c, m=message, s=seq: c.execute(
                    "INSERT INTO replies (message_id, seq, text, created) VALUES (?,?,'r',1.0)",
                    (m.id, s),
                )
            )
    queue.transaction(lambda c: c.execute("UPDATE messages SET updated=100.0"))
    queue.transaction(
        lambda c: c.execute("UPDATE messages SET updated=50.0 WHERE id=?", (second.id,))
    )
    assert chats.unsent("tg", 0.0) == [first.id, second.id]
    assert chats.unsent("tg", 50.0) == [first.id, second.id]
    assert chats.unsent("tg", 50.5) == [first.id]
    assert chats.unsent("cli", 0.0) == [third.id]
    chats.claim_send(first.id, 0, "bot")
    assert chats.unsent("tg", 0.0) == [first.id, second.id]  # its reply 1 is not claimed
    chats.claim_send(first.id, 1, "bot")
    assert chats.unsent("tg", 0.0) == [second.id]
    chats.claim_send(second.id, 1, "bot")  # not a reply of it
    assert chats.unsent("tg", 0.0) == [second.id]


# chats: account state and pruning


def test_account_state_by_key(queue: MessageQueue) -> None:
    chats = ChatStore(queue)
    assert chats.get_state("bot", "offset") is None
    chats.set_state("bot", "offset", "5")
    chats.set_state("bot", "offset", "6")
    chats.set_state("bot", "other", "x")
    chats.set_state("ot", "offset", "9")
    assert chats.get_state("bot", "offset") == "6"
    assert chats.get_state("ot", "offset") == "9"
    assert chats.get_state("ot", "other") is None
    assert sorted(_raw(queue.path, "SELECT * FROM channel_state")) == [
        ("bot", "offset", "6"), ("bot", "other", "x"), ("ot", "offset", "9"),
    ]  # fmt: skip


def test_health_is_a_mapping_or_none(queue: MessageQueue) -> None:
    chats = ChatStore(queue)
    assert chats.health("bot") is None
    chats.set_state("bot", "health", '{"ok": true, "n": 2}')
    assert chats.health("bot") == {"ok": True, "n": 2}
    chats.set_state("bot", "health", "[1, 2]")
    assert chats.health("bot") is None
    chats.set_state("bot", "health", "{not json")
    assert chats.health("bot") is None
    chats.set_state("bot", "health", "")
    assert chats.health("bot") is None


def test_prune_forgets_old_records_and_decided_or_expired_pairings(queue: MessageQueue) -> None:
    chats = ChatStore(queue)
    keep = 100.0
    now = 1000.0  # cutoff 900
    rows_in = [("bot", "u1", 899.0), ("bot", "u2", 900.0), ("bot", "u3", 950.0)]
    queue.transaction(
        lambda c: c.executemany(
            "INSERT INTO channel_inbound (account, update_id, message_id, platform_chat,"
            " platform_message, at) VALUES (?,?,NULL,'c',NULL,?)",
            rows_in,
        )
    )
    rows_out = [
        ("m", 0, SENT, 899.0), ("m", 1, SENDING, 10.0), ("m", 2, SENT, 900.0),
        ("m", 3, UNKNOWN, 1.0),
    ]  # fmt: skip
    queue.transaction(
        lambda c: c.executemany(
            "INSERT INTO channel_outbound (message_id, seq, account, state, at)"
            " VALUES (?,?,'bot',?,?)",
            rows_out,
        )
    )
    pairings = [
        ("AAAA-2222", PENDING, None, 899.0),  # expired before the cutoff
        ("BBBB-2222", PENDING, None, 900.0),  # expires at it
        ("CCCC-2222", APPROVED, 899.0, 5000.0),  # decided before it
        ("DDDD-2222", REJECTED, 900.0, 5000.0),  # decided at it
        ("EEEE-2222", PENDING, None, 5000.0),
    ]
    queue.transaction(
        lambda c: c.executemany(
            "INSERT INTO pairings (code, account, chat, state, created, expires, decided)"
            " VALUES (?,'bot','1',?,1.0,?,?)",
            [(code, state, expires, decided) for code, state, decided, expires in pairings],
        )
    )
    assert chats.prune(now=now, keep=keep) == 1 + 2 + 2
    assert _raw(queue.path, "SELECT update_id FROM channel_inbound ORDER BY update_id") == [
        ("u2",), ("u3",),
    ]  # fmt: skip
    assert _raw(queue.path, "SELECT seq FROM channel_outbound ORDER BY seq") == [(1,), (2,)]
    assert _raw(queue.path, "SELECT code FROM pairings ORDER BY code") == [
        ("BBBB-2222",), ("DDDD-2222",), ("EEEE-2222",),
    ]  # fmt: skip
    assert chats.prune(now=now, keep=keep) == 0


def test_prune_keeps_a_week_by_default(queue: MessageQueue) -> None:
    chats = ChatStore(queue)
    week = 7 * 86400
    queue.transaction(
        lambda c: c.executemany(
            "INSERT INTO channel_inbound (account, update_id, at) VALUES ('bot', ?, ?)",
            [("old", 1000.0 - week - 1), ("new", 1000.0 - week)],
        )
    )
    assert chats.prune(now=1000.0) == 1
    assert _raw(queue.path, "SELECT update_id FROM channel_inbound") == [("new",)]
    assert chats.prune() == 1  # the clock: long after both


# the clock, when no time is given (nothing asserted on its value)


def test_held_requests_take_the_clock_when_given_no_time(queue: MessageQueue) -> None:
    held = HeldRequests(queue)
    made = _hold(held, now=None, ttl=1000.0)
    assert made.expires - made.created == 1000.0
    assert held.get(made.id) == made
    assert held.waiting() == [made]
    old = _hold(held, now=1000.0, ttl=100.0)
    assert held.prune() == 1
    assert held.get(old.id) is None
    assert held.waiting() == [made]


def test_pairings_take_the_clock_when_given_no_time(queue: MessageQueue) -> None:
    chats = ChatStore(queue)
    made, new = chats.request_pairing("bot", "1", title=None, requested_by=None)
    assert new is True and made is not None
    assert made.expires - made.created == 3600.0
    assert chats.pairings() == [made]
    assert chats.request_pairing("bot", "1", title=None, requested_by=None) == (made, False)
    binding = chats.approve(made.code, "g")
    assert chats.binding("bot", "1") == binding
    other, _ = chats.request_pairing("bot", "2", title=None, requested_by=None)
    assert other is not None
    assert chats.reject(other.code) == other
    assert chats.pairings() == []
