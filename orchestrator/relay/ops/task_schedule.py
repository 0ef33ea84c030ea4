"""``task.schedule``: make a scheduled task in the chat of the turn that asks.

Group, chat, thread, channel, author and the author's trust all come from the host's
record of the message this turn answers; the request gives only the text and the
schedule. A turn that a task started cannot schedule tasks: a chain of tasks that
schedule the next would outrun every limit. A refusal (who may schedule, the limits, a
bad schedule) is an error answer for the model, not a failed turn.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from orchestrator import protocol
from orchestrator.limits import RELAY_SMALL_REQUEST_BYTES, TASK_TEXT_MAX_CHARS
from orchestrator.relay.errors import RelayViolation
from orchestrator.schedules import KINDS, TaskRefused
from orchestrator.store.tasks import TaskStore

if TYPE_CHECKING:
    from orchestrator.relay.turn import TurnRelay

log = logging.getLogger("orchestrator.relay")


class TaskSchedule:
    name = protocol.TASK_SCHEDULE

    def cap(self, turn: TurnRelay) -> int:
        return 4 * TASK_TEXT_MAX_CHARS + RELAY_SMALL_REQUEST_BYTES

    def handle(self, turn: TurnRelay, frame: dict[str, Any]) -> dict[str, Any]:
        text, kind, spec, tz = (frame.get(k) for k in ("text", "kind", "spec", "timezone"))
        if not isinstance(text, str) or not isinstance(spec, str) or kind not in KINDS:
            raise RelayViolation(
                f"task.schedule needs text and spec as text and kind one of {', '.join(KINDS)}"
            )
        if tz is not None and not isinstance(tz, str):
            raise RelayViolation("task.schedule.timezone must be text or absent")
        message, group = turn.message, turn.group
        store = TaskStore(turn.context.queue)
        started_by = store.run_of(message.id)
        if started_by is not None:
            log.warning(
                "group %s: task %d's turn tried to schedule a task; refused",
                group.folder,
                started_by,
            )
            return {
                "ok": False,
                "error": f"this turn is a run of scheduled task {started_by}, and a task's turn "
                "cannot schedule tasks (a recurring job is an `every` or `cron` task, which a "
                "person schedules)",
            }
        try:
            task = store.add(
                group=group.folder,
                chat=message.chat,
                thread=message.thread,
                channel=message.channel,
                text=text,
                kind=kind,
                spec=spec,
                tz=tz or None,
                author=message.sender,
                author_trust=message.trust,
                settings=group.config.tasks,
                now=turn.context.clock(),
            )
        except TaskRefused as exc:
            log.info("group %s: task refused for %r: %s", group.folder, message.sender, exc.message)
            return {"ok": False, "error": exc.message + (f" ({exc.hint})" if exc.hint else "")}
        return {
            "ok": True,
            "id": task.id,
            "result": f"scheduled task {task.id}: {task.schedule}; next run {task.next_local}",
        }
