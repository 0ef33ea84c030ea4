"""``group.yaml`` ``web``: one egress policy per group, for ``web_fetch``, ``web_search``
and the shell's gate.

    web:
      enabled: true              # default false: no web at all
      trust: [creator]           # whose turns may use it
      allow: ["*.wikipedia.org"] # name patterns; empty: any public name for web_fetch,
                                 # and nothing for the shell's gate
      deny: ["*.example.com"]
      ports: [80, 443]
      max_fetches_per_hour: 60
      allow_addresses: ["127.0.0.1:8080"]   # private host:ports opened on purpose
      search: local              # a backend of orchestrator.yaml web_search
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any

from orchestrator.limits import DEFAULT_WEB_FETCHES_PER_HOUR
from orchestrator.validate import MappingReader
from orchestrator.web.guard import Rules

TRUST_LEVELS = ("creator", "member", "guest")
PATTERN = re.compile(r"(\*\.)?([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.)*[a-z0-9_-]{1,63}")
LISTS_MAX = 200


@dataclass(frozen=True)
class WebSettings:
    enabled: bool = False
    trust: tuple[str, ...] = ("creator",)
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    ports: tuple[int, ...] = (80, 443)
    max_fetches_per_hour: int = DEFAULT_WEB_FETCHES_PER_HOUR
    allow_addresses: tuple[str, ...] = ()
    search: str | None = None

    def rules(self, *, gate: bool = False) -> Rules:
        """The guard's rules; ``gate``: the shell's, where an empty allow list allows
        nothing."""
        return Rules(self.allow, self.deny, self.ports, self.allow_addresses, need_allow=gate)

    def open_to(self, trust: str | None) -> bool:
        return self.enabled and trust is not None and trust in self.trust

    def to_dict(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "trust": list(self.trust),
            "allow": list(self.allow),
            "deny": list(self.deny),
            "ports": list(self.ports),
            "max_fetches_per_hour": self.max_fetches_per_hour,
            "allow_addresses": list(self.allow_addresses),
            "search": self.search,
        }


def parse_web(reader: MappingReader) -> WebSettings:
    reader.reject_unknown(
        ["enabled", "trust", "allow", "deny", "ports", "max_fetches_per_hour",
         "allow_addresses", "search"]
    )  # fmt: skip
    trust = reader.id_list("trust", max_chars=20) if "trust" in reader.data else ("creator",)
    for index, level in enumerate(trust):
        if level not in TRUST_LEVELS:
            raise reader.child_fail(
                "trust", index, f"got {level!r}; expected creator, member or guest"
            )
    patterns = {}
    for key in ("allow", "deny"):
        items = tuple(p.lower() for p in reader.id_list(key, max_chars=253))
        if len(items) > LISTS_MAX:
            raise reader.fail(key, f"{len(items)} entries; at most {LISTS_MAX}")
        for index, item in enumerate(items):
            if not PATTERN.fullmatch(item):
                raise reader.child_fail(
                    key, index,
                    f"got {item!r}; expected a host name (example.org) or a pattern of its "
                    "subdomains (*.example.org)",
                )  # fmt: skip
        patterns[key] = items
    ports_raw = reader.raw("ports", [80, 443])
    if not isinstance(ports_raw, list) or not all(
        isinstance(p, int) and not isinstance(p, bool) and 1 <= p <= 65535 for p in ports_raw
    ):
        raise reader.fail(
            "ports", f"got {ports_raw!r}; expected a list of ports, such as [80, 443]"
        )
    addresses = reader.id_list("allow_addresses", max_chars=300)
    for index, item in enumerate(addresses):
        if problem := _address_problem(item):
            raise reader.child_fail("allow_addresses", index, problem)
    return WebSettings(
        enabled=reader.boolean("enabled", False),
        trust=tuple(dict.fromkeys(trust)),
        allow=patterns["allow"],
        deny=patterns["deny"],
        ports=tuple(dict.fromkeys(ports_raw)),
        max_fetches_per_hour=reader.whole_number(
            "max_fetches_per_hour", DEFAULT_WEB_FETCHES_PER_HOUR, 1, 100_000, "1 to 100000"
        ),
        allow_addresses=tuple(dict.fromkeys(addresses)),
        search=reader.text("search", max_chars=40) if "search" in reader.data else None,
    )


def _address_problem(item: str) -> str | None:
    host, sep, port = item.rpartition(":")
    expected = f"got {item!r}; expected HOST:PORT, such as 127.0.0.1:8080 or [::1]:8080"
    if not sep or not port.isdigit() or not 1 <= int(port) <= 65535:
        return expected
    bracketed = host.startswith("[") and host.endswith("]")
    bare = host[1:-1] if bracketed else host
    try:
        address = ipaddress.ip_address(bare)
        if bracketed and address.version != 6:
            return f"got {item!r}; brackets are for an IPv6 address only: {bare}:{port}"
    except ValueError:
        if not re.fullmatch(r"[a-z0-9.-]{1,253}", host):
            return expected
    return None
