"""Sessions and their transcripts.

A session's transcript is ``sessions/<key>/transcript.jsonl``: one JSON event per line,
appended and fsynced. It is the session's only state: after a container restart the
current context is rebuilt from it (the last ``context`` event and what follows), so a
resumed session sees exactly the system prompt it was created with.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
TRANSCRIPT = "transcript.jsonl"
SESSION_MODES = ("per-chat", "per-thread", "shared")


def session_key(mode: str, chat: str, thread: str | None) -> str:
    """A file-safe key: one session per chat, per chat thread, or one for the group."""
    if mode == "shared":
        return "shared"
    raw = f"chat-{chat}" if mode == "per-chat" or not thread else f"chat-{chat}-thread-{thread}"
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", raw)[:80].strip("._") or "chat"
    if safe != raw:  # keep distinct ids distinct after cleaning
        import hashlib

        safe += "-" + hashlib.sha256(raw.encode()).hexdigest()[:10]
    return safe


@dataclass
class Context:
    """The live context window of a session."""

    context_id: int
    source: str
    provider: str
    model: str
    system: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    message_chars: int = 0  # kept up to date as messages are added

    def add(self, message: dict[str, Any]) -> None:
        self.messages.append(message)
        self.message_chars += len(json.dumps(message, ensure_ascii=False))

    def size_chars(self) -> int:
        return len(self.system) + self.message_chars


class Session:
    """One session's transcript and the state replayed from it.

    The state (live context, finished turns) is kept in memory and updated as events
    are appended; the file is read again only when it changed under us (another
    process, or a restart).
    """

    def __init__(self, root: Path, key: str) -> None:
        self.key = key
        self.dir = root / key
        self.path = self.dir / TRANSCRIPT
        self.context: Context | None = None
        self.completed: dict[str, list[str]] = {}
        self._size = -1  # bytes of transcript reflected in the state above
        self._torn = False  # the file ends without a newline (a crash mid-append)

    def events(self) -> list[dict[str, Any]]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return []
        return self._parse(raw)

    def _parse(self, raw: bytes) -> list[dict[str, Any]]:
        events = []
        for number, line in enumerate(raw.split(b"\n"), 1):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except ValueError:
                # A torn last line from a crash mid-append: skip it, keep the rest.
                log.warning("%s:%d: unreadable transcript line skipped", self.path, number)
                continue
            if isinstance(event, dict):
                events.append(event)
        return events

    def _apply(self, event: dict[str, Any]) -> None:
        kind = event.get("t")
        if kind == "done":
            self.completed[str(event.get("turn_id"))] = list(event.get("replies") or [])
        elif kind == "context":
            self.context = Context(
                context_id=int(event.get("context_id", 0)),
                source=str(event.get("source", "")),
                provider=str(event.get("provider", "")),
                model=str(event.get("model", "")),
                system=str(event.get("system", "")),
            )
        elif kind == "msg" and self.context is not None:
            message = {k: v for k, v in event.items() if k not in ("t", "ts", "turn_id")}
            self.context.add(message)

    def load(self) -> None:
        """Bring the state up to date with the file."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            size = 0
        if size == self._size:
            return
        raw = self.path.read_bytes() if size else b""
        self.context, self.completed = None, {}
        for event in self._parse(raw):
            self._apply(event)
        self._size = len(raw)
        self._torn = bool(raw) and not raw.endswith(b"\n")

    def current_context(self) -> Context | None:
        """The live context (None before the first one); ``completed`` is filled too."""
        self.load()
        return self.context

    def append(self, *events: dict[str, Any]) -> None:
        """Append events durably (fsync) and apply them to the state."""
        self.load()
        self.dir.mkdir(parents=True, exist_ok=True)
        stamped = [{"ts": round(time.time(), 3), **e} for e in events]
        data = b"".join(json.dumps(e, ensure_ascii=False).encode() + b"\n" for e in stamped)
        if self._torn:
            data = b"\n" + data  # never glue a new event onto a torn line
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        for event in stamped:
            self._apply(event)
        self._size, self._torn = size, False
