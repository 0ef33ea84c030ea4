"""Model providers: one small interface, found by name in a registry.

Real providers (which reach their API through the host relay, so keys never enter a
container) register here too; ``offline`` is the embedded default.
"""

from __future__ import annotations

import importlib

from orchestrator.agent.providers.base import (
    Completion,
    CompletionRequest,
    Provider,
    ProviderError,
    ToolCall,
)

# provider name -> "module:class"
REGISTRY: dict[str, str] = {
    "offline": "orchestrator.agent.providers.offline:OfflineProvider",
}


def get_provider(name: str, model: str) -> Provider:
    """An instance of the provider called ``name``; ProviderError when unknown."""
    target = REGISTRY.get(name)
    if target is None:
        raise ProviderError(f"unknown provider {name!r}; available: {', '.join(sorted(REGISTRY))}")
    module, _, attr = target.partition(":")
    cls = getattr(importlib.import_module(module), attr)
    provider: Provider = cls(model)
    return provider


__all__ = [
    "Completion",
    "CompletionRequest",
    "Provider",
    "ProviderError",
    "ToolCall",
    "get_provider",
]
