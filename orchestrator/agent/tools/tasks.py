"""The task tools: schedule, list and cancel turns for later. The host keeps the tasks
and aims each at the chat of the turn that made it."""

from __future__ import annotations

from typing import Any

from orchestrator.agent.hostlink import HostRequestFailed
from orchestrator.agent.tools.base import ToolError, ToolSpec, schema
from orchestrator.agent.tools.box import FunctionTool, StaticSource, Toolbox
from orchestrator.protocol import TASK_CANCEL, TASK_LIST, TASK_SCHEDULE

SCHEDULE_TASK = ToolSpec(
    "schedule_task",
    "Schedule a turn for later in this chat: at that time the text comes back to you as "
    "a message beginning '[scheduled task N]', and you do what it says. Give exactly one "
    "of at (a delay such as 20m, 2h, 1d, or a time such as 2026-12-24T18:00), every (an "
    "interval such as 1h) or cron (five fields: minute hour day month weekday, such as "
    "'0 8 * * 1-5'). timezone is an IANA name (default: the group's).",
    {
        "type": "object",
        "required": ["text"],
        "additionalProperties": False,
        "properties": {
            "text": {"type": "string"},
            "at": {"type": "string"},
            "every": {"type": "string"},
            "cron": {"type": "string"},
            "timezone": {"type": "string"},
        },
    },
)

LIST_TASKS = ToolSpec("list_tasks", "List the tasks scheduled in this chat.", schema([]))

CANCEL_TASK = ToolSpec(
    "cancel_task",
    "Cancel a scheduled task by its number (see list_tasks). Its author or a creator of "
    "the group may cancel it.",
    {
        "type": "object",
        "required": ["id"],
        "additionalProperties": False,
        "properties": {"id": {"type": "integer"}},
    },
)


def _task_request(box: Toolbox, op: str, **fields: Any) -> dict[str, Any]:
    if box.host is None:
        raise ToolError("scheduled tasks are kept by the orchestrator; no host here")
    try:
        return box.host.request(op, **fields)
    except HostRequestFailed as exc:
        raise ToolError(str(exc)) from None


def schedule_task(
    box: Toolbox,
    text: str,
    at: str | None = None,
    every: str | None = None,
    cron: str | None = None,
    timezone: str | None = None,
) -> str:
    if not isinstance(text, str) or not text.strip():
        raise ToolError("text must be a non-empty string")
    given = [(k, v) for k, v in (("at", at), ("every", every), ("cron", cron)) if v]
    if len(given) != 1 or not isinstance(given[0][1], str):
        raise ToolError("give exactly one of at, every or cron, as text")
    if timezone is not None and not isinstance(timezone, str):
        raise ToolError("timezone must be text, such as Europe/Lisbon")
    kind, spec = given[0]
    answer = _task_request(box, TASK_SCHEDULE, text=text, kind=kind, spec=spec, timezone=timezone)
    return str(answer.get("result") or "scheduled")


def list_tasks(box: Toolbox) -> str:
    tasks = _task_request(box, TASK_LIST).get("tasks")
    if not isinstance(tasks, list) or not tasks:
        return "(no tasks scheduled in this chat)"
    return "\n".join(
        f"{t.get('id')}: {t.get('text')} ({t.get('schedule')}; next {t.get('next')}; "
        f"{t.get('state')})"
        for t in tasks
        if isinstance(t, dict)
    )


def cancel_task(box: Toolbox, id: int) -> str:
    if isinstance(id, bool) or not isinstance(id, int):
        raise ToolError("id must be a task number")
    return str(_task_request(box, TASK_CANCEL, id=id).get("result") or "cancelled")


TASKS = StaticSource(
    "tasks",
    (
        FunctionTool(SCHEDULE_TASK, schedule_task),
        FunctionTool(LIST_TASKS, list_tasks),
        FunctionTool(CANCEL_TASK, cancel_task),
    ),
)
