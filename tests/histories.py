"""Helpers of the memory history's tests: a file written into a group as a hand or a
container would, and a turn's provenance."""

from __future__ import annotations

from orchestrator.memory.history import TURN, History, Provenance


def write(history: History, path: str, text: str) -> None:
    target = history.groups_dir / history.folder / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def turn(sender: str, trust: str = "member", message_id: str = "m") -> Provenance:
    return Provenance(
        TURN, sender=sender, trust=trust, message_id=message_id, channel="cli", chat="c"
    )
