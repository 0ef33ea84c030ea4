"""The media queue: messages whose files need work before their turn (a voice note to
transcribe, a PDF's text) wait in state ``preparing``, holding their session's place,
and are prepared here, by MEDIA_WORKERS threads of their own: a ten-minute
transcription never holds a turn worker another group needs, and a group's turns of
other sessions go on. Groups take turns (the one served longest ago first, its oldest
message first), and a paused group's files wait with its messages.

The state is the queue's: a message left ``preparing`` by a crash is prepared again at
the next start. A preparation that raises is tried again MEDIA_ATTEMPTS times; then the
message goes on with lines saying its files could not be prepared.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.config.transcription import OFF
from orchestrator.limits import (
    DEFAULT_ATTACHMENT_MAX_BYTES,
    MEDIA_ATTEMPTS,
    MEDIA_WORKERS,
    TRANSCRIPT_MAX_CHARS,
)
from orchestrator.media.inbox import (
    INBOX,
    StoredFile,
    attachment_line,
    document_line,
    is_pdf,
    voice_line,
)
from orchestrator.media.prepare import compose, is_audio
from orchestrator.store.messages import Message
from orchestrator.store.usage import FAILED, OK, Call, UsageStore

if TYPE_CHECKING:
    from orchestrator.config import OrchestratorConfig
    from orchestrator.daemon.core import Daemon
    from orchestrator.groups.config import GroupConfig
    from orchestrator.media.transcribe import Transcriber

log = logging.getLogger("orchestrator.media")
IDLE_WAIT_SECONDS = 1.0  # a worker with nothing to do looks again (events wake it first)
TRANSCRIPTION = "transcription"  # the purpose of a transcription's usage row
READ_MAX_BYTES = 2 * 1024**3  # the most of an inbox file read (the app's cap came first)


@dataclass
class Preparer:
    """A message's file work: it transcribes voice notes and audio (the group's
    transcriber; time and cost recorded in usage, purpose ``transcription``), saves a
    PDF's text beside it as ``<name>.txt`` in ``files/inbox/``, and names everything
    else. Every file is read through the confined file layer: the container can write
    ``files/``, and may have swapped the stored file for a link or a FIFO since."""

    config: OrchestratorConfig
    groups_root: Path
    usage: UsageStore
    _transcribers: dict[str, tuple[object, Transcriber]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def lines(self, message: Message, config: GroupConfig) -> list[str]:
        """The lines of each of ``message``'s files, after the work they need. A file
        whose work fails gets a line saying why (the turn goes on)."""
        out = []
        for stored in message.media:
            if is_audio(stored):
                out.append(self._audio(message, config, stored))
            elif is_pdf(stored):
                out.append(self._pdf(message, stored))
            else:
                out.append(attachment_line(stored))
        return out

    # audio

    def transcriber(self, name: str) -> Transcriber:
        """The transcriber ``name`` of orchestrator.yaml, made again when its definition
        changes; TranscriptionFailed when it is not defined."""
        from orchestrator.media.transcribe import TranscriptionFailed, make_transcriber

        definition = self.config.transcription.get(name)
        if definition is None:
            known = ", ".join(sorted(self.config.transcription)) or "none"
            raise TranscriptionFailed(
                f"transcriber {name!r} (group.yaml media.transcribe) is not defined in "
                f"orchestrator.yaml; defined: {known}"
            )
        with self._lock:
            made = self._transcribers.get(name)
            if made is None or made[0] != definition:
                if made is not None:
                    _close(made[1])
                made = (definition, make_transcriber(definition, self.config.secrets_file))
                self._transcribers[name] = made
            return made[1]

    def _audio(self, message: Message, config: GroupConfig, stored: StoredFile) -> str:
        from orchestrator.media.transcribe import TranscriptionFailed
        from orchestrator.money import cost_per_minute
        from orchestrator.secrets import MissingSecret

        name = config.media.transcribe
        if name == OFF:
            return voice_line(stored, None, "transcription is off for this group")
        started, clock = time.time(), time.monotonic()
        definition = self.config.transcription.get(name)

        def record(outcome: str, seconds: float | None, error: str | None) -> None:
            assert definition is not None
            cost = cost_per_minute(definition.price_per_minute, seconds)
            self.usage.record(
                Call(
                    message.id,
                    message.group,
                    name,
                    definition.model_name,
                    TRANSCRIPTION,
                    started,
                    (time.monotonic() - clock) * 1000,
                    0,
                    0,
                    outcome,
                    error,
                    cost=cost,
                    currency=self.config.currency if cost is not None else None,
                )
            )

        try:
            transcriber = self.transcriber(name)
            audio = self._read(message.group, stored)
            found = transcriber.transcribe(
                audio, name=stored.name, mime=stored.mime, seconds=stored.duration
            )
        except (TranscriptionFailed, MissingSecret, OSError) as exc:
            reason = str(getattr(exc, "message", None) or exc)
            log.warning(
                "group %s, message %s: %s not transcribed: %s",
                message.group,
                message.id,
                stored.path,
                reason,
            )
            if definition is not None and not isinstance(exc, OSError):
                record(FAILED, None, reason)
            return voice_line(stored, None, reason)
        record(OK, found.seconds, None)
        text = found.text.strip()
        if len(text) > TRANSCRIPT_MAX_CHARS:
            text = text[:TRANSCRIPT_MAX_CHARS] + " [cut: the transcript goes on]"
        if found.seconds is not None:  # measured: truer than what the app said
            stored = replace(stored, duration=found.seconds)
        return voice_line(stored, text)

    # documents

    def _pdf(self, message: Message, stored: StoredFile) -> str:
        from orchestrator.media.pdf import NotAPdf, extract_text

        try:
            data = self._read(message.group, stored)
            found = extract_text(data)
        except NotAPdf as exc:
            log.info("group %s: %s: %s", message.group, stored.path, exc)
            return document_line(stored, None, f"{exc}; no text was extracted")
        except OSError as exc:
            return document_line(stored, None, f"it could not be read ({exc})")
        text_name = f"{stored.name}.txt"
        note = f"{found.pages} pages"
        if found.pages_read < found.pages:
            note += f"; the text of the first {found.pages_read} only"
        if found.cut:
            note += "; cut at its length limit"
        note += f", {len(found.text):,} characters"
        if not found.text.strip():
            return document_line(stored, None, f"{note}: no text in it (scanned pages?)")
        try:
            self._write_text(message.group, text_name, found.text)
        except OSError as exc:
            return document_line(stored, None, f"its text could not be saved ({exc})")
        return document_line(stored, text_name, note)

    # files

    def _read(self, group: str, stored: StoredFile) -> bytes:
        """The stored file's bytes through the confined layer (a link or FIFO the
        container put in its place is refused)."""
        from orchestrator.confined import open_group_dir

        limit = max(stored.size, DEFAULT_ATTACHMENT_MAX_BYTES)
        with (
            open_group_dir(self.groups_root, group) as folder,
            folder.open_dir(INBOX) as inbox,
        ):
            return inbox.read_bytes(stored.name, min(limit, READ_MAX_BYTES))

    def _write_text(self, group: str, name: str, text: str) -> None:
        from orchestrator.confined import open_group_dir

        with (
            open_group_dir(self.groups_root, group) as folder,
            folder.open_dir(INBOX) as inbox,
        ):
            if not inbox.create_exclusive(name, text):
                inbox.write_atomic(name, text)  # a second preparation of the same message

    def close(self) -> None:
        with self._lock:
            for _, transcriber in self._transcribers.values():
                _close(transcriber)
            self._transcribers.clear()


def _close(transcriber: object) -> None:
    close = getattr(transcriber, "close", None)
    if close is not None:
        close()


def next_to_prepare(
    waiting: list[Message], working: set[str], paused: set[str], last: dict[str, float]
) -> Message | None:
    """The message to prepare next: of the group served longest ago, its oldest; none
    already being prepared, none of a paused group, and none behind another of its
    session (a session's messages go in order)."""
    heads: dict[tuple[str, str], Message] = {}
    for message in waiting:
        heads.setdefault((message.group, message.session), message)
    ready = [m for m in heads.values() if m.id not in working and m.group not in paused]
    if not ready:
        return None
    return min(ready, key=lambda m: (last.get(m.group, 0.0), m.created))


class MediaQueue:
    """The threads that prepare messages' files for the daemon."""

    def __init__(self, daemon: Daemon, workers: int = MEDIA_WORKERS) -> None:
        self.daemon = daemon
        self.workers = workers
        self.preparer = Preparer(daemon.config, daemon.runtime.store.root, daemon.relay.usage)
        self.cond = threading.Condition()
        self.working: set[str] = set()
        self.failures: dict[str, int] = {}
        self.last: dict[str, float] = {}
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        for index in range(self.workers):
            thread = threading.Thread(target=self._loop, name=f"media-{index}", daemon=True)
            thread.start()
            self.threads.append(thread)

    def wake(self) -> None:
        with self.cond:
            self.cond.notify_all()

    def stop(self) -> None:
        self.stopping.set()
        self.wake()
        self.preparer.close()

    def apply_config(self) -> None:
        self.preparer.config = self.daemon.config

    def _loop(self) -> None:
        while not self.stopping.is_set():
            try:
                message = self._take()
                if message is None:
                    continue
                try:
                    self.prepare(message)
                finally:
                    with self.cond:
                        self.working.discard(message.id)
                        self.cond.notify_all()
            except Exception:
                log.exception("media queue: a round failed; trying again")
                self.stopping.wait(IDLE_WAIT_SECONDS)

    def _take(self) -> Message | None:
        queue = self.daemon.queue
        waiting = queue.preparing()
        paused = set(queue.paused_groups())
        with self.cond:
            chosen = next_to_prepare(waiting, self.working, paused, self.last)
            if chosen is None:
                self.cond.wait(IDLE_WAIT_SECONDS)
                return None
            self.working.add(chosen.id)
            self.last[chosen.group] = time.monotonic()
            return chosen

    def prepare(self, message: Message) -> None:
        """Prepare one message's files and queue it for its turn."""
        daemon = self.daemon
        started = time.monotonic()
        try:
            group = daemon.runtime.store.load(message.group)
            lines = self.preparer.lines(message, group.config)
        except Exception as exc:
            tries = self.failures.get(message.id, 0) + 1
            self.failures[message.id] = tries
            if tries < MEDIA_ATTEMPTS:
                log.warning(
                    "message %s: its files could not be prepared (%s); trying again",
                    message.id,
                    exc,
                )
                self.stopping.wait(min(2.0**tries, 30.0))
                return
            log.error("message %s: its files could not be prepared: %s", message.id, exc)
            lines = [
                f"{attachment_line(m)} [it could not be prepared: {exc}]" for m in message.media
            ]
        self.failures.pop(message.id, None)
        text, said = compose(message.text, message.said, lines)
        if daemon.queue.prepared(message.id, text, said):
            log.info(
                "message %s of %s: %d file(s) prepared in %.1fs",
                message.id,
                message.group,
                len(message.media),
                time.monotonic() - started,
            )
        daemon.wake()
