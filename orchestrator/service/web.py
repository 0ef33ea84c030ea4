"""The daemon's web server: one aiohttp application on ``http.listen``, to which the
HTTP API (``channels.http``) and, with ``http.dashboard: true``, the dashboard
(``dashboard.app``) each add their routes and middlewares.

It cannot be starved: a connection must send its request head within
HTTP_HEADER_TIMEOUT_SECONDS (aiohttp's keep-alive timer covers a connection that has not
sent a whole request), and at most HTTP_MAX_CONNECTIONS are open (more are closed at
once).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Callable
from typing import Any

from aiohttp import web

from orchestrator.channels.base import Channel
from orchestrator.channels.http import HttpApi
from orchestrator.limits import (
    HTTP_BODY_MAX_BYTES,
    HTTP_HEADER_TIMEOUT_SECONDS,
    HTTP_LISTEN_BACKLOG,
    HTTP_MAX_CONNECTIONS,
)

log = logging.getLogger("orchestrator.channels.http")


class _Refuse(asyncio.Protocol):
    """Closes a connection over the cap as soon as it is made."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class _Counted(asyncio.Protocol):
    """aiohttp's protocol for one connection, counted from the moment it is made (the
    event loop accepts a batch of connections before any of them is set up)."""

    def __init__(self, inner: Any, release: Callable[[], None]) -> None:
        self.inner = inner
        self.release = release

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        try:
            self.inner.connection_lost(exc)
        finally:
            self.release()

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        result: bool | None = self.inner.eof_received()
        return result

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class WebServer(Channel):
    """The web server, run by the service as one of its channels."""

    name = "http"

    def __init__(self, daemon: Any) -> None:
        super().__init__(daemon)
        self.api = HttpApi(daemon)
        self.dashboard: Any = None
        self.refused_connections = 0
        self.open_connections = 0  # touched only on the event loop

    @classmethod
    def enabled(cls, daemon: Any) -> bool:
        return HttpApi.enabled(daemon.config)

    @classmethod
    def settings(cls, config: Any) -> tuple[object, ...]:
        return (
            config.http_listen,
            config.http_allow_remote,
            config.http_dashboard,
            *HttpApi.settings(config),
        )

    def where(self) -> str:
        return f"http://{self.daemon.config.http_listen}"

    def app(self) -> web.Application:
        """The application: the API's middlewares first (they leave the dashboard's
        pages alone), then the dashboard's; each part adds its routes."""
        parts: list[Any] = [self.api]
        if self.daemon.config.http_dashboard:
            from orchestrator.dashboard.app import Dashboard

            self.dashboard = Dashboard(self.daemon)
            parts.append(self.dashboard)
        app = web.Application(
            client_max_size=HTTP_BODY_MAX_BYTES,
            middlewares=[m for part in parts for m in part.middlewares],
        )
        for part in parts:
            part.add_routes(app)
        return app

    def _protocol(self) -> asyncio.BaseProtocol:
        if self.open_connections >= HTTP_MAX_CONNECTIONS:
            self.refused_connections += 1
            log.warning("HTTP connection refused: %d already open", HTTP_MAX_CONNECTIONS)
            return _Refuse()
        self.open_connections += 1
        return _Counted(self.runner.server(), self._release)  # type: ignore[misc]

    def _release(self) -> None:
        self.open_connections -= 1

    def start(self) -> None:
        host, _, port = (self.daemon.config.http_listen or "").rpartition(":")
        host = host.strip("[]") or "127.0.0.1"
        # where the backend lets it listen (on Swarm, a wildcard is every address of the
        # daemon but those on the groups' runner network)
        hosts = list(self.daemon.runtime.backend.listen_hosts(host))
        self.loop = asyncio.new_event_loop()
        self.runner = web.AppRunner(
            self.app(), access_log=None, keepalive_timeout=HTTP_HEADER_TIMEOUT_SECONDS
        )
        self.loop.run_until_complete(self.runner.setup())
        self.server = self.loop.run_until_complete(
            self.loop.create_server(
                self._protocol,
                hosts if len(hosts) > 1 else hosts[0],
                int(port),
                family=socket.AF_INET6 if ":" in host else socket.AF_UNSPEC,
                reuse_address=True,
                backlog=HTTP_LISTEN_BACKLOG,
            )
        )
        self.api.start(self.loop)
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="http-channel", daemon=True
        )
        self.thread.start()
        log.info("HTTP API listening on %s", self.daemon.config.http_listen)

    def stop(self, timeout: float = 10.0) -> None:
        """Close the server, waiting at most ``timeout`` seconds for it (TimeoutError
        after that), and end its thread, waiting at most half as long again: a server
        stuck in a callback never holds up the daemon's exit."""
        self.api.stop()

        async def close() -> None:
            self.server.close()
            await self.runner.cleanup()

        future = asyncio.run_coroutine_threadsafe(close(), self.loop)
        try:
            future.result(timeout=timeout)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=timeout / 2)
            if not self.thread.is_alive():
                self.loop.close()
