"""Applying an approved MCP server request (a held request of kind ``mcp-server``):
the server's definition, exactly as shown in the chat, goes into group.yaml (under the
lock the CLI takes) with no tool approved; then its tools are listed in a throwaway
container made like the group's, approved as listed (the pins of group.yaml), and the
chat is told which, or why the server could not be listed (its tools then stay
unoffered until the operator runs ``orchestrator mcp approve``)."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.store.held import HeldRequest
    from orchestrator.store.messages import MessageQueue

log = logging.getLogger("orchestrator.mcp")
SHOWN_ONLY = ("server", "asked by", "reason")  # in the notice, not in group.yaml


def apply_held(
    groups_dir: Path, folder: str, request: HeldRequest, approved_by: str
) -> tuple[bool, str]:
    from orchestrator.errors import InvalidConfig
    from orchestrator.groups.config import config_lock, load_group_config
    from orchestrator.groups.config import set_mcp_server as set_server

    asked = json.loads(request.content)
    name = asked["server"]
    entry = {k: v for k, v in asked.items() if k not in SHOWN_ONLY}
    config_file = groups_dir / folder / "group.yaml"
    with config_lock(config_file):
        if load_group_config(config_file).mcp.get(name) is not None:
            return False, f"the group has an MCP server {name!r} already"
        try:
            set_server(config_file, name, {**entry, "tools": {}})
        except InvalidConfig as exc:
            return False, exc.message
    log.info(
        "group %s: MCP server request %d (%s) approved by %r", folder, request.id, name, approved_by
    )
    return True, f"MCP server {name!r} is in group.yaml; its tools are being listed"


def pin_after_approval(
    queue: MessageQueue, groups_dir: Path, request: HeldRequest, *, background: bool = True
) -> threading.Thread | None:
    """List the approved server's tools, approve them as listed, and tell the request's
    chat which (or why none)."""
    from orchestrator.relay.approvals import tell_after

    return tell_after(
        queue, request, lambda: _pin(groups_dir, request), background=background, name="mcp"
    )


def _pin(groups_dir: Path, request: HeldRequest) -> str:
    from orchestrator.config import load_config
    from orchestrator.errors import OrchestratorError
    from orchestrator.groups import GroupStore
    from orchestrator.groups.config import config_lock
    from orchestrator.groups.config import set_mcp_server as set_server
    from orchestrator.home import Home
    from orchestrator.image.agent import agent_image_ref
    from orchestrator.image.group import GroupImages
    from orchestrator.runtime import open_backend
    from orchestrator.runtime.engine import connect
    from orchestrator.runtime.lifecycle import GroupRuntime, default_skills_root
    from orchestrator.runtime.mcp_probe import list_stdio_tools

    name = json.loads(request.content)["server"]
    home = Home(groups_dir.parent)
    try:
        config = load_config(home)
        store = GroupStore(home)
        client = connect()
        try:
            runtime = GroupRuntime(
                home,
                config,
                open_backend(config, client=client, home=home),
                lambda: agent_image_ref(client, config.image),
                skills_root=default_skills_root(),
                group_image=GroupImages(client, lambda: config.project),
            )
            group = store.load(request.group)
            server = group.config.mcp.get(name)
            if server is None:
                return f"MCP server {name!r} is no longer in group.yaml; nothing was approved"
            tools, _ = list_stdio_tools(runtime, group, server)
        finally:
            client.close()
        chosen = {t.name: t.digest for t in tools if t.problem(name) is None}
        with config_lock(group.config_file):
            current = store.load(request.group).config.mcp.get(name)
            if current is None:
                return f"MCP server {name!r} was removed meanwhile; nothing was approved"
            set_server(group.config_file, name, {**current.to_dict(), "tools": chosen})
    except OrchestratorError as exc:
        log.warning(
            "group %s: MCP server %s could not be listed: %s", request.group, name, exc.message
        )
        return (
            f"MCP server {name!r} was added but could not be listed: {exc.message}. None of "
            f"its tools is offered until the operator runs: orchestrator mcp approve {name} "
            f"--group {request.group}"
        )
    except Exception as exc:  # a background thread must say why, not vanish
        log.exception("group %s: MCP server %s could not be listed", request.group, name)
        return f"MCP server {name!r} was added but could not be listed: {exc}"
    listed = ", ".join(sorted(chosen)) or "none"
    return (
        f"MCP server {name!r} is added with {len(chosen)} tools approved ({listed}); they "
        "are offered once the group's container is made again, between turns, within a minute"
    )
