"""``web_search`` of orchestrator.yaml: the search backends the host calls for groups.

    web_search:
      local:
        kind: searxng                 # searxng | brave
        url: http://127.0.0.1:8888    # searxng: the instance's base URL (searched at <url>/search)
        max_results: 8                # 1..20, default 8
        timeout: 10s                  # default 10s
      brave:
        kind: brave                   # url defaults to Brave's Web Search API
        key_env: BRAVE_API_KEY        # or key_secret: NAME; brave needs one

A SearXNG instance must enable the JSON format (``search.formats`` in its settings.yml);
a key given for one is sent as ``Authorization: Bearer``, for a proxy in front of it.
Brave's key is its subscription token (``X-Subscription-Token``). Keys are read on the
host when a search is made: never in group.yaml, a mount, a frame or a log line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from orchestrator.limits import (
    WEB_SEARCH_DEFAULT_RESULTS,
    WEB_SEARCH_DEFAULT_TIMEOUT_SECONDS,
    WEB_SEARCH_MAX_RESULTS,
    WEB_SEARCH_MAX_TIMEOUT_SECONDS,
)
from orchestrator.secrets import SecretRef, parse_secret_ref

if TYPE_CHECKING:
    from orchestrator.validate import MappingReader

KINDS = ("searxng", "brave")
BRAVE_URL = "https://api.search.brave.com/res/v1/web/search"
BACKEND_NAME_PATTERN = r"[a-z0-9][a-z0-9_-]{0,39}"
URL_MAX_CHARS = 512


@dataclass(frozen=True)
class SearchBackendDef:
    """One backend of ``web_search``: ``url`` is SearXNG's base URL, or Brave's endpoint."""

    name: str
    kind: str
    url: str
    key: SecretRef = field(default_factory=SecretRef)  # none named: no key sent
    max_results: int = WEB_SEARCH_DEFAULT_RESULTS
    timeout_seconds: float = WEB_SEARCH_DEFAULT_TIMEOUT_SECONDS
    price: float | None = None  # per query, in orchestrator.yaml's currency; None: unpriced

    @property
    def endpoint(self) -> str:
        """The URL a search GETs."""
        return self.url.rstrip("/") + "/search" if self.kind == "searxng" else self.url

    def resolve_key(self, secrets_file: Path | None) -> str | None:
        """The key (None when none is named); MissingSecret when its reference points at
        nothing."""
        return self.key.resolve(f"web_search.{self.name}", secrets_file)

    def to_dict(self) -> dict[str, object]:
        """For people and JSON: never the key, only where it comes from."""
        return {
            "name": self.name,
            "kind": self.kind,
            "url": self.url,
            "key": self.key.describe(),
            "max_results": self.max_results,
            "timeout_seconds": self.timeout_seconds,
        }


def parse_web_search(reader: MappingReader) -> Mapping[str, SearchBackendDef]:
    """The ``web_search`` mapping of orchestrator.yaml, validated."""
    from orchestrator.units import parse_duration

    found: dict[str, SearchBackendDef] = {}
    for name in reader.data:
        if not isinstance(name, str) or not re.fullmatch(BACKEND_NAME_PATTERN, name):
            raise reader.fail(
                str(name),
                "backend names are 1-40 of a-z, 0-9, '-' and '_', starting with a letter or digit",
            )
        item = reader.child(name)
        item.reject_unknown(
            ["kind", "url", "key_env", "key_secret", "max_results", "timeout", "price_per_query"]
        )
        kind = item.choice("kind", KINDS, item.raw("kind"))
        if kind == "searxng" and "url" not in item.data:
            raise item.fail(
                "url",
                "is required for a searxng backend: the instance's base URL, such as "
                "http://127.0.0.1:8888",
            )
        url = BRAVE_URL
        if "url" in item.data:
            url = item.text("url", max_chars=URL_MAX_CHARS)
            if problem := _url_problem(url):
                raise item.fail("url", problem)
        key = parse_secret_ref(item, "key_env", "key_secret", required=False)
        if kind == "brave" and not key.given:
            raise item.fail(
                "key_env",
                "a brave backend needs key_env or key_secret (its subscription token, sent "
                "as X-Subscription-Token)",
            )
        max_results = item.whole_number(
            "max_results",
            WEB_SEARCH_DEFAULT_RESULTS,
            1,
            WEB_SEARCH_MAX_RESULTS,
            f"a whole number from 1 to {WEB_SEARCH_MAX_RESULTS}",
        )
        timeout = parse_duration(item.raw("timeout", WEB_SEARCH_DEFAULT_TIMEOUT_SECONDS))
        if timeout is None or not 1 <= timeout <= WEB_SEARCH_MAX_TIMEOUT_SECONDS:
            raise item.fail(
                "timeout",
                f"got {item.data.get('timeout')!r}; expected a duration from 1s to "
                f"{WEB_SEARCH_MAX_TIMEOUT_SECONDS}s, such as 10s",
            )
        price = item.raw("price_per_query", None)
        if price is not None and (
            isinstance(price, bool) or not isinstance(price, int | float) or not 0 <= price < 1e6
        ):
            raise item.fail(
                "price_per_query",
                f"got {price!r}; expected what one search costs, from 0, such as 0.005",
            )
        found[name] = SearchBackendDef(
            name,
            kind,
            url,
            key,
            max_results,
            float(timeout),
            float(price) if price is not None else None,
        )
    return found


def _url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a backend's URL, or None (a URL holding an '@' is not shown:
    it may carry a password)."""
    shown = "the URL" if "@" in url else repr(url)
    problem = f"got {shown}; expected an http:// or https:// URL, such as http://127.0.0.1:8888"
    if re.search(r"\s", url):
        return problem
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        return problem
    if parts.username is not None or parts.password is not None:
        return "holds credentials (user:password@); give the key by key_env or key_secret"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return problem
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        return f"got {shown}; the URL may hold no query or fragment (the search adds its own)"
    return None
