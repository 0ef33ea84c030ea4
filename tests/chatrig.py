"""What the chat-app channels' tests share around their rigs (a daemon, a channel of one
kind, its fake platform and a fake runner): waiting for a condition, and closing a rig."""

from __future__ import annotations

import time
from typing import Any, Protocol


def wait_for(predicate: Any, timeout: float = 20, every: float = 0.02) -> Any:
    """``predicate()``'s first true value, asked every ``every`` seconds; the test fails
    when none comes within ``timeout``."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(every)
    return value


class _Rig(Protocol):
    daemon: Any
    channel: Any
    runner: Any


def close_rig(rig: _Rig) -> None:
    """Stop the channel, drain the daemon, close the runner and the queue."""
    rig.channel.stop()
    rig.daemon.drain(1)
    rig.runner.close()
    rig.daemon.queue.close()
