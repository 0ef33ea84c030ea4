"""``group.yaml`` ``mcp.servers``: the MCP servers a group's agent may use.

A server is either a command in the group's own image, run in its container over
stdio (``command``, ``args``, ``env``: no secrets, the container can read them), or
``remote: NAME``, a definition in orchestrator.yaml (``mcp_servers``) that the operator
allowed for this group, called by the host with its credentials. ``trust``: whose turns
may use it (default creators only). ``tools``: the tools approved when the server was
added, each with the hash of what the model sees of it; anything else the server lists
waits for approval (``orchestrator mcp approve``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from orchestrator.limits import MCP_SERVERS_MAX, MCP_TOOLS_MAX
from orchestrator.mcp.tools import HASH_CHARS, server_problem
from orchestrator.validate import MappingReader, text_problem

TRUST_LEVELS = ("creator", "member", "guest")
DEFAULT_TRUST = ("creator",)
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
# what no server's env may set: the runner's own settings and the loader's
RESERVED_ENV = re.compile(r"(ORCHESTRATOR_.*|LD_.*|PYTHONPATH|PYTHONHOME|PATH)")
MCP_TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
ARG_MAX_CHARS = 1000
ARGS_MAX = 64


@dataclass(frozen=True)
class McpServer:
    name: str
    command: str | None = None  # stdio, in the container
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    remote: str | None = None  # orchestrator.yaml mcp_servers.NAME, called by the host
    trust: tuple[str, ...] = DEFAULT_TRUST
    tools: tuple[tuple[str, str], ...] = ()  # approved: (tool, hash)

    @property
    def kind(self) -> str:
        return "remote" if self.remote is not None else "stdio"

    @property
    def pins(self) -> dict[str, str]:
        return dict(self.tools)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.remote is not None:
            data["remote"] = self.remote
        else:
            data["command"] = self.command
            if self.args:
                data["args"] = list(self.args)
            if self.env:
                data["env"] = dict(self.env)
        data["trust"] = list(self.trust)
        data["tools"] = dict(self.tools)
        return data


@dataclass(frozen=True)
class McpSettings:
    servers: tuple[McpServer, ...] = ()

    def get(self, name: str) -> McpServer | None:
        return next((s for s in self.servers if s.name == name), None)

    def for_trust(self, trust: str | None) -> tuple[McpServer, ...]:
        return tuple(s for s in self.servers if trust is not None and trust in s.trust)

    def to_dict(self) -> dict[str, Any]:
        return {"servers": {s.name: s.to_dict() for s in self.servers}}


def parse_mcp(reader: MappingReader) -> McpSettings:
    reader.reject_unknown(["servers"])
    servers = reader.child("servers")
    if len(servers.data) > MCP_SERVERS_MAX:
        raise reader.fail("servers", f"{len(servers.data)} servers; at most {MCP_SERVERS_MAX}")
    found = []
    for name in servers.data:
        if problem := server_problem(name):
            raise servers.fail(str(name), problem)
        found.append(_server(str(name), servers.child(str(name))))
    return McpSettings(tuple(found))


def _server(name: str, reader: MappingReader) -> McpServer:
    reader.reject_unknown(["command", "args", "env", "remote", "trust", "tools"])
    remote = reader.text("remote", None, max_chars=32) if "remote" in reader.data else None
    if remote is not None:
        if problem := server_problem(remote):
            raise reader.fail("remote", problem)
        for key in ("command", "args", "env"):
            if key in reader.data:
                raise reader.fail(
                    key, "a remote server has no command, args or env: the host calls it"
                )
        command = None
    else:
        if "command" not in reader.data:
            raise reader.fail(
                "command",
                "is required: the server's program in the group's image (such as "
                "mcp-server-time), or remote: NAME for a server in orchestrator.yaml",
            )
        command = reader.text("command", max_chars=ARG_MAX_CHARS)
    args = reader.id_list("args", max_chars=ARG_MAX_CHARS) if "args" in reader.data else ()
    if len(args) > ARGS_MAX:
        raise reader.fail("args", f"{len(args)} arguments; at most {ARGS_MAX}")
    env = _env(reader.child("env"))
    trust = reader.id_list("trust", max_chars=20) if "trust" in reader.data else DEFAULT_TRUST
    for index, level in enumerate(trust):
        if level not in TRUST_LEVELS:
            raise reader.child_fail(
                "trust", index, f"got {level!r}; expected creator, member or guest"
            )
    return McpServer(
        name=name,
        command=command,
        args=args,
        env=env,
        remote=remote,
        trust=tuple(dict.fromkeys(trust)),
        tools=_pins(reader.child("tools")),
    )


def _env(reader: MappingReader) -> tuple[tuple[str, str], ...]:
    out = []
    for key, value in reader.data.items():
        if not isinstance(key, str) or not ENV_NAME.fullmatch(key):
            raise reader.fail(str(key), "is not a variable name (letters, digits and _)")
        if RESERVED_ENV.fullmatch(key):
            raise reader.fail(key, "is set by the orchestrator and cannot be changed here")
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise reader.fail(key, f"must be a string, got {value!r}")
        if len(str(value)) > ARG_MAX_CHARS or text_problem(str(value)):
            raise reader.fail(key, f"must be one line of at most {ARG_MAX_CHARS} characters")
        out.append((key, str(value)))
    return tuple(out)


def _pins(reader: MappingReader) -> tuple[tuple[str, str], ...]:
    if len(reader.data) > MCP_TOOLS_MAX:
        raise reader.fail_here(f"{len(reader.data)} tools; at most {MCP_TOOLS_MAX}")
    out = []
    for tool, digest in reader.data.items():
        if not isinstance(tool, str) or not MCP_TOOL_NAME.fullmatch(tool):
            raise reader.fail(str(tool), "is not an MCP tool name")
        if not isinstance(digest, str) or not re.fullmatch(rf"[0-9a-f]{{{HASH_CHARS}}}", digest):
            raise reader.fail(
                tool,
                f"got {digest!r}; expected the tool's {HASH_CHARS}-hex-digit hash, as "
                "orchestrator mcp add or mcp approve writes it",
            )
        out.append((tool, digest))
    return tuple(out)
