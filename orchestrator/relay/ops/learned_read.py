"""``learned.read``: the group's learned behaviors, for the ``memory_read`` tool. Any
turn may read them (they are in every fresh context anyway)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orchestrator import protocol
from orchestrator.limits import TOOL_READ_MAX_CHARS
from orchestrator.memory.learned import LearnedStore
from orchestrator.relay.ops.base import FixedCap

if TYPE_CHECKING:
    from orchestrator.relay.turn import TurnRelay


class LearnedRead(FixedCap):
    name = protocol.LEARNED_READ

    def handle(self, turn: TurnRelay, frame: dict[str, Any]) -> dict[str, Any]:
        try:
            text = LearnedStore(turn.group.path.parent, turn.group.folder).read()
        except (OSError, UnicodeDecodeError) as exc:
            return {"ok": False, "error": f"learned behaviors could not be read: {exc}"}
        return {
            "ok": True,
            "content": text[:TOOL_READ_MAX_CHARS],
            "chars": len(text),
            "max_chars": turn.group.config.learned_max_chars,
            "writers": list(turn.group.config.creators),
            "may_write": turn.message.trust == "creator"
            and turn.message.sender in turn.group.config.creators,
        }
