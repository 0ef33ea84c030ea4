"""SessionStart command hooks, run exactly when a fresh context window is created.

The configuration ships inside the image (``orchestrator/agent/hooks.json``, on the
read-only root filesystem)::

    {"SessionStart": [{"matcher": "startup|clear|compact",
                       "command": ["orchestrator", "hook", "session-start"],
                       "timeout": 10}]}

Each hook gets the event as JSON on stdin, and its fields in the environment as well
(``ORCHESTRATOR_HOOK_SOURCE``, ``ORCHESTRATOR_SESSION_ID``, ``ORCHESTRATOR_AGENT_DIR``:
a hook that reads those needs no JSON parser, whose import is most of a short hook's
start); its stdout joins the fresh context. A hook that fails, times out or cannot start
is logged and skipped: the turn goes on.

The shipped memory hook (exactly ``["orchestrator", "hook", "session-start"]``) is the
runner's own code: it runs in the runner's process, with the same output as the command
(``orchestrator.agent.memory_hook``), without the start of an interpreter at each fresh
context. Its reads are bounded (two files, each read through the confined file layer up
to its cap; a FIFO never blocks them), so it needs no timeout of its own.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from orchestrator.limits import (
    DEFAULT_HOOK_TIMEOUT_SECONDS,
    HOOK_OUTPUT_MAX_CHARS,
    HOOK_TIMEOUT_MAX_SECONDS,
)

log = logging.getLogger(__name__)
SHIPPED_HOOKS = Path(__file__).with_name("hooks.json")
# the event's fields a hook also finds in its environment
SOURCE_VARIABLE, AGENT_DIR_VARIABLE = "ORCHESTRATOR_HOOK_SOURCE", "ORCHESTRATOR_AGENT_DIR"


class HookConfigError(Exception):
    pass


@dataclass(frozen=True)
class CommandHook:
    matcher: str
    command: tuple[str, ...]
    timeout: float = DEFAULT_HOOK_TIMEOUT_SECONDS

    def matches(self, source: str) -> bool:
        return re.fullmatch(self.matcher, source) is not None


def load_hooks(path: Path | None = None) -> list[CommandHook]:
    """SessionStart hooks from ``path`` (default: the file shipped in the image)."""
    path = path or SHIPPED_HOOKS
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise HookConfigError(f"{path}: cannot read hooks configuration: {exc}") from None
    entries = data.get("SessionStart", []) if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise HookConfigError(f"{path}: SessionStart must be a list")
    hooks = []
    for index, entry in enumerate(entries):
        where = f"{path}: SessionStart[{index}]"
        if not isinstance(entry, dict):
            raise HookConfigError(f"{where}: must be an object")
        command = entry.get("command")
        if not (isinstance(command, list) and command and all(isinstance(c, str) for c in command)):
            raise HookConfigError(f"{where}.command: must be a non-empty list of strings")
        matcher = entry.get("matcher", "startup|clear|compact")
        try:
            re.compile(matcher)
        except (re.error, TypeError):
            raise HookConfigError(f"{where}.matcher: not a regular expression") from None
        timeout = entry.get("timeout", DEFAULT_HOOK_TIMEOUT_SECONDS)
        # (not 0 < t <= max also refuses NaN and Infinity, which JSON as read here takes)
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not 0 < timeout <= HOOK_TIMEOUT_MAX_SECONDS
        ):
            raise HookConfigError(
                f"{where}.timeout: must be a positive number of seconds,"
                f" at most {HOOK_TIMEOUT_MAX_SECONDS}"
            )
        hooks.append(CommandHook(str(matcher), tuple(command), float(timeout)))
    return hooks


# the shipped memory hook's command: run in-process (see the module's docstring)
BUILTIN_MEMORY_HOOK = ("orchestrator", "hook", "session-start")


def _builtin_memory(source: str, agent_dir: Path) -> str:
    """What ``orchestrator hook session-start`` prints for this event."""
    from orchestrator.memory.reading import session_start_memory

    return session_start_memory(source, str(agent_dir))


def _resolve_command(command: tuple[str, ...]) -> list[str]:
    """Our own console script is found beside this Python when it is not on PATH."""
    import shutil

    if command[0] == "orchestrator" and shutil.which("orchestrator") is None:
        beside = Path(sys.executable).with_name("orchestrator")
        if beside.exists():
            return [str(beside), *command[1:]]
    return list(command)


def run_session_start(
    hooks: list[CommandHook], *, source: str, session_id: str, agent_dir: Path
) -> list[str]:
    """Run the hooks matching ``source``; return the stdout of each that succeeded."""
    outputs: list[str] = []
    for hook in hooks:
        if not hook.matches(source):
            continue
        if hook.command == BUILTIN_MEMORY_HOOK:
            try:
                printed = _builtin_memory(source, agent_dir)
            except Exception as exc:  # as a failing hook process: logged, skipped
                log.warning("SessionStart hook %s failed (%s); skipped", hook.command[0], exc)
                continue
        else:
            ran = _run_command(hook, source=source, session_id=session_id, agent_dir=agent_dir)
            if ran is None:
                continue
            printed = ran
        if printed.strip():
            outputs.append(printed[:HOOK_OUTPUT_MAX_CHARS].strip())
    return outputs


def _run_command(hook: CommandHook, *, source: str, session_id: str, agent_dir: Path) -> str | None:
    """The stdout of one hook's process, or None (logged) when it failed."""
    import os
    import subprocess  # only a configured hook process needs it; keeps the runner light

    event = json.dumps({"source": source, "session_id": session_id, "agent_dir": str(agent_dir)})
    env = {
        **os.environ,
        SOURCE_VARIABLE: source,
        "ORCHESTRATOR_SESSION_ID": session_id,
        AGENT_DIR_VARIABLE: str(agent_dir),
    }
    try:
        result = subprocess.run(
            _resolve_command(hook.command),
            input=event,
            env=env,
            capture_output=True,
            text=True,
            timeout=hook.timeout,
            errors="replace",
        )
    except subprocess.TimeoutExpired:
        log.warning(
            "SessionStart hook %s timed out after %.0fs; skipped", hook.command[0], hook.timeout
        )
        return None
    except OSError as exc:
        log.warning("SessionStart hook %s could not start (%s); skipped", hook.command[0], exc)
        return None
    if result.returncode != 0:
        log.warning(
            "SessionStart hook %s exited %d; skipped: %s",
            hook.command[0],
            result.returncode,
            result.stderr.strip()[:200],
        )
        return None
    return result.stdout
