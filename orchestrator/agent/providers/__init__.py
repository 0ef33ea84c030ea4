"""Model providers inside the container: one small interface.

``offline`` is the embedded default and runs here. Every other provider name is one the
operator defined in orchestrator.yaml: its model runs on the host, reached through the
relay (``relay``), so API keys and the network never enter a container.
"""

from __future__ import annotations

import importlib

from orchestrator.agent.providers.base import (
    BudgetExhausted,
    Completion,
    CompletionRequest,
    Provider,
    ProviderError,
    ToolCall,
)

OFFLINE = "offline"
# provider name -> "module:class" of providers that run in the container
LOCAL: dict[str, str] = {
    OFFLINE: "orchestrator.agent.providers.offline:OfflineProvider",
}
RELAY = "orchestrator.agent.providers.relay:RelayProvider"


def get_provider(name: str, model: str) -> Provider:
    """The provider for ``name``: a local one, else the relay to the host (which knows
    the operator's providers and refuses unknown names)."""
    module, _, attr = LOCAL.get(name, RELAY).partition(":")
    cls = getattr(importlib.import_module(module), attr)
    provider: Provider = cls(model)
    return provider


__all__ = [
    "BudgetExhausted",
    "Completion",
    "CompletionRequest",
    "Provider",
    "ProviderError",
    "ToolCall",
    "get_provider",
]
