"""Exact behaviour of the in-memory container backend (runtime/fake.py) that the unit
tests of the lifecycle, reconcile and daemon logic stand on: what create, start, stop,
kill and remove do to its containers, specs, calls and event log; inspect, list by
labels (a None value: any value), logs, events filtered by labels, memory_usage and
engine_facts. The clock is pinned, so every event's and start's time is exact."""

from __future__ import annotations

import pytest

from orchestrator.errors import EngineError
from orchestrator.runtime import fake as fake_module
from orchestrator.runtime.base import BindMount, ContainerEvent, ContainerInfo, ContainerSpec
from orchestrator.runtime.fake import FakeBackend

NOW = 1_700_000_000.5


@pytest.fixture(autouse=True)
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """time.time() as the fake sees it: each call takes the next value of ``ticks``."""
    ticks = [NOW + i for i in range(100)]
    monkeypatch.setattr(fake_module.time, "time", lambda: ticks.pop(0))
    return ticks


def spec(name: str = "c1", labels: dict[str, str] | None = None, **values: object) -> ContainerSpec:
    fields: dict[str, object] = {
        "name": name,
        "image": "img:1",
        "command": ("run",),
        "user": "1:1",
        "labels": labels if labels is not None else {"a": "1"},
        "mounts": (
            BindMount("/host/one", "/in/one", True),
            BindMount("/host/two", "/in/two", False),
        ),
        "environment": {},
        "tmpfs": {},
        "working_dir": "/w",
        "hostname": "h",
        "network_mode": "none",
        "memory_bytes": 1,
        "nano_cpus": 1,
        "pids_limit": 1,
    }
    fields.update(values)
    return ContainerSpec(**fields)  # type: ignore[arg-type]


def test_a_new_backend_is_empty_and_has_no_facts() -> None:
    backend = FakeBackend()
    assert backend.containers == {}
    assert backend.specs == {}
    assert backend.calls == []
    assert backend.event_log == []
    assert backend.engine_facts() == {}
    assert backend.inspect("c1") is None
    assert backend.list({}) == []
    assert backend.memory_usage("c1") is None
    assert list(backend.events({})) == []


def test_create_records_the_container_its_spec_the_call_and_an_event() -> None:
    backend = FakeBackend()
    the_spec = spec("c1", labels={"a": "1", "b": "2"})
    info = backend.create(the_spec)
    assert info == ContainerInfo(
        "c1",
        "id1",
        "created",
        {"a": "1", "b": "2"},
        started_at=None,
        image="img:1",
        mounts=("/host/one", "/host/two"),
    )
    assert backend.containers == {"c1": info}
    assert backend.specs == {"c1": the_spec}
    assert backend.specs["c1"] is the_spec
    assert backend.calls == [("create", "c1")]
    assert backend.event_log == [ContainerEvent("create", "c1", {"a": "1", "b": "2"}, NOW)]


def test_create_copies_the_labels() -> None:
    labels = {"a": "1"}
    backend = FakeBackend()
    info = backend.create(spec("c1", labels=labels))
    labels["a"] = "changed"
    assert info.labels == {"a": "1"}
    assert backend.event_log[0].labels == {"a": "1"}


def test_ids_count_up_from_one_across_containers() -> None:
    backend = FakeBackend()
    assert [backend.create(spec(n)).id for n in ("a", "b", "c")] == ["id1", "id2", "id3"]
    backend.remove("b")
    assert backend.create(spec("b")).id == "id4"


def test_create_of_a_name_in_use_is_refused_as_the_engine_does() -> None:
    backend = FakeBackend()
    first = backend.create(spec("c1"))
    with pytest.raises(EngineError) as caught:
        backend.create(spec("c1", image="other:2"))
    assert str(caught.value) == "engine refused create c1: name in use (HTTP 409)"
    assert backend.containers == {"c1": first}
    assert backend.specs["c1"].image == "img:1"
    assert backend.calls == [("create", "c1"), ("create", "c1")]
    assert [e.action for e in backend.event_log] == ["create"]


def test_start_runs_the_container_from_now() -> None:
    backend = FakeBackend()
    backend.create(spec("c1"))
    backend.start("c1")
    assert backend.containers["c1"] == ContainerInfo(
        "c1",
        "id1",
        "running",
        {"a": "1"},
        started_at=NOW + 1,
        image="img:1",
        mounts=("/host/one", "/host/two"),
    )
    assert backend.containers["c1"].running is True
    assert backend.calls == [("create", "c1"), ("start", "c1")]
    # the event carries the container as it was before it started
    assert backend.event_log == [
        ContainerEvent("create", "c1", {"a": "1"}, NOW),
        ContainerEvent("start", "c1", {"a": "1"}, NOW + 2),
    ]


def test_start_of_an_unknown_container_raises_after_recording_the_call() -> None:
    backend = FakeBackend()
    with pytest.raises(KeyError):
        backend.start("nope")
    assert backend.calls == [("start", "nope")]
    assert backend.event_log == []


def test_stop_exits_the_container_and_logs_its_death() -> None:
    backend = FakeBackend()
    backend.create(spec("c1"))
    backend.start("c1")
    backend.stop("c1")
    stopped = backend.containers["c1"]
    assert stopped == ContainerInfo(
        "c1",
        "id1",
        "exited",
        {"a": "1"},
        started_at=None,
        image="img:1",
        mounts=("/host/one", "/host/two"),
    )
    assert stopped.running is False
    assert backend.calls == [("create", "c1"), ("start", "c1"), ("stop", "c1")]
    assert backend.event_log[-1] == ContainerEvent("die", "c1", {"a": "1"}, NOW + 3)
    assert len(backend.event_log) == 3


def test_stop_with_a_timeout_does_the_same() -> None:
    backend = FakeBackend()
    backend.create(spec("c1"))
    backend.start("c1")
    backend.stop("c1", timeout=1)
    assert backend.containers["c1"].state == "exited"
    assert backend.containers["c1"].started_at is None


def test_stop_of_an_unknown_container_is_only_recorded() -> None:
    backend = FakeBackend()
    backend.stop("nope")
    assert backend.calls == [("stop", "nope")]
    assert backend.containers == {}
    assert backend.event_log == []


def test_kill_exits_the_container_silently() -> None:
    backend = FakeBackend()
    backend.create(spec("c1"))
    backend.start("c1")
    backend.kill("c1")
    assert backend.containers["c1"] == ContainerInfo(
        "c1",
        "id1",
        "exited",
        {"a": "1"},
        started_at=None,
        image="img:1",
        mounts=("/host/one", "/host/two"),
    )
    assert backend.calls == [("create", "c1"), ("start", "c1")]
    assert [e.action for e in backend.event_log] == ["create", "start"]
    with pytest.raises(KeyError):
        backend.kill("nope")


def test_remove_forgets_the_container_and_its_spec_and_logs_its_destruction() -> None:
    backend = FakeBackend()
    backend.create(spec("c1"))
    backend.create(spec("c2", labels={"b": "2"}))
    backend.remove("c1")
    assert list(backend.containers) == ["c2"]
    assert list(backend.specs) == ["c2"]
    assert backend.inspect("c1") is None
    assert backend.calls == [("create", "c1"), ("create", "c2"), ("remove", "c1")]
    assert backend.event_log[-1] == ContainerEvent("destroy", "c1", {"a": "1"}, NOW + 2)


def test_remove_of_an_unknown_container_is_only_recorded() -> None:
    backend = FakeBackend()
    backend.remove("nope")
    assert backend.calls == [("remove", "nope")]
    assert backend.event_log == []


def test_inspect_answers_the_current_info() -> None:
    backend = FakeBackend()
    info = backend.create(spec("c1"))
    assert backend.inspect("c1") is info
    backend.start("c1")
    assert backend.inspect("c1") is backend.containers["c1"]
    assert backend.inspect("c1").state == "running"  # type: ignore[union-attr]


def test_list_matches_every_label_a_none_value_matching_any_value() -> None:
    backend = FakeBackend()
    one = backend.create(spec("one", labels={"p": "x", "g": "a"}))
    two = backend.create(spec("two", labels={"p": "x", "g": "b"}))
    three = backend.create(spec("three", labels={"p": "y"}))
    assert backend.list({}) == [one, two, three]
    assert backend.list({"p": "x"}) == [one, two]
    assert backend.list({"p": "x", "g": "b"}) == [two]
    assert backend.list({"p": "y", "g": "b"}) == []
    assert backend.list({"g": None}) == [one, two]
    assert backend.list({"p": None}) == [one, two, three]
    assert backend.list({"p": "x", "g": None}) == [one, two]
    assert backend.list({"p": "y", "g": None}) == []
    assert backend.list({"missing": None}) == []
    assert backend.list({"g": "c"}) == []


def test_list_by_a_none_value_does_not_match_a_label_whose_value_is_empty() -> None:
    backend = FakeBackend()
    empty = backend.create(spec("e", labels={"g": ""}))
    assert backend.list({"g": None}) == [empty]
    assert backend.list({"g": ""}) == [empty]
    assert backend.list({"h": None}) == []


def test_list_reflects_state_changes() -> None:
    backend = FakeBackend()
    backend.create(spec("c1"))
    backend.start("c1")
    assert [c.state for c in backend.list({"a": "1"})] == ["running"]


def test_logs_are_empty() -> None:
    backend = FakeBackend()
    backend.create(spec("c1"))
    assert list(backend.logs("c1")) == []
    assert list(backend.logs("c1", follow=True, tail=3)) == []


def test_events_are_the_log_filtered_by_every_label() -> None:
    backend = FakeBackend()
    backend.create(spec("one", labels={"p": "x", "g": "a"}))
    backend.create(spec("two", labels={"p": "x", "g": "b"}))
    backend.start("one")
    backend.remove("two")
    assert list(backend.events({})) == backend.event_log
    assert list(backend.events({"p": "x"})) == [
        ContainerEvent("create", "one", {"p": "x", "g": "a"}, NOW),
        ContainerEvent("create", "two", {"p": "x", "g": "b"}, NOW + 1),
        ContainerEvent("start", "one", {"p": "x", "g": "a"}, NOW + 3),
        ContainerEvent("destroy", "two", {"p": "x", "g": "b"}, NOW + 4),
    ]
    assert [(e.action, e.name) for e in backend.events({"p": "x", "g": "b"})] == [
        ("create", "two"),
        ("destroy", "two"),
    ]
    assert list(backend.events({"p": "y"})) == []
    assert list(backend.events({"g": "a", "p": "y"})) == []


def test_memory_usage_is_one_mebibyte_while_running() -> None:
    backend = FakeBackend()
    assert backend.memory_usage("c1") is None
    backend.create(spec("c1"))
    assert backend.memory_usage("c1") is None
    backend.start("c1")
    assert backend.memory_usage("c1") == 1048576
    backend.stop("c1")
    assert backend.memory_usage("c1") is None


def test_engine_facts_are_a_copy_of_the_facts_given() -> None:
    facts: dict[str, object] = {"rootless": True, "podman": False}
    backend = FakeBackend(facts)
    answer = backend.engine_facts()
    assert answer == {"rootless": True, "podman": False}
    answer["rootless"] = False
    facts["podman"] = True
    assert backend.engine_facts() == {"rootless": True, "podman": True}
    assert backend.engine_facts() is not backend.engine_facts()
    assert FakeBackend({}).engine_facts() == {}
    assert FakeBackend(None).engine_facts() == {}
