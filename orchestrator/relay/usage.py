"""Model usage per message, in the host's database (the queue's SQLite file).

Each model call the relay makes is one row: which message and group, provider and model,
what it was for, tokens in and out, latency, and whether it succeeded. A call refused by
a budget is recorded too (no tokens), so ``orchestrator usage`` shows it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from orchestrator.queue import MessageQueue

SCHEMA = """
CREATE TABLE IF NOT EXISTS usage (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id TEXT NOT NULL,
    group_folder TEXT NOT NULL,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    purpose TEXT NOT NULL,
    started REAL NOT NULL,
    latency_ms REAL NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    error TEXT
);
CREATE INDEX IF NOT EXISTS usage_group_time ON usage (group_folder, started);
CREATE INDEX IF NOT EXISTS usage_message ON usage (message_id);
"""
OK, FAILED, REFUSED = "ok", "failed", "refused"  # outcomes; refused: by a budget


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


class UsageStore:
    def __init__(self, db: MessageQueue) -> None:
        self.db = db
        db.ensure_schema(SCHEMA)

    def record(self, call: Call) -> None:
        self.db.write(
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
        rows = self.db.read(
            "SELECT COUNT(*) FROM usage WHERE group_folder=? AND started>=? AND outcome!=?",
            (group, since, REFUSED),
        )
        return _int(rows[0][0])

    def tokens_since(self, group: str, since: float) -> int:
        rows = self.db.read(
            "SELECT COALESCE(SUM(input_tokens + output_tokens), 0) FROM usage"
            " WHERE group_folder=? AND started>=?",
            (group, since),
        )
        return _int(rows[0][0])

    def tokens_of_message(self, message_id: str) -> int:
        rows = self.db.read(
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
        rows = self.db.read(query + " GROUP BY group_folder, day ORDER BY group_folder, day", args)
        return [
            DayUsage(
                str(r[0]),
                str(r[1]),
                int(r[2]),  # type: ignore[call-overload]
                int(r[3]),  # type: ignore[call-overload]
                int(r[4]),  # type: ignore[call-overload]
                int(r[5]),  # type: ignore[call-overload]
                int(r[6]),  # type: ignore[call-overload]
                round(float(r[7]), 1) if r[7] is not None else 0.0,  # type: ignore[arg-type]
            )
            for r in rows
        ]


def utc_midnight(now: float | None = None) -> float:
    """The start of today (UTC), as a Unix time."""
    now = time.time() if now is None else now
    return now - now % 86400


def _int(value: object) -> int:
    return int(value) if isinstance(value, int | float) else 0
