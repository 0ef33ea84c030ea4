"""The process's local time zone, set for a while: for tests that show a time is written
in UTC (or read in the host's zone) whatever the zone the host runs in."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator


@contextlib.contextmanager
def local_zone(name: str) -> Iterator[None]:
    """Set TZ to ``name`` (a zone name or a POSIX TZ string) until the block ends, then
    put back what was there (or nothing) and apply it again."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = name
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()
