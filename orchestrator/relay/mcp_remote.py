"""The host's sessions with remote MCP servers: one per (group, server), made on the
first turn that uses it and again when the server's definition or credentials change.
The credentials are read here, on the host, and never leave it."""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.config.mcp import RemoteServerDef
from orchestrator.mcp.link import Link


@dataclass
class RemoteLinks:
    _links: dict[tuple[str, str], tuple[str, Link]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def link(self, folder: str, definition: RemoteServerDef, secrets_file: Path | None) -> Link:
        """The session of ``folder`` with ``definition``'s server; MissingSecret when a
        header's secret cannot be found."""
        target = definition.target(secrets_file)
        stamp = hashlib.sha256(repr((target, sorted(target.headers.items()))).encode()).hexdigest()
        key = (folder, definition.name)
        with self._lock:
            known = self._links.get(key)
            if known is not None and known[0] == stamp:
                return known[1]
            old = known[1] if known is not None else None
            link = Link(definition.name, target)
            self._links[key] = (stamp, link)
        if old is not None:
            old.close()
        return link

    def close(self) -> None:
        with self._lock:
            links, self._links = list(self._links.values()), {}
        for _, link in links:
            link.close()
