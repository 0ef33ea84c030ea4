"""The relay's budget decisions, word for word: which budget is used up first, at exactly
what count, and the sentence or the (period, reason) the chat and the log get."""

from __future__ import annotations

import pytest

from orchestrator.groups.config import ModelLimits
from orchestrator.relay.budget import DAY, MONTH, budget_refusal, cost_refusal

LIMITS = ModelLimits(requests_per_minute=30, tokens_per_turn=12_500, tokens_per_day=1_250_000)
UNDER = {"requests_last_minute": 29, "tokens_this_turn": 12_499, "tokens_today": 1_249_999}

TODAY = (
    "This group has used its model budget for today (1,250,000 tokens); it can answer again "
    "after midnight UTC."
)
TURN = (
    "This answer needed more than this group's 12,500 tokens for one message, so it stopped "
    "here; please ask again more narrowly."
)
MINUTE = (
    "This group is sending too many requests to its model right now (at most 30 a minute); "
    "please try again in a minute."
)


def test_one_under_every_budget_goes_ahead() -> None:
    assert budget_refusal(LIMITS, **UNDER) is None
    assert (
        budget_refusal(LIMITS, requests_last_minute=0, tokens_this_turn=0, tokens_today=0) is None
    )


def test_each_budget_is_used_up_at_its_limit_with_its_own_sentence() -> None:
    assert budget_refusal(LIMITS, **{**UNDER, "tokens_today": 1_250_000}) == TODAY
    assert budget_refusal(LIMITS, **{**UNDER, "tokens_today": 1_250_001}) == TODAY
    assert budget_refusal(LIMITS, **{**UNDER, "tokens_this_turn": 12_500}) == TURN
    assert budget_refusal(LIMITS, **{**UNDER, "tokens_this_turn": 99_999}) == TURN
    assert budget_refusal(LIMITS, **{**UNDER, "requests_last_minute": 30}) == MINUTE
    assert budget_refusal(LIMITS, **{**UNDER, "requests_last_minute": 31}) == MINUTE


def test_the_days_budget_is_told_before_the_turns_and_the_turns_before_the_minutes() -> None:
    over = {"requests_last_minute": 30, "tokens_this_turn": 12_500, "tokens_today": 1_250_000}
    assert budget_refusal(LIMITS, **over) == TODAY
    assert budget_refusal(LIMITS, **{**over, "tokens_today": 0}) == TURN
    assert budget_refusal(LIMITS, **{**over, "tokens_today": 0, "tokens_this_turn": 0}) == MINUTE


def test_small_limits_are_written_without_a_separator() -> None:
    limits = ModelLimits(requests_per_minute=1_000, tokens_per_turn=999, tokens_per_day=5)
    none_used = {"requests_last_minute": 0, "tokens_this_turn": 0}
    assert budget_refusal(limits, **none_used, tokens_today=5) == (
        "This group has used its model budget for today (5 tokens); it can answer again "
        "after midnight UTC."
    )
    assert budget_refusal(limits, requests_last_minute=0, tokens_this_turn=999, tokens_today=0) == (
        "This answer needed more than this group's 999 tokens for one message, so it stopped "
        "here; please ask again more narrowly."
    )
    assert budget_refusal(
        limits, requests_last_minute=1_000, tokens_this_turn=0, tokens_today=0
    ) == (
        "This group is sending too many requests to its model right now (at most 1000 a "
        "minute); please try again in a minute."
    )


def test_no_money_cap_lets_any_call_go_ahead() -> None:
    assert (DAY, MONTH) == ("day", "month")
    assert (
        cost_refusal(
            ModelLimits(),
            spent_today=1e9,
            spent_this_month=1e9,
            worst=1e9,
            currency="EUR",
        )
        is None
    )


def _refused(period: str, worst: str, cap: str, spent: str, currency: str) -> tuple[str, str]:
    return (
        period,
        f"budget: the next model call (up to {worst} {currency}) would pass this group's cap "
        f"of {cap} {currency} a {period} ({spent} {currency} spent so far)",
    )


# (the caps, spent today, spent this month, the call's worst cost, the currency, the answer)
COST_CASES = {
    "the day's cap reached exactly goes ahead": (
        ModelLimits(cost_per_day=2.5),
        2.0,
        100.0,
        0.5,
        "USD",
        None,
    ),
    "one past the day's cap is refused": (
        ModelLimits(cost_per_day=2.5),
        2.0,
        100.0,
        0.5001,
        "USD",
        _refused(DAY, "0.5001", "2.5", "2.0000", "USD"),
    ),
    "the month's cap counts the month, not the day": (
        ModelLimits(cost_per_month=10.0),
        9.99,
        9.0,
        1.0,
        "EUR",
        None,
    ),
    "one past the month's cap is refused": (
        ModelLimits(cost_per_month=10.0),
        0.0,
        9.5,
        0.75,
        "EUR",
        _refused(MONTH, "0.7500", "10", "9.5000", "EUR"),
    ),
    "the day's cap is told before the month's": (
        ModelLimits(cost_per_day=1.0, cost_per_month=3.0),
        0.9,
        2.9,
        0.2,
        "CHF",
        _refused(DAY, "0.2000", "1", "0.9000", "CHF"),
    ),
    "the month's cap after a day within its own": (
        ModelLimits(cost_per_day=1.0, cost_per_month=3.0),
        0.1,
        2.9,
        0.2,
        "CHF",
        _refused(MONTH, "0.2000", "3", "2.9000", "CHF"),
    ),
    "within both caps goes ahead": (
        ModelLimits(cost_per_day=1.0, cost_per_month=3.0),
        0.1,
        2.5,
        0.2,
        "CHF",
        None,
    ),
    "a zero cap lets a free call go ahead": (
        ModelLimits(cost_per_day=0.0),
        0.0,
        0.0,
        0.0,
        "USD",
        None,
    ),
    "a zero cap refuses any call that may cost something": (
        ModelLimits(cost_per_day=0.0),
        0.0,
        0.0,
        0.00001,
        "USD",
        _refused(DAY, "0.0000", "0", "0.0000", "USD"),
    ),
}


@pytest.mark.parametrize(
    ("limits", "today", "month", "worst", "currency", "expected"),
    list(COST_CASES.values()),
    ids=list(COST_CASES),
)
def test_the_money_caps_decide_word_for_word(
    limits: ModelLimits,
    today: float,
    month: float,
    worst: float,
    currency: str,
    expected: tuple[str, str] | None,
) -> None:
    assert (
        cost_refusal(
            limits, spent_today=today, spent_this_month=month, worst=worst, currency=currency
        )
        == expected
    )
