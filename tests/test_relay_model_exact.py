"""model.complete on the host word for word: the frame it takes, the pair each purpose
uses, the budgets checked before a call, the attempts left, the deadline given to the
provider, and what each outcome records and answers. The provider is a fake adapter."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from orchestrator.groups.config import ModelLimits
from orchestrator.groups.modelsconfig import ModelChoice, PurposeModels
from orchestrator.limits import RELAY_PROVIDER_ATTEMPTS
from orchestrator.relay.errors import RelayViolation
from orchestrator.relay.ops import model
from orchestrator.relay.ops.model import ModelComplete, parse_call
from orchestrator.relay.providers.base import ModelAnswer, ModelCall, ProviderFailure
from orchestrator.relay.turn import TurnRelay
from tests.modelrig import NOW, ZONE, Costs, capped, configure, model_turn, turn_frame
from tests.relayrig import provider, setup  # noqa: F401  (fixtures)

# the frame


def test_a_frame_is_read_into_its_call_with_its_defaults() -> None:
    assert parse_call({"system": "s", "messages": []}) == ModelCall("s", [], [], "turn", None)
    tools = [{"name": "t", "description": "d", "parameters": {}}]
    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                {"role": "tool", "content": "c", "images": ["files/a.png"]}]  # fmt: skip
    frame = {"system": "", "messages": messages, "tools": tools, "purpose": "summary",
             "max_tokens": 1}  # fmt: skip
    assert parse_call(frame) == ModelCall("", messages, tools, "summary", 1)
    assert parse_call({**frame, "purpose": "flush"}).purpose == "flush"


@pytest.mark.parametrize(
    ("frame", "why"),
    [
        ({"max_tokens": 0}, "max_tokens must be a whole number from 1"),
        ({"max_tokens": True}, "max_tokens must be a whole number from 1"),
        ({"max_tokens": "5"}, "max_tokens must be a whole number from 1"),
        ({"system": None}, "system must be text"),
        ({"messages": None}, "messages must be a list of objects"),
        ({"messages": ["hi"]}, "messages must be a list of objects"),
        ({"messages": [{"content": "x"}]}, "a message's role must be user, assistant or tool"),
        ({"messages": [{"role": "system", "content": "x"}]},
         "a message's role must be user, assistant or tool"),
        ({"messages": [{"role": "assistant", "content": "x", "images": ["files/a.png"]}]},
         "a user or tool message's images must be a list of at most 16 paths under files/"),
        ({"messages": [{"role": "user", "content": "x", "images": "files/a.png"}]},
         "a user or tool message's images must be a list of at most 16 paths under files/"),
        ({"messages": [{"role": "user", "content": "x", "image_data": []}]},
         "images go by reference (images), never as data"),
        ({"tools": {}}, "tools must be {name, description, parameters}"),
        ({"tools": ["t"]}, "tools must be {name, description, parameters}"),
        ({"tools": [{"name": 1, "description": "d", "parameters": {}}]},
         "tools must be {name, description, parameters}"),
        ({"tools": [{"name": "t", "description": None, "parameters": {}}]},
         "tools must be {name, description, parameters}"),
        ({"tools": [{"name": "t", "description": "d", "parameters": []}]},
         "tools must be {name, description, parameters}"),
        ({"purpose": "tasks"}, "purpose must be one of turn, flush, summary"),
    ],
)  # fmt: skip
def test_a_malformed_frame_is_refused_naming_what(frame: dict[str, Any], why: str) -> None:
    with pytest.raises(RelayViolation) as raised:
        parse_call({"system": "s", "messages": [], **frame})
    assert str(raised.value) == f"model.complete: {why}"


def test_the_images_of_a_message_may_be_at_most_sixteen() -> None:
    from orchestrator.protocol import IMAGES_PER_MESSAGE_MAX

    assert IMAGES_PER_MESSAGE_MAX == 16
    images = [f"files/{n}.png" for n in range(16)]
    parse_call({"system": "", "messages": [{"role": "user", "content": "", "images": images}]})
    with pytest.raises(RelayViolation):
        parse_call(
            {"system": "", "messages": [{"role": "user", "content": "",
                                         "images": [*images, "files/16.png"]}]}
        )  # fmt: skip


# one call


@pytest.fixture
def turn(setup: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[TurnRelay]:  # noqa: F811
    with model_turn(setup, monkeypatch) as relay:
        yield relay


def test_a_flush_outside_a_turn_asks_only_for_flush_calls(turn: TurnRelay) -> None:
    turn.housekeeping = True
    with pytest.raises(RelayViolation) as raised:
        ModelComplete().handle(turn, turn_frame())
    assert str(raised.value) == "model.complete: a flush outside a turn asks for flush calls"
    assert ModelComplete().handle(turn, turn_frame(purpose="flush"))["ok"] is True


def test_a_group_whose_model_runs_in_its_container_asks_the_host_for_none(
    turn: TurnRelay,
) -> None:
    configure(turn, provider="offline")
    with pytest.raises(RelayViolation) as raised:
        ModelComplete().handle(turn, turn_frame())
    assert str(raised.value) == "this group's provider runs inside its container"


@pytest.mark.parametrize(
    ("purpose", "task_run", "flush", "model_used", "recorded"),
    [
        ("turn", False, True, "m-1", "turn"),
        ("turn", True, True, "m-tasks", "tasks"),
        ("flush", False, True, "m-flush", "flush"),
        ("summary", True, True, "m-flush", "summary"),
        ("flush", False, False, "m-1", "flush"),
        ("summary", True, False, "m-tasks", "summary"),
    ],
)
def test_each_purpose_uses_its_own_pair(
    turn: TurnRelay, purpose: str, task_run: bool, flush: bool, model_used: str, recorded: str
) -> None:
    models = PurposeModels(
        flush=ModelChoice("fake", "m-flush") if flush else None,
        tasks=ModelChoice("fake", "m-tasks"),
    )
    configure(turn, models=models)
    turn.task_run = task_run
    assert ModelComplete().handle(turn, turn_frame(purpose=purpose))["ok"] is True
    assert turn.adapter.calls[0]["model"] == model_used  # type: ignore[attr-defined]
    assert turn.adapters_asked == ["fake"]  # type: ignore[attr-defined]
    [call] = turn.context.usage.calls  # type: ignore[attr-defined]
    assert (call.provider, call.model, call.purpose) == ("fake", model_used, recorded)


def test_a_provider_the_daemon_does_not_define_is_an_error(turn: TurnRelay) -> None:
    configure(turn, provider="gone")
    assert ModelComplete().handle(turn, turn_frame()) == {
        "ok": False,
        "error": "provider 'gone' is not defined in the daemon's configuration",
    }
    assert turn.context.usage.calls == []  # type: ignore[attr-defined]


@pytest.mark.parametrize(("asked", "used"), [(None, 300), (100, 100), (300, 300), (301, 300)])
def test_an_answer_is_at_most_the_groups_max_tokens(
    turn: TurnRelay, asked: int | None, used: int
) -> None:
    configure(turn, limits=ModelLimits(max_tokens=300))
    frame = turn_frame() if asked is None else turn_frame(max_tokens=asked)
    ModelComplete().handle(turn, frame)
    assert turn.adapter.calls[0]["call"].max_tokens == used  # type: ignore[attr-defined]


def test_the_budgets_are_asked_of_the_last_minute_the_turn_and_the_utc_day(
    turn: TurnRelay,
) -> None:
    from orchestrator.store.usage import utc_midnight

    ModelComplete().handle(turn, turn_frame())
    assert turn.context.usage.asked == [  # type: ignore[attr-defined]
        ("requests_since", "fam", NOW - 60),
        ("tokens_of_message", turn.message.id, None),
        ("tokens_since", "fam", utc_midnight(NOW)),
    ]


@pytest.mark.parametrize(
    ("counts", "why"),
    [
        ({"day_tokens": 1000},
         "This group has used its model budget for today (1,000 tokens); it can answer "
         "again after midnight UTC."),
        ({"turn_tokens": 500},
         "This answer needed more than this group's 500 tokens for one message, so it "
         "stopped here; please ask again more narrowly."),
        ({"requests": 3},
         "This group is sending too many requests to its model right now (at most 3 a "
         "minute); please try again in a minute."),
    ],
)  # fmt: skip
def test_a_budget_used_up_answers_with_its_sentence_and_is_recorded(
    turn: TurnRelay, caplog: pytest.LogCaptureFixture, counts: dict[str, int], why: str
) -> None:
    from orchestrator.store.usage import Call

    configure(
        turn,
        limits=ModelLimits(tokens_per_day=1000, tokens_per_turn=500, requests_per_minute=3),
    )
    for name, value in counts.items():
        setattr(turn.context.usage, name, value)
    with caplog.at_level(logging.WARNING, logger="orchestrator.relay"):
        answer = ModelComplete().handle(turn, turn_frame())
    assert answer == {"ok": False, "budget": True, "error": why}
    assert turn.context.usage.calls == [  # type: ignore[attr-defined]
        Call.priced(turn.message.id, "fam", "fake", "m-1", "turn", NOW, 0.0, None, "refused",
                    why, prices=None, currency=turn.context.config.currency)
    ]  # fmt: skip
    assert caplog.messages == [f"group fam, message {turn.message.id}: budget used up: {why}"]
    assert turn.adapter.calls == []  # type: ignore[attr-defined]


def test_a_message_that_failed_every_attempt_is_not_tried_again(turn: TurnRelay) -> None:
    turn.context.usage.failures = RELAY_PROVIDER_ATTEMPTS  # type: ignore[attr-defined]
    error = f"the model failed {RELAY_PROVIDER_ATTEMPTS} times for this message; not tried again"
    assert ModelComplete().handle(turn, turn_frame()) == {"ok": False, "error": error}
    assert turn.final_error == error
    assert turn.adapter.calls == []  # type: ignore[attr-defined]


def test_the_attempts_left_are_what_earlier_deliveries_did_not_use(turn: TurnRelay) -> None:
    turn.context.usage.failures = RELAY_PROVIDER_ATTEMPTS - 1  # type: ignore[attr-defined]
    turn.adapter.script.extend(  # type: ignore[attr-defined]
        [ProviderFailure("busy", status=503, retryable=True), ModelAnswer("late", [], 1, 1)]
    )
    assert ModelComplete().handle(turn, turn_frame()) == {"ok": False, "error": "busy"}
    assert len(turn.adapter.calls) == 1  # type: ignore[attr-defined]


def test_a_missing_key_is_final_and_recorded(
    turn: TurnRelay, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.secrets import MissingSecret

    def missing(name: str) -> Any:
        raise MissingSecret("provider fake: FAKE_KEY is not set")

    monkeypatch.setattr(turn.context, "adapter", missing)
    assert ModelComplete().handle(turn, turn_frame()) == {
        "ok": False,
        "error": "provider fake: FAKE_KEY is not set",
    }
    assert turn.final_error == "provider fake: FAKE_KEY is not set"
    [call] = turn.context.usage.calls  # type: ignore[attr-defined]
    assert (call.outcome, call.started, call.latency_ms, call.error) == (
        "failed", NOW, 0.0, "provider fake: FAKE_KEY is not set",
    )  # fmt: skip


def test_an_answer_is_recorded_with_its_tokens_and_time(turn: TurnRelay) -> None:
    from orchestrator.store.usage import Call

    turn.adapter.script.append(  # type: ignore[attr-defined]
        ModelAnswer("hi there", [], 10, 5, "end", 12.5, 3, 2)
    )
    turn.server_ms = 1.0
    answer = ModelComplete().handle(turn, turn_frame())
    assert answer == {
        "ok": True, "text": "hi there", "tool_calls": [],
        "usage": {"input_tokens": 15, "output_tokens": 5}, "stop_reason": "end", "shown": False,
    }  # fmt: skip
    # the clock read once for the margin, once at the start and once at the end
    assert turn.context.usage.calls == [  # type: ignore[attr-defined]
        Call(turn.message.id, "fam", "fake", "m-1", "turn", NOW, 1000.0, 10, 5, "ok", None,
             3, 2, None, None)
    ]  # fmt: skip
    assert turn.server_ms == 13.5
    assert turn.adapter.calls[0]["on_text"] is None  # type: ignore[attr-defined]


def test_an_answer_without_the_servers_time_adds_none(turn: TurnRelay) -> None:
    ModelComplete().handle(turn, turn_frame())
    assert turn.server_ms == 0.0


@pytest.mark.parametrize(("left", "margin"), [(100.0, 1.0), (10.0, 1.0), (5.0, 0.5), (0.0, 0.0)])
def test_the_provider_has_the_turns_deadline_less_a_margin(
    turn: TurnRelay, left: float, margin: float
) -> None:
    turn.deadline = turn.clock_base + 1 + left  # type: ignore[attr-defined]  # its first reading
    ModelComplete().handle(turn, turn_frame())
    [options] = turn.adapter.calls  # type: ignore[attr-defined]
    assert options["deadline"].at == pytest.approx(turn.deadline - margin)


def test_a_shown_answer_streams_into_the_chat(turn: TurnRelay) -> None:
    turn.adapter.script.append(ModelAnswer("the whole answer", [], 1, 1))  # type: ignore[attr-defined]
    answer = ModelComplete().handle(turn, turn_frame(show=True))
    assert answer["shown"] is True
    replies = turn.context.queue.replies_of(turn.message.id)
    assert replies[-1][1] == "the whole answer"


@pytest.mark.parametrize("frame", [{"show": "yes"}, {"show": True, "purpose": "flush"}])
def test_only_a_turns_answer_asked_to_show_is_shown(turn: TurnRelay, frame: dict[str, Any]) -> None:
    before = turn.context.queue.replies_of(turn.message.id)
    answer = ModelComplete().handle(turn, turn_frame(**frame))
    assert answer["shown"] is False
    assert turn.adapter.calls[0]["on_text"] is None  # type: ignore[attr-defined]
    assert turn.context.queue.replies_of(turn.message.id) == before


def test_an_overflow_is_said_and_final_only_the_second_time(
    turn: TurnRelay, caplog: pytest.LogCaptureFixture
) -> None:
    over = ProviderFailure("too long", status=400, overflow=True)
    turn.adapter.script.extend([over, over, over])  # type: ignore[attr-defined]
    with caplog.at_level(logging.WARNING, logger="orchestrator.relay"):
        first = ModelComplete().handle(turn, turn_frame())
    assert first == {"ok": False, "overflow": True, "error": "too long"}
    assert (turn.overflows, turn.final_error) == (1, None)
    assert caplog.messages == ["group fam: model call failed: too long"]
    # a flush's overflow is the runner's to skip: it does not count
    ModelComplete().handle(turn, turn_frame(purpose="flush"))
    assert (turn.overflows, turn.final_error) == (1, None)
    ModelComplete().handle(turn, turn_frame())
    assert turn.overflows == 2
    assert turn.final_error == "too long (still over the window after compacting)"


def test_a_refusal_is_final_and_a_passing_failure_is_not(turn: TurnRelay) -> None:
    turn.context.usage.failures = RELAY_PROVIDER_ATTEMPTS - 1  # type: ignore[attr-defined]
    turn.adapter.script.append(ProviderFailure("busy", status=503, retryable=True))  # type: ignore[attr-defined]
    assert ModelComplete().handle(turn, turn_frame()) == {"ok": False, "error": "busy"}
    assert turn.final_error is None  # five failures so far: one attempt is left
    turn.context.usage.failures = 0  # type: ignore[attr-defined]
    turn.adapter.script.append(ProviderFailure("HTTP 400: bad", status=400))  # type: ignore[attr-defined]
    assert ModelComplete().handle(turn, turn_frame()) == {"ok": False, "error": "HTTP 400: bad"}
    assert turn.final_error == "HTTP 400: bad"


def test_a_passing_failure_that_spent_the_attempts_is_final(
    turn: TurnRelay, monkeypatch: pytest.MonkeyPatch
) -> None:
    usage = turn.context.usage
    counts = iter([RELAY_PROVIDER_ATTEMPTS - 1, RELAY_PROVIDER_ATTEMPTS])
    monkeypatch.setattr(usage, "failures_of_message", lambda message_id: next(counts))
    turn.adapter.script.append(ProviderFailure("busy", status=503, retryable=True))  # type: ignore[attr-defined]
    assert ModelComplete().handle(turn, turn_frame()) == {"ok": False, "error": "busy"}
    assert turn.final_error == "busy"


def test_each_failed_attempt_is_recorded(turn: TurnRelay) -> None:
    turn.adapter.script.extend(  # type: ignore[attr-defined]
        [ProviderFailure("HTTP 400: bad", status=400)]
    )
    ModelComplete().handle(turn, turn_frame())
    [call] = turn.context.usage.calls  # type: ignore[attr-defined]
    assert (call.outcome, call.started, call.latency_ms, call.error, call.input_tokens) == (
        "failed", NOW, 1000.0, "HTTP 400: bad", 0,
    )  # fmt: skip


# the money caps


def _notices(turn: TurnRelay) -> list[str]:
    from orchestrator.limits import HOST_NOTICE_SEQ

    replies = turn.context.queue.replies_of(turn.message.id)
    return [t for seq, t in replies if seq >= HOST_NOTICE_SEQ]


def _prices() -> Any:
    from orchestrator.money import Prices

    return Prices(input=10.0, output=20.0)


def test_a_call_under_the_caps_goes_ahead_and_asks_the_day_and_months_spending(
    turn: TurnRelay,
) -> None:
    from orchestrator.money import day_start, month_start

    capped(turn, cost_per_day=1.0, cost_per_month=5.0)
    assert model._money_cap(turn, turn_frame(), 100, NOW, _prices(), "EUR") is None
    assert [a for a in turn.context.usage.asked if a[0] == "cost_since"] == [  # type: ignore[attr-defined]
        ("cost_since", "fam", day_start(NOW, ZONE)),
        ("cost_since", "fam", month_start(NOW, ZONE)),
    ]
    assert turn.context.queue.pauses("fam") == [] and _notices(turn) == []


def test_the_worst_cost_counts_the_whole_prompt_as_written(turn: TurnRelay) -> None:
    import json

    from orchestrator.money import worst_cost

    capped(turn, cost_per_day=0.0001)
    tools = [{"name": "t", "description": "ü" * 500, "parameters": {}}]
    frame = {"system": "é" * 3000, "messages": [{"role": "user", "content": "ö" * 2000}],
             "tools": tools}  # fmt: skip
    chars = sum(len(json.dumps(frame[k], ensure_ascii=False)) for k in ("system", "messages"))
    chars += len(json.dumps(tools, ensure_ascii=False))
    worst = worst_cost(_prices(), chars, 300)
    found = model._money_cap(turn, frame, 300, NOW, _prices(), "EUR")
    assert found == (
        f"budget: the next model call (up to {worst:.4f} EUR) would pass this group's cap "
        "of 0.0001 EUR a day (0.0000 EUR spent so far)"
    )
    # without tools in the frame, none are counted
    del frame["tools"]
    worst = worst_cost(_prices(), chars - len(json.dumps(tools, ensure_ascii=False)) + 2, 300)
    assert f"(up to {worst:.4f} EUR)" in str(
        model._money_cap(turn, frame, 300, NOW, _prices(), "EUR")
    )


def test_a_call_past_the_day_cap_pauses_the_group_to_its_midnight_and_tells_the_chat_once(
    turn: TurnRelay, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from orchestrator.money import local_time, next_day
    from orchestrator.relay.ops.model import BUDGET_HOLDER

    capped(turn, cost_per_day=0.0001)
    told: list[str] = []
    monkeypatch.setattr(turn.context, "notify", told.append)
    with caplog.at_level(logging.WARNING, logger="orchestrator.relay"):
        found = model._money_cap(turn, turn_frame(), 100, NOW, _prices(), "EUR")
    assert found is not None and found.endswith("a day (0.0000 EUR spent so far)")
    ends = next_day(NOW, ZONE)
    [lease] = turn.context.queue.pauses("fam", now=NOW)
    assert (lease.holder, lease.reason, lease.expires) == (BUDGET_HOLDER, found, ends)
    local = local_time(ends, ZONE)
    assert _notices(turn) == [
        "[orchestrator] This group has reached its spending cap for today, so it is paused "
        f"until {local}; messages wait and are answered then (the operator can lift it "
        "sooner: orchestrator group resume fam --budget)."
    ]
    assert told == [turn.message.id]
    assert caplog.messages == [
        f"group fam paused until {local}: {found} (lift it: orchestrator group resume fam --budget)"
    ]
    # asked again while paused: the same reason, and the chat is not told again
    assert model._money_cap(turn, turn_frame(), 100, NOW, _prices(), "EUR") == found
    assert len(_notices(turn)) == 1 and told == [turn.message.id]


def test_a_call_past_the_month_cap_pauses_the_group_to_the_next_month(turn: TurnRelay) -> None:
    from orchestrator.money import local_time, next_month

    capped(turn, cost_per_day=100.0, cost_per_month=0.0001)
    found = model._money_cap(turn, turn_frame(), 100, NOW, _prices(), "EUR")
    assert found is not None and " a month (" in found
    [lease] = turn.context.queue.pauses("fam", now=NOW)
    assert lease.expires == next_month(NOW, ZONE)
    [notice] = _notices(turn)
    assert notice.startswith(
        "[orchestrator] This group has reached its spending cap for this month, so it is "
        f"paused until {local_time(next_month(NOW, ZONE), ZONE)};"
    )


def test_a_pause_taken_in_the_periods_last_second_lasts_a_second(turn: TurnRelay) -> None:
    from orchestrator.money import next_day

    capped(turn, cost_per_day=0.0001)
    now = next_day(NOW, ZONE) - 0.5
    turn.context.usage = Costs()  # type: ignore[assignment]
    assert model._money_cap(turn, turn_frame(), 100, now, _prices(), "EUR") is not None
    [lease] = turn.context.queue.pauses("fam", now=NOW)
    assert lease.expires == NOW + 1.0


def test_a_model_without_prices_cannot_keep_a_cap_and_waits_a_day(turn: TurnRelay) -> None:
    from orchestrator.money import next_day

    capped(turn, cost_per_month=10.0)
    found = model._money_cap(turn, turn_frame(), 100, NOW, None, "EUR")
    assert found == (
        "budget: the model has no prices in orchestrator.yaml, so this group's money cap "
        "cannot be kept"
    )
    [lease] = turn.context.queue.pauses("fam", now=NOW)
    assert lease.expires == next_day(NOW, ZONE)
    assert "spending cap for today" in _notices(turn)[0]


def test_caps_the_operator_lifted_let_every_call_go(turn: TurnRelay) -> None:
    capped(turn, cost_per_day=0.0001)
    turn.context.queue.lift_budget("fam", until=NOW + 60)
    assert model._money_cap(turn, turn_frame(), 100, NOW, _prices(), "EUR") is None
    assert model._money_cap(turn, turn_frame(), 100, NOW, None, "EUR") is None
    assert turn.context.queue.pauses("fam", now=NOW) == []


def test_a_call_a_cap_stops_waits_and_is_recorded_as_refused(turn: TurnRelay) -> None:
    capped(turn, cost_per_day=0.0001)
    answer = ModelComplete().handle(turn, turn_frame())
    # group fam's model has no prices: the cap cannot be kept
    reason = (
        "budget: the model has no prices in orchestrator.yaml, so this group's money cap "
        "cannot be kept"
    )
    assert answer == {"ok": False, "wait": True, "error": reason}
    assert turn.wait_reason == reason
    [call] = turn.context.usage.calls  # type: ignore[attr-defined]
    assert (call.outcome, call.error, call.latency_ms) == ("refused", reason, 0.0)
    assert turn.adapter.calls == []  # type: ignore[attr-defined]
