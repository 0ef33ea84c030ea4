"""Exact behaviour of ``orchestrator group`` (cli/group.py): the list from the running
daemon (the request, its timeout, the answers it takes and the ones it falls back from,
the path shown as this home sees it), the learned-behaviors line of ``group show`` in
each state, and ``group remove``'s container, scheduled tasks and images: what is asked
of the engine (and within which timeout), what is printed on stdout and on stderr, and
what happens when the engine is away. The daemon's client, the engine and the container
backend are faked at their boundary; the home, its groups and its state database are
real."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner, Result

from orchestrator.cli import cli
from orchestrator.cli import group as cli_group
from orchestrator.cli.group import LISTING_KEYS, _learned_line
from orchestrator.errors import DaemonNotRunning, EngineUnreachable, ImageMissing
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig, TaskSettings
from orchestrator.home import Home
from orchestrator.image.group import group_repository
from orchestrator.protocol import LEARNED_FILE
from orchestrator.runtime.base import LABEL_GROUP, LABEL_HOME, ContainerInfo
from orchestrator.runtime.fake import FakeBackend
from orchestrator.store.messages import QUEUE_FILE, open_queue
from orchestrator.store.tasks import TaskStore
from orchestrator.units import human_bytes

PROJECT = "tp"
# 2026-03-04 05:06:00 UTC; 10:36 in Asia/Kolkata (UTC+05:30)
MODIFIED = 1772600760.0


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def run(home: Path):  # type: ignore[no-untyped-def]
    runner = CliRunner(env={"ORCHESTRATOR_PROJECT": PROJECT})

    def invoke(*args: str, input: str | None = None) -> Result:
        return runner.invoke(cli, ["--home", str(home), *args], input=input, catch_exceptions=False)

    return invoke


@pytest.fixture
def kolkata(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A local time zone far from UTC, so that a time shown in local time differs."""
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def _add(home: Path, name: str = "fam", **fields: Any) -> Any:
    return GroupStore(Home(home)).add(GroupConfig(name=name, **fields))


# --- group list, from the daemon ---------------------------------------------------------


def _row(folder: str, name: str | None = None, *, valid: bool = True) -> dict[str, Any]:
    return {
        "folder": folder,
        "path": f"/srv/orchestrator/groups/{folder}",  # as the daemon's container sees it
        "valid": valid,
        "name": name if valid else None,
        "provider": "claude" if valid else None,
        "problem": None if valid else "has no group.yaml",
    }


class FakeDaemon:
    """The daemon's client: its facts (None: no daemon) and its answer to a request."""

    def __init__(self, answer: Any, facts: dict[str, Any] | None = None) -> None:
        self.answer = answer
        self.facts = facts
        self.asked_facts: list[Path] = []
        self.requests: list[tuple[Path, Any, dict[str, Any]]] = []

    def daemon_facts(self, home: Home) -> dict[str, Any] | None:
        self.asked_facts.append(home.root)
        return self.facts

    def control_request(self, home: Home, *args: Any, **kwargs: Any) -> Any:
        self.requests.append((home.root, args, kwargs))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def _daemon(monkeypatch: pytest.MonkeyPatch, answer: Any, running: bool = True) -> FakeDaemon:
    import orchestrator.service.client

    daemon = FakeDaemon(answer, {"pid": 4242} if running else None)
    monkeypatch.setattr(orchestrator.service.client, "daemon_facts", daemon.daemon_facts)
    monkeypatch.setattr(orchestrator.service.client, "control_request", daemon.control_request)
    return daemon


def test_the_list_comes_from_the_running_daemon(
    run: Any, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _add(home, "Local only", creators=("alice",))  # the daemon's list wins over the disk
    rows = [_row("fam", "Family"), _row("work", valid=False)]
    daemon = _daemon(monkeypatch, {"ok": True, "groups": rows})
    result = run("group", "list", "--json")
    assert result.exit_code == 0 and result.stderr == ""
    assert json.loads(result.stdout) == [
        {**rows[0], "path": str(home / "groups/fam")},
        {**rows[1], "path": str(home / "groups/work")},
    ]
    assert daemon.asked_facts == [home]
    assert daemon.requests == [(home, ({"op": "listing"},), {"timeout": 60})]
    table = run("group", "list")
    assert table.exit_code == 0 and table.stderr == ""
    assert table.stdout == (
        "FOLDER  NAME    PROVIDER  STATUS\n"
        "fam     Family  claude    ok\n"
        "work    -       -         INVALID: has no group.yaml\n"
    )


def test_the_daemon_listing_keeps_its_rows_keys_and_order(
    run: Any, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert LISTING_KEYS == ("folder", "path", "valid", "name", "provider", "problem")
    _daemon(monkeypatch, {"ok": True, "groups": []})
    assert json.loads(run("group", "list", "--json").stdout) == []
    assert run("group", "list").stdout == (
        f"no groups in {home / 'groups'}; add one with: orchestrator group add NAME\n"
    )


def test_no_daemon_no_request(run: Any, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _add(home, "fam")
    daemon = _daemon(monkeypatch, {"ok": True, "groups": [_row("other", "Other")]}, running=False)
    result = run("group", "list", "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == [
        {
            "folder": "fam",
            "path": str(home / "groups/fam"),
            "valid": True,
            "name": "fam",
            "provider": "offline",
            "problem": None,
        }
    ]
    assert daemon.asked_facts == [home] and daemon.requests == []


LOCAL = "FOLDER  NAME  PROVIDER  STATUS\nfam     fam   offline   ok\n"


@pytest.mark.parametrize(
    "answer",
    [
        DaemonNotRunning("no orchestrator daemon answers at x", hint="start it"),
        {"ok": False, "error": "unknown op 'listing'"},  # an older release
        {"ok": False, "groups": [_row("other", "Other")]},
        {"ok": True},
        {"ok": True, "groups": None},
        {"ok": True, "groups": {"folder": "other"}},
        {"ok": True, "groups": [list(LISTING_KEYS)]},
        {"ok": True, "groups": [tuple(LISTING_KEYS)]},
        {"ok": True, "groups": ["other"]},
        {"ok": True, "groups": [_row("other", "Other"), {"folder": "two", "name": "Two"}]},
        {"ok": True, "groups": [{k: _row("other", "O")[k] for k in reversed(LISTING_KEYS)}]},
        {"ok": True, "groups": [{**_row("other", "Other"), "extra": 1}]},
    ],
    ids=[
        "not-running",
        "refused",
        "not-ok-with-groups",
        "no-groups",
        "groups-none",
        "groups-a-dict",
        "a-row-a-list",
        "a-row-a-tuple",
        "a-row-a-string",
        "a-row-short",
        "a-row-reordered",
        "a-row-longer",
    ],
)
def test_an_answer_not_understood_reads_the_disk(
    run: Any, home: Path, monkeypatch: pytest.MonkeyPatch, answer: Any
) -> None:
    _add(home, "fam")
    daemon = _daemon(monkeypatch, answer)
    result = run("group", "list")
    assert (result.exit_code, result.stdout, result.stderr) == (0, LOCAL, "")
    assert daemon.requests == [(home, ({"op": "listing"},), {"timeout": 60})]


# --- group show: the learned-behaviors line ---------------------------------------------


def _store(**fields: Any) -> dict[str, Any]:
    store: dict[str, Any] = {
        "path": "/h/groups/fam/learned-behaviors.md",
        "exists": True,
        "size": 2048,
        "modified": MODIFIED,
        "problem": None,
        "writers": ["alice", "bob"],
        "pending": [],
    }
    return {**store, **fields}


def test_the_learned_line_of_a_file(kolkata: None) -> None:
    assert (
        _learned_line(_store()) == "2.0 KiB, modified 2026-03-04 05:06 UTC; changed by alice, bob"
    )
    assert _learned_line(_store(writers=["alice"], pending=[{"id": 1}])) == (
        "2.0 KiB, modified 2026-03-04 05:06 UTC; changed by alice; 1 change(s) wait for approval"
    )
    assert _learned_line(_store(pending=[{"id": 1}, {"id": 2}])) == (
        "2.0 KiB, modified 2026-03-04 05:06 UTC; changed by alice, bob; "
        "2 change(s) wait for approval"
    )


def test_the_learned_line_without_a_file_or_writers() -> None:
    assert _learned_line(_store(exists=False, size=0, modified=None, writers=[])) == (
        "empty (no file yet); changed by nobody (no creators)"
    )


def test_the_learned_line_of_a_problem() -> None:
    assert _learned_line(_store(problem="not a regular file", writers=[])) == (
        "PROBLEM: not a regular file; changed by nobody (no creators)"
    )
    # a problem is shown whether or not the file is there
    assert _learned_line(_store(problem="Permission denied", exists=False, modified=None)) == (
        "PROBLEM: Permission denied; changed by alice, bob"
    )


def _show_lines(group: Any, learned: str, creators: str = "alice, bob") -> str:
    files = [p for p in group.memory_dir.rglob("*") if p.is_file()]
    size = human_bytes(sum(p.stat().st_size for p in files))
    root = group.path
    return (
        f"fam ({group.folder})\n"
        "  provider:               offline / offline-rules\n"
        f"  creators:               {creators}\n"
        "  members:                -\n"
        "  chats:                  - (orchestrator bind, or pair)\n"
        "  unknown senders:        drop\n"
        "  session mode:           per-chat\n"
        "  container:              memory 512.0 MiB, cpus 1, pids 256, network none, "
        "idle timeout 1800s, disk 1.0 GiB\n"
        "  turn timeout:           300s\n"
        "  mounts:                 -\n"
        "  skills:                 all\n"
        f"  memory size:            {len(files)} files, {size}\n"
        f"  learned behaviors:      {learned}\n"
        f"  group path:             {root}\n"
        f"  config path:            {root}/group.yaml\n"
        f"  memory path:            {root}/memory\n"
        f"  sessions path:          {root}/sessions\n"
        f"  files path:             {root}/files\n"
        f"  instructions path:      {root}/instructions.prepend.md\n"
        f"  learned behaviors path: {root}/{LEARNED_FILE}\n"
    )


def test_show_tells_the_learned_file_and_its_waiting_changes(
    run: Any, home: Path, kolkata: None
) -> None:
    group = _add(home, creators=("alice", "bob"))
    learned = group.path / LEARNED_FILE
    learned.write_text("- Be brief.\n")
    os.utime(learned, (MODIFIED, MODIFIED))
    shown = run("group", "show", "fam")
    assert shown.exit_code == 0 and shown.stderr == ""
    assert shown.stdout == _show_lines(
        group, "12 B, modified 2026-03-04 05:06 UTC; changed by alice, bob"
    )
    from orchestrator.store.held import HeldRequests

    queue = open_queue(Home(home))
    fields = {
        "group": "fam", "kind": "learned", "channel": "cli", "chat": "c", "thread": None,
        "sender": "alice", "chat_approvable": True, "ttl": 3600.0,
    }  # fmt: skip
    HeldRequests(queue).hold(content="- Be careful.\n", message_id="m1", **fields)
    queue.close()
    assert run("group", "show", "fam").stdout == _show_lines(
        group,
        "12 B, modified 2026-03-04 05:06 UTC; changed by alice, bob; 1 change(s) wait for approval",
    )


def test_show_without_a_learned_file_or_creators(run: Any, home: Path) -> None:
    group = _add(home, creators=())
    (group.path / LEARNED_FILE).unlink(missing_ok=True)
    shown = run("group", "show", "fam")
    assert shown.exit_code == 0
    assert shown.stdout == _show_lines(
        group, "empty (no file yet); changed by nobody (no creators)", creators="-"
    )
    (group.path / LEARNED_FILE).mkdir()
    assert run("group", "show", "fam").stdout == _show_lines(
        group, "PROBLEM: not a regular file; changed by nobody (no creators)", creators="-"
    )


# --- group remove -----------------------------------------------------------------------


class Engine:
    """The engine as `group remove` meets it: the container backend (or None: away)
    and the image client, with every call recorded."""

    def __init__(self, home: Path, *, away: bool = False, images: tuple[str, ...] = ()) -> None:
        self.away = away
        self.backend = FakeBackend({"rootless": True})
        self.opened: list[tuple[str, dict[str, Any]]] = []
        self.connected: list[dict[str, Any]] = []
        self.runtimes: list[tuple[Any, ...]] = []
        self.images = list(images)
        self.images_asked: list[str] = []
        self.images_removed: list[tuple[str, bool]] = []
        self.closed = 0
        self.home = home

    def run_container(self, folder: str, owner: str | None = None) -> str:
        name = f"{PROJECT}.{folder}"
        labels = {LABEL_GROUP: folder, LABEL_HOME: owner or Home(self.home).identity}
        self.backend.containers[name] = ContainerInfo(name, "id1", "running", labels)
        return name

    # orchestrator.runtime.open_backend
    def open_backend(self, config: Any, **kwargs: Any) -> Any:
        self.opened.append((config.project, kwargs))
        if self.away:
            raise EngineUnreachable("the Docker engine did not answer at unix:///x.sock")
        return self.backend

    # orchestrator.runtime.engine.connect
    def connect(self, **kwargs: Any) -> Any:
        self.connected.append(kwargs)
        if self.away:
            raise EngineUnreachable("the Docker engine did not answer at unix:///x.sock")
        return SimpleNamespace(
            images=SimpleNamespace(list=self._list, remove=self._remove), close=self._close
        )

    def _list(self, name: str) -> list[Any]:
        self.images_asked.append(name)
        return [SimpleNamespace(tags=[tag]) for tag in self.images if tag.startswith(name + ":")]

    def _remove(self, tag: str, force: bool = False) -> None:
        self.images_removed.append((tag, force))

    def _close(self) -> None:
        self.closed += 1


@pytest.fixture
def engine(home: Path, monkeypatch: pytest.MonkeyPatch) -> Engine:
    import orchestrator.runtime
    import orchestrator.runtime.engine
    import orchestrator.runtime.lifecycle

    fake = Engine(home)
    monkeypatch.setattr(orchestrator.runtime, "open_backend", fake.open_backend)
    monkeypatch.setattr(orchestrator.runtime.engine, "connect", fake.connect)
    real = orchestrator.runtime.lifecycle.GroupRuntime

    class Runtime(real):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            fake.runtimes.append((*args, kwargs))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(orchestrator.runtime.lifecycle, "GroupRuntime", Runtime)
    return fake


def _archived(home: Path) -> Path:
    (archive,) = (home / "groups/.removed").iterdir()
    return archive


def test_remove_removes_this_homes_container_first(run: Any, home: Path, engine: Engine) -> None:
    _add(home, "Fam")
    name = engine.run_container("fam")
    result = run("group", "remove", "fam")
    assert result.exit_code == 0
    archive = _archived(home)
    assert result.stdout == (
        f"removed container {name}\nremoved group 'Fam'; its data is kept in {archive}\n"
    )
    assert result.stderr == ""
    ((project, opened),) = engine.opened
    assert (project, sorted(opened), opened["timeout"], opened["home"].root) == (
        PROJECT,
        ["home", "timeout"],
        10,
        home,
    )
    assert engine.backend.calls == [("remove", "tp.fam")]
    assert engine.backend.containers == {}
    # the runtime is told the engine is not rootless (no question to the engine) and is
    # given no image: removing needs none
    ((runtime_home, config, backend, image, kwargs),) = engine.runtimes
    assert (runtime_home.root, config.project, backend) == (home, PROJECT, engine.backend)
    assert kwargs == {"rootless": False}
    with pytest.raises(ImageMissing) as missing:
        image()
    assert (missing.value.message, missing.value.hint) == (
        "not needed to remove a container",
        None,
    )
    # no purge: no image is looked for
    assert engine.connected == [] and (archive / "group.yaml").is_file()


def test_remove_without_a_container_says_nothing_of_one(
    run: Any, home: Path, engine: Engine
) -> None:
    _add(home, "Fam")
    engine.run_container("work")  # another group's: left alone
    result = run("group", "remove", "fam")
    assert result.exit_code == 0 and result.stderr == ""
    assert result.stdout == f"removed group 'Fam'; its data is kept in {_archived(home)}\n"
    assert engine.backend.calls == []
    assert list(engine.backend.containers) == ["tp.work"]


def test_another_homes_container_is_refused(run: Any, home: Path, engine: Engine) -> None:
    _add(home, "Fam")
    engine.run_container("fam", owner="0123456789abcdef")
    result = run("group", "remove", "fam")
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr == (
        "error: a container named tp.fam belongs to another orchestrator home "
        "(home id 0123456789abcdef); it is left alone\n"
        "hint: give this home its own `project:` in orchestrator.yaml, or remove that "
        "container from the home it belongs to\n"
    )
    assert engine.backend.calls == [] and (home / "groups/fam/group.yaml").is_file()


def test_remove_with_the_engine_away_says_the_container_goes_later(
    run: Any, home: Path, engine: Engine
) -> None:
    _add(home, "Fam")
    engine.away = True
    result = run("group", "remove", "fam", "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == {"folder": "fam", "archived": str(_archived(home))}
    assert result.stderr == (
        "note: the Docker engine did not answer at unix:///x.sock; a container tp.fam, "
        "if any, is removed by the next `orchestrator reconcile`\n"
    )
    assert engine.runtimes == []


def _task(home: Path, folder: str) -> None:
    queue = open_queue(Home(home))
    try:
        TaskStore(queue).add(
            group=folder, chat="kitchen", thread=None, channel="cli", text="water the plants",
            kind="every", spec="1h", tz="UTC", author="bob", author_trust="member",
            settings=TaskSettings(), now=1772600760.0,
        )  # fmt: skip
    finally:
        queue.close()


def test_purge_removes_the_tasks_and_images_and_says_so_on_stderr(
    run: Any, home: Path, engine: Engine
) -> None:
    _add(home, "Fam")
    _add(home, "Work")
    name = engine.run_container("fam")
    _task(home, "fam")
    _task(home, "fam")
    _task(home, "work")
    repository = group_repository(PROJECT, "fam")
    engine.images = [f"{repository}:1", f"{repository}:2", f"{group_repository(PROJECT, 'work')}:1"]
    result = run("group", "remove", "fam", "--purge", "--yes")
    assert result.exit_code == 0
    assert result.stdout == f"removed container {name}\ndeleted {home / 'groups/fam'}\n"
    assert result.stderr == (
        "removed 2 scheduled task(s) of fam\n"
        f"removed image {repository}:1\n"
        f"removed image {repository}:2\n"
    )
    assert engine.connected == [{"timeout": 10}]
    assert engine.images_asked == [repository]
    assert engine.images_removed == [(f"{repository}:1", True), (f"{repository}:2", True)]
    assert engine.closed == 1
    queue = open_queue(Home(home))
    try:
        assert [t.group for t in TaskStore(queue).tasks(done=True)] == ["work"]
    finally:
        queue.close()
    assert not (home / "groups/fam").exists() and not (home / "groups/.removed").exists()


def test_purge_of_a_group_without_tasks_or_images_or_state(
    run: Any, home: Path, engine: Engine
) -> None:
    _add(home, "Fam")
    result = run("group", "remove", "fam", "--purge", "--yes", "--json")
    assert result.exit_code == 0 and result.stderr == ""
    assert json.loads(result.stdout) == {"folder": "fam", "archived": None}
    assert engine.connected == [{"timeout": 10}] and engine.closed == 1
    assert not (Home(home).state_dir / QUEUE_FILE).exists()  # no queue: none made


def test_purge_with_the_engine_away(run: Any, home: Path, engine: Engine) -> None:
    _add(home, "Fam")
    engine.away = True
    _task(home, "fam")
    result = run("group", "remove", "fam", "--purge", "--yes")
    assert result.exit_code == 0
    assert result.stdout == f"deleted {home / 'groups/fam'}\n"
    assert result.stderr == (
        "note: the Docker engine did not answer at unix:///x.sock; a container tp.fam, "
        "if any, is removed by the next `orchestrator reconcile`\n"
        "removed 1 scheduled task(s) of fam\n"
    )
    assert engine.connected == [{"timeout": 10}] and engine.closed == 0


def test_the_group_command_holds_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.cli.packages import packages

    assert cli_group.group.commands["packages"] is packages
    monkeypatch.setattr(cli_group.group, "commands", {})
    cli_group._add_packages()
    assert cli_group.group.commands == {"packages": packages}
