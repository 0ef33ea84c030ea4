"""model.complete on the host, the rest word for word: the request size it takes, a
failed attempt tried again only while nothing of its answer is in the chat, and money
caps lifted by the operator until a time read from the host's clock."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from orchestrator.limits import OFFLINE_CONTEXT_TOKENS, model_request_cap
from orchestrator.money import Prices
from orchestrator.relay.ops import model
from orchestrator.relay.ops.model import ModelComplete
from orchestrator.relay.providers.base import ModelAnswer, ModelCall, ProviderFailure
from orchestrator.relay.turn import TurnRelay
from tests.modelrig import NOW, capped, model_turn, turn_frame
from tests.relayrig import provider, setup  # noqa: F401  (fixtures)


@pytest.fixture
def turn(setup: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[TurnRelay]:  # noqa: F811
    with model_turn(setup, monkeypatch) as relay:
        yield relay


@pytest.mark.parametrize(
    ("window", "tokens"), [(None, OFFLINE_CONTEXT_TOKENS), (8_000, 8_000), (1, 1)]
)
def test_a_request_may_be_as_large_as_the_models_window_allows(
    turn: TurnRelay, window: int | None, tokens: int
) -> None:
    turn.window_tokens = window
    assert ModelComplete().cap(turn) == model_request_cap(tokens)
    assert model_request_cap(8_000) < model_request_cap(OFFLINE_CONTEXT_TOKENS)


BUSY = ProviderFailure("busy", status=503, retryable=True, retry_after=0.0)


def _attempts(turn: TurnRelay, first_text: str) -> list[dict[str, Any]]:
    """The provider's attempts: the first writes ``first_text`` of its answer, then
    fails as passing; the next answers."""
    calls: list[dict[str, Any]] = []

    def complete(call: ModelCall, **options: Any) -> ModelAnswer:
        calls.append(options)
        if len(calls) == 1:
            if options["on_text"] is not None:
                options["on_text"](first_text)
            raise BUSY
        return ModelAnswer("again", [], 1, 1)

    turn.adapter.complete = complete  # type: ignore[attr-defined]
    return calls


def test_an_attempt_whose_text_is_in_the_chat_is_not_tried_again(turn: TurnRelay) -> None:
    calls = _attempts(turn, "word " * 400)  # past a piece's most: a piece is stored
    before = len(turn.context.queue.replies_of(turn.message.id))
    assert ModelComplete().handle(turn, turn_frame(show=True)) == {"ok": False, "error": "busy"}
    assert len(calls) == 1
    assert len(turn.context.queue.replies_of(turn.message.id)) == before + 1


@pytest.mark.parametrize(("frame", "text"), [({"show": True}, "Hel"), ({}, "word " * 400)])
def test_an_attempt_with_nothing_in_the_chat_is_tried_again(
    turn: TurnRelay, frame: dict[str, Any], text: str
) -> None:
    calls = _attempts(turn, text)
    answer = ModelComplete().handle(turn, turn_frame(**frame))
    assert (answer["ok"], answer["text"], len(calls)) == (True, "again", 2)


def test_a_lift_holds_until_its_time_on_the_hosts_clock(turn: TurnRelay) -> None:

    capped(turn, cost_per_day=0.0001)
    turn.context.queue.lift_budget("fam", until=NOW - 1)  # lifted until a second ago
    found = model._money_cap(turn, turn_frame(), 100, NOW, Prices(input=10.0, output=20.0), "EUR")
    assert found is not None and found.startswith("budget: the next model call")


def test_the_failures_counted_are_this_messages(
    turn: TurnRelay, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.limits import RELAY_PROVIDER_ATTEMPTS

    counts = {turn.message.id: [RELAY_PROVIDER_ATTEMPTS - 1, RELAY_PROVIDER_ATTEMPTS]}
    monkeypatch.setattr(
        turn.context.usage, "failures_of_message", lambda message_id: counts[message_id].pop(0)
    )
    turn.adapter.script.append(BUSY)  # type: ignore[attr-defined]
    assert ModelComplete().handle(turn, turn_frame()) == {"ok": False, "error": "busy"}
    assert turn.final_error == "busy"  # the last attempt spent
    counts[turn.message.id] = [RELAY_PROVIDER_ATTEMPTS]
    turn.final_error = None
    assert ModelComplete().handle(turn, turn_frame())["error"] == (
        f"the model failed {RELAY_PROVIDER_ATTEMPTS} times for this message; not tried again"
    )


PRICES = Prices(input=10.0, output=20.0)


@pytest.fixture
def priced(turn: TurnRelay, monkeypatch: pytest.MonkeyPatch) -> TurnRelay:
    """Group fam's pair, fake's m-1, priced (none other is)."""

    def prices_of(config: Any, name: str, model: str) -> Prices | None:
        return PRICES if (name, model) == ("fake", "m-1") else None

    monkeypatch.setattr(type(turn.context.config), "prices_of", prices_of)
    return turn


def test_a_priced_call_is_recorded_with_its_cost(priced: TurnRelay) -> None:
    from orchestrator.store.usage import Call

    assert ModelComplete().handle(priced, turn_frame())["ok"] is True
    currency = priced.context.config.currency
    assert priced.context.usage.calls == [  # type: ignore[attr-defined]
        Call(priced.message.id, "fam", "fake", "m-1", "turn", NOW, 1000.0, 10, 5, "ok", None,
             0, 0, 10 * 10.0 / 1e6 + 5 * 20.0 / 1e6, currency)
    ]  # fmt: skip


def test_a_priced_call_past_a_cap_waits_saying_its_worst_cost(priced: TurnRelay) -> None:
    import json

    from orchestrator.money import worst_cost

    capped(priced, cost_per_day=0.0001)
    currency = priced.context.config.currency
    frame = turn_frame()
    chars = len(json.dumps("s")) + len(json.dumps(frame["messages"])) + len("[]")
    worst = worst_cost(PRICES, chars, priced.group.config.limits.max_tokens)
    why = (
        f"budget: the next model call (up to {worst:.4f} {currency}) would pass this group's "
        f"cap of 0.0001 {currency} a day (0.0000 {currency} spent so far)"
    )
    assert ModelComplete().handle(priced, frame) == {"ok": False, "wait": True, "error": why}
    [call] = priced.context.usage.calls  # type: ignore[attr-defined]
    assert (call.outcome, call.started, call.error, call.cost, call.currency) == (
        "refused", NOW, why, 0.0, currency,
    )  # fmt: skip


def test_the_provider_is_given_the_time_left_before_the_deadline(turn: TurnRelay) -> None:
    ModelComplete().handle(turn, turn_frame())
    [options] = turn.adapter.calls  # type: ignore[attr-defined]
    # what is left of the turn's 100 seconds less the margin (the retries' clock is real)
    assert isinstance(options["timeout"], float) and options["timeout"] <= 99.0
    assert options["model"] == "m-1"
