"""Which tools a turn is granted, decided by the host from its own record of the turn.

The runner offers the model only the granted tools and refuses the rest; the host's
relay still checks every request it answers, so a runner that ignores the grant gains
nothing. A tool source the host does not name here (one added to the runner later) is
not granted until it is named.
"""

from __future__ import annotations

# the runner's built-in tool sources
FILES, MESSAGES, MEMORY, TASKS, SHELL = "files", "messages", "memory", "tasks", "shell"
PACKAGES = "packages"
SKILLS = "skills"  # the skill tool: loads a skill of the group's (read-only)
MCP_REQUESTS = "mcp-requests"  # request_mcp_server: a creator's turn asks for a server
WEB = "web"  # web_fetch and web_search, answered by the host under the group's policy
SESSIONS = "sessions"  # sessions_search: the sender's own conversations of the group
# the task tools a run of a scheduled task keeps: it may look at tasks, not make them
TASK_RUN_TASK_TOOLS = ("list_tasks", "cancel_task")


def granted_tools(
    *,
    task_run: bool,
    trust: str | None = None,
    shell: tuple[str, ...] = (),
    packages_from_chat: bool = False,
    mcp: tuple[str, ...] = (),
    web: bool = False,
) -> tuple[str, ...]:
    """The source and tool names a turn may use: every built-in tool for a person's
    turn; a run of a scheduled task cannot schedule another (a chain of tasks); the
    shell only when the sender's ``trust`` (the host's record) is one of ``shell``
    (group.yaml ``tools.shell``); ``request_packages`` to a person's turn when the
    operator allows package requests from the chat (``packages.from_chat``); the MCP
    servers' sources ``mcp`` (those whose ``trust`` holds the sender's, as the caller
    found them); ``request_mcp_server`` to a creator's turn (not a task's run); the web
    tools when the group's policy is open to the sender's trust (``web``);
    ``sessions_search`` to a creator's or member's turn (not a task's run)."""
    tools: tuple[str, ...] = (
        (FILES, MESSAGES, MEMORY, *TASK_RUN_TASK_TOOLS, SKILLS)
        if task_run
        else (FILES, MESSAGES, MEMORY, TASKS, SKILLS)
    )
    if trust is not None and trust in shell:
        tools = (*tools, SHELL)
    if packages_from_chat and not task_run and trust in ("creator", "member"):
        tools = (*tools, PACKAGES)
    if trust == "creator" and not task_run:
        tools = (*tools, MCP_REQUESTS)
    if web:
        tools = (*tools, WEB)
    if trust in ("creator", "member") and not task_run:
        tools = (*tools, SESSIONS)
    return (*tools, *mcp)
