"""Exact behaviour of the helpers of ``orchestrator group packages`` (cli/packages.py):
a requirement's package name, the group image built (the agent image first when it is
missing), and the state shown, as text and JSON, with the engine there or away; the
engine, the image builders and the lock are faked at their boundary."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.cli import CliContext
from orchestrator.cli import packages as cli_packages
from orchestrator.cli.packages import _build, _python_name, _show
from orchestrator.home import Home
from orchestrator.runtime.spec import container_name


def test_a_requirements_name() -> None:
    assert _python_name("rich==13.7.1") == "rich"
    assert _python_name("Foo_Bar>=1") == "Foo_Bar"


def _group(tmp_path: Path, debian: tuple[str, ...] = (), python: tuple[str, ...] = (),
           from_chat: bool = False) -> Any:  # fmt: skip
    packages = SimpleNamespace(
        debian=debian, python=python, from_chat=from_chat, empty=not debian and not python
    )
    return SimpleNamespace(folder="fam", path=tmp_path, config=SimpleNamespace(packages=packages))


class FakeClient:
    def __init__(self, running: str | None) -> None:
        self.running = running
        self.closed = 0
        self.asked: list[str] = []
        self.containers = SimpleNamespace(get=self._get)

    def _get(self, name: str) -> Any:
        self.asked.append(name)
        if self.running is None:
            raise LookupError(name)
        return SimpleNamespace(attrs={"Config": {"Image": self.running}})

    def close(self) -> None:
        self.closed += 1


@pytest.fixture
def obj(tmp_path: Path) -> CliContext:
    return CliContext(home=Home(tmp_path), debug=False)


def _engine(monkeypatch: pytest.MonkeyPatch, client: Any, built: str | None = "grp:1") -> list[Any]:
    import orchestrator.image.agent
    import orchestrator.image.group
    import orchestrator.runtime.engine

    calls: list[Any] = []
    config = SimpleNamespace(image="img", project="proj", debian_mirror="mirror")
    monkeypatch.setattr(cli_packages, "load_config", lambda home: config if home.root else None)

    def connect(**kwargs: Any) -> Any:
        calls.append(("connect", kwargs))
        if isinstance(client, Exception):
            raise client
        return client

    monkeypatch.setattr(orchestrator.runtime.engine, "connect", connect)
    monkeypatch.setattr(
        orchestrator.image.agent,
        "agent_image_ref",
        lambda c, image: f"agent-of-{image}" if c is client else None,
    )
    monkeypatch.setattr(
        orchestrator.image.group,
        "group_image_tag",
        lambda c, project, group, agent: (
            calls.append(("tag", c is client, project, agent)) or built
        ),
    )
    return calls


def test_the_state_with_the_engine_away_still_shows_what_is_asked(
    obj: CliContext, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    calls = _engine(monkeypatch, ConnectionError("no engine"))
    group = _group(tmp_path, ("jq", "curl"), ("rich==1", "attrs"), from_chat=True)
    _show(obj, group, as_json=True)
    assert json.loads(capsys.readouterr().out) == {
        "group": "fam",
        "asked": {"debian": ["jq", "curl"], "python": ["rich==1", "attrs"]},
        "from_chat": True,
        "locked": [],
        "built": None,
        "running": None,
        "engine": "no engine",
    }
    assert calls == [("connect", {"timeout": 10})]
    _show(obj, group, as_json=False)
    assert capsys.readouterr().out.splitlines() == [
        "group fam",
        "  debian:  jq, curl",
        "  python:  rich==1, attrs",
        "  from chat: yes",
        "  built:   not built (use --build)",
        "  running: -",
    ]
    _show(obj, _group(tmp_path), as_json=False)
    assert capsys.readouterr().out.splitlines() == [
        "group fam",
        "  debian:  -",
        "  python:  -",
        "  from chat: no",
        "  built:   -",
        "  running: -",
    ]


def test_the_state_with_a_lock_an_image_and_a_container(
    obj: CliContext, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    import orchestrator.groups.packages

    wheels = [SimpleNamespace(name="rich", version="1"), SimpleNamespace(name="attrs", version="2")]
    monkeypatch.setattr(
        orchestrator.groups.packages,
        "read_lock",
        lambda path: SimpleNamespace(wheels=wheels) if path == tmp_path else None,
    )
    client = FakeClient(running="grp:0\n")
    calls = _engine(monkeypatch, client)
    group = _group(tmp_path, (), ("rich", "attrs"))
    _show(obj, group, as_json=True)
    state = json.loads(capsys.readouterr().out)
    assert state == {
        "group": "fam",
        "asked": {"debian": [], "python": ["rich", "attrs"]},
        "from_chat": False,
        "locked": ["rich==1", "attrs==2"],
        "built": "grp:1",
        "running": "grp:0\n",
    }
    assert calls == [("connect", {"timeout": 10}), ("tag", True, "proj", "agent-of-img")]
    assert client.asked == [container_name("proj", "fam")] and client.closed == 1
    _show(obj, group, as_json=False)
    lines = capsys.readouterr().out.splitlines()
    assert lines[3] == "  locked:  rich==1, attrs==2"
    assert lines[5:] == ["  built:   grp:1", "  running: grp:0\\n"]


def test_no_container_is_nothing_running(
    obj: CliContext, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    client = FakeClient(running=None)
    _engine(monkeypatch, client, built=None)
    _show(obj, _group(tmp_path, ("jq",)), as_json=True)
    assert json.loads(capsys.readouterr().out) == {
        "group": "fam",
        "asked": {"debian": ["jq"], "python": []},
        "from_chat": False,
        "locked": [],
        "built": None,
        "running": None,
    }
    assert client.closed == 1
    bare = SimpleNamespace(get=lambda n: SimpleNamespace(attrs={}))
    no_config = SimpleNamespace(containers=bare, close=lambda: None)
    _engine(monkeypatch, no_config)
    _show(obj, _group(tmp_path, ("jq",)), as_json=True)
    assert json.loads(capsys.readouterr().out)["running"] is None


def test_a_group_asking_for_nothing_builds_nothing(
    obj: CliContext, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls = _engine(monkeypatch, FakeClient(None))
    lines: list[str] = []
    _build(obj, _group(tmp_path), lines.append)
    assert lines == ["fam asks for no packages: it runs the agent image"]
    assert calls == []


def _builders(
    monkeypatch: pytest.MonkeyPatch, client: Any, agent_missing: bool, built: bool
) -> list[Any]:
    import orchestrator.image.agent
    import orchestrator.image.group
    from orchestrator.errors import ImageMissing

    calls: list[Any] = []

    def agent_ref(c: Any, image: str) -> str:
        calls.append(("ref", c is client, image))
        if agent_missing:
            raise ImageMissing("gone")
        return "agent:1"

    def build_agent(c: Any, image: str, progress: Any, mirror: str) -> Any:
        calls.append(("build agent", c is client, image, mirror, progress))
        return SimpleNamespace(tag="agent:2")

    def build_group(c: Any, project: str, group: Any, agent: str, progress: Any,
                    mirror: str) -> Any:  # fmt: skip
        calls.append(("build group", c is client, project, group.folder, agent, mirror, progress))
        return SimpleNamespace(built=built, tag="grp:9")

    monkeypatch.setattr(orchestrator.image.agent, "agent_image_ref", agent_ref)
    monkeypatch.setattr(orchestrator.image.agent, "build_agent_image", build_agent)
    monkeypatch.setattr(orchestrator.image.group, "build_group_image", build_group)
    return calls


def test_the_group_image_is_built_on_the_agent_image(
    obj: CliContext, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    client = FakeClient(None)
    connects = _engine(monkeypatch, client)
    calls = _builders(monkeypatch, client, agent_missing=False, built=True)
    lines: list[str] = []
    _build(obj, _group(tmp_path, ("jq",)), lines.append)
    assert calls == [
        ("ref", True, "img"),
        ("build group", True, "proj", "fam", "agent:1", "mirror", lines.append),
    ]
    assert lines == ["built: grp:9"]
    assert connects == [("connect", {})] and client.closed == 1


def test_a_missing_agent_image_is_built_first(
    obj: CliContext, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    client = FakeClient(None)
    _engine(monkeypatch, client)
    calls = _builders(monkeypatch, client, agent_missing=True, built=False)
    lines: list[str] = []
    _build(obj, _group(tmp_path, (), ("rich",)), lines.append)
    assert calls == [
        ("ref", True, "img"),
        ("build agent", True, "img", "mirror", lines.append),
        ("build group", True, "proj", "fam", "agent:2", "mirror", lines.append),
    ]
    assert lines == ["current: grp:9"]
    assert client.closed == 1
