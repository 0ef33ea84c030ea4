"""``standing.get``: the group's standing text for a fresh context.

The operator's ``instructions.prepend.md`` and the learned behaviors, read by the host
from the group folder (never mounted), each stripped and capped at 16,000 characters
with a visible notice. Any turn may ask: the text goes into every context anyway.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orchestrator import protocol
from orchestrator.memory.learned import LearnedStore, read_instructions
from orchestrator.protocol import INSTRUCTIONS_FILE, LEARNED_FILE, cap_standing
from orchestrator.relay.ops.base import FixedCap

if TYPE_CHECKING:
    from orchestrator.relay.turn import TurnRelay


class StandingGet(FixedCap):
    name = protocol.STANDING_GET

    def handle(self, turn: TurnRelay, frame: dict[str, Any]) -> dict[str, Any]:
        groups_dir, folder = turn.group.path.parent, turn.group.folder
        try:
            learned = LearnedStore(groups_dir, folder).read()
        except (OSError, UnicodeDecodeError) as exc:
            learned = f"(learned behaviors could not be read: {exc})"
        return {
            "ok": True,
            "instructions": cap_standing(read_instructions(groups_dir, folder), INSTRUCTIONS_FILE),
            "learned": cap_standing(learned, LEARNED_FILE),
        }
