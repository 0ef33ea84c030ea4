"""The provider interface: one completion per call, with tool calls or text."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

from orchestrator.agent.tools import ToolSpec

# What a completion is for: a conversation turn, a memory flush before compaction, or
# the summary of older turns.
TURN, FLUSH, SUMMARY = "turn", "flush", "summary"


class ProviderError(Exception):
    pass


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


@dataclass(frozen=True)
class Completion:
    text: str | None
    tool_calls: tuple[ToolCall, ...] = field(default_factory=tuple)


class Provider(abc.ABC):
    name: str = ""

    def __init__(self, model: str) -> None:
        self.model = model

    @abc.abstractmethod
    def complete(self, request: CompletionRequest) -> Completion: ...
