"""Model usage per message, in the state database.

Each model call the relay makes is one row: which message and group, provider and model,
what it was for, tokens by kind (the prompt's uncached part, the answer, the parts read
from and written to the provider's cache), its cost in the configured currency (none
when the model has no prices), latency, and whether it succeeded. A call refused by a
budget is recorded too (no tokens), so ``orchestrator usage`` shows it. Other priced
calls (a search backend's) record a cost the same way.

Days are the group's (its time zone): rows are summed in SQL into quarter hours (every
zone's offset is a whole number of them) and the quarters are put into local days here.

The store has its own connection to the file with ``synchronous=NORMAL``: a usage row is
committed without waiting for the disk (WAL keeps it consistent; a power cut may lose the
last few rows), so recording a model call costs no fsync on the turn's path. Messages
themselves keep the queue's ``synchronous=FULL``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from orchestrator.money import Prices, Tokens, cost_of, local_day
from orchestrator.store.db import StateDB
from orchestrator.store.rows import opt_real, real, whole

OK, FAILED, REFUSED = "ok", "failed", "refused"  # outcomes; refused: by a budget
WEB = "web"  # the purpose of a web fetch or search (provider "web"): not a model call


@dataclass(frozen=True)
class Call:
    message_id: str
    group: str
    provider: str
    model: str
    purpose: str
    started: float
    latency_ms: float
    input_tokens: int
    output_tokens: int
    outcome: str
    error: str | None = None
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost: float | None = None  # None: not priced
    currency: str | None = None

    @classmethod
    def priced(
        cls,
        message_id: str,
        group: str,
        provider: str,
        model: str,
        purpose: str,
        started: float,
        latency_ms: float,
        tokens: Tokens | None,
        outcome: str,
        error: str | None,
        *,
        prices: Prices | None,
        currency: str,
    ) -> Call:
        """A model call with its ``tokens`` by kind and their cost at ``prices`` (none
        when the model has no prices; the currency only with a cost)."""
        tokens = tokens or Tokens()
        cost = cost_of(prices, tokens)
        return cls(
            message_id,
            group,
            provider,
            model,
            purpose,
            started,
            latency_ms,
            tokens.input,
            tokens.output,
            outcome,
            error,
            tokens.cache_read,
            tokens.cache_write,
            cost,
            currency if cost is not None else None,
        )


@dataclass
class DayUsage:
    """One group's use in one of its days (and of one model or purpose, when asked by)."""

    group: str
    day: str  # YYYY-MM-DD, in the group's time zone
    requests: int = 0
    failed: int = 0
    refused: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    mean_latency_ms: float = 0.0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost: float | None = None  # None: no priced call in it
    currency: str | None = None
    key: str | None = None  # the model (provider/model) or purpose it is of, when by one
    _latency_sum: float = 0.0
    _latency_n: int = 0

    def to_dict(self) -> dict[str, object]:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}


QUARTER = 900  # seconds: every time zone's offset from UTC is a whole number of these
BY = ("model", "purpose")


class UsageStore(StateDB):
    """Model calls in the state database, on a connection of its own that does not wait
    for the disk (``synchronous=NORMAL``). The file is opened by the queue first, which
    brings its schema up to date; this connection never migrates."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, synchronous="NORMAL", migrate=False)

    def record(self, call: Call) -> None:
        self.transaction(
            lambda tx: tx.execute(
                "INSERT INTO usage (message_id, group_folder, provider, model, purpose, started,"
                " latency_ms, input_tokens, output_tokens, outcome, error, cache_read_tokens,"
                " cache_write_tokens, cost, currency) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    call.message_id,
                    call.group,
                    call.provider,
                    call.model,
                    call.purpose,
                    call.started,
                    call.latency_ms,
                    call.input_tokens,
                    call.output_tokens,
                    call.outcome,
                    call.error,
                    call.cache_read_tokens,
                    call.cache_write_tokens,
                    call.cost,
                    call.currency,
                ),
            )
        )

    def requests_since(self, group: str, since: float) -> int:
        """Calls made to a provider (refused ones are not) since ``since``."""
        rows = self.read(
            "SELECT COUNT(*) FROM usage WHERE group_folder=? AND started>=? AND outcome!=?"
            " AND purpose!=?",
            (group, since, REFUSED, WEB),
        )
        return _int(rows[0][0])

    def web_since(self, group: str, since: float) -> int:
        """Web fetches and searches made (refused ones are not) since ``since``."""
        rows = self.read(
            "SELECT COUNT(*) FROM usage WHERE group_folder=? AND started>=? AND outcome!=?"
            " AND purpose=?",
            (group, since, REFUSED, WEB),
        )
        return _int(rows[0][0])

    def tokens_since(self, group: str, since: float) -> int:
        """Every token of the group's calls since ``since``, cached parts included."""
        rows = self.read(
            "SELECT COALESCE(SUM(input_tokens + output_tokens + cache_read_tokens"
            " + cache_write_tokens), 0) FROM usage WHERE group_folder=? AND started>=?",
            (group, since),
        )
        return _int(rows[0][0])

    def cost_since(self, group: str, since: float) -> float:
        """What the group's calls (web searches included) cost since ``since``."""
        rows = self.read(
            "SELECT COALESCE(SUM(cost), 0) FROM usage WHERE group_folder=? AND started>=?",
            (group, since),
        )
        value = rows[0][0]
        return float(value) if isinstance(value, int | float) else 0.0

    def priced_since(self, starts: Mapping[str, float]) -> dict[str, float]:
        """For each group of ``starts`` (folder -> since when) with priced calls since
        then, what they cost."""
        out: dict[str, float] = {}
        for folder, since in starts.items():
            rows = self.read(
                "SELECT SUM(cost) FROM usage WHERE group_folder=? AND started>=?"
                " AND cost IS NOT NULL",
                (folder, since),
            )
            if rows and rows[0][0] is not None:
                out[folder] = real(rows[0][0])
        return out

    def failures_of_message(self, message_id: str) -> int:
        """Model calls for ``message_id`` that failed, over all its deliveries."""
        rows = self.read(
            "SELECT COUNT(*) FROM usage WHERE message_id=? AND outcome=?", (message_id, FAILED)
        )
        return _int(rows[0][0])

    def tokens_of_message(self, message_id: str) -> int:
        rows = self.read(
            "SELECT COALESCE(SUM(input_tokens + output_tokens + cache_read_tokens"
            " + cache_write_tokens), 0) FROM usage WHERE message_id=?",
            (message_id,),
        )
        return _int(rows[0][0])

    def by_day(
        self,
        group: str | None = None,
        since: float = 0.0,
        zones: Mapping[str, str] | None = None,
        by: str | None = None,
    ) -> list[DayUsage]:
        """Use per group and day of the group's zone (``zones``: folder -> IANA zone;
        UTC for a group not in it), and per model or purpose when ``by`` says so."""
        if by is not None and by not in BY:
            raise ValueError(f"by must be one of {', '.join(BY)}")
        keyed = {
            None: "''",
            "model": "provider || '/' || model",
            "purpose": "purpose",
        }[by]
        query = (
            f"SELECT group_folder, CAST(started / {QUARTER} AS INTEGER) AS quarter, {keyed},"
            " SUM(outcome != 'refused'), SUM(outcome = 'failed'), SUM(outcome = 'refused'),"
            " SUM(input_tokens), SUM(output_tokens), SUM(cache_read_tokens),"
            " SUM(cache_write_tokens), SUM(cost), MAX(currency),"
            " SUM(CASE WHEN outcome = 'ok' THEN latency_ms END),"
            " SUM(outcome = 'ok' AND latency_ms IS NOT NULL)"
            " FROM usage WHERE started >= ?"
        )
        args: tuple[object, ...] = (since,)
        if group is not None:
            query += " AND group_folder = ?"
            args = (since, group)
        rows = self.read(query + " GROUP BY group_folder, quarter, 3", args)
        zones = zones or {}
        days: dict[tuple[str, str, str], DayUsage] = {}
        for r in rows:
            folder, key = str(r[0]), str(r[2])
            day = local_day(whole(r[1]) * QUARTER, zones.get(folder, "UTC"))
            found = days.get((folder, day, key))
            if found is None:
                found = days[(folder, day, key)] = DayUsage(folder, day, key=key or None)
            found.requests += whole(r[3])
            found.failed += whole(r[4])
            found.refused += whole(r[5])
            found.input_tokens += whole(r[6])
            found.output_tokens += whole(r[7])
            found.cache_read_tokens += whole(r[8])
            found.cache_write_tokens += whole(r[9])
            if r[10] is not None:
                found.cost = (found.cost or 0.0) + (opt_real(r[10]) or 0.0)
            found.currency = found.currency or (str(r[11]) if r[11] is not None else None)
            found._latency_sum += opt_real(r[12]) or 0.0
            found._latency_n += whole(r[13])
        out = sorted(days.values(), key=lambda d: (d.group, d.day, d.key or ""))
        for d in out:
            d.mean_latency_ms = round(d._latency_sum / d._latency_n, 1) if d._latency_n else 0.0
            if d.cost is not None:
                d.cost = round(d.cost, 6)
        return out


def utc_midnight(now: float | None = None) -> float:
    """The start of today (UTC), as a Unix time."""
    now = time.time() if now is None else now
    return now - now % 86400


def _int(value: object) -> int:
    return int(value) if isinstance(value, int | float) else 0
