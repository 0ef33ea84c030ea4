"""A member's turn of group ``fam`` for model.complete on the host, with a fake usage
store, a fake provider adapter and fixed clocks (tests/relayrig.py's daemon under it)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import pytest

from orchestrator.groups.config import ModelLimits
from orchestrator.relay.ops import model
from orchestrator.relay.providers.base import ModelAnswer, ModelCall
from orchestrator.relay.turn import TurnRelay

NOW = 1_800_000_000.0  # the relay's clock


class Usage:
    """The usage store as model.complete sees it: counts it is given, and the calls."""

    def __init__(self) -> None:
        self.requests = 0
        self.turn_tokens = 0
        self.day_tokens = 0
        self.failures = 0
        self.asked: list[tuple[str, Any, Any]] = []
        self.calls: list[Any] = []

    def requests_since(self, group: str, since: float) -> int:
        self.asked.append(("requests_since", group, since))
        return self.requests

    def tokens_of_message(self, message_id: str) -> int:
        self.asked.append(("tokens_of_message", message_id, None))
        return self.turn_tokens

    def tokens_since(self, group: str, since: float) -> int:
        self.asked.append(("tokens_since", group, since))
        return self.day_tokens

    def failures_of_message(self, message_id: str) -> int:
        return self.failures

    def record(self, call: Any) -> None:
        self.calls.append(call)


class Adapter:
    """A provider that answers what its script says, in order, and keeps each call."""

    def __init__(self) -> None:
        self.script: list[Any] = []
        self.calls: list[dict[str, Any]] = []

    def complete(self, call: ModelCall, **options: Any) -> ModelAnswer:
        self.calls.append({"call": call, **options})
        step = self.script.pop(0) if self.script else ModelAnswer("hello", [], 10, 5)
        if isinstance(step, Exception):
            raise step
        if options["on_text"] is not None and step.text:
            options["on_text"](step.text)
        return step


class Clock:
    """The model op's clock: time() fixed, monotonic() a second later at each reading
    (from the real one when made: the retries wait on the real one)."""

    def __init__(self) -> None:
        self.base = time.monotonic()
        self.mono = self.base

    def time(self) -> float:
        return NOW

    def monotonic(self) -> float:
        self.mono += 1
        return self.mono


@contextmanager
def model_turn(setup: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[TurnRelay]:
    """In tests/relayrig.py's ``setup``: a member's turn of group fam (provider fake,
    model m-1) with a fake usage store, adapter and clocks; 100 seconds of the turn left."""
    daemon = setup["daemon"]
    message = daemon.queue.record_done(
        group="fam", session="cli.chat-c", chat="c", thread=None, sender="bob",
        trust="member", text="x", channel="cli", reply="y",
    )  # fmt: skip
    clock = Clock()
    relay = TurnRelay(daemon.relay, message, setup["runtime"].store.load("fam"), clock.base + 100)
    adapter = Adapter()
    asked: list[str] = []
    context = relay.context
    kept = (context.usage, context.clock)
    context.usage = Usage()  # type: ignore[assignment]
    context.clock = lambda: NOW
    monkeypatch.setattr(context, "adapter", lambda name: asked.append(name) or adapter)
    monkeypatch.setattr(model, "time", clock)
    relay.adapter = adapter  # type: ignore[attr-defined]
    relay.adapters_asked = asked  # type: ignore[attr-defined]
    relay.clock_base = clock.base  # type: ignore[attr-defined]
    yield relay
    context.usage, context.clock = kept


def configure(turn: TurnRelay, **changes: Any) -> None:
    turn.group = replace(turn.group, config=replace(turn.group.config, **changes))


def turn_frame(**more: Any) -> dict[str, Any]:
    return {"system": "s", "messages": [{"role": "user", "content": "hi"}], **more}


ZONE = "Pacific/Auckland"  # the capped group's time zone


class Costs(Usage):
    """The usage store with what the group spent today and this month."""

    def __init__(self, today: float = 0.0, month: float = 0.0) -> None:
        super().__init__()
        self.today, self.month = today, month

    def cost_since(self, group: str, since: float) -> float:
        from orchestrator.money import day_start

        self.asked.append(("cost_since", group, since))
        return self.today if since == day_start(NOW, ZONE) else self.month


def capped(turn: TurnRelay, **caps: float) -> None:
    configure(turn, timezone=ZONE, limits=ModelLimits(**caps))
    turn.context.usage = Costs()  # type: ignore[assignment]
