"""``reply``: one message for the chat, stored at once as the turn's next reply, so
channels can show it before the turn ends. The runner numbers its replies; a number it
sent already in this turn is not stored again."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orchestrator import protocol
from orchestrator.limits import MESSAGE_MAX_CHARS, RELAY_OPS_PER_TURN, RELAY_REPLY_REQUEST_BYTES
from orchestrator.relay.errors import RelayViolation
from orchestrator.relay.ops.base import FixedCap

if TYPE_CHECKING:
    from orchestrator.relay.turn import TurnRelay


class Reply(FixedCap):
    name = protocol.REPLY
    max_bytes = RELAY_REPLY_REQUEST_BYTES

    def handle(self, turn: TurnRelay, frame: dict[str, Any]) -> dict[str, Any]:
        seq, text = frame.get("seq"), frame.get("text")
        if not isinstance(seq, int) or isinstance(seq, bool) or not 0 <= seq < RELAY_OPS_PER_TURN:
            raise RelayViolation(
                f"reply.seq must be a whole number from 0 to {RELAY_OPS_PER_TURN - 1}"
            )
        if not isinstance(text, str) or not text.strip() or len(text) > MESSAGE_MAX_CHARS:
            raise RelayViolation(f"reply.text must be text of 1 to {MESSAGE_MAX_CHARS} characters")
        if seq in turn.replied:
            return {"ok": True, "stored": False}
        turn.replied.add(seq)
        turn.show(text)
        return {"ok": True, "stored": True}
