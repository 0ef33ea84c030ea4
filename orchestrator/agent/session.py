"""Sessions and their transcripts.

A session's transcript is ``sessions/<key>/transcript.jsonl``: one JSON event per line,
appended and fsynced, never rewritten but at rotation. A turn delivered again after an
attempt that did not finish starts with a ``supersede`` event: the earlier attempt's
messages leave the live context (they stay in the file), so each message is there
once. It is the session's only state: after a container restart the current context is
rebuilt from it (the last ``context`` event and what follows), so a resumed session sees
exactly the system prompt it was created with.

Its first line is a ``header`` event with the transcript's version (``TRANSCRIPT_VERSION``);
a transcript without one was written before versions and is version 1. A transcript of
a newer version is refused (``FileTooNew``, naming it) and never appended to.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.fsatomic import write_atomic
from orchestrator.limits import (
    TRANSCRIPT_ARCHIVES_KEPT,
    TRANSCRIPT_ROTATE_BYTES,
    TRANSCRIPT_TURNS_KEPT,
)
from orchestrator.versions import RELEASE, TRANSCRIPT_VERSION, file_version, too_new

log = logging.getLogger(__name__)
TRANSCRIPT = "transcript.jsonl"
ARCHIVE_DIR = "archive"
HEADER = "header"  # the first event of a transcript: its version
HEADER_READ_BYTES = 4096  # a reader that starts at the end looks this far for the header


def header_event() -> dict[str, Any]:
    """The event a transcript starts with."""
    return {"t": HEADER, "version": TRANSCRIPT_VERSION, "release": RELEASE}


def check_header(first: dict[str, Any] | None, shown: str) -> int:
    """The version of a transcript whose first event is ``first`` (1 without a header:
    written before versions); FileTooNew naming ``shown`` when a newer release wrote it.
    A header whose version is not a whole number is ignored (the line is the container's
    to write, and a bad one must not stop its session)."""
    if first is None or first.get("t") != HEADER:
        return 1
    found = file_version(first.get("version"))
    if found is None:
        log.warning("%s: its header's version is not a whole number; read as version 1", shown)
        return 1
    if found > TRANSCRIPT_VERSION:
        raise too_new(shown, found, TRANSCRIPT_VERSION)
    return found


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
    turn_ids: list[str | None] = field(default_factory=list)  # of each message
    # the provider's count of the last request's tokens, and the context's size then
    measured: tuple[int, int] | None = None
    # the summary of the conversation before this context (in ``system``, after the
    # memory: never a message), which the next compaction's summary builds on
    summary: str = ""
    # messages before this index were seen by a memory flush already (a flush sees the
    # conversation since the last one only)
    flushed: int = 0
    kept: int = 0  # messages carried over from the context before (its first ones)
    soft_flushed: bool = False  # an early flush ran in this compaction cycle
    base_chars: int = 0  # of ``system``: memory and instructions (no notes, no summary)

    def add(self, message: dict[str, Any], turn_id: str | None = None) -> None:
        self.messages.append(message)
        self.turn_ids.append(turn_id)
        self.message_chars += len(json.dumps(message, ensure_ascii=False))

    def has_turn(self, turn_id: str) -> bool:
        return turn_id in self.turn_ids

    def drop_turn(self, turn_id: str) -> int:
        """Take out the messages an earlier attempt of ``turn_id`` left; how many."""
        kept = [(m, t) for m, t in zip(self.messages, self.turn_ids, strict=True) if t != turn_id]
        dropped = len(self.messages) - len(kept)
        self.messages = [m for m, _ in kept]
        self.turn_ids = [t for _, t in kept]
        self.message_chars = sum(len(json.dumps(m, ensure_ascii=False)) for m in self.messages)
        self.measured = None
        return dropped

    def size_chars(self) -> int:
        return len(self.system) + self.message_chars

    def tokens(self, chars_per_token: int, tools_chars: int = 0) -> int:
        """A request's size in tokens with this context and tools of ``tools_chars``:
        the provider's count of the last request (tools included) plus an estimate of
        what was added since, else an estimate of it all."""
        if self.measured is not None:
            tokens, chars = self.measured
            return tokens + max(0, self.size_chars() - chars) // chars_per_token
        return -(-(self.size_chars() + tools_chars) // chars_per_token)


class Session:
    """One session's transcript and the state replayed from it.

    The state (live context, finished turns) is kept in memory and updated as events
    are appended; the file is read again only when it changed under us (another
    process, or a restart).
    """

    def __init__(self, root: Path, key: str, rotate_bytes: int = TRANSCRIPT_ROTATE_BYTES) -> None:
        self.key = key
        self.rotate_bytes = rotate_bytes
        self.dir = root / key
        self.path = self.dir / TRANSCRIPT
        self.context: Context | None = None
        self.completed: dict[str, list[str]] = {}
        self._size = -1  # bytes of transcript reflected in the state above
        self._torn = False  # the file ends without a newline (a crash mid-append)
        self._rotated_size = 0  # bytes right after the last rotation
        self._batch = 0  # depth of batch(): appends inside are synced when it ends
        self._unsynced = False

    def events(self) -> list[dict[str, Any]]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return []
        return [event for _, event in self._parse(raw)]

    def _parse(self, raw: bytes) -> list[tuple[int, dict[str, Any]]]:
        """(line number, event) for each readable line; FileTooNew when the header says
        a newer release wrote the file."""
        events: list[tuple[int, dict[str, Any]]] = []
        for number, line in enumerate(raw.split(b"\n"), 1):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except (ValueError, RecursionError):
                # A torn last line from a crash mid-append: skip it, keep the rest.
                log.warning("%s:%d: unreadable transcript line skipped", self.path, number)
                continue
            if isinstance(event, dict):
                if not events:
                    check_header(event, str(self.path))
                events.append((number, event))
            else:
                log.warning("%s:%d: transcript line is not an object; skipped", self.path, number)
        return events

    def _apply(self, event: dict[str, Any], where: str = "") -> None:
        """Apply one event; one of the wrong shape is skipped with a warning, so a bad
        line (written by hand, or by anything else in the container) cannot stop the
        session."""
        problem = event_problem(event)
        if problem is not None:
            log.warning("%s%s: transcript event skipped: %s", self.path, where, problem)
            return
        kind = event["t"]
        if kind == "done":
            self.completed[str(event["turn_id"])] = list(event.get("replies") or [])
        elif kind == "context":
            self.context = Context(
                context_id=int(event.get("context_id", 0)),
                source=str(event.get("source", "")),
                provider=str(event.get("provider", "")),
                model=str(event.get("model", "")),
                system=str(event.get("system", "")),
                summary=str(event.get("summary", "")),
                flushed=int(event.get("flushed", 0)),
                # kept apart from flushed by a rotation only (a compaction's context
                # has its kept messages flushed, and flushes come after)
                kept=int(event.get("kept", event.get("flushed", 0))),
                soft_flushed=event.get("soft_flushed") is True,
                base_chars=int(event.get("base_chars", len(str(event.get("system", ""))))),
            )
        elif kind == "flush" and self.context is not None and "upto" in event:
            self.context.flushed = max(self.context.flushed, int(event["upto"]))
            self.context.soft_flushed = self.context.soft_flushed or event.get("soft") is True
        elif kind == "msg" and self.context is not None:
            message = {k: v for k, v in event.items() if k not in ("t", "ts", "turn_id")}
            turn_id = event.get("turn_id")
            self.context.add(message, turn_id if isinstance(turn_id, str) else None)
        elif kind == "supersede" and self.context is not None:
            # a new attempt of a turn that never finished: its earlier messages go
            dropped = self.context.drop_turn(str(event["turn_id"]))
            self.context.flushed = max(0, self.context.flushed - dropped)

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
        for number, event in self._parse(raw):
            self._apply(event, f":{number}")
        self._size = len(raw)
        self._torn = bool(raw) and not raw.endswith(b"\n")

    def current_context(self) -> Context | None:
        """The live context (None before the first one); ``completed`` is filled too."""
        self.load()
        return self.context

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Events appended inside are synced to disk once, when it ends (a turn's
        messages, its context and its ``done``: one fsync a turn, not one an event; the
        runner answers the host only after it)."""
        self._batch += 1
        try:
            yield
        finally:
            self._batch -= 1
            if not self._batch and self._unsynced:
                self._unsynced = False
                fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)

    def append(self, *events: dict[str, Any]) -> None:
        """Append events durably (fsync, or at the end of a ``batch``) and apply them to
        the state."""
        self.load()
        self.dir.mkdir(parents=True, exist_ok=True)
        stamped = [{"ts": round(time.time(), 3), **e} for e in events]
        if self._size <= 0:  # a new transcript starts with its version
            stamped.insert(0, {"ts": round(time.time(), 3), **header_event()})
        data = b"".join(_line(e) for e in stamped)
        if self._torn:
            data = b"\n" + data  # never glue a new event onto a torn line
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
        try:
            os.write(fd, data)
            if self._batch:
                self._unsynced = True
            else:
                os.fsync(fd)
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        for event in stamped:
            self._apply(event)
        self._size, self._torn = size, False
        # The live context is kept whole, so rotate only once the file has at least
        # doubled since the last rotation (compaction keeps the context itself bounded).
        if size > max(self.rotate_bytes, 2 * self._rotated_size):
            self.rotate()

    def rotate(self) -> Path:
        """Start the transcript afresh from the live context and the most recent finished
        turns, and keep the old one gzip-compressed in ``archive/`` (only the newest
        TRANSCRIPT_ARCHIVES_KEPT are kept), so a busy session cannot fill its group's
        disk. The state seen by the next turn is unchanged. Returns the archive."""
        archive_dir = self.dir / ARCHIVE_DIR
        archive_dir.mkdir(exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        archive = archive_dir / f"transcript-{stamp}-{os.urandom(3).hex()}.jsonl.gz"
        with open(self.path, "rb") as source:
            write_atomic(archive, gzip.compress(source.read(), compresslevel=6))
        kept = list(self.completed.items())[-TRANSCRIPT_TURNS_KEPT:]
        events: list[dict[str, Any]] = [header_event()]
        events += [
            {"t": "done", "turn_id": turn_id, "replies": replies} for turn_id, replies in kept
        ]
        if self.context is not None:
            c = self.context
            events.append(
                {
                    "t": "context",
                    "context_id": c.context_id,
                    "source": c.source,
                    "provider": c.provider,
                    "model": c.model,
                    "system": c.system,
                    "summary": c.summary,
                    "flushed": c.flushed,
                    "kept": c.kept,
                    "soft_flushed": c.soft_flushed,
                    "base_chars": c.base_chars,
                    "rotated": True,
                }
            )
            events.extend(
                {"t": "msg", "turn_id": turn_id, **message}
                for message, turn_id in zip(c.messages, c.turn_ids, strict=True)
            )
        stamped = [{"ts": round(time.time(), 3), **e} for e in events]
        data = b"".join(_line(e) for e in stamped)
        write_atomic(self.path, data)
        self.completed = dict(kept)
        self._size, self._torn = len(data), False
        self._rotated_size = len(data)
        for old in sorted(archive_dir.glob("transcript-*.jsonl.gz"))[:-TRANSCRIPT_ARCHIVES_KEPT]:
            old.unlink()
        log.info("%s: rotated at %d bytes into %s", self.path, self.rotate_bytes, archive.name)
        return archive


def _line(event: dict[str, Any]) -> bytes:
    """An event as a line of UTF-8 JSON. One holding a lone surrogate (a model's reply,
    or a line read back that escaped one) has no UTF-8 form as it is: it is written with
    its non-ASCII characters escaped, which reads back the same."""
    try:
        return json.dumps(event, ensure_ascii=False).encode() + b"\n"
    except UnicodeEncodeError:
        return json.dumps(event).encode() + b"\n"


def event_problem(event: dict[str, Any]) -> str | None:
    """Why a transcript event cannot be applied, or None."""
    kind = event.get("t")
    if kind == "done":
        replies = event.get("replies")
        if not isinstance(event.get("turn_id"), str):
            return "a done event needs a text turn_id"
        if replies is not None and (
            not isinstance(replies, list) or not all(isinstance(r, str) for r in replies)
        ):
            return "replies must be a list of texts"
    elif kind == "context":
        if not isinstance(event.get("context_id", 0), int) or isinstance(
            event.get("context_id"), bool
        ):
            return "context_id must be a whole number"
        for key in ("source", "provider", "model", "system", "summary"):
            if not isinstance(event.get(key, ""), str):
                return f"{key} must be text"
        for key in ("flushed", "kept", "base_chars"):
            if not _count(event.get(key, 0)):
                return f"{key} must be a whole number from 0"
    elif kind == "msg":
        if event.get("role") not in ("user", "assistant", "tool"):
            return "role must be user, assistant or tool"
    elif kind == "supersede":
        if not isinstance(event.get("turn_id"), str):
            return "a supersede event needs a text turn_id"
    elif kind == "flush":
        if "upto" in event and not _count(event["upto"]):
            return "upto must be a whole number from 0"
    elif kind not in ("note", HEADER):
        return f"unknown event kind {kind!r}"
    return None


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
