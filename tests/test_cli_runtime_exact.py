"""Exact behaviour of the helpers of the container commands (cli/runtime.py): how
open_runtime builds the group runtime from the home's configuration and the engine, the
"running" line and JSON of start and restart, what status asks of the daemon (the groups'
overview, the runner recreations, its facts) and when it falls back to computing them,
today's costs per group in its own day, the currency, the memory cell, the queue summary
with each channel account's health, and the daemon's log (missing, tail, follow, bytes
that are not UTF-8). The engine, the daemon and the stores are fakes."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import orchestrator.image.agent
import orchestrator.image.group
import orchestrator.runtime
import orchestrator.runtime.engine
import orchestrator.runtime.lifecycle
import orchestrator.service.client
import orchestrator.store.chats
import orchestrator.store.messages
import orchestrator.store.usage
from orchestrator import money
from orchestrator.cli import CliContext
from orchestrator.cli import runtime as cli_runtime
from orchestrator.errors import BadInput, DaemonNotRunning, InvalidConfig, OrchestratorError
from orchestrator.runtime.lifecycle import GroupsOverview, GroupStatus, InvalidGroup

NOW = 1_700_000_000.0


def _queue_db(obj: CliContext) -> Path:
    path = obj.home.state_dir / "queue.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


# -- open_runtime --------------------------------------------------------------------


def test_open_runtime_builds_the_group_runtime_on_the_engine(
    obj: CliContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = SimpleNamespace(image="agent-setting", project="proj")
    client = object()
    backend = object()
    seen: list[Any] = []

    def load(home: Any) -> Any:
        seen.append(("load_config", home))
        return config

    def open_backend(*args: Any, **kwargs: Any) -> Any:
        seen.append(("open_backend", args, kwargs))
        return backend

    def image_ref(*args: Any) -> str:
        seen.append(("agent_image_ref", args))
        return "agent:1"

    class Images:
        def __init__(self, *args: Any) -> None:
            self.args = args

    class Runtime:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.args = args
            self.kwargs = kwargs

    monkeypatch.setattr(cli_runtime, "load_config", load)
    monkeypatch.setattr(orchestrator.runtime.engine, "connect", lambda: client)
    monkeypatch.setattr(orchestrator.runtime, "open_backend", open_backend)
    monkeypatch.setattr(orchestrator.image.agent, "agent_image_ref", image_ref)
    monkeypatch.setattr(orchestrator.image.group, "GroupImages", Images)
    monkeypatch.setattr(orchestrator.runtime.lifecycle, "GroupRuntime", Runtime)
    monkeypatch.setattr(
        orchestrator.runtime.lifecycle, "default_skills_root", lambda: Path("/skills")
    )
    made: Any = cli_runtime.open_runtime(obj)
    assert isinstance(made, Runtime)
    home, config_, backend_, image = made.args
    assert (home, config_, backend_) == (obj.home, config, backend)
    assert seen == [
        ("load_config", obj.home),
        ("open_backend", (config,), {"client": client, "home": obj.home}),
    ]
    assert image() == "agent:1"
    assert seen[-1] == ("agent_image_ref", (client, "agent-setting"))
    assert sorted(made.kwargs) == ["group_image", "skills_root"]
    assert made.kwargs["skills_root"] == Path("/skills")
    images = made.kwargs["group_image"]
    assert isinstance(images, Images)
    assert images.args[0] is client
    assert images.args[1]() == "proj"


# -- _running ------------------------------------------------------------------------


def test_running_says_the_container_runs(capsys: pytest.CaptureFixture[str]) -> None:
    info = SimpleNamespace(name="orch-fam", id="abc123", state="running")
    cli_runtime._running(info, False)
    assert capsys.readouterr().out == "orch-fam is running\n"
    cli_runtime._running(info, True)
    assert capsys.readouterr().out == (
        '{\n  "container": "orch-fam",\n  "id": "abc123",\n  "state": "running"\n}\n'
    )


# -- _groups_from_daemon and the recreations -----------------------------------------


def _status(folder: str, **values: Any) -> GroupStatus:
    fields: dict[str, Any] = {
        "folder": folder,
        "name": folder.title(),
        "container": f"orch-{folder}",
        "state": "running",
        "uptime_seconds": 60.0,
        "memory_bytes": 2048,
        "drift": False,
        "last_activity": None,
    }
    fields.update(values)
    return GroupStatus(**fields)


def _overview() -> GroupsOverview:
    return GroupsOverview(
        [_status("fam"), _status("work", state="exited", memory_bytes=None)],
        [InvalidGroup("broken", "group.yaml: bad")],
        {"fam": 10, "work": 20},
        {"fam": 100, "work": 200},
        {"fam": "Europe/Berlin", "work": "UTC"},
    )


class Daemon:
    """control_request as the daemon answers it: one answer (or error) per request."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.answers: list[Any] = []
        self.asked: list[Any] = []
        monkeypatch.setattr(orchestrator.service.client, "control_request", self.request)

    def request(self, home: Any, message: Any, timeout: float = 330.0) -> Any:
        self.asked.append((home, message, timeout))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_groups_from_the_daemon(obj: CliContext, monkeypatch: pytest.MonkeyPatch) -> None:
    daemon = Daemon(monkeypatch)
    answer = {"ok": True, **_overview().to_dict(), "runner_recreations": {"fam": 2}}
    daemon.answers.append(answer)
    assert cli_runtime._groups_from_daemon(obj) == (_overview(), {"fam": 2})
    assert daemon.asked == [(obj.home, {"op": "groups"}, 60)]


def test_groups_from_a_daemon_that_cannot_answer_them_are_none(
    obj: CliContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = Daemon(monkeypatch)
    whole = _overview().to_dict()
    daemon.answers.extend(
        [
            DaemonNotRunning("no daemon"),
            OrchestratorError("failed to answer"),
            {"ok": False, **whole},
            {**whole},
            {"ok": True, "invalid": []},  # KeyError
            {"ok": True, "groups": [None], "invalid": []},  # TypeError
            {"ok": True, "groups": [{**whole["groups"][0], "disk_bytes": "x"}], "invalid": []},
        ]
    )
    for _ in range(7):
        assert cli_runtime._groups_from_daemon(obj) is None
    assert daemon.answers == []
    # any other error is not swallowed
    daemon.answers.append(RuntimeError("boom"))
    with pytest.raises(RuntimeError):
        cli_runtime._groups_from_daemon(obj)


def test_groups_from_the_daemon_without_recreations(
    obj: CliContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = Daemon(monkeypatch)
    daemon.answers.append({"ok": True, "groups": [], "invalid": []})
    assert cli_runtime._groups_from_daemon(obj) == (GroupsOverview([], [], {}, {}, {}), {})


def test_runner_recreations_are_asked_with_a_short_timeout(
    obj: CliContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = Daemon(monkeypatch)
    daemon.answers.extend(
        [
            {"ok": True, "runner_recreations": {"fam": 3, "work": 1}},
            DaemonNotRunning("no daemon"),
            OrchestratorError("failed"),
        ]
    )
    assert cli_runtime._runner_recreations(obj) == {"fam": 3, "work": 1}
    assert cli_runtime._runner_recreations(obj) == {}
    assert cli_runtime._runner_recreations(obj) == {}
    assert daemon.asked == [(obj.home, {"op": "status"}, 5)] * 3


def test_recreations_keep_only_whole_counts() -> None:
    assert cli_runtime._recreations({}) == {}
    assert cli_runtime._recreations({"runner_recreations": None}) == {}
    assert cli_runtime._recreations({"runner_recreations": [["fam", 1]]}) == {}
    assert cli_runtime._recreations({"runner_recreations": {}}) == {}
    found = cli_runtime._recreations(
        {"runner_recreations": {"fam": 2, "work": "3", "x": 1.5, 7: 4, "none": None}}
    )
    assert found == {"fam": 2, "7": 4}
    assert [type(k) for k in found] == [str, str]
    flagged = cli_runtime._recreations({"runner_recreations": {"fam": True}})
    assert flagged == {"fam": 1}
    assert type(flagged["fam"]) is int  # shown as 1 in JSON, not true


# -- _costs_today --------------------------------------------------------------------


class Usage:
    made: list[Any] = []

    def __init__(self, path: Path) -> None:
        self.path = path
        self.asked: list[Any] = []
        self.closed = False
        Usage.made.append(self)

    def priced_since(self, starts: Any) -> dict[str, float]:
        self.asked.append(dict(starts))
        return {"fam": 0.25}

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def usage(monkeypatch: pytest.MonkeyPatch) -> type[Usage]:
    Usage.made = []
    monkeypatch.setattr(orchestrator.store.usage, "UsageStore", Usage)
    monkeypatch.setattr(cli_runtime.time, "time", lambda: NOW)
    return Usage


def test_costs_today_without_a_queue_are_none(obj: CliContext, usage: type[Usage]) -> None:
    assert cli_runtime._costs_today(obj, {"fam": "UTC"}) == {}
    assert usage.made == []


def test_costs_today_are_priced_since_each_groups_own_midnight(
    obj: CliContext, usage: type[Usage]
) -> None:
    path = _queue_db(obj)
    zones = {"fam": "Europe/Berlin", "work": "Pacific/Auckland"}
    assert cli_runtime._costs_today(obj, zones) == {"fam": 0.25}
    [store] = usage.made
    assert store.path == path
    assert store.asked == [
        {
            "fam": money.day_start(NOW, "Europe/Berlin"),
            "work": money.day_start(NOW, "Pacific/Auckland"),
        }
    ]
    assert store.asked[0]["fam"] != store.asked[0]["work"]
    assert store.closed is True


def test_costs_today_close_the_store_when_reading_fails(
    obj: CliContext, usage: type[Usage], monkeypatch: pytest.MonkeyPatch
) -> None:
    _queue_db(obj)

    def broken(self: Usage, starts: Any) -> Any:
        raise RuntimeError("read failed")

    monkeypatch.setattr(Usage, "priced_since", broken)
    with pytest.raises(RuntimeError):
        cli_runtime._costs_today(obj, {"fam": "UTC"})
    assert usage.made[0].closed is True


def test_costs_today_of_a_store_of_another_schema_are_none(
    obj: CliContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    _queue_db(obj)

    def refused(path: Path) -> Any:
        raise OrchestratorError("state/queue.db has schema 99")

    monkeypatch.setattr(orchestrator.store.usage, "UsageStore", refused)
    assert cli_runtime._costs_today(obj, {"fam": "UTC"}) == {}


# -- _currency and _memory -----------------------------------------------------------


def test_currency_of_the_configuration_or_the_default(
    obj: CliContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[Any] = []

    def load(home: Any) -> Any:
        asked.append(home)
        return SimpleNamespace(currency="EUR")

    monkeypatch.setattr(cli_runtime, "load_config", load)
    assert cli_runtime._currency(obj) == "EUR"
    assert asked == [obj.home]

    def invalid(home: Any) -> Any:
        raise InvalidConfig("orchestrator.yaml: bad")

    monkeypatch.setattr(cli_runtime, "load_config", invalid)
    assert cli_runtime._currency(obj) == "USD"


def test_memory_cell() -> None:
    assert cli_runtime._memory(SimpleNamespace(memory_bytes=1536, state="running")) == "1.5 KiB"
    assert cli_runtime._memory(SimpleNamespace(memory_bytes=0, state="exited")) == "0 B"
    assert cli_runtime._memory(SimpleNamespace(memory_bytes=None, state="running")) == "?"
    assert cli_runtime._memory(SimpleNamespace(memory_bytes=None, state="exited")) == "-"
    assert cli_runtime._memory(SimpleNamespace(memory_bytes=None, state="absent")) == "-"


# -- _daemon_summary -----------------------------------------------------------------


def test_daemon_summary_is_what_the_daemon_wrote(
    obj: CliContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[Any] = []
    facts = {"pid": 42, "release": "9.9"}

    def daemon_facts(home: Any) -> Any:
        asked.append(home)
        return facts

    monkeypatch.setattr(orchestrator.service.client, "daemon_facts", daemon_facts)
    assert cli_runtime._daemon_summary(obj) is facts
    assert asked == [obj.home]


def test_daemon_summary_without_a_daemon_is_none(obj: CliContext) -> None:
    assert cli_runtime._daemon_summary(obj) is None


# -- _queue_summary and channel_health -----------------------------------------------


class Queue:
    made: list[Any] = []

    def __init__(self, path: Path) -> None:
        self.path = path
        self.closed = False
        Queue.made.append(self)

    def counts(self) -> dict[str, int]:
        return {"queued": 1, "dead": 1}

    def dead_letters(self) -> list[Any]:
        return [SimpleNamespace(to_dict=lambda: {"id": "m1", "group": "fam", "error": "x"})]

    def pauses(self) -> list[Any]:
        return [SimpleNamespace(to_dict=lambda: {"group": "fam", "holder": "budget"})]

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def queue(monkeypatch: pytest.MonkeyPatch) -> type[Queue]:
    Queue.made = []
    monkeypatch.setattr(orchestrator.store.messages, "MessageQueue", Queue)
    return Queue


def test_queue_summary_without_a_queue_is_none(obj: CliContext, queue: type[Queue]) -> None:
    assert cli_runtime._queue_summary(obj) is None
    assert queue.made == []


def test_queue_summary(
    obj: CliContext, queue: type[Queue], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _queue_db(obj)
    seen: list[Any] = []

    def health(obj_: Any, queue_: Any) -> list[Any]:
        seen.append((obj_, queue_))
        return [{"account": "tg", "kind": "telegram", "health": None}]

    monkeypatch.setattr(cli_runtime, "channel_health", health)
    assert cli_runtime._queue_summary(obj) == {
        "counts": {"queued": 1, "dead": 1},
        "dead": [{"id": "m1", "group": "fam", "error": "x"}],
        "pauses": [{"group": "fam", "holder": "budget"}],
        "channels": [{"account": "tg", "kind": "telegram", "health": None}],
    }
    [made] = queue.made
    assert made.path == path
    assert seen == [(obj, made)]
    assert made.closed is True


def test_queue_summary_closes_the_queue_when_reading_fails(
    obj: CliContext, queue: type[Queue], monkeypatch: pytest.MonkeyPatch
) -> None:
    _queue_db(obj)

    def broken(self: Queue) -> Any:
        raise RuntimeError("locked")

    monkeypatch.setattr(Queue, "counts", broken)
    with pytest.raises(RuntimeError):
        cli_runtime._queue_summary(obj)
    assert queue.made[0].closed is True


def test_channel_health_of_each_account_in_name_order(
    obj: CliContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    accounts = {
        "zz": SimpleNamespace(kind="slack"),
        "aa": SimpleNamespace(kind="telegram"),
        "mm": SimpleNamespace(kind="matrix"),
    }
    monkeypatch.setattr(
        cli_runtime, "load_config", lambda home: SimpleNamespace(channel_accounts=accounts)
    )
    the_queue = object()

    class Chats:
        def __init__(self, queue_: Any) -> None:
            assert queue_ is the_queue
            self.queue = queue_

        def health(self, name: str) -> Any:
            return {"state": "connected"} if name == "aa" else None

    monkeypatch.setattr(orchestrator.store.chats, "ChatStore", Chats)
    assert cli_runtime.channel_health(obj, the_queue) == [
        {"account": "aa", "kind": "telegram", "health": {"state": "connected"}},
        {"account": "mm", "kind": "matrix", "health": None},
        {"account": "zz", "kind": "slack", "health": None},
    ]


def test_channel_health_without_a_valid_configuration_is_empty(
    obj: CliContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    def invalid(home: Any) -> Any:
        raise InvalidConfig("orchestrator.yaml: bad")

    monkeypatch.setattr(cli_runtime, "load_config", invalid)
    assert cli_runtime.channel_health(obj, object()) == []


def test_channel_health_without_accounts_is_empty(obj: CliContext) -> None:
    assert cli_runtime.channel_health(obj, object()) == []


# -- _daemon_log ---------------------------------------------------------------------


def _log(obj: CliContext, data: bytes) -> Path:
    path = obj.home.state_dir / "orchestrator.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_daemon_log_missing(obj: CliContext) -> None:
    with pytest.raises(BadInput) as missing:
        cli_runtime._daemon_log(obj, False, None)
    path = obj.home.state_dir / "orchestrator.log"
    assert missing.value.message == (
        f"{path} does not exist: the daemon has not run in the background here"
    )
    assert missing.value.hint == "a daemon started with `serve` logs to its terminal"
    assert missing.value.__suppress_context__


def test_daemon_log_whole_and_its_tail(obj: CliContext, capsys: pytest.CaptureFixture[str]) -> None:
    _log(obj, b"one\ntwo \t\nthree \x1b[31mred\nbad \xff byte\n")
    cli_runtime._daemon_log(obj, False, None)
    assert capsys.readouterr().out == ("one\ntwo \\t\nthree \\e[31mred\nbad \ufffd byte\n")
    cli_runtime._daemon_log(obj, False, 2)
    assert capsys.readouterr().out == "three \\e[31mred\nbad \ufffd byte\n"
    cli_runtime._daemon_log(obj, False, 9)
    assert capsys.readouterr().out.count("\n") == 4


def test_daemon_log_of_an_empty_file(obj: CliContext, capsys: pytest.CaptureFixture[str]) -> None:
    _log(obj, b"")
    cli_runtime._daemon_log(obj, False, None)
    cli_runtime._daemon_log(obj, False, 3)
    assert capsys.readouterr().out == ""


class Stop(Exception):
    pass


def appending_naps(monkeypatch: pytest.MonkeyPatch, path: Path, later: list[bytes]) -> list[float]:
    """time.sleep replaced: each nap appends the next of ``later`` to ``path``, the nap
    after the last raises Stop; returns the seconds each nap was asked for."""
    naps: list[float] = []

    def sleep(seconds: float) -> None:
        naps.append(seconds)
        if not later:
            raise Stop
        with open(path, "ab") as handle:
            handle.write(later.pop(0))

    monkeypatch.setattr(cli_runtime.time, "sleep", sleep)
    return naps


def test_daemon_log_follows_new_lines(
    obj: CliContext, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _log(obj, b"old\n")
    naps = appending_naps(monkeypatch, path, [b"new X\n", b"tab\t \r\n", b"\xfe\n"])
    with pytest.raises(Stop):
        cli_runtime._daemon_log(obj, True, None)
    assert capsys.readouterr().out == "old\nnew X\ntab\\t \\r\n\ufffd\n"
    assert naps == [0.3, 0.3, 0.3, 0.3]


def test_daemon_log_follows_after_its_tail(
    obj: CliContext, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _log(obj, b"a\nb\nc\n")
    appending_naps(monkeypatch, path, [b"d\ne\n"])
    with pytest.raises(Stop):
        cli_runtime._daemon_log(obj, True, 1)
    assert capsys.readouterr().out == "c\nd\ne\n"


def test_daemon_log_is_read_as_bytes(obj: CliContext, monkeypatch: pytest.MonkeyPatch) -> None:
    _log(obj, b"x\n")
    modes: list[Any] = []
    real_open = open

    def spy(path: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        modes.append(mode)
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr("builtins.open", spy)
    cli_runtime._daemon_log(obj, False, None)
    assert modes == ["rb"]


def test_daemon_log_tail_of_zero_shows_only_new_lines(
    obj: CliContext, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _log(obj, b"a\nb\n")
    cli_runtime._daemon_log(obj, False, 0)
    assert capsys.readouterr().out == ""
    appending_naps(monkeypatch, path, [b"c\n"])
    with pytest.raises(Stop):
        cli_runtime._daemon_log(obj, True, 0)
    assert capsys.readouterr().out == "c\n"


# -- the commands, on a fake runtime -------------------------------------------------


class FakeRuntime:
    """The GroupRuntime calls the commands make, answered from fixed values."""

    def __init__(self) -> None:
        self.calls: list[Any] = []
        self.store = SimpleNamespace(find=self.find)
        self.backend = SimpleNamespace(inspect=self.inspect, logs=self.logs)
        self.exists = True
        self.lines = ["one", "two \x1b[2J"]
        self.actions: list[Any] = []

    def find(self, name: str) -> Any:
        self.calls.append(("find", name))
        return SimpleNamespace(folder=name)

    def container_name(self, group: Any) -> str:
        return f"orch-{group.folder}"

    def ensure_running(self, group: Any) -> Any:
        self.calls.append(("ensure_running", group.folder))
        return SimpleNamespace(name=f"orch-{group.folder}", id="id1", state="running")

    def restart(self, group: Any) -> Any:
        self.calls.append(("restart", group.folder))
        return SimpleNamespace(name=f"orch-{group.folder}", id="id2", state="running")

    def stop(self, group: Any) -> bool:
        self.calls.append(("stop", group.folder))
        return group.folder == "fam"

    def inspect(self, name: str) -> Any:
        return object() if self.exists else None

    def logs(self, name: str, *, follow: bool, tail: int | None) -> Any:
        self.calls.append(("logs", name, follow, tail))
        return iter(self.lines)

    def overview(self) -> GroupsOverview:
        self.calls.append(("overview",))
        return _overview()

    def plan(self) -> list[Any]:
        self.calls.append(("plan",))
        return self.actions

    def reconcile(self) -> list[Any]:
        self.calls.append(("reconcile",))
        return self.actions


@pytest.fixture
def fake_runtime(monkeypatch: pytest.MonkeyPatch) -> FakeRuntime:
    runtime = FakeRuntime()
    monkeypatch.setattr(cli_runtime, "open_runtime", lambda obj: runtime)
    return runtime


def _cli(obj: CliContext, *args: str) -> Any:
    from click.testing import CliRunner

    from orchestrator.cli import cli

    return CliRunner().invoke(cli, ["--home", str(obj.home.root), *args])


def test_start_stop_and_restart(obj: CliContext, fake_runtime: FakeRuntime) -> None:
    assert _cli(obj, "start", "fam").output == "orch-fam is running\n"
    started = _cli(obj, "start", "fam", "--json")
    assert json.loads(started.output) == {"container": "orch-fam", "id": "id1", "state": "running"}
    assert _cli(obj, "restart", "fam").output == "orch-fam is running\n"
    assert json.loads(_cli(obj, "restart", "fam", "--json").output)["id"] == "id2"
    assert _cli(obj, "stop", "fam").output == "stopped orch-fam\n"
    assert _cli(obj, "stop", "work").output == "orch-work was not running\n"
    assert json.loads(_cli(obj, "stop", "work", "--json").output) == {
        "container": "orch-work",
        "stopped": False,
    }
    assert [c for c in fake_runtime.calls if c[0] != "find"] == [
        ("ensure_running", "fam"),
        ("ensure_running", "fam"),
        ("restart", "fam"),
        ("restart", "fam"),
        ("stop", "fam"),
        ("stop", "work"),
        ("stop", "work"),
    ]


def test_logs_of_a_container(obj: CliContext, fake_runtime: FakeRuntime) -> None:
    shown = _cli(obj, "logs", "fam", "--tail", "5")
    assert (shown.exit_code, shown.output) == (0, "one\ntwo \\e[2J\n")
    assert fake_runtime.calls[-1] == ("logs", "orch-fam", False, 5)
    _cli(obj, "logs", "fam", "-f")
    assert fake_runtime.calls[-1] == ("logs", "orch-fam", True, None)
    fake_runtime.exists = False
    missing = _cli(obj, "logs", "fam")
    assert missing.exit_code == 1
    assert missing.stderr == "orch-fam does not exist; start it with: orchestrator start fam\n"


def test_logs_wants_one_of_a_name_and_daemon(obj: CliContext, fake_runtime: FakeRuntime) -> None:
    both = _cli(obj, "logs", "fam", "--daemon")
    assert both.exit_code == 2
    assert "give NAME or --daemon, not both" in both.stderr
    neither = _cli(obj, "logs")
    assert neither.exit_code == 2
    assert "give a group NAME, or --daemon for the daemon's log" in neither.stderr
    assert fake_runtime.calls == []


def test_reconcile_prints_the_plan(
    obj: CliContext, fake_runtime: FakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.runtime.reconcile import Action

    assert _cli(obj, "reconcile").output == "no containers to reconcile\n"
    assert _cli(obj, "reconcile", "--json").output == "[]\n"
    fake_runtime.actions = [
        Action("adopt", "orch-fam", "fam", "current"),
        Action("remove-orphan", "orch-old", None, "no group"),
    ]
    table = _cli(obj, "reconcile", "--dry-run")
    assert table.output == (
        "ACTION         CONTAINER  REASON\n"
        "adopt          orch-fam   current\n"
        "remove-orphan  orch-old   no group\n"
    )
    assert fake_runtime.calls == [("reconcile",), ("reconcile",), ("plan",)]
    naps: list[float] = []

    def sleep(seconds: float) -> None:
        naps.append(seconds)
        if len(naps) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(cli_runtime.time, "sleep", sleep)
    monkeypatch.setattr(cli_runtime.time, "strftime", lambda fmt: f"<{fmt}>")
    watched = _cli(obj, "reconcile", "--watch", "7")
    assert watched.output == (
        "<%H:%M:%S> remove-orphan orch-old: no group\n"
        "<%H:%M:%S> remove-orphan orch-old: no group\n"
        "\naborted\n"
    )
    assert naps == [7, 7]


def _no_disk_no_history(monkeypatch: pytest.MonkeyPatch, gaps: dict[str, Any]) -> None:
    import orchestrator.groups.disk
    import orchestrator.memory.history

    monkeypatch.setattr(orchestrator.groups.disk, "free_space", lambda path: None)

    class History:
        def __init__(self, groups_dir: Path, folder: str) -> None:
            self.folder = folder

        def gap(self) -> Any:
            return gaps.get(self.folder)

    monkeypatch.setattr(orchestrator.memory.history, "History", History)


def test_status_without_a_daemon_computes_the_overview(
    obj: CliContext, fake_runtime: FakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.versions import RELEASE

    _no_disk_no_history(monkeypatch, {})
    monkeypatch.setattr(cli_runtime, "_daemon_summary", lambda obj: None)
    asked: list[str] = []
    monkeypatch.setattr(cli_runtime, "_groups_from_daemon", lambda obj: asked.append("groups"))
    monkeypatch.setattr(cli_runtime, "_runner_recreations", lambda obj: asked.append("status"))
    shown = _cli(obj, "status")
    assert shown.exit_code == 0, shown.output
    assert shown.output.splitlines() == [
        "daemon: not running (messages are not delivered; start it: orchestrator up); "
        f"release {RELEASE}",
        "GROUP   CONTAINER  STATE                     UPTIME  MEM"
        "ORY   DISK          DRIFT  LAST ACTIVITY  COST TODAY",
        "fam     orch-fam   running                   60s     2.0"
        " KiB  10 B / 100 B  no     never          -",
        "work    orch-work  exited                    60s     -  "
        "      20 B / 200 B  no     never          -",
        "broken  -          INVALID: group.yaml: bad  -       -  "
        "      -             -      -              -",
    ]
    assert asked == []
    assert fake_runtime.calls == [("overview",)]


def test_status_with_a_daemon_shows_its_overview_queue_channels_and_notes(
    obj: CliContext, fake_runtime: FakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    import orchestrator.groups.disk
    from orchestrator.groups.disk import FreeSpace
    from orchestrator.memory.history import Gap
    from orchestrator.versions import EARLIEST, RELEASE

    gap = Gap(0.0, "disk full\nforged", 1.0)
    _no_disk_no_history(monkeypatch, {"work": gap})
    spaces = iter([FreeSpace("/g", 1024**3, 4 * 1024**3), FreeSpace("/s", 1024**3, 4 * 1024**3)])
    monkeypatch.setattr(orchestrator.groups.disk, "free_space", lambda path: next(spaces))
    monkeypatch.setattr(
        cli_runtime,
        "_daemon_summary",
        lambda obj: {"pid": 42, "started": NOW - 90, "channels": {"cli": "sock"}},
    )
    monkeypatch.setattr(cli_runtime, "_groups_from_daemon", lambda obj: (_overview(), {"work": 2}))
    monkeypatch.setattr(
        cli_runtime,
        "_queue_summary",
        lambda obj: {
            "counts": {"queued": 3, "dead": 1},
            "dead": [{"id": "m9", "group": "fam", "error": "boom\x1b[1m"}],
            "pauses": [{"group": "fam", "holder": "budget", "reason": "cap\nreached"}],
            "channels": [
                {"account": "tg", "kind": "telegram", "health": None},
                {
                    "account": "sl",
                    "kind": "slack",
                    "health": {"state": "failed", "messages_in": 4, "last_error": "x" * 130},
                },
            ],
        },
    )
    monkeypatch.setattr(cli_runtime, "_costs_today", lambda obj, zones: {"fam": 0.5})
    monkeypatch.setattr(cli_runtime, "_currency", lambda obj: "EUR")
    monkeypatch.setattr(cli_runtime.time, "time", lambda: NOW)
    shown = _cli(obj, "status")
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert lines[:2] == [
        f"daemon: running, release {EARLIEST}, pid 42, up 90s; cli sock",
        f"  this command is release {RELEASE}: restart the daemon to run it (orchestrator down, "
        "then orchestrator up; it upgrades the home at its start)",
    ]
    assert lines[2:7] == [
        "queue: 3 queued, 0 in flight, 0 done, 1 dead",
        "",
        "channel tg (telegram): never started",
        f"channel sl (slack): failed; 4 in, 0 out; last error: {'x' * 120}",
        "",
    ]
    assert lines[8].split() == [
        "fam", "orch-fam", "running", "(paused)", "60s", "2.0", "KiB", "10", "B", "/",
        "100", "B", "no", "never", "0.5000", "EUR",
    ]  # fmt: skip
    assert lines[11:] == [
        "paused fam (budget): cap\\nreached",
        "runner work: its container was recreated 2 time(s) since the daemon started: "
        "it ran but nothing answered on its runner socket",
        "history work: not recording since 1970-01-01 00:00:00 UTC: disk full\\nforged "
        "(changes found once it records again are unattributed)",
        "  dead m9 (fam): boom\\e[1m  -> orchestrator retry m9",
        "disk: 1.0 GiB free of 4.0 GiB (/g)",
    ]
    assert fake_runtime.calls == []


def test_status_json(
    obj: CliContext, fake_runtime: FakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.versions import RELEASE

    _no_disk_no_history(monkeypatch, {})
    monkeypatch.setattr(cli_runtime, "_daemon_summary", lambda obj: {"pid": 7})
    monkeypatch.setattr(cli_runtime, "_groups_from_daemon", lambda obj: None)
    monkeypatch.setattr(cli_runtime, "_runner_recreations", lambda obj: {"fam": 1})
    shown = _cli(obj, "status", "--json")
    data = json.loads(shown.output)
    assert data["release"] == RELEASE
    assert data["daemon"] == {"pid": 7}
    assert data["groups"][0] == {
        **_status("fam").to_dict(),
        "disk_bytes": 10,
        "disk_limit_bytes": 100,
        "paused": None,
        "history_gap": None,
        "runner_recreations": 1,
        "cost_today": None,
        "currency": "USD",
    }
    assert data["groups"][1]["runner_recreations"] == 0
    assert data["invalid_groups"] == [{"folder": "broken", "problem": "group.yaml: bad"}]
    assert (data["queue"], data["free_space"]) == (None, [])
    assert fake_runtime.calls == [("overview",)]
