"""The durable queue and the dispatcher's pure decisions."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.daemon import classify_sender, fair_order
from orchestrator.group_config import GroupConfig
from orchestrator.limits import MAX_DELIVERY_ATTEMPTS
from orchestrator.queue import DEAD, DONE, INFLIGHT, QUEUED, MessageQueue


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
    from orchestrator.queue import Message

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


def test_classify_sender() -> None:
    config = GroupConfig(name="G", creators=("alice",), members=("bob",))
    assert classify_sender(config, "alice") == "creator"
    assert classify_sender(config, "bob") == "member"
    assert classify_sender(config, "eve") is None
    from dataclasses import replace

    assert classify_sender(replace(config, unknown_senders="allow"), "eve") == "guest"


def test_backoff_is_half_a_second_doubling_to_thirty() -> None:
    from orchestrator.queue import delivery_backoff

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


def test_a_full_disk_releases_the_reserve_and_the_commit_goes_through(queue: MessageQueue) -> None:
    reserve = _ShrinkingReserve(queue)
    queue.reserve = reserve  # type: ignore[assignment]
    _fill(queue)
    m = put(queue, text="x" * 20_000)
    assert reserve.released == 1 and queue.get(m.id) is not None


def test_a_full_disk_without_a_reserve_is_a_clear_error(queue: MessageQueue) -> None:
    from orchestrator.queue import QueueFull

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
    from orchestrator.queue import QueueCorrupt

    path = tmp_path / "queue.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(QueueCorrupt) as caught:
        MessageQueue(path)
    assert str(path) in caught.value.message and "--repair-queue" in (caught.value.hint or "")


def test_set_aside_keeps_the_pending_messages_it_can_read(tmp_path: Path) -> None:
    from orchestrator.config import Home
    from orchestrator.queue import check_queue, open_queue, set_aside

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


def test_runnable_skips_paused_groups(queue: MessageQueue) -> None:
    a, b = put(queue, group="a"), put(queue, group="b")
    queue.pause("a", "operator", "why")
    assert [m.id for m in queue.runnable()] == [b.id]
    assert queue.resume("a", "someone-else") == 0
    assert queue.resume("a", "operator") == 1
    assert {m.id for m in queue.runnable()} == {a.id, b.id}
