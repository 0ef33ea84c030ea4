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
