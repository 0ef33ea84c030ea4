"""The durable queue and the dispatcher's pure decisions."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from orchestrator.daemon.core import classify_sender, fair_order
from orchestrator.groups.config import GroupConfig
from orchestrator.limits import HOST_NOTICE_SEQ, MAX_DELIVERY_ATTEMPTS
from orchestrator.media.outbox import ReplyFile
from orchestrator.store.held import HeldRequests
from orchestrator.store.messages import DEAD, DONE, INFLIGHT, QUEUED, MessageQueue
from tests.clocks import local_zone


@pytest.fixture
def queue(tmp_path: Path) -> MessageQueue:
    return MessageQueue(tmp_path / "queue.db")


def put(queue: MessageQueue, group: str = "g", session: str = "s", text: str = "hi"):  # type: ignore[no-untyped-def]
    return queue.enqueue(
        group=group,
        session=session,
        chat="c",
        thread=None,
        sender="a",
        trust="member",
        text=text,
        channel="cli",
    )


def test_wal_and_durable_settings(queue: MessageQueue) -> None:
    assert queue._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert queue._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    # a writer waits up to 30 s for another process's transaction (a CLI `send` beside
    # the daemon) rather than failing at once with "database is locked"
    assert queue._db.execute("PRAGMA busy_timeout").fetchone()[0] == 30_000


@contextmanager
def _changing(queue: MessageQueue, message_id: str) -> Iterator[None]:
    """Inside: another thread's write transaction, which changed the message's text to
    'changed', is open (its commit waits for the block's end). The block's reads must not
    wait for it: when they did, the writer's 60 s wait runs out and the check fails."""
    import threading

    writing, done = threading.Event(), threading.Event()
    released: list[bool] = []

    def write(db) -> None:  # type: ignore[no-untyped-def]
        db.execute("UPDATE messages SET text='changed' WHERE id=?", (message_id,))
        writing.set()
        released.append(done.wait(60))  # False: the reads waited for the writer

    writer = threading.Thread(target=queue.transaction, args=(write,))
    writer.start()
    try:
        assert writing.wait(60)
        yield
    finally:
        done.set()
        writer.join()
    assert released == [True]


def test_the_dispatchers_reads_do_not_wait_for_a_transaction_in_progress(
    queue: MessageQueue,
) -> None:
    """runnable, next_wakeup, get, files_of and pauses read on a connection of their own: another
    thread's write transaction (its commit's sync included) does not hold them up, and
    they see what was committed before it."""
    message = put(queue)
    report = ReplyFile(0, "report.txt", "text/plain", 5, "document", "/outbox/report.txt")
    assert queue.add_file_reply(message.id, "the report", report)
    with _changing(queue, message.id):
        assert [m.id for m in queue.runnable()] == [message.id]
        assert queue.next_wakeup() is None
        assert queue.pauses() == []
        found = queue.get(message.id)
        assert found is not None and found.text == "hi"  # not the uncommitted change
        assert queue.files_of(message.id) == {0: report}
    assert queue.get(message.id).text == "changed"  # type: ignore[union-attr]


def test_a_read_outside_a_transaction_does_not_wait_for_one_in_progress(
    queue: MessageQueue,
) -> None:
    """read and read_one (every store's reads) run on the reader's connection: another
    thread's write transaction does not hold them up, and they see what was committed."""
    message = put(queue)
    with _changing(queue, message.id):
        sql = "SELECT text FROM messages WHERE id=?"
        assert queue.read(sql, (message.id,)) == [("hi",)]
        assert queue.read_one(sql, (message.id,)) == ("hi",)
        assert queue.in_flight("g") == 0
    assert queue.read_one("SELECT text FROM messages WHERE id=?", (message.id,)) == ("changed",)


def test_a_read_inside_a_transaction_sees_its_uncommitted_writes(queue: MessageQueue) -> None:
    message = put(queue)
    seen: list[object] = []

    def work(db) -> None:  # type: ignore[no-untyped-def]
        db.execute("UPDATE messages SET text='changed' WHERE id=?", (message.id,))
        seen.append(queue.read_one("SELECT text FROM messages WHERE id=?", (message.id,)))
        seen.append(queue.read("SELECT text FROM messages WHERE id=?", (message.id,)))
        raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        queue.transaction(work)
    assert seen == [("changed",), [("changed",)]]
    assert queue.read_one("SELECT text FROM messages WHERE id=?", (message.id,)) == ("hi",)


def test_a_closed_store_reads_nothing_and_makes_no_file(tmp_path: Path) -> None:
    """After close, a read fails as the writer's connection would: the reader's is not
    opened again (the file may have been moved aside, and opening would make a new one)."""
    import sqlite3

    queue = MessageQueue(tmp_path / "queue.db")
    queue.close()
    (tmp_path / "queue.db").rename(tmp_path / "aside.db")
    with pytest.raises(sqlite3.ProgrammingError):
        queue.read("SELECT 1")
    with pytest.raises(sqlite3.ProgrammingError):
        queue.read_one("SELECT 1")
    assert not (tmp_path / "queue.db").exists()


def test_one_at_a_time_per_session_in_order(queue: MessageQueue) -> None:
    a1, a2 = put(queue, session="a", text="1"), put(queue, session="a", text="2")
    b1 = put(queue, session="b")
    assert [m.id for m in queue.runnable()] == [a1.id, b1.id]
    assert queue.claim(a1.id) and not queue.claim(a1.id)
    assert [m.id for m in queue.runnable()] == [b1.id]  # a2 waits for a1
    queue.complete(a1.id, ["r1"])
    assert [m.id for m in queue.runnable()] == [a2.id, b1.id]


def test_replies_are_stored_once(queue: MessageQueue) -> None:
    m = put(queue)
    queue.claim(m.id)
    queue.complete(m.id, ["one", "two"])
    queue.complete(m.id, ["one", "two"])  # a retried turn reporting again
    got = queue.get(m.id)
    assert got is not None and got.state == DONE and got.replies == ("one", "two")


def test_backoff_then_dead_letter_then_retry(queue: MessageQueue) -> None:
    m = put(queue)
    for attempt in range(1, MAX_DELIVERY_ATTEMPTS + 1):
        assert queue.claim(m.id)
        state = queue.fail(m.id, f"boom {attempt}")
        if attempt < MAX_DELIVERY_ATTEMPTS:
            assert state == QUEUED
            assert queue.runnable() == []  # in backoff
            wake = queue.next_wakeup()
            assert wake is not None
            assert [x.id for x in queue.runnable(now=wake + 0.01)] == [m.id]
    assert state == DEAD
    dead = queue.dead_letters()
    assert [d.id for d in dead] == [m.id] and dead[0].last_error == "boom 5"
    assert queue.retry(m.id) and not queue.retry(m.id)
    assert [x.id for x in queue.runnable()] == [m.id]


def test_recover_requeues_inflight_after_a_crash(tmp_path: Path) -> None:
    queue = MessageQueue(tmp_path / "q.db")
    m = put(queue)
    queue.claim(m.id)
    queue.close()
    reopened = MessageQueue(tmp_path / "q.db")  # the daemon restarts
    got = reopened.get(m.id)
    assert got is not None and got.state == INFLIGHT
    assert reopened.recover() == 1
    assert [x.id for x in reopened.runnable()] == [m.id]


def test_fair_order_round_robins_groups() -> None:
    from orchestrator.store.messages import Message

    def msg(group: str, n: int) -> Message:
        return Message(
            f"{group}{n}",
            group,
            f"s{n}",
            "c",
            None,
            "a",
            "member",
            "t",
            "cli",
            QUEUED,
            created=float(n),
        )

    candidates = [msg("a", 1), msg("a", 2), msg("a", 3), msg("b", 4), msg("c", 5)]
    order = [m.id for m in fair_order(candidates, {"a": 10.0, "b": 5.0})]
    assert order == ["c5", "b4", "a1", "a2", "a3"]
    # a group never served comes before one served however early (the clock may read
    # under a second, just after boot)
    order = [m.id for m in fair_order(candidates, {"a": 0.5, "b": 0.25})]
    assert order == ["c5", "b4", "a1", "a2", "a3"]


def test_classify_sender() -> None:
    config = GroupConfig(name="G", creators=("alice",), members=("bob",))
    assert classify_sender(config, "alice") == "creator"
    assert classify_sender(config, "bob") == "member"
    assert classify_sender(config, "eve") is None
    from dataclasses import replace

    assert classify_sender(replace(config, unknown_senders="allow"), "eve") == "guest"


def test_backoff_is_half_a_second_doubling_to_thirty() -> None:
    from orchestrator.store.messages import delivery_backoff

    assert [delivery_backoff(n) for n in range(1, 9)] == [0.5, 1, 2, 4, 8, 16, 30, 30]


class _ShrinkingReserve:
    """Stands in for the reserve file: releasing it makes room in the database."""

    def __init__(self, queue: MessageQueue) -> None:
        self.queue = queue
        self.released = 0

    def release(self) -> bool:
        self.released += 1
        self.queue._db.execute("PRAGMA max_page_count = 100000")
        return True


def _fill(queue: MessageQueue) -> None:
    """Cap the database at its current size: the next growth fails with SQLITE_FULL,
    exactly as a full disk does."""
    pages = queue._db.execute("PRAGMA page_count").fetchone()[0]
    queue._db.execute(f"PRAGMA max_page_count = {pages}")


def test_a_full_disk_releases_the_reserve_and_the_commit_goes_through(
    queue: MessageQueue, caplog: pytest.LogCaptureFixture
) -> None:
    reserve = _ShrinkingReserve(queue)
    queue.reserve = reserve  # type: ignore[assignment]
    _fill(queue)
    with caplog.at_level("ERROR", logger="orchestrator.queue"):
        m = put(queue, text="x" * 20_000)
    assert reserve.released == 1 and queue.get(m.id) is not None
    assert caplog.messages == [f"the disk holding {queue.path} is full: released the reserve"]


def test_a_reserve_in_place_is_kept_and_one_that_cannot_be_measured_is_not_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from orchestrator.store.db import Reserve

    reserve = Reserve(tmp_path, size=4096)
    assert reserve.ensure() is True and reserve.path.stat().st_size == 4096
    inode = reserve.path.stat().st_ino
    assert reserve.ensure() is True and reserve.path.stat().st_ino == inode  # not made again
    assert reserve.release() is True and reserve.release() is False

    def no_statvfs(path: object) -> object:
        raise OSError("statvfs failed")

    monkeypatch.setattr(os, "statvfs", no_statvfs)
    assert reserve.ensure() is False and not reserve.path.exists()


def test_a_full_disk_without_a_reserve_is_a_clear_error(queue: MessageQueue) -> None:
    from orchestrator.store.db import QueueFull

    _fill(queue)
    with pytest.raises(QueueFull, match="the disk is full"):
        put(queue, text="x" * 20_000)


def test_release_stale_queues_again_only_what_no_worker_holds(queue: MessageQueue) -> None:
    held, lost = put(queue, session="a"), put(queue, session="b")
    assert queue.claim(held.id) and queue.claim(lost.id)
    assert queue.release_stale({held.id}) == 1
    assert queue.get(held.id).state == INFLIGHT  # type: ignore[union-attr]
    assert queue.get(lost.id).state == QUEUED  # type: ignore[union-attr]


def test_a_corrupt_queue_names_its_file_and_the_way_out(tmp_path: Path) -> None:
    from orchestrator.store.db import QueueCorrupt

    path = tmp_path / "queue.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(QueueCorrupt) as caught:
        MessageQueue(path)
    assert str(path) in caught.value.message and "--repair-queue" in (caught.value.hint or "")


def test_set_aside_keeps_the_pending_messages_it_can_read(tmp_path: Path) -> None:
    from orchestrator.home import Home
    from orchestrator.store.messages import check_queue, open_queue, set_aside

    home = Home(tmp_path)
    queue = open_queue(home)
    done, waiting = put(queue, session="a"), put(queue, session="b")
    queue.claim(done.id)
    queue.complete(done.id, ["r"])
    queue.close()
    aside, copied, problem = set_aside(home)
    assert (copied, problem) == (1, None) and aside.exists()
    fresh = open_queue(home)
    assert [m.id for m in fresh.runnable()] == [waiting.id] and fresh.get(done.id) is None
    fresh.close()
    assert check_queue(home) is None
    (tmp_path / "state/queue.db").write_bytes(b"garbage" * 1000)
    assert check_queue(home) is not None
    aside, copied, problem = set_aside(home)
    assert copied == 0 and problem is not None and "not a database" in problem


def test_the_old_queue_is_opened_read_only_by_uri_also_where_sqlite_must_be_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite reads a "file:" name as a URI only when asked (uri=True), unless it was
    built with SQLITE_USE_URI (this one may be): without, it would look for a folder
    named "file:" and fail. The check and set_aside must work on either build."""
    import sqlite3

    from orchestrator.home import Home
    from orchestrator.store.messages import check_queue, open_queue, set_aside

    home = Home(tmp_path)
    queue = open_queue(home)
    waiting = put(queue)
    queue.close()
    real = sqlite3.connect

    def plain_build(database: object, *args: object, uri: bool = False, **kwargs: object):  # type: ignore[no-untyped-def]
        if not uri and str(database).startswith("file:"):
            raise sqlite3.OperationalError("unable to open database file")
        return real(database, *args, uri=uri, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(sqlite3, "connect", plain_build)
    assert check_queue(home) is None
    _aside, copied, problem = set_aside(home)
    assert (copied, problem) == (1, None)
    monkeypatch.undo()
    fresh = open_queue(home)
    assert [m.id for m in fresh.runnable()] == [waiting.id]
    fresh.close()


def test_runnable_skips_paused_groups(queue: MessageQueue) -> None:
    a, b = put(queue, group="a"), put(queue, group="b")
    queue.pause("a", "operator", "why")
    assert [m.id for m in queue.runnable()] == [b.id]
    assert queue.resume("a", "someone-else") == 0
    assert queue.resume("a", "operator") == 1
    assert {m.id for m in queue.runnable()} == {a.id, b.id}


# every field goes in and comes out as it was


def test_a_message_comes_back_exactly_as_it_was_stored(queue: MessageQueue) -> None:
    m = queue.enqueue(
        group="grp", session="sess", chat="chat-1", thread="th-9", sender="snd",
        trust="creator", text="the text", channel="http",
    )  # fmt: skip
    got = queue.get(m.id)
    assert got is not None
    assert (got.id, got.group, got.session, got.chat, got.thread, got.sender) == (
        m.id, "grp", "sess", "chat-1", "th-9", "snd",
    )  # fmt: skip
    assert (got.trust, got.text, got.channel, got.state, got.attempts) == (
        "creator", "the text", "http", QUEUED, 0,
    )  # fmt: skip
    assert got.last_error is None and got.created == pytest.approx(m.created)
    assert isinstance(got.attempts, int) and got.replies == ()
    queue.claim(m.id)
    queue.fail(m.id, "boom")
    again = queue.get(m.id)
    assert again is not None and (again.attempts, again.last_error) == (1, "boom")
    assert isinstance(again.last_error, str)
    nothread = put(queue, session="other")
    assert queue.get(nothread.id).thread is None  # type: ignore[union-attr]
    [listed] = [x for x in queue.runnable() if x.id == nothread.id]
    assert listed == queue.get(nothread.id)
    assert queue.get("no-such-id") is None


def test_to_dict_names_every_field(queue: MessageQueue) -> None:
    m = put(queue)
    data = queue.get(m.id).to_dict()  # type: ignore[union-attr]
    assert data == {
        "id": m.id, "group": "g", "session": "s", "chat": "c", "thread": None,
        "sender": "a", "trust": "member", "state": QUEUED, "attempts": 0, "error": None,
        "created": pytest.approx(m.created), "replies": [],
    }  # fmt: skip


def test_the_queue_makes_its_folder_and_keeps_its_path(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "queue.db"
    queue = MessageQueue(path)
    assert queue.path == path and path.exists() and queue.reserve is None
    queue.close()


def test_the_queue_serves_every_thread(queue: MessageQueue) -> None:
    """The daemon's workers share one connection: it must not be tied to its thread."""
    import threading

    m = put(queue)
    seen: list[object] = []
    thread = threading.Thread(target=lambda: seen.append(queue.get(m.id)))
    thread.start()
    thread.join()
    assert seen and seen[0] is not None


def test_a_failure_after_the_last_attempt_is_dead_without_backoff(queue: MessageQueue) -> None:
    m = put(queue)
    for _ in range(MAX_DELIVERY_ATTEMPTS):
        queue.claim(m.id)
        state = queue.fail(m.id, "x" * 5000)
        if state == QUEUED:
            queue._db.execute("UPDATE messages SET not_before=0 WHERE id=?", (m.id,))
    assert state == DEAD
    row = queue._db.execute("SELECT not_before FROM messages WHERE id=?", (m.id,)).fetchone()
    assert row[0] == 0.0
    assert len(queue.get(m.id).last_error) == 2000  # type: ignore[union-attr, arg-type]
    assert queue.fail("unknown-id", "gone") == DEAD  # nothing to back off


def test_runnable_at_exactly_not_before_and_next_wakeup(queue: MessageQueue) -> None:
    assert queue.next_wakeup() is None
    m = put(queue)
    queue.claim(m.id)
    queue.fail(m.id, "boom")
    wake = queue.next_wakeup()
    assert isinstance(wake, float)
    assert queue.runnable(now=wake - 0.001) == []
    assert [x.id for x in queue.runnable(now=wake)] == [m.id]  # due at not_before itself


def test_a_retry_starts_the_attempts_over(queue: MessageQueue) -> None:
    m = put(queue)
    for _ in range(MAX_DELIVERY_ATTEMPTS):
        queue.claim(m.id)
        queue._db.execute("UPDATE messages SET not_before=0 WHERE id=?", (m.id,))
        queue.fail(m.id, "boom")
    assert queue.retry(m.id)
    got = queue.get(m.id)
    assert got is not None and (got.state, got.attempts) == (QUEUED, 0)
    assert queue.next_wakeup() is None  # due now, not later


def test_recover_and_release_stale_report_how_many(queue: MessageQueue) -> None:
    assert queue.recover() == 0 and queue.release_stale(set()) == 0
    a, b = put(queue, session="a"), put(queue, session="b")
    queue.claim(a.id)
    queue.claim(b.id)
    assert queue.recover() == 2
    assert {m.state for m in (queue.get(a.id), queue.get(b.id))} == {QUEUED}  # type: ignore[union-attr]


def test_counts_and_dead_letters(queue: MessageQueue) -> None:
    assert queue.counts() == {} and queue.dead_letters() == []
    a, _b = put(queue, session="a"), put(queue, session="b")
    queue.claim(a.id)
    queue.complete(a.id, [])
    assert queue.counts() == {DONE: 1, QUEUED: 1}


def test_replies_keep_their_order_and_a_stored_one_is_not_stored_again(queue: MessageQueue) -> None:
    m = put(queue)
    assert queue.add_reply(m.id, 1, "second") and queue.add_reply(m.id, 0, "first")
    assert not queue.add_reply(m.id, 0, "again")
    queue.claim(m.id)
    queue.complete(m.id, ["first", "second", "third"])
    got = queue.get(m.id)
    assert got is not None and got.replies == ("first", "second", "third")
    assert got.state == DONE and got.last_error is None


# pause leases


def test_pause_leases_in_full(queue: MessageQueue) -> None:
    lease = queue.pause("g", "disk", "over its limit", refuse_new=True, expires=None)
    assert (lease.group, lease.holder, lease.reason, lease.refuse_new, lease.expires) == (
        "g", "disk", "over its limit", True, None,
    )  # fmt: skip
    [stored] = queue.pauses("g")
    assert stored == lease
    assert isinstance(stored.refuse_new, bool) and isinstance(stored.created, float)
    assert stored.to_dict() == {
        "group": "g", "holder": "disk", "reason": "over its limit", "refuse_new": True,
        "created": lease.created, "expires": None,
    }  # fmt: skip
    plain = queue.pause("h", "operator", "maintenance", expires=1000.0)
    assert plain.refuse_new is False and plain.expires == 1000.0
    assert queue.pauses("h", now=999.0) == [plain]
    assert queue.pauses("h", now=1000.0) == []  # expired at its expiry
    assert [p.group for p in queue.pauses(now=999.0)] == ["g", "h"]  # every group, oldest first
    assert queue.pauses("nobody") == []
    queue.pause("g", "operator", "second", expires=None)
    assert queue.paused_groups(now=999.0) == {"g": lease, "h": plain}  # the oldest per group
    assert queue.paused_groups(now=1000.0) == {"g": lease}
    assert queue.resume("g") == 2 and queue.pauses("g") == []
    assert queue.resume("g") == 0


def test_an_expired_pause_no_longer_holds_messages(queue: MessageQueue) -> None:
    import time

    m = put(queue, group="g")
    queue.pause("g", "operator", "briefly", expires=time.time() - 1)
    assert [x.id for x in queue.runnable()] == [m.id]


# a full disk, a corrupt file


def test_a_full_disk_is_recognised_by_code_or_by_message() -> None:
    import sqlite3

    from orchestrator.store.db import _is_full

    coded = sqlite3.OperationalError("whatever")
    coded.sqlite_errorcode = 13  # type: ignore[attr-defined]
    assert _is_full(coded)
    assert _is_full(sqlite3.OperationalError("database or disk is full"))
    assert not _is_full(sqlite3.OperationalError("database is locked"))


def test_the_full_disk_error_says_what_to_do(queue: MessageQueue) -> None:
    from orchestrator.store.db import QueueFull

    _fill(queue)
    with pytest.raises(QueueFull) as caught:
        put(queue, text="x" * 20_000)
    assert caught.value.message == f"cannot commit to {queue.path}: the disk is full"
    assert caught.value.hint == "free some space; nothing committed is lost"


def test_the_reserve_is_released_once_per_commit(queue: MessageQueue) -> None:
    """A disk still full after the reserve is gone fails: it does not free more."""
    from orchestrator.store.db import QueueFull

    class Empty(_ShrinkingReserve):
        def release(self) -> bool:
            self.released += 1
            return True  # freed, but not enough

    reserve = Empty(queue)
    queue.reserve = reserve  # type: ignore[assignment]
    _fill(queue)
    with pytest.raises(QueueFull):
        put(queue, text="x" * 20_000)
    assert reserve.released == 1


def test_the_reserve_file(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import os

    from orchestrator.store.db import RESERVE_FILE, Reserve

    reserve = Reserve(tmp_path, size=1024 * 1024)
    assert not reserve.release()  # nothing to free yet
    assert reserve.ensure()
    path = tmp_path / RESERVE_FILE
    st = os.stat(path)
    assert st.st_size == 1024 * 1024 and st.st_blocks * 512 >= 1024 * 1024  # not sparse
    assert st.st_mode & 0o777 == 0o600
    assert not (tmp_path / (RESERVE_FILE + ".tmp")).exists()
    assert reserve.ensure()  # already there
    assert reserve.release() and not path.exists()
    # no room for twice its size: not made

    class Full:
        f_bavail, f_frsize = 2 * 1024 * 1024 - 1, 1

    monkeypatch.setattr(os, "statvfs", lambda _p: Full)
    assert not reserve.ensure() and not path.exists()
    Full.f_bavail = 2 * 1024 * 1024  # exactly twice: made
    assert reserve.ensure() and path.exists()
    # a short file is made again at its full size
    path.write_bytes(b"x")
    assert reserve.ensure() and os.stat(path).st_size == 1024 * 1024
    # a failure leaves no temporary file
    reserve.release()

    def no_space(*args):  # type: ignore[no-untyped-def]
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", no_space)
    assert not reserve.ensure()
    assert not path.exists() and not (tmp_path / (RESERVE_FILE + ".tmp")).exists()


def test_a_leftover_temporary_reserve_is_cut_to_size_and_an_unusable_one_is_no_error(
    tmp_path: Path,
) -> None:
    from orchestrator.store.db import RESERVE_FILE, Reserve

    reserve = Reserve(tmp_path, size=4096)
    tmp = tmp_path / (RESERVE_FILE + ".tmp")
    tmp.write_bytes(b"x" * 3 * 4096)  # left by a crash while a larger reserve was made
    assert reserve.ensure() and reserve.path.stat().st_size == 4096 and not tmp.exists()
    reserve.release()
    tmp.mkdir()  # cannot be opened nor unlinked: ensure reports no reserve, raises nothing
    assert reserve.ensure() is False and not reserve.path.exists() and tmp.is_dir()


def test_open_queue_makes_the_reserve_and_uses_it(tmp_path: Path) -> None:
    from orchestrator.home import Home
    from orchestrator.store.db import RESERVE_FILE
    from orchestrator.store.messages import open_queue

    queue = open_queue(Home(tmp_path))
    assert queue.reserve is not None and (tmp_path / "state" / RESERVE_FILE).exists()
    queue.close()
    fresh = tmp_path / "not" / "yet" / "made"  # a home's first use: its folders are made
    open_queue(Home(fresh)).close()
    assert (fresh / "state" / RESERVE_FILE).exists()


def test_a_full_disk_at_open_is_queue_full(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import sqlite3

    from orchestrator.store.db import QueueFull

    def full(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(sqlite3, "connect", full)
    path = tmp_path / "queue.db"
    with pytest.raises(QueueFull) as caught:
        MessageQueue(path)
    assert caught.value.message == f"cannot open {path}: the disk is full"
    assert caught.value.hint == "free some space, then retry"


def test_the_corrupt_queue_hint_in_full(tmp_path: Path) -> None:
    from orchestrator.store.db import QueueCorrupt

    path = tmp_path / "queue.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(QueueCorrupt) as caught:
        MessageQueue(path)
    assert caught.value.hint == (
        "`orchestrator doctor` explains; `orchestrator doctor --repair-queue` moves it aside "
        "and starts a new queue with the messages it can still read"
    )


def test_set_aside_moves_the_journal_files_too(tmp_path: Path) -> None:
    import re

    from orchestrator.home import Home
    from orchestrator.store.messages import QUEUE_FILE, check_queue, open_queue, set_aside

    home = Home(tmp_path)
    queue = open_queue(home)
    waiting = put(queue)
    state = tmp_path / "state"
    # keep the WAL and shared-memory files in place, as a crash would
    assert (state / f"{QUEUE_FILE}-wal").exists() and (state / f"{QUEUE_FILE}-shm").exists()
    aside, copied, problem = set_aside(home)
    queue.close()
    assert re.fullmatch(rf"{QUEUE_FILE}\.corrupt-\d{{8}}T\d{{6}}Z", aside.name)
    assert (copied, problem) == (1, None)
    assert aside.with_name(aside.name + "-wal").exists()
    assert aside.with_name(aside.name + "-shm").exists()
    fresh = open_queue(home)
    got = fresh.get(waiting.id)
    assert got is not None and got.state == QUEUED and got.text == "hi"
    fresh.close()
    assert check_queue(home) is None
    assert check_queue(Home(tmp_path / "nowhere")) is None  # no queue yet is not a problem


# what the learned-behaviors decision reads


def _say(queue: MessageQueue, trust: str, text: str = "hi", session: str = "s", done: bool = True):  # type: ignore[no-untyped-def]
    m = queue.enqueue(
        group="g", session=session, chat="c", thread=None, sender=trust, trust=trust,
        text=text, channel="cli",
    )  # fmt: skip
    if done:
        queue.claim(m.id)
        queue.complete(m.id, [])
    return m


def test_others_in_session_counts_since_the_last_completed_clear(queue: MessageQueue) -> None:
    first = _say(queue, "creator")
    assert queue.others_in_session(first.id, "creator") == 0
    _say(queue, "member")
    _say(queue, "guest")
    _say(queue, "member", session="elsewhere")  # another session does not count
    now = _say(queue, "creator", done=False)
    assert queue.others_in_session(now.id, "creator") == 2
    _say(queue, "member", text=" /clear ")  # anyone's /clear starts the context afresh
    assert queue.others_in_session(_say(queue, "creator", done=False).id, "creator") == 0
    _say(queue, "member")
    failed_clear = _say(queue, "creator", text="/clear", done=False)  # never ran: no reset
    later = _say(queue, "creator", done=False)
    assert queue.others_in_session(later.id, "creator") == 1
    assert queue.others_in_session(failed_clear.id, "creator") == 1
    # only messages before it count
    assert queue.others_in_session(first.id, "creator") == 0
    assert queue.others_in_session("unknown", "creator") == 0


def test_held_requests_each_keep_their_own_id_content_and_chat(queue: MessageQueue) -> None:
    fields = {
        "group": "g", "kind": "learned", "channel": "cli", "thread": None,
        "message_id": "m1", "chat_approvable": True, "ttl": 60.0,
    }  # fmt: skip
    assert HeldRequests(queue).waiting("g") == []
    first = HeldRequests(queue).hold(
        content="old text", chat="c1", sender="alice", now=100.0, **fields
    )
    second = HeldRequests(queue).hold(
        content="new text", chat="c2", sender="carol", now=100.0, **fields
    )
    assert first.id != second.id  # a newer request never replaces an older one
    assert [r.content for r in HeldRequests(queue).waiting("g", now=101.0)] == [
        "old text",
        "new text",
    ]
    assert HeldRequests(queue).waiting("g", channel="cli", chat="c2", now=101.0) == [second]
    assert HeldRequests(queue).waiting("g", channel="http", chat="c2", now=101.0) == []
    assert HeldRequests(queue).waiting("other", now=101.0) == []
    assert HeldRequests(queue).get(first.id) == first
    assert first.sha256 == hashlib.sha256(b"old text").hexdigest()
    assert first.to_dict() == {
        "id": first.id, "group": "g", "kind": "learned", "chars": 8, "sha256": first.sha256,
        "channel": "cli", "chat": "c1", "thread": None, "sender": "alice", "message_id": "m1",
        "chat_approvable": True, "created": 100.0, "expires": 160.0,
    }  # fmt: skip
    # expired: no longer waiting, still known until pruned
    assert HeldRequests(queue).waiting("g", now=160.0) == []
    assert HeldRequests(queue).get(first.id) == first
    assert HeldRequests(queue).prune(now=160.0) == 2 and HeldRequests(queue).get(first.id) is None
    third = HeldRequests(queue).hold(content="x", chat="c1", sender="alice", **fields)
    assert HeldRequests(queue).drop(third.id) and not HeldRequests(queue).drop(third.id)


def test_host_notices_never_reuse_a_sequence_number(queue: MessageQueue) -> None:
    m = queue.enqueue(
        group="g", session="s", chat="c", thread=None, sender="a", trust="creator", text="hi",
        channel="cli",
    )  # fmt: skip
    assert queue.add_host_notices(m.id, ["one", "two"]) == [HOST_NOTICE_SEQ, HOST_NOTICE_SEQ + 1]
    assert queue.add_host_notices(m.id, ["three"]) == [HOST_NOTICE_SEQ + 2]
    queue.complete(m.id, ["the answer"])
    assert queue.get(m.id).replies == ("the answer", "one", "two", "three")


def test_a_message_the_host_answered_is_stored_done(queue: MessageQueue) -> None:
    m = queue.record_done(
        group="g", session="s", chat="c", thread="t", sender="alice", trust="creator",
        text="/confirm", channel="cli", reply="Confirmed.",
    )  # fmt: skip
    got = queue.get(m.id)
    assert got == m and got.state == DONE and got.replies == ("Confirmed.",)
    assert queue.runnable() == []


def test_a_message_the_host_answered_keeps_every_field(queue: MessageQueue) -> None:
    import time as clock

    before = clock.time()
    stored = queue.record_done(
        group="g", session="thread-t", chat="c", thread="t", sender="a", trust="creator",
        text="/confirm", channel="cli", reply="Confirmed.",
    )  # fmt: skip
    found = queue.get(stored.id)
    assert found is not None
    assert (found.thread, found.state, found.replies, found.trust) == (
        "t", "done", ("Confirmed.",), "creator",
    )  # fmt: skip
    assert before <= found.created <= clock.time()
    seqs = queue.read("SELECT seq FROM replies WHERE message_id=?", (stored.id,))
    assert seqs == [(0,)]


def test_runnable_at_a_time_sees_pauses_as_they_are_then(queue: MessageQueue) -> None:
    import time as clock

    waiting = put(queue)
    queue.pause("g", "operator", "an hour", expires=clock.time() + 3600)
    assert queue.runnable() == []
    assert [m.id for m in queue.runnable(clock.time() + 7200)] == [waiting.id]


def test_a_chats_messages_by_default_the_newest_hundred(queue: MessageQueue) -> None:
    sent = [put(queue, session=f"s{n}").id for n in range(101)]
    assert [m.id for m in queue.chat_messages("g", "c")] == sent[1:]


def test_set_aside_queues_again_what_was_in_flight(tmp_path: Path) -> None:
    from orchestrator.home import Home
    from orchestrator.store.messages import open_queue, set_aside

    home = Home(tmp_path)
    queue = open_queue(home)
    flying = put(queue)
    assert queue.claim(flying.id)
    queue.close()
    _aside, copied, problem = set_aside(home)
    assert (copied, problem) == (1, None)
    fresh = open_queue(home)
    try:
        moved = fresh.get(flying.id)
        assert moved is not None and moved.state == "queued"
    finally:
        fresh.close()


def test_check_queue_names_what_sqlite_found(tmp_path: Path) -> None:
    import sqlite3

    from orchestrator.home import Home
    from orchestrator.store.messages import check_queue

    home = Home(tmp_path)
    (tmp_path / "state").mkdir()
    path = tmp_path / "state/queue.db"
    path.write_bytes(b"garbage" * 1000)
    assert check_queue(home) == "file is not a database"
    path.unlink()
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t (a TEXT)")
    db.execute("CREATE INDEX i ON t (a)")
    db.executemany("INSERT INTO t VALUES (?)", [(str(n) * 50,) for n in range(2000)])
    db.commit()
    db.close()
    assert check_queue(home) is None
    data = bytearray(path.read_bytes())
    data[4096 * 10 + 100 : 4096 * 10 + 600] = b"A" * 500  # one page damaged, not the header
    path.write_bytes(bytes(data))
    found = check_queue(home)
    assert found is not None and found.startswith("*** in database main ***")


def test_set_aside_names_the_file_in_utc(tmp_path: Path) -> None:
    import time as clock

    from orchestrator.home import Home
    from orchestrator.store.messages import open_queue, set_aside

    with local_zone("Asia/Tokyo"):
        home = Home(tmp_path)
        open_queue(home).close()
        before = clock.strftime("%Y%m%dT%H", clock.gmtime())
        aside, _, _ = set_aside(home)
        assert aside.name.startswith(f"queue.db.corrupt-{before}")


def test_defer_puts_an_in_flight_message_back_uncounted_after_its_wait(
    queue: MessageQueue,
) -> None:
    import time

    m = put(queue)
    assert queue.defer(m.id, 30, "the engine is away") is False  # only one in flight
    assert queue.claim(m.id)
    before = time.time()
    assert queue.defer(m.id, 30, "x" * 2500) is True
    after = time.time()
    row = queue._db.execute(
        "SELECT state, attempts, last_error, not_before FROM messages WHERE id=?", (m.id,)
    ).fetchone()
    assert row[0] == "queued" and row[1] == 0 and row[2] == "x" * 2000
    assert before + 30 <= row[3] <= after + 30
    assert queue.runnable(now=before) == []  # waits out its time
    assert [x.id for x in queue.runnable(now=after + 30)] == [m.id]
    assert queue.defer(m.id, 30, "again") is False  # queued, not in flight


def test_a_paused_groups_messages_cannot_be_claimed(queue: MessageQueue) -> None:
    m = queue.enqueue(
        group="g", session="s", chat="c", thread=None, sender="a", trust="creator", text="hi",
        channel="cli",
    )  # fmt: skip
    queue.pause("g", "operator", "hold")
    assert not queue.claim(m.id)  # the pause holds even against a claim already chosen
    queue.resume("g")
    queue.pause("g", "operator", "over", expires=1.0)  # an expired lease holds nothing
    assert queue.claim(m.id)


def test_a_pause_that_waits_gives_up_at_its_deadline_and_lets_go(queue: MessageQueue) -> None:
    from orchestrator.store.messages import GroupBusy

    m = queue.enqueue(
        group="g", session="s", chat="c", thread=None, sender="a", trust="creator", text="hi",
        channel="cli",
    )  # fmt: skip
    assert queue.claim(m.id)
    heard: list[int] = []
    with (
        pytest.raises(GroupBusy) as busy,
        queue.paused("g", "x", "y", wait=0.3, progress=heard.append),
    ):
        raise AssertionError("the body must not run while a turn is in flight")
    assert busy.value.message == "1 turn(s) of g are still running; nothing was changed"
    assert heard == [1] and queue.pauses("g") == []  # told once; the lease is gone
    queue.complete(m.id, [])
    with queue.paused("g", "x", "y", wait=0.3):
        assert [p.holder for p in queue.pauses("g")] == ["x"]
    assert queue.pauses("g") == []


def test_a_claim_is_committed_without_its_own_sync_and_durable_commits_stay_synced(
    tmp_path: Path,
) -> None:
    from orchestrator.store.messages import INFLIGHT, MessageQueue

    queue = MessageQueue(tmp_path / "queue.db")
    try:
        stored = queue.enqueue(
            group="g", session="s", chat="c", thread=None, sender="a", trust="member",
            text="hi", channel="cli",
        )  # fmt: skip
        seen: list[int] = []
        queue._db.set_trace_callback(
            lambda sql: seen.append(2 if sql == "PRAGMA synchronous=FULL" else 1)
            if sql.startswith("PRAGMA synchronous") else None
        )  # fmt: skip
        assert queue.claim(stored.id)
        queue._db.set_trace_callback(None)
        assert seen == [1, 2]  # NORMAL for the claim, FULL again after it
        assert queue._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        found = queue.get(stored.id)
        assert found is not None and found.state == INFLIGHT
    finally:
        queue.close()
