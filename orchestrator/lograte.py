"""Log lines rate-limited per kind, so a fault that repeats (an accept loop out of file
descriptors, a container sending bad frames in a loop) cannot fill the disk with its log.

A kind is the logger and the message template (not its arguments): at most ``burst``
lines of one kind pass per ``window`` seconds; the next line of that kind after the window
says how many were suppressed.
"""

from __future__ import annotations

import logging
import threading
import time

from orchestrator.limits import LOG_KIND_BURST, LOG_KIND_WINDOW_SECONDS


class RateLimitFilter(logging.Filter):
    def __init__(
        self, burst: int = LOG_KIND_BURST, window: float = LOG_KIND_WINDOW_SECONDS
    ) -> None:
        super().__init__()
        self.burst = burst
        self.window = window
        self._lock = threading.Lock()
        # kind -> [window start, lines passed in it, lines suppressed since]
        self._kinds: dict[tuple[str, object], list[float]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        kind = (record.name, record.msg)
        now = time.monotonic()
        with self._lock:
            state = self._kinds.get(kind)
            if state is None or now - state[0] >= self.window:
                suppressed = int(state[2]) if state else 0
                self._kinds[kind] = [now, 1, 0]
                if suppressed:
                    record.msg = f"{record.msg} [{suppressed} similar lines suppressed]"
                if len(self._kinds) > 10_000:  # forget old kinds
                    self._kinds = {k: v for k, v in self._kinds.items() if now - v[0] < self.window}
                return True
            if state[1] < self.burst:
                state[1] += 1
                return True
            state[2] += 1
            return False
