"""The SessionStart memory hook: prints the group's memory for a fresh context window.

Reads the event from the environment the runner sets (``ORCHESTRATOR_HOOK_SOURCE``,
``ORCHESTRATOR_AGENT_DIR``), else as JSON on stdin (json is imported only then: with
``re``, which it imports, it would be most of the hook's start). For source
``startup``, ``clear`` or ``compact`` it prints a ``## Memory`` section with
``memory/index.md`` and ``memory/system/definition.md``, each stripped and capped
independently at 16,000 characters with a visible truncation notice. For ``resume``, an
unknown source, or empty or malformed input it prints nothing. It reads no other memory
file (``orchestrator.memory.reading`` renders what it prints, through the confined file
layer) and imports only the standard library and the foundation: it runs at every fresh
context and must be fast.
"""

from __future__ import annotations

import os
import sys

from orchestrator.memory.reading import INJECT_SOURCES, session_start_memory

DEFAULT_AGENT_DIR = "/workspace/agent"


def parse_event(raw: str) -> dict[str, object] | None:
    import json

    try:
        event = json.loads(raw)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def main(argv: list[str]) -> int:
    """``orchestrator hook session-start [--agent-dir DIR]``; always exits 0 on bad input."""
    agent_dir: str | None = None
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg in ("-h", "--help"):
            sys.stdout.write(
                "Usage: orchestrator hook session-start [--agent-dir DIR]\n\n"
                "  Print the group's memory for a fresh context. Reads the SessionStart\n"
                '  event JSON on stdin: {"source": "startup|clear|compact|resume", ...}.\n'
                f"  DIR defaults to the event's agent_dir, else {DEFAULT_AGENT_DIR}.\n"
            )
            return 0
        if arg == "--agent-dir" and args:
            agent_dir = args.pop(0)
        elif arg.startswith("--agent-dir="):
            agent_dir = arg.split("=", 1)[1]
        else:
            sys.stderr.write(f"error: unexpected argument {arg!r}\n")
            return 2
    source = os.environ.get("ORCHESTRATOR_HOOK_SOURCE")  # hooks.SOURCE_VARIABLE
    if source is not None:
        from_event: object = os.environ.get("ORCHESTRATOR_AGENT_DIR")  # AGENT_DIR_VARIABLE
    else:
        event = parse_event(sys.stdin.read(65536))
        if event is None:
            return 0
        source, from_event = event.get("source"), event.get("agent_dir")  # type: ignore[assignment]
    if source not in INJECT_SOURCES:
        return 0  # nothing to print (and no agent directory to settle)
    if agent_dir is None:
        agent_dir = from_event if isinstance(from_event, str) and from_event else DEFAULT_AGENT_DIR
    sys.stdout.write(session_start_memory(source, agent_dir))
    return 0
