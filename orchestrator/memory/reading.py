"""Reading memory files for a model, shared by the runner (in the container) and the
host: what a fresh context injects (``index.md`` and ``system/definition.md``, each
capped with a visible notice), and lines of one file for ``memory_get``. Everything is
read through the confined file layer (no symlink followed, no FIFO waited on, bounded
reads). Imports only the standard library and the foundation: the memory hook runs at
every fresh context and must be fast.
"""

from __future__ import annotations

import os

from orchestrator.confined import ConfinedDir, UnsafePath
from orchestrator.limits import (
    MEMORY_FILE_BUDGET_CHARS,
    MEMORY_FILE_READ_MAX_BYTES,
    MEMORY_GET_MAX_LINES,
    TOOL_READ_MAX_CHARS,
)

TYPE_CHECKING = False  # typing is not imported: the memory hook runs at every fresh context
if TYPE_CHECKING:
    from pathlib import Path

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


def read_injected(agent_dir: str, relative: str) -> str:
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
        parts.append(read_injected(agent_dir, relative))
    return "\n\n".join(parts) + "\n"


def session_start_memory(source: object, agent_dir: str) -> str:
    """What the shipped session-start hook gives a context opened by ``source``: the
    memory block for a fresh context (startup, clear, compact), nothing otherwise
    (resume, or an unknown source). The hook command and the runner's in-process call
    both answer with this."""
    return render_memory(agent_dir) if source in INJECT_SOURCES else ""


def memory_relative(path: str) -> str:
    """``path`` as a path inside the memory tree ('memory/a/b.md', '/workspace/agent/
    memory/a/b.md' and 'a/b.md' are the same); ValueError when it leaves the tree."""
    if not isinstance(path, str) or not path.strip() or "\x00" in path:
        raise ValueError("path must be a non-empty string")
    text = path.strip()
    for prefix in ("/workspace/agent/memory/", "memory/"):
        if text.startswith(prefix):
            text = text[len(prefix) :]
            break
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if text.startswith("/") or not parts or ".." in parts:
        raise ValueError(f"{path}: not a file inside the memory tree")
    return "/".join(parts)


def read_lines(
    groups_dir: Path, folder: str, path: str, from_line: int = 1, lines: int = 60
) -> dict[str, object]:
    """Lines ``from_line`` .. ``from_line + lines - 1`` of a memory file, read through the
    confined file layer. A missing file is an empty result, not an error; ValueError for
    a path outside the tree; UnsafePath for a symlink or special file on the way."""
    rel = memory_relative(path)
    first = max(1, int(from_line))
    count = max(1, min(int(lines), MEMORY_GET_MAX_LINES))
    shown = f"memory/{rel}"
    try:
        with ConfinedDir.open(groups_dir, f"{folder}/memory") as memory:
            data = memory.read_bytes(rel, MEMORY_FILE_READ_MAX_BYTES, truncate=True)
    except (FileNotFoundError, NotADirectoryError):
        return {"path": shown, "missing": True, "from_line": first, "to_line": 0,
                "total_lines": 0, "text": ""}  # fmt: skip
    all_lines = data.decode("utf-8", errors="replace").splitlines()
    picked = all_lines[first - 1 : first - 1 + count]
    text = "\n".join(picked)
    cut = len(text) > TOOL_READ_MAX_CHARS
    return {
        "path": shown,
        "missing": False,
        "from_line": first,
        "to_line": first + len(picked) - 1 if picked else first - 1,
        "total_lines": len(all_lines),
        "text": text[:TOOL_READ_MAX_CHARS] + ("\n[cut]" if cut else ""),
    }
