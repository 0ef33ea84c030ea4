"""``mcp.list`` and ``mcp.call``: a group's remote MCP servers, called by the host;
``others.words``: the runner says a turn received a tool's result (an MCP server's in
the container), which the host records against the turn's message.

Every decision rests on the host's records: the server must be attached to the group
(group.yaml ``mcp.servers.NAME.remote``), allowed for it by the operator
(orchestrator.yaml ``mcp_servers.NAME.groups``), open to the sender's trust, and the
tool one the operator approved, unchanged since (its hash pinned). A refusal is an
answer for the model, not a failed turn.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from orchestrator import protocol
from orchestrator.errors import OrchestratorError
from orchestrator.limits import MCP_CALL_TIMEOUT_SECONDS, MCP_SCHEMA_MAX_BYTES
from orchestrator.mcp.link import Link, LinkFailed
from orchestrator.mcp.tools import ListedTool, render_result, sort_tools, source_name
from orchestrator.relay.errors import RelayViolation
from orchestrator.relay.ops.base import FixedCap

if TYPE_CHECKING:
    from orchestrator.relay.turn import TurnRelay

log = logging.getLogger("orchestrator.relay")


class Refused(Exception):
    pass


def _server_name(frame: dict[str, Any]) -> str:
    server = frame.get("server")
    if not isinstance(server, str) or not 0 < len(server) <= 32:
        raise RelayViolation("mcp request: server must be a server name")
    return server


def _link(turn: TurnRelay, server: str) -> Link:
    """The host's session for this turn's group with ``server``, if the turn may use it."""
    group, message = turn.group, turn.message
    attached = group.config.mcp.get(server)
    if attached is None or attached.remote is None:
        raise Refused(f"no remote MCP server {server!r} is attached to this group")
    if message.trust not in attached.trust:
        raise Refused(f"MCP server {server!r} is not open to a {message.trust}'s turn")
    config = turn.context.config
    definition = config.mcp_servers.get(attached.remote)
    if definition is None or not definition.allows(group.folder):
        raise Refused(
            f"MCP server {server!r} names remote {attached.remote!r}, which the operator "
            "has not allowed for this group (orchestrator.yaml mcp_servers)"
        )
    try:
        return turn.context.mcp.link(group.folder, definition, config.secrets_file)
    except OrchestratorError as exc:
        log.warning("group %s: remote MCP server %s: %s", group.folder, server, exc.message)
        raise Refused(
            f"MCP server {server!r} is not configured on the host: {exc.message}"
        ) from None


def offered(turn: TurnRelay, server: str) -> tuple[Link, tuple[ListedTool, ...]]:
    link = _link(turn, server)
    attached = turn.group.config.mcp.get(server)
    assert attached is not None
    try:
        listed = link.tools()
    except LinkFailed as exc:
        raise Refused(str(exc)) from None
    return link, sort_tools(server, listed, attached.pins).offered


class McpList(FixedCap):
    name = protocol.MCP_LIST

    def handle(self, turn: TurnRelay, frame: dict[str, Any]) -> dict[str, Any]:
        server = _server_name(frame)
        try:
            _, tools = offered(turn, server)
        except Refused as exc:
            return {"ok": False, "error": str(exc)}
        return {"ok": True, "tools": [t.to_wire() for t in tools]}


class McpCall:
    name = protocol.MCP_CALL

    def cap(self, turn: TurnRelay) -> int:
        return 4 * MCP_SCHEMA_MAX_BYTES + 4096  # arguments as large as a schema allows, and more

    def handle(self, turn: TurnRelay, frame: dict[str, Any]) -> dict[str, Any]:
        server = _server_name(frame)
        tool, arguments = frame.get("tool"), frame.get("arguments")
        if not isinstance(tool, str) or not isinstance(arguments, dict):
            raise RelayViolation("mcp.call needs a tool name and arguments (an object)")
        timeout = min(float(MCP_CALL_TIMEOUT_SECONDS), max(turn.deadline - time.monotonic() - 1, 0))
        asked = frame.get("timeout")
        if isinstance(asked, int | float) and not isinstance(asked, bool) and asked > 0:
            timeout = min(timeout, float(asked))
        if timeout < 1:
            return {"ok": False, "error": "the turn's time is up: no tool call can start now"}
        try:
            link, tools = offered(turn, server)
            if tool not in {t.name for t in tools}:
                raise Refused(
                    f"{tool!r} is not an approved tool of MCP server {server!r} (orchestrator "
                    "mcp list shows what waits for approval)"
                )
            # from here the context holds what the server says
            turn.context.queue.mark_others_words(turn.message.id)
            result = link.call(tool, arguments, timeout)
        except (Refused, LinkFailed) as exc:
            log.info("group %s: mcp.call %s/%s: %s", turn.group.folder, server, tool, exc)
            return {"ok": False, "error": str(exc)}
        log.info(
            "group %s: mcp.call %s/%s by %r", turn.group.folder, server, tool, turn.message.sender
        )
        return {"ok": True, "result": render_result(server, result)}


# the runner's own sources of others' words (not MCP servers)
RUNNER_SOURCES = (protocol.DAILY_NOTES_SOURCE, protocol.SESSIONS_SOURCE)


class OthersWords(FixedCap):
    name = protocol.OTHERS_WORDS

    def handle(self, turn: TurnRelay, frame: dict[str, Any]) -> dict[str, Any]:
        source = frame.get("source")
        if not isinstance(source, str) or len(source) > 64:
            raise RelayViolation("others.words: source must be a tool source's name")
        attached = {source_name(s.name) for s in turn.group.config.mcp.servers}
        turn.context.queue.mark_others_words(turn.message.id)
        if source not in attached and source not in RUNNER_SOURCES:
            log.warning(
                "group %s: others' words from %r, not a source of this group; recorded",
                turn.group.folder,
                source,
            )
        return {"ok": True}


REASON_MAX_CHARS = 500


class McpRequest(FixedCap):
    """``mcp.request``: a creator's turn asks for a stdio server (a program already in
    the group's image). The definition is checked as group.yaml would check it, and
    held: the chat is shown exactly what an approval adds (``/approve ID`` by a creator
    there, or ``orchestrator mcp list --group G --approve ID``). Remote servers are the
    operator's alone."""

    name = protocol.MCP_REQUEST

    def handle(self, turn: TurnRelay, frame: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "result": self.decide(turn, frame)}

    def decide(self, turn: TurnRelay, frame: dict[str, Any]) -> str:
        import json

        from orchestrator.errors import InvalidConfig
        from orchestrator.groups.config import check_mcp_server
        from orchestrator.groups.mcpconfig import McpServer
        from orchestrator.relay.approvals import MCP_SERVER, hold

        message, group = turn.message, turn.group
        if message.trust != "creator" or message.sender not in group.config.creators:
            return "NOT_REQUESTED: only the group's creators may ask for an MCP server"
        reason = frame.get("reason")
        if not isinstance(reason, str) or not reason.strip() or len(reason) > REASON_MAX_CHARS:
            return f"NOT_REQUESTED: give a reason of 1 to {REASON_MAX_CHARS} characters"
        server, command = frame.get("server"), frame.get("command")
        args, env = frame.get("args") or [], frame.get("env") or {}
        if not isinstance(server, str) or not isinstance(command, str):
            return "NOT_REQUESTED: give the server's name and its command"
        if not isinstance(args, list) or not isinstance(env, dict):
            return "NOT_REQUESTED: args must be a list and env a mapping"
        if group.config.mcp.get(server) is not None:
            return f"NOT_REQUESTED: this group already has an MCP server {server!r}"
        entry = McpServer(
            server, command, tuple(map(str, args)), tuple((str(k), str(v)) for k, v in env.items())
        ).to_dict()
        entry.pop("tools")
        try:
            check_mcp_server(group.config_file, server, entry)
        except InvalidConfig as exc:  # named as the group knows it, not by the host's path
            return "NOT_REQUESTED: " + exc.message.replace(str(group.config_file), "group.yaml")
        content = json.dumps(
            {"server": server, **entry, "asked by": message.sender, "reason": reason.strip()},
            indent=2,
            ensure_ascii=False,
        )
        request = hold(
            turn.context.queue,
            kind=MCP_SERVER,
            folder=group.folder,
            message=message,
            content=content,
        )
        turn.context.notify(message.id)
        log.info("group %s: MCP server request %d held (%s)", group.folder, request.id, server)
        return (
            f"PENDING: request {request.id} is shown in this chat; a creator approves it with "
            f"/approve {request.id}; then the server's tools are listed and approved, and "
            "they are offered from a later turn (the chat is told)"
        )
