"""The scheduler on its own, exactly: a recording task store and lookup, and the time
each test chooses. Which outcome each run gets (queued, late, skipped past the grace,
paused for the author's trust, a gone group or the hourly ceiling, waiting for a group
being edited, already run), the message it queues, what the store is asked to record,
the notice a ceiling sends once an hour, and the lines logged."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from orchestrator.daemon.scheduler import RunOutcome, Scheduler, store_lookup
from orchestrator.errors import InvalidConfig
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig, TaskSettings
from orchestrator.home import Home
from orchestrator.schedules import TaskRefused
from orchestrator.store.messages import Message
from orchestrator.store.tasks import Task

LOGGER = "orchestrator.tasks"
NOW = 1_000_000.0
SETTINGS = TaskSettings(allowed=("creator", "member"), grace_seconds=300)


def task(**kw: Any) -> Task:
    fields: dict[str, Any] = {
        "id": 7,
        "group": "fam",
        "chat": "kitchen",
        "thread": "t1",
        "channel": "telegram:bot",
        "text": "water the plants",
        "kind": "every",
        "spec": "60s",
        "tz": "UTC",
        "author": "telegram:alice",
        "author_trust": "creator",
        "state": "active",
        "created": NOW - 10_000,
        "next_run": NOW,
        "last_run": None,
        "last_outcome": None,
        "runs": 0,
    }
    fields.update(kw)
    return Task(**fields)


class Store:
    """Records what the scheduler asks of the task store."""

    def __init__(self, *tasks: Task, runs: int = 0, told: bool = False, ran: bool = True):
        self.tasks = {t.id: t for t in tasks}
        self.runs, self.told, self.ran = runs, told, ran
        self.calls: list[tuple[Any, ...]] = []

    def due(self, now: float) -> list[Task]:
        self.calls.append(("due", now))
        return list(self.tasks.values())

    def require(self, task_id: int) -> Task:
        return self.tasks[task_id]

    def record_run(
        self,
        task: Task,
        due: float,
        now: float,
        following: float | None,
        message: Message | None,
        outcome: str,
        keep_state: bool = False,
    ) -> bool:
        self.calls.append(("record", task.id, due, now, following, message, outcome, keep_state))
        return self.ran

    def runs_since(self, group: str, since: float) -> int:
        self.calls.append(("runs_since", group, since))
        return self.runs

    def told_since(self, group: str, since: float) -> bool:
        self.calls.append(("told_since", group, since))
        return self.told

    def tell(self, task: Task, text: str) -> None:
        self.calls.append(("tell", task.id, text))

    def pause_task(self, task_id: int, outcome: str) -> None:
        self.calls.append(("pause", task_id, outcome))


class Lookup:
    def __init__(
        self, found: Any = (SETTINGS, "creator", "telegram.bot.chat-kitchen-thread-t1")
    ) -> None:
        self.found = found
        self.asked: list[tuple[Any, ...]] = []

    def __call__(self, *args: Any) -> Any:
        self.asked.append(args)
        if isinstance(self.found, Exception):
            raise self.found
        return self.found


def scheduler(store: Store, lookup: Lookup | None = None) -> Scheduler:
    return Scheduler(store, lookup or Lookup(), clock=lambda: NOW)  # type: ignore[arg-type]


def logged(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]


def recorded(store: Store) -> list[tuple[Any, ...]]:
    return [c for c in store.calls if c[0] == "record"]


def test_a_due_task_is_queued_as_a_member_message(caplog: pytest.LogCaptureFixture) -> None:
    store, lookup = Store(task()), Lookup()
    caplog.set_level(logging.INFO, logger=LOGGER)
    [ran] = scheduler(store, lookup).tick()
    assert store.calls[0] == ("due", NOW)
    assert lookup.asked == [("fam", "telegram:alice", "telegram:bot", "kitchen", "t1")]
    assert ran.task_id == 7 and ran.due == NOW and ran.outcome == "queued"
    [record] = recorded(store)
    message = record[5]
    assert ran.message_id == message.id
    assert record == ("record", 7, NOW, NOW, NOW + 60, message, "queued", False)
    assert message.group == "fam"
    assert message.session == "telegram.bot.chat-kitchen-thread-t1"
    assert message.chat == "kitchen"
    assert message.thread == "t1"
    assert message.sender == "telegram:alice"
    assert message.trust == "member"
    assert message.text == "[scheduled task 7] water the plants"
    assert message.channel == "telegram:bot"
    assert ("runs_since", "fam", NOW - 3600) in store.calls
    assert logged(caplog) == [(logging.INFO, f"task 7 of fam: queued as message {message.id}")]


def test_the_clock_is_asked_only_without_a_time() -> None:
    store = Store(task(next_run=NOW + 50))
    assert scheduler(store).tick(NOW + 50.5)[0].outcome == "queued"
    assert store.calls[0] == ("due", NOW + 50.5)


def test_a_task_without_a_due_time_is_due_now() -> None:
    store = Store(task(next_run=None, kind="at", spec="x"))
    [ran] = scheduler(store).tick(NOW + 5)
    assert ran.due == NOW + 5
    assert recorded(store)[0][2:7:2] == (NOW + 5, None, "queued")


@pytest.mark.parametrize(
    ("late", "outcome"), [(1, "queued"), (1.4, "queued 1s late"), (299, "queued 299s late")]
)
def test_a_late_run_says_how_late(late: float, outcome: str) -> None:
    store = Store(task())
    assert scheduler(store).tick(NOW + late)[0].outcome == outcome


def test_a_run_past_the_grace_is_skipped(caplog: pytest.LogCaptureFixture) -> None:
    store = Store(task())
    caplog.set_level(logging.INFO, logger=LOGGER)
    [ran] = scheduler(store).tick(NOW + 300.5)
    outcome = "skipped: due 300s ago, past the 300s grace"
    assert ran == RunOutcome(7, NOW, None, outcome)
    assert recorded(store) == [("record", 7, NOW, NOW + 300.5, NOW + 360, None, outcome, False)]
    assert logged(caplog) == [(logging.WARNING, f"task 7 of fam: {outcome}")]
    assert not [c for c in store.calls if c[0] == "runs_since"]


def test_a_run_at_the_grace_is_queued() -> None:
    assert scheduler(Store(task())).tick(NOW + 300)[0].outcome == "queued 300s late"


def test_a_run_already_recorded_is_not_queued_again(caplog: pytest.LogCaptureFixture) -> None:
    store = Store(task(), ran=False)
    caplog.set_level(logging.INFO, logger=LOGGER)
    [ran] = scheduler(store).tick(NOW)
    assert ran == RunOutcome(7, NOW, None, "already run for this due time")
    assert logged(caplog) == []


def test_a_gone_group_pauses_the_task(caplog: pytest.LogCaptureFixture) -> None:
    store = Store(task())
    [ran] = scheduler(store, Lookup(None)).tick(NOW)
    outcome = "group 'fam' is gone; task paused"
    assert ran == RunOutcome(7, NOW, None, outcome)
    assert store.calls[1:] == [("pause", 7, outcome)]
    assert logged(caplog) == [(logging.WARNING, f"task 7 of fam: {outcome}")]


def test_an_author_no_longer_allowed_pauses_the_task() -> None:
    store = Store(task())
    [ran] = scheduler(store, Lookup((SETTINGS, None, "s"))).tick(NOW)
    assert ran.outcome == (
        "author 'telegram:alice' is no longer allowed to talk to the group; task paused"
    )
    store = Store(task())
    [ran] = scheduler(store, Lookup((SETTINGS, "guest", "s"))).tick(NOW)
    assert (
        ran.outcome == "author 'telegram:alice' (guest) may no longer schedule tasks; task paused"
    )
    assert store.calls[1:] == [("pause", 7, ran.outcome)]
    assert ran.message_id is None
    assert ran.due == NOW


def test_an_operators_task_is_not_checked_against_the_groups_lists() -> None:
    store = Store(task(author_trust="operator", author="operator"))
    [ran] = scheduler(store, Lookup((SETTINGS, None, "s"))).tick(NOW)
    assert ran.outcome == "queued"
    assert recorded(store)[0][5].trust == "member"


def test_a_group_being_edited_waits_and_says_so_once(caplog: pytest.LogCaptureFixture) -> None:
    store, lookup = Store(task()), Lookup(InvalidConfig("group.yaml: bad"))
    sched = scheduler(store, lookup)
    [ran] = sched.tick(NOW)
    assert ran == RunOutcome(7, NOW, None, "waiting: group.yaml: bad")
    assert sched.tick(NOW + 1)[0].outcome == "waiting: group.yaml: bad"
    assert logged(caplog) == [(logging.WARNING, "task 7 of fam waits: group.yaml: bad")]
    assert store.calls == [("due", NOW), ("due", NOW + 1)]
    lookup.found = (SETTINGS, "creator", "s")
    assert sched.tick(NOW + 2)[0].outcome == "queued 2s late"
    assert sched._waiting == set()
    lookup.found = InvalidConfig("group.yaml: bad")
    sched.tick(NOW + 3)
    assert logged(caplog) == [(logging.WARNING, "task 7 of fam waits: group.yaml: bad")] * 2


def test_the_hourly_ceiling_pauses_and_tells_the_chat_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = replace(SETTINGS, max_runs_per_hour_set=4)
    store = Store(task(), runs=4)
    [ran] = scheduler(store, Lookup((settings, "creator", "s"))).tick(NOW)
    outcome = (
        "paused: the group's tasks ran 4 times in the last hour, as many as "
        "tasks.max_runs_per_hour allows (orchestrator task resume 7)"
    )
    assert ran == RunOutcome(7, NOW, None, outcome)
    assert store.calls[1:] == [
        ("runs_since", "fam", NOW - 3600),
        ("pause", 7, outcome),
        ("told_since", "fam", NOW - 3600),
        (
            "tell",
            7,
            "[orchestrator] This group's scheduled tasks ran 4 times in the last hour, the "
            "most its tasks.max_runs_per_hour allows, so task 7 (and any other task due "
            "before the hour is over) is paused. A creator resumes it with the operator's "
            "`orchestrator task resume 7`, or by scheduling it again.",
        ),
    ]
    assert logged(caplog) == [(logging.WARNING, f"task 7 of fam: {outcome}")]
    told = Store(task(), runs=5, told=True)
    scheduler(told, Lookup((settings, "creator", "s"))).tick(NOW)
    assert [c[0] for c in told.calls] == ["due", "runs_since", "pause", "told_since"]
    under = Store(task(), runs=3)
    assert scheduler(under, Lookup((settings, "creator", "s"))).tick(NOW)[0].outcome == "queued"


def test_run_now_queues_a_run_by_hand(caplog: pytest.LogCaptureFixture) -> None:
    store, lookup = Store(task(next_run=NOW + 500)), Lookup()
    caplog.set_level(logging.INFO, logger=LOGGER)
    ran = scheduler(store, lookup).run_now(7)
    assert lookup.asked == [("fam", "telegram:alice", "telegram:bot", "kitchen", "t1")]
    [record] = recorded(store)
    message = record[5]
    assert record == ("record", 7, NOW, NOW, NOW + 500, message, "run by hand", True)
    assert ran == RunOutcome(7, NOW, message.id, "run by hand")
    assert message.text == "[scheduled task 7] water the plants"
    assert message.trust == "member"
    assert logged(caplog) == [(logging.INFO, f"task 7 of fam: run by hand as message {message.id}")]
    one_off = Store(task(kind="at", spec="x", next_run=NOW + 500))
    scheduler(one_off).run_now(7, NOW + 3)
    assert recorded(one_off)[0][2:5] == (NOW + 3, NOW + 3, None)


def test_run_now_is_refused_for_a_done_task_a_gone_group_or_an_author_not_allowed() -> None:
    with pytest.raises(TaskRefused) as done:
        scheduler(Store(task(state="done"))).run_now(7)
    assert done.value.message == "task 7 is done; it cannot run again"
    with pytest.raises(TaskRefused) as gone:
        scheduler(Store(task()), Lookup(None)).run_now(7)
    assert gone.value.message == "task 7: group 'fam' is gone"
    for trust in (None, "guest"):
        store = Store(task())
        with pytest.raises(TaskRefused) as refused:
            scheduler(store, Lookup((SETTINGS, trust, "s"))).run_now(7)
        assert refused.value.message == (
            "task 7: its author 'telegram:alice' may no longer schedule tasks in 'fam'"
        )
        assert (
            refused.value.hint == "remove it, or make the author a member again in its group.yaml"
        )
        assert store.calls == []
    operator = Store(task(author_trust="operator"))
    assert scheduler(operator, Lookup((SETTINGS, None, "s"))).run_now(7).outcome == "run by hand"


def test_store_lookup_passes_the_binding_of_the_chat(tmp_path: Path) -> None:
    groups = GroupStore(Home(tmp_path))
    groups.add(GroupConfig(name="fam", creators=("alice",), session_mode="per-thread"))
    asked: list[tuple[str, str, str]] = []

    def bound(folder: str, channel: str, chat: str) -> str | None:
        asked.append((folder, channel, chat))
        return "member"

    lookup = store_lookup(groups, bound)
    found = lookup("fam", "telegram:bob", "telegram:bot", "kitchen", "t1")
    assert found is not None
    settings, trust, session = found
    assert asked == [("fam", "telegram:bot", "kitchen")]
    assert trust == "member"
    assert session == "telegram.bot.chat-kitchen-thread-t1"
    assert settings == groups.load("fam").config.tasks
    assert store_lookup(groups)("fam", "telegram:bob", "telegram:bot", "kitchen", None) == (
        settings,
        None,
        "telegram.bot.chat-kitchen",
    )
    assert lookup("gone", "alice", "cli", "kitchen", None) is None
