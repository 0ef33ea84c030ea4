"""``model.complete``: one completion by the group's model, called from the host.

Provider and model are the group's (from its group.yaml, never from the frame): the
chat's pair, or the pair of the call's purpose (a scheduled task's run is ``tasks``,
decided from the host's records; a flush or summary the frame asks for is ``flush``);
the credential is added here; budgets are checked before the call and usage and cost
recorded after. A token budget that is used up answers with ``budget: true`` and one
plain sentence, which the runner turns into the chat's reply.

A money cap (``limits.cost_per_day``/``cost_per_month``) is checked before the call
against the most it may cost (its prompt estimated from above and an answer of the
longest allowed length): a call that would pass it is not made. The group is paused
(holder ``budget``) until the period ends, the chat that asked is told once, and the
message waits in the queue, its attempt not counted, until the pause ends or the
operator lifts it (``orchestrator group resume NAME --budget``).

Failures: a request over the model's context window answers ``overflow: true`` (the
runner compacts and asks once more; a second one is final). Transient failures are
retried within the turn's deadline, from one budget of RELAY_PROVIDER_ATTEMPTS per
message that its redeliveries share; any other refusal (a 4xx), or the budget spent,
is final: the message is dead-lettered at once with the reason.

A turn's answer streams into the chat as it is written (``show``), in pieces; at the
turn's deadline the stream is closed and the answer so far comes back cut.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from orchestrator import protocol
from orchestrator.limits import (
    OFFLINE_CONTEXT_TOKENS,
    RELAY_PROVIDER_ATTEMPTS,
    TURN_CUT_MARGIN_SECONDS,
    model_request_cap,
)
from orchestrator.money import (
    Prices,
    Tokens,
    day_start,
    local_time,
    month_start,
    next_day,
    next_month,
    worst_cost,
)
from orchestrator.protocol import IMAGES_PER_MESSAGE_MAX, OFFLINE, image_refs
from orchestrator.relay.budget import DAY, budget_refusal, cost_refusal
from orchestrator.relay.errors import RelayViolation
from orchestrator.relay.providers.base import Deadline, ModelCall, ProviderFailure
from orchestrator.relay.retry import call_with_retries
from orchestrator.relay.streaming import Pieces
from orchestrator.secrets import MissingSecret
from orchestrator.store.usage import FAILED, OK, REFUSED, Call, utc_midnight

if TYPE_CHECKING:
    from orchestrator.relay.turn import TurnRelay

log = logging.getLogger("orchestrator.relay")
PURPOSES = ("turn", "flush", "summary")  # what a frame may say a call is for
TASKS, FLUSH = "tasks", "flush"  # purposes of the group's models (group.yaml models)
BUDGET_HOLDER = "budget"  # the holder of a pause taken when a money cap is reached


def parse_call(frame: dict[str, Any]) -> ModelCall:
    """The call in a request frame; RelayViolation naming what is malformed."""
    system, messages, tools = frame.get("system"), frame.get("messages"), frame.get("tools", [])
    purpose = frame.get("purpose", "turn")
    max_tokens = frame.get("max_tokens")
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
    ):
        raise RelayViolation("model.complete: max_tokens must be a whole number from 1")
    if not isinstance(system, str):
        raise RelayViolation("model.complete: system must be text")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise RelayViolation("model.complete: messages must be a list of objects")
    for message in messages:
        if message.get("role") not in ("user", "assistant", "tool"):
            raise RelayViolation("model.complete: a message's role must be user, assistant or tool")
        if "images" in message and (
            message.get("role") == "assistant" or image_refs(message["images"]) is None
        ):
            raise RelayViolation(
                "model.complete: a user or tool message's images must be a list of at most "
                f"{IMAGES_PER_MESSAGE_MAX} paths under files/"
            )
        if "image_data" in message:
            raise RelayViolation("model.complete: images go by reference (images), never as data")
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
    return ModelCall(system, messages, tools, purpose, max_tokens)


class ModelComplete:
    name = protocol.MODEL_COMPLETE

    def cap(self, turn: TurnRelay) -> int:
        return model_request_cap(turn.window_tokens or OFFLINE_CONTEXT_TOKENS)

    def handle(self, turn: TurnRelay, frame: dict[str, Any]) -> dict[str, Any]:
        call = parse_call(frame)
        if turn.housekeeping and call.purpose == "turn":
            raise RelayViolation("model.complete: a flush outside a turn asks for flush calls")
        group, message, context = turn.group, turn.message, turn.context
        config = group.config
        if config.provider == OFFLINE:
            raise RelayViolation("this group's provider runs inside its container")
        # the purpose recorded: the host's own (a task's run), or the frame's flush/summary
        purpose = TASKS if call.purpose == "turn" and turn.task_run else call.purpose
        own = TASKS if turn.task_run else "turn"
        choice = config.model_for(own if call.purpose == "turn" else FLUSH)
        if call.purpose != "turn" and config.models.flush is None:
            choice = config.model_for(own)
        if choice.provider not in context.config.providers:
            return {
                "ok": False,
                "error": f"provider {choice.provider!r} is not defined in the daemon's "
                "configuration",
            }
        cap = min(config.limits.max_tokens, call.max_tokens or config.limits.max_tokens)
        call = replace(call, max_tokens=cap)
        if any(m.get("images") for m in call.messages):
            from orchestrator.relay.images import with_images

            call = with_images(
                call,
                group.path.parent,
                group.folder,
                context.images,
                vision=context.config.providers[choice.provider].info(choice.model).vision,
                model=choice.model,
            )
        now = context.clock()
        currency = context.config.currency
        prices = context.config.prices_of(choice.provider, choice.model)

        def record(
            outcome: str,
            started: float,
            latency: float,
            tokens: Tokens | None,
            error: str | None,
        ) -> None:
            context.usage.record(
                Call.priced(
                    message.id,
                    group.folder,
                    choice.provider,
                    choice.model,
                    purpose,
                    started,
                    latency,
                    tokens,
                    outcome,
                    error,
                    prices=prices,
                    currency=currency,
                )
            )

        refusal = budget_refusal(
            config.limits,
            requests_last_minute=context.usage.requests_since(group.folder, now - 60),
            tokens_this_turn=context.usage.tokens_of_message(message.id),
            tokens_today=context.usage.tokens_since(group.folder, utc_midnight(now)),
        )
        if refusal is not None:
            record(REFUSED, now, 0.0, None, refusal)
            log.warning(
                "group %s, message %s: budget used up: %s", group.folder, message.id, refusal
            )
            return {"ok": False, "budget": True, "error": refusal}
        if config.limits.capped:
            waits = _money_cap(turn, frame, call.max_tokens or cap, now, prices, currency)
            if waits is not None:
                record(REFUSED, now, 0.0, None, waits)
                turn.wait_reason = waits
                return {"ok": False, "wait": True, "error": waits}
        attempts = RELAY_PROVIDER_ATTEMPTS - context.usage.failures_of_message(message.id)
        if attempts <= 0:
            turn.final_error = (
                f"the model failed {RELAY_PROVIDER_ATTEMPTS} times for this message; "
                "not tried again"
            )
            return {"ok": False, "error": turn.final_error}
        try:
            adapter = context.adapter(choice.provider)
        except MissingSecret as exc:
            record(FAILED, now, 0.0, None, exc.message)
            turn.final_error = exc.message
            return {"ok": False, "error": exc.message}
        pieces = Pieces(turn.show) if frame.get("show") is True and call.purpose == "turn" else None
        margin = min(TURN_CUT_MARGIN_SECONDS, max(turn.deadline - time.monotonic(), 0.0) * 0.1)
        deadline = Deadline(turn.deadline - margin)
        started = time.monotonic()
        try:
            answer = call_with_retries(
                lambda timeout: adapter.complete(
                    call,
                    model=choice.model,
                    timeout=timeout,
                    deadline=deadline,
                    on_text=pieces.feed if pieces is not None else None,
                ),
                deadline.at,
                attempts=attempts,
                # text already in the chat cannot be taken back: no second stream after it
                may_retry=lambda: pieces is None or pieces.stored == 0,
                on_failure=lambda failure: record(
                    FAILED, now, (time.monotonic() - started) * 1000, None, str(failure)
                ),
            )
        except ProviderFailure as exc:
            log.warning("group %s: model call failed: %s", group.folder, exc)
            if exc.overflow:
                if call.purpose == "turn":  # a flush's or summary's is the runner's to skip
                    turn.overflows += 1
                if turn.overflows > 1:
                    turn.final_error = f"{exc} (still over the window after compacting)"
                return {"ok": False, "overflow": True, "error": str(exc)}
            spent = context.usage.failures_of_message(message.id) >= RELAY_PROVIDER_ATTEMPTS
            if not exc.retryable or spent:
                turn.final_error = str(exc)
            return {"ok": False, "error": str(exc)}
        latency = (time.monotonic() - started) * 1000
        tokens = Tokens(
            answer.input_tokens,
            answer.output_tokens,
            answer.cache_read_tokens,
            answer.cache_write_tokens,
        )
        record(OK, now, latency, tokens, None)
        shown = pieces.finish(answer.text) if pieces is not None else False
        if answer.server_ms is not None:
            turn.server_ms += answer.server_ms
        return {"ok": True, **answer.to_wire(), "shown": shown}


def _money_cap(
    turn: TurnRelay,
    frame: dict[str, Any],
    max_tokens: int,
    now: float,
    prices: Prices | None,
    currency: str,
) -> str | None:
    """Why the call may not be made under the group's money caps (its group is paused
    then, and the chat told once), or None to go ahead."""
    group, context = turn.group, turn.context
    config = group.config
    queue = context.queue
    if queue.budget_lifted(group.folder, now=time.time()) is not None:
        return None
    zone = config.timezone
    if prices is None:  # the prices went from orchestrator.yaml after group.yaml loaded
        found = (
            "budget: the model has no prices in orchestrator.yaml, so this group's money "
            "cap cannot be kept"
        )
        period = DAY
    else:
        prompt_chars = sum(
            len(json.dumps(frame.get(k), ensure_ascii=False)) for k in ("system", "messages")
        ) + len(json.dumps(frame.get("tools", []), ensure_ascii=False))
        refusal = cost_refusal(
            config.limits,
            spent_today=context.usage.cost_since(group.folder, day_start(now, zone)),
            spent_this_month=context.usage.cost_since(group.folder, month_start(now, zone)),
            worst=worst_cost(prices, prompt_chars, max_tokens),
            currency=currency,
        )
        if refusal is None:
            return None
        period, found = refusal
    ends = next_day(now, zone) if period == DAY else next_month(now, zone)
    # the lease runs in the host's time for as long as the period has left
    expires = time.time() + max(ends - now, 1.0)
    if queue.pause_once(group.folder, BUDGET_HOLDER, found, expires=expires):
        local = local_time(ends, zone)
        log.warning(
            "group %s paused until %s: %s (lift it: orchestrator group resume %s --budget)",
            group.folder,
            local,
            found,
            group.folder,
        )
        queue.add_host_notices(
            turn.message.id,
            [
                "[orchestrator] This group has reached its spending cap for "
                f"{'today' if period == DAY else 'this month'}, "
                f"so it is paused until {local}; messages wait and are answered then (the "
                f"operator can lift it sooner: orchestrator group resume {group.folder} "
                "--budget)."
            ],
        )
        context.notify(turn.message.id)
    return found
