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


class TurnWaits(ProviderError):
    """The host holds the turn back (its group reached a money cap and is paused): the
    turn ends unanswered and the host delivers the message again later."""


class ContextOverflow(ProviderError):
    """The request did not fit the model's context window: compacting may help."""


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
    max_tokens: int | None = None  # this call's own cap on its answer (a summary's)
    show: bool = False  # the answer's text may reach the chat while it streams

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
            "max_tokens": self.max_tokens,
            "show": self.show,
        }


# Why a completion stopped (as the host says it): its end, its length cap, tool calls,
# or the turn's deadline (the answer was cut)
STOP_END, STOP_LENGTH, STOP_TOOLS, STOP_CUT = "end", "length", "tool_calls", "cut"


@dataclass(frozen=True)
class Completion:
    text: str | None
    tool_calls: tuple[ToolCall, ...] = field(default_factory=tuple)
    input_tokens: int | None = None  # the provider's count of the request, when known
    stop_reason: str | None = None
    shown: bool = False  # its text reached the chat already, as it streamed


class Provider(abc.ABC):
    name: str = ""

    def __init__(self, model: str) -> None:
        self.model = model

    @abc.abstractmethod
    def complete(self, request: CompletionRequest, host: HostLink | None = None) -> Completion:
        """One completion. ``host`` is the turn's link to the host, for providers whose
        model runs there; ProviderError (BudgetExhausted) when it cannot answer."""
