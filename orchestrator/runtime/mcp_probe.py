"""Listing a group's stdio MCP server from the host: ``orchestrator.agent.mcp_probe``
run in a throwaway container made like the group's (``GroupRuntime.probe``: its image,
user and limits, no network, none of its mounts), so that neither the group's files nor
its running container are touched."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from orchestrator.errors import OrchestratorError

if TYPE_CHECKING:
    from orchestrator.groups import Group
    from orchestrator.groups.mcpconfig import McpServer
    from orchestrator.mcp.tools import ListedTool
    from orchestrator.runtime.lifecycle import GroupRuntime


class ProbeFailed(OrchestratorError):
    """The server could not be started or listed (the message says why)."""


def list_stdio_tools(
    runtime: GroupRuntime, group: Group, server: McpServer
) -> tuple[list[ListedTool], int]:
    """The server's tools as the group's container would see them, and how many more
    there were past the bound."""
    from orchestrator.mcp.tools import ListedTool

    entry = {"command": server.command, "args": list(server.args), "env": dict(server.env)}
    code, out = runtime.probe(
        group, ["python3", "-m", "orchestrator.agent.mcp_probe", json.dumps(entry)]
    )
    try:
        answer = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise ProbeFailed(
            f"the probe of MCP server {server.name!r} in {group.folder}'s image gave no answer "
            f"(exit code {code})",
            hint=f"is the group's image built? orchestrator group packages {group.folder}",
        ) from None
    try:
        if not isinstance(answer, dict):
            raise ValueError("it is not an object")
        if "error" in answer:
            said = str(answer["error"]).strip()
            raise ProbeFailed(
                f"the probe of MCP server {server.name!r} in {group.folder}'s image failed: "
                + (said or "it gave no reason")
            )
        tools = answer.get("tools")
        if not isinstance(tools, list):
            raise ValueError("it has no list of tools")
        return [ListedTool.from_wire(t) for t in tools], int(answer.get("cut") or 0)
    except (TypeError, ValueError, OverflowError) as exc:  # the image's to write
        raise ProbeFailed(
            f"the probe of MCP server {server.name!r} in {group.folder}'s image gave an "
            f"answer of the wrong shape: {exc}"
        ) from None
