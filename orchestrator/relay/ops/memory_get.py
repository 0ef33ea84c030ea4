"""``memory.get``: lines of one file of the group's memory tree, read by the host
through the confined file layer. The path must stay inside the memory tree; a missing
file is an empty result, not an error."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orchestrator import protocol
from orchestrator.confined import UnsafePath
from orchestrator.memory.reading import read_lines
from orchestrator.relay.errors import RelayViolation
from orchestrator.relay.ops.base import FixedCap

if TYPE_CHECKING:
    from orchestrator.relay.turn import TurnRelay


class MemoryGet(FixedCap):
    name = protocol.MEMORY_GET

    def handle(self, turn: TurnRelay, frame: dict[str, Any]) -> dict[str, Any]:
        path, first, count = frame.get("path"), frame.get("from_line", 1), frame.get("lines", 60)
        for name, value in (("from_line", first), ("lines", count)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise RelayViolation(f"memory.get.{name} must be a whole number from 1")
        try:
            found = read_lines(turn.group.path.parent, turn.group.folder, str(path), first, count)
        except ValueError as exc:
            return {"ok": False, "error": str(exc)}
        except UnsafePath as exc:
            return {"ok": False, "error": f"{path}: refused: {exc.reason}"}
        except OSError as exc:
            return {"ok": False, "error": f"{path}: unreadable: {exc.strerror or exc}"}
        return {"ok": True, **found}
