"""Exact behaviour of the background model a memory consolidation asks
(relay/consolidation.py's BackgroundModel), driven directly with a stand-in client and
a stepped clock: the request it makes, what usage records of each call, the group's
budgets and money caps checked before a call, failures, a cut answer, the refusal of a
provider that is not defined, a missing key, and the run's summary of its use."""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import OrchestratorConfig, load_config
from orchestrator.groups import Group, GroupStore
from orchestrator.groups.config import GroupConfig, ModelLimits
from orchestrator.home import Home
from orchestrator.limits import DEFAULT_GROUP_MAX_TOKENS
from orchestrator.memory.consolidate import ConsolidationError
from orchestrator.money import Prices, worst_cost
from orchestrator.relay import consolidation
from orchestrator.relay.consolidation import BackgroundModel
from orchestrator.relay.providers.base import ModelAnswer, ProviderFailure
from orchestrator.secrets import MissingSecret
from orchestrator.store.messages import open_queue
from orchestrator.store.usage import Call, UsageStore

NOW = 1_765_000_000.0  # 2025-12-06 05:46:40 UTC: 18:46:40 that day in Auckland

PRICED = (
    "    model_info:\n      m-1: {prices: {input: 3, output: 15, cache_read: 1, cache_write: 4}}\n"
)


class Client:
    """A provider's client that answers from ``answers`` (an exception is raised) and
    keeps what it was asked."""

    def __init__(self, *answers: ModelAnswer | Exception) -> None:
        self.answers = list(answers)
        self.asked: list[tuple[Any, str, float]] = []
        self.closed = False

    def complete(self, call: Any, *, model: str, timeout: float) -> ModelAnswer:
        self.asked.append((call, model, timeout))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def close(self) -> None:
        self.closed = True


class Stepped:
    """``time`` for the consolidation module: monotonic readings go up by 0.25 s from
    the real clock's whole second (the retries' deadline is on the real clock)."""

    def __init__(self) -> None:
        self.now = float(int(time.monotonic()))

    def monotonic(self) -> float:
        self.now += 0.25
        return self.now


def rows(usage: UsageStore) -> list[tuple[Any, ...]]:
    return [
        tuple(row)
        for row in usage.read(
            "SELECT message_id, group_folder, provider, model, purpose, started, latency_ms,"
            " input_tokens, output_tokens, outcome, error, cache_read_tokens,"
            " cache_write_tokens, cost, currency FROM usage ORDER BY rowid"
        )
    ]


def asking(text: str = "a") -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


@pytest.fixture
def made(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``made(priced)``: the home's config, group fam on provider fake, and its usage."""
    opened: list[Any] = []
    monkeypatch.setenv("FAKE_KEY", "k" * 20)

    def make(
        priced: bool = True, timezone: str = "UTC", **limits: Any
    ) -> tuple[OrchestratorConfig, Group, UsageStore]:
        providers = (
            "providers:\n  fake:\n    kind: openai\n    base_url: http://127.0.0.1:9/v1\n"
            "    key_env: FAKE_KEY\n    models: [m-1]\n"
        )
        (home / "orchestrator.yaml").write_text(providers + PRICED)
        group = GroupStore(Home(home)).add(
            GroupConfig(
                name="fam",
                provider="fake",
                model="m-1",
                timezone=timezone,
                limits=ModelLimits(**limits),
            )
        )
        if not priced:  # the prices taken out of orchestrator.yaml since
            (home / "orchestrator.yaml").write_text(providers)
        queue = open_queue(Home(home))
        usage = UsageStore(queue.path)
        opened.extend([usage, queue])
        return load_config(Home(home)), group, usage

    yield make
    for thing in opened:
        thing.close()


def test_a_background_provider_not_defined_is_refused_with_what_to_do(made: Any) -> None:
    config, group, usage = made()
    undefined = dataclasses.replace(config, providers={})
    with pytest.raises(ConsolidationError) as refused:
        BackgroundModel(undefined, group, usage, adapters=lambda name: Client())
    assert str(refused.value) == (
        "groups/fam/group.yaml: the background model's provider 'fake' is not defined in "
        "orchestrator.yaml; nothing was changed"
    )
    assert refused.value.hint == (
        "define it (orchestrator provider add), or set models.background in group.yaml "
        "to a provider that is"
    )


def test_the_summary_before_any_call_has_no_cost_and_no_currency(made: Any) -> None:
    config, group, usage = made()
    model = BackgroundModel(config, group, usage, adapters=lambda name: Client())
    assert re.fullmatch(r"consolidation-[0-9a-f]{12}", model.run_id), model.run_id
    assert model.summary() == {
        "usage_id": model.run_id,
        "provider": "fake",
        "model": "m-1",
        "calls": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "cost": None,
        "currency": None,
    }


def test_the_summary_counts_every_kind_of_token_and_the_cost_in_its_currency(
    made: Any,
) -> None:
    config, group, usage = made()
    client = Client(
        ModelAnswer("one", [], 900, 80, "end", cache_read_tokens=100, cache_write_tokens=20),
        ModelAnswer("two", [], 100, 20, "end", cache_read_tokens=0, cache_write_tokens=5),
    )
    model = BackgroundModel(config, group, usage, adapters=lambda name: client)
    assert model("sys", [{"role": "user", "content": "a"}], 500) == "one"
    assert model("sys", [{"role": "user", "content": "b"}], 500) == "two"
    assert [asked_model for _, asked_model, _ in client.asked] == ["m-1", "m-1"]
    cost = (1000 * 3 + 100 * 15 + 100 * 1 + 25 * 4) / 1e6
    summary = model.summary()
    assert summary == {
        "usage_id": model.run_id,
        "provider": "fake",
        "model": "m-1",
        "calls": 2,
        "input_tokens": 1000,
        "output_tokens": 100,
        "cache_read_tokens": 100,
        "cache_write_tokens": 25,
        "cost": pytest.approx(cost),
        "currency": config.currency,
    }
    assert config.currency == "USD"


def test_a_model_without_prices_is_summed_without_a_cost(made: Any) -> None:
    config, group, usage = made(priced=False)
    client = Client(ModelAnswer("one", [], 900, 80, "end"))
    model = BackgroundModel(config, group, usage, adapters=lambda name: client)
    assert model("sys", [{"role": "user", "content": "a"}], 500) == "one"
    summary = model.summary()
    assert (summary["calls"], summary["input_tokens"], summary["output_tokens"]) == (1, 900, 80)
    assert summary["cost"] is None and summary["currency"] is None


def test_a_call_asks_the_groups_model_at_the_smaller_max_tokens_and_records_it(
    made: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(consolidation, "time", Stepped())
    config, group, usage = made(max_tokens=300)
    client = Client(
        ModelAnswer("one", [], 900, 80, "end", cache_read_tokens=100, cache_write_tokens=20),
        ModelAnswer(None, [], 10, 0, "end"),
    )
    model = BackgroundModel(config, group, usage, adapters=lambda name: client, clock=lambda: NOW)
    assert model("the system", asking("hello"), 200) == "one"
    assert model("sys", asking(), 500) == ""  # an answer with no text is none
    [(first, name, timeout), (second, _, _)] = client.asked
    assert (first.system, first.messages, first.purpose) == (
        "the system",
        asking("hello"),
        "background",
    )
    assert (first.max_tokens, second.max_tokens) == (200, 300) and name == "m-1"
    assert isinstance(timeout, float) and timeout > 0  # what is left of the turn's time
    cost = (900 * 3 + 80 * 15 + 100 * 1 + 20 * 4) / 1e6
    assert rows(usage) == [
        (model.run_id, "fam", "fake", "m-1", "background", NOW, 250.0, 900, 80, "ok", None,
         100, 20, pytest.approx(cost), "USD"),
        (model.run_id, "fam", "fake", "m-1", "background", NOW, 250.0, 10, 0, "ok", None,
         0, 0, pytest.approx(10 * 3 / 1e6), "USD"),
    ]  # fmt: skip
    assert DEFAULT_GROUP_MAX_TOKENS > 300


def test_failures_are_recorded_each_and_the_last_one_is_said(
    made: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(consolidation, "time", Stepped())
    config, group, usage = made()
    client = Client(
        ProviderFailure("busy", status=529, retryable=True, retry_after=0.0),
        ProviderFailure("bad request", status=400),
    )
    model = BackgroundModel(config, group, usage, adapters=lambda name: client, clock=lambda: NOW)
    with pytest.raises(ConsolidationError) as failed:
        model("sys", asking(), 100)
    assert str(failed.value) == (
        "the background model (fake/m-1) failed: bad request; nothing was changed"
    )
    assert [row[5:11] for row in rows(usage)] == [
        (NOW, 250.0, 0, 0, "failed", "busy"),
        (NOW, 500.0, 0, 0, "failed", "bad request"),
    ]
    assert model.calls == 0 and model.summary()["cost"] is None


def test_a_retryable_failure_is_tried_again_until_an_answer(made: Any) -> None:
    config, group, usage = made()
    busy = ProviderFailure("busy", retryable=True, retry_after=0.0)
    client = Client(busy, busy, ModelAnswer("at last", [], 5, 5, "end"))
    model = BackgroundModel(config, group, usage, adapters=lambda name: client)
    assert model("sys", asking(), 100) == "at last"
    assert [row[9] for row in rows(usage)] == ["failed", "failed", "ok"]


def test_an_answer_cut_at_max_tokens_changes_nothing_and_says_what_to_do(made: Any) -> None:
    config, group, usage = made()
    client = Client(ModelAnswer("half a", [], 5, 1000, "length"))
    model = BackgroundModel(config, group, usage, adapters=lambda name: client)
    with pytest.raises(ConsolidationError) as cut:
        model("sys", asking(), 1000)
    assert str(cut.value) == (
        "the background model's answer was cut at 1,000 tokens; nothing was changed"
    )
    assert cut.value.hint == (
        "raise limits.max_tokens in group.yaml, or consolidate fewer days (--days)"
    )
    assert [row[9] for row in rows(usage)] == ["ok"]  # the call was made, and is paid for


def record(usage: UsageStore, at: float, tokens: int = 1, message: str = "m", cost: float = 0.0):
    usage.record(
        Call(message, "fam", "fake", "m-1", "turn", at, 1.0, tokens, 0, "ok", cost=cost,
             currency="USD")
    )  # fmt: skip


def refused(model: BackgroundModel, client: Client) -> str:
    with pytest.raises(ConsolidationError) as caught:
        model("sys", asking(), 100)
    assert client.asked == []
    text = str(caught.value)
    assert text.startswith("the background model was not asked: ")
    assert text.endswith("; nothing was changed")
    return text.removeprefix("the background model was not asked: ").removesuffix(
        "; nothing was changed"
    )


def test_the_requests_of_the_last_minute_are_counted_before_a_call(made: Any) -> None:
    config, group, usage = made(requests_per_minute=1)
    record(usage, NOW - 60.5)  # a minute ago and a half second: not counted
    client = Client(ModelAnswer("ok", [], 1, 1, "end"))
    model = BackgroundModel(config, group, usage, adapters=lambda name: client, clock=lambda: NOW)
    assert model("sys", asking(), 100) == "ok"
    other = Client()
    model = BackgroundModel(config, group, usage, adapters=lambda name: other, clock=lambda: NOW)
    why = refused(model, other)
    assert why == (
        "This group is sending too many requests to its model right now (at most 1 a minute); "
        "please try again in a minute."
    )
    [*_, last] = rows(usage)
    assert last == (model.run_id, "fam", "fake", "m-1", "background", NOW, 0.0, 0, 0,
                    "refused", why, 0, 0, 0.0, "USD")  # fmt: skip


def test_the_tokens_of_the_run_and_of_the_day_are_counted_before_a_call(made: Any) -> None:
    config, group, usage = made(tokens_per_turn=1000, tokens_per_day=5000)
    client = Client(ModelAnswer("ok", [], 900, 100, "end"))
    model = BackgroundModel(config, group, usage, adapters=lambda name: client, clock=lambda: NOW)
    assert model("sys", asking(), 100) == "ok"
    assert "one message" in refused(model, Client())  # this run's 1,000 tokens
    midnight = NOW - NOW % 86400
    record(usage, midnight - 1, tokens=9000, message="yesterday")
    fresh = BackgroundModel(config, group, usage, adapters=lambda name: client, clock=lambda: NOW)
    client.answers.append(ModelAnswer("ok", [], 1, 1, "end"))
    assert fresh("sys", asking(), 100) == "ok"  # yesterday's tokens are not today's
    record(usage, midnight, tokens=3999, message="today")
    other = Client()
    fresh = BackgroundModel(config, group, usage, adapters=lambda name: other, clock=lambda: NOW)
    assert "today" in refused(fresh, other)


PRICES = Prices(input=3.0, output=15.0, cache_read=1.0, cache_write=4.0)


def test_a_money_cap_without_prices_refuses_every_call(made: Any) -> None:
    config, group, usage = made(priced=False, cost_per_day=1.0)
    other = Client()
    model = BackgroundModel(config, group, usage, adapters=lambda name: other, clock=lambda: NOW)
    assert refused(model, other) == (
        "the model has no prices in orchestrator.yaml, so the money cap cannot be kept"
    )


@pytest.mark.parametrize(
    ("caps", "spent", "period"),
    [({"cost_per_day": 0.035}, "0.0300", "day"), ({"cost_per_month": 0.045}, "0.0400", "month")],
)
def test_a_call_that_could_pass_a_money_cap_of_the_groups_zone_is_refused(
    made: Any, caps: dict[str, float], spent: str, period: str
) -> None:
    config, group, usage = made(timezone="Pacific/Auckland", **caps)
    # Auckland's day began at 11:00 UTC the day before; its month, on Nov 30 at 11:00 UTC
    record(usage, NOW - 18 * 3600, cost=0.03, message="today in Auckland, not in UTC")
    record(usage, NOW - 496_000, cost=0.01, message="Nov 30 12:00 UTC: Dec 1 in Auckland")
    record(usage, NOW - 7 * 86400, cost=1.0, message="last month")
    system = "s" * 8000
    other = Client()
    model = BackgroundModel(config, group, usage, adapters=lambda name: other, clock=lambda: NOW)
    with pytest.raises(ConsolidationError) as caught:
        model(system, asking("c" * 4000), 100)
    worst = worst_cost(PRICES, 12_000, 100)
    cap = caps[f"cost_per_{period}"]
    assert str(caught.value) == (
        f"the background model was not asked: budget: the next model call (up to "
        f"{worst:.4f} USD) would pass this group's cap of {cap:g} USD a {period} ({spent} "
        "USD spent so far); nothing was changed"
    )
    assert other.asked == []
    # under the cap, the same call is made
    client = Client(ModelAnswer("ok", [], 1, 1, "end"))
    roomy = {key: value + worst for key, value in caps.items()}
    limits = dataclasses.replace(group.config.limits, **roomy)
    group = dataclasses.replace(group, config=dataclasses.replace(group.config, limits=limits))
    model = BackgroundModel(config, group, usage, adapters=lambda name: client, clock=lambda: NOW)
    assert model(system, asking("c" * 4000), 100) == "ok"


def test_its_own_client_is_closed_and_one_given_is_not(
    made: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, group, usage = made()
    own = Client()
    monkeypatch.setattr(consolidation, "adapter_for", lambda definition, key: own)
    BackgroundModel(config, group, usage).close()
    assert own.closed
    given = Client()
    BackgroundModel(config, group, usage, adapters=lambda name: given).close()
    assert not given.closed


def test_a_missing_key_is_recorded_as_a_failed_call_and_raised(
    made: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, group, usage = made()
    monkeypatch.delenv("FAKE_KEY")
    with pytest.raises(MissingSecret) as missing:
        BackgroundModel(config, group, usage, clock=lambda: NOW)
    [row] = rows(usage)
    assert row[4:11] == ("background", NOW, 0.0, 0, 0, "failed", missing.value.message)
    assert "FAKE_KEY" in missing.value.message
