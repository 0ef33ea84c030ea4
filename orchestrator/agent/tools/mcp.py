"""MCP servers' tools, as tool sources: one source per server, named
``mcp__<server>`` (the name a turn's grant gives or withholds).

A stdio server runs in this container, started by the runner on the first turn that
is granted it and kept while the container lives (``orchestrator.mcp.link``). A remote
server is the host's: its tools are listed and called through the relay (``mcp.list``,
``mcp.call``), and its credentials never come here. Either way, only the tools the
operator approved (group.yaml pins a hash of each) are offered, and a result is marked
as others' words: the runner tells the host (``others.words``) so that a learned-behavior
write from this conversation waits for a creator's approval.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orchestrator.agent.hostlink import HostRequestFailed
from orchestrator.agent.tools.base import TURN, ToolError, ToolSpec
from orchestrator.agent.tools.box import FunctionTool, StaticSource, Toolbox
from orchestrator.limits import MCP_CALL_TIMEOUT_SECONDS, MCP_LIST_TIMEOUT_SECONDS
from orchestrator.mcp.tools import (
    ListedTool,
    model_name,
    render_result,
    server_problem,
    sort_tools,
    source_name,
)
from orchestrator.protocol import MCP_CALL, MCP_LIST, MCP_REQUEST, OTHERS_WORDS

if TYPE_CHECKING:  # the link (asyncio and the SDK) is imported when a server first starts
    from orchestrator.mcp.link import Link

log = logging.getLogger(__name__)

# where a stdio server's command is looked up: the group's own Python packages first
SERVER_PATH = "/opt/agent-python/bin:/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True)
class McpTool:
    """One offered tool of one server."""

    spec: ToolSpec
    source: McpSource | RemoteMcpSource
    tool: str
    modes: frozenset[str] = frozenset({TURN})

    def call(self, box: Toolbox, args: dict[str, Any]) -> str:
        return self.source.call(box, self.tool, args)


def _spec(server: str, tool: ListedTool) -> ToolSpec:
    return ToolSpec(
        model_name(server, tool.name),
        f"[MCP server {server}] {tool.description}".strip(),
        tool.schema,
    )


def _timeout(box: Toolbox) -> float:
    timeout = float(MCP_CALL_TIMEOUT_SECONDS)
    if box.deadline is not None:
        left = box.deadline - time.monotonic()
        if left < 1:
            raise ToolError("the turn's time is up: no tool call can start now")
        timeout = min(timeout, left)
    return timeout


def _granted(box: Toolbox, name: str) -> bool:
    """Whether this turn may use the source ``name`` (never during a memory flush)."""
    return box.mode == TURN and (box.allowed is None or name in box.allowed)


def _report_others_words(box: Toolbox, server: str) -> None:
    if box.host is None:
        return
    try:
        box.host.request(OTHERS_WORDS, source=source_name(server))
    except HostRequestFailed as exc:
        log.warning("could not tell the host of others' words from %s: %s", server, exc)


@dataclass
class McpSource:
    """A stdio server of this group, in this container."""

    server: str
    command: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    pins: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None  # where it runs: the group's files/
    path: str = SERVER_PATH
    link: Link | None = None
    _guard: threading.Lock = field(default_factory=threading.Lock)

    @property
    def name(self) -> str:
        return source_name(self.server)

    def _link(self) -> Link:
        from orchestrator.mcp.link import Link, Stdio

        with self._guard:
            if self.link is None:
                env = {"PATH": self.path, "LANG": "C.UTF-8", **self.env}
                home = os.environ.get("HOME")
                if home:
                    env.setdefault("HOME", home)
                cwd = self.cwd if self.cwd is not None and os.path.isdir(self.cwd) else None
                self.link = Link(self.server, Stdio(self.command, self.args, env, cwd))
            return self.link

    def tools(self, box: Toolbox) -> Iterable[McpTool]:
        if not _granted(box, self.name):
            return ()  # not started for a turn that may not use it
        from orchestrator.mcp.link import LinkFailed

        try:
            listed = self._link().tools(MCP_LIST_TIMEOUT_SECONDS)
        except LinkFailed as exc:
            log.warning("%s", exc)
            return ()
        offered = sort_tools(self.server, listed, self.pins).offered
        return tuple(McpTool(_spec(self.server, t), self, t.name) for t in offered)

    def call(self, box: Toolbox, tool: str, args: dict[str, Any]) -> str:
        from orchestrator.mcp.link import LinkFailed

        try:
            result = self._link().call(tool, args, _timeout(box))
        except LinkFailed as exc:
            raise ToolError(str(exc)) from None
        _report_others_words(box, self.server)
        return render_result(self.server, result)

    def status(self) -> dict[str, Any]:
        link = self.link
        return {
            "server": self.server,
            "state": link.state if link is not None else "not started",
            "starts": link.starts if link is not None else 0,
            "last_error": link.last_error if link is not None else None,
        }

    def close(self) -> None:
        if self.link is not None:
            self.link.close()


@dataclass
class RemoteMcpSource:
    """A remote server the host calls for this group."""

    server: str

    @property
    def name(self) -> str:
        return source_name(self.server)

    def tools(self, box: Toolbox) -> Iterable[McpTool]:
        if box.host is None or not _granted(box, self.name):
            return ()
        try:
            answer = box.host.request(MCP_LIST, server=self.server)
        except HostRequestFailed as exc:
            log.warning("remote MCP server %s: %s", self.server, exc)
            return ()
        found = []
        for item in answer.get("tools") or []:
            try:
                tool = ListedTool.from_wire(item)
            except ValueError as exc:
                log.warning("remote MCP server %s: %s", self.server, exc)
                continue
            found.append(McpTool(_spec(self.server, tool), self, tool.name))
        return tuple(found)

    def call(self, box: Toolbox, tool: str, args: dict[str, Any]) -> str:
        if box.host is None:
            raise ToolError("remote MCP servers are called by the orchestrator; no host here")
        try:
            answer = box.host.request(
                MCP_CALL, server=self.server, tool=tool, arguments=args, timeout=_timeout(box)
            )
        except HostRequestFailed as exc:
            raise ToolError(str(exc)) from None
        return str(answer.get("result", ""))


def mcp_sources(
    setting: str | None, cwd: str | None = None, path: str = SERVER_PATH
) -> tuple[McpSource | RemoteMcpSource, ...]:
    """The sources of ORCHESTRATOR_MCP (as the host wrote it from group.yaml); a
    setting that cannot be read gives none, logged."""
    if not setting:
        return ()
    try:
        servers = json.loads(setting)["servers"]
        assert isinstance(servers, dict)
    except (ValueError, KeyError, TypeError, AssertionError):
        log.error("ORCHESTRATOR_MCP cannot be read; no MCP servers this time")
        return ()
    sources: list[McpSource | RemoteMcpSource] = []
    for server, entry in sorted(servers.items()):
        if server_problem(server) or not isinstance(entry, dict):
            log.error("ORCHESTRATOR_MCP: server %r left out", server)
            continue
        if entry.get("kind") == "remote":
            sources.append(RemoteMcpSource(server))
            continue
        command = entry.get("command")
        if not isinstance(command, str) or not command:
            log.error("ORCHESTRATOR_MCP: server %r has no command; left out", server)
            continue
        sources.append(
            McpSource(
                server,
                command,
                tuple(str(a) for a in entry.get("args") or ()),
                {str(k): str(v) for k, v in (entry.get("env") or {}).items()},
                {str(k): str(v) for k, v in (entry.get("tools") or {}).items()},
                cwd=cwd,
                path=path,
            )
        )
    return tuple(sources)


MCP_REQUESTS = "mcp-requests"
REQUEST_MCP_SERVER = ToolSpec(
    "request_mcp_server",
    "Ask this group's creators to add an MCP server: a program already in your sandbox's "
    "image (such as mcp-server-time, added as a package first) run over stdio, whose "
    "tools you could then use. Give a short name (lowercase letters, digits, -), the "
    "command and its args, and why. A creator approves it in this chat; no secrets in "
    "env (the sandbox can read them). Servers on the network are the operator's to add.",
    {
        "type": "object",
        "required": ["server", "command", "reason"],
        "additionalProperties": False,
        "properties": {
            "server": {"type": "string"},
            "command": {"type": "string"},
            "args": {"type": "array", "items": {"type": "string"}},
            "env": {"type": "object", "additionalProperties": {"type": "string"}},
            "reason": {"type": "string"},
        },
    },
)


def request_mcp_server(
    box: Toolbox,
    server: str,
    command: str,
    reason: str,
    args: list[Any] | None = None,
    env: dict[str, Any] | None = None,
) -> str:
    if box.host is None:
        raise ToolError("MCP servers are granted by the orchestrator; no host here")
    try:
        answer = box.host.request(
            MCP_REQUEST,
            server=server,
            command=command,
            args=args or [],
            env=env or {},
            reason=reason,
        )
    except HostRequestFailed as exc:
        raise ToolError(str(exc)) from None
    return str(answer.get("result", ""))


MCP_REQUEST_TOOLS = StaticSource(
    MCP_REQUESTS, (FunctionTool(REQUEST_MCP_SERVER, request_mcp_server),)
)
