"""The file tools: read, write, edit, append, list and search under
``/workspace/agent``. A write reports ``PERSISTED`` only after the data is on disk.
During a memory flush the only write allowed is ``append_daily``, which is pinned to
``memory/daily/<UTC date>.md``, append-only, and drops replayed text."""

from __future__ import annotations

import os
import re
from pathlib import Path

from orchestrator.agent.tools.base import FLUSH, TURN, ToolError, ToolSpec, schema
from orchestrator.agent.tools.box import PRIVATE_ROOT, FunctionTool, StaticSource, Toolbox
from orchestrator.fsatomic import write_atomic
from orchestrator.limits import (
    FLUSH_MAX_CHARS,
    TOOL_GREP_MAX_MATCHES,
    TOOL_READ_MAX_CHARS,
    TOOL_WRITE_MAX_CHARS,
)
from orchestrator.memory.okf import DAILY_DIR
from orchestrator.validate import shown_name

READ = ToolSpec(
    "read_file", "Read a text file under /workspace/agent.", schema(["path"], path="string")
)

WRITE = ToolSpec(
    "write_file",
    "Create or replace a file under memory/ or files/.",
    schema(["path", "content"], path="string", content="string"),
)

EDIT = ToolSpec(
    "edit_file",
    "Replace one exact occurrence of old_text with new_text.",
    schema(["path", "old_text", "new_text"], path="string", old_text="string", new_text="string"),
)

LIST = ToolSpec("list_dir", "List a folder under /workspace/agent.", schema([], path="string"))

GREP = ToolSpec(
    "grep",
    "Search files under a folder for a regular expression (case-insensitive).",
    schema(["pattern"], pattern="string", path="string"),
)

APPEND = ToolSpec(
    "append_file",
    "Append text to a file under memory/ or files/ (created when missing). With "
    "create_with, a missing file starts with that text first; with skip_if_present, "
    "nothing is appended when the file already contains the text. Safe when other "
    "conversations write the same file at the same time.",
    {
        "type": "object",
        "required": ["path", "content"],
        "additionalProperties": False,
        "properties": {
            "path": {"type": "string"},
            "content": {"type": "string"},
            "create_with": {"type": "string"},
            "skip_if_present": {"type": "boolean"},
        },
    },
)

APPEND_DAILY = ToolSpec(
    "append_daily",
    "Append new facts to today's daily note memory/daily/YYYY-MM-DD.md, one per line. "
    "Lines already in today's or yesterday's note, questions and headings are skipped; "
    "each line kept is marked with who said it, the chat and the time.",
    schema(["content"], content="string"),
)


def read_file(box: Toolbox, path: str) -> str:
    target = box.resolve(path)
    try:
        text = target.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise ToolError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ToolError(f"{path}: is a folder; use list_dir") from None
    if len(text) > TOOL_READ_MAX_CHARS:
        return text[:TOOL_READ_MAX_CHARS] + f"\n[cut at {TOOL_READ_MAX_CHARS} characters]"
    return text


def write_file(box: Toolbox, path: str, content: str) -> str:
    if not isinstance(content, str) or len(content) > TOOL_WRITE_MAX_CHARS:
        raise ToolError(f"content must be text of at most {TOOL_WRITE_MAX_CHARS} characters")
    target = box.resolve(path, write=True)
    with box.locks.of(target):
        return _replace(box, path, target, content)


def _replace(box: Toolbox, path: str, target: Path, content: str) -> str:
    if target.is_dir():
        raise ToolError(f"{path}: is a folder")
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(target, content)
    box.memory_changed = True
    return f"PERSISTED: {box.shown(target)} ({len(content.encode())} bytes)"


def edit_file(box: Toolbox, path: str, old_text: str, new_text: str) -> str:
    target = box.resolve(path, write=True)
    with box.locks.of(target):
        text = _current(path, target)
        if text is None:
            raise ToolError(f"{path}: no such file")
        count = text.count(old_text) if old_text else 0
        if count != 1:
            raise ToolError(f"{path}: old_text occurs {count} times; it must occur exactly once")
        new = text.replace(old_text, new_text, 1)
        if len(new) > TOOL_WRITE_MAX_CHARS:
            raise ToolError(f"{path}: the result would pass {TOOL_WRITE_MAX_CHARS} characters")
        return _replace(box, path, target, new)


def append_file(
    box: Toolbox, path: str, content: str, create_with: str = "", skip_if_present: bool = False
) -> str:
    if not isinstance(content, str) or not isinstance(create_with, str):
        raise ToolError("content and create_with must be text")
    target = box.resolve(path, write=True)
    with box.locks.of(target):
        text = _current(path, target)
        if text is not None and skip_if_present and content.strip() in text:
            return f"NOTHING APPENDED: {box.shown(target)} already contains that text"
        base = create_with if text is None else text
        if base and not base.endswith("\n"):
            base += "\n"
        new = base + content
        if len(new) > TOOL_WRITE_MAX_CHARS:
            raise ToolError(f"{path}: the result would pass {TOOL_WRITE_MAX_CHARS} characters")
        return _replace(box, path, target, new)


def _current(path: str, target: Path) -> str | None:
    """The file's text, or None when it does not exist."""
    try:
        return target.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (UnicodeDecodeError, IsADirectoryError):
        raise ToolError(f"{path}: not a UTF-8 text file") from None


def list_dir(box: Toolbox, path: str = ".") -> str:
    target = box.resolve(path)
    if not target.is_dir():
        raise ToolError(f"{path}: not a folder")
    entries = sorted(os.scandir(target), key=lambda e: e.name)
    return "\n".join(shown_name(e.name) + ("/" if e.is_dir() else "") for e in entries) or "(empty)"


def grep(box: Toolbox, pattern: str, path: str = "memory") -> str:
    try:
        regex = re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
        raise ToolError(f"bad pattern {pattern!r}: {exc}") from None
    base = box.resolve(path)
    root = Path(os.path.realpath(box.agent_dir))
    matches: list[str] = []
    for folder, dirs, files in os.walk(base):
        dirs[:] = sorted(
            d
            for d in dirs
            if not d.startswith(".") and not (Path(folder) == root and d == PRIVATE_ROOT)
        )  # the conversations are not searched (Toolbox.resolve)
        for name in sorted(files):
            file = Path(folder) / name
            if file.is_symlink():
                continue
            try:
                lines = file.read_text(encoding="utf-8", errors="replace").splitlines()
            except OSError:
                continue
            for number, line in enumerate(lines, 1):
                if regex.search(line):
                    shown = shown_name(file.relative_to(root).as_posix())
                    matches.append(f"{shown}:{number}: {line}")
                    if len(matches) >= TOOL_GREP_MAX_MATCHES:
                        return "\n".join(matches) + "\n[more matches not shown]"
    return "\n".join(matches) or "(no matches)"


def daily_note(box: Toolbox, days_back: int = 0) -> Path:
    """Today's daily note (the group's day: ``box.now`` is in its time zone), or the
    note of ``days_back`` days before."""
    from datetime import timedelta

    day = box.now - timedelta(days=days_back)
    return Path(box.agent_dir) / "memory" / DAILY_DIR / f"{day:%Y-%m-%d}.md"


def append_daily(box: Toolbox, content: str) -> str:
    if not isinstance(content, str):
        raise ToolError("content must be text")
    note = daily_note(box)
    target = box.resolve(str(note), write=True)
    if target != Path(os.path.realpath(note)) or note.is_symlink():
        raise ToolError("the daily note is a symlink; refusing to write through it")
    with box.locks.of(target):
        return _append_daily_locked(box, target, content)


def _append_daily_locked(box: Toolbox, target: Path, content: str) -> str:
    """Append the new facts of ``content`` (see orchestrator.agent.notes), each line
    with where it came from, up to the flush's cap in whole lines."""
    from orchestrator.agent.notes import attributed, sort_block

    try:
        current = target.read_text(encoding="utf-8", errors="replace").replace("\r\n", "\n")
    except FileNotFoundError:
        current = ""
    yesterday = daily_note(box, days_back=1)
    try:
        before = (
            yesterday.read_text(encoding="utf-8", errors="replace")
            if not (yesterday.is_symlink())
            else ""
        )
    except (FileNotFoundError, IsADirectoryError):
        before = ""
    room = FLUSH_MAX_CHARS - box.flushed_chars
    block = sort_block(content, [*before.split("\n"), *current.split("\n")], room)
    if not block.kept:
        if block.left:
            return (
                f"NOTHING APPENDED: this flush has used its {FLUSH_MAX_CHARS} characters; "
                f"{len(block.left)} lines are left for the next flush"
            )
        return (
            "NOTHING APPENDED: every line is already in today's or yesterday's note, or is "
            "not a fact (a question, a heading, a flush or compaction marker)"
        )
    lines = [attributed(line, box.source) for line in block.kept]
    new = "\n".join(lines)
    day = f"{box.now:%Y-%m-%d}"
    header = "" if current else f'---\ntype: daily-note\ndate: "{day}"\n---\n\n# {day}\n\n'
    separator = "" if not current or current.endswith("\n") else "\n"
    target.parent.mkdir(parents=True, exist_ok=True)
    data = (header + separator + new + "\n").encode("utf-8")
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    box.flushed_chars += sum(len(line) + 1 for line in block.kept)
    box.memory_changed = True
    skipped = []
    if block.duplicates:
        skipped.append(f"{block.duplicates} already noted")
    if block.not_facts:
        skipped.append(f"{block.not_facts} not facts")
    if block.left:
        skipped.append(f"{len(block.left)} over this flush's cap, left for the next one")
    return f"PERSISTED: appended {len(lines)} lines to {box.shown(target)}" + (
        f" ({'; '.join(skipped)})" if skipped else ""
    )


# scheduled tasks, kept by the host


BOTH = frozenset({TURN, FLUSH})
FILES = StaticSource(
    "files",
    (
        FunctionTool(READ, read_file, BOTH),
        FunctionTool(WRITE, write_file),
        FunctionTool(EDIT, edit_file),
        FunctionTool(APPEND, append_file),
        FunctionTool(LIST, list_dir, BOTH),
        FunctionTool(GREP, grep, BOTH),
        FunctionTool(APPEND_DAILY, append_daily, frozenset({FLUSH})),
    ),
)
