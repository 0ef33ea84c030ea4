"""Exact behaviour of the MCP tool sources inside the container (no server, no host):
a stdio server's link made once with its environment, its tools offered when pinned and
granted, a call's time bound and result, a remote server's tools and calls through the
host, the sources read from ORCHESTRATOR_MCP, and the request for a new server."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.agent.hostlink import HostRequestFailed
from orchestrator.agent.tools import FLUSH, TURN, Toolbox, ToolError
from orchestrator.agent.tools import mcp as mcpmod
from orchestrator.agent.tools.mcp import (
    MCP_REQUEST_TOOLS,
    SERVER_PATH,
    McpSource,
    McpTool,
    RemoteMcpSource,
    mcp_sources,
    request_mcp_server,
)
from orchestrator.limits import MCP_CALL_TIMEOUT_SECONDS, MCP_LIST_TIMEOUT_SECONDS
from orchestrator.mcp import link as linkmod
from orchestrator.mcp.link import LinkFailed
from orchestrator.mcp.tools import ListedTool, render_result
from orchestrator.protocol import MCP_CALL, MCP_LIST, MCP_REQUEST, OTHERS_WORDS
from tests.fakehost import FakeHost

SCHEMA = {"type": "object", "properties": {"tz": {"type": "string"}}}
NOW = SimpleNamespace(monotonic=lambda: 1000.0)


class FakeLink:
    """A started server: its listing, its calls' results, its state."""

    made: list[FakeLink] = []

    def __init__(self, name: str, target: Any) -> None:
        self.name = name
        self.target = target
        self.listed: list[ListedTool] | Exception = []
        self.result: Any = None
        self.listings: list[float] = []
        self.calls: list[tuple[str, dict[str, Any], float]] = []
        self.state = "running"
        self.starts = 3
        self.last_error = "exited 1"
        self.closed = 0
        FakeLink.made.append(self)

    def tools(self, timeout: float) -> list[ListedTool]:
        self.listings.append(timeout)
        if isinstance(self.listed, Exception):
            raise self.listed
        return self.listed

    def call(self, tool: str, args: dict[str, Any], timeout: float) -> Any:
        self.calls.append((tool, args, timeout))
        if isinstance(self.result, Exception):
            raise self.result
        return self.result

    def close(self) -> None:
        self.closed += 1


@pytest.fixture
def links(monkeypatch: pytest.MonkeyPatch) -> list[FakeLink]:
    FakeLink.made = []
    monkeypatch.setattr(linkmod, "Link", FakeLink)
    monkeypatch.setattr(mcpmod, "time", NOW)
    return FakeLink.made


def _box(tmp_path: Path, host: FakeHost | None = None, **kwargs: Any) -> Toolbox:
    return Toolbox(tmp_path, sources=[], host=host, **kwargs)  # type: ignore[arg-type]


def _tool(name: str, description: str = "what it does") -> ListedTool:
    return ListedTool(name, description, SCHEMA)


# --- a stdio server's link -------------------------------------------------------------


def test_the_link_runs_the_command_with_its_path_language_env_and_home(
    links: list[FakeLink], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", "/home/agent")
    source = McpSource("time", "mcp-time", ("--tz", "UTC"), {"TZ": "UTC"}, cwd=str(tmp_path))
    link = source._link()
    assert source._link() is link and links == [link]  # made once
    assert link.name == "time"
    target = link.target
    assert isinstance(target, linkmod.Stdio)
    assert (target.command, target.args, target.cwd) == ("mcp-time", ("--tz", "UTC"), str(tmp_path))
    assert target.env == {
        "PATH": SERVER_PATH,
        "LANG": "C.UTF-8",
        "TZ": "UTC",
        "HOME": "/home/agent",
    }


def test_the_servers_own_env_wins_over_the_defaults(
    links: list[FakeLink], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", "/home/agent")
    env = {"PATH": "/bin", "LANG": "en_US.UTF-8", "HOME": "/srv"}
    source = McpSource("time", "mcp-time", env=env, path="/custom/bin")
    assert source._link().target.env == env  # type: ignore[attr-defined]
    assert McpSource("t", "c", path="/custom/bin")._link().target.env["PATH"] == "/custom/bin"  # type: ignore[attr-defined]


@pytest.mark.parametrize("home", [None, ""])
def test_without_a_home_none_is_given(
    links: list[FakeLink], monkeypatch: pytest.MonkeyPatch, home: str | None
) -> None:
    if home is None:
        monkeypatch.delenv("HOME", raising=False)
    else:
        monkeypatch.setenv("HOME", home)
    env = McpSource("time", "mcp-time")._link().target.env  # type: ignore[attr-defined]
    assert env == {"PATH": SERVER_PATH, "LANG": "C.UTF-8"}


def test_a_working_folder_that_is_missing_or_not_given_is_left_out(
    links: list[FakeLink], tmp_path: Path
) -> None:
    (tmp_path / "file").write_text("x")
    for cwd in (str(tmp_path / "gone"), str(tmp_path / "file"), None):
        assert McpSource("time", "c", cwd=cwd)._link().target.cwd is None  # type: ignore[attr-defined]


# --- a stdio server's tools ------------------------------------------------------------


def test_only_the_pinned_tools_are_offered_and_listed_within_the_bound(
    links: list[FakeLink], tmp_path: Path
) -> None:
    now, later, changed = _tool("now"), _tool("later", ""), _tool("changed")
    source = McpSource("time", "c", pins={"now": now.digest, "later": later.digest,
                                          "changed": "0" * 16})  # fmt: skip
    source._link().listed = [now, later, changed, _tool("new")]
    tools = list(source.tools(_box(tmp_path)))
    assert links[0].listings == [MCP_LIST_TIMEOUT_SECONDS]
    assert [(t.spec.name, t.spec.description, t.spec.parameters, t.tool) for t in tools] == [
        ("mcp__time__now", "[MCP server time] what it does", SCHEMA, "now"),
        ("mcp__time__later", "[MCP server time]", SCHEMA, "later"),
    ]
    assert all(t.source is source and t.modes == frozenset({TURN}) for t in tools)


@pytest.mark.parametrize(
    ("mode", "allowed", "granted"),
    [
        (TURN, None, True),
        (TURN, frozenset({"mcp__time"}), True),
        (TURN, frozenset({"files", "mcp__time"}), True),
        (TURN, frozenset({"files"}), False),
        (TURN, frozenset({"time"}), False),
        (TURN, frozenset(), False),
        (FLUSH, None, False),
    ],
)
def test_a_server_starts_only_for_a_turn_granted_it(
    links: list[FakeLink], tmp_path: Path, mode: str, allowed: Any, granted: bool
) -> None:
    now = _tool("now")
    remote_host = FakeHost({"tools": [now.to_wire()]})
    box = _box(tmp_path, remote_host, mode=mode, allowed=allowed)
    source = McpSource("time", "c", pins={"now": now.digest})
    if granted:
        source._link().listed = [now]
    assert len(list(source.tools(box))) == (1 if granted else 0)
    assert len(links) == (1 if granted else 0)
    assert len(list(RemoteMcpSource("time").tools(box))) == (1 if granted else 0)
    assert len(remote_host.requests) == (1 if granted else 0)


def test_a_server_that_fails_to_list_offers_nothing_and_says_why(
    links: list[FakeLink], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source = McpSource("time", "c")
    source._link().listed = LinkFailed("MCP server time: could not start")
    with caplog.at_level(logging.WARNING, logger="orchestrator.agent.tools.mcp"):
        assert source.tools(_box(tmp_path)) == ()
    assert [r.getMessage() for r in caplog.records] == ["MCP server time: could not start"]


def test_a_tool_calls_its_source_with_its_servers_name_for_it(tmp_path: Path) -> None:
    calls: list[tuple[Any, str, dict[str, Any]]] = []

    class Source:
        def call(self, box: Any, tool: str, args: dict[str, Any]) -> str:
            calls.append((box, tool, args))
            return "done"

    box = _box(tmp_path)
    tool = McpTool(mcpmod._spec("time", _tool("now")), Source(), "now")  # type: ignore[arg-type]
    assert tool.call(box, {"tz": "UTC"}) == "done"
    assert calls == [(box, "now", {"tz": "UTC"})]


# --- a stdio server's calls ------------------------------------------------------------


def test_a_call_gets_the_whole_bound_without_a_deadline_and_reports_others_words(
    links: list[FakeLink], tmp_path: Path
) -> None:
    host = FakeHost({})
    source = McpSource("time", "c")
    result = SimpleNamespace(content=[SimpleNamespace(type="text", text="10:00")])
    source._link().result = result
    answer = source.call(_box(tmp_path, host), "now", {"tz": "UTC"})
    assert answer == render_result("time", result)
    [(tool, args, timeout)] = links[0].calls
    assert (tool, args, timeout) == ("now", {"tz": "UTC"}, float(MCP_CALL_TIMEOUT_SECONDS))
    assert type(timeout) is float
    assert host.requests == [(OTHERS_WORDS, {"source": "mcp__time"})]


@pytest.mark.parametrize(
    ("left", "bound"),
    [(1.0, 1.0), (30.5, 30.5), (MCP_CALL_TIMEOUT_SECONDS, MCP_CALL_TIMEOUT_SECONDS),
     (500.0, float(MCP_CALL_TIMEOUT_SECONDS))],
)  # fmt: skip
def test_a_call_gets_at_most_what_is_left_of_the_turn(
    links: list[FakeLink], tmp_path: Path, left: float, bound: float
) -> None:
    source = McpSource("time", "c")
    source.call(_box(tmp_path, deadline=1000.0 + left), "now", {})
    assert links[0].calls[0][2] == bound


@pytest.mark.parametrize("left", [0.999, 0.0, -5.0])
def test_no_call_starts_with_less_than_a_second_left(
    links: list[FakeLink], tmp_path: Path, left: float
) -> None:
    host = FakeHost({})
    box = _box(tmp_path, host, deadline=1000.0 + left)
    for source in (McpSource("time", "c"), RemoteMcpSource("time")):
        with pytest.raises(ToolError) as caught:
            source.call(box, "now", {})
        assert str(caught.value) == "the turn's time is up: no tool call can start now"
    assert host.requests == []


def test_a_failed_call_is_the_tools_error_and_reports_nothing(
    links: list[FakeLink], tmp_path: Path
) -> None:
    host = FakeHost()
    source = McpSource("time", "c")
    source._link().result = LinkFailed("MCP server time: the call timed out")
    with pytest.raises(ToolError) as caught:
        source.call(_box(tmp_path, host), "now", {})
    assert str(caught.value) == "MCP server time: the call timed out"
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert host.requests == []


def test_others_words_unreported_are_logged_and_the_result_still_given(
    links: list[FakeLink], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source = McpSource("time", "c")
    source._link().result = SimpleNamespace(content=[])
    with caplog.at_level(logging.WARNING, logger="orchestrator.agent.tools.mcp"):
        answer = source.call(_box(tmp_path, FakeHost(HostRequestFailed("gone"))), "now", {})
        assert answer == render_result("time", SimpleNamespace(content=[]))
        assert source.call(_box(tmp_path, None), "now", {}) == answer  # no host: no report
    assert [r.getMessage() for r in caplog.records] == [
        "could not tell the host of others' words from time: gone"
    ]


def test_a_servers_status_before_and_after_it_starts(links: list[FakeLink]) -> None:
    source = McpSource("time", "c")
    assert source.name == "mcp__time"
    assert source.status() == {
        "server": "time",
        "state": "not started",
        "starts": 0,
        "last_error": None,
    }
    source.close()  # nothing started: nothing to close
    link = source._link()
    assert source.status() == {
        "server": "time",
        "state": "running",
        "starts": 3,
        "last_error": "exited 1",
    }
    source.close()
    assert link.closed == 1


# --- a remote server -------------------------------------------------------------------


def test_a_remote_servers_tools_are_listed_by_the_host(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    now = _tool("now")
    host = FakeHost({"tools": [now.to_wire(), {"name": ""}, "x", _tool("later", "").to_wire()]})
    source = RemoteMcpSource("clock")
    assert source.name == "mcp__clock"
    with caplog.at_level(logging.WARNING, logger="orchestrator.agent.tools.mcp"):
        tools = source.tools(_box(tmp_path, host))
    assert isinstance(tools, tuple)
    assert [(t.spec.name, t.spec.description, t.tool, t.source) for t in tools] == [
        ("mcp__clock__now", "[MCP server clock] what it does", "now", source),
        ("mcp__clock__later", "[MCP server clock]", "later", source),
    ]
    assert host.requests == [(MCP_LIST, {"server": "clock"})]
    assert [r.getMessage() for r in caplog.records] == [
        "remote MCP server clock: a listed tool needs a name",
        "remote MCP server clock: a listed tool must be an object",
    ]


@pytest.mark.parametrize("answer", [{}, {"tools": None}, {"tools": []}])
def test_a_remote_server_without_tools_offers_none(tmp_path: Path, answer: Any) -> None:
    assert RemoteMcpSource("clock").tools(_box(tmp_path, FakeHost(answer))) == ()


def test_a_remote_listing_refused_offers_nothing_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    host = FakeHost(HostRequestFailed("not granted"))
    with caplog.at_level(logging.WARNING, logger="orchestrator.agent.tools.mcp"):
        assert RemoteMcpSource("clock").tools(_box(tmp_path, host)) == ()
        assert RemoteMcpSource("clock").tools(_box(tmp_path, None)) == ()
    assert [r.getMessage() for r in caplog.records] == ["remote MCP server clock: not granted"]


def test_a_remote_call_goes_through_the_host_with_its_time_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mcpmod, "time", NOW)
    host = FakeHost({"result": "10:00"}, {})
    box = _box(tmp_path, host, deadline=1020.0)
    source = RemoteMcpSource("clock")
    assert source.call(box, "now", {"tz": "UTC"}) == "10:00"
    assert source.call(_box(tmp_path, host), "now", {}) == ""
    assert host.requests == [
        (MCP_CALL, {"server": "clock", "tool": "now", "arguments": {"tz": "UTC"},
                    "timeout": 20.0}),
        (MCP_CALL, {"server": "clock", "tool": "now", "arguments": {},
                    "timeout": float(MCP_CALL_TIMEOUT_SECONDS)}),
    ]  # fmt: skip


def test_a_remote_call_refused_or_without_a_host_is_the_tools_error(tmp_path: Path) -> None:
    source = RemoteMcpSource("clock")
    with pytest.raises(ToolError) as caught:
        source.call(_box(tmp_path, FakeHost(HostRequestFailed("tool not approved"))), "x", {})
    assert str(caught.value) == "tool not approved"
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    with pytest.raises(ToolError) as caught:
        source.call(_box(tmp_path, None), "x", {})
    assert str(caught.value) == "remote MCP servers are called by the orchestrator; no host here"


# --- ORCHESTRATOR_MCP ------------------------------------------------------------------


@pytest.mark.parametrize(
    "setting",
    ["nope", "[]", '"servers"', "{}", '{"servers": []}', '{"servers": "x"}', "null", "7"],
)
def test_a_setting_that_cannot_be_read_gives_no_servers(
    setting: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="orchestrator.agent.tools.mcp"):
        assert mcp_sources(setting) == ()
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.ERROR, "ORCHESTRATOR_MCP cannot be read; no MCP servers this time")
    ]


@pytest.mark.parametrize("setting", [None, ""])
def test_no_setting_gives_no_servers(setting: str | None) -> None:
    assert mcp_sources(setting) == ()


def _fields(source: McpSource | RemoteMcpSource) -> tuple[Any, ...]:
    if isinstance(source, RemoteMcpSource):
        return (source.server,)
    return (source.server, source.command, source.args, source.env, source.pins,
            source.cwd, source.path, source.link)  # fmt: skip


def test_the_servers_of_the_setting_in_name_order(caplog: pytest.LogCaptureFixture) -> None:
    setting = json.dumps(
        {
            "servers": {
                "zeta": {"command": "z", "args": ["-v", 3], "env": {"A": 1},
                         "tools": {"now": "abc"}},
                "alpha": {"kind": "remote"},
                "Bad": {"command": "x"},
                "mid": {"command": "m"},
                "nocmd": {"args": []},
                "empty": {"command": ""},
                "numcmd": {"command": 5},
                "notdict": ["command"],
            }
        }
    )  # fmt: skip
    with caplog.at_level(logging.ERROR, logger="orchestrator.agent.tools.mcp"):
        sources = mcp_sources(setting, cwd="/files", path="/p")
    assert [_fields(s) for s in sources] == [
        ("alpha",),
        ("mid", "m", (), {}, {}, "/files", "/p", None),
        ("zeta", "z", ("-v", "3"), {"A": "1"}, {"now": "abc"}, "/files", "/p", None),
    ]
    assert type(sources[0]) is RemoteMcpSource
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.ERROR, "ORCHESTRATOR_MCP: server 'Bad' left out"),
        (logging.ERROR, "ORCHESTRATOR_MCP: server 'empty' has no command; left out"),
        (logging.ERROR, "ORCHESTRATOR_MCP: server 'nocmd' has no command; left out"),
        (logging.ERROR, "ORCHESTRATOR_MCP: server 'notdict' left out"),
        (logging.ERROR, "ORCHESTRATOR_MCP: server 'numcmd' has no command; left out"),
    ]


def test_a_server_takes_the_default_path_and_no_folder_unless_given() -> None:
    [source] = mcp_sources(json.dumps({"servers": {"t": {"command": "c", "args": None}}}))
    assert _fields(source) == ("t", "c", (), {}, {}, None, SERVER_PATH, None)


# --- asking for a new server -----------------------------------------------------------


def test_a_server_request_goes_to_the_host(tmp_path: Path) -> None:
    host = FakeHost({"result": "asked the creators"}, {})
    box = _box(tmp_path, host)
    answer = request_mcp_server(box, "time", "mcp-time", "clocks", ["--utc"], {"TZ": "UTC"})
    assert answer == "asked the creators"
    assert request_mcp_server(box, "time", "mcp-time", "clocks") == ""
    assert host.requests == [
        (MCP_REQUEST, {"server": "time", "command": "mcp-time", "args": ["--utc"],
                       "env": {"TZ": "UTC"}, "reason": "clocks"}),
        (MCP_REQUEST, {"server": "time", "command": "mcp-time", "args": [], "env": {},
                       "reason": "clocks"}),
    ]  # fmt: skip


def test_a_server_request_refused_or_without_a_host_is_the_tools_error(tmp_path: Path) -> None:
    with pytest.raises(ToolError) as caught:
        request_mcp_server(_box(tmp_path, FakeHost(HostRequestFailed("guests may not"))),
                           "t", "c", "r")  # fmt: skip
    assert str(caught.value) == "guests may not"
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    with pytest.raises(ToolError) as caught:
        request_mcp_server(_box(tmp_path, None), "t", "c", "r")
    assert str(caught.value) == "MCP servers are granted by the orchestrator; no host here"
    assert MCP_REQUEST_TOOLS.name == "mcp-requests"
    assert [t.spec.name for t in MCP_REQUEST_TOOLS.members] == ["request_mcp_server"]


def test_a_tool_is_offered_when_its_name_fits_with_its_own_servers(
    links: list[FakeLink], tmp_path: Path
) -> None:
    longest = _tool("n" * (64 - len("mcp__t__")))  # mcp__t__nnn...: 64 characters
    source = McpSource("t", "c", pins={longest.name: longest.digest})
    source._link().listed = [longest]
    assert [t.tool for t in source.tools(_box(tmp_path))] == [longest.name]
