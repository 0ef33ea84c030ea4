"""``model.complete``: one completion by the group's model, called from the host.

Provider and model are the group's (from its group.yaml, never from the frame); the
credential is added here; budgets are checked before the call and usage recorded after.
A budget that is used up answers with ``budget: true`` and one plain sentence, which
the runner turns into the chat's reply; a provider that keeps failing answers with the
reason, so the delivery fails, is retried and at last dead-lettered with it.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from orchestrator import protocol
from orchestrator.limits import model_request_cap
from orchestrator.protocol import OFFLINE
from orchestrator.relay.budget import budget_refusal
from orchestrator.relay.errors import RelayViolation
from orchestrator.relay.providers.base import ModelCall, ProviderFailure
from orchestrator.relay.retry import call_with_retries
from orchestrator.secrets import MissingSecret
from orchestrator.store.usage import FAILED, OK, REFUSED, Call, utc_midnight

if TYPE_CHECKING:
    from orchestrator.relay.turn import TurnRelay

log = logging.getLogger("orchestrator.relay")
PURPOSES = ("turn", "flush", "summary")


def parse_call(frame: dict[str, Any]) -> ModelCall:
    """The call in a request frame; RelayViolation naming what is malformed."""
    system, messages, tools = frame.get("system"), frame.get("messages"), frame.get("tools", [])
    purpose = frame.get("purpose", "turn")
    if not isinstance(system, str):
        raise RelayViolation("model.complete: system must be text")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise RelayViolation("model.complete: messages must be a list of objects")
    for message in messages:
        if message.get("role") not in ("user", "assistant", "tool"):
            raise RelayViolation("model.complete: a message's role must be user, assistant or tool")
    if not isinstance(tools, list) or not all(
        isinstance(t, dict)
        and isinstance(t.get("name"), str)
        and isinstance(t.get("description"), str)
        and isinstance(t.get("parameters"), dict)
        for t in tools
    ):
        raise RelayViolation("model.complete: tools must be {name, description, parameters}")
    if purpose not in PURPOSES:
        raise RelayViolation(f"model.complete: purpose must be one of {', '.join(PURPOSES)}")
    return ModelCall(system, messages, tools, purpose)


class ModelComplete:
    name = protocol.MODEL_COMPLETE

    def cap(self, turn: TurnRelay) -> int:
        return model_request_cap(turn.group.config.context_budget)

    def handle(self, turn: TurnRelay, frame: dict[str, Any]) -> dict[str, Any]:
        call = parse_call(frame)
        group, message, context = turn.group, turn.message, turn.context
        config = group.config
        if config.provider == OFFLINE:
            raise RelayViolation("this group's provider runs inside its container")
        if config.provider not in context.config.providers:
            return {
                "ok": False,
                "error": f"provider {config.provider!r} is not defined in the daemon's "
                "configuration",
            }
        now = context.clock()

        def record(
            outcome: str, started: float, latency: float, tokens: tuple[int, int], error: str | None
        ) -> None:
            context.usage.record(
                Call(
                    message.id,
                    group.folder,
                    config.provider,
                    config.model,
                    call.purpose,
                    started,
                    latency,
                    tokens[0],
                    tokens[1],
                    outcome,
                    error,
                )
            )

        refusal = budget_refusal(
            config.limits,
            requests_last_minute=context.usage.requests_since(group.folder, now - 60),
            tokens_this_turn=context.usage.tokens_of_message(message.id),
            tokens_today=context.usage.tokens_since(group.folder, utc_midnight(now)),
        )
        if refusal is not None:
            record(REFUSED, now, 0.0, (0, 0), refusal)
            log.warning(
                "group %s, message %s: budget used up: %s", group.folder, message.id, refusal
            )
            return {"ok": False, "budget": True, "error": refusal}
        try:
            adapter = context.adapter(config.provider)
        except MissingSecret as exc:
            record(FAILED, now, 0.0, (0, 0), exc.message)
            return {"ok": False, "error": exc.message}
        started = time.monotonic()
        try:
            answer = call_with_retries(
                lambda timeout: adapter.complete(call, model=config.model, timeout=timeout),
                turn.deadline,
            )
        except ProviderFailure as exc:
            latency = (time.monotonic() - started) * 1000
            record(FAILED, now, latency, (0, 0), str(exc))
            log.warning("group %s: model call failed: %s", group.folder, exc)
            return {"ok": False, "error": str(exc)}
        latency = (time.monotonic() - started) * 1000
        record(OK, now, latency, (answer.input_tokens, answer.output_tokens), None)
        return {"ok": True, **answer.to_wire()}
