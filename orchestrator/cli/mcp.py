"""``orchestrator mcp``: a group's MCP servers: add, list, test, approve, remove."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from orchestrator.cli import CliContext
from orchestrator.cli.output import print_json, print_table, safe_line
from orchestrator.errors import OrchestratorError
from orchestrator.groups import GroupStore

if TYPE_CHECKING:
    from orchestrator.groups import Group
    from orchestrator.groups.mcpconfig import McpServer
    from orchestrator.mcp.tools import ListedTool

pass_cli = click.make_pass_decorator(CliContext)
GROUP_OPTION = click.option(
    "--group", "group_name", required=True, help="The group (name or folder)."
)


@click.group()
def mcp() -> None:
    """A group's MCP (Model Context Protocol) servers: tools from the ecosystem.

    A stdio server is a program in the group's own image (a Python package added with
    `orchestrator group packages NAME --add-python ...`, or a Debian package), run in
    the group's container with no network; it starts on the first turn that may use
    it and is kept while the container lives. A remote server is defined by the
    operator in orchestrator.yaml (mcp_servers.NAME: url, headers from secrets, the
    groups allowed) and called by the host: its credentials never reach the container.

    When a server is added, its tools are listed and approved: group.yaml pins each
    tool's name and a hash of its description and schema. A tool the server adds or
    changes later is not offered to the model until `mcp approve` (see `mcp list`).
    `trust` says whose turns may use the server (default: creators only).

    \b
    Examples:
      orchestrator group packages family --add-python mcp-server-time --build
      orchestrator mcp add time --group family --command mcp-server-time
      orchestrator mcp add tracker --group support --remote tracker --trust creator,member
      orchestrator mcp list --group family --check
      orchestrator mcp approve time --group family
      orchestrator mcp remove time --group family
    """


def _listing(obj: CliContext, group: Group, server: McpServer) -> tuple[list[ListedTool], int]:
    """What ``server`` lists now: in a throwaway container made like the group's for a
    stdio server, from the host for a remote one."""
    from orchestrator.config import load_config
    from orchestrator.mcp.link import Link, LinkFailed

    if server.remote is not None:
        config = load_config(obj.home)
        definition = config.mcp_servers.get(server.remote)
        if definition is None:
            known = ", ".join(sorted(config.mcp_servers)) or "none"
            raise click.ClickException(
                f"orchestrator.yaml defines no mcp_servers.{server.remote} (defined: {known})"
            )
        if not definition.allows(group.folder):
            raise click.ClickException(
                f"mcp_servers.{server.remote} in orchestrator.yaml does not list "
                f"{group.folder} under groups: only the groups listed there may attach it"
            )
        link = Link(server.name, definition.target(config.secrets_file))
        try:
            return link.tools(), link.cut_tools
        except LinkFailed as exc:
            raise click.ClickException(str(exc)) from None
        finally:
            link.close()
    from orchestrator.cli.runtime import open_runtime
    from orchestrator.runtime.mcp_probe import ProbeFailed, list_stdio_tools

    try:
        return list_stdio_tools(open_runtime(obj), group, server)
    except ProbeFailed as exc:
        raise click.ClickException(exc.message) from None


def _show_tools(tools: list[ListedTool], server: str, cut: int) -> None:
    for tool in tools:
        problem = tool.problem(server)
        line = " ".join(tool.description.split())[:160]
        mark = f"  (cannot be offered: {problem})" if problem else ""
        click.echo(f"  {safe_line(tool.name)}: {safe_line(line)}{mark}", err=True)
    if cut:
        click.echo(f"  ... and {cut} more tools, past the bound; not offered", err=True)


def _find(obj: CliContext, group_name: str) -> tuple[GroupStore, Group]:
    store = GroupStore(obj.home)
    return store, store.find(group_name)


@mcp.command("add")
@click.argument("name")
@GROUP_OPTION
@click.option("--command", "command", help="The stdio server's program, in the group's image.")
@click.option("--arg", "args", multiple=True, help="An argument of the program (repeat).")
@click.option(
    "--env",
    "env",
    multiple=True,
    metavar="KEY=VALUE",
    help="An environment variable of the program (repeat). No secrets: the "
    "container can read them.",
)
@click.option("--remote", help="A remote server defined in orchestrator.yaml mcp_servers.")
@click.option(
    "--trust",
    default="creator",
    show_default=True,
    help="Whose turns may use it: creator, member, guest, comma-separated.",
)
@click.option(
    "--tool",
    "only",
    multiple=True,
    help="Approve only these tools (repeat); default: every tool listed.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the server as JSON.")
@pass_cli
def add(
    obj: CliContext,
    name: str,
    group_name: str,
    command: str | None,
    args: tuple[str, ...],
    env: tuple[str, ...],
    remote: str | None,
    trust: str,
    only: tuple[str, ...],
    as_json: bool,
) -> None:
    """Add MCP server NAME to a group: connect, list its tools, approve them.

    Give --command (a stdio server in the group's container) or --remote (a server
    of orchestrator.yaml, called by the host). Nothing changes unless the server
    starts and lists its tools.
    """
    from orchestrator.groups.config import config_lock
    from orchestrator.groups.config import set_mcp_server as set_server
    from orchestrator.groups.mcpconfig import McpServer
    from orchestrator.mcp.tools import server_problem

    if problem := server_problem(name):
        raise click.BadParameter(problem, param_hint="NAME")
    if (command is None) == (remote is None):
        raise click.UsageError("give --command PROGRAM (stdio) or --remote NAME, one of them")
    if remote is not None and (args or env):
        raise click.UsageError("--arg and --env are for a stdio server, not --remote")
    pairs = []
    for item in env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r}: expected KEY=VALUE", param_hint="--env")
        pairs.append((key, value))
    levels = tuple(t.strip() for t in trust.split(",") if t.strip())
    store, group = _find(obj, group_name)
    if group.config.mcp.get(name) is not None:
        raise click.UsageError(
            f"{group.folder} already has an MCP server {name!r}; remove it first, or "
            f"approve its tools again with: orchestrator mcp approve {name} --group {group.folder}"
        )
    server = McpServer(name, command, args, tuple(pairs), remote, levels)
    entry = server.to_dict()
    # checked before anything runs: a bad definition is refused with its key
    from orchestrator.groups.config import check_mcp_server as check_entry

    check_entry(group.config_file, name, entry)
    click.echo(f"connecting to {name} ...", err=True)
    tools, cut = _listing(obj, group, server)
    chosen = [t for t in tools if (not only or t.name in only) and t.problem(name) is None]
    missing = set(only) - {t.name for t in tools}
    if missing:
        raise click.BadParameter(
            f"{', '.join(sorted(missing))}: not listed by {name} "
            f"(it lists: {', '.join(t.name for t in tools) or 'nothing'})",
            param_hint="--tool",
        )
    click.echo(f"{name} lists {len(tools)} tools:", err=True)
    _show_tools(tools, name, cut)
    entry["tools"] = {t.name: t.digest for t in chosen}
    with config_lock(group.config_file):
        set_server(group.config_file, name, entry)
    click.echo(
        f"added {name} to {group.folder}: {len(chosen)} tools approved, for "
        f"{', '.join(levels)}; from the next turn",
        err=True,
    )
    if as_json:
        print_json(store.load(group.folder).config.mcp.get(name).to_dict())  # type: ignore[union-attr]


@mcp.command("list")
@click.option("--group", "group_name", help="One group (name or folder); default: every group.")
@click.option(
    "--check", is_flag=True, help="Connect to each server: its state, tools waiting for approval."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_cli
def list_(obj: CliContext, group_name: str | None, check: bool, as_json: bool) -> None:
    """List the groups' MCP servers: kind, trust, approved tools; with --check, each
    server's state, the tools waiting for approval and the last error."""
    from orchestrator.mcp.tools import sort_tools

    store = GroupStore(obj.home)
    groups = [store.find(group_name)] if group_name else store.groups()
    rows: list[dict[str, Any]] = []
    for group in groups:
        for server in group.config.mcp.servers:
            row: dict[str, Any] = {
                "group": group.folder,
                "server": server.name,
                "kind": server.kind,
                "runs": "host" if server.remote else "container",
                "what": server.remote or " ".join((server.command or "", *server.args)),
                "trust": list(server.trust),
                "tools": sorted(server.pins),
            }
            if check:
                try:
                    tools, _ = _listing(obj, group, server)
                    sorted_ = sort_tools(server.name, tools, server.pins)
                    row.update(
                        state="ok",
                        offered=[t.name for t in sorted_.offered],
                        waiting=[{"tool": t, "why": why} for t, why in sorted_.waiting],
                        missing=list(sorted_.missing),
                        last_error=None,
                    )
                except click.ClickException as exc:
                    row.update(state="failed", last_error=exc.message)
                except OrchestratorError as exc:
                    row.update(state="failed", last_error=exc.message)
            rows.append(row)
    if as_json:
        print_json({"servers": rows})
        return
    if not rows:
        click.echo("no MCP servers" + (f" in {groups[0].folder}" if group_name else ""))
        return
    head = ["GROUP", "SERVER", "RUNS ON", "TRUST", "TOOLS"] + (
        ["STATE", "WAITING"] if check else []
    )
    print_table(
        head,
        [
            [r["group"], r["server"], r["runs"], ",".join(r["trust"]), str(len(r["tools"]))]
            + ([r["state"], str(len(r.get("waiting") or []))] if check else [])
            for r in rows
        ],
    )
    for r in rows:
        for item in r.get("waiting") or []:
            click.echo(f"{r['group']}/{r['server']}: {item['tool']} waits: {item['why']}")
        if r.get("last_error"):
            click.echo(f"{r['group']}/{r['server']}: {safe_line(r['last_error'])}")


@mcp.command("test")
@click.argument("name")
@GROUP_OPTION
@pass_cli
def test(obj: CliContext, name: str, group_name: str) -> None:
    """Connect to NAME as the group would and list its tools (nothing changes)."""
    from orchestrator.mcp.tools import sort_tools

    _, group = _find(obj, group_name)
    server = _server(group, name)
    tools, cut = _listing(obj, group, server)
    click.echo(f"{name} lists {len(tools)} tools:")
    _show_tools(tools, name, cut)
    sorted_ = sort_tools(name, tools, server.pins)
    click.echo(f"offered: {', '.join(t.name for t in sorted_.offered) or 'none'}")
    for tool, why in sorted_.waiting:
        click.echo(f"waiting: {tool}: {why}")


@mcp.command("approve")
@click.argument("name")
@GROUP_OPTION
@click.option("--tool", "only", multiple=True, help="Approve only these tools (repeat).")
@pass_cli
def approve(obj: CliContext, name: str, group_name: str, only: tuple[str, ...]) -> None:
    """Approve NAME's tools as the server lists them now (new or changed ones too)."""
    from orchestrator.groups.config import config_lock
    from orchestrator.groups.config import set_mcp_server as set_server

    store, group = _find(obj, group_name)
    server = _server(group, name)
    tools, cut = _listing(obj, group, server)
    _show_tools(tools, name, cut)
    pins = dict(server.pins)
    for tool in tools:
        if (not only or tool.name in only) and tool.problem(name) is None:
            pins[tool.name] = tool.digest
    listed = {t.name for t in tools}
    pins = {k: v for k, v in pins.items() if k in listed}
    with config_lock(group.config_file):
        current = _server(store.load(group.folder), name)
        entry = current.to_dict()
        entry["tools"] = pins
        set_server(group.config_file, name, entry)
    click.echo(f"{name}: {len(pins)} tools approved for {group.folder}", err=True)


@mcp.command("remove")
@click.argument("name")
@GROUP_OPTION
@pass_cli
def remove(obj: CliContext, name: str, group_name: str) -> None:
    """Remove MCP server NAME from a group (its container is made again between turns)."""
    from orchestrator.groups.config import config_lock
    from orchestrator.groups.config import set_mcp_server as set_server

    _, group = _find(obj, group_name)
    _server(group, name)
    with config_lock(group.config_file):
        set_server(group.config_file, name, None)
    click.echo(f"removed {name} from {group.folder}", err=True)


def _server(group: Group, name: str) -> McpServer:
    server = group.config.mcp.get(name)
    if server is None:
        known = ", ".join(s.name for s in group.config.mcp.servers) or "none"
        raise click.BadParameter(
            f"{group.folder} has no MCP server {name!r} (it has: {known})", param_hint="NAME"
        )
    return server


@mcp.command("requests")
@GROUP_OPTION
@click.option("--approve", "approve_id", type=int, metavar="ID", help="Approve request ID.")
@click.option("--deny", "deny_id", type=int, metavar="ID", help="Deny request ID.")
@click.option("--json", "as_json", is_flag=True, help="Print the requests as JSON.")
@pass_cli
def requests(
    obj: CliContext, group_name: str, approve_id: int | None, deny_id: int | None, as_json: bool
) -> None:
    """The MCP server requests made from a group's chat, waiting for approval.

    A creator's agent may ask for a stdio server (request_mcp_server); the request is
    held and shown in the chat, exactly as an approval adds it, until a creator
    approves it there with /approve ID or the operator does here with --approve ID.
    Then its tools are listed and approved as listed, and the chat is told.
    """
    from orchestrator.cli.held import handle_requests
    from orchestrator.relay.approvals import MCP_SERVER

    _, group = _find(obj, group_name)
    handle_requests(
        obj,
        group.folder,
        MCP_SERVER,
        "MCP server request",
        approve_id=approve_id,
        deny_id=deny_id,
        as_json=as_json,
        listing=f"orchestrator mcp requests --group {group.folder}",
    )
