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

    def size_chars(self) -> int:
        return len(self.system) + sum(len(json.dumps(m, ensure_ascii=False)) for m in self.messages)


class Session:
    def __init__(self, root: Path, key: str) -> None:
        self.key = key
        self.dir = root / key
        self.path = self.dir / TRANSCRIPT

    def events(self) -> list[dict[str, Any]]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return []
        events = []
        lines = raw.split(b"\n")
        for number, line in enumerate(lines, 1):
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

    def append(self, *events: dict[str, Any]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        data = b"".join(
            json.dumps({"ts": round(time.time(), 3), **e}, ensure_ascii=False).encode() + b"\n"
            for e in events
        )
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)

    def current_context(self) -> Context | None:
        """Rebuild the live context from the transcript; None before the first one.

        Also fills ``completed``: the replies of each finished turn, by turn id.
        """
        context: Context | None = None
        self.completed: dict[str, list[str]] = {}
        for event in self.events():
            kind = event.get("t")
            if kind == "done":
                self.completed[str(event.get("turn_id"))] = list(event.get("replies") or [])
                continue
            if kind == "context":
                context = Context(
                    context_id=int(event.get("context_id", 0)),
                    source=str(event.get("source", "")),
                    provider=str(event.get("provider", "")),
                    model=str(event.get("model", "")),
                    system=str(event.get("system", "")),
                )
            elif kind == "msg" and context is not None:
                message = {k: v for k, v in event.items() if k not in ("t", "ts", "turn_id")}
                context.messages.append(message)
        return context
