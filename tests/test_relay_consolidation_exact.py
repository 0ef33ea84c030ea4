"""Exact wiring of ``run_consolidation`` (relay/consolidation.py), with memory
consolidation's ``prepare`` and ``commit``, the home's queue, the usage store and the
background model replaced by recorders: the day it reads to (the group's, in its time
zone), the moment it records (``now``, else the clock), the history it builds (the
configuration's file size), the model named and asked (the group's ``background`` pair,
the given ``complete``, or none for an offline group), what it opens itself (the queue,
the usage store on the queue's file, the background model) and closes however the run
ends while what it is given stays open, the pause it holds to write (holder, reason,
wait, progress), and when it writes without one (a dry run, nothing proposed)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.config import OrchestratorConfig, load_config
from orchestrator.groups import Group, GroupStore
from orchestrator.groups.config import GroupConfig, ModelLimits
from orchestrator.groups.modelsconfig import ModelChoice, PurposeModels
from orchestrator.home import Home
from orchestrator.memory import consolidate as mc
from orchestrator.memory.history import History
from orchestrator.relay import consolidation
from orchestrator.relay.consolidation import FACTS, run_consolidation
from orchestrator.store.messages import GroupBusy

NOW = 1_796_673_600.0  # 2026-12-07 20:00 UTC: 2026-12-08 09:00 in Auckland
QUEUE_PATH = Path("/nowhere/queue.db")


class Recorder:
    """Stand-ins for what run_consolidation calls, each call noted in ``events``."""

    def __init__(self, proposals: bool = True) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.proposals = proposals
        self.prepared: mc.Report | None = None
        self.committed = mc.Report("fam", "2026-12-08", mc.MODEL)
        self.prepare_kwargs: dict[str, Any] = {}
        self.commit_kwargs: dict[str, Any] = {}
        self.queues: list[Queue] = []
        self.stores: list[Usage] = []
        self.models: list[Background] = []

    def open_queue(self, home: Any) -> Queue:
        queue = Queue(self.events, "queue")
        self.queues.append(queue)
        self.events.append(("open_queue", home))
        return queue

    def usage_store(self, path: Any) -> Usage:
        store = Usage(self.events)
        self.stores.append(store)
        self.events.append(("usage", path))
        return store

    def background(self, config: Any, group: Any, usage: Any, *, adapters: Any) -> Background:
        model = Background(self.events)
        self.models.append(model)
        self.events.append(("background", config, group, usage, adapters))
        return model

    def prepare(self, groups_dir: Path, folder: str, **kwargs: Any) -> mc.Report:
        self.events.append(("prepare", groups_dir, folder))
        self.prepare_kwargs = kwargs
        self.prepared = mc.Report(folder, "2026-12-08", mc.MODEL)
        if self.proposals:
            self.prepared.proposals = [mc.Promotion("index.md", "A fact.", (1,), "A fact.")]
        return self.prepared

    def commit(self, groups_dir: Path, report: mc.Report, **kwargs: Any) -> mc.Report:
        self.events.append(("commit", groups_dir, report))
        self.commit_kwargs = kwargs
        return self.committed


class Queue:
    def __init__(self, events: list[tuple[Any, ...]], name: str) -> None:
        self.events = events
        self.name = name
        self.path = QUEUE_PATH

    @contextlib.contextmanager
    def paused(
        self, group: str, holder: str, reason: str, *, wait: float, progress: Any = None
    ) -> Iterator[None]:
        self.events.append(("pause", self.name, group, holder, reason, wait, progress))
        try:
            yield
        finally:
            self.events.append(("resume", self.name, group))

    def close(self) -> None:
        self.events.append(("close", self.name))


class Usage:
    def __init__(self, events: list[tuple[Any, ...]]) -> None:
        self.events = events

    def close(self) -> None:
        self.events.append(("close", "usage"))


class Background:
    def __init__(self, events: list[tuple[Any, ...]]) -> None:
        self.events = events

    def __call__(self, system: str, messages: list[dict[str, Any]], max_tokens: int) -> str:
        raise AssertionError("prepare is replaced: the model is never asked here")

    def summary(self) -> dict[str, object]:
        return {"usage_id": "consolidation-1", "calls": 2}

    def close(self) -> None:
        self.events.append(("close", "background"))


@pytest.fixture
def rec(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    made = Recorder()
    monkeypatch.setattr(consolidation, "open_queue", made.open_queue)
    monkeypatch.setattr(consolidation, "UsageStore", made.usage_store)
    monkeypatch.setattr(consolidation, "BackgroundModel", made.background)
    monkeypatch.setattr(mc, "prepare", made.prepare)
    monkeypatch.setattr(mc, "commit", made.commit)

    def no_config(home: Any) -> OrchestratorConfig:
        raise AssertionError("the configuration given is used")

    monkeypatch.setattr(consolidation, "load_config", no_config)
    return made


PROVIDERS = "".join(
    f"  {name}:\n    kind: openai\n    base_url: http://127.0.0.1:9/v1\n"
    f"    key_env: FAKE_KEY\n    models: [{model}]\n"
    for name, model in (("hosted", "chat-model"), ("bgprov", "bg-model"))
)


def make_group(home: Path, provider: str = "hosted", zone: str = "Pacific/Auckland") -> Group:
    (home / "orchestrator.yaml").write_text("providers:\n" + PROVIDERS)
    return GroupStore(Home(home)).add(
        GroupConfig(
            name="fam",
            provider=provider,
            model="chat-model",
            timezone=zone,
            turn_timeout_seconds=45,
            limits=ModelLimits(max_tokens=1234),
            models=PurposeModels(
                background=ModelChoice("bgprov", "bg-model") if provider != "offline" else None
            ),
        )
    )


@pytest.fixture
def group(home: Path) -> Group:
    """Group fam: chats on hosted/chat-model, its background model bgprov/bg-model,
    its days in Auckland, a turn timeout of 45 s and max_tokens 1234."""
    return make_group(home)


@pytest.fixture
def config(home: Path) -> OrchestratorConfig:
    """The home's configuration with a history file size of its own."""
    return dataclasses.replace(load_config(Home(home)), history_max_file_bytes=54_321)


def adapters(name: str) -> Any:
    raise AssertionError("the background model is replaced")


def progress(running: int) -> None:
    raise AssertionError("the pause is replaced")


def check_history(history: Any, group: Group) -> None:
    assert isinstance(history, History)
    assert (history.groups_dir, history.folder, history.max_file_bytes) == (
        group.path.parent,
        "fam",
        54_321,
    )


def prepare_and_commit(rec: Recorder, group: Group) -> list[tuple[Any, ...]]:
    """The events of a run that opens nothing and holds no pause: prepare, then commit."""
    return [
        ("prepare", group.path.parent, "fam"),
        ("commit", group.path.parent, rec.prepared),
    ]


def pause(queue: str, progress: Any) -> tuple[Any, ...]:
    """The event of group fam's pause on ``queue`` while the run writes."""
    return (
        "pause",
        queue,
        "fam",
        "memory-consolidate",
        "memory consolidation in progress",
        55,
        progress,
    )


def prepared_with(model: Any, days: int) -> dict[str, Any]:
    """prepare's keywords but the history, for group fam on 2026-12-08 with ``model``."""
    return {
        "facts": FACTS,
        "today": date(2026, 12, 8),
        "days": days,
        "complete": model,
        "model": "bgprov/bg-model",
        "max_tokens": 1234,
    }


def committed_with(history: Any, **more: Any) -> dict[str, Any]:
    """commit's keywords for group fam at NOW, sent by the operator, and ``more``."""
    return {
        "facts": FACTS,
        "history": history,
        "when": NOW,
        "zone": "Pacific/Auckland",
        "sender": "operator",
        **more,
    }


def test_the_background_model_on_its_own_queue_and_usage_for_a_dry_run(
    home: Path, rec: Recorder, group: Group, config: OrchestratorConfig
) -> None:
    result = run_consolidation(
        Home(home),
        group,
        dry_run=True,
        config=config,
        adapters=adapters,
        sender="operator",
        progress=progress,
        now=NOW,
    )
    assert result is rec.committed
    [queue], [usage], [model] = rec.queues, rec.stores, rec.models
    groups_dir = group.path.parent
    assert rec.events == [
        ("open_queue", Home(home)),
        ("usage", QUEUE_PATH),
        ("background", config, group, usage, adapters),
        ("prepare", groups_dir, "fam"),
        ("commit", groups_dir, rec.prepared),
        ("close", "background"),
        ("close", "usage"),
        ("close", "queue"),
    ]
    history = rec.prepare_kwargs.pop("history")
    check_history(history, group)
    assert rec.prepare_kwargs == prepared_with(model, days=7)
    assert rec.commit_kwargs == committed_with(history, dry_run=True)
    assert rec.prepared is not None
    assert rec.prepared.usage == {"usage_id": "consolidation-1", "calls": 2}
    assert queue.name == "queue"


def test_a_run_that_writes_holds_the_pause_on_a_queue_it_opens_and_closes(
    home: Path, rec: Recorder, group: Group, config: OrchestratorConfig
) -> None:
    given = Usage(rec.events)
    result = run_consolidation(
        Home(home),
        group,
        days=3,
        usage=given,  # type: ignore[arg-type]
        config=config,
        adapters=adapters,
        sender="operator",
        progress=progress,
        now=NOW,
    )
    assert result is rec.committed
    assert rec.stores == []
    [model] = rec.models
    groups_dir = group.path.parent
    assert rec.events == [
        ("background", config, group, given, adapters),
        ("prepare", groups_dir, "fam"),
        ("open_queue", Home(home)),
        pause("queue", progress),
        ("commit", groups_dir, rec.prepared),
        ("resume", "queue", "fam"),
        ("close", "queue"),
        ("close", "background"),
    ]
    history = rec.prepare_kwargs.pop("history")
    check_history(history, group)
    assert rec.prepare_kwargs == prepared_with(model, days=3)
    assert rec.commit_kwargs == committed_with(history)


def test_a_queue_given_holds_the_usage_and_the_pause_and_stays_open(
    home: Path, rec: Recorder, group: Group, config: OrchestratorConfig
) -> None:
    queue = Queue(rec.events, "given")
    run_consolidation(
        Home(home),
        group,
        queue=queue,  # type: ignore[arg-type]
        config=config,
        adapters=adapters,
        progress=progress,
        now=NOW,
    )
    [usage] = rec.stores
    groups_dir = group.path.parent
    assert rec.queues == []
    assert rec.events == [
        ("usage", QUEUE_PATH),
        ("background", config, group, usage, adapters),
        ("prepare", groups_dir, "fam"),
        pause("given", progress),
        ("commit", groups_dir, rec.prepared),
        ("resume", "given", "fam"),
        ("close", "background"),
        ("close", "usage"),
    ]
    assert rec.commit_kwargs["sender"] == ""
    assert rec.prepare_kwargs["days"] == 7


def test_a_model_given_is_asked_and_nothing_is_opened_for_it(
    home: Path, rec: Recorder, group: Group, config: OrchestratorConfig
) -> None:
    def complete(system: str, messages: list[dict[str, Any]], max_tokens: int) -> str:
        raise AssertionError("prepare is replaced")

    run_consolidation(Home(home), group, dry_run=True, complete=complete, config=config, now=NOW)
    assert rec.events == prepare_and_commit(rec, group)
    assert rec.prepare_kwargs["complete"] is complete
    assert rec.prepare_kwargs["model"] == "bgprov/bg-model"
    assert rec.prepared is not None and rec.prepared.usage is None
    assert rec.commit_kwargs["dry_run"] is True


def test_an_offline_group_asks_no_model_and_names_none(
    home: Path, rec: Recorder, config: OrchestratorConfig
) -> None:
    group = make_group(home, provider="offline")
    run_consolidation(Home(home), group, dry_run=True, config=config, now=NOW)
    assert rec.events == prepare_and_commit(rec, group)
    assert rec.prepare_kwargs["complete"] is None
    assert rec.prepare_kwargs["model"] == ""
    assert rec.prepared is not None and rec.prepared.usage is None


def test_nothing_proposed_is_committed_without_a_pause(
    home: Path, rec: Recorder, config: OrchestratorConfig
) -> None:
    rec.proposals = False
    group = make_group(home, provider="offline")
    run_consolidation(Home(home), group, config=config, sender="operator", now=NOW)
    assert rec.events == prepare_and_commit(rec, group)
    assert rec.commit_kwargs == committed_with(rec.prepare_kwargs["history"], dry_run=False)


def test_an_offline_run_that_writes_pauses_on_the_homes_queue(
    home: Path, rec: Recorder, config: OrchestratorConfig
) -> None:
    group = make_group(home, provider="offline")
    run_consolidation(Home(home), group, config=config, now=NOW)
    groups_dir = group.path.parent
    assert rec.events == [
        ("prepare", groups_dir, "fam"),
        ("open_queue", Home(home)),
        pause("queue", None),
        ("commit", groups_dir, rec.prepared),
        ("resume", "queue", "fam"),
        ("close", "queue"),
    ]


@pytest.mark.parametrize(
    ("zone", "moment", "day"),
    [
        ("Pacific/Auckland", NOW, date(2026, 12, 8)),
        ("UTC", NOW, date(2026, 12, 7)),
        ("America/Los_Angeles", NOW + 6 * 3600, date(2026, 12, 7)),  # 2026-12-08 02:00 UTC
    ],
)
def test_the_day_read_to_is_the_groups_day_in_its_time_zone(
    home: Path, rec: Recorder, config: OrchestratorConfig, zone: str, moment: float, day: date
) -> None:
    group = make_group(home, provider="offline", zone=zone)
    run_consolidation(Home(home), group, dry_run=True, config=config, now=moment)
    assert rec.prepare_kwargs["today"] == day
    assert (rec.commit_kwargs["when"], rec.commit_kwargs["zone"]) == (moment, zone)


def test_without_now_the_clock_says_when(
    home: Path, rec: Recorder, config: OrchestratorConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(consolidation, "time", SimpleNamespace(time=lambda: NOW + 86_400.0))
    group = make_group(home, provider="offline")
    run_consolidation(Home(home), group, dry_run=True, config=config)
    assert rec.prepare_kwargs["today"] == date(2026, 12, 9)
    assert rec.commit_kwargs["when"] == NOW + 86_400.0


def test_without_a_configuration_the_homes_is_read(
    home: Path, rec: Recorder, group: Group, config: OrchestratorConfig,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    read: list[Any] = []

    def load(at: Any) -> OrchestratorConfig:
        read.append(at)
        return config

    monkeypatch.setattr(consolidation, "load_config", load)
    run_consolidation(Home(home), group, dry_run=True, adapters=adapters, now=NOW)
    assert read == [Home(home)]
    assert rec.events[2] == ("background", config, group, rec.stores[0], adapters)
    check_history(rec.prepare_kwargs["history"], group)


def test_what_it_opened_is_closed_when_there_are_no_notes(
    home: Path, rec: Recorder, group: Group, config: OrchestratorConfig,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    def none(groups_dir: Path, folder: str, **kwargs: Any) -> mc.Report:
        rec.events.append(("prepare", folder))
        raise mc.NoNotes("no daily notes")

    monkeypatch.setattr(mc, "prepare", none)
    with pytest.raises(mc.NoNotes):
        run_consolidation(Home(home), group, config=config, adapters=adapters, now=NOW)
    assert rec.events[3:] == [
        ("prepare", "fam"),
        ("close", "background"),
        ("close", "usage"),
        ("close", "queue"),
    ]


def test_a_busy_group_closes_the_queue_opened_for_its_pause(
    home: Path, rec: Recorder, config: OrchestratorConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    @contextlib.contextmanager
    def busy(self: Queue, group: str, *args: Any, **kwargs: Any) -> Iterator[None]:
        self.events.append(("pause", group))
        raise GroupBusy("1 turn(s) of fam are still running; nothing was changed")
        yield

    monkeypatch.setattr(Queue, "paused", busy)
    group = make_group(home, provider="offline")
    with pytest.raises(GroupBusy):
        run_consolidation(Home(home), group, config=config, now=NOW)
    assert rec.events == [
        ("prepare", group.path.parent, "fam"),
        ("open_queue", Home(home)),
        ("pause", "fam"),
        ("close", "queue"),
    ]


# the background model's client: the one given for its provider, else its own made
# with the key from orchestrator.yaml's secrets file


def test_the_client_given_is_the_one_of_the_background_models_provider(
    home: Path, group: Group
) -> None:
    asked: list[str] = []

    def client(name: str) -> Any:
        asked.append(name)
        return SimpleNamespace(name=name)

    model = consolidation.BackgroundModel(
        load_config(Home(home)),
        group,
        None,  # type: ignore[arg-type]
        adapters=client,
    )
    assert asked == ["bgprov"]
    assert model.adapter == SimpleNamespace(name="bgprov")
    assert model.label == "bgprov/bg-model"


def test_its_own_client_has_the_key_from_the_secrets_file(
    home: Path, group: Group, monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets = home / "secrets.yaml"
    secrets.write_text("bg-key: sk-from-the-secrets-file\n")
    secrets.chmod(0o600)
    (home / "orchestrator.yaml").write_text(
        "secrets_file: secrets.yaml\nproviders:\n"
        + PROVIDERS.replace("key_env: FAKE_KEY", "key_secret: bg-key")
    )
    made: list[tuple[str, str | None]] = []

    def adapter_for(definition: Any, key: str | None) -> Any:
        made.append((definition.name, key))
        return SimpleNamespace(close=lambda: made.append(("closed", None)))

    monkeypatch.setattr(consolidation, "adapter_for", adapter_for)
    model = consolidation.BackgroundModel(load_config(Home(home)), group, None)  # type: ignore[arg-type]
    model.close()
    assert made == [("bgprov", "sk-from-the-secrets-file"), ("closed", None)]
