"""The SessionStart memory hook: prints the group's memory for a fresh context window.

Reads the event JSON on stdin. For source ``startup``, ``clear`` or ``compact`` it prints
a ``## Memory`` section with ``memory/index.md`` and ``memory/system/definition.md``, each
stripped and capped independently at 16,000 characters with a visible truncation
notice. For ``resume``, an unknown source, or empty or malformed input it prints nothing.
It reads no other memory file and reads through the confined file layer (no symlink
followed, no FIFO waited on, a bounded read), and imports only the standard library: it
runs at every fresh context and must be fast.
"""

from __future__ import annotations

import json
import os
import sys

from orchestrator.confined import ConfinedDir, UnsafePath
from orchestrator.limits import MEMORY_FILE_BUDGET_CHARS

DEFAULT_AGENT_DIR = "/workspace/agent"
INJECT_SOURCES = frozenset({"startup", "clear", "compact"})
INJECTED_FILES = ("index.md", "system/definition.md")
# Never read more than this of one file: enough for the budget in any UTF-8 text.
_READ_LIMIT_BYTES = MEMORY_FILE_BUDGET_CHARS * 4 + 4096

_PREAMBLE = """## Memory

Your durable memory is a folder of plain Markdown files at {memory_dir}/, an Open
Knowledge Format (OKF) v0.1 bundle. The files on disk are authoritative: they are what
you know, people may edit them directly, and you may read and edit them with your file
tools. Below are the map (index.md) and the memory doctrine (system/definition.md);
links from the index lead to more detailed files, which you read when they become
relevant."""


def _read_inside(agent_dir: str, relative: str) -> str:
    """The file's text, or a one-line placeholder saying why nothing was loaded.

    Through the confined file layer: a symlink anywhere on the way, a FIFO, socket or
    device is refused without blocking, and at most _READ_LIMIT_BYTES are read.
    """
    try:
        with ConfinedDir.open(agent_dir, "memory") as memory:
            data = memory.read_bytes(relative, _READ_LIMIT_BYTES, truncate=True)
    except FileNotFoundError:
        return f"(memory/{relative} is missing; nothing was loaded)"
    except UnsafePath as exc:
        return f"(memory/{relative} was refused: {exc.reason}; nothing was loaded)"
    except OSError as exc:
        return f"(memory/{relative} is unreadable: {exc.strerror}; nothing was loaded)"
    return cap(data.decode("utf-8", errors="replace"), relative)


def cap(text: str, relative: str) -> str:
    """Strip ``text`` and keep at most MEMORY_FILE_BUDGET_CHARS characters of it."""
    text = text.strip()
    if len(text) <= MEMORY_FILE_BUDGET_CHARS:
        return text
    return (
        text[:MEMORY_FILE_BUDGET_CHARS]
        + f"\n[truncated: memory/{relative} is longer than {MEMORY_FILE_BUDGET_CHARS:,} "
        "characters and only its beginning was loaded. Slim this file: keep headlines and "
        "links here and move the detail into linked files.]"
    )


def render_memory(agent_dir: str) -> str:
    """The Markdown block injected into a fresh context."""
    memory_dir = os.path.join(agent_dir, "memory")
    parts = [_PREAMBLE.format(memory_dir=memory_dir)]
    for relative in INJECTED_FILES:
        parts.append(f"### memory/{relative}")
        parts.append(_read_inside(agent_dir, relative))
    return "\n\n".join(parts) + "\n"


def parse_event(raw: str) -> dict[str, object] | None:
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
    event = parse_event(sys.stdin.read(65536))
    if event is None or event.get("source") not in INJECT_SOURCES:
        return 0
    if agent_dir is None:
        from_event = event.get("agent_dir")
        agent_dir = from_event if isinstance(from_event, str) and from_event else DEFAULT_AGENT_DIR
    sys.stdout.write(render_memory(agent_dir))
    return 0
