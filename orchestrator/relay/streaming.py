"""An answer shown while the model writes it: its streamed text stored as replies in
pieces, each a reply of its own (a new sequence number, stored once and never changed,
so every channel's exactly-once sending holds).

A piece ends at a paragraph break once STREAM_PIECE_MIN_CHARS have come, at the last
space before STREAM_PIECE_MAX_CHARS, or at the last space once the text waiting has
waited STREAM_PIECE_SECONDS; the rest is the last piece, when the answer ends. Text that
may still become the word NO_REPLY (an answer that is no reply) is held back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from orchestrator.limits import (
    STREAM_PIECE_MAX_CHARS,
    STREAM_PIECE_MIN_CHARS,
    STREAM_PIECE_SECONDS,
)
from orchestrator.protocol import NO_REPLY_WORD


class Pieces:
    def __init__(
        self, store: Callable[[str], Any], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.store = store
        self.clock = clock
        self.buffer = ""
        self.stored = 0  # pieces stored
        self.since = 0.0  # when the oldest text waiting came

    def _held(self) -> bool:
        """Whether what came so far may still be the answer NO_REPLY."""
        return self.stored == 0 and NO_REPLY_WORD.startswith(self.buffer.strip())

    def _emit(self, end: int) -> None:
        piece, self.buffer = self.buffer[:end].strip(), self.buffer[end:]
        if piece:
            self.store(piece)
            self.stored += 1
        self.since = self.clock()

    def feed(self, text: str) -> None:
        """More of the answer's text."""
        if not self.buffer.strip():
            self.since = self.clock()
        self.buffer += text
        if self._held():
            return
        if len(self.buffer) >= STREAM_PIECE_MIN_CHARS:
            paragraph = self.buffer.rfind("\n\n")
            if paragraph >= STREAM_PIECE_MIN_CHARS // 2:
                self._emit(paragraph)
                return
        late = self.clock() - self.since >= STREAM_PIECE_SECONDS
        if len(self.buffer) >= STREAM_PIECE_MAX_CHARS or (late and self.buffer.strip()):
            space = max(self.buffer.rfind(" "), self.buffer.rfind("\n"))
            if space > 0:
                self._emit(space)

    def finish(self, whole: str | None) -> bool:
        """The answer ended: store the rest; whether it was shown (False for an answer
        that is no reply, or that never streamed)."""
        if self.stored == 0 and (whole or "").strip() in ("", NO_REPLY_WORD):
            self.buffer = ""
            return False
        self._emit(len(self.buffer))
        return self.stored > 0
