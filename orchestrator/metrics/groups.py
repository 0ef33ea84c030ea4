"""The cardinality rule: which groups have series of their own.

At most ``limit`` groups (``metrics.max_groups``) are named in a ``group`` label; every
other group, and groups since removed, are summed under ``group="_other"``. A group takes
a free place when it runs a turn (it is then the most recently active group) or, at a
scrape, in order of its last activity, newest first. It keeps its place for as long as
it exists, so a group's series never moves between its name and ``_other`` while the
daemon runs: a place is freed only when its group is removed (or ``max_groups`` is
lowered, which frees the places of the least recently active). Then ``_other``'s sums
may go down once, which Prometheus takes as a counter reset.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

OTHER = "_other"  # never a group folder: those start with a letter or a digit


class GroupSlots:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.named: set[str] = set()
        self.lock = threading.Lock()

    def label(self, group: str) -> str:
        """The ``group`` label of ``group``'s series, taking a free place for it. Called
        on the turn's path: a set lookup, and a lock only for a group without a place."""
        if group in self.named:
            return group
        with self.lock:
            if group in self.named or len(self.named) < self.limit:
                self.named.add(group)
                return group
        return OTHER

    def refresh(self, existing: Mapping[str, float | None], limit: int) -> set[str]:
        """Bring the places in line with the groups that exist now (folder -> last
        activity, a Unix time or None) and the limit; returns the groups that lost their
        place (their series are to be dropped)."""

        def recent(folder: str) -> tuple[float, str]:
            return (-(existing.get(folder) or 0.0), folder)

        with self.lock:
            self.limit = limit
            dropped = {g for g in self.named if g not in existing}
            kept = sorted(self.named - dropped, key=recent)
            dropped |= set(kept[limit:])
            self.named = set(kept[:limit])
            free = limit - len(self.named)
            if free > 0:
                waiting = sorted((g for g in existing if g not in self.named), key=recent)
                self.named |= set(waiting[:free])
            return dropped

    def of(self, group: str) -> str:
        """The label of ``group`` without taking a place (for what a scrape reads)."""
        return group if group in self.named else OTHER
