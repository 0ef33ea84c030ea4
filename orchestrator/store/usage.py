"""Model usage per message, in the state database.

Each model call the relay makes is one row: which message and group, provider and model,
what it was for, tokens in and out, latency, and whether it succeeded. A call refused by
a budget is recorded too (no tokens), so ``orchestrator usage`` shows it.

The store has its own connection to the file with ``synchronous=NORMAL``: a usage row is
committed without waiting for the disk (WAL keeps it consistent; a power cut may lose the
last few rows), so recording a model call costs no fsync on the turn's path. Messages
themselves keep the queue's ``synchronous=FULL``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from orchestrator.store.db import StateDB
from orchestrator.store.rows import opt_real, whole

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


@dataclass(frozen=True)
class DayUsage:
    group: str
    day: str  # YYYY-MM-DD, UTC
    requests: int
    failed: int
    refused: int
    input_tokens: int
    output_tokens: int
    mean_latency_ms: float

    def to_dict(self) -> dict[str, object]:
        return self.__dict__.copy()


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
                " latency_ms, input_tokens, output_tokens, outcome, error)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?)",
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
        rows = self.read(
            "SELECT COALESCE(SUM(input_tokens + output_tokens), 0) FROM usage"
            " WHERE group_folder=? AND started>=?",
            (group, since),
        )
        return _int(rows[0][0])

    def failures_of_message(self, message_id: str) -> int:
        """Model calls for ``message_id`` that failed, over all its deliveries."""
        rows = self.read(
            "SELECT COUNT(*) FROM usage WHERE message_id=? AND outcome=?", (message_id, FAILED)
        )
        return _int(rows[0][0])

    def tokens_of_message(self, message_id: str) -> int:
        rows = self.read(
            "SELECT COALESCE(SUM(input_tokens + output_tokens), 0) FROM usage WHERE message_id=?",
            (message_id,),
        )
        return _int(rows[0][0])

    def by_day(self, group: str | None = None, since: float = 0.0) -> list[DayUsage]:
        query = (
            "SELECT group_folder, date(started, 'unixepoch') AS day,"
            " SUM(outcome != 'refused'), SUM(outcome = 'failed'), SUM(outcome = 'refused'),"
            " SUM(input_tokens), SUM(output_tokens),"
            " AVG(CASE WHEN outcome = 'ok' THEN latency_ms END)"
            " FROM usage WHERE started >= ?"
        )
        args: tuple[object, ...] = (since,)
        if group is not None:
            query += " AND group_folder = ?"
            args = (since, group)
        rows = self.read(query + " GROUP BY group_folder, day ORDER BY group_folder, day", args)
        return [
            DayUsage(
                str(r[0]),
                str(r[1]),
                whole(r[2]),
                whole(r[3]),
                whole(r[4]),
                whole(r[5]),
                whole(r[6]),
                round(opt_real(r[7]) or 0.0, 1),
            )
            for r in rows
        ]


def utc_midnight(now: float | None = None) -> float:
    """The start of today (UTC), as a Unix time."""
    now = time.time() if now is None else now
    return now - now % 86400


def _int(value: object) -> int:
    return int(value) if isinstance(value, int | float) else 0
