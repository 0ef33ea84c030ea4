"""What most ops share: a cap on their requests that does not depend on the turn."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.limits import RELAY_SMALL_REQUEST_BYTES

if TYPE_CHECKING:
    from orchestrator.relay.turn import TurnRelay


class FixedCap:
    """An op whose requests are at most ``max_bytes``, whatever the turn."""

    max_bytes: int = RELAY_SMALL_REQUEST_BYTES

    def cap(self, turn: TurnRelay) -> int:
        return self.max_bytes
