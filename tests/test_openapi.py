"""The HTTP API's OpenAPI description (orchestrator/channels/openapi.yaml) against the
code, without an engine: a valid OpenAPI 3.1 document of the package's version, shipped
in the wheel, served to any valid token, naming every route of the API and no other, and
every status each handler can answer. (Its contract test against the running daemon is
tests/test_openapi_contract_docker.py.)"""

from __future__ import annotations

import asyncio
import inspect
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from openapi_spec_validator import validate

import orchestrator
from orchestrator.channels.http import OPENAPI_DESCRIPTION, HttpApi
from orchestrator.config import OrchestratorConfig
from orchestrator.config.accounts import HttpToken, http_tokens
from orchestrator.daemon.core import Daemon
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from orchestrator.runtime.fake import FakeBackend
from orchestrator.runtime.lifecycle import GroupRuntime
from orchestrator.service.web import WebServer
from orchestrator.store.messages import open_queue

TOKEN = "o" * 24
BRIDGE = "b" * 24
ROOT = Path(__file__).resolve().parent.parent
DESCRIPTION: dict[str, Any] = yaml.safe_load(OPENAPI_DESCRIPTION.read_text())
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


@pytest.fixture
def daemon(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Daemon]:
    """A daemon (not started) with the operator's token and a bridge's named token."""
    h = Home(home)
    GroupStore(h).add(GroupConfig(name="fam", creators=("operator",)))
    monkeypatch.setenv("BRIDGE_TOKEN", BRIDGE)
    config = OrchestratorConfig(
        project="t",
        mount_allowlist=home / "none.yaml",
        http_token=TOKEN,
        http_tokens={
            "rocketchat": HttpToken("rocketchat", "rocketchat:", token_env="BRIDGE_TOKEN")
        },
    )
    runtime = GroupRuntime(h, config, FakeBackend(), lambda: "img:1", ready=lambda _: True)
    d = Daemon(h, config, runtime, open_queue(h), concurrency=1)
    yield d
    d.queue.close()


def _operations() -> dict[tuple[str, str], dict[str, Any]]:
    """(METHOD, path) -> the operation, for every operation the description names."""
    return {
        (method.upper(), path): item[method]
        for path, item in DESCRIPTION["paths"].items()
        for method in METHODS
        if method in item
    }


def _routes(daemon: Daemon) -> dict[tuple[str, str], Any]:
    """(METHOD, path template) -> handler, for every route the HTTP API adds (the
    dashboard's pages are not part of it)."""
    app = web.Application()
    HttpApi(daemon).add_routes(app)
    return {
        (route.method, route.resource.canonical): route.handler
        for route in app.router.routes()
        if route.resource is not None
    }


def test_the_description_is_openapi_3_1_of_the_packages_version() -> None:
    validate(DESCRIPTION)  # the reference validator: raises on any violation
    assert DESCRIPTION["openapi"].startswith("3.1.")
    assert DESCRIPTION["info"]["version"] == orchestrator.__version__


def test_every_route_is_described_and_every_operation_is_a_route(daemon: Daemon) -> None:
    routes = _routes(daemon)
    gets = {path for method, path in routes if method == "GET"}
    # aiohttp answers HEAD for every GET (the description says so once, in its info)
    assert {path for method, path in routes if method == "HEAD"} == gets
    described = set(_operations())
    served = {key for key in routes if key[0] != "HEAD"}
    assert served - described == set(), "routes the description does not name"
    assert described - served == set(), "operations that are not routes"
    for (method, path), operation in _operations().items():
        named = set(re.findall(r"{(\w+)}", path))
        parameters = [_resolve(p) for p in operation.get("parameters", [])]
        assert {p["name"] for p in parameters if p["in"] == "path"} == named, (method, path)
        assert operation["operationId"] and operation["responses"], (method, path)


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    """``node``, or what its local ``$ref`` points to."""
    while "$ref" in node:
        found: Any = DESCRIPTION
        for part in node["$ref"].removeprefix("#/").split("/"):
            found = found[part]
        node = found
    return node


def test_every_status_a_handler_answers_is_described(daemon: Daemon) -> None:
    """Every error a handler answers (``_error``) with the error body, 401 for every
    operation that needs a token (the auth middleware), 413 where a body is read, and
    each success status a handler names."""
    for (method, path), handler in _routes(daemon).items():
        if method == "HEAD":
            continue
        operation = _operations()[(method, path)]
        responses = operation["responses"]
        source = inspect.getsource(handler)
        errors = {int(code) for code in re.findall(r"_error\(\s*(\d{3})", source)}
        if operation.get("security", DESCRIPTION["security"]):
            errors.add(401)
        if "request.read()" in source:
            errors.add(413)
        for code in errors:
            assert str(code) in responses, (method, path, code)
            body = _resolve(responses[str(code)])["content"]["application/json"]["schema"]
            assert body == {"$ref": "#/components/schemas/Error"}, (method, path, code)
        for code in re.findall(r"status=(\d{3})", source):
            assert code in responses, (method, path, code)


def _get(daemon: Daemon, path: str, headers: dict[str, str]) -> tuple[int, bytes, Any]:
    channel = WebServer(daemon)
    channel.api.named, problems = http_tokens(daemon.config.http_tokens, None)
    assert problems == []

    async def go() -> tuple[int, bytes, Any]:
        async with TestClient(TestServer(channel.app())) as client:
            response = await client.get(path, headers=headers)
            return response.status, await response.read(), response.headers

    return asyncio.run(go())


def test_the_description_is_served_to_any_valid_token(daemon: Daemon) -> None:
    for token in (TOKEN, BRIDGE):
        status, body, headers = _get(
            daemon, "/v1/openapi.yaml", {"Authorization": f"Bearer {token}"}
        )
        assert (status, body) == (200, OPENAPI_DESCRIPTION.read_bytes())
        assert headers["Content-Type"] == "application/yaml"
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        status, body, _ = _get(daemon, "/v1/openapi.yaml", headers)
        assert (status, body) == (401, b'{"error": "missing or wrong bearer token"}')
    daemon.config = replace(daemon.config, http_tokens={})  # the bridge's token is gone
    assert _get(daemon, "/v1/openapi.yaml", {"Authorization": f"Bearer {BRIDGE}"})[0] == 401


def test_the_description_ships_in_the_wheel(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(tmp_path)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("orchestrator-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        shipped = archive.read("orchestrator/channels/openapi.yaml")
    assert shipped == OPENAPI_DESCRIPTION.read_bytes()
