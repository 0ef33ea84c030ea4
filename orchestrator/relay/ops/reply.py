"""``reply``: one message for the chat, stored at once under (message id, sequence), so
channels can show it before the turn ends. A sequence stored already is not stored
again; the turn's final answer repeats every reply and duplicates are dropped."""

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
        stored = turn.context.queue.add_reply(turn.message.id, seq, text)
        turn.context.notify(turn.message.id)
        return {"ok": True, "stored": stored}
