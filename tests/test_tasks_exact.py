"""The task store, exactly: the refusals word for word at the edges of their limits, the
row a task is stored as, the filters and orders of each listing, pausing, resuming and
finishing, the runs (once per due time) and the host's own notices. Times are given, the
clock is never read."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from orchestrator.groups.config import TaskSettings
from orchestrator.home import Home
from orchestrator.limits import TASK_TEXT_MAX_CHARS
from orchestrator.schedules import TaskRefused, local_time
from orchestrator.store.messages import MessageQueue, new_message, open_queue
from orchestrator.store.tasks import (
    ACTIVE,
    DONE,
    HOST_SENDER,
    LIMIT_NOTICE_SESSION,
    OPERATOR,
    PAUSED,
    Task,
    TaskStore,
)
from tests.test_tasks import add as add_task

NOW = 1_800_000_000.0  # a fixed moment; the store never reads the clock when given one
SETTINGS = TaskSettings()


@pytest.fixture
def queue(home: Path) -> Iterator[MessageQueue]:
    q = open_queue(Home(home))
    yield q
    q.close()


@pytest.fixture
def store(queue: MessageQueue) -> TaskStore:
    return TaskStore(queue)


def add(store: TaskStore, kind: str = "every", spec: str = "5m", **kw: Any) -> Task:
    """A task as test_tasks adds one (the same fields), in UTC and at NOW unless told."""
    kw.setdefault("tz", "UTC")
    return add_task(store, kind, spec, kw.pop("now", NOW), **kw)


def refusal(call: Any) -> tuple[str, str | None]:
    with pytest.raises(TaskRefused) as caught:
        call()
    return str(caught.value), caught.value.hint


def message(chat: str = "kitchen", group: str = "fam") -> Any:
    return new_message(
        group=group, session="s", chat=chat, thread=None, sender=HOST_SENDER,
        trust="member", text="run", channel="cli",
    )  # fmt: skip


# making a task


def test_a_task_is_stored_with_every_field_as_given(store: TaskStore) -> None:
    task = add(store, thread="t1", channel="telegram:main", text="  feed the cat \n")
    assert task == Task(
        id=task.id, group="fam", chat="kitchen", thread="t1", channel="telegram:main",
        text="feed the cat", kind="every", spec="5m", tz="UTC", author="bob",
        author_trust="member", state=ACTIVE, created=NOW, next_run=NOW + 300,
        last_run=None, last_outcome=None, runs=0,
    )  # fmt: skip
    assert store.get(task.id) == task
    assert task.id >= 1


def test_the_log_line_of_a_new_task(store: TaskStore, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="orchestrator.tasks"):
        task = add(store)
    assert [r.getMessage() for r in caplog.records if r.name == "orchestrator.tasks"] == [
        f"task {task.id} in fam by 'bob': every 5m"
    ]


def test_without_a_zone_the_groups_zone_is_taken(store: TaskStore) -> None:
    settings = replace(SETTINGS, timezone="Europe/Lisbon")
    assert add(store, tz=None, settings=settings).tz == "Europe/Lisbon"
    assert add(store, tz="", settings=settings).tz == "Europe/Lisbon"
    assert add(store, tz="Asia/Tokyo", settings=settings).tz == "Asia/Tokyo"


def test_who_may_not_schedule_is_told_who_may(store: TaskStore) -> None:
    assert refusal(lambda: add(store, author="eve", author_trust="guest")) == (
        "'eve' (guest) may not schedule tasks in group 'fam'; creators and members may",
        "tasks.allowed in its group.yaml says who may",
    )
    only = replace(SETTINGS, allowed=("creator",))
    assert refusal(lambda: add(store, settings=only)) == (
        "'bob' (member) may not schedule tasks in group 'fam'; creators may",
        "tasks.allowed in its group.yaml says who may",
    )
    nobody = replace(SETTINGS, allowed=())
    assert refusal(lambda: add(store, settings=nobody))[0] == (
        "'bob' (member) may not schedule tasks in group 'fam'; nobody may"
    )
    # the operator is not checked against the group's lists; the allowed are
    assert add(store, author="op", author_trust=OPERATOR, settings=nobody).author == "op"
    assert add(store, author="al", author_trust="creator", settings=only).author_trust == "creator"
    assert store.tasks() != []


def test_the_text_is_one_to_the_most_characters_once_stripped(store: TaskStore) -> None:
    expected = (f"a task's text must be 1 to {TASK_TEXT_MAX_CHARS} characters", None)
    assert TASK_TEXT_MAX_CHARS == 4000
    assert refusal(lambda: add(store, text="")) == expected
    assert refusal(lambda: add(store, text=" \n\t ")) == expected
    assert refusal(lambda: add(store, text="x" * 4001)) == expected
    assert add(store, text="x").text == "x"
    assert add(store, text="x" * 4000).text == "x" * 4000
    # counted after stripping
    assert add(store, text=" " + "y" * 4000 + " ").text == "y" * 4000
    assert len(store.tasks()) == 3


def test_a_group_has_at_most_its_most_tasks_and_finished_ones_do_not_count(
    store: TaskStore,
) -> None:
    two = replace(SETTINGS, max_tasks=2)
    first = add(store, settings=two)
    add(store, settings=two)
    add(store, group="other", settings=two)  # another group's do not count
    assert refusal(lambda: add(store, settings=two)) == (
        "group 'fam' has 2 tasks, as many as it may have",
        "remove one (task remove ID), or raise tasks.max in its group.yaml",
    )
    store.set_state(first.id, PAUSED, now=NOW)  # a paused one counts
    assert refusal(lambda: add(store, settings=two))[0] == (
        "group 'fam' has 2 tasks, as many as it may have"
    )
    store.cancel(first.id, "cancelled")  # a finished one does not
    assert add(store, settings=two).group == "fam"
    assert [t.group for t in store.tasks()] == ["fam", "other", "fam"]
    with pytest.raises(TaskRefused):
        add(store, settings=two)
    assert len(store.tasks(done=True)) == 4


def test_a_refused_schedule_stores_nothing(store: TaskStore) -> None:
    with pytest.raises(TaskRefused):
        add(store, spec="0s")
    with pytest.raises(TaskRefused):
        add(store, tz="Mars/Olympus")
    assert store.tasks(done=True) == []


# what a task says of itself


def test_the_schedule_and_next_run_as_people_read_them(store: TaskStore) -> None:
    every = add(store, "every", "90m")
    assert every.schedule == "every 90m"
    assert every.next_local == local_time(NOW + 5400, "UTC") == "2027-01-15 09:30 UTC"
    cron = add(store, "cron", "0 8 * * *", tz="Europe/Lisbon")
    assert cron.schedule == "cron '0 8 * * *' (Europe/Lisbon)"
    once = add(store, "at", "2027-01-16T09:00", tz="Asia/Tokyo")
    assert once.schedule == "once at 2027-01-16 09:00 JST"
    paused = store.set_state(every.id, PAUSED, now=NOW)
    assert paused.next_local == "-" and paused.schedule == "every 90m"
    # a one-off that ran has no next run: its schedule names when it ran
    store.record_run(once, once.next_run or 0, NOW, None, None, "ran")
    ran = store.require(once.id)
    assert ran.next_run is None and ran.state == DONE
    assert ran.schedule == "once at 2027-01-16 09:00 JST"
    assert ran.next_local == "-"


def test_a_task_as_a_dict(store: TaskStore) -> None:
    task = add(store, thread="t", text="hello")
    assert task.to_dict() == {
        "id": task.id,
        "group": "fam",
        "chat": "kitchen",
        "thread": "t",
        "channel": "cli",
        "text": "hello",
        "kind": "every",
        "spec": "5m",
        "timezone": "UTC",
        "schedule": "every 5m",
        "author": "bob",
        "author_trust": "member",
        "state": ACTIVE,
        "created": NOW,
        "next_run": NOW + 300,
        "last_run": None,
        "last_outcome": None,
        "runs": 0,
    }
    assert list(task.to_dict()) == [
        "id", "group", "chat", "thread", "channel", "text", "kind", "spec", "timezone",
        "schedule", "author", "author_trust", "state", "created", "next_run", "last_run",
        "last_outcome", "runs",
    ]  # fmt: skip


# listing


def test_listings_filter_by_group_chat_and_state_in_order_of_id(store: TaskStore) -> None:
    a = add(store, chat="one")
    b = add(store, group="other", chat="one")
    c = add(store, chat="two")
    d = add(store, chat="one")
    store.cancel(d.id, "cancelled")
    ids = lambda tasks: [t.id for t in tasks]  # noqa: E731
    assert ids(store.tasks()) == [a.id, b.id, c.id]
    assert ids(store.tasks(done=True)) == [a.id, b.id, c.id, d.id]
    assert ids(store.tasks("fam")) == [a.id, c.id]
    assert ids(store.tasks("fam", done=True)) == [a.id, c.id, d.id]
    assert ids(store.tasks(chat="one")) == [a.id, b.id]
    assert ids(store.tasks("fam", "one")) == [a.id]
    assert ids(store.tasks("fam", "one", done=True)) == [a.id, d.id]
    assert ids(store.tasks("nobody")) == []


def test_due_tasks_are_the_active_ones_due_by_now_earliest_first(store: TaskStore) -> None:
    late = add(store, spec="10m")  # due NOW + 600
    early = add(store, spec="5m")  # due NOW + 300
    paused = add(store, spec="1m")
    store.set_state(paused.id, PAUSED, now=NOW)
    assert store.due(NOW + 299) == []
    assert [t.id for t in store.due(NOW + 300)] == [early.id]
    assert [t.id for t in store.due(NOW + 600)] == [early.id, late.id]
    assert store.next_wakeup() == NOW + 300
    store.cancel(early.id, "cancelled")
    assert store.next_wakeup() == NOW + 600
    store.cancel(late.id, "cancelled")
    assert store.next_wakeup() is None


def test_an_unknown_task_is_refused_with_where_to_find_ids(store: TaskStore) -> None:
    assert store.get(7) is None
    expected = ("no task 7", "see the ids in: orchestrator task list")
    assert refusal(lambda: store.require(7)) == expected
    assert refusal(lambda: store.set_state(7, PAUSED, now=NOW)) == expected
    assert refusal(lambda: store.cancel(7, "x")) == expected
    assert refusal(lambda: store.remove(7)) == expected


# pausing, resuming, finishing


def test_resuming_a_task_whose_time_passed_moves_it_to_its_next_time(store: TaskStore) -> None:
    task = add(store, spec="5m")  # due NOW + 300
    assert store.set_state(task.id, PAUSED, now=NOW).state == PAUSED
    assert store.get(task.id).next_run == NOW + 300  # type: ignore[union-attr]
    # resumed before its time: kept
    assert store.set_state(task.id, ACTIVE, now=NOW + 299).next_run == NOW + 300
    store.set_state(task.id, PAUSED, now=NOW)
    # resumed at its time exactly: the next on its grid
    resumed = store.set_state(task.id, ACTIVE, now=NOW + 300)
    assert (resumed.state, resumed.next_run) == (ACTIVE, NOW + 600)
    store.set_state(task.id, PAUSED, now=NOW)
    assert store.set_state(task.id, ACTIVE, now=NOW + 1000).next_run == NOW + 1200


def test_an_active_task_set_active_again_keeps_its_time(store: TaskStore) -> None:
    task = add(store, spec="5m")
    assert store.set_state(task.id, ACTIVE, now=NOW + 10_000).next_run == NOW + 300


def test_a_resumed_one_off_whose_time_passed_is_due_now(store: TaskStore) -> None:
    once = add(store, "at", "2027-01-16T09:00")
    due = once.next_run
    assert due is not None
    store.set_state(once.id, PAUSED, now=NOW)
    assert store.set_state(once.id, ACTIVE, now=due - 1).next_run == due
    store.set_state(once.id, PAUSED, now=NOW)
    assert store.set_state(once.id, ACTIVE, now=due + 50).next_run == due + 50


def test_a_finished_task_set_active_has_no_time_and_finishing_keeps_its_time(
    store: TaskStore,
) -> None:
    task = add(store, spec="5m")
    done = store.set_state(task.id, DONE, now=NOW + 10_000)
    assert (done.state, done.next_run) == (DONE, NOW + 300)
    cancelled = store.cancel(add(store).id, "cancelled by alice")
    assert (cancelled.state, cancelled.next_run, cancelled.last_outcome) == (
        DONE, None, "cancelled by alice",
    )  # fmt: skip
    again = store.set_state(cancelled.id, ACTIVE, now=NOW)
    assert (again.state, again.next_run) == (ACTIVE, None)


def test_pausing_with_a_reason(store: TaskStore) -> None:
    task = add(store)
    other = add(store)
    store.pause_task(task.id, "too many runs this hour")
    paused = store.require(task.id)
    assert (paused.state, paused.last_outcome, paused.next_run) == (
        PAUSED, "too many runs this hour", NOW + 300,
    )  # fmt: skip
    assert store.require(other.id).state == ACTIVE


# removing


def test_removing_a_task_takes_its_runs_and_no_others(store: TaskStore) -> None:
    one, two = add(store), add(store)
    store.record_run(one, NOW + 300, NOW + 301, NOW + 600, message(), "queued")
    store.record_run(two, NOW + 300, NOW + 301, NOW + 600, message(), "queued")
    store.remove(one.id)
    assert store.get(one.id) is None and store.runs(one.id) == []
    assert len(store.runs(two.id)) == 1


def test_removing_a_group_takes_its_tasks_and_their_runs(store: TaskStore) -> None:
    one, two = add(store), add(store)
    kept = add(store, group="other")
    for task in (one, two, kept):
        store.record_run(task, NOW + 300, NOW + 301, NOW + 600, message(), "queued")
    assert store.remove_group("fam") == 2
    assert [t.id for t in store.tasks(done=True)] == [kept.id]
    assert store.runs(one.id) == [] and store.runs(two.id) == []
    assert len(store.runs(kept.id)) == 1
    assert store.remove_group("fam") == 0


# runs


def test_a_run_is_recorded_once_per_due_time(store: TaskStore, queue: MessageQueue) -> None:
    task = add(store)
    first = message()
    assert store.record_run(task, NOW + 300, NOW + 302, NOW + 600, first, "queued") is True
    after = store.require(task.id)
    assert (after.state, after.next_run, after.last_run, after.last_outcome, after.runs) == (
        ACTIVE, NOW + 600, NOW + 300, "queued", 1,
    )  # fmt: skip
    assert queue.get(first.id) is not None
    # the same due time again: no run, no message, only the next due time moves
    second = message()
    assert store.record_run(after, NOW + 300, NOW + 303, NOW + 900, second, "again") is False
    again = store.require(task.id)
    assert (again.next_run, again.last_outcome, again.runs) == (NOW + 900, "again", 1)
    assert queue.get(second.id) is None
    assert store.runs(task.id) == [(NOW + 300, first.id, "queued")]


def test_a_skipped_run_counts_no_run(store: TaskStore) -> None:
    task = add(store)
    assert store.record_run(task, NOW + 300, NOW + 4000, NOW + 4200, None, "skipped") is True
    after = store.require(task.id)
    assert (after.runs, after.last_outcome, after.last_run) == (0, "skipped", NOW + 300)
    assert store.runs(task.id) == [(NOW + 300, None, "skipped")]


def test_a_run_with_no_next_time_finishes_the_task(store: TaskStore) -> None:
    task = add(store)
    store.record_run(task, NOW + 300, NOW + 301, None, message(), "queued")
    after = store.require(task.id)
    assert (after.state, after.next_run, after.runs) == (DONE, None, 1)


def test_a_run_of_a_task_no_longer_in_the_state_it_had_changes_no_task(
    store: TaskStore,
) -> None:
    task = add(store)
    store.set_state(task.id, PAUSED, now=NOW)  # paused while its run was prepared
    assert store.record_run(task, NOW + 300, NOW + 301, NOW + 600, message(), "queued")
    after = store.require(task.id)
    assert (after.state, after.next_run, after.runs, after.last_outcome) == (
        PAUSED, NOW + 300, 0, None,
    )  # fmt: skip


def test_a_run_that_keeps_the_state_of_a_paused_task(store: TaskStore) -> None:
    task = store.set_state(add(store).id, PAUSED, now=NOW)
    store.record_run(task, NOW + 300, NOW + 301, NOW + 600, None, "held", keep_state=True)
    after = store.require(task.id)
    assert (after.state, after.next_run, after.last_outcome) == (PAUSED, NOW + 600, "held")
    # without keep_state a paused task is not the active one the update asks for
    store.record_run(after, NOW + 600, NOW + 601, NOW + 900, None, "later")
    assert store.require(task.id).next_run == NOW + 600
    # with no next time it is done, kept state or not
    store.record_run(after, NOW + 900, NOW + 901, None, None, "last", keep_state=True)
    assert store.require(task.id).state == DONE


def test_an_active_task_with_keep_state_stays_active(store: TaskStore) -> None:
    task = add(store)
    store.record_run(task, NOW + 300, NOW + 301, NOW + 600, None, "x", keep_state=True)
    assert store.require(task.id).state == ACTIVE


def test_runs_are_listed_oldest_due_first(store: TaskStore) -> None:
    task = add(store)
    store.record_run(task, NOW + 600, NOW + 1, NOW + 900, None, "b")
    store.record_run(task, NOW + 300, NOW + 2, NOW + 900, None, "a")
    assert store.runs(task.id) == [(NOW + 300, None, "a"), (NOW + 600, None, "b")]


def test_the_runs_in_a_chat_since_a_time_oldest_first(store: TaskStore) -> None:
    one = add(store)
    two = add(store, channel="telegram:main")
    other_chat = add(store, chat="hall")
    other_group = add(store, group="other")
    ran = {}
    for i, task in enumerate((one, two, one, two, other_chat, other_group)):
        m = message()
        store.record_run(task, NOW + 100 * i, NOW + 10 * i, NOW + 5000, m, "queued")
        ran[i] = (task.id, m.id)
    store.record_run(one, NOW + 999, NOW + 60, NOW + 5000, None, "skipped")  # no message
    assert store.runs_in_chat("fam", "kitchen", NOW) == [ran[0], ran[1], ran[2], ran[3]]
    assert store.runs_in_chat("fam", "kitchen", NOW + 10) == [ran[1], ran[2], ran[3]]
    assert store.runs_in_chat("fam", "kitchen", NOW + 11) == [ran[2], ran[3]]
    # the newest within the limit, oldest first
    assert store.runs_in_chat("fam", "kitchen", NOW, limit=2) == [ran[2], ran[3]]
    assert store.runs_in_chat("fam", "kitchen", NOW, channel="cli") == [ran[0], ran[2]]
    assert store.runs_in_chat("fam", "kitchen", NOW, channel="telegram:main") == [
        ran[1], ran[3],
    ]  # fmt: skip
    assert store.runs_in_chat("fam", "hall", NOW) == [ran[4]]
    assert store.runs_in_chat("other", "kitchen", NOW) == [ran[5]]
    assert store.runs_in_chat("fam", "kitchen", NOW + 31) == []


def test_the_default_limit_of_runs_in_a_chat_is_fifty(store: TaskStore) -> None:
    task = add(store)
    ids = []
    for i in range(51):
        m = message()
        store.record_run(task, NOW + i, NOW + i, NOW + 5000, m, "queued")
        ids.append(m.id)
    shown = store.runs_in_chat("fam", "kitchen", NOW)
    assert [mid for _, mid in shown] == ids[1:]


def test_runs_since_a_time_count_the_queued_runs_of_a_group(store: TaskStore) -> None:
    one, two = add(store), add(store, chat="hall")
    other = add(store, group="other")
    store.record_run(one, NOW + 1, NOW + 10, NOW + 5000, message(), "queued")
    store.record_run(two, NOW + 2, NOW + 20, NOW + 5000, message(), "queued")
    store.record_run(one, NOW + 3, NOW + 30, NOW + 5000, None, "skipped")
    store.record_run(other, NOW + 4, NOW + 40, NOW + 5000, message(), "queued")
    assert store.runs_since("fam", NOW) == 2
    assert store.runs_since("fam", NOW + 20) == 1
    assert store.runs_since("fam", NOW + 21) == 0
    assert store.runs_since("other", NOW + 40) == 1
    assert store.runs_since("nobody", 0) == 0


def test_the_task_a_message_ran_for(store: TaskStore) -> None:
    one, two = add(store), add(store)
    m1, m2 = message(), message()
    store.record_run(one, NOW + 1, NOW + 1, NOW + 5000, m1, "queued")
    store.record_run(two, NOW + 1, NOW + 1, NOW + 5000, m2, "queued")
    assert store.run_of(m1.id) == one.id
    assert store.run_of(m2.id) == two.id
    assert store.run_of("someone's message") is None


# the host's notices


def test_a_notice_is_a_message_the_host_answered_in_a_session_of_its_own(
    store: TaskStore, queue: MessageQueue
) -> None:
    task = add(store, thread="t9", channel="telegram:main")
    assert store.told_since("fam", 0) is False
    store.tell(task, "your tasks are paused")
    [row] = queue.read("SELECT id, created FROM messages WHERE session=?", (LIMIT_NOTICE_SESSION,))
    notice = queue.get(str(row[0]))
    assert notice is not None
    assert (
        notice.group, notice.session, notice.chat, notice.thread, notice.sender,
        notice.trust, notice.text, notice.channel, notice.state, notice.replies,
    ) == (
        "fam", "orchestrator-notices", "kitchen", "t9", "orchestrator", "orchestrator",
        f"[task {task.id} paused]", "telegram:main", "done", ("your tasks are paused",),
    )  # fmt: skip
    created = float(row[1])
    assert store.told_since("fam", created) is True
    assert store.told_since("fam", created + 1) is False
    assert store.told_since("other", 0) is False


def test_only_notices_are_taken_for_a_notice(store: TaskStore, queue: MessageQueue) -> None:
    queue.enqueue(
        group="fam", session="s", chat="kitchen", thread=None, sender="bob", trust="member",
        text="hi", channel="cli",
    )  # fmt: skip
    assert store.told_since("fam", 0) is False


def test_a_resumed_cron_task_moves_to_its_next_time_in_its_own_zone(store: TaskStore) -> None:
    task = add(store, "cron", "0 8 * * *", tz="Asia/Tokyo")  # 08:00 in Tokyo is 23:00 UTC
    assert task.next_run == NOW + 15 * 3600
    store.set_state(task.id, PAUSED, now=NOW)
    resumed = store.set_state(task.id, ACTIVE, now=NOW + 15 * 3600)
    assert resumed.next_run == NOW + 15 * 3600 + 86400


def test_a_run_leaves_the_task_active_whatever_state_the_caller_last_saw(
    store: TaskStore,
) -> None:
    paused = store.set_state(add(store).id, PAUSED, now=NOW)
    store.set_state(paused.id, ACTIVE, now=NOW)  # resumed since
    store.record_run(paused, NOW + 300, NOW + 301, NOW + 600, None, "queued")
    after = store.require(paused.id)
    assert (after.state, after.next_run) == (ACTIVE, NOW + 600)
