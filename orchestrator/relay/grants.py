"""Which tools a turn is granted, decided by the host from its own record of the turn.

The runner offers the model only the granted tools and refuses the rest; the host's
relay still checks every request it answers, so a runner that ignores the grant gains
nothing. A tool source the host does not name here (one added to the runner later) is
not granted until it is named.
"""

from __future__ import annotations

# the runner's built-in tool sources
FILES, MESSAGES, MEMORY, TASKS = "files", "messages", "memory", "tasks"
# the task tools a run of a scheduled task keeps: it may look at tasks, not make them
TASK_RUN_TASK_TOOLS = ("list_tasks", "cancel_task")


def granted_tools(*, task_run: bool) -> tuple[str, ...]:
    """The source and tool names a turn may use: every built-in tool for a person's
    turn; a run of a scheduled task cannot schedule another (a chain of tasks)."""
    if task_run:
        return (FILES, MESSAGES, MEMORY, *TASK_RUN_TASK_TOOLS)
    return (FILES, MESSAGES, MEMORY, TASKS)
