"""``memory.search``: the best chunks of the group's memory for a query, from the
host's index (``orchestrator.memory.search``).

The index is brought up to date at the first search of a turn, and again when the
runner says memory was written since its last search (``changed``): a hint that can
only cost its own group a stale result, never widen what is read. The group comes from
the host's record of the turn, never from the frame.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orchestrator import protocol
from orchestrator.limits import SEARCH_MAX_RESULTS
from orchestrator.relay.errors import RelayViolation
from orchestrator.relay.ops.base import FixedCap

if TYPE_CHECKING:
    from orchestrator.relay.turn import TurnRelay


class MemorySearch(FixedCap):
    name = protocol.MEMORY_SEARCH

    def handle(self, turn: TurnRelay, frame: dict[str, Any]) -> dict[str, Any]:
        query, wanted = frame.get("query"), frame.get("max_results", 6)
        if not isinstance(query, str) or len(query) > 2000:
            raise RelayViolation("memory.search.query must be text of at most 2000 characters")
        if isinstance(wanted, bool) or not isinstance(wanted, int) or wanted < 1:
            raise RelayViolation("memory.search.max_results must be a whole number from 1")
        fresh = not turn.searched or frame.get("changed") is True
        turn.searched = True
        hits = turn.context.search(turn.group, query, min(wanted, SEARCH_MAX_RESULTS), fresh)
        return {"ok": True, "results": [h.to_dict() for h in hits]}
