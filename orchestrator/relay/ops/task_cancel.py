"""``task.cancel``: end a task of this turn's group. Its author may, and so may a
creator of the group; a task of another group is answered as if it did not exist."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from orchestrator import protocol
from orchestrator.protocol import CREATOR
from orchestrator.relay.errors import RelayViolation
from orchestrator.relay.ops.base import FixedCap
from orchestrator.store.tasks import DONE, TaskStore

if TYPE_CHECKING:
    from orchestrator.relay.turn import TurnRelay

log = logging.getLogger("orchestrator.relay")


class TaskCancel(FixedCap):
    name = protocol.TASK_CANCEL

    def handle(self, turn: TurnRelay, frame: dict[str, Any]) -> dict[str, Any]:
        number = frame.get("id")
        if isinstance(number, bool) or not isinstance(number, int) or not 0 < number < 2**63:
            raise RelayViolation("task.cancel.id must be a whole number from 1 (a task's id)")
        message, group = turn.message, turn.group
        store = TaskStore(turn.context.queue)
        task = store.get(number)
        if task is None or task.group != group.folder or task.state == DONE:
            return {"ok": False, "error": f"no task {number} in this group"}
        is_creator = message.trust == CREATOR and message.sender in group.config.creators
        if task.author != message.sender and not is_creator:
            return {
                "ok": False,
                "error": f"task {number} is {task.author!r}'s; only they or a creator may "
                "cancel it",
            }
        store.cancel(number, f"cancelled by {message.sender!r}")
        log.info("group %s: task %d cancelled by %r", group.folder, number, message.sender)
        return {"ok": True, "result": f"cancelled task {number} ({task.text})"}
