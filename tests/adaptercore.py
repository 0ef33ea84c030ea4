"""A chat-app core for driving one adapter directly (its read loop, its sends) against a
fake platform on loopback: tests/fuzzing.py's RecordingCore with the account's state in
a real ChatStore, its token, and what the adapter reports (failed reads, batches the
queue did not take, errors, health saves) recorded."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from types import SimpleNamespace
from typing import Any

from orchestrator.store.chats import ChatStore
from tests.fuzzing import RecordingCore


class StubCore(RecordingCore):
    def __init__(
        self, options: Any, prefix: str, chats: ChatStore, token: str, root: Any = None
    ) -> None:
        super().__init__(options, prefix, root)
        self.account.name = self.name
        self.account.token = SimpleNamespace(require=lambda *_: token)
        self.daemon.config = SimpleNamespace(secrets_file=None)
        self.chats = chats  # type: ignore[assignment]
        self.failed: list[tuple[str, str, float]] = []  # (what, error, backoff's wait)
        self.unqueued: list[tuple[str, str, float]] = []  # (what, error, backoff's wait)
        self.errors: list[str] = []
        self.polls = 0
        self.saves = 0

    def polled(self) -> None:
        self.polls += 1

    def save_health(self) -> None:
        self.saves += 1

    def error(self, text: str) -> None:
        self.errors.append(text)

    async def read_failed(self, what: str, error: str, backoff: Any) -> None:
        self.failed.append((what, error, backoff.seconds))
        backoff.seconds *= 2  # as the backoff's wait would, without the wait
        await asyncio.sleep(0)

    async def notice(self, *args: Any, **kwargs: Any) -> None:
        self.notices.append((*args, kwargs.get("key")))

    async def not_queued(self, what: str, exc: Any, backoff: Any) -> None:
        self.unqueued.append((what, exc.message, backoff.seconds))
        await asyncio.sleep(0.01)


async def run_until(
    loop: Coroutine[Any, Any, Any], done: Callable[[], Any], timeout: float = 15
) -> Any:
    """Run ``loop`` (an adapter's read loop) until ``done()`` holds, then cancel it;
    its result when it returned before that."""
    task = asyncio.ensure_future(loop)
    deadline = asyncio.get_running_loop().time() + timeout
    while not done():
        if task.done():
            return task.result()
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)
    task.cancel()
    try:
        return await task
    except asyncio.CancelledError:
        return None
