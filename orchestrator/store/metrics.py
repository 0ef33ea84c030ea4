"""What the daemon's metrics read from the state database at a scrape: the queue's
messages by group and state, and model calls added to ``usage`` since the last scrape.

Usage rows are only ever added, with ids that grow (AUTOINCREMENT: never reused), so a
scrape reads the rows after the last id it saw and adds them to totals it keeps: the
first scrape of a daemon reads the whole table once, each later one only what is new.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.store.db import StateDB
from orchestrator.store.messages import DEAD, INFLIGHT, QUEUED
from orchestrator.store.rows import opt_real, opt_text, real, text, whole


@dataclass
class GroupQueue:
    """One group's messages waiting, in flight and dead-lettered; ``oldest_queued``: the
    creation time of its oldest queued message (None when none is queued)."""

    queued: int = 0
    inflight: int = 0
    dead: int = 0
    oldest_queued: float | None = None


@dataclass(frozen=True)
class UsageTotal:
    """The sums of the usage rows of one group, provider, model, purpose, outcome and
    currency. ``cost`` is None when none of them was priced."""

    group: str
    provider: str
    model: str
    purpose: str
    outcome: str
    currency: str | None
    calls: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost: float | None


class MetricsStore:
    """Reads for a scrape, on ``db`` (any connection to the state database: the daemon
    gives the usage store's, so a scrape never waits on the queue's lock)."""

    def __init__(self, db: StateDB) -> None:
        self.db = db

    def queue_by_group(self) -> dict[str, GroupQueue]:
        """group -> its queued, in-flight and dead messages (groups with none left out)."""
        out: dict[str, GroupQueue] = {}
        for group, state, count, oldest in self.db.read(
            "SELECT group_folder, state, COUNT(*), MIN(created) FROM messages"
            " WHERE state IN (?,?,?) GROUP BY group_folder, state",
            (QUEUED, INFLIGHT, DEAD),
        ):
            found = out.setdefault(text(group), GroupQueue())
            if state == QUEUED:
                found.queued, found.oldest_queued = whole(count), real(oldest)
            elif state == INFLIGHT:
                found.inflight = whole(count)
            else:
                found.dead = whole(count)
        return out

    def usage_after(self, after_id: int) -> tuple[int, list[UsageTotal]]:
        """The sums of the usage rows with an id above ``after_id``, and the last id they
        include (``after_id`` when there are none). A row committed meanwhile is left
        for the next call."""
        row = self.db.read_one("SELECT MAX(id) FROM usage")
        last = whole(row[0]) if row is not None and row[0] is not None else after_id
        if last <= after_id:
            return after_id, []
        rows = self.db.read(
            "SELECT group_folder, provider, model, purpose, outcome, currency, COUNT(*),"
            " SUM(input_tokens), SUM(output_tokens), SUM(cache_read_tokens),"
            " SUM(cache_write_tokens), SUM(cost)"
            " FROM usage WHERE id > ? AND id <= ?"
            " GROUP BY group_folder, provider, model, purpose, outcome, currency",
            (after_id, last),
        )
        return last, [
            UsageTotal(
                text(r[0]),
                text(r[1]),
                text(r[2]),
                text(r[3]),
                text(r[4]),
                opt_text(r[5]),
                whole(r[6]),
                whole(r[7]),
                whole(r[8]),
                whole(r[9]),
                whole(r[10]),
                opt_real(r[11]),
            )
            for r in rows
        ]
