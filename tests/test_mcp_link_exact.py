"""Exact behaviour of how the link reaches an MCP server (mcp/link.py, ``_connect`` and
``_Transport``): the SDK's client it builds for a stdio, an SSE and a streamable HTTP
server, in the SDK's legacy mode; what each transport is given (the command, its
arguments, environment and folder, the server's stderr; the URL, the headers, the HTTP
client's timeout and its response hook); the HTTP statuses of refusals (400 and over)
noted, and the transport's enter and exit passed through. The SDK's client, its
transports and the HTTP client are faked at their boundary: no server is started."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

import orchestrator.mcp.link as link
from orchestrator.limits import MCP_CALL_TIMEOUT_SECONDS
from orchestrator.mcp.link import Remote, Stdio, _connect, _Transport


class FakeClient:
    """The SDK's Client: keeps what it was built with."""

    def __init__(self, server: Any, **kw: Any) -> None:
        self.server = server
        self.kw = kw


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    import httpx2
    import mcp
    import mcp.client.sse
    import mcp.client.stdio
    import mcp.client.streamable_http
    import mcp.shared._httpx_utils

    state: dict[str, Any] = {"events": []}

    def transport(name: str) -> Any:
        """The SDK's client of one transport: keeps what it was given, notes its enter
        and exit, and yields the two streams named after it."""

        @contextlib.asynccontextmanager
        async def client(where: Any, **kw: Any) -> AsyncIterator[tuple[str, str]]:
            state[name] = (where, kw)
            state["events"].append(f"{name} in")
            yield (f"{name}-read", f"{name}-write")
            state["events"].append(f"{name} out")

        return client

    def create_mcp_http_client(**kw: Any) -> Any:
        state["created"] = kw
        return SimpleNamespace(event_hooks={"request": [], "response": ["theirs"]})

    class AsyncClient:
        def __init__(self, **kw: Any) -> None:
            state["httpx"] = kw
            state["httpx_client"] = self

        async def __aenter__(self) -> AsyncClient:
            state["events"].append("httpx in")
            return self

        async def __aexit__(self, *exc: Any) -> None:
            state["events"].append("httpx out")

    monkeypatch.setattr(mcp, "Client", FakeClient)
    monkeypatch.setattr(mcp.client.stdio, "stdio_client", transport("stdio"))
    monkeypatch.setattr(mcp.client.sse, "sse_client", transport("sse"))
    monkeypatch.setattr(mcp.client.streamable_http, "streamable_http_client", transport("http"))
    monkeypatch.setattr(mcp.shared._httpx_utils, "create_mcp_http_client", create_mcp_http_client)
    monkeypatch.setattr(httpx2, "AsyncClient", AsyncClient)
    return state


async def _through(transport: _Transport) -> tuple[Any, Any]:
    """The streams a transport yields, and what its exit returns."""
    streams = await transport.__aenter__()
    return streams, await transport.__aexit__(None, None, None)


def _status(code: int) -> Any:
    return SimpleNamespace(status_code=code)


def legacy_client(target: Stdio | Remote, refusals: list[int]) -> FakeClient:
    """The SDK's client ``_connect`` builds for ``target``: in legacy mode, over a
    ``_Transport``."""
    client = _connect(target, refusals)
    assert isinstance(client, FakeClient)
    assert client.kw == {"mode": "legacy"}
    assert isinstance(client.server, _Transport)
    return client


def test_a_stdio_server_is_started_with_its_command_arguments_environment_and_folder(
    seen: dict[str, Any],
) -> None:
    refusals: list[int] = []
    target = Stdio("srv", ("--a", "b"), {"KEY": "v"}, "/srv/here")
    client = legacy_client(target, refusals)
    assert "stdio" not in seen  # nothing is started before the client is entered
    assert asyncio.run(_through(client.server)) == (("stdio-read", "stdio-write"), False)
    params, kw = seen["stdio"]
    assert kw == {"errlog": sys.stderr}
    assert kw["errlog"] is sys.stderr
    assert params.command == "srv"
    assert params.args == ["--a", "b"]
    assert params.env == {"KEY": "v"}
    assert params.cwd == "/srv/here"
    assert seen["events"] == ["stdio in", "stdio out"]
    assert refusals == []


def test_a_stdio_server_with_defaults_gets_no_arguments_an_empty_environment_and_no_folder(
    seen: dict[str, Any],
) -> None:
    client = _connect(Stdio("srv"), [])
    asyncio.run(_through(client.server))
    params, _ = seen["stdio"]
    assert (params.command, params.args, params.env, params.cwd) == ("srv", [], {}, None)


def test_an_sse_server_is_reached_at_its_url_with_its_headers_and_notes_refusals(
    seen: dict[str, Any],
) -> None:
    refusals: list[int] = []
    target = Remote("http://h/sse", {"Authorization": "Bearer t"}, "sse")
    client = legacy_client(target, refusals)
    assert "sse" not in seen
    assert asyncio.run(_through(client.server)) == (("sse-read", "sse-write"), False)
    url, kw = seen["sse"]
    assert url == "http://h/sse"
    assert sorted(kw) == ["headers", "httpx_client_factory"]
    assert kw["headers"] == {"Authorization": "Bearer t"}
    assert seen["events"] == ["sse in", "sse out"]
    assert "httpx" not in seen and "http" not in seen

    factory = kw["httpx_client_factory"]
    timeout, auth = object(), object()
    http = factory(headers={"X": "1"}, timeout=timeout, auth=auth)
    assert seen["created"] == {"headers": {"X": "1"}, "timeout": timeout, "auth": auth}
    assert http.event_hooks["request"] == []
    assert http.event_hooks["response"][0] == "theirs"
    assert len(http.event_hooks["response"]) == 2
    note = http.event_hooks["response"][1]
    for code in (200, 302, 399, 400, 401, 503):
        asyncio.run(note(_status(code)))
    assert refusals == [400, 401, 503]

    factory()
    assert seen["created"] == {"headers": None, "timeout": None, "auth": None}


def test_an_http_server_is_reached_over_one_http_client_with_the_call_timeout(
    seen: dict[str, Any],
) -> None:
    refusals: list[int] = []
    target = Remote("http://h/mcp", {"Authorization": "Bearer t"})
    client = legacy_client(target, refusals)
    assert "httpx" not in seen
    assert asyncio.run(_through(client.server)) == (("http-read", "http-write"), False)
    assert seen["events"] == ["httpx in", "http in", "http out", "httpx out"]
    assert "sse" not in seen and "stdio" not in seen
    url, kw = seen["http"]
    assert url == "http://h/mcp"
    assert kw == {"http_client": seen["httpx_client"]}
    assert kw["http_client"] is seen["httpx_client"]
    made = seen["httpx"]
    assert sorted(made) == ["event_hooks", "headers", "timeout"]
    assert made["headers"] == {"Authorization": "Bearer t"}
    assert made["timeout"] == MCP_CALL_TIMEOUT_SECONDS == 60
    assert list(made["event_hooks"]) == ["response"]
    (note,) = made["event_hooks"]["response"]
    for code in (100, 204, 399, 400, 404, 500):
        asyncio.run(note(_status(code)))
    assert refusals == [400, 404, 500]


def test_a_remote_transport_other_than_sse_is_streamable_http(seen: dict[str, Any]) -> None:
    client = _connect(Remote("http://h/mcp", transport="SSE"), [])
    asyncio.run(_through(client.server))
    assert seen["http"][0] == "http://h/mcp" and "sse" not in seen


class Recorder:
    """An async context manager that keeps what its exit was given and returns ``ends``."""

    def __init__(self, ends: Any) -> None:
        self.ends = ends
        self.exits: list[tuple[Any, ...]] = []

    async def __aenter__(self) -> str:
        return "streams"

    async def __aexit__(self, *exc: Any) -> Any:
        self.exits.append(exc)
        return self.ends


def test_a_transport_opens_its_factorys_context_on_enter_and_passes_its_exit_through() -> None:
    made: list[Recorder] = []

    def factory() -> Recorder:
        made.append(Recorder(ends=True))
        return made[-1]

    transport = _Transport(factory)
    assert transport.factory is factory
    assert transport._cm is None and made == []

    async def run() -> tuple[Any, Any]:
        streams = await transport.__aenter__()
        error = ValueError("x")
        return streams, await transport.__aexit__(ValueError, error, None)

    streams, ended = asyncio.run(run())
    assert streams == "streams" and ended is True
    assert len(made) == 1 and transport._cm is made[0]
    (exc,) = made[0].exits
    assert exc[0] is ValueError and str(exc[1]) == "x" and exc[2] is None


class SlowServer:
    """A server that takes a moment to answer each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any], dict[str, Any]]] = []

    async def __aenter__(self) -> SlowServer:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        return None

    async def call_tool(self, tool: str, arguments: dict[str, Any], **kw: Any) -> Any:
        self.calls.append((tool, arguments, kw))
        await asyncio.sleep(0.3)
        return {"called": tool}


def link_to(monkeypatch: pytest.MonkeyPatch, server: SlowServer) -> link.Link:
    """The link to MCP server 'tracker' whose SDK client is ``server`` (nothing is
    started before its first call)."""
    monkeypatch.setattr(link, "_connect", lambda target, refusals: server)
    return link.Link("tracker", Stdio("srv"))


def test_a_call_gets_an_answer_that_comes_after_its_read_timeout_within_5_s_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = SlowServer()
    a_link = link_to(monkeypatch, server)
    try:
        # the SDK's own read timeout is the call's; the host waits 5 s past it
        assert a_link.call("find", {"q": 1}, timeout=0) == {"called": "find"}
        assert server.calls == [("find", {"q": 1}, {"read_timeout_seconds": 0})]
        assert a_link.last_error is None and a_link.state == "running"
    finally:
        a_link.close()


class StubbornServer(SlowServer):
    """A server that does not stop when asked and lets its first cancellation pass."""

    def __init__(self) -> None:
        super().__init__()
        self.cancels = 0
        self.ended = False

    def gives_in(self) -> bool:
        """Whether the cancellation just counted ends it."""
        return self.cancels > 1

    async def __aexit__(self, *exc: Any) -> None:
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.cancels += 1
                if self.gives_in():
                    self.ended = True
                    raise

    async def call_tool(self, tool: str, arguments: dict[str, Any], **kw: Any) -> Any:
        raise OSError("broken  pipe")


def test_a_server_that_lets_its_first_cancellation_pass_is_cancelled_again_until_it_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = StubbornServer()
    a_link = link_to(monkeypatch, server)
    try:
        with pytest.raises(link.LinkFailed) as failed:
            a_link.call("find", {})
        assert str(failed.value) == "MCP server 'tracker': find failed: OSError: broken pipe"
        # asked to stop, then cancelled, then cancelled again when it still had not ended
        assert server.cancels == 2 and server.ended is True
        assert a_link.state == "stopped" and a_link._holder is None
    finally:
        a_link.close()


class DeafServer(StubbornServer):
    """A server that lets every cancellation pass while ``deaf``: it never ends."""

    deaf = True

    async def __aenter__(self) -> DeafServer:
        self.task = asyncio.current_task()
        return self

    def gives_in(self) -> bool:
        return not self.deaf


def test_a_server_that_never_ends_is_given_up_after_15_s_and_the_call_still_fails_plainly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = DeafServer()
    a_link = link_to(monkeypatch, server)
    try:
        with pytest.raises(link.LinkFailed) as failed:
            a_link.call("find", {})
        assert str(failed.value) == "MCP server 'tracker': find failed: OSError: broken pipe"
        assert server.cancels == 2 and server.ended is False
        assert a_link.state == "stopped" and a_link._holder is None
    finally:  # let it end, so that no task is left pending
        server.deaf = False
        loop = a_link._loop
        assert loop is not None
        loop.call_soon_threadsafe(server.task.cancel)
        asyncio.run_coroutine_threadsafe(asyncio.wait([server.task]), loop).result(5)
        a_link.close()


def test_closing_a_link_whose_loop_is_stuck_waits_5_s_for_it_and_does_not_fail(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import time

    a_link = link_to(monkeypatch, SlowServer())
    assert a_link.call("find", {}, timeout=9) == {"called": "find"}
    loop, thread = a_link._loop, a_link._thread
    assert loop is not None and thread is not None
    stop_holder = a_link._stop_holder

    def then_stuck() -> None:  # the server stops, then something holds the loop for 8 s
        stop_holder()
        loop.call_soon_threadsafe(time.sleep, 8)

    monkeypatch.setattr(a_link, "_stop_holder", then_stuck)
    a_link.close()  # the stuck loop cannot be closed yet: that is not an error
    assert a_link._loop is None and a_link._thread is None
    assert thread.is_alive() and not loop.is_closed()
    thread.join(30)
    assert not thread.is_alive()
    loop.close()
