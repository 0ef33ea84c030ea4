"""Exact behaviour of the background model a memory consolidation asks
(relay/consolidation.py's BackgroundModel), driven directly with a stand-in client:
the refusal of a provider that is not defined, and the run's summary of its use."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import OrchestratorConfig, load_config
from orchestrator.groups import Group, GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from orchestrator.memory.consolidate import ConsolidationError
from orchestrator.relay.consolidation import BackgroundModel
from orchestrator.relay.providers.base import ModelAnswer
from orchestrator.store.messages import open_queue
from orchestrator.store.usage import UsageStore

PRICED = (
    "    model_info:\n      m-1: {prices: {input: 3, output: 15, cache_read: 1, cache_write: 4}}\n"
)


class Client:
    """A provider's client that answers from ``answers`` and keeps what it was asked."""

    def __init__(self, *answers: ModelAnswer) -> None:
        self.answers = list(answers)
        self.asked: list[tuple[Any, str]] = []

    def complete(self, call: Any, *, model: str, timeout: float) -> ModelAnswer:
        self.asked.append((call, model))
        return self.answers.pop(0)


@pytest.fixture
def made(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``made(priced)``: the home's config, group fam on provider fake, and its usage."""
    opened: list[Any] = []
    monkeypatch.setenv("FAKE_KEY", "k" * 20)

    def make(priced: bool = True) -> tuple[OrchestratorConfig, Group, UsageStore]:
        (home / "orchestrator.yaml").write_text(
            "providers:\n  fake:\n    kind: openai\n    base_url: http://127.0.0.1:9/v1\n"
            "    key_env: FAKE_KEY\n    models: [m-1]\n" + (PRICED if priced else "")
        )
        group = GroupStore(Home(home)).add(GroupConfig(name="fam", provider="fake", model="m-1"))
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
    assert [asked_model for _, asked_model in client.asked] == ["m-1", "m-1"]
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
