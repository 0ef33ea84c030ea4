"""Exact behaviour of the task tools and of the provider lookup inside the container:
the requests the task tools send the host, their checks of the model's arguments, the
host's answers shown back, and the provider class each name gets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.agent.hostlink import HostRequestFailed
from orchestrator.agent.providers import OFFLINE, get_provider
from orchestrator.agent.providers.offline import OfflineProvider
from orchestrator.agent.providers.relay import RelayProvider
from orchestrator.agent.tools import BUILT_IN, Toolbox, ToolError
from orchestrator.agent.tools.tasks import (
    TASKS,
    cancel_task,
    list_tasks,
    schedule_task,
)
from orchestrator.protocol import TASK_CANCEL, TASK_LIST, TASK_SCHEDULE
from tests.fakehost import FakeHost


def _box(tmp_path: Path, host: FakeHost | None) -> Toolbox:
    return Toolbox(tmp_path, sources=[TASKS], host=host)  # type: ignore[arg-type]


# --- schedule_task ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "kind", "spec"),
    [
        ({"at": "20m"}, "at", "20m"),
        ({"every": "1h"}, "every", "1h"),
        ({"cron": "0 8 * * 1-5"}, "cron", "0 8 * * 1-5"),
        ({"at": "2h", "every": "", "cron": None}, "at", "2h"),
    ],
)
def test_a_schedule_asks_the_host_with_its_one_kind(
    tmp_path: Path, given: dict[str, Any], kind: str, spec: str
) -> None:
    host = FakeHost({"result": "task 4 scheduled"})
    assert schedule_task(_box(tmp_path, host), "stretch", **given) == "task 4 scheduled"
    assert host.requests == [
        (TASK_SCHEDULE, {"text": "stretch", "kind": kind, "spec": spec, "timezone": None})
    ]


def test_a_schedule_passes_its_timezone(tmp_path: Path) -> None:
    host = FakeHost({"result": "ok"})
    box = _box(tmp_path, host)
    assert box.call("schedule_task", {"text": "t", "cron": "0 8 * * *", "timezone": "UTC"})
    assert host.requests[0][1]["timezone"] == "UTC"


@pytest.mark.parametrize("answer", [{}, {"result": ""}, {"result": None}])
def test_a_schedule_without_a_result_says_scheduled(tmp_path: Path, answer: dict[str, Any]) -> None:
    assert schedule_task(_box(tmp_path, FakeHost(answer)), "t", at="1h") == "scheduled"


@pytest.mark.parametrize("text", ["", "   ", "\n\t", 7, None])
def test_a_schedule_needs_text(tmp_path: Path, text: Any) -> None:
    host = FakeHost()
    with pytest.raises(ToolError) as caught:
        schedule_task(_box(tmp_path, host), text, at="1h")
    assert str(caught.value) == "text must be a non-empty string"
    assert host.requests == []


@pytest.mark.parametrize(
    "given",
    [
        {},
        {"at": ""},
        {"at": "1h", "every": "1h"},
        {"at": "1h", "cron": "* * * * *"},
        {"every": "1h", "cron": "* * * * *"},
        {"at": "1h", "every": "2h", "cron": "* * * * *"},
        {"at": 5},
        {"every": ["1h"]},
        {"cron": True},
    ],
)
def test_a_schedule_needs_exactly_one_of_at_every_or_cron_as_text(
    tmp_path: Path, given: dict[str, Any]
) -> None:
    host = FakeHost()
    with pytest.raises(ToolError) as caught:
        schedule_task(_box(tmp_path, host), "t", **given)
    assert str(caught.value) == "give exactly one of at, every or cron, as text"
    assert host.requests == []


@pytest.mark.parametrize("timezone", [3, ["UTC"], b"UTC"])
def test_a_schedule_needs_its_timezone_as_text(tmp_path: Path, timezone: Any) -> None:
    host = FakeHost()
    with pytest.raises(ToolError) as caught:
        schedule_task(_box(tmp_path, host), "t", at="1h", timezone=timezone)
    assert str(caught.value) == "timezone must be text, such as Europe/Lisbon"
    assert host.requests == []


def test_without_a_host_the_task_tools_say_why(tmp_path: Path) -> None:
    box = _box(tmp_path, None)
    for call in (
        lambda: schedule_task(box, "t", at="1h"),
        lambda: list_tasks(box),
        lambda: cancel_task(box, 1),
    ):
        with pytest.raises(ToolError) as caught:
            call()
        assert str(caught.value) == "scheduled tasks are kept by the orchestrator; no host here"


def test_a_host_refusal_becomes_the_tools_error_without_its_cause(tmp_path: Path) -> None:
    host = FakeHost(HostRequestFailed("no such task: 9"))
    with pytest.raises(ToolError) as caught:
        cancel_task(_box(tmp_path, host), 9)
    assert str(caught.value) == "no such task: 9"
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__ is True


def test_an_error_other_than_a_refusal_is_not_hidden(tmp_path: Path) -> None:
    host = FakeHost(RuntimeError("link broke"))
    with pytest.raises(RuntimeError, match="link broke"):
        list_tasks(_box(tmp_path, host))


# --- list_tasks ------------------------------------------------------------------------


def test_the_tasks_are_listed_one_a_line(tmp_path: Path) -> None:
    host = FakeHost(
        {
            "tasks": [
                {"id": 3, "text": "stretch", "schedule": "every 1h", "next": "10:00",
                 "state": "active"},
                "not a task",
                {"id": 4, "text": "call mum", "schedule": "at 2026-12-24T18:00",
                 "next": "2026-12-24T18:00", "state": "paused"},
                {},
            ]
        }
    )  # fmt: skip
    assert list_tasks(_box(tmp_path, host)) == (
        "3: stretch (every 1h; next 10:00; active)\n"
        "4: call mum (at 2026-12-24T18:00; next 2026-12-24T18:00; paused)\n"
        "None: None (None; next None; None)"
    )
    assert host.requests == [(TASK_LIST, {})]


@pytest.mark.parametrize("answer", [{}, {"tasks": []}, {"tasks": None}, {"tasks": "3: x"}])
def test_no_tasks_say_so(tmp_path: Path, answer: dict[str, Any]) -> None:
    assert list_tasks(_box(tmp_path, FakeHost(answer))) == "(no tasks scheduled in this chat)"


# --- cancel_task -----------------------------------------------------------------------


def test_a_cancel_asks_the_host_for_the_number(tmp_path: Path) -> None:
    host = FakeHost({"result": "task 12 cancelled"}, {})
    box = _box(tmp_path, host)
    assert cancel_task(box, 12) == "task 12 cancelled"
    assert cancel_task(box, 0) == "cancelled"
    assert host.requests == [(TASK_CANCEL, {"id": 12}), (TASK_CANCEL, {"id": 0})]


@pytest.mark.parametrize("id", [True, False, "12", 1.0, None])
def test_a_cancel_needs_a_task_number(tmp_path: Path, id: Any) -> None:
    host = FakeHost()
    with pytest.raises(ToolError) as caught:
        cancel_task(_box(tmp_path, host), id)
    assert str(caught.value) == "id must be a task number"
    assert host.requests == []


def test_the_task_tools_are_one_built_in_source_in_their_order(tmp_path: Path) -> None:
    assert TASKS in BUILT_IN
    assert TASKS.name == "tasks"
    assert [t.spec.name for t in TASKS.tools(_box(tmp_path, None))] == [
        "schedule_task",
        "list_tasks",
        "cancel_task",
    ]


# --- the provider lookup ---------------------------------------------------------------


def test_the_offline_provider_runs_in_the_container(tmp_path: Path) -> None:
    provider = get_provider(OFFLINE, "offline-rules")
    assert type(provider) is OfflineProvider
    assert provider.model == "offline-rules"
    assert OFFLINE == "offline"


@pytest.mark.parametrize("name", ["openai", "anthropic", "Offline", "", "offline:x"])
def test_every_other_provider_is_reached_through_the_relay(name: str) -> None:
    provider = get_provider(name, "some-model")
    assert type(provider) is RelayProvider
    assert provider.model == "some-model"
