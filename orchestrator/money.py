"""Money: what a model call costs, and the days and months a group's costs are counted in.

Prices are per million tokens, in the one currency orchestrator.yaml names (``currency``,
USD unless it says otherwise), for each kind of token a provider reports: the prompt's
uncached part (``input``), the answer (``output``), the part of the prompt read from the
provider's cache (``cache_read``) and the part written to it (``cache_write``). A local
model is priced 0. A model without prices has no cost (None), which is not 0: a money
cap needs prices.

Days and months are the group's (group.yaml ``timezone``): a cap per day resets at the
group's midnight, one per month on the first of the month there. Pure arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

DEFAULT_CURRENCY = "USD"
PER = 1_000_000  # prices are per this many tokens
# how many characters a token is taken to be when a prompt is estimated before its call
CHARS_PER_TOKEN = 4


@dataclass(frozen=True)
class Prices:
    """``providers.NAME.model_info.MODEL.prices``, per million tokens."""

    input: float
    output: float
    cache_read: float | None = None  # None: priced as input
    cache_write: float | None = None  # None: priced as input

    def to_dict(self) -> dict[str, float]:
        return {
            "input": self.input,
            "output": self.output,
            "cache_read": self.input if self.cache_read is None else self.cache_read,
            "cache_write": self.input if self.cache_write is None else self.cache_write,
        }


@dataclass(frozen=True)
class Tokens:
    """The tokens of one call, by kind (``input`` excludes the cached parts)."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0


def cost_of(prices: Prices | None, tokens: Tokens) -> float | None:
    """What ``tokens`` cost at ``prices`` (None without prices)."""
    if prices is None:
        return None
    rates = prices.to_dict()
    return (
        tokens.input * rates["input"]
        + tokens.output * rates["output"]
        + tokens.cache_read * rates["cache_read"]
        + tokens.cache_write * rates["cache_write"]
    ) / PER


def cost_per_minute(price: float | None, seconds: float | None) -> float | None:
    """What ``seconds`` of audio cost at ``price`` a minute (None without a price or a
    length: a transcription not priced)."""
    if price is None or seconds is None:
        return None
    return price * seconds / 60


def estimate_input_tokens(chars: int) -> int:
    """A prompt of ``chars`` characters, in tokens, estimated from above (rounded up)."""
    return -(-chars // CHARS_PER_TOKEN)


def worst_cost(prices: Prices, prompt_chars: int, max_tokens: int) -> float:
    """The most a call may cost before it is made: its whole prompt at the input price
    (none of it taken to be cached) and an answer as long as it may be."""
    tokens = Tokens(input=estimate_input_tokens(prompt_chars), output=max_tokens)
    cost = cost_of(prices, tokens)
    assert cost is not None
    return cost


def day_start(now: float, zone: str) -> float:
    """The start of the day ``now`` falls in, in ``zone``, as a Unix time."""
    local = datetime.fromtimestamp(now, ZoneInfo(zone))
    return _midnight(local.year, local.month, local.day, zone)


def next_day(now: float, zone: str) -> float:
    """The start of the next day in ``zone`` (a day of 23 or 25 hours where clocks change)."""
    local = datetime.fromtimestamp(now, ZoneInfo(zone)).date() + timedelta(days=1)
    return _midnight(local.year, local.month, local.day, zone)


def month_start(now: float, zone: str) -> float:
    """The start of the month ``now`` falls in, in ``zone``."""
    local = datetime.fromtimestamp(now, ZoneInfo(zone))
    return _midnight(local.year, local.month, 1, zone)


def next_month(now: float, zone: str) -> float:
    """The start of the next month in ``zone``."""
    local = datetime.fromtimestamp(now, ZoneInfo(zone))
    year, month = (local.year + 1, 1) if local.month == 12 else (local.year, local.month + 1)
    return _midnight(year, month, 1, zone)


def local_day(at: float, zone: str) -> str:
    """YYYY-MM-DD of ``at`` in ``zone``."""
    return datetime.fromtimestamp(at, ZoneInfo(zone)).strftime("%Y-%m-%d")


def local_time(at: float, zone: str) -> str:
    """``YYYY-MM-DD HH:MM ZONE`` of ``at`` in ``zone``, for people."""
    return datetime.fromtimestamp(at, ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M %Z")


def _midnight(year: int, month: int, day: int, zone: str) -> float:
    # a midnight that does not exist (a clock moved forward over it) is the first moment
    # after it: fold=0 of a nonexistent time is normalised forward by timestamp()
    return datetime(year, month, day, tzinfo=ZoneInfo(zone)).timestamp()


def format_money(amount: float | None, currency: str) -> str:
    """``1.2345 USD`` for people; ``-`` when there is no cost (no prices)."""
    if amount is None:
        return "-"
    digits = 2 if amount >= 100 else 4
    return f"{amount:.{digits}f} {currency}"
