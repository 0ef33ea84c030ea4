"""A blocking link to one MCP server, over the official SDK.

The SDK is asynchronous; a link runs its own event loop in a thread of its own, holds
the SDK's client open in one task there (an SDK connection must be closed by the task
that opened it) and answers ``tools`` and ``call`` from any thread, each with a
timeout. A server that dies is started again on the next use, at most
MCP_RESTARTS_MAX times; after that the link stays failed with the last error, until
the process that holds it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from orchestrator.limits import (
    MCP_CALL_TIMEOUT_SECONDS,
    MCP_LIST_TIMEOUT_SECONDS,
    MCP_RESTARTS_MAX,
    MCP_TOOLS_MAX,
)
from orchestrator.mcp.tools import ListedTool, listed

log = logging.getLogger(__name__)


class LinkFailed(Exception):
    """A server could not be started, listed or called; the message says why, for a
    person or the model."""


@dataclass(frozen=True)
class Stdio:
    """A server the link starts as a process and talks to over its stdin and stdout."""

    command: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None

    def describe(self) -> str:
        return " ".join((self.command, *self.args))


@dataclass(frozen=True)
class Remote:
    """A server reached over HTTP: streamable HTTP, or SSE for older servers."""

    url: str
    headers: dict[str, str] = field(default_factory=dict, repr=False)  # secrets: never shown
    transport: str = "http"  # http | sse

    def describe(self) -> str:
        return f"{self.transport} {self.url}"


def _connect(target: Stdio | Remote, refusals: list[int]) -> Any:
    """The SDK's client for ``target`` (not yet entered); the HTTP statuses of a remote
    server's refusals are added to ``refusals`` (the SDK's own error does not say them)."""
    from mcp import Client

    if isinstance(target, Stdio):
        from mcp.client.stdio import StdioServerParameters, stdio_client

        params = StdioServerParameters(
            command=target.command, args=list(target.args), env=target.env, cwd=target.cwd
        )

        @contextlib.asynccontextmanager
        async def stdio_transport() -> Any:
            # the server's stderr goes to this process's: the container's log
            async with stdio_client(params, errlog=sys.stderr) as streams:
                yield streams

        return Client(_Transport(stdio_transport), mode="legacy")
    import httpx2

    async def note(response: Any) -> None:
        if response.status_code >= 400:
            refusals.append(response.status_code)

    if target.transport == "sse":
        from mcp.client.sse import sse_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        def noting_client(
            headers: dict[str, str] | None = None, timeout: Any = None, auth: Any = None
        ) -> Any:
            client = create_mcp_http_client(headers=headers, timeout=timeout, auth=auth)
            client.event_hooks["response"].append(note)
            return client

        @contextlib.asynccontextmanager
        async def sse_transport() -> Any:
            async with sse_client(
                target.url, headers=target.headers, httpx_client_factory=noting_client
            ) as streams:
                yield streams

        return Client(_Transport(sse_transport), mode="legacy")
    from mcp.client.streamable_http import streamable_http_client

    @contextlib.asynccontextmanager
    async def http_transport() -> Any:
        async with (
            httpx2.AsyncClient(
                headers=target.headers,
                timeout=MCP_CALL_TIMEOUT_SECONDS,
                event_hooks={"response": [note]},
            ) as http,
            streamable_http_client(target.url, http_client=http) as streams,
        ):
            yield streams

    return Client(_Transport(http_transport), mode="legacy")


class _Transport:
    """The SDK's Transport: an async context manager that yields the two streams."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        self.factory = factory
        self._cm: Any = None

    async def __aenter__(self) -> Any:
        self._cm = self.factory()
        return await self._cm.__aenter__()

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._cm.__aexit__(*exc)


class Link:
    """One server, started on first use and kept until ``close``."""

    def __init__(self, name: str, target: Stdio | Remote) -> None:
        self.name = name
        self.target = target
        self.starts = 0
        self.last_error: str | None = None
        self.cut_tools = 0  # tools past MCP_TOOLS_MAX in the last listing
        self.refusals: list[int] = []  # HTTP statuses of a remote server's refusals
        self._tools: list[ListedTool] | None = None
        self._client: Any = None
        self._stop: asyncio.Event | None = None
        self._holder: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.RLock()

    @property
    def state(self) -> str:
        if self._client is not None:
            return "running"
        if self.last_error is not None:
            return "failed" if self.starts > MCP_RESTARTS_MAX else "stopped"
        return "not started"

    def _loop_of(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name=f"mcp-{self.name}", daemon=True)
            thread.start()
            self._loop, self._thread = loop, thread
        return self._loop

    def _run(self, coro: Any, timeout: float) -> Any:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop_of())
        try:
            return future.result(timeout)
        except FutureTimeout:
            future.cancel()
            raise

    async def _hold(self, ready: asyncio.Future[None]) -> None:
        stop = self._stop = asyncio.Event()
        try:
            async with _connect(self.target, self.refusals) as client:
                self._client = client
                if not ready.done():
                    ready.set_result(None)
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            elif not isinstance(exc, asyncio.CancelledError):
                self.last_error = _why(exc)
                log.warning("mcp server %s ended: %s", self.name, self.last_error)
        finally:
            self._client = None

    async def _start(self) -> None:
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._holder = asyncio.ensure_future(self._hold(ready))
        await ready

    def _ensure(self, timeout: float) -> Any:
        if self._client is not None and self._holder is not None and not self._holder.done():
            return self._client
        if self.starts > MCP_RESTARTS_MAX:
            raise LinkFailed(
                f"MCP server {self.name!r} failed {self.starts} times and is not started "
                f"again until its container is (last error: {self.last_error})"
            )
        self.starts += 1
        self._tools = None
        try:
            self._run(self._start(), timeout)
        except FutureTimeout:
            self.last_error = f"it did not start within {timeout:.0f} s"
            self._stop_holder()
            raise LinkFailed(f"MCP server {self.name!r}: {self.last_error}") from None
        except Exception as exc:
            self.last_error = _why(exc) + self._refused()
            raise LinkFailed(
                f"MCP server {self.name!r} ({self.target.describe()}) could not start: "
                f"{self.last_error}"
            ) from None
        if self.starts > 1:
            log.info("mcp server %s started again (start %d)", self.name, self.starts)
        return self._client

    def _refused(self) -> str:
        """What the HTTP statuses say, when the server refused a request."""
        if not self.refusals:
            return ""
        status = self.refusals[-1]
        self.refusals.clear()
        if status in (401, 403):
            return (
                f" (HTTP {status}: the server refused the credentials; check the headers of "
                f"mcp_servers.{self.name} in orchestrator.yaml)"
            )
        return f" (HTTP {status})"

    def tools(self, timeout: float = MCP_LIST_TIMEOUT_SECONDS) -> list[ListedTool]:
        """The server's tools (listed once per start, at most MCP_TOOLS_MAX)."""
        with self._lock:
            client = self._ensure(timeout)
            if self._tools is not None:
                return self._tools
            try:
                found = self._run(_list_all(client), timeout)
            except FutureTimeout:
                self.last_error = f"its tool listing took over {timeout:.0f} s"
                self._stop_holder()
                raise LinkFailed(f"MCP server {self.name!r}: {self.last_error}") from None
            except Exception as exc:
                self.last_error = _why(exc)
                self._stop_holder()
                raise LinkFailed(
                    f"MCP server {self.name!r} could not list its tools: {self.last_error}"
                ) from None
            tools = [listed(t) for t in found]
            self.cut_tools = max(len(tools) - MCP_TOOLS_MAX, 0)
            if self.cut_tools:
                log.warning(
                    "mcp server %s lists %d tools; only the first %d are considered",
                    self.name,
                    len(tools),
                    MCP_TOOLS_MAX,
                )
            self._tools = tools[:MCP_TOOLS_MAX]
            return self._tools

    def call(
        self, tool: str, arguments: dict[str, Any], timeout: float = MCP_CALL_TIMEOUT_SECONDS
    ) -> Any:
        """The SDK's CallToolResult of one call; LinkFailed when it cannot be had."""
        with self._lock:
            client = self._ensure(MCP_LIST_TIMEOUT_SECONDS)
        try:
            return self._run(
                client.call_tool(tool, arguments, read_timeout_seconds=timeout), timeout + 5
            )
        except FutureTimeout:
            why = f"{tool} did not answer within {timeout:.0f} s"
        except Exception as exc:
            why = f"{tool} failed: {_why(exc)}"
        self.last_error = why
        # a server that does not answer is started afresh for the next call
        with self._lock:
            self._stop_holder()
        raise LinkFailed(f"MCP server {self.name!r}: {why}")

    def _stop_holder(self) -> None:
        holder, stop, loop = self._holder, self._stop, self._loop
        self._holder, self._client = None, None
        if holder is None or loop is None:
            return

        async def stop_it() -> None:
            if stop is not None:
                stop.set()
            try:
                await asyncio.wait_for(asyncio.shield(holder), 5)
            except BaseException:
                holder.cancel()
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(holder, 5)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop_it(), loop).result(15)

    def close(self) -> None:
        with self._lock:
            self._stop_holder()
            loop = self._loop
            if loop is not None:
                loop.call_soon_threadsafe(loop.stop)
                if self._thread is not None:
                    self._thread.join(5)
                with contextlib.suppress(RuntimeError):
                    loop.close()
            self._loop = self._thread = None


async def _list_all(client: Any) -> list[Any]:
    """Every tool over the listing's pages, stopping once past MCP_TOOLS_MAX."""
    found: list[Any] = []
    cursor: str | None = None
    for _ in range(64):
        page = await client.list_tools(cursor=cursor)
        found.extend(page.tools)
        cursor = getattr(page, "next_cursor", None) or getattr(page, "nextCursor", None)
        if not cursor or len(found) > MCP_TOOLS_MAX:
            break
    return found


def _why(exc: BaseException) -> str:
    """A one-line reason from an exception (the SDK wraps failures in groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = " ".join(str(exc).split())[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
