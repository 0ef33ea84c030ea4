"""Scheduled tasks: schedules (cron in a zone across DST, one-offs, intervals), runs with
an injected clock (no sleeping), the grace period, no double run, trust at each run,
the relay ops, the offline provider's phrases, the CLI."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from orchestrator.agent.providers.base import CompletionRequest
from orchestrator.agent.providers.offline import OfflineProvider
from orchestrator.daemon.core import Daemon
from orchestrator.daemon.scheduler import Scheduler, store_lookup
from orchestrator.errors import InvalidConfig
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig, TaskSettings, load_group_config
from orchestrator.home import Home
from orchestrator.protocol import NOT_PERSISTED
from orchestrator.relay.errors import RelayViolation
from orchestrator.relay.ops import task_cancel, task_list, task_schedule
from orchestrator.relay.ops.learned_write import decide
from orchestrator.relay.turn import TurnRelay
from orchestrator.schedules import TaskRefused, check_schedule, cron_next, parse_at
from orchestrator.store.messages import DONE as MESSAGE_DONE
from orchestrator.store.messages import QUEUED, MessageQueue, open_queue
from orchestrator.store.tasks import ACTIVE, DONE, OPERATOR, PAUSED, Task, TaskStore
from tests.served import say

LISBON = ZoneInfo("Europe/Lisbon")
SETTINGS = TaskSettings()


def at(*args: int, zone: ZoneInfo = LISBON) -> float:
    return datetime(*args, tzinfo=zone).timestamp()  # type: ignore[misc]


def utc(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, UTC).strftime("%Y-%m-%d %H:%M")


@pytest.fixture
def queue(home: Path) -> Iterator[MessageQueue]:
    q = open_queue(Home(home))
    yield q
    q.close()


class Lookup:
    """The scheduler's view of the groups, changeable by a test."""

    def __init__(self) -> None:
        self.settings = SETTINGS
        self.trust: dict[str, str | None] = {"alice": "creator", "bob": "member", "eve": "guest"}
        self.gone = False

    def __call__(
        self, folder: str, author: str, channel: str, chat: str, thread: str | None
    ) -> tuple[TaskSettings, str | None, str] | None:
        if self.gone:
            return None
        return self.settings, self.trust.get(author), f"{channel.replace(':', '.')}.chat-{chat}"


@pytest.fixture
def tasks(queue: MessageQueue) -> tuple[TaskStore, Scheduler, Lookup]:
    store = TaskStore(queue)
    lookup = Lookup()
    return (
        store,
        Scheduler(store, lookup, clock=lambda: pytest.fail("the clock is injected")),
        lookup,
    )


def add(store: TaskStore, kind: str, spec: str, now: float, **kw: Any) -> Task:
    fields: dict[str, Any] = {
        "group": "fam",
        "chat": "kitchen",
        "thread": None,
        "channel": "cli",
        "text": "water the plants",
        "tz": "Europe/Lisbon",
        "author": "bob",
        "author_trust": "member",
        "settings": SETTINGS,
    }
    fields.update(kw)
    return store.add(kind=kind, spec=spec, now=now, **fields)


def run_between(scheduler: Scheduler, start: float, end: float, step: float) -> list[float]:
    """Tick from ``start`` to ``end``; the due times of the runs queued."""
    due: list[float] = []
    now = start
    while now <= end:
        due += [r.due for r in scheduler.tick(now) if r.message_id is not None]
        now += step
    return due


# schedules


def test_cron_in_a_zone_keeps_local_time_across_the_dst_change(tasks) -> None:  # type: ignore[no-untyped-def]
    store, scheduler, _ = tasks
    task = add(store, "cron", "0 8 * * *", at(2026, 3, 27, 12))
    assert (
        task.next_run == at(2026, 3, 28, 8) and task.schedule == "cron '0 8 * * *' (Europe/Lisbon)"
    )
    runs = run_between(scheduler, at(2026, 3, 27, 12), at(2026, 3, 31, 12), 600)
    # 08:00 in Lisbon is 08:00 UTC before the change (WET) and 07:00 UTC after it (WEST)
    assert [utc(d) for d in runs] == [
        "2026-03-28 08:00",
        "2026-03-29 07:00",
        "2026-03-30 07:00",
        "2026-03-31 07:00",
    ]
    assert store.require(task.id).runs == 4


def test_a_time_in_the_dst_gap_runs_after_it_and_a_repeated_hour_runs_twice(tasks) -> None:  # type: ignore[no-untyped-def]
    store, scheduler, _ = tasks
    spring = add(store, "cron", "30 1 * * *", at(2026, 3, 28, 12))
    runs = run_between(scheduler, at(2026, 3, 28, 12), at(2026, 3, 30, 12), 600)
    # 01:30 does not exist on 29 March in Lisbon: the run is at 02:00 WEST (01:00 UTC)
    assert [utc(d) for d in runs] == ["2026-03-29 01:00", "2026-03-30 00:30"]
    store.remove(spring.id)
    add(store, "cron", "30 1 * * *", at(2026, 10, 24, 12))
    runs = run_between(scheduler, at(2026, 10, 24, 12), at(2026, 10, 26, 12), 600)
    # 01:30 happens twice on 25 October (WEST, then WET): it runs at both
    assert [utc(d) for d in runs] == ["2026-10-25 00:30", "2026-10-25 01:30", "2026-10-26 01:30"]


def test_a_one_off_fires_once_then_is_done(tasks, queue: MessageQueue) -> None:  # type: ignore[no-untyped-def]
    store, scheduler, _ = tasks
    now = at(2026, 5, 1, 9)
    task = add(store, "at", "20m", now)
    assert task.next_run == now + 1200
    assert scheduler.tick(now + 1199) == []
    [ran] = scheduler.tick(now + 1200.5)
    assert ran.outcome == "queued" and ran.due == now + 1200
    assert scheduler.tick(now + 5000) == []
    done = store.require(task.id)
    assert (done.state, done.next_run, done.runs, done.last_run) == (DONE, None, 1, now + 1200)
    assert done.next_local == "-"
    message = queue.get(str(ran.message_id))
    assert message is not None
    assert (message.group, message.chat, message.session, message.sender, message.trust) == (
        "fam",
        "kitchen",
        "cli.chat-kitchen",
        "bob",
        "member",
    )
    assert (message.text, message.channel, message.state) == (
        f"[scheduled task {task.id}] water the plants",
        "cli",
        QUEUED,
    )
    assert store.runs(task.id) == [(now + 1200, ran.message_id, "queued")]


def test_an_iso_time_without_an_offset_is_in_the_tasks_zone() -> None:
    now = at(2026, 5, 1, 9)
    assert parse_at("2026-05-01T18:00", "Europe/Lisbon", now) == at(2026, 5, 1, 18)
    assert parse_at("2026-05-01T18:00+00:00", "Europe/Lisbon", now) == at(
        2026, 5, 1, 18, zone=ZoneInfo("UTC")
    )
    for unit, seconds in (("90s", 90), ("2h", 7200), ("1d", 86400), ("5 m", 300)):
        assert parse_at(unit, "UTC", now) == now + seconds


def test_an_interval_runs_every_interval(tasks) -> None:  # type: ignore[no-untyped-def]
    store, scheduler, _ = tasks
    now = at(2026, 5, 1, 9)
    task = add(store, "every", "15m", now)
    runs = run_between(scheduler, now, now + 3600, 60)
    assert [r - now for r in runs] == [900, 1800, 2700, 3600]
    assert store.require(task.id).next_run == now + 4500
    assert task.schedule == "every 15m"


@pytest.mark.parametrize(
    ("kind", "spec", "message"),
    [
        ("every", "30s", "--every '30s': more often than this group allows (at least 60s apart)"),
        ("every", "soon", "--every 'soon': not a duration"),
        ("cron", "* * * * *", "--cron '* * * * *': runs 60s apart, more often than this group "
         "allows (at least 120s)"),
        ("cron", "0 25 * * *", "--cron '0 25 * * *': not a cron expression"),
        ("at", "yesterday", "--at 'yesterday': not a time"),
        ("at", "2020-01-01T00:00", "--at '2020-01-01T00:00': that time has passed"),
        ("at", "0m", "--at '0m': a delay must be more than 0"),
        ("weekly", "x", "unknown schedule kind 'weekly'; known: at, every, cron"),
    ],
)  # fmt: skip
def test_bad_schedules_are_refused_with_what_is_wrong(kind: str, spec: str, message: str) -> None:
    minimum = 120 if kind == "cron" else 60
    with pytest.raises(TaskRefused) as refused:
        check_schedule(kind, spec, "UTC", at(2026, 5, 1, 9), minimum)
    assert refused.value.message == message


def test_an_unknown_zone_is_refused(tasks) -> None:  # type: ignore[no-untyped-def]
    store, _, _ = tasks
    with pytest.raises(TaskRefused) as refused:
        add(store, "every", "1h", at(2026, 5, 1, 9), tz="Mars/Olympus")
    assert refused.value.message == "unknown time zone 'Mars/Olympus'"
    assert store.tasks() == []


# the daemon down across a due time


def test_a_task_due_while_down_runs_once_within_the_grace(tasks, caplog) -> None:  # type: ignore[no-untyped-def]
    store, scheduler, _ = tasks
    now = at(2026, 5, 1, 9)
    task = add(store, "every", "10m", now)
    # down from 09:05 to 09:45: due times 09:10 ... 09:40 passed; the first is 35 min late
    [ran] = scheduler.tick(now + 45 * 60)
    assert (ran.due, ran.outcome) == (now + 600, "queued 2100s late")
    assert store.require(task.id).next_run == now + 50 * 60  # the missed ones are not replayed
    assert scheduler.tick(now + 45 * 60 + 1) == []


def test_a_task_due_while_down_is_skipped_beyond_the_grace(tasks, caplog) -> None:  # type: ignore[no-untyped-def]
    store, scheduler, _ = tasks
    now = at(2026, 5, 1, 9)
    task = add(store, "cron", "0 10 * * *", now)
    with caplog.at_level(logging.WARNING, logger="orchestrator.tasks"):
        [skipped] = scheduler.tick(at(2026, 5, 1, 11, 0) + 1)
    assert skipped.message_id is None
    assert skipped.outcome == "skipped: due 3601s ago, past the 3600s grace"
    assert f"task {task.id} of fam: skipped: due 3601s ago, past the 3600s grace" in caplog.text
    after = store.require(task.id)
    assert (after.state, after.next_run, after.runs) == (ACTIVE, at(2026, 5, 2, 10), 0)
    assert after.last_outcome == skipped.outcome
    assert store.runs(task.id) == [(at(2026, 5, 1, 10), None, skipped.outcome)]


def test_the_grace_is_a_group_setting(tasks) -> None:  # type: ignore[no-untyped-def]
    store, scheduler, lookup = tasks
    lookup.settings = replace(SETTINGS, grace_seconds=0)
    now = at(2026, 5, 1, 9)
    add(store, "at", "10m", now)
    [skipped] = scheduler.tick(now + 602)
    assert skipped.outcome == "skipped: due 2s ago, past the 0s grace"


def test_no_double_run_after_a_kill_right_after_a_task_was_queued(home: Path) -> None:
    """The run, its message and the next due time are one transaction: a scheduler that
    starts again (a new process after a kill) finds the due time taken; and two that
    saw the same due task at once (an old daemon and a new one) queue it once."""
    now = at(2026, 5, 1, 9)
    first = open_queue(Home(home))
    store = TaskStore(first)
    task = add(store, "every", "10m", now)
    stale = store.due(now + 600)  # what a second scheduler read before the first committed
    [ran] = Scheduler(store, Lookup()).tick(now + 600)
    first.close()  # the process is gone; nothing else was written

    again = open_queue(Home(home))
    try:
        store = TaskStore(again)
        scheduler = Scheduler(store, Lookup())
        assert scheduler.tick(now + 600) == []
        [late] = [scheduler._run(t, now + 600) for t in stale]
        assert (late.message_id, late.outcome) == (None, "already run for this due time")
        assert [m for m in again.runnable(now + 700)] == [again.get(str(ran.message_id))]
        assert store.require(task.id).runs == 1
        assert store.runs(task.id) == [(now + 600, ran.message_id, "queued")]
    finally:
        again.close()


# who may schedule, and as whom a task runs


def test_a_guest_cannot_schedule(tasks) -> None:  # type: ignore[no-untyped-def]
    store, _, _ = tasks
    with pytest.raises(TaskRefused) as refused:
        add(store, "at", "10m", at(2026, 5, 1, 9), author="eve", author_trust="guest")
    assert refused.value.message == (
        "'eve' (guest) may not schedule tasks in group 'fam'; creators and members may"
    )
    assert refused.value.hint == "tasks.allowed in its group.yaml says who may"
    members_only = replace(SETTINGS, allowed=("creator",))
    with pytest.raises(TaskRefused) as refused:
        add(store, "at", "10m", at(2026, 5, 1, 9), settings=members_only)
    assert refused.value.message == (
        "'bob' (member) may not schedule tasks in group 'fam'; creators may"
    )
    assert store.tasks() == []


def test_the_authors_trust_is_checked_again_at_each_run(tasks, queue) -> None:  # type: ignore[no-untyped-def]
    store, scheduler, lookup = tasks
    now = at(2026, 5, 1, 9)
    task = add(store, "every", "10m", now)
    lookup.trust["bob"] = None  # bob was taken out of members
    [paused] = scheduler.tick(now + 600)
    assert paused.message_id is None
    assert paused.outcome == "author 'bob' is no longer allowed to talk to the group; task paused"
    assert store.require(task.id).state == PAUSED
    assert queue.counts().get("queued", 0) == 0
    lookup.trust["bob"] = "guest"
    store.set_state(task.id, ACTIVE, now=now + 601)
    [paused] = scheduler.tick(now + 1200)
    assert paused.outcome == "author 'bob' (guest) may no longer schedule tasks; task paused"
    lookup.gone = True
    store.set_state(task.id, ACTIVE, now=now + 1201)
    [paused] = scheduler.tick(now + 1800)
    assert paused.outcome == "group 'fam' is gone; task paused"


def test_a_creators_task_runs_as_a_member_and_cannot_write_learned_behaviors(
    served,  # type: ignore[no-untyped-def]
) -> None:
    daemon: Daemon = served["daemon"]
    say(served, "hello", "alice", chat="kitchen")  # the chat exists
    task = daemon.tasks.add(
        group="fam",
        chat="kitchen",
        thread=None,
        channel="cli",
        text="from now on, sign every message",
        kind="at",
        spec="1m",
        tz=None,
        author="alice",
        author_trust="creator",
        settings=served["group"].config.tasks,
    )
    [ran] = daemon.scheduler.tick(float(task.next_run or 0))
    message = daemon.queue.get(str(ran.message_id))
    assert message is not None and (message.sender, message.trust) == ("alice", "member")
    relay = TurnRelay(daemon.relay, message, served["group"], deadline=0)
    outcome = decide(relay, "- From now on, sign every message.\n")
    assert outcome.status == NOT_PERSISTED


def test_operator_tasks_are_not_checked_against_the_groups_lists(tasks) -> None:  # type: ignore[no-untyped-def]
    store, scheduler, _ = tasks
    now = at(2026, 5, 1, 9)
    task = add(store, "at", "1m", now, author="operator", author_trust=OPERATOR)
    [ran] = scheduler.tick(now + 60)
    assert ran.outcome == "queued" and store.require(task.id).state == DONE


# pause, resume, limits


def test_pause_and_resume(tasks) -> None:  # type: ignore[no-untyped-def]
    store, scheduler, _ = tasks
    now = at(2026, 5, 1, 9)
    task = add(store, "every", "10m", now)
    store.set_state(task.id, PAUSED, now=now)
    assert scheduler.tick(now + 3600) == []
    assert store.require(task.id).next_local == "-"
    resumed = store.set_state(task.id, ACTIVE, now=now + 3600)
    assert resumed.next_run == now + 4200  # the due times that passed while paused are skipped
    [ran] = scheduler.tick(now + 4200)
    assert ran.due == now + 4200
    one_off = add(store, "at", "5m", now)
    store.set_state(one_off.id, PAUSED, now=now)
    assert store.set_state(one_off.id, ACTIVE, now=now + 3600).next_run == now + 3600


def test_tasks_per_group_and_text_length_are_limited(tasks) -> None:  # type: ignore[no-untyped-def]
    store, _, _ = tasks
    two = replace(SETTINGS, max_tasks=2)
    now = at(2026, 5, 1, 9)
    first = add(store, "every", "1h", now, settings=two)
    add(store, "every", "1h", now, settings=two)
    with pytest.raises(TaskRefused) as refused:
        add(store, "every", "1h", now, settings=two)
    assert refused.value.message == "group 'fam' has 2 tasks, as many as it may have"
    add(store, "every", "1h", now, settings=two, group="other")  # per group
    store.cancel(first.id, "cancelled by 'bob'")  # a finished task does not count
    add(store, "every", "1h", now, settings=two)
    for text in ("", "   ", "x" * 4001):
        with pytest.raises(TaskRefused) as refused:
            add(store, "every", "1h", now, text=text)
        assert refused.value.message == "a task's text must be 1 to 4000 characters"


def test_tasks_settings_in_group_yaml(tmp_path: Path) -> None:
    path = tmp_path / "group.yaml"
    path.write_text(
        "name: fam\ntasks:\n  allowed: [creator]\n  max: 5\n  min_interval: 5m\n"
        "  grace: 2h\n  timezone: Europe/Lisbon\n"
    )
    settings = load_group_config(path).tasks
    assert settings == TaskSettings(
        allowed=("creator",),
        max_tasks=5,
        min_interval_seconds=300,
        grace_seconds=7200,
        timezone="Europe/Lisbon",
    )
    assert settings.max_runs_per_hour == 120  # the floor: every 5m needs 12 an hour
    assert TaskSettings(min_interval_seconds=10).max_runs_per_hour == 720
    path.write_text("name: fam\ntasks:\n  max_runs_per_hour: 7\n")
    assert load_group_config(path).tasks.max_runs_per_hour == 7
    for body, problem in (
        ("allowed: [guest]", "tasks.allowed[0]: got 'guest'; expected creator or member "
         "(guests never)"),
        ("timezone: Mars/Olympus", "tasks.timezone: got 'Mars/Olympus'; expected an IANA time "
         "zone such as Europe/Lisbon"),
        ("min_interval: 0s", "tasks.min_interval: got '0s'; expected a duration of at least 1s"),
        ("grace: soon", "tasks.grace: got 'soon'; expected a duration of at least 0s"),
        ("max: 10001", "tasks.max: got 10001; expected 0 to 10000"),
        ("max_runs_per_hour: 0", "tasks.max_runs_per_hour: got 0; expected 1 to 100000"),
        ("when: now", "tasks.when: unknown key; valid keys here: allowed, grace, max, "
         "max_runs_per_hour, min_interval, timezone"),
    ):  # fmt: skip
        path.write_text(f"name: fam\ntasks:\n  {body}\n")
        with pytest.raises(InvalidConfig) as bad:
            load_group_config(path)
        assert bad.value.message == f"{path}:3: {problem}"


# the relay ops: the host's record decides


def test_schedule_from_a_turn_takes_chat_and_author_from_the_hosts_record(served) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = served["daemon"]
    [reply] = say(served, "remind me in 10 minutes to stretch", "bob", chat="kitchen")
    [task] = daemon.tasks.tasks("fam")
    assert (
        reply == f"Scheduled task {task.id}: once at {task.next_local}; next run {task.next_local}"
    )
    assert (task.chat, task.thread, task.channel, task.author, task.author_trust) == (
        "kitchen",
        None,
        "cli",
        "bob",
        "member",
    )
    assert task.text == "Reminder: stretch" and task.kind == "at"


def _relay(served: dict[str, Any], sender: str, trust: str, chat: str = "kitchen") -> TurnRelay:
    daemon: Daemon = served["daemon"]
    message = daemon.queue.record_done(
        group="fam",
        session=f"cli.chat-{chat}",
        chat=chat,
        thread=None,
        sender=sender,
        trust=trust,
        text="x",
        channel="cli",
        reply="y",
    )
    return TurnRelay(daemon.relay, message, served["group"], deadline=0)


def test_a_frame_cannot_aim_a_task_at_another_chat_or_author(served) -> None:  # type: ignore[no-untyped-def]
    relay = _relay(served, "bob", "member")
    answer = task_schedule.TaskSchedule().handle(
        relay,
        {
            "text": "x",
            "kind": "every",
            "spec": "1h",
            "chat": "elsewhere",
            "sender": "alice",
            "trust": "creator",
            "group": "other",
        },
    )
    assert answer["ok"], answer
    task = served["daemon"].tasks.require(answer["id"])
    assert (task.group, task.chat, task.author, task.author_trust) == (
        "fam",
        "kitchen",
        "bob",
        "member",
    )
    with pytest.raises(RelayViolation):
        task_schedule.TaskSchedule().handle(relay, {"text": "x", "kind": "sometimes", "spec": "1h"})
    refused = task_schedule.TaskSchedule().handle(
        _relay(served, "eve", "guest"), {"text": "x", "kind": "every", "spec": "1h"}
    )
    assert refused == {
        "ok": False,
        "error": "'eve' (guest) may not schedule tasks in group 'fam'; creators and members "
        "may (tasks.allowed in its group.yaml says who may)",
    }


def test_list_and_cancel_stay_inside_the_group_and_chat(served) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = served["daemon"]
    now = daemon.relay.clock()
    mine = add(daemon.tasks, "every", "1h", now, tz=None)
    other_chat = add(daemon.tasks, "every", "1h", now, chat="hall", tz=None)
    other_group = add(daemon.tasks, "every", "1h", now, group="work", tz=None)
    listed = task_list.TaskList().handle(_relay(served, "bob", "member"), {})["tasks"]
    assert [t["id"] for t in listed] == [mine.id]
    assert listed[0]["text"] == "water the plants" and listed[0]["state"] == ACTIVE

    guest = _relay(served, "eve", "guest")
    assert task_cancel.TaskCancel().handle(guest, {"id": mine.id}) == {
        "ok": False,
        "error": f"task {mine.id} is 'bob''s; only they or a creator may cancel it",
    }
    assert task_cancel.TaskCancel().handle(guest, {"id": other_group.id}) == {
        "ok": False,
        "error": f"no task {other_group.id} in this group",
    }
    assert task_cancel.TaskCancel().handle(
        _relay(served, "alice", "creator"), {"id": other_chat.id}
    )["ok"]
    assert task_cancel.TaskCancel().handle(_relay(served, "bob", "member"), {"id": mine.id}) == {
        "ok": True,
        "result": f"cancelled task {mine.id} (water the plants)",
    }
    assert daemon.tasks.require(mine.id).state == DONE
    assert daemon.tasks.require(mine.id).last_outcome == "cancelled by 'bob'"
    assert daemon.tasks.require(other_group.id).state == ACTIVE
    with pytest.raises(RelayViolation):
        task_cancel.TaskCancel().handle(guest, {"id": "1"})


def test_the_whole_chat_path_with_the_offline_provider(served) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = served["daemon"]
    # the daily task's hour is twelve hours away, so it is not due within the reminder's
    # ten minutes whenever the test runs
    hour = (time.gmtime().tm_hour + 12) % 24
    [set_reply] = say(served, "Remind me in 10 minutes to take the bread out.", "bob", "kitchen")
    [daily_reply] = say(served, f"every day at {hour:02d}:00 post the plan", "bob", "kitchen")
    first, daily = daemon.tasks.tasks("fam")
    assert set_reply.startswith(f"Scheduled task {first.id}: once at ")
    cron = f"0 {hour} * * *"
    assert daily_reply.startswith(f"Scheduled task {daily.id}: cron '{cron}' (UTC); next run ")
    [listed] = say(served, "list my reminders", "bob", "kitchen")
    assert listed == (
        f"{first.id}: Reminder: take the bread out (once at {first.next_local}; next "
        f"{first.next_local}; active)\n{daily.id}: post the plan (cron '{cron}' (UTC); "
        f"next {daily.next_local}; active)"
    )
    assert say(served, "list my reminders", "bob", "hall") == ("(no tasks scheduled in this chat)",)

    # ten minutes later: the reminder is due, and its reply lands in the chat it came from
    assert daemon.run_due_tasks(float(first.next_run or 0)) == 1
    [(task_id, message_id)] = daemon.tasks.runs_in_chat("fam", "kitchen", 0)
    done = daemon.wait(message_id, 60)
    assert task_id == first.id and done is not None and done.state == MESSAGE_DONE
    assert (done.chat, done.replies) == ("kitchen", ("Reminder: take the bread out",))

    [cancelled] = say(served, f"cancel reminder {daily.id}", "bob", "kitchen")
    assert cancelled == f"Cancelled task {daily.id} (post the plan)"
    [again] = say(served, f"cancel reminder {daily.id}", "bob", "kitchen")
    assert again == f"I could not do that. ERROR: task.cancel: no task {daily.id} in this group"
    [guest] = say(served, "remind me in 5 minutes to leave", "eve", "kitchen")
    assert guest == (
        "I could not do that. ERROR: task.schedule: 'eve' (guest) may not schedule tasks in "
        "group 'fam'; creators and members may (tasks.allowed in its group.yaml says who may)"
    )


# the offline provider's phrases


def _ask(text: str, tail: list[dict[str, Any]] | None = None) -> Any:
    request = CompletionRequest(
        system="", messages=[{"role": "user", "content": text}, *(tail or [])], tools=()
    )
    return OfflineProvider("offline-rules").complete(request)


@pytest.mark.parametrize(
    ("text", "tool", "args"),
    [
        ("remind me in 10 minutes to stretch", "schedule_task",
         {"text": "Reminder: stretch", "at": "10m"}),
        ("Remind me in 2 hours about the  oven!", "schedule_task",
         {"text": "Reminder: the oven", "at": "2h"}),
        ("remind me in 1 day to call mum", "schedule_task",
         {"text": "Reminder: call mum", "at": "1d"}),
        ("every day at 8:05 post the plan", "schedule_task",
         {"text": "post the plan", "cron": "5 8 * * *"}),
        ("Every day at 23:59, say good night", "schedule_task",
         {"text": "say good night", "cron": "59 23 * * *"}),
        ("list my reminders", "list_tasks", {}),
        ("show tasks?", "list_tasks", {}),
        ("cancel reminder 12", "cancel_task", {"id": 12}),
        ("Cancel task #3.", "cancel_task", {"id": 3}),
    ],
)  # fmt: skip
def test_the_offline_provider_understands_reminders(
    text: str, tool: str, args: dict[str, Any]
) -> None:
    [call] = _ask(text).tool_calls
    assert (call.name, call.arguments) == (tool, args)


def test_the_offline_provider_says_a_due_tasks_text() -> None:
    assert _ask("[scheduled task 4] Reminder: stretch").text == "Reminder: stretch"
    assert "every day at 08:00" in str(_ask("every day at 25:00 post").text)  # not a time


# the CLI


def test_task_commands(run, home: Path) -> None:  # type: ignore[no-untyped-def]
    assert run("group", "add", "Fam").exit_code == 0
    unseen = run("task", "add", "fam", "--chat", "kitchen", "--at", "20m", "hi")
    assert unseen.exit_code == 2
    assert "group 'fam' has never seen chat 'kitchen'" in unseen.output
    h = Home(home)
    queue = open_queue(h)
    queue.enqueue(
        group="fam", session="cli.chat-kitchen", chat="kitchen", thread=None, sender="operator",
        trust="guest", text="hi", channel="http",
    )  # fmt: skip
    queue.close()
    both = run("task", "add", "fam", "--chat", "kitchen", "--at", "20m", "--every", "1h", "x")
    assert both.exit_code == 2 and "give exactly one of --at, --every or --cron" in both.output
    made = run(
        "task", "add", "fam", "--chat", "kitchen", "--cron", "0 8 * * 1-5",
        "--tz", "Europe/Lisbon", "--json", "Post the day's plan",
    )  # fmt: skip
    assert made.exit_code == 0, made.output
    task = json.loads(made.stdout)
    assert (task["chat"], task["channel"], task["author"], task["author_trust"]) == (
        "kitchen", "http", "operator", "operator",
    )  # fmt: skip
    assert task["schedule"] == "cron '0 8 * * 1-5' (Europe/Lisbon)"
    listed = json.loads(run("task", "list", "--json").stdout)["tasks"]
    assert [t["id"] for t in listed] == [task["id"]]
    table = run("task", "list", "fam").stdout.splitlines()
    assert table[0].split() == ["ID", "GROUP", "CHAT", "SCHEDULE", "NEXT", "STATE", "LAST",
                                "OUTCOME", "TEXT"]  # fmt: skip
    assert table[1].startswith(f"{task['id']}   fam    kitchen  cron '0 8 * * 1-5'")
    paused = run("task", "pause", str(task["id"]))
    assert paused.stdout.strip() == f"task {task['id']} paused"
    assert json.loads(run("task", "list", "--json").stdout)["tasks"][0]["state"] == PAUSED
    assert run("task", "resume", str(task["id"])).stdout.startswith(f"task {task['id']} active")
    ran = run("task", "run", str(task["id"]))
    assert ran.exit_code == 0, ran.output
    message_id = ran.stdout.split("queued as message ")[1].split(";")[0]
    queue = open_queue(h)
    try:
        message = queue.get(message_id)
        assert (
            message is not None
            and message.text == f"[scheduled task {task['id']}] Post the day's plan"
        )
        assert (message.chat, message.channel, message.trust) == ("kitchen", "http", "member")
        store = TaskStore(queue)
        assert store.require(task["id"]).state == ACTIVE  # the schedule is unchanged
        assert store.require(task["id"]).runs == 1
    finally:
        queue.close()
    assert run("task", "remove", str(task["id"])).stdout.strip() == f"task {task['id']} removed"
    missing = run("task", "pause", str(task["id"]))
    assert missing.exit_code == 2 and f"no task {task['id']}" in missing.output
    assert run("task", "list").stdout.strip() == "no scheduled tasks"


def test_a_purged_group_takes_its_tasks(run, home: Path) -> None:  # type: ignore[no-untyped-def]
    assert run("group", "add", "Fam").exit_code == 0
    queue = open_queue(Home(home))
    store = TaskStore(queue)
    add(store, "every", "1h", at(2026, 5, 1, 9))
    queue.close()
    removed = run("group", "remove", "fam", "--purge", "--yes")
    assert removed.exit_code == 0, removed.output
    assert "removed 1 scheduled task(s) of fam" in removed.output
    queue = open_queue(Home(home))
    assert TaskStore(queue).tasks(done=True) == []
    queue.close()


def test_store_lookup_reads_the_groups_own_configuration(home: Path) -> None:
    store = GroupStore(Home(home))
    store.add(GroupConfig(name="fam", creators=("alice",), members=("bob",)))
    lookup = store_lookup(store)
    assert lookup("fam", "alice", "cli", "kitchen", None) == (
        SETTINGS,
        "creator",
        "cli.chat-kitchen",
    )
    assert lookup("fam", "eve", "cli", "kitchen", "t1") == (SETTINGS, None, "cli.chat-kitchen")
    assert lookup("gone", "alice", "cli", "kitchen", None) is None


def test_cron_next_is_strictly_after() -> None:
    start = at(2026, 5, 1, 8)
    assert cron_next("0 8 * * *", "Europe/Lisbon", start) == at(2026, 5, 2, 8)


def test_an_interval_after_a_long_downtime_lands_on_its_own_grid(tasks) -> None:  # type: ignore[no-untyped-def]
    store, scheduler, lookup = tasks
    lookup.settings = replace(SETTINGS, min_interval_seconds=1, grace_seconds=10**9)
    now = at(2026, 5, 1, 9)
    task = add(store, "every", "1s", now, settings=lookup.settings)
    year = 365 * 86400
    [ran] = scheduler.tick(now + year + 0.5)  # one run, however many were missed
    assert ran.due == now + 1
    assert store.require(task.id).next_run == now + year + 1
    assert scheduler.tick(now + year + 0.9) == []
    [ran] = scheduler.tick(now + year + 1)
    assert ran.due == now + year + 1


# limits that hold against chains (the second hostile round)


def test_a_one_off_sooner_than_the_shortest_interval_is_refused(tasks) -> None:  # type: ignore[no-untyped-def]
    store, _, _ = tasks
    now = at(2026, 6, 1, 12, 0)
    with pytest.raises(TaskRefused) as refused:
        add(store, "at", "30s", now)
    assert refused.value.message == (
        "--at '30s': sooner than this group allows (at least 60s from now)"
    )
    with pytest.raises(TaskRefused, match="sooner than this group allows"):
        add(store, "at", "2026-06-01T12:00:59", now)
    # two people's reminders for the same minute are both fine
    first = add(store, "at", "1m", now)
    second = add(store, "at", "1m", now, author="alice", author_trust="creator")
    assert first.next_run == second.next_run == now + 60


def test_a_turn_a_task_started_cannot_schedule_a_task(served) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = served["daemon"]
    task = add(daemon.tasks, "every", "1h", daemon.relay.clock(), tz=None)
    run = daemon.scheduler.run_now(task.id)
    message = daemon.queue.get(str(run.message_id))
    assert message is not None
    relay = TurnRelay(daemon.relay, message, served["group"], deadline=0)
    refused = task_schedule.TaskSchedule().handle(
        relay, {"text": "again", "kind": "at", "spec": "1m"}
    )
    assert refused == {
        "ok": False,
        "error": f"this turn is a run of scheduled task {task.id}, and a task's turn cannot "
        "schedule tasks (a recurring job is an `every` or `cron` task, which a person "
        "schedules)",
    }
    assert [t.id for t in daemon.tasks.tasks("fam")] == [task.id]


def test_runs_past_the_hourly_ceiling_pause_the_tasks_and_the_chat_is_told_once(
    tasks, queue: MessageQueue
) -> None:  # type: ignore[no-untyped-def]
    store, scheduler, lookup = tasks
    lookup.settings = replace(SETTINGS, max_runs_per_hour_set=3)
    now = at(2026, 6, 1, 12, 0)
    made = [add(store, "at", "1m", now, settings=lookup.settings) for _ in range(5)]
    outcomes = scheduler.tick(now + 60)
    assert [o.message_id is not None for o in outcomes] == [True, True, True, False, False]
    for task in made[3:]:
        paused = store.require(task.id)
        assert paused.state == PAUSED
        assert paused.last_outcome == (
            "paused: the group's tasks ran 3 times in the last hour, as many as "
            f"tasks.max_runs_per_hour allows (orchestrator task resume {task.id})"
        )
    notices = [m for m in queue.chat_messages("fam", "kitchen") if m.sender == "orchestrator"]
    assert len(notices) == 1 and notices[0].state == MESSAGE_DONE
    assert notices[0].replies[0].startswith("[orchestrator] This group's scheduled tasks ran 3")
    assert notices[0].session != "cli.chat-kitchen"  # no conversation's context holds it
    # an hour later the ceiling has room again, and a new pause tells the chat again
    later = now + 60 + 3601
    resumed = store.set_state(made[3].id, ACTIVE, now=later)
    assert [o.message_id is not None for o in scheduler.tick(later)] == [True]
    assert resumed.state == ACTIVE
