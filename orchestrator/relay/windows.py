"""The context window of each (provider, model), in tokens.

Taken from orchestrator.yaml (``providers.NAME.model_info.MODEL.context_tokens``) when it
says; else asked of a self-hosted server, which may report it: llama.cpp's ``/props``
(``default_generation_settings.n_ctx``) or its ``/v1/models`` (``meta.n_ctx``), Ollama's
``/api/show`` (the model's ``num_ctx`` parameter, else Ollama's default of 4096, never
more than its ``context_length``); else a documented default: the vendors' current
windows for their own APIs, SERVER_DEFAULT_CONTEXT_TOKENS for a server that says
nothing. What a server said is believed for CONTEXT_WINDOW_CACHE_SECONDS.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.config.providers import ProviderDef
from orchestrator.limits import (
    CONTEXT_WINDOW_CACHE_SECONDS,
    CONTEXT_WINDOW_PROBE_TIMEOUT_SECONDS,
    SERVER_DEFAULT_CONTEXT_TOKENS,
    VENDOR_CONTEXT_TOKENS,
)

log = logging.getLogger("orchestrator.relay")
OLLAMA_DEFAULT_NUM_CTX = 4096
CONFIGURED, REPORTED, DEFAULT = "orchestrator.yaml", "the server", "the default"

# (method, url, json body or None) -> the parsed JSON answer, or None
Fetch = Callable[[str, str, dict[str, Any] | None, dict[str, str]], Any]


@dataclass(frozen=True)
class Window:
    tokens: int
    source: str  # CONFIGURED, REPORTED or DEFAULT


def http_json(method: str, url: str, body: dict[str, Any] | None, headers: dict[str, str]) -> Any:
    """One small JSON request; None when it fails in any way (the server may not be one
    that reports a window)."""
    import json
    import urllib.request

    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, method=method, headers={**headers, "Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(
            request, timeout=CONTEXT_WINDOW_PROBE_TIMEOUT_SECONDS
        ) as answer:
            if answer.status != 200:
                return None
            return json.loads(answer.read(1024 * 1024))
    except (OSError, ValueError):  # urllib.error.URLError is an OSError
        return None


def _root(url: str) -> str:
    """A server's root from an API base URL (``http://h:8080/v1`` -> ``http://h:8080``)."""
    return re.sub(r"/v1/?$", "", url.rstrip("/"))


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def reported_window(provider: ProviderDef, model: str, key: str | None, fetch: Fetch) -> int | None:
    """What the provider's server reports of ``model``'s window, or None."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    root = _root(provider.url)
    props = fetch("GET", f"{root}/props", None, headers)  # llama.cpp
    if isinstance(props, dict):
        settings = props.get("default_generation_settings")
        if isinstance(settings, dict) and (n := _positive(settings.get("n_ctx"))):
            return n
    models = fetch("GET", f"{root}/v1/models", None, headers)  # llama.cpp's metadata
    if isinstance(models, dict) and isinstance(models.get("data"), list):
        for entry in models["data"]:
            if isinstance(entry, dict) and entry.get("id") in (model, None):
                meta = entry.get("meta")
                if isinstance(meta, dict) and (n := _positive(meta.get("n_ctx"))):
                    return n
    show = fetch("POST", f"{root}/api/show", {"model": model}, headers)  # Ollama
    if isinstance(show, dict):
        info = show.get("model_info")
        trained = None
        if isinstance(info, dict):
            trained = next(
                (_positive(v) for k, v in info.items() if str(k).endswith(".context_length")),
                None,
            )
        params = show.get("parameters")
        match = re.search(r"(?m)^\s*num_ctx\s+(\d+)", params) if isinstance(params, str) else None
        if match or trained:
            num_ctx = int(match[1]) if match else OLLAMA_DEFAULT_NUM_CTX
            return min(num_ctx, trained) if trained else num_ctx
    return None


class Windows:
    """The window of each (provider, model), from configuration, the server, or the
    default; a server is asked again after CONTEXT_WINDOW_CACHE_SECONDS."""

    def __init__(
        self, fetch: Fetch = http_json, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.fetch = fetch
        self.clock = clock
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str, str], tuple[float, Window]] = {}

    def of(self, provider: ProviderDef, model: str, key: str | None = None) -> Window:
        configured = provider.info(model).context_tokens
        if configured is not None:
            return Window(configured, CONFIGURED)
        if not provider.self_hosted:
            return Window(VENDOR_CONTEXT_TOKENS[provider.kind], DEFAULT)
        cache_key = (provider.name, provider.url, model)
        with self._lock:
            seen = self._seen.get(cache_key)
        if seen is not None and self.clock() - seen[0] < CONTEXT_WINDOW_CACHE_SECONDS:
            return seen[1]
        tokens = reported_window(provider, model, key, self.fetch)
        window = (
            Window(tokens, REPORTED) if tokens else Window(SERVER_DEFAULT_CONTEXT_TOKENS, DEFAULT)
        )
        if tokens is None:
            log.info(
                "provider %s reports no context window for %s; using %d tokens (set "
                "providers.%s.model_info.%s.context_tokens in orchestrator.yaml)",
                provider.name,
                model,
                window.tokens,
                provider.name,
                model,
            )
        with self._lock:
            self._seen[cache_key] = (self.clock(), window)
        return window
