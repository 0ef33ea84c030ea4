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
