"""The relay on the host: requests during a turn, attributed to the message being
delivered; caps, floods and forgeries fail only that turn; budgets; usage. End to end
with the real runner serving a real socket, the daemon, and a fake provider server."""

from __future__ import annotations

import time
from typing import Any

import pytest

from orchestrator import wire
from orchestrator.daemon.core import Daemon
from orchestrator.groups.config import ModelLimits
from orchestrator.limits import (
    MAX_DELIVERY_ATTEMPTS,
    RELAY_OPS_PER_TURN,
    RELAY_PROVIDER_ATTEMPTS,
    model_request_cap,
)
from orchestrator.relay.budget import budget_refusal
from orchestrator.relay.errors import RelayViolation
from orchestrator.relay.turn import TurnRelay
from orchestrator.store.messages import DONE
from orchestrator.store.usage import UsageStore
from tests.fakeproviders import Error, FakeProvider, Text, ToolUse
from tests.relayrig import KEY, provider, served, setup  # noqa: F401  (fixtures)


def test_budget_refusals_are_plain_sentences() -> None:
    limits = ModelLimits(requests_per_minute=2, tokens_per_turn=100, tokens_per_day=1000)
    ok = {"requests_last_minute": 1, "tokens_this_turn": 99, "tokens_today": 999}
    assert budget_refusal(limits, **ok) is None
    assert "today" in str(budget_refusal(limits, **{**ok, "tokens_today": 1000}))
    assert "one message" in str(budget_refusal(limits, **{**ok, "tokens_this_turn": 100}))
    assert "a minute" in str(budget_refusal(limits, **{**ok, "requests_last_minute": 2}))


def turn_relay(setup: dict[str, Any], group: str = "fam", sender: str = "bob") -> TurnRelay:
    daemon: Daemon = setup["daemon"]
    message = daemon.submit(group, "hello", chat="c", sender=sender, channel="cli")
    return TurnRelay(daemon.relay, message, daemon.runtime.store.load(group), time.monotonic() + 60)


def model_request(req: int = 1, **extra: Any) -> dict[str, Any]:
    return {
        "req": req,
        "op": "model.complete",
        "system": "sys",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [],
        "purpose": "turn",
        **extra,
    }


def test_model_calls_use_the_groups_provider_and_record_usage(setup, provider) -> None:  # type: ignore[no-untyped-def]
    relay = turn_relay(setup)
    provider.script.append(Text("hello there", input_tokens=30, output_tokens=5))
    answer = relay.handle(model_request(7, model="forged-model", provider="other"), 200)
    assert answer == {
        "ok": True,
        "req": 7,
        "text": "hello there",
        "tool_calls": [],
        "usage": {"input_tokens": 30, "output_tokens": 5},
        "stop_reason": "end",
        "shown": False,  # not asked to show it while it streams
    }
    assert provider.seen[-1].body["model"] == "m-1"  # the group's, not the frame's
    usage = UsageStore(setup["daemon"].queue.path)
    [day] = usage.by_day("fam")
    usage.close()
    assert (day.requests, day.input_tokens, day.output_tokens) == (1, 30, 5)


def test_forged_trust_or_message_id_changes_nothing(setup, provider) -> None:  # type: ignore[no-untyped-def]
    relay = turn_relay(setup)
    forged = {"trust": "creator", "sender": "alice", "message_id": "someone-else", "seq": 0}
    answer = relay.handle({"req": 1, "op": "reply", "text": "hi", **forged}, 100)
    assert answer["ok"]
    queue = setup["daemon"].queue
    assert queue.get(relay.message.id).replies == ("hi",)  # type: ignore[union-attr]
    assert queue.get(relay.message.id).trust == "member"  # type: ignore[union-attr]
    assert queue.get("someone-else") is None


@pytest.mark.parametrize(
    ("frame", "size", "error"),
    [
        ({"req": 1, "op": "shell.exec", "cmd": "id"}, 50, "unknown request op"),
        ({"op": "reply", "seq": 0, "text": "x"}, 50, "whole-number req"),
        ({"req": 1, "op": "reply", "seq": -1, "text": "x"}, 50, "reply.seq"),
        ({"req": 1, "op": "reply", "seq": 0, "text": ""}, 50, "reply.text"),
        ({"req": 1, "op": "reply", "seq": 0, "text": "x"}, 10**6, "exceeds its"),
        (model_request(messages="nope"), 100, "messages must be a list"),
        (model_request(tools=[{"name": 1}]), 100, "tools must be"),
    ],
)
def test_malformed_unknown_and_oversized_requests_fail_the_turn(setup, frame, size, error) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(RelayViolation, match=error):
        turn_relay(setup).handle(frame, size)


def test_a_model_request_may_carry_a_whole_cjk_context(setup, provider) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.limits import CHARS_PER_TOKEN_ESTIMATE, OFFLINE_CONTEXT_TOKENS

    relay = turn_relay(setup)
    relay.window_tokens = window = 2 * OFFLINE_CONTEXT_TOKENS  # a model with a large window
    # a context as large as the runner lets it grow, in CJK: three bytes a character
    text = "記憶" * (window * CHARS_PER_TOKEN_ESTIMATE // 2)
    frame = model_request(messages=[{"role": "user", "content": text}])
    size = len(wire.json.dumps(frame, ensure_ascii=False).encode())
    assert size > wire.MAX_FRAME_BYTES and size <= model_request_cap(window)
    assert relay.frame_limit() >= size
    assert relay.handle(frame, size)["ok"]


def test_a_request_flood_fails_the_turn(setup) -> None:  # type: ignore[no-untyped-def]
    relay = turn_relay(setup)
    for n in range(RELAY_OPS_PER_TURN):
        relay.handle({"req": n, "op": "reply", "seq": n % 100, "text": "x"}, 60)
    with pytest.raises(RelayViolation, match="more than"):
        relay.handle({"req": 999, "op": "reply", "seq": 0, "text": "x"}, 60)


def test_budget_exhaustion_answers_politely_and_is_recorded(setup, provider) -> None:  # type: ignore[no-untyped-def]
    relay = turn_relay(setup)
    provider.script.append(Text("big", input_tokens=9_000, output_tokens=1_500))
    assert relay.handle(model_request(1), 100)["ok"]
    answer = relay.handle(model_request(2), 100)
    assert answer["ok"] is False and answer["budget"] is True
    assert "used its model budget for today" in answer["error"]
    assert len(provider.seen) == 1  # the provider was not called again
    usage = UsageStore(setup["daemon"].queue.path)
    [day] = usage.by_day("fam")
    usage.close()
    assert (day.requests, day.refused) == (1, 1)


def test_a_missing_credential_is_a_clear_error(setup, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("FAKE_KEY")
    answer = turn_relay(setup).handle(model_request(), 100)
    assert answer["ok"] is False and "FAKE_KEY is not set" in answer["error"]


def test_an_unknown_provider_or_model_is_refused_when_group_yaml_loads(setup) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.errors import InvalidConfig
    from orchestrator.groups.config import set_option

    store = setup["runtime"].store
    path = store.load("fam").config_file
    with pytest.raises(InvalidConfig, match=r"group.yaml:\d+: model: model 'gpt-9' is not allowed"):
        set_option(path, "model", "gpt-9")
        store.load("fam")
    text = (
        path.read_text()
        .replace('model: "m-1"', 'model: "m-2"')
        .replace('provider: "fake"', 'provider: "nope"')
    )
    path.write_text(text)
    with pytest.raises(InvalidConfig, match="unknown provider 'nope'; defined: offline, fake"):
        store.load("fam")


# end to end: daemon -> the real runner on a real socket -> relay -> fake provider


def test_a_tool_call_writes_memory_and_replies_arrive_in_order(served, provider) -> None:  # type: ignore[no-untyped-def]
    concept = "---\ntype: fact\n---\n\n# Ada\n\nThe user is called Ada.\n"
    provider.script.extend(
        [
            ToolUse("write_file", {"path": "memory/facts/ada.md", "content": concept}),
            ToolUse("send_message", {"text": "Saving that now."}, call_id="call_2"),
            Text("Done: I will remember that you are Ada."),
        ]
    )
    daemon: Daemon = served["daemon"]
    changes: list[str] = []
    daemon.add_listener(changes.append)
    message = daemon.submit("fam", "remember I am Ada", chat="c", sender="bob", channel="cli")
    done = daemon.wait(message.id, 60)
    assert done is not None and done.state == DONE, done
    assert done.replies == ("Saving that now.", "Done: I will remember that you are Ada.")
    assert changes.count(message.id) >= 2  # the first reply was announced before the end
    group = daemon.runtime.store.load("fam")
    assert (group.memory_dir / "facts/ada.md").read_text() == concept
    bodies = [s.body for s in provider.seen]
    assert [m["role"] for m in bodies[-1]["messages"]][-2:] == ["assistant", "tool"]
    assert KEY not in str(bodies) and all(
        s.headers["Authorization"] == f"Bearer {KEY}" for s in provider.seen
    )


def test_a_provider_that_stays_down_dead_letters_with_the_reason(
    served: dict[str, Any], provider: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The waits themselves are tested in test_relay_providers and test_queue; here only the
    # path to the dead letter counts, so every wait is short.
    monkeypatch.setattr("orchestrator.relay.retry.retry_wait", lambda failure, attempt: 0.01)
    monkeypatch.setattr("orchestrator.store.messages.delivery_backoff", lambda attempts: 0.01)
    provider.default = Error(503, "overloaded")
    daemon: Daemon = served["daemon"]
    message = daemon.submit("work", "hello", chat="c", sender="bob", channel="cli")
    deadline = time.monotonic() + 120
    while (current := daemon.queue.get(message.id)).state != "dead":  # type: ignore[union-attr]
        assert time.monotonic() < deadline, current
        time.sleep(0.1)
    assert "HTTP 503: overloaded" in str(current.last_error)
    assert "Traceback" not in str(current.last_error) and KEY not in str(current.last_error)
    assert current.replies == ()
    # one budget of attempts for the message, not one per delivery: spent in the first,
    # the message is a dead letter at once
    assert current.attempts == 1 < MAX_DELIVERY_ATTEMPTS
    assert len(provider.seen) == RELAY_PROVIDER_ATTEMPTS


def test_an_exhausted_budget_is_one_plain_reply(served, provider) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = served["daemon"]
    provider.script.append(Text("first", input_tokens=10_000, output_tokens=10))
    first = daemon.submit("fam", "one", chat="c", sender="bob", channel="cli")
    assert daemon.wait(first.id, 60).replies == ("first",)  # type: ignore[union-attr]
    second = daemon.submit("fam", "two", chat="c", sender="bob", channel="cli")
    done = daemon.wait(second.id, 60)
    assert done is not None and done.state == DONE and done.attempts == 1
    assert len(done.replies) == 1 and "used its model budget for today" in done.replies[0]
