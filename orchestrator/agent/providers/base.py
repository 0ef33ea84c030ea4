"""The provider interface: one completion per call, with tool calls or text."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orchestrator.agent.tools import ToolSpec

if TYPE_CHECKING:
    from orchestrator.agent.hostlink import HostLink

# What a completion is for: a conversation turn, a memory flush before compaction, or
# the summary of older turns.
TURN, FLUSH, SUMMARY = "turn", "flush", "summary"


class ProviderError(Exception):
    pass


class BudgetExhausted(ProviderError):
    """The group's model budget is used up: the turn ends with this plain sentence as its
    reply, and is not retried."""


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class CompletionRequest:
    system: str
    # {"role": "user"|"assistant"|"tool", "content": ..., "tool_calls": [...], "tool_call_id": ...}
    messages: list[dict[str, Any]]
    tools: tuple[ToolSpec, ...] = ()
    purpose: str = TURN

    def to_wire(self) -> dict[str, Any]:
        """The request as sent to the host relay."""
        return {
            "system": self.system,
            "messages": self.messages,
            "tools": [
                {"name": t.name, "description": t.description, "parameters": t.parameters}
                for t in self.tools
            ],
            "purpose": self.purpose,
        }


@dataclass(frozen=True)
class Completion:
    text: str | None
    tool_calls: tuple[ToolCall, ...] = field(default_factory=tuple)


class Provider(abc.ABC):
    name: str = ""

    def __init__(self, model: str) -> None:
        self.model = model

    @abc.abstractmethod
    def complete(self, request: CompletionRequest, host: HostLink | None = None) -> Completion:
        """One completion. ``host`` is the turn's link to the host, for providers whose
        model runs there; ProviderError (BudgetExhausted) when it cannot answer."""
