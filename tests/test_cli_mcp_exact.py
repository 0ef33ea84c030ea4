"""Exact behaviour of the helpers of ``orchestrator mcp`` (cli/mcp.py): a server's tools
listed with why one cannot be offered, a server looked up by name, and what a stdio or
a remote server lists, with its failures named; the config, the link and the probe are
faked at their boundary."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click
import pytest

from orchestrator.cli import CliContext
from orchestrator.cli.mcp import _find, _listing, _server, _show_tools
from orchestrator.home import Home
from orchestrator.mcp.tools import ListedTool


def test_tools_are_shown_one_a_line_with_their_problem(capsys: pytest.CaptureFixture[str]) -> None:
    tools = [
        ListedTool("now", "the  time\n now " + "d" * 200, {"type": "object"}),
        ListedTool("", "nameless", {"type": "object"}),
        ListedTool("a\nb", "x", {}),
    ]
    _show_tools(tools, "time", cut=0)
    out = capsys.readouterr()
    assert out.out == ""
    lines = out.err.splitlines()
    assert lines[0] == "  now: " + ("the time now " + "d" * 200)[:160]
    assert lines[1] == "  : nameless  (cannot be offered: it has no name)"
    assert lines[2].startswith("  a\\nb: x  (cannot be offered: ")
    assert len(lines) == 3
    _show_tools([ListedTool("now", "d", {"type": "object"})], "a.b", cut=0)
    assert capsys.readouterr().err.startswith("  now: d  (cannot be offered: ")
    _show_tools([], "time", cut=3)
    assert capsys.readouterr().err == "  ... and 3 more tools, past the bound; not offered\n"


def _group(*names: str) -> Any:
    servers = [SimpleNamespace(name=n) for n in names]
    mcp = SimpleNamespace(
        servers=servers, get=lambda name: next((s for s in servers if s.name == name), None)
    )
    return SimpleNamespace(folder="fam", config=SimpleNamespace(mcp=mcp))


def test_a_server_is_found_by_name_or_the_known_ones_are_named() -> None:
    group = _group("time", "docs")
    assert _server(group, "docs") is group.config.mcp.servers[1]
    with pytest.raises(click.BadParameter) as missing:
        _server(group, "web")
    assert missing.value.message == "fam has no MCP server 'web' (it has: time, docs)"
    assert missing.value.param_hint == "NAME"
    with pytest.raises(click.BadParameter) as none:
        _server(_group(), "web")
    assert none.value.message == "fam has no MCP server 'web' (it has: none)"


def test_a_group_is_found_in_the_homes_store(tmp_path: Path) -> None:
    from orchestrator.errors import OrchestratorError

    obj = CliContext(home=Home(tmp_path), debug=False)
    with pytest.raises(OrchestratorError):
        _find(obj, "nobody")


class FakeLink:
    made: list[Any] = []

    def __init__(self, name: str, target: Any, fail: Exception | None = None) -> None:
        self.name, self.target, self.closed = name, target, False
        self.cut_tools = 4
        FakeLink.made.append(self)

    def tools(self) -> list[ListedTool]:
        if self.name == "broken":
            from orchestrator.mcp.link import LinkFailed

            raise LinkFailed("the server hung up")
        return [ListedTool("t", "d", {})]

    def close(self) -> None:
        self.closed = True


def _remote_setup(monkeypatch: pytest.MonkeyPatch, servers: dict[str, Any]) -> None:
    import orchestrator.config
    import orchestrator.mcp.link

    config = SimpleNamespace(mcp_servers=servers, secrets_file=Path("/s/secrets"))
    monkeypatch.setattr(
        orchestrator.config, "load_config", lambda home: config if home.root else None
    )
    FakeLink.made = []
    monkeypatch.setattr(orchestrator.mcp.link, "Link", FakeLink)


def _definition(allowed: bool) -> Any:
    return SimpleNamespace(
        allows=lambda folder: allowed and folder == "fam",
        target=lambda secrets: ("target", secrets),
    )


def test_a_remote_server_is_listed_from_the_host(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _remote_setup(monkeypatch, {"tracker": _definition(True)})
    obj = CliContext(home=Home(tmp_path), debug=False)
    server = SimpleNamespace(name="trk", remote="tracker")
    tools, cut = _listing(obj, _group(), server)  # type: ignore[arg-type]
    assert [t.name for t in tools] == ["t"] and cut == 4
    (link,) = FakeLink.made
    assert (link.name, link.target, link.closed) == ("trk", ("target", Path("/s/secrets")), True)
    broken = SimpleNamespace(name="broken", remote="tracker")
    with pytest.raises(click.ClickException) as failed:
        _listing(obj, _group(), broken)  # type: ignore[arg-type]
    assert failed.value.message == "the server hung up"
    assert failed.value.__cause__ is None and failed.value.__suppress_context__
    assert FakeLink.made[-1].closed


def test_a_remote_server_not_defined_or_not_allowed_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    obj = CliContext(home=Home(tmp_path), debug=False)
    server = SimpleNamespace(name="trk", remote="tracker")
    _remote_setup(monkeypatch, {"b": _definition(True), "a": _definition(True)})
    with pytest.raises(click.ClickException) as undefined:
        _listing(obj, _group(), server)  # type: ignore[arg-type]
    assert undefined.value.message == (
        "orchestrator.yaml defines no mcp_servers.tracker (defined: a, b)"
    )
    _remote_setup(monkeypatch, {})
    with pytest.raises(click.ClickException) as nothing:
        _listing(obj, _group(), server)  # type: ignore[arg-type]
    assert (
        nothing.value.message == "orchestrator.yaml defines no mcp_servers.tracker (defined: none)"
    )
    _remote_setup(monkeypatch, {"tracker": _definition(False)})
    with pytest.raises(click.ClickException) as refused:
        _listing(obj, _group(), server)  # type: ignore[arg-type]
    assert refused.value.message == (
        "mcp_servers.tracker in orchestrator.yaml does not list fam under groups: "
        "only the groups listed there may attach it"
    )
    assert FakeLink.made == []


def test_a_stdio_server_is_listed_by_the_probe(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import orchestrator.cli.runtime
    import orchestrator.runtime.mcp_probe
    from orchestrator.runtime.mcp_probe import ProbeFailed

    obj = CliContext(home=Home(tmp_path), debug=False)
    runtime = object()
    monkeypatch.setattr(orchestrator.cli.runtime, "open_runtime", lambda o: (runtime, o))
    seen: list[Any] = []

    def probe(rt: Any, group: Any, server: Any) -> Any:
        seen.append((rt, group, server))
        if server.name == "bad":
            raise ProbeFailed("no such program", hint="install it")
        return ["tool"], 2

    monkeypatch.setattr(orchestrator.runtime.mcp_probe, "list_stdio_tools", probe)
    group = _group()
    server = SimpleNamespace(name="time", remote=None)
    assert _listing(obj, group, server) == (["tool"], 2)  # type: ignore[arg-type]
    assert seen == [((runtime, obj), group, server)]
    with pytest.raises(click.ClickException) as failed:
        _listing(obj, group, SimpleNamespace(name="bad", remote=None))  # type: ignore[arg-type]
    assert failed.value.message == "no such program"
    assert failed.value.__suppress_context__
