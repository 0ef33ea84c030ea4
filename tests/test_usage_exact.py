"""The usage store, exactly: each column a call records, the counts and sums since a
time (its boundary included), per message, and the days of each group's zone by model or
purpose, with their means and roundings."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from orchestrator.money import Prices, Tokens
from orchestrator.store.messages import MessageQueue
from orchestrator.store.schema import LATEST, SchemaBehind
from orchestrator.store.usage import (
    BY,
    FAILED,
    OK,
    QUARTER,
    REFUSED,
    WEB,
    Call,
    DayUsage,
    UsageStore,
    _int,
    utc_midnight,
)


@pytest.fixture
def usage(tmp_path: Path) -> Any:
    path = tmp_path / "state" / "queue.db"
    MessageQueue(path).close()  # the queue makes the file and its schema
    store = UsageStore(path)
    yield store
    store.close()


def call(**changes: Any) -> Call:
    fields: dict[str, Any] = dict(
        message_id="m",
        group="g",
        provider="p",
        model="x",
        purpose="turn",
        started=1000.0,
        latency_ms=10.0,
        input_tokens=1,
        output_tokens=2,
        outcome=OK,
    )
    fields.update(changes)
    return Call(**fields)


def test_the_names() -> None:
    assert (OK, FAILED, REFUSED, WEB) == ("ok", "failed", "refused", "web")
    assert QUARTER == 900
    assert BY == ("model", "purpose")


def test_a_call_defaults_to_no_cache_no_error_and_no_cost() -> None:
    made = Call("m", "g", "p", "x", "turn", 1.0, 2.0, 3, 4, OK)
    assert (made.error, made.cache_read_tokens, made.cache_write_tokens) == (None, 0, 0)
    assert (made.cost, made.currency) == (None, None)


def test_a_priced_call_has_its_tokens_cost_and_currency() -> None:
    prices = Prices(input=2.0, output=10.0, cache_read=0.5, cache_write=4.0)
    tokens = Tokens(input=1_000_000, output=100_000, cache_read=2_000_000, cache_write=250_000)
    made = Call.priced(
        "m", "g", "p", "x", "turn", 5.0, 6.0, tokens, FAILED, "boom", prices=prices, currency="EUR"
    )
    assert made == Call(
        "m", "g", "p", "x", "turn", 5.0, 6.0, 1_000_000, 100_000, FAILED, "boom",
        2_000_000, 250_000, 2.0 + 1.0 + 1.0 + 1.0, "EUR",
    )  # fmt: skip


def test_a_call_without_prices_or_tokens_has_no_cost_nor_currency() -> None:
    made = Call.priced(
        "m", "g", "p", "x", "turn", 5.0, 6.0, None, REFUSED, None, prices=None, currency="EUR"
    )
    assert made == Call("m", "g", "p", "x", "turn", 5.0, 6.0, 0, 0, REFUSED, None, 0, 0, None, None)
    free = Call.priced(
        "m", "g", "p", "x", "turn", 5.0, 6.0, None, OK, None,
        prices=Prices(input=1.0, output=1.0), currency="USD",
    )  # fmt: skip
    assert (free.cost, free.currency) == (0.0, "USD")


def test_a_day_as_a_dict_leaves_its_sums_out() -> None:
    day = DayUsage("g", "2024-01-02")
    day._latency_sum, day._latency_n = 5.0, 2
    assert day.to_dict() == {
        "group": "g",
        "day": "2024-01-02",
        "requests": 0,
        "failed": 0,
        "refused": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "mean_latency_ms": 0.0,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "cost": None,
        "currency": None,
        "key": None,
    }
    assert (DayUsage("g", "d")._latency_sum, DayUsage("g", "d")._latency_n) == (0.0, 0)


def test_the_store_does_not_wait_for_the_disk_and_never_migrates(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    MessageQueue(path).close()
    store = UsageStore(path)
    try:
        assert store.synchronous == "NORMAL"
        assert store._db.execute("PRAGMA synchronous").fetchone()[0] == 1
        assert store.migrated == []
    finally:
        store.close()
    con = sqlite3.connect(path)
    con.execute(f"PRAGMA user_version = {LATEST - 1}")
    con.close()
    with pytest.raises(SchemaBehind):
        UsageStore(path)


def test_record_stores_every_column(usage: UsageStore) -> None:
    usage.record(
        Call("m1", "g", "prov", "mod", "turn", 12.5, 34.5, 5, 6, FAILED, "bad", 7, 8, 0.25, "EUR")
    )
    rows = sqlite3.connect(usage.path).execute("SELECT * FROM usage").fetchall()
    assert rows == [
        (1, "m1", "g", "prov", "mod", "turn", 12.5, 34.5, 5, 6, FAILED, "bad", 7, 8, 0.25, "EUR")
    ]


def test_requests_since_counts_the_calls_made_to_a_provider(usage: UsageStore) -> None:
    usage.record(call(started=99.0))
    usage.record(call(started=100.0))
    usage.record(call(started=200.0, outcome=FAILED))
    usage.record(call(started=200.0, outcome=REFUSED))
    usage.record(call(started=200.0, purpose=WEB))
    usage.record(call(started=200.0, group="h"))
    assert usage.requests_since("g", 100.0) == 2
    assert usage.requests_since("g", 0.0) == 3
    assert usage.requests_since("g", 200.5) == 0
    assert usage.requests_since("h", 0.0) == 1


def test_web_since_counts_the_fetches_and_searches(usage: UsageStore) -> None:
    usage.record(call(started=99.0, purpose=WEB))
    usage.record(call(started=100.0, purpose=WEB))
    usage.record(call(started=200.0, purpose=WEB, outcome=FAILED))
    usage.record(call(started=200.0, purpose=WEB, outcome=REFUSED))
    usage.record(call(started=200.0))
    usage.record(call(started=200.0, group="h", purpose=WEB))
    assert usage.web_since("g", 100.0) == 2
    assert usage.web_since("g", 0.0) == 3
    assert usage.web_since("h", 0.0) == 1
    assert usage.web_since("x", 0.0) == 0


def test_tokens_since_sums_every_kind(usage: UsageStore) -> None:
    assert usage.tokens_since("g", 0.0) == 0
    usage.record(call(started=99.0, input_tokens=1000))
    usage.record(call(started=100.0, input_tokens=1, output_tokens=20, cache_read_tokens=300,
                      cache_write_tokens=4000))  # fmt: skip
    usage.record(call(started=100.0, group="h", input_tokens=50000))
    assert usage.tokens_since("g", 100.0) == 4321
    assert usage.tokens_since("g", 0.0) == 5323  # 1000 + 2, and 4321
    assert usage.tokens_since("g", 100.5) == 0


def test_cost_since_sums_what_was_priced(usage: UsageStore) -> None:
    assert usage.cost_since("g", 0.0) == 0.0
    assert isinstance(usage.cost_since("g", 0.0), float)
    usage.record(call(started=100.0))  # not priced
    assert usage.cost_since("g", 0.0) == 0.0
    usage.record(call(started=99.0, cost=4.0))
    usage.record(call(started=100.0, cost=0.5))
    usage.record(call(started=100.0, cost=0.25, purpose=WEB))
    usage.record(call(started=100.0, cost=8.0, group="h"))
    assert usage.cost_since("g", 100.0) == 0.75
    assert usage.cost_since("g", 0.0) == 4.75


def test_priced_since_names_only_groups_with_priced_calls(usage: UsageStore) -> None:
    usage.record(call(group="a", started=100.0, cost=1.5))
    usage.record(call(group="a", started=99.0, cost=2.0))
    usage.record(call(group="a", started=100.0))
    usage.record(call(group="b", started=100.0))
    usage.record(call(group="c", started=50.0, cost=1.0))
    assert usage.priced_since({"a": 100.0, "b": 0.0, "c": 50.0, "d": 0.0}) == {"a": 1.5, "c": 1.0}
    assert usage.priced_since({"a": 99.0, "c": 50.5}) == {"a": 3.5}
    assert usage.priced_since({}) == {}


def test_failures_and_tokens_of_a_message(usage: UsageStore) -> None:
    usage.record(call(message_id="m", outcome=FAILED, input_tokens=1, output_tokens=0))
    usage.record(call(message_id="m", outcome=FAILED, input_tokens=0, output_tokens=10))
    usage.record(call(message_id="m", outcome=OK, input_tokens=100, output_tokens=0,
                      cache_read_tokens=1000, cache_write_tokens=10000))  # fmt: skip
    usage.record(call(message_id="n", outcome=FAILED, input_tokens=100000))
    assert usage.failures_of_message("m") == 2
    assert usage.failures_of_message("n") == 1
    assert usage.failures_of_message("x") == 0
    assert usage.tokens_of_message("m") == 11111
    assert usage.tokens_of_message("x") == 0


def test_by_day_refuses_another_key(usage: UsageStore) -> None:
    with pytest.raises(ValueError) as caught:
        usage.by_day(by="provider")
    assert str(caught.value) == "by must be one of model, purpose"


DAY = 86400.0


def test_by_day_sums_each_group_and_utc_day(usage: UsageStore) -> None:
    assert usage.by_day() == []
    first = call(started=DAY - 1, latency_ms=10.0, input_tokens=1, output_tokens=2)
    usage.record(replace(first, cache_read_tokens=3, cache_write_tokens=4, cost=0.1,
                         currency="EUR"))  # fmt: skip
    usage.record(call(started=100.0, latency_ms=21.0, input_tokens=10, output_tokens=20, cost=0.2))
    usage.record(call(started=200.0, latency_ms=1000.0, outcome=FAILED, input_tokens=100))
    usage.record(call(started=300.0, latency_ms=500.0, outcome=REFUSED, input_tokens=0,
                      output_tokens=0))  # fmt: skip
    usage.record(call(started=DAY, latency_ms=7.0, group="g"))
    usage.record(call(started=DAY, latency_ms=8.0, group="a"))
    days = usage.by_day()
    assert [d.to_dict() for d in days] == [
        {"group": "a", "day": "1970-01-02", "requests": 1, "failed": 0, "refused": 0,
         "input_tokens": 1, "output_tokens": 2, "mean_latency_ms": 8.0, "cache_read_tokens": 0,
         "cache_write_tokens": 0, "cost": None, "currency": None, "key": None},
        {"group": "g", "day": "1970-01-01", "requests": 3, "failed": 1, "refused": 1,
         "input_tokens": 111, "output_tokens": 24, "mean_latency_ms": 15.5,
         "cache_read_tokens": 3, "cache_write_tokens": 4, "cost": 0.3, "currency": "EUR",
         "key": None},
        {"group": "g", "day": "1970-01-02", "requests": 1, "failed": 0, "refused": 0,
         "input_tokens": 1, "output_tokens": 2, "mean_latency_ms": 7.0, "cache_read_tokens": 0,
         "cache_write_tokens": 0, "cost": None, "currency": None, "key": None},
    ]  # fmt: skip
    assert [(d.group, d.day) for d in usage.by_day("g")] == [
        ("g", "1970-01-01"),
        ("g", "1970-01-02"),
    ]
    assert [(d.group, d.day) for d in usage.by_day(since=DAY)] == [
        ("a", "1970-01-02"),
        ("g", "1970-01-02"),
    ]
    assert [(d.group, d.day) for d in usage.by_day("a", since=DAY)] == [("a", "1970-01-02")]
    assert usage.by_day("a", since=DAY + 1) == []


def test_by_day_takes_each_groups_zone(usage: UsageStore) -> None:
    midnight = DAY - 5.5 * 3600  # 1970-01-02 00:00 in Kolkata (+05:30)
    for group in ("in", "utc"):
        usage.record(call(group=group, started=midnight - 1))
        usage.record(call(group=group, started=midnight))
    zones = {"in": "Asia/Kolkata", "elsewhere": "Pacific/Kiritimati"}
    assert [(d.group, d.day, d.requests) for d in usage.by_day(zones=zones)] == [
        ("in", "1970-01-01", 1),
        ("in", "1970-01-02", 1),
        ("utc", "1970-01-01", 2),
    ]


def test_a_quarter_of_an_hour_is_one_row_summed(usage: UsageStore) -> None:
    zone = {"g": "Asia/Kathmandu"}  # +05:45 (since 1986): its midnights are at quarter hours
    midnight = 631152000.0 + DAY - (5 * 3600 + 45 * 60)  # 1990-01-02 00:00 there
    usage.record(call(started=midnight - 0.5))
    usage.record(call(started=midnight - QUARTER))
    usage.record(call(started=midnight))
    usage.record(call(started=midnight + QUARTER - 0.5))
    assert [(d.day, d.requests) for d in usage.by_day(zones=zone)] == [
        ("1990-01-01", 2),
        ("1990-01-02", 2),
    ]


def test_by_day_by_model_or_purpose(usage: UsageStore) -> None:
    usage.record(call(provider="p", model="b", purpose="turn"))
    usage.record(call(provider="p", model="a", purpose="summary"))
    usage.record(call(provider="q", model="a", purpose="turn"))
    usage.record(call(provider="p", model="a", purpose="turn"))
    by_model = usage.by_day(by="model")
    assert [(d.key, d.requests) for d in by_model] == [("p/a", 2), ("p/b", 1), ("q/a", 1)]
    by_purpose = usage.by_day(by="purpose")
    assert [(d.key, d.requests) for d in by_purpose] == [("summary", 1), ("turn", 3)]
    assert [(d.key, d.requests) for d in usage.by_day()] == [(None, 4)]


def test_by_day_sorts_the_keys_of_a_day_across_its_quarters(usage: UsageStore) -> None:
    usage.record(call(purpose="b", started=10.0))
    usage.record(call(purpose="a", started=5000.0))
    usage.record(call(purpose="c", started=9000.0))
    assert [d.key for d in usage.by_day(by="purpose")] == ["a", "b", "c"]


def test_by_day_takes_every_call_by_default(usage: UsageStore) -> None:
    usage.record(call(started=0.0))
    usage.record(call(started=0.5))
    assert [(d.day, d.requests) for d in usage.by_day()] == [("1970-01-01", 2)]
    assert usage.by_day(since=0.5)[0].requests == 1


def test_by_day_sorts_the_unkeyed_first(usage: UsageStore) -> None:
    usage.record(call(purpose=""))
    usage.record(call(purpose="a"))
    usage.record(call(purpose="A"))
    assert [(d.key, d.requests) for d in usage.by_day(by="purpose")] == [
        (None, 1),
        ("A", 1),
        ("a", 1),
    ]


def test_by_day_sums_the_cache_tokens_of_every_quarter(usage: UsageStore) -> None:
    usage.record(call(started=10.0, cache_read_tokens=1, cache_write_tokens=10))
    usage.record(call(started=5000.0, cache_read_tokens=100, cache_write_tokens=1000))
    (day,) = usage.by_day()
    assert (day.cache_read_tokens, day.cache_write_tokens) == (101, 1010)


def test_by_day_rounds_means_and_costs(usage: UsageStore) -> None:
    usage.record(call(latency_ms=1.0, cost=0.1234566))
    usage.record(call(latency_ms=2.0, cost=0.0000001))
    usage.record(call(latency_ms=2.0, started=2000.0))
    usage.record(call(latency_ms=900.0, outcome=FAILED))
    usage.record(call(latency_ms=800.0, outcome=FAILED, started=5000.0))  # a quarter of no ok
    (day,) = usage.by_day()
    assert day.mean_latency_ms == 1.7
    assert day.cost == 0.123457
    assert day.requests == 5 and day.failed == 2


def test_by_day_without_an_ok_call_has_no_mean(usage: UsageStore) -> None:
    usage.record(call(latency_ms=50.0, outcome=FAILED))
    usage.record(call(latency_ms=60.0, outcome=REFUSED))
    (day,) = usage.by_day()
    assert (day.mean_latency_ms, day.requests, day.failed, day.refused) == (0.0, 1, 1, 1)


def test_by_day_takes_a_currency_of_the_day(usage: UsageStore) -> None:
    usage.record(call(started=10.0))
    usage.record(call(started=5000.0, cost=1.0, currency="EUR"))
    usage.record(call(started=9000.0, cost=0.0, currency=None))
    (day,) = usage.by_day()
    assert (day.cost, day.currency) == (1.0, "EUR")


def test_by_day_of_calls_priced_at_nothing_costs_zero(usage: UsageStore) -> None:
    usage.record(call(started=10.0, cost=0.0, currency="EUR"))
    usage.record(call(started=5000.0))
    (day,) = usage.by_day()
    assert (day.cost, day.currency) == (0.0, "EUR")


def test_utc_midnight() -> None:
    assert utc_midnight(DAY * 3 + 5.5) == DAY * 3
    assert utc_midnight(DAY * 3) == DAY * 3
    assert utc_midnight(DAY - 0.25) == 0.0
    assert utc_midnight() % DAY == 0.0


def test_int_of_a_value() -> None:
    assert _int(3) == 3
    assert _int(3.9) == 3
    assert _int(None) == 0
    assert _int("7") == 0
