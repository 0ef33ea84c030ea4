"""The waits the MCP link (mcp/link.py) asks for, recorded where it asks for them (the
loop's futures, ``asyncio.wait_for``, the loop thread's join), never timed: a call is
waited for 5 s past its read timeout; a server asked to stop gets 5 s to end and, once
cancelled, 5 s more; the whole stop is given up after 15 s; closing waits 5 s for the
loop's thread."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import orchestrator.mcp.link as link
from orchestrator.limits import MCP_CALL_TIMEOUT_SECONDS, MCP_LIST_TIMEOUT_SECONDS
from orchestrator.mcp.link import Link, LinkFailed, Stdio
from tests.waits import record_joins


class Server:
    """What link._connect returns: its calls answer at once, or fail when ``fail``; its
    end waits until it is cancelled when ``stubborn``."""

    def __init__(self, *, fail: bool = False, stubborn: bool = False) -> None:
        self.fail = fail
        self.stubborn = stubborn
        self.cancelled = False
        self.holder: asyncio.Task[Any] | None = None

    async def __aenter__(self) -> Server:
        self.holder = asyncio.current_task()  # the link's holder enters it
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self.stubborn:  # it does not end when asked
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.cancelled = True
                raise

    async def call_tool(self, tool: str, arguments: dict[str, Any], **kw: Any) -> Any:
        if self.fail:
            raise OSError("broken  pipe")
        return {"called": tool}


class Recorded:
    """A future of the link's loop whose waits are recorded, then waited as asked."""

    def __init__(self, future: Any, what: str, asked: list[tuple[str, float]]) -> None:
        self.future = future
        self.what = what
        self.asked = asked

    def result(self, timeout: float) -> Any:
        self.asked.append((self.what, timeout))
        return self.future.result(timeout)

    def cancel(self) -> bool:
        return bool(self.future.cancel())


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, float]]:
    """(the coroutine's name, the seconds waited for its result) of each one the link
    runs on its loop."""
    waits: list[tuple[str, float]] = []
    real = asyncio.run_coroutine_threadsafe

    def run(coro: Any, loop: asyncio.AbstractEventLoop) -> Recorded:
        return Recorded(real(coro, loop), coro.__name__, waits)

    monkeypatch.setattr(link.asyncio, "run_coroutine_threadsafe", run)
    return waits


def a_link(monkeypatch: pytest.MonkeyPatch, server: Server) -> Link:
    monkeypatch.setattr(link, "_connect", lambda target, refusals: server)
    return Link("tracker", Stdio("srv"))


def test_a_call_is_waited_for_5_s_past_its_read_timeout(
    monkeypatch: pytest.MonkeyPatch, asked: list[tuple[str, float]]
) -> None:
    linked = a_link(monkeypatch, Server())
    try:
        assert linked.call("find", {}, timeout=9) == {"called": "find"}
        assert linked.call("find", {}) == {"called": "find"}
        assert asked == [
            ("_start", MCP_LIST_TIMEOUT_SECONDS),
            ("call_tool", 14),
            ("call_tool", MCP_CALL_TIMEOUT_SECONDS + 5),
        ]
    finally:
        linked.close()


def test_a_server_asked_to_stop_gets_5_s_then_5_s_more_once_cancelled_within_15_s(
    monkeypatch: pytest.MonkeyPatch, asked: list[tuple[str, float]]
) -> None:
    server = Server(fail=True, stubborn=True)
    linked = a_link(monkeypatch, server)
    waits: list[tuple[bool, float]] = []
    real = asyncio.wait_for

    async def wait_for(awaited: Any, timeout: float) -> Any:
        # (whether it waits for the holder itself, not a shield of it; the seconds asked)
        waits.append((awaited is server.holder, timeout))
        return await real(awaited, 0.1)  # the seconds asked are recorded, not spent

    monkeypatch.setattr(link.asyncio, "wait_for", wait_for)
    try:
        with pytest.raises(LinkFailed):
            linked.call("find", {})
        assert server.cancelled is True and server.holder is not None and server.holder.done()
        assert waits == [(False, 5), (True, 5)]
        assert asked == [
            ("_start", MCP_LIST_TIMEOUT_SECONDS),
            ("call_tool", MCP_CALL_TIMEOUT_SECONDS + 5),
            ("stop_it", 15),
        ]
    finally:
        linked.close()


def test_a_server_that_stops_when_asked_is_waited_for_once(
    monkeypatch: pytest.MonkeyPatch, asked: list[tuple[str, float]]
) -> None:
    server = Server(fail=True)
    linked = a_link(monkeypatch, server)
    waits: list[float] = []
    real = asyncio.wait_for

    async def wait_for(awaited: Any, timeout: float) -> Any:
        waits.append(timeout)
        return await real(awaited, timeout)

    monkeypatch.setattr(link.asyncio, "wait_for", wait_for)
    try:
        with pytest.raises(LinkFailed):
            linked.call("find", {})
        assert server.cancelled is False and waits == [5]
        assert asked[-1] == ("stop_it", 15)
    finally:
        linked.close()


def test_closing_waits_5_s_for_the_loops_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    linked = a_link(monkeypatch, Server())
    assert linked.call("find", {}) == {"called": "find"}
    thread = linked._thread
    assert thread is not None
    joins = record_joins(monkeypatch, thread)
    linked.close()
    assert joins == [5] and not thread.is_alive()
