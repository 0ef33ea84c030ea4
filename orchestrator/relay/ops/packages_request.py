"""``packages.request``: a package request from the chat, held for a creator.

Only when the operator allows it (``packages.from_chat``) and only from a creator's or
a member's turn (the host's record of the message). The names are checked, and the
Python packages resolved to exact versions and hashes now, so that the request shown in
the chat is exactly what an approval applies: ``/approve ID`` by a creator in that chat,
or the operator's ``orchestrator group packages NAME --approve ID``. Every answer is
``ok`` with a ``result`` for the model: a refusal is not a failed turn.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from orchestrator import protocol
from orchestrator.errors import OrchestratorError
from orchestrator.groups.packages import MAX_PACKAGES, check_names, resolve_python
from orchestrator.limits import RELAY_SMALL_REQUEST_BYTES
from orchestrator.relay.approvals import PACKAGES, hold

if TYPE_CHECKING:
    from orchestrator.relay.turn import TurnRelay

log = logging.getLogger("orchestrator.relay")
REASON_MAX_CHARS = 500


def _names(frame: dict[str, Any], key: str) -> list[str]:
    value = frame.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{key} must be a list of names")
    if len(value) > MAX_PACKAGES:
        raise ValueError(f"{key}: {len(value)} names; at most {MAX_PACKAGES}")
    return list(dict.fromkeys(value))


class PackagesRequest:
    name = protocol.PACKAGES_REQUEST

    def cap(self, turn: TurnRelay) -> int:
        return RELAY_SMALL_REQUEST_BYTES

    def handle(self, turn: TurnRelay, frame: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "result": self.decide(turn, frame)}

    def decide(self, turn: TurnRelay, frame: dict[str, Any]) -> str:
        message, group = turn.message, turn.group
        if not group.config.packages.from_chat:
            return "NOT_REQUESTED: this group takes no package requests from the chat"
        if message.trust not in ("creator", "member"):
            return "NOT_REQUESTED: only creators and members may ask for packages"
        reason = frame.get("reason")
        if not isinstance(reason, str) or not reason.strip() or len(reason) > REASON_MAX_CHARS:
            return f"NOT_REQUESTED: give a reason of 1 to {REASON_MAX_CHARS} characters"
        try:
            debian, python = _names(frame, "debian"), _names(frame, "python")
            if not debian and not python:
                return "NOT_REQUESTED: name at least one Debian or Python package"
            check_names(debian, python)
            lock = resolve_python(python)
        except ValueError as exc:
            return f"NOT_REQUESTED: {exc}"
        except OrchestratorError as exc:
            hint = f" ({exc.hint})" if exc.hint else ""
            return f"NOT_REQUESTED: {exc.message}{hint}"
        content = json.dumps(
            {
                "debian": debian,
                "python": [f"{w.name}=={w.version}" for w in lock.wheels],
                "wheels": [{"file": w.filename, "sha256": w.sha256} for w in lock.wheels],
                "asked by": message.sender,
                "reason": reason.strip(),
            },
            indent=2,
            ensure_ascii=False,
        )
        queue = turn.context.queue
        request = hold(queue, kind=PACKAGES, folder=group.folder, message=message, content=content)
        turn.context.notify(message.id)
        log.info(
            "group %s: package request %d held (%s)",
            group.folder,
            request.id,
            ", ".join([*debian, *python]),
        )
        return (
            f"PENDING: request {request.id} is shown in this chat; a creator approves it with "
            f"/approve {request.id}, and the packages are there once the group's image is "
            "rebuilt (the chat is told)"
        )
