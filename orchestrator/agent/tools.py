"""The model's tools, confined to the agent folder.

Paths are resolved (symlinks followed) and must stay inside ``/workspace/agent``; writes
go only to ``memory/`` and ``files/``. A write reports ``PERSISTED`` only after the data
is on disk. During a memory flush the only write allowed is ``append_daily``, which is
pinned to ``memory/daily/<UTC date>.md``, append-only, and drops replayed text.

``memory_list``, ``memory_read`` and ``memory_write`` reach the stores the host keeps
outside the container (the label ``learned``: the group's learned behaviors); a write
is a request to the host, which alone decides from its record of the turn's sender.
``schedule_task``, ``list_tasks`` and ``cancel_task`` ask the host too: it keeps the
tasks, and aims each at the chat of the turn that made it.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestrator import protocol
from orchestrator.agent.hostlink import HostLink, HostRequestFailed
from orchestrator.fsatomic import write_atomic
from orchestrator.limits import (
    FLUSH_MAX_CHARS,
    MAX_LEARNED_MAX_CHARS,
    MESSAGE_MAX_CHARS,
    TOOL_GREP_MAX_MATCHES,
    TOOL_READ_MAX_CHARS,
    TOOL_WRITE_MAX_CHARS,
)
from orchestrator.memory.okf import DAILY_DIR
from orchestrator.protocol import (
    LEARNED_LABEL,
    LEARNED_READ,
    LEARNED_WRITE,
    NOT_PERSISTED,
    PERSISTED,
    REPLY,
    TASK_CANCEL,
    TASK_LIST,
    TASK_SCHEDULE,
    UNKNOWN,
)
from orchestrator.validate import shown_name, text_problem

WRITABLE_ROOTS = ("memory", "files")
TURN, FLUSH = "turn", "flush"


class ToolError(Exception):
    """A tool call the runner refuses; the message goes back to the model."""


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]


def _schema(required: list[str], **props: str) -> dict[str, Any]:
    return {
        "type": "object",
        "required": required,
        "additionalProperties": False,
        "properties": {k: {"type": t} for k, t in props.items()},
    }


READ = ToolSpec(
    "read_file", "Read a text file under /workspace/agent.", _schema(["path"], path="string")
)
WRITE = ToolSpec(
    "write_file",
    "Create or replace a file under memory/ or files/.",
    _schema(["path", "content"], path="string", content="string"),
)
EDIT = ToolSpec(
    "edit_file",
    "Replace one exact occurrence of old_text with new_text.",
    _schema(["path", "old_text", "new_text"], path="string", old_text="string", new_text="string"),
)
LIST = ToolSpec("list_dir", "List a folder under /workspace/agent.", _schema([], path="string"))
GREP = ToolSpec(
    "grep",
    "Search files under a folder for a regular expression (case-insensitive).",
    _schema(["pattern"], pattern="string", path="string"),
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
SEND = ToolSpec(
    "send_message",
    "Send a message to the chat now (may be used more than once).",
    _schema(["text"], text="string"),
)
APPEND_DAILY = ToolSpec(
    "append_daily",
    "Append new notes to today's daily note memory/daily/YYYY-MM-DD.md. "
    "Send only text that is not in the note yet.",
    _schema(["content"], content="string"),
)

MEMORY_LIST = ToolSpec(
    "memory_list",
    "List the memory stores kept by the orchestrator outside your files (such as "
    "'learned', the group's learned behaviors).",
    _schema([]),
)
MEMORY_READ = ToolSpec(
    "memory_read",
    "Read a memory store by label (see memory_list).",
    _schema(["label"], label="string"),
)
MEMORY_WRITE = ToolSpec(
    "memory_write",
    "Replace the whole content of a memory store (not an append: read it first and send "
    "everything that should remain). For 'learned' only a turn from one of the group's "
    "creators is granted; the answer starts PERSISTED, NOT_PERSISTED or "
    "PERSISTENCE_UNKNOWN.",
    _schema(["label", "content"], label="string", content="string"),
)

MEMORY_SEARCH = ToolSpec(
    "memory_search",
    "Search the group's memory (every Markdown file under memory/, daily notes and "
    "imports included) for the words of a query. Returns, best first, each file's best "
    "passage: path, line range, a snippet with the matching words in **bold**, and a "
    "score. Read more of a file with memory_get.",
    {
        "type": "object",
        "required": ["query"],
        "additionalProperties": False,
        "properties": {"query": {"type": "string"}, "max_results": {"type": "integer"}},
    },
)
MEMORY_GET = ToolSpec(
    "memory_get",
    "Read lines of a file of the memory tree (a path such as memory/facts/x.md, as "
    "memory_search gives it), from from_line (default 1), at most lines lines (default "
    "60). A file that does not exist gives an empty result.",
    {
        "type": "object",
        "required": ["path"],
        "additionalProperties": False,
        "properties": {
            "path": {"type": "string"},
            "from_line": {"type": "integer"},
            "lines": {"type": "integer"},
        },
    },
)

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
LIST_TASKS = ToolSpec("list_tasks", "List the tasks scheduled in this chat.", _schema([]))
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

TOOLS_BY_MODE = {
    TURN: (
        READ,
        WRITE,
        EDIT,
        APPEND,
        LIST,
        GREP,
        SEND,
        MEMORY_LIST,
        MEMORY_READ,
        MEMORY_WRITE,
        MEMORY_SEARCH,
        MEMORY_GET,
        SCHEDULE_TASK,
        LIST_TASKS,
        CANCEL_TASK,
    ),
    FLUSH: (READ, LIST, GREP, APPEND_DAILY),
}


class FileLocks:
    """One lock per file, shared by every turn of a runner: a read-modify-write of a file
    (an index that several conversations update) is never interleaved with another."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    def of(self, path: Path) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(str(path), threading.Lock())


@dataclass
class Toolbox:
    agent_dir: Path
    mode: str = TURN
    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    outbox: list[str] = field(default_factory=list)
    flushed_chars: int = 0
    locks: FileLocks = field(default_factory=FileLocks)
    host: HostLink | None = None  # replies go to the host as they are made
    memory_changed: bool = False  # memory was written since the last memory_search

    @property
    def specs(self) -> tuple[ToolSpec, ...]:
        return TOOLS_BY_MODE[self.mode]

    def call(self, name: str, args: dict[str, Any]) -> str:
        """Run one tool call; ToolError for anything refused."""
        if name not in {s.name for s in self.specs}:
            if self.mode == FLUSH and name in (
                "write_file",
                "edit_file",
                "append_file",
                "send_message",
                "memory_write",
            ):
                raise ToolError(
                    f"{name} is refused during a memory flush: the only write "
                    "allowed is append_daily to today's daily note"
                )
            raise ToolError(f"unknown tool {name!r}")
        handler = getattr(self, f"_{name}")
        try:
            return str(handler(**args))
        except TypeError as exc:
            raise ToolError(f"bad arguments for {name}: {exc}") from None

    # paths

    def resolve(self, path: str, *, write: bool = False) -> Path:
        if not isinstance(path, str) or not path or "\x00" in path:
            raise ToolError("path must be a non-empty string")
        if problem := text_problem(path):
            # a name that is not UTF-8, or holds a line break or a control character,
            # breaks every tool that shows names (and a reader's terminal)
            raise ToolError(f"{shown_name(path)}: refused: the path {problem}")
        root = Path(os.path.realpath(self.agent_dir))
        given = Path(path)
        if given.is_absolute():
            try:
                given = given.relative_to(self.agent_dir)
            except ValueError:
                raise ToolError(f"{path}: outside /workspace/agent") from None
        lexical = Path(os.path.normpath(given))
        if lexical.parts[:1] == ("..",):
            raise ToolError(f"{path}: outside /workspace/agent")
        real = Path(os.path.realpath(root / lexical))
        if real != root and root not in real.parents:
            raise ToolError(f"{path}: resolves outside /workspace/agent (symlink refused)")
        relative = real.relative_to(root)
        if write and (not relative.parts or relative.parts[0] not in WRITABLE_ROOTS):
            raise ToolError(f"{path}: writes are allowed only under memory/ and files/")
        return real

    def shown(self, path: Path) -> str:
        return path.relative_to(os.path.realpath(self.agent_dir)).as_posix()

    # tools

    def _read_file(self, path: str) -> str:
        target = self.resolve(path)
        try:
            text = target.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            raise ToolError(f"{path}: no such file") from None
        except IsADirectoryError:
            raise ToolError(f"{path}: is a folder; use list_dir") from None
        if len(text) > TOOL_READ_MAX_CHARS:
            return text[:TOOL_READ_MAX_CHARS] + f"\n[cut at {TOOL_READ_MAX_CHARS} characters]"
        return text

    def _write_file(self, path: str, content: str) -> str:
        if not isinstance(content, str) or len(content) > TOOL_WRITE_MAX_CHARS:
            raise ToolError(f"content must be text of at most {TOOL_WRITE_MAX_CHARS} characters")
        target = self.resolve(path, write=True)
        with self.locks.of(target):
            return self._replace(path, target, content)

    def _replace(self, path: str, target: Path, content: str) -> str:
        if target.is_dir():
            raise ToolError(f"{path}: is a folder")
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, content)
        self.memory_changed = True
        return f"PERSISTED: {self.shown(target)} ({len(content.encode())} bytes)"

    def _edit_file(self, path: str, old_text: str, new_text: str) -> str:
        target = self.resolve(path, write=True)
        with self.locks.of(target):
            text = self._current(path, target)
            if text is None:
                raise ToolError(f"{path}: no such file")
            count = text.count(old_text) if old_text else 0
            if count != 1:
                raise ToolError(
                    f"{path}: old_text occurs {count} times; it must occur exactly once"
                )
            new = text.replace(old_text, new_text, 1)
            if len(new) > TOOL_WRITE_MAX_CHARS:
                raise ToolError(f"{path}: the result would pass {TOOL_WRITE_MAX_CHARS} characters")
            return self._replace(path, target, new)

    def _append_file(
        self, path: str, content: str, create_with: str = "", skip_if_present: bool = False
    ) -> str:
        if not isinstance(content, str) or not isinstance(create_with, str):
            raise ToolError("content and create_with must be text")
        target = self.resolve(path, write=True)
        with self.locks.of(target):
            text = self._current(path, target)
            if text is not None and skip_if_present and content.strip() in text:
                return f"NOTHING APPENDED: {self.shown(target)} already contains that text"
            base = create_with if text is None else text
            if base and not base.endswith("\n"):
                base += "\n"
            new = base + content
            if len(new) > TOOL_WRITE_MAX_CHARS:
                raise ToolError(f"{path}: the result would pass {TOOL_WRITE_MAX_CHARS} characters")
            return self._replace(path, target, new)

    @staticmethod
    def _current(path: str, target: Path) -> str | None:
        """The file's text, or None when it does not exist."""
        try:
            return target.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (UnicodeDecodeError, IsADirectoryError):
            raise ToolError(f"{path}: not a UTF-8 text file") from None

    def _list_dir(self, path: str = ".") -> str:
        target = self.resolve(path)
        if not target.is_dir():
            raise ToolError(f"{path}: not a folder")
        entries = sorted(os.scandir(target), key=lambda e: e.name)
        return (
            "\n".join(shown_name(e.name) + ("/" if e.is_dir() else "") for e in entries)
            or "(empty)"
        )

    def _grep(self, pattern: str, path: str = "memory") -> str:
        try:
            regex = re.compile(pattern, re.IGNORECASE)
        except re.error as exc:
            raise ToolError(f"bad pattern {pattern!r}: {exc}") from None
        base = self.resolve(path)
        root = Path(os.path.realpath(self.agent_dir))
        matches: list[str] = []
        for folder, dirs, files in os.walk(base):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
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

    def _send_message(self, text: str) -> str:
        if not isinstance(text, str) or not text.strip():
            raise ToolError("text must be a non-empty string")
        text = text[:MESSAGE_MAX_CHARS]
        if self.host is not None:
            try:
                self.host.request(REPLY, seq=len(self.outbox), text=text)
            except HostRequestFailed as exc:
                raise ToolError(f"the message was not sent: {exc}") from None
        self.outbox.append(text)
        return "SENT"

    # stores kept by the host

    @staticmethod
    def _label(label: object) -> str:
        if label != LEARNED_LABEL:
            raise ToolError(f"unknown memory label {label!r}; memory_list shows the labels")
        return LEARNED_LABEL

    def _memory_list(self) -> str:
        return (
            f"{LEARNED_LABEL}: the group's learned behaviors, standing rules its creators "
            "approved (in every fresh context). memory_read reads them; memory_write "
            "replaces them whole, granted only to a turn from a creator."
        )

    def _memory_read(self, label: str) -> str:
        self._label(label)
        if self.host is None:
            raise ToolError("learned behaviors are kept by the orchestrator; no host here")
        try:
            answer = self.host.request(LEARNED_READ)
        except HostRequestFailed as exc:
            raise ToolError(str(exc)) from None
        content = answer.get("content")
        text = content if isinstance(content, str) else ""
        return text or "(empty: no learned behaviors yet)"

    def _memory_write(self, label: str, content: str) -> str:
        self._label(label)
        if not isinstance(content, str):
            raise ToolError("content must be text")
        if len(content) > MAX_LEARNED_MAX_CHARS:
            return f"{NOT_PERSISTED}: the content is over {MAX_LEARNED_MAX_CHARS:,} characters"
        if self.host is None:
            return (
                f"{NOT_PERSISTED}: learned behaviors are written only by the orchestrator "
                "host, and this turn has no link to it"
            )
        try:
            answer = self.host.request(LEARNED_WRITE, content=content)
        except HostRequestFailed as exc:
            if exc.answer:  # the host answered, and did not write
                return f"{NOT_PERSISTED}: {exc}"
            return f"{UNKNOWN}: the request reached the host, but its answer did not: {exc}"
        result = answer.get("result")
        if isinstance(result, str) and result.startswith(
            (f"{PERSISTED}:", f"{NOT_PERSISTED}:", f"{UNKNOWN}:")
        ):
            return result
        return f"{UNKNOWN}: the host's answer was not understood"

    # search, answered by the host's index

    def _memory_search(self, query: str, max_results: int = 6) -> str:
        if not isinstance(query, str) or not query.strip():
            raise ToolError("query must be a non-empty string")
        if isinstance(max_results, bool) or not isinstance(max_results, int) or max_results < 1:
            raise ToolError("max_results must be a whole number from 1")
        if self.host is None:
            raise ToolError("memory search is answered by the orchestrator; use grep here")
        try:
            answer = self.host.request(
                protocol.MEMORY_SEARCH,
                query=query,
                max_results=max_results,
                changed=self.memory_changed,
            )
        except HostRequestFailed as exc:
            raise ToolError(str(exc)) from None
        self.memory_changed = False
        results = answer.get("results")
        if not isinstance(results, list) or not results:
            return "(no results)"
        out = []
        for hit in results:
            if isinstance(hit, dict):
                out.append(
                    f"{hit.get('path')}:{hit.get('start_line')}-{hit.get('end_line')} "
                    f"(score {hit.get('score')})\n{hit.get('snippet')}"
                )
        return "\n\n".join(out)

    def _memory_get(self, path: str, from_line: int = 1, lines: int = 60) -> str:
        for name, value in (("from_line", from_line), ("lines", lines)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ToolError(f"{name} must be a whole number from 1")
        if not isinstance(path, str):
            raise ToolError("path must be a string")
        if self.host is None:
            from orchestrator.memory.reading import read_lines

            agent = Path(self.agent_dir)
            try:
                found = read_lines(agent.parent, agent.name, path, from_line, lines)
            except (ValueError, OSError) as exc:
                raise ToolError(str(exc)) from None
        else:
            try:
                found = self.host.request(
                    protocol.MEMORY_GET, path=path, from_line=from_line, lines=lines
                )
            except HostRequestFailed as exc:
                raise ToolError(str(exc)) from None
        text = found.get("text")
        return text if isinstance(text, str) else ""

    def daily_note(self) -> Path:
        return Path(self.agent_dir) / "memory" / DAILY_DIR / f"{self.now:%Y-%m-%d}.md"

    def _append_daily(self, content: str) -> str:
        if not isinstance(content, str):
            raise ToolError("content must be text")
        note = self.daily_note()
        target = self.resolve(str(note), write=True)
        if target != Path(os.path.realpath(note)) or note.is_symlink():
            raise ToolError("the daily note is a symlink; refusing to write through it")
        with self.locks.of(target):
            return self._append_daily_locked(target, content)

    def _append_daily_locked(self, target: Path, content: str) -> str:
        try:
            current = target.read_text(encoding="utf-8", errors="replace").replace("\r\n", "\n")
        except FileNotFoundError:
            current = ""
        new = content.replace("\r\n", "\n")
        if current and new.startswith(current):
            new = new[len(current) :]  # a replay of the whole note: keep only what follows
        new = new.strip("\n")
        if not new.strip():
            return "NOTHING APPENDED: the content is already in the daily note"
        if new in current:
            return "NOTHING APPENDED: that text is already in the daily note; send only new text"
        if self.flushed_chars + len(new) > FLUSH_MAX_CHARS:
            raise ToolError(
                f"a memory flush may append at most {FLUSH_MAX_CHARS} characters; "
                "send a shorter summary"
            )
        day = f"{self.now:%Y-%m-%d}"
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
        self.flushed_chars += len(new)
        self.memory_changed = True
        return f"PERSISTED: appended {len(new)} characters to {self.shown(target)}"

    # scheduled tasks, kept by the host

    def _task_request(self, op: str, **fields: Any) -> dict[str, Any]:
        if self.host is None:
            raise ToolError("scheduled tasks are kept by the orchestrator; no host here")
        try:
            return self.host.request(op, **fields)
        except HostRequestFailed as exc:
            raise ToolError(str(exc)) from None

    def _schedule_task(
        self,
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
        answer = self._task_request(
            TASK_SCHEDULE, text=text, kind=kind, spec=spec, timezone=timezone
        )
        return str(answer.get("result") or "scheduled")

    def _list_tasks(self) -> str:
        tasks = self._task_request(TASK_LIST).get("tasks")
        if not isinstance(tasks, list) or not tasks:
            return "(no tasks scheduled in this chat)"
        return "\n".join(
            f"{t.get('id')}: {t.get('text')} ({t.get('schedule')}; next {t.get('next')}; "
            f"{t.get('state')})"
            for t in tasks
            if isinstance(t, dict)
        )

    def _cancel_task(self, id: int) -> str:
        if isinstance(id, bool) or not isinstance(id, int):
            raise ToolError("id must be a task number")
        return str(self._task_request(TASK_CANCEL, id=id).get("result") or "cancelled")
