"""``task.list``: the tasks of the chat this turn answers (its group's, never another's)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orchestrator import protocol
from orchestrator.relay.ops.base import FixedCap
from orchestrator.store.tasks import TaskStore

if TYPE_CHECKING:
    from orchestrator.relay.turn import TurnRelay


class TaskList(FixedCap):
    name = protocol.TASK_LIST

    def handle(self, turn: TurnRelay, frame: dict[str, Any]) -> dict[str, Any]:
        tasks = TaskStore(turn.context.queue).tasks(turn.group.folder, turn.message.chat)
        return {
            "ok": True,
            "tasks": [
                {
                    "id": t.id,
                    "text": t.text,
                    "schedule": t.schedule,
                    "next": t.next_local,
                    "state": t.state,
                    "author": t.author,
                }
                for t in tasks
            ],
        }
