"""The relay provider: completions by a model the host calls for this group.

The request goes to the host as a ``model.complete`` request during the turn; the host
picks the provider and model from the group's configuration (never from this frame),
adds the credential, enforces the group's budgets, records usage, and answers with the
completion. Nothing here knows a key, a URL or a network.
"""

from __future__ import annotations

from typing import Any

from orchestrator.agent.hostlink import HostLink, HostRequestFailed
from orchestrator.agent.providers.base import (
    BudgetExhausted,
    Completion,
    CompletionRequest,
    ContextOverflow,
    Provider,
    ProviderError,
    ToolCall,
    TurnWaits,
)
from orchestrator.protocol import MODEL_COMPLETE


class RelayProvider(Provider):
    name = "relay"

    def complete(self, request: CompletionRequest, host: HostLink | None = None) -> Completion:
        if host is None:
            raise ProviderError(
                "this group's model runs on the host: turns must come through the daemon"
            )
        try:
            answer = host.request(MODEL_COMPLETE, **request.to_wire())
        except HostRequestFailed as exc:
            if exc.answer.get("budget"):
                raise BudgetExhausted(str(exc.answer.get("error") or exc)) from None
            if exc.answer.get("wait"):
                raise TurnWaits(str(exc.answer.get("error") or exc)) from None
            if exc.answer.get("overflow"):
                raise ContextOverflow(str(exc)) from None
            raise ProviderError(str(exc)) from None
        return completion_from_wire(answer)


def completion_from_wire(answer: dict[str, Any]) -> Completion:
    """A Completion from the host's answer; ProviderError when it is malformed."""
    text = answer.get("text")
    calls = answer.get("tool_calls") or []
    if (text is not None and not isinstance(text, str)) or not isinstance(calls, list):
        raise ProviderError("the host's completion is malformed")
    out = []
    for call in calls:
        if not (
            isinstance(call, dict)
            and isinstance(call.get("id"), str)
            and isinstance(call.get("name"), str)
            and isinstance(call.get("arguments"), dict)
        ):
            raise ProviderError("a tool call in the host's completion is malformed")
        out.append(ToolCall(call["id"], call["name"], call["arguments"]))
    usage = answer.get("usage")
    tokens = usage.get("input_tokens") if isinstance(usage, dict) else None
    reason = answer.get("stop_reason")
    return Completion(
        text,
        tuple(out),
        tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None,
        reason if isinstance(reason, str) else None,
        answer.get("shown") is True,
    )
