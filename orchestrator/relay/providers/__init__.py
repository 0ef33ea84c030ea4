"""Provider adapters by kind. Each module imports its SDK only when a provider of that
kind is first used, so the daemon starts without them and the image never needs them."""

from __future__ import annotations

import importlib

from orchestrator.config.providers import ProviderDef
from orchestrator.relay.providers.base import HostProvider

# kind -> "module:class"
ADAPTERS: dict[str, str] = {
    "anthropic": "orchestrator.relay.providers.anthropic:AnthropicProvider",
    "openai": "orchestrator.relay.providers.openai:OpenAIProvider",
}


def adapter_for(definition: ProviderDef, key: str | None) -> HostProvider:
    module, _, attr = ADAPTERS[definition.kind].partition(":")
    cls = getattr(importlib.import_module(module), attr)
    provider: HostProvider = cls(definition, key)
    return provider
