"""Budgets: whether a group may make one more model call now. A pure decision."""

from __future__ import annotations

from orchestrator.groups.config import ModelLimits


def budget_refusal(
    limits: ModelLimits,
    *,
    requests_last_minute: int,
    tokens_this_turn: int,
    tokens_today: int,
) -> str | None:
    """The plain sentence the chat gets when a budget is used up, or None to go ahead.

    The per-minute rate waits for the next minute; the others for the next turn or day.
    """
    if tokens_today >= limits.tokens_per_day:
        return (
            "This group has used its model budget for today "
            f"({limits.tokens_per_day:,} tokens); it can answer again after midnight UTC."
        )
    if tokens_this_turn >= limits.tokens_per_turn:
        return (
            f"This answer needed more than this group's {limits.tokens_per_turn:,} tokens "
            "for one message, so it stopped here; please ask again more narrowly."
        )
    if requests_last_minute >= limits.requests_per_minute:
        return (
            "This group is sending too many requests to its model right now "
            f"(at most {limits.requests_per_minute} a minute); please try again in a minute."
        )
    return None


DAY, MONTH = "day", "month"  # the periods of the money caps


def cost_refusal(
    limits: ModelLimits,
    *,
    spent_today: float,
    spent_this_month: float,
    worst: float,
    currency: str,
) -> tuple[str, str] | None:
    """(period, reason) when a call that may cost ``worst`` would pass a money cap of
    the group (what it spent in the period so far counted), or None to go ahead."""
    for period, cap, spent in (
        (DAY, limits.cost_per_day, spent_today),
        (MONTH, limits.cost_per_month, spent_this_month),
    ):
        if cap is not None and spent + worst > cap:
            return period, (
                f"budget: the next model call (up to {worst:.4f} {currency}) would pass this "
                f"group's cap of {cap:g} {currency} a {period} ({spent:.4f} {currency} spent "
                "so far)"
            )
    return None
