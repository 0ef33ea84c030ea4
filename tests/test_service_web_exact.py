"""Exact behaviour of the daemon's web server (service/web.py) without a socket: when it
runs, which settings restart it, where it says it listens, and the connection cap (a
fake of aiohttp's runner)."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.limits import HTTP_MAX_CONNECTIONS
from orchestrator.service import web


def config(**given: Any) -> SimpleNamespace:
    values: dict[str, Any] = {
        "http_listen": "127.0.0.1:8080",
        "http_allow_remote": False,
        "http_dashboard": False,
        "http_token": None,
        "http_tokens": {},
        "secrets_file": None,
    }
    values.update(given)
    return SimpleNamespace(**values)


@pytest.mark.parametrize(
    ("given", "enabled"),
    [
        ({}, False),
        ({"http_token": "t"}, True),
        ({"http_tokens": {"ops": "t"}}, True),
    ],
)
def test_the_web_server_runs_when_the_api_has_a_token(given: dict[str, Any], enabled: bool) -> None:
    assert web.WebServer.enabled(SimpleNamespace(config=config(**given))) is enabled


def test_the_settings_that_restart_it_are_the_listener_the_dashboard_and_the_apis() -> None:
    settings = web.WebServer.settings(
        config(
            http_listen="[::1]:9",
            http_allow_remote=True,
            http_dashboard=True,
            http_token="t",
            http_tokens={"b": "2", "a": "1"},
            secrets_file="s.yaml",
        )
    )
    assert settings == ("[::1]:9", True, True, "t", (("a", "1"), ("b", "2")), "s.yaml")


def test_it_says_where_it_listens() -> None:
    server = web.WebServer(SimpleNamespace(config=config(http_listen="0.0.0.0:81")))
    assert server.where() == "http://0.0.0.0:81"
    assert server.name == "http"
    assert (server.dashboard, server.refused_connections, server.open_connections) == (None, 0, 0)


class Transport:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_a_connection_over_the_cap_is_refused_and_counted(caplog: Any) -> None:
    server = web.WebServer(SimpleNamespace(config=config()))
    made: list[object] = []
    server.runner = SimpleNamespace(server=lambda: made.append(1) or "inner")  # type: ignore[assignment]
    server.open_connections = HTTP_MAX_CONNECTIONS - 1
    counted = server._protocol()
    assert isinstance(counted, web._Counted)
    assert counted.inner == "inner"
    assert server.open_connections == HTTP_MAX_CONNECTIONS
    with caplog.at_level(logging.WARNING, logger="orchestrator.channels.http"):
        refused = server._protocol()
    assert isinstance(refused, web._Refuse)
    assert (server.open_connections, server.refused_connections, made) == (
        HTTP_MAX_CONNECTIONS,
        1,
        [1],
    )
    assert caplog.messages == [f"HTTP connection refused: {HTTP_MAX_CONNECTIONS} already open"]
    transport = Transport()
    refused.connection_made(transport)  # type: ignore[arg-type]
    assert transport.closed
    counted.release()
    assert server.open_connections == HTTP_MAX_CONNECTIONS - 1


def test_a_counted_connection_returns_what_its_inner_protocol_says_at_eof() -> None:
    inner = SimpleNamespace(eof_received=lambda: None)
    assert web._Counted(inner, lambda: None).eof_received() is None
    assert isinstance(web._Refuse(), asyncio.Protocol)


# starting: fakes of aiohttp's runner, the event loop and the thread


class FakeRunner:
    def __init__(self, app: Any, **kwargs: Any) -> None:
        self.app = app
        self.kwargs = kwargs

    def setup(self) -> str:
        return "set up"


class FakeLoop:
    def __init__(self) -> None:
        self.done: list[object] = []
        self.servers: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []

    def run_until_complete(self, value: object) -> object:
        self.done.append(value)
        return value

    def create_server(self, factory: Any, *args: Any, **kwargs: Any) -> str:
        self.servers.append((factory, args, kwargs))
        return "server"

    def run_forever(self) -> None:
        raise AssertionError("the thread is not started for real")


class FakeThread:
    made: list[FakeThread] = []

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.started = False
        self.made.append(self)

    def start(self) -> None:
        self.started = True


class FakeApi:
    middlewares = ["api-mw"]

    def __init__(self) -> None:
        self.loops: list[object] = []
        self.apps: list[object] = []

    def add_routes(self, app: Any) -> None:
        self.apps.append(app)

    def start(self, loop: object) -> None:
        self.loops.append(loop)


class Started:
    def __init__(self, monkeypatch: pytest.MonkeyPatch, listen: str, hosts: tuple[str, ...]):
        self.asked: list[str] = []
        self.loop = FakeLoop()
        monkeypatch.setattr(FakeThread, "made", [])
        monkeypatch.setattr(web.web, "AppRunner", FakeRunner)
        monkeypatch.setattr(web.asyncio, "new_event_loop", lambda: self.loop)
        monkeypatch.setattr(web.threading, "Thread", FakeThread)

        def listen_hosts(host: str) -> tuple[str, ...]:
            self.asked.append(host)
            return hosts

        daemon = SimpleNamespace(
            config=config(http_listen=listen),
            runtime=SimpleNamespace(backend=SimpleNamespace(listen_hosts=listen_hosts)),
        )
        self.server = web.WebServer(daemon)
        self.api = FakeApi()
        self.server.api = self.api  # type: ignore[assignment]

    def start(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        self.server.start()
        ((factory, args, kwargs),) = self.loop.servers
        assert factory == self.server._protocol
        return args, kwargs


def test_start_listens_on_the_address_of_the_configuration(
    monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    started = Started(monkeypatch, "127.0.0.2:8787", ("127.0.0.2",))
    with caplog.at_level(logging.INFO, logger="orchestrator.channels.http"):
        args, kwargs = started.start()
    assert started.asked == ["127.0.0.2"]
    assert args == ("127.0.0.2", 8787)
    assert kwargs == {
        "family": web.socket.AF_UNSPEC,
        "reuse_address": True,
        "backlog": web.HTTP_LISTEN_BACKLOG,
    }
    runner = started.server.runner
    assert isinstance(runner, FakeRunner)
    assert runner.kwargs == {
        "access_log": None,
        "keepalive_timeout": web.HTTP_HEADER_TIMEOUT_SECONDS,
    }
    assert started.loop.done == ["set up", "server"]
    assert started.server.server == "server"
    assert started.api.loops == [started.loop]
    assert started.api.apps == [runner.app]
    ((thread,),) = [FakeThread.made]
    assert thread.kwargs == {
        "target": started.loop.run_forever,
        "name": "http-channel",
        "daemon": True,
    }
    assert thread.started
    assert caplog.messages == ["HTTP API listening on 127.0.0.2:8787"]


def test_start_on_an_ipv6_address_listens_on_ipv6(monkeypatch: pytest.MonkeyPatch) -> None:
    started = Started(monkeypatch, "[::1]:9000", ("::1",))
    args, kwargs = started.start()
    assert started.asked == ["::1"]
    assert args == ("::1", 9000)
    assert kwargs["family"] == web.socket.AF_INET6


def test_start_on_a_host_name_asks_for_any_family(monkeypatch: pytest.MonkeyPatch) -> None:
    started = Started(monkeypatch, "localhost:9000", ("localhost",))
    args, kwargs = started.start()
    assert args == ("localhost", 9000)
    assert kwargs["family"] == web.socket.AF_UNSPEC


@pytest.mark.parametrize("hosts", [("10.0.0.1", "10.0.1.1"), ("a", "b", "c")])
def test_start_listens_on_every_host_the_backend_gives(
    monkeypatch: pytest.MonkeyPatch, hosts: tuple[str, ...]
) -> None:
    started = Started(monkeypatch, "0.0.0.0:80", hosts)
    args, _ = started.start()
    assert started.asked == ["0.0.0.0"]
    assert args == (list(hosts), 80)


def test_the_dashboard_adds_its_middlewares_and_routes_after_the_apis(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from orchestrator.dashboard import app as dashboard_app

    class FakeDashboard(FakeApi):
        middlewares = ["dashboard-mw"]

        def __init__(self, daemon: Any) -> None:
            super().__init__()
            self.daemon = daemon

    monkeypatch.setattr(dashboard_app, "Dashboard", FakeDashboard)
    daemon = SimpleNamespace(config=config(http_dashboard=True))
    server = web.WebServer(daemon)
    api = FakeApi()
    server.api = api  # type: ignore[assignment]
    app = server.app()
    assert isinstance(server.dashboard, FakeDashboard)
    assert server.dashboard.daemon is daemon
    assert server.dashboard.apps == [app]
    assert api.apps == [app]
    assert list(app.middlewares) == ["api-mw", "dashboard-mw"]
    assert app._client_max_size == web.HTTP_BODY_MAX_BYTES


def test_without_the_dashboard_only_the_api_adds_routes() -> None:
    server = web.WebServer(SimpleNamespace(config=config(http_dashboard=False)))
    api = FakeApi()
    server.api = api  # type: ignore[assignment]
    app = server.app()
    assert server.dashboard is None
    assert api.apps == [app]
    assert list(app.middlewares) == ["api-mw"]
