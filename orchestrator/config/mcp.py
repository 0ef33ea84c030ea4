"""``mcp_servers`` of orchestrator.yaml: remote MCP servers the host calls for groups.

    mcp_servers:
      tracker:
        url: https://mcp.example.com/mcp     # streamable HTTP (transport: sse for older servers)
        headers:                             # each value from a secret, never inline
          Authorization: {secret: tracker-token, prefix: "Bearer "}   # or env: VAR
        groups: [support]                    # the groups that may attach it

A group attaches one with ``group.yaml`` ``mcp.servers.NAME.remote: tracker``. The
credentials stay on the host: they are never in group.yaml, a mount, a frame or a log
line. Servers that need an interactive OAuth login are not supported.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.mcp.tools import server_problem
from orchestrator.secrets import SecretRef, parse_secret_ref

if TYPE_CHECKING:
    from orchestrator.mcp.link import Remote
    from orchestrator.validate import MappingReader

TRANSPORTS = ("http", "sse")
HEADER_NAME = re.compile(r"[A-Za-z0-9-]{1,64}")
GROUP_FOLDER = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")


@dataclass(frozen=True)
class HeaderDef:
    name: str
    value: SecretRef
    prefix: str = ""


@dataclass(frozen=True)
class RemoteServerDef:
    name: str
    url: str
    transport: str = "http"
    headers: tuple[HeaderDef, ...] = ()
    groups: tuple[str, ...] = ()  # folders allowed to attach it

    def allows(self, folder: str) -> bool:
        return folder in self.groups

    def target(self, secrets_file: Path | None) -> Remote:
        """What a link connects to, its header secrets read (MissingSecret names which)."""
        from orchestrator.mcp.link import Remote  # asyncio and the SDK, when a link is made

        return Remote(self.url, self.resolve_headers(secrets_file), transport=self.transport)

    def resolve_headers(self, secrets_file: Path | None) -> dict[str, str]:
        """The headers with their secrets read (MissingSecret names which)."""
        return {
            h.name: h.prefix
            + h.value.require(f"mcp_servers.{self.name}.headers.{h.name}", secrets_file)
            for h in self.headers
        }


def parse_mcp_servers(reader: MappingReader) -> Mapping[str, RemoteServerDef]:
    found: dict[str, RemoteServerDef] = {}
    for name in reader.data:
        if problem := server_problem(name):
            raise reader.fail(str(name), problem)
        item = reader.child(str(name))
        item.reject_unknown(["url", "transport", "headers", "groups"])
        url = item.text("url", pattern=r"https?://\S+", max_chars=2000)
        headers = []
        head = item.child("headers")
        for header in head.data:
            if not isinstance(header, str) or not HEADER_NAME.fullmatch(header):
                raise head.fail(str(header), "is not an HTTP header name")
            if not isinstance(head.data[header], dict):
                raise head.fail(
                    header,
                    "must be a mapping that names where its value comes from, never the "
                    "value itself: {env: VAR} or {secret: NAME}, with prefix: 'Bearer ' if needed",
                )
            value = head.child(header)
            value.reject_unknown(["env", "secret", "prefix"])
            ref = parse_secret_ref(value, "env", "secret", required=True)
            prefix = value.raw("prefix", "")
            if not isinstance(prefix, str) or len(prefix) > 64 or "\n" in prefix:
                raise value.fail("prefix", "must be a short line of text, such as 'Bearer '")
            headers.append(HeaderDef(header, ref, prefix))
        groups = item.id_list("groups", max_chars=63)
        for index, folder in enumerate(groups):
            if not GROUP_FOLDER.fullmatch(folder):
                raise item.child_fail("groups", index, f"got {folder!r}; expected a group folder")
        found[str(name)] = RemoteServerDef(
            name=str(name),
            url=url,
            transport=item.choice("transport", TRANSPORTS, "http"),
            headers=tuple(headers),
            groups=groups,
        )
    return found
