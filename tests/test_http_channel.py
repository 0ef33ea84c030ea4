"""The HTTP API without an engine: status codes through aiohttp's test client, and the
real server against slow headers, connection floods and many long polls."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from orchestrator.channels import http as http_module
from orchestrator.channels.http import bearer_token
from orchestrator.config import OrchestratorConfig, load_config
from orchestrator.daemon.core import Daemon
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from orchestrator.runtime.fake import FakeBackend
from orchestrator.runtime.lifecycle import GroupRuntime
from orchestrator.service import web as web_module
from orchestrator.service.web import WebServer as HttpChannel
from orchestrator.store.messages import open_queue

TOKEN = "t" * 24


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def daemon(home: Path) -> Iterator[Daemon]:
    h = Home(home)
    GroupStore(h).add(GroupConfig(name="fam", creators=("alice",)))
    config = OrchestratorConfig(
        project="t",
        mount_allowlist=home / "none.yaml",
        http_token=TOKEN,
        http_listen=f"127.0.0.1:{_free_port()}",
    )
    runtime = GroupRuntime(h, config, FakeBackend(), lambda: "img:1", ready=lambda _: True)
    d = Daemon(h, config, runtime, open_queue(h), concurrency=1)  # not started: nothing runs
    yield d
    d.queue.close()


def call(
    daemon: Daemon, method: str, path: str, *, server: HttpChannel | None = None, **kwargs: Any
) -> tuple[int, Any]:
    """Status and JSON body of one request, to ``server`` (a new one when not given)."""

    async def go() -> tuple[int, Any]:
        async with TestClient(TestServer((server or HttpChannel(daemon)).app())) as client:
            response = await client.request(method, path, **kwargs)
            return response.status, await response.json()

    return asyncio.run(go())


def _wait_until(predicate: Any, what: str) -> None:
    deadline = time.monotonic() + 30
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _with_bridge(daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, dict[str, str]]:
    """The daemon with a bridge's token ("slack", for senders "slack:"), a server that
    knows it, and the bridge's Authorization header."""
    from dataclasses import replace

    from orchestrator.config.accounts import HttpToken, http_tokens

    monkeypatch.setenv("SLACK_BRIDGE", "s" * 24)
    daemon.config = replace(
        daemon.config,
        http_tokens={"slack": HttpToken("slack", "slack:", token_env="SLACK_BRIDGE")},
    )
    channel = HttpChannel(daemon)
    channel.api.named, problems = http_tokens(daemon.config.http_tokens, None)
    assert problems == []
    return channel, {"Authorization": "Bearer " + "s" * 24}


def test_a_long_poll_waits_at_most_60_seconds() -> None:
    from orchestrator.channels.http import long_poll_seconds

    assert [long_poll_seconds(v) for v in ("0", "5.5", "60", "600", "1e9")] == [
        0.0,
        5.5,
        60.0,
        60.0,
        60.0,
    ]
    assert [long_poll_seconds(v) for v in ("-1", "nan", "soon")] == [None, None, None]


def test_bearer_scheme_is_case_insensitive() -> None:
    assert bearer_token(f"bearer {TOKEN}") == TOKEN == bearer_token(f"BEARER  {TOKEN} ")
    assert bearer_token(f"Basic {TOKEN}") is None and bearer_token("Bearer") is None


@pytest.mark.parametrize(
    ("headers", "body", "status", "error"),
    [
        ({}, {"text": "hi", "sender": "alice"}, 401, "missing or wrong bearer token"),
        ({"Authorization": "Bearer wrong"}, {"text": "x", "sender": "alice"}, 401,
         "missing or wrong bearer token"),
        ({"Authorization": f"bEaReR {TOKEN}"}, {"text": "hi", "sender": "alice"}, 202, None),
        (AUTH, {"text": "hi", "sender": "mallory"}, 403,
         "sender 'mallory' may not talk to group 'fam'"),
        (AUTH, {"text": "hi"}, 400, "text and sender are required strings"),
        (AUTH, {"sender": "alice"}, 400, "text and sender are required strings"),
        (AUTH, {"text": "x" * 32_001, "sender": "alice"}, 400,
         "the message is 32001 characters; at most 32000 are accepted"),
        (AUTH, {"text": "hi", "sender": "alice", "chat": 5}, 400,
         "chat and thread must be strings"),
        (AUTH, {"text": "hi", "sender": "alice", "thread": 5}, 400,
         "chat and thread must be strings"),
        (AUTH, {"text": "hi", "sender": "a" * 201}, 400,
         "sender must be 1..200 characters (got 201 characters)"),
        (AUTH, ["a list"], 400, "the body must be a JSON object"),
    ],
)  # fmt: skip
def test_post_message_status_codes(daemon, headers, body, status, error) -> None:  # type: ignore[no-untyped-def]
    code, answer = call(daemon, "POST", "/v1/groups/fam/messages", json=body, headers=headers)
    assert code == status, answer
    if error:
        assert answer == {"error": error}
        assert daemon.queue.counts() == {}
    else:
        assert answer["state"] == "queued" and set(answer) == {"id", "state"}
        message = daemon.queue.get(answer["id"])
        assert message is not None
        assert (message.chat, message.thread, message.sender, message.channel) == (
            "alice",  # the chat defaults to the sender
            None,
            "alice",
            "http",
        )


@pytest.mark.parametrize(
    ("raw", "status", "error"),
    [
        (b"{not json", 400, "the body is not valid JSON (UTF-8)"),
        (b'{"text": "\\ud800", "sender": "alice"}', 400,
         "the message text is not valid Unicode (a lone surrogate at character 1)"),
        (b"[" * 100_000 + b"]" * 100_000, 413, "request body over 65536 bytes"),
        (b"[" * 20_000 + b"]" * 20_000, 400, "the body is JSON nested too deeply"),
        (b'{"text": "hi", "sender": "alice"}\xff', 400, "the body is not valid JSON (UTF-8)"),
    ],
)  # fmt: skip
def test_bad_bodies_are_4xx_never_500(daemon, raw: bytes, status: int, error: str) -> None:  # type: ignore[no-untyped-def]
    code, answer = call(daemon, "POST", "/v1/groups/fam/messages", data=raw, headers=AUTH)
    assert (code, answer) == (status, {"error": error})
    assert daemon.queue.counts() == {}


def test_a_thread_and_chat_are_kept_and_a_stopping_daemon_refuses(daemon) -> None:  # type: ignore[no-untyped-def]
    body = {"text": "hi", "sender": "alice", "chat": "c1", "thread": "t1"}
    code, answer = call(daemon, "POST", "/v1/groups/fam/messages", json=body, headers=AUTH)
    message = daemon.queue.get(answer["id"])
    assert code == 202 and message is not None and (message.chat, message.thread) == ("c1", "t1")
    daemon.accepting = False
    code, answer = call(daemon, "POST", "/v1/groups/fam/messages", json=body, headers=AUTH)
    assert (code, answer) == (
        503,
        {"error": "the daemon is shutting down and accepts no new messages"},
    )
    assert call(daemon, "GET", "/healthz") == (200, {"ok": True, "accepting": False})


def test_message_lookups_and_unknown_routes(daemon) -> None:  # type: ignore[no-untyped-def]
    body = {"text": "hi", "sender": "alice"}
    _, posted = call(daemon, "POST", "/v1/groups/fam/messages", json=body, headers=AUTH)
    code, found = call(daemon, "GET", f"/v1/messages/{posted['id']}", headers=AUTH)
    assert code == 200 and found == daemon.queue.get(posted["id"]).to_dict()
    assert call(daemon, "GET", f"/v1/messages/{posted['id']}?after=1", headers=AUTH)[0] == 200
    for after in ("one", "-1", "1.5"):
        assert call(daemon, "GET", f"/v1/messages/{posted['id']}?after={after}", headers=AUTH) == (
            400,
            {"error": "after must be a whole number of replies"},
        )
    assert call(daemon, "GET", "/v1/messages/x?wait=abc", headers=AUTH) == (
        400,
        {"error": "wait must be a number of seconds from 0"},
    )
    assert call(daemon, "GET", "/v1/messages/none", headers=AUTH) == (
        404,
        {"error": "no message 'none'"},
    )
    assert call(daemon, "GET", "/v1/nothing", headers=AUTH) == (404, {"error": "Not Found"})
    assert call(daemon, "DELETE", "/v1/groups", headers=AUTH) == (
        405,
        {"error": "Method Not Allowed"},
    )
    assert call(daemon, "GET", "/v1/groups")[0] == 401  # only /healthz is open


def test_a_method_a_path_does_not_take_is_a_405_naming_the_ones_it_does(daemon) -> None:  # type: ignore[no-untyped-def]
    async def go() -> list[tuple[int, Any, str | None]]:
        async with TestClient(TestServer(HttpChannel(daemon).app())) as client:
            out = []
            for method, path in (("TRACE", "/healthz"), ("DELETE", "/v1/groups/fam/messages")):
                response = await client.request(method, path, headers=AUTH)
                out.append((response.status, await response.json(), response.headers.get("Allow")))
            return out

    assert asyncio.run(go()) == [
        (405, {"error": "Method Not Allowed"}, "GET,HEAD"),
        (405, {"error": "Method Not Allowed"}, "POST"),
    ]


def test_a_401_names_the_bearer_scheme(daemon) -> None:  # type: ignore[no-untyped-def]
    async def go() -> list[tuple[int, str | None]]:
        async with TestClient(TestServer(HttpChannel(daemon).app())) as client:
            out = []
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
                response = await client.get("/v1/groups", headers=headers)
                out.append((response.status, response.headers.get("WWW-Authenticate")))
            response = await client.get("/v1/groups", headers=AUTH)
            out.append((response.status, response.headers.get("WWW-Authenticate")))
            return out

    assert asyncio.run(go()) == [(401, "Bearer")] * 3 + [(200, None)]


def test_unknown_group_paused_group_and_message_lookups(daemon) -> None:  # type: ignore[no-untyped-def]
    body = {"text": "hi", "sender": "alice"}
    code, answer = call(daemon, "POST", "/v1/groups/nope/messages", json=body, headers=AUTH)
    assert code == 404 and answer["error"].startswith("no group named 'nope'")
    daemon.queue.pause("fam", "disk", "over its disk limit", refuse_new=True)
    code, answer = call(daemon, "POST", "/v1/groups/fam/messages", json=body, headers=AUTH)
    assert (code, answer) == (503, {"error": "over its disk limit"})
    assert call(daemon, "GET", "/v1/messages/none", headers=AUTH)[0] == 404
    assert call(daemon, "GET", "/v1/messages/x?wait=abc", headers=AUTH)[0] == 400
    assert call(daemon, "GET", "/v1/groups", headers=AUTH)[1] == [
        {"folder": "fam", "name": "fam", "valid": True, "problem": None}
    ]
    broken = daemon.runtime.store.root / "broken"
    broken.mkdir()
    (broken / "group.yaml").write_text("name: x\nsession_mode: sometimes\n")
    listed = call(daemon, "GET", "/v1/groups", headers=AUTH)[1]
    assert listed[0]["folder"] == "broken" and listed[0]["valid"] is False
    assert "session_mode: got 'sometimes'" in listed[0]["problem"]
    assert call(daemon, "GET", "/healthz")[1] == {"ok": True, "accepting": True}


SERVERS: dict[int, HttpChannel] = {}  # the web server of each served daemon


@pytest.fixture
def served(daemon: Daemon, monkeypatch) -> Iterator[tuple[Daemon, int]]:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(web_module, "HTTP_HEADER_TIMEOUT_SECONDS", 1.0)
    monkeypatch.setattr(web_module, "HTTP_MAX_CONNECTIONS", 40)
    channel = SERVERS[id(daemon)] = HttpChannel(daemon)
    channel.start()
    try:
        yield daemon, int(daemon.config.http_listen.rpartition(":")[2])
    finally:
        channel.stop()
        del SERVERS[id(daemon)]


def _request(port: int, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=data, method=method, headers=AUTH
    )
    with urllib.request.urlopen(req, timeout=30) as response:
        return response.status, json.loads(response.read())


def test_partial_headers_are_cut_off(served) -> None:  # type: ignore[no-untyped-def]
    _daemon, port = served
    sock = socket.create_connection(("127.0.0.1", port))
    sock.settimeout(30)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    assert sock.recv(100) == b""  # closed by the server, not by our 30 s timeout
    sock.close()


def test_a_connection_flood_is_capped_and_the_api_recovers(served) -> None:  # type: ignore[no-untyped-def]
    _daemon, port = served
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(40)]
    extra = socket.create_connection(("127.0.0.1", port))
    extra.settimeout(30)
    assert extra.recv(100) == b""  # over the cap: closed at once
    extra.close()
    for sock in idle:
        sock.close()
    deadline = time.monotonic() + 30
    while True:  # the server notices the closed connections
        try:
            assert _request(port, "GET", "/healthz")[0] == 200
            break
        except OSError:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_long_polls_hold_no_threads(served) -> None:  # type: ignore[no-untyped-def]
    daemon, port = served
    first = daemon.submit("fam", "first", chat="c", sender="alice", channel="http")
    results: list[tuple[int, Any]] = []
    polls = [
        threading.Thread(
            target=lambda: results.append(_request(port, "GET", f"/v1/messages/{first.id}?wait=60"))
        )
        for _ in range(30)
    ]
    for poll in polls:
        poll.start()
    channel = SERVERS[id(daemon)]
    deadline = time.monotonic() + 60
    while sum(len(w) for w in channel.api.waiters.values()) < 30:
        assert time.monotonic() < deadline, "the long polls did not all arrive"
        time.sleep(0.02)
    # With 30 polls waiting, a POST to the API is still served at once.
    code, _ = _request(port, "POST", "/v1/groups/fam/messages", {"text": "b", "sender": "alice"})
    assert code == 202 and not results  # every long poll is still waiting
    assert daemon.queue.claim(first.id)
    daemon.queue.complete(first.id, ["done!"])
    daemon._changed(first.id)  # what a worker does after storing the replies
    for poll in polls:
        poll.join(30)
    assert len(results) == 30 and all(r[1]["replies"] == ["done!"] for r in results)


def test_a_long_poll_with_after_returns_at_the_next_reply(served) -> None:  # type: ignore[no-untyped-def]
    daemon, port = served
    message = daemon.submit("fam", "long task", chat="c", sender="alice", channel="http")
    results: list[tuple[int, Any]] = []
    poll = threading.Thread(
        target=lambda: results.append(
            _request(port, "GET", f"/v1/messages/{message.id}?wait=60&after=0")
        )
    )
    poll.start()
    channel = SERVERS[id(daemon)]
    _wait_until(lambda: channel.api.waiters, "the poll is waiting")
    daemon.queue.add_reply(message.id, 0, "working on it")  # what the reply op does
    daemon._changed(message.id)
    poll.join(30)
    [(code, body)] = results
    assert code == 200 and body["state"] == "queued" and body["replies"] == ["working on it"]


def test_a_chats_messages_since_a_time_with_task_runs_marked(daemon) -> None:  # type: ignore[no-untyped-def]
    first = daemon.submit("fam", "one", chat="kitchen", sender="alice", channel="http")
    other = daemon.submit("fam", "elsewhere", chat="hall", sender="alice", channel="http")
    task = daemon.tasks.add(
        group="fam", chat="kitchen", thread=None, channel="http", text="stretch", kind="at",
        spec="1m", tz=None, author="alice", author_trust="creator",
        settings=daemon.runtime.store.load("fam").config.tasks,
    )  # fmt: skip
    [ran] = daemon.scheduler.tick(float(task.next_run or 0))
    path = "/v1/groups/fam/chats/kitchen/messages"
    code, answer = call(daemon, "GET", path, headers=AUTH)
    assert code == 200
    listed = answer["messages"]
    assert [(m["id"], m["task"]) for m in listed] == [(first.id, None), (ran.message_id, task.id)]
    assert listed[1]["replies"] == [] and listed[1]["chat"] == "kitchen"
    assert other.id not in {m["id"] for m in listed}
    ran_at = daemon.queue.get(str(ran.message_id)).created  # type: ignore[union-attr]
    code, answer = call(daemon, "GET", f"{path}?since={ran_at}", headers=AUTH)
    assert [m["id"] for m in answer["messages"]] == [ran.message_id]
    for bad in ("soon", "-1", "nan", "inf"):
        assert call(daemon, "GET", f"{path}?since={bad}", headers=AUTH) == (
            400,
            {"error": "since must be a time in seconds (Unix time) from 0"},
        )
    code, answer = call(daemon, "GET", "/v1/groups/nope/chats/kitchen/messages", headers=AUTH)
    assert code == 404 and answer["error"].startswith("no group named 'nope'")
    assert call(daemon, "GET", path)[0] == 401


def test_a_chats_messages_are_the_newest_hundred(daemon) -> None:  # type: ignore[no-untyped-def]
    sent = [
        daemon.submit("fam", f"m{n}", chat="k", sender="alice", channel="http").id
        for n in range(103)
    ]
    _, answer = call(daemon, "GET", "/v1/groups/fam/chats/k/messages", headers=AUTH)
    assert [m["id"] for m in answer["messages"]] == sent[3:]


def test_a_named_token_speaks_only_for_its_own_senders(daemon, monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    GroupStore(daemon.home).add(
        GroupConfig(name="shop", creators=("telegram:1",), members=("slack:U1", "slack:U2"))
    )
    channel, bridge = _with_bridge(daemon, monkeypatch)

    async def go() -> list[tuple[int, Any]]:
        out = []
        async with TestClient(TestServer(channel.app())) as client:
            for headers, sender in (
                (bridge, "telegram:1"),  # a bridge cannot name a Telegram creator
                (bridge, "operator"),
                (bridge, "slack:U1"),
                (AUTH, "telegram:1"),  # the operator's token may name anyone
            ):
                response = await client.post(
                    "/v1/groups/shop/messages",
                    json={"text": "hi", "sender": sender},
                    headers=headers,
                )
                out.append((response.status, await response.json()))
            operator_message = out[-1][1]["id"]
            response = await client.get(f"/v1/messages/{operator_message}", headers=bridge)
            out.append((response.status, await response.json()))
            response = await client.get("/v1/groups/shop/chats/slack:U1/messages", headers=bridge)
            out.append((response.status, await response.json()))
            response = await client.get("/v1/groups", headers={"Authorization": "Bearer nope"})
            out.append((response.status, await response.json()))
        return out

    with caplog.at_level("WARNING", logger="orchestrator.channels.http"):
        results = asyncio.run(go())
    assert (
        "HTTP token 'slack' named sender 'telegram:1' outside its prefix 'slack:'; refused"
        in caplog.messages
    )
    assert results[0] == (
        403,
        {"error": "token 'slack' may name senders starting with 'slack:' only; got 'telegram:1'"},
    )
    assert results[1][0] == 403
    assert results[2][0] == 202 and results[3][0] == 202
    assert results[4][0] == 404, "a bridge does not read messages of other senders"
    assert [m["sender"] for m in results[5][1]["messages"]] == ["slack:U1"]
    assert results[6][0] == 401
    senders = [r[0] for r in daemon.queue.read("SELECT sender FROM messages ORDER BY seq")]
    assert senders == ["slack:U1", "telegram:1"], "nothing queued for the refused ones"


def test_named_token_prefixes_of_the_daemons_own_channels_are_refused(home: Path) -> None:
    from orchestrator.errors import InvalidConfig

    for prefix, message in (
        ("telegram:", "belongs to a channel of the daemon's own"),
        ("telegram:", "rename the bridge's prefix, such as 'telegram-bridge:'"),
        ("operator:", "belongs to the daemon itself .* such as 'bridge-operator:'"),
        ("Slack", "expected a prefix such as 'rocketchat:'"),
    ):
        (home / "orchestrator.yaml").write_text(
            f"http:\n  tokens:\n    b:\n      token_env: X\n      senders: '{prefix}'\n"
        )
        with pytest.raises(InvalidConfig, match=message):
            load_config(Home(home))


def test_connections_are_counted_refused_over_the_cap_and_released(served, caplog) -> None:  # type: ignore[no-untyped-def]
    daemon, port = served
    channel = SERVERS[id(daemon)]
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(40)]
    _wait_until(lambda: channel.open_connections == 40, "the server counted 40 connections")
    extras = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
    for extra in extras:
        extra.settimeout(30)
        assert extra.recv(100) == b""  # over the cap: closed at once
        extra.close()
    assert channel.refused_connections == 2 and channel.open_connections == 40
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert refusals == ["HTTP connection refused: 40 already open"] * 2
    # The 40th connection, inside the cap, is served.
    last = idle[-1]
    last.settimeout(30)
    last.sendall(
        f"GET /healthz HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode()
    )
    assert last.recv(100).startswith(b"HTTP/1.1 200 ")
    for sock in idle:
        sock.close()
    _wait_until(lambda: channel.open_connections == 0, "every closed connection was released")
    assert channel.refused_connections == 2
    assert _request(port, "GET", "/healthz")[0] == 200


def test_a_long_poll_returns_as_it_is_at_its_wait_and_leaves_no_waiter(served) -> None:  # type: ignore[no-untyped-def]
    daemon, port = served
    message = daemon.submit("fam", "slow", chat="c", sender="alice", channel="http")
    code, body = _request(port, "GET", f"/v1/messages/{message.id}?wait=0.2")
    assert code == 200 and body["state"] == "queued" and body["replies"] == []
    channel = SERVERS[id(daemon)]
    assert channel.api.waiters == {}


def test_a_long_poll_after_n_waits_for_reply_n_plus_one(served) -> None:  # type: ignore[no-untyped-def]
    daemon, port = served
    message = daemon.submit("fam", "long task", chat="c", sender="alice", channel="http")
    daemon.queue.add_reply(message.id, 0, "one")
    results: list[tuple[int, Any]] = []
    poll = threading.Thread(
        target=lambda: results.append(
            _request(port, "GET", f"/v1/messages/{message.id}?wait=60&after=1")
        )
    )
    poll.start()
    channel = SERVERS[id(daemon)]
    _wait_until(lambda: channel.api.waiters.get(message.id), "the poll is waiting")
    daemon._changed(message.id)  # a change that adds no reply does not end the poll
    time.sleep(0.2)
    assert not results and channel.api.waiters.get(message.id)
    daemon.queue.add_reply(message.id, 1, "two")
    daemon._changed(message.id)
    poll.join(30)
    [(code, body)] = results
    assert code == 200 and body["replies"] == ["one", "two"]
    assert channel.api.waiters == {}


@pytest.mark.parametrize("listen", ["[::1]:{port}", ":{port}"])
def test_the_listen_address_forms(daemon: Daemon, listen: str, caplog, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import dataclasses

    from orchestrator.limits import HTTP_LISTEN_BACKLOG

    real = asyncio.BaseEventLoop.create_server
    asked: list[dict[str, Any]] = []

    async def create_server(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[no-untyped-def]
        asked.append(kwargs)
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(asyncio.BaseEventLoop, "create_server", create_server)
    port = _free_port()
    daemon.config = dataclasses.replace(daemon.config, http_listen=listen.format(port=port))
    channel = HttpChannel(daemon)
    caplog.set_level("INFO")
    channel.start()
    try:
        assert f"HTTP API listening on {listen.format(port=port)}" in caplog.messages
        host = "[::1]" if listen.startswith("[") else "127.0.0.1"
        # a daemon thread named for thread dumps, which never holds up the process's exit
        assert (channel.thread.name, channel.thread.daemon) == ("http-channel", True)
        # only the address asked for, never every interface
        assert [s.getsockname()[:2] for s in channel.server.sockets] == [(host.strip("[]"), port)]
        assert [a["backlog"] for a in asked] == [HTTP_LISTEN_BACKLOG]  # waiting to be accepted
        caplog.clear()
        req = urllib.request.Request(f"http://{host}:{port}/healthz")
        with urllib.request.urlopen(req, timeout=30) as response:
            assert response.status == 200
        assert caplog.messages == []  # no access log: requests are not logged line by line
    finally:
        channel.stop()
    assert not channel.thread.is_alive() and channel.loop.is_closed()
    with socket.socket(socket.AF_INET6 if host != "127.0.0.1" else socket.AF_INET) as again:
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind((host.strip("[]"), port))  # nothing listens there after stop
        again.listen()


def test_task_runs_are_marked_on_all_hundred_messages(daemon) -> None:  # type: ignore[no-untyped-def]
    task = daemon.tasks.add(
        group="fam", chat="kitchen", thread=None, channel="http", text="stretch", kind="every",
        spec="1h", tz=None, author="alice", author_trust="creator",
        settings=daemon.runtime.store.load("fam").config.tasks,
    )  # fmt: skip
    ran = []
    for _ in range(60):  # more runs than the task store returns by default (50)
        current = daemon.tasks.get(task.id)
        [run] = daemon.scheduler.tick(float(current.next_run or 0))
        ran.append(run.message_id)
        daemon.queue.claim(run.message_id)
        daemon.queue.complete(run.message_id, ["ok"])
    code, answer = call(daemon, "GET", "/v1/groups/fam/chats/kitchen/messages", headers=AUTH)
    assert code == 200
    listed = answer["messages"]
    assert [m["id"] for m in listed] == ran
    assert all(m["task"] == task.id for m in listed)


def test_a_body_that_stops_arriving_is_a_408(served, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(http_module, "HTTP_BODY_TIMEOUT_SECONDS", 0.5)
    daemon, port = served
    sock = socket.create_connection(("127.0.0.1", port))
    sock.settimeout(30)
    sock.sendall(
        b"POST /v1/groups/fam/messages HTTP/1.1\r\nHost: x\r\n"
        + f"Authorization: Bearer {TOKEN}\r\n".encode()
        + b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
        + b'{"text": "hi", '
    )
    answer = b""
    while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
        chunk = sock.recv(4096)
        if not chunk:
            break
        answer += chunk
    sock.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 ")
    assert json.loads(body) == {"error": "the body did not arrive within 0.5s"}
    assert daemon.queue.read("SELECT COUNT(*) FROM messages") == [(0,)]


def test_a_long_poll_under_a_second_still_waits_for_a_change(daemon) -> None:  # type: ignore[no-untyped-def]
    message = daemon.submit("fam", "hi", chat="c", sender="alice", channel="http")
    channel = HttpChannel(daemon)

    async def go() -> Any:
        channel.api.loop = asyncio.get_running_loop()
        poll = asyncio.create_task(channel.api._wait(message.id, 0.9, after=0))
        for _ in range(3000):  # until the poll waits (or has ended)
            if channel.api.waiters or poll.done():
                break
            await asyncio.sleep(0.001)
        daemon.queue.add_reply(message.id, 0, "soon")
        channel.api._wake(message.id)
        return await poll

    found = asyncio.run(go())
    assert found is not None and found.replies == ("soon",)
    assert channel.api.waiters == {}


def test_named_tokens_from_the_secrets_file_and_the_ones_that_cannot_be_found(
    daemon: Daemon, home: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import dataclasses

    from orchestrator.config.accounts import HttpToken

    monkeypatch.delenv("NO_SUCH_TOKEN_VAR", raising=False)
    secrets = home / "secrets.yaml"
    secrets.write_text("shop-token: " + "s" * 24 + "\n")
    secrets.chmod(0o600)
    daemon.config = dataclasses.replace(
        daemon.config,
        secrets_file=secrets,
        http_tokens={
            "shop": HttpToken("shop", "shop:", token_secret="shop-token"),
            "lost": HttpToken("lost", "lost:", token_env="NO_SUCH_TOKEN_VAR"),
        },
    )
    channel = HttpChannel(daemon)
    with caplog.at_level("WARNING", logger="orchestrator.channels.http"):
        channel.start()
    try:
        assert caplog.messages == [
            "HTTP token 'lost': environment variable NO_SUCH_TOKEN_VAR is not set; that token "
            "is not accepted"
        ]
        port = int(daemon.config.http_listen.rpartition(":")[2])
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/groups",
            headers={"Authorization": "Bearer " + "s" * 24},
        )
        with urllib.request.urlopen(req, timeout=30) as response:
            assert response.status == 200
    finally:
        channel.stop()


def test_waking_a_message_nobody_waits_for_any_more_is_harmless(daemon) -> None:  # type: ignore[no-untyped-def]
    # the last waiter may go between _wake_soon's check (a worker thread) and _wake
    # (the event loop): _wake then finds nobody and does nothing
    channel = HttpChannel(daemon)
    channel.api._wake("no-one-waits")
    event = asyncio.Event()
    channel.api.waiters["m1"] = {event}
    channel.api._wake("m1")
    assert event.is_set()


def test_a_counted_connection_passes_everything_through_and_is_released_once() -> None:
    from orchestrator.service.web import _Counted

    seen: list[tuple[str, Any]] = []
    released: list[int] = []

    class Inner:
        def connection_made(self, transport: Any) -> None:
            seen.append(("made", transport))

        def data_received(self, data: bytes) -> None:
            seen.append(("data", data))

        def eof_received(self) -> bool:
            seen.append(("eof", None))
            return True

        def pause_writing(self) -> None:
            seen.append(("pause", None))

        def resume_writing(self) -> None:
            seen.append(("resume", None))

        def connection_lost(self, exc: Exception | None) -> None:
            seen.append(("lost", exc))
            raise RuntimeError("aiohttp failed while closing")

    counted = _Counted(Inner(), lambda: released.append(1))
    reset = ConnectionResetError("reset by peer")
    counted.connection_made("transport")  # type: ignore[arg-type]
    counted.data_received(b"GET /")
    assert counted.eof_received() is True
    counted.pause_writing()
    counted.resume_writing()
    with pytest.raises(RuntimeError):
        counted.connection_lost(reset)  # the error reaches aiohttp; the count drops anyway
    assert seen == [
        ("made", "transport"),
        ("data", b"GET /"),
        ("eof", None),
        ("pause", None),
        ("resume", None),
        ("lost", reset),
    ]
    assert released == [1]


def test_stop_returns_even_when_the_server_is_stuck(daemon: Daemon) -> None:
    import concurrent.futures
    import dataclasses

    daemon.config = dataclasses.replace(daemon.config, http_listen=f"127.0.0.1:{_free_port()}")
    channel = HttpChannel(daemon)
    channel.start()
    stuck, release = threading.Event(), threading.Event()

    def block() -> None:  # a callback that never yields: the loop can do nothing else
        stuck.set()
        release.wait(60)

    channel.loop.call_soon_threadsafe(block)
    assert stuck.wait(30)
    try:
        with pytest.raises(concurrent.futures.TimeoutError):
            channel.stop(timeout=0.2)  # the close could not run: it says so, and returns
        assert channel.thread.is_alive() and not channel.loop.is_closed()  # left as it is
    finally:
        release.set()
    channel.thread.join(30)  # the loop takes its stop once free
    assert not channel.thread.is_alive()

    async def finish() -> None:  # the close the stuck server could not run, run now
        await asyncio.sleep(0)
        await asyncio.gather(*(t for t in asyncio.all_tasks() if t is not asyncio.current_task()))

    channel.loop.run_until_complete(finish())
    channel.loop.close()


def test_the_host_is_given_to_the_server_as_written(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dataclasses

    asked: list[tuple[str, int]] = []

    async def create_server(self, factory, host, port, **kwargs):  # type: ignore[no-untyped-def]
        asked.append((host, port))
        raise OSError(99, "Cannot assign requested address")  # the name is not resolved here

    monkeypatch.setattr(asyncio.BaseEventLoop, "create_server", create_server)
    daemon.config = dataclasses.replace(daemon.config, http_listen="Xbox.lanX:8787")
    channel = HttpChannel(daemon)
    with pytest.raises(OSError):
        channel.start()
    channel.loop.run_until_complete(channel.runner.cleanup())
    channel.loop.close()
    assert asked == [("Xbox.lanX", 8787)]  # nothing stripped but an IPv6 literal's brackets


def test_stop_waits_ten_seconds_for_the_close_and_half_that_for_the_thread(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits: list[tuple[str, float | None]] = []

    class Closing:
        def result(self, timeout: float | None = None) -> None:
            waits.append(("close", timeout))

    class Thread:
        def join(self, timeout: float | None = None) -> None:
            waits.append(("thread", timeout))

        def is_alive(self) -> bool:
            return True  # still running: its loop is left open

    class Loop:
        stop = None

        def call_soon_threadsafe(self, callback: Any) -> None:
            waits.append(("stop the loop", None))

    def schedule(coro: Any, loop: Any) -> Closing:
        coro.close()
        return Closing()

    monkeypatch.setattr(asyncio, "run_coroutine_threadsafe", schedule)
    channel = HttpChannel(daemon)
    channel.loop, channel.thread = Loop(), Thread()  # type: ignore[assignment]
    channel.stop()
    assert waits == [("close", 10.0), ("stop the loop", None), ("thread", 5.0)]


def test_a_bridges_chats_are_its_own_and_only_the_operator_names_a_channel(
    daemon, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """The second hostile round: a bridge posting into "dashboard", or into a Telegram
    chat's id, lands in a conversation of its own channel; it never joins theirs."""
    from dataclasses import replace

    from orchestrator.config.accounts import ChannelAccount, HttpToken, http_tokens

    GroupStore(daemon.home).add(
        GroupConfig(name="shop", creators=("operator",), members=("slack:mem",))
    )
    monkeypatch.setenv("SLACK_BRIDGE", "s" * 24)
    daemon.config = replace(
        daemon.config,
        http_tokens={"slack": HttpToken("slack", "slack:", token_env="SLACK_BRIDGE")},
        channel_accounts={"fam": ChannelAccount("fam", "telegram", token_env="T")},
    )
    channel = HttpChannel(daemon)
    channel.api.named, _ = http_tokens(daemon.config.http_tokens, None)
    bridge = {"Authorization": "Bearer " + "s" * 24}
    dashboard = daemon.submit(
        "shop", "hi from the operator", chat="dashboard", sender="operator", channel="dashboard"
    )
    telegram = daemon.submit(
        "shop", "hi", chat="-100123", sender="operator", channel="telegram:fam"
    )

    async def go() -> list[tuple[int, Any]]:
        out = []
        async with TestClient(TestServer(channel.app())) as client:
            for headers, body in (
                (bridge, {"text": "x", "sender": "slack:mem", "chat": "dashboard"}),
                (bridge, {"text": "x", "sender": "slack:mem", "chat": "-100123"}),
                (bridge, {"text": "x", "sender": "slack:mem", "chat": "c", "channel": "cli"}),
                (AUTH, {"text": "x", "sender": "operator", "chat": "dashboard",
                        "channel": "dashboard"}),
                (AUTH, {"text": "x", "sender": "operator", "channel": "nowhere"}),
            ):  # fmt: skip
                response = await client.post("/v1/groups/shop/messages", json=body, headers=headers)
                out.append((response.status, await response.json()))
            for headers in (bridge, AUTH):
                response = await client.get(
                    "/v1/groups/shop/chats/dashboard/messages", headers=headers
                )
                out.append((response.status, await response.json()))
        return out

    results = asyncio.run(go())
    into_dashboard = daemon.queue.get(results[0][1]["id"])
    into_telegram = daemon.queue.get(results[1][1]["id"])
    assert into_dashboard is not None and into_telegram is not None
    assert into_dashboard.channel == into_telegram.channel == "http:slack"
    assert into_dashboard.session != dashboard.session
    assert into_telegram.session != telegram.session
    assert results[2] == (
        403,
        {"error": "token 'slack' speaks in its own chats only; it may not name a channel"},
    )
    operator = daemon.queue.get(results[3][1]["id"])
    assert operator is not None and operator.session == dashboard.session  # the operator may
    assert results[4][0] == 400 and "channel must be one of cli, dashboard, http" in str(
        results[4][1]
    )
    bridge_view = [m["id"] for m in results[5][1]["messages"]]
    assert bridge_view == [into_dashboard.id]  # its own chat "dashboard", not the dashboard's
    operator_view = {m["id"] for m in results[6][1]["messages"]}
    assert {dashboard.id, into_dashboard.id, operator.id} <= operator_view
    # the dashboard's chat box shows its own channel's messages only
    shown = daemon.queue.chat_messages("shop", "dashboard", channel="dashboard")
    assert [m.id for m in shown] == [dashboard.id, operator.id]


def test_a_file_a_reply_carries_is_fetched_from_the_outbox(daemon: Daemon) -> None:
    from orchestrator.channels.control import local
    from orchestrator.media.outbox import ReplyFile
    from orchestrator.store.messages import new_message

    message = daemon.queue.put(
        new_message(
            group="fam",
            session="s",
            chat="c",
            thread=None,
            sender="alice",
            trust="creator",
            text="send it",
            channel="http",
        )
    )
    outbox = daemon.home.state_dir / "outbox" / "fam"
    outbox.mkdir(parents=True)
    copy = outbox / f"{message.id}.0.pdf"
    copy.write_bytes(b"%PDF-1.4 the report")
    daemon.queue.add_file_reply(message.id, "here it is", ReplyFile(
        0, "report (1).pdf", "application/pdf", 19, "document", str(copy)))  # fmt: skip
    daemon.queue.complete(message.id, ["done"], first_seq=1)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    status, body = call(daemon, "GET", f"/v1/messages/{message.id}", headers=headers)
    assert status == 200 and body["replies"] == ["here it is", "done"]
    (file,) = body["files"]
    assert file == {"reply": 0, "seq": 0, "name": "report (1).pdf", "mime": "application/pdf",
                    "size": 19, "kind": "document",
                    "path": f"/v1/messages/{message.id}/files/0"}  # fmt: skip

    async def fetch(path: str, auth: dict[str, str]) -> tuple[int, bytes, Any]:
        async with TestClient(TestServer(HttpChannel(daemon).app())) as client:
            response = await client.get(path, headers=auth)
            return response.status, await response.read(), response.headers

    status, data, answer_headers = asyncio.run(fetch(file["path"], headers))
    assert status == 200 and data == b"%PDF-1.4 the report"
    assert answer_headers["Content-Type"] == "application/pdf"
    assert "filename*=UTF-8''report%20%281%29.pdf" in answer_headers["Content-Disposition"]
    assert asyncio.run(fetch(file["path"], {}))[0] == 401
    assert asyncio.run(fetch(f"/v1/messages/{message.id}/files/7", headers))[0] == 404
    # the command line is the host's own: it is shown the outbox path
    assert local(daemon.queue.get(message.id) or message)["files"][0]["path"] == str(copy)
    copy.unlink()
    assert asyncio.run(fetch(file["path"], headers))[0] == 410


def test_a_post_with_wait_answers_with_the_message_once_it_is_done(served) -> None:  # type: ignore[no-untyped-def]
    daemon, port = served
    channel = SERVERS[id(daemon)]
    results: list[tuple[int, Any]] = []
    post = threading.Thread(
        target=lambda: results.append(
            _request(
                port, "POST", "/v1/groups/fam/messages?wait=60", {"text": "hi", "sender": "alice"}
            )
        )
    )
    post.start()
    _wait_until(lambda: channel.api.waiters, "the POST is waiting")
    [message_id] = channel.api.waiters
    assert daemon.queue.claim(message_id)
    daemon._changed(message_id)  # in a turn now: the POST still waits
    time.sleep(0.2)
    assert not results
    daemon.queue.complete(message_id, ["hello alice"])
    daemon._changed(message_id)
    post.join(30)
    [(code, body)] = results
    assert code == 200
    assert (body["id"], body["state"], body["replies"]) == (message_id, "done", ["hello alice"])
    assert channel.api.waiters == {}


def test_a_post_with_wait_answers_as_the_message_is_when_the_wait_runs_out(served) -> None:  # type: ignore[no-untyped-def]
    daemon, port = served
    code, body = _request(
        port, "POST", "/v1/groups/fam/messages?wait=0.2", {"text": "hi", "sender": "alice"}
    )
    assert code == 200 and body["state"] == "queued" and body["replies"] == []
    assert daemon.queue.get(body["id"]).text == "hi"
    assert SERVERS[id(daemon)].api.waiters == {}


@pytest.mark.parametrize("wait", ["-1", "nan", "soon"])
def test_a_post_with_a_bad_wait_is_refused_and_queues_nothing(daemon, wait) -> None:  # type: ignore[no-untyped-def]
    code, answer = call(
        daemon,
        "POST",
        f"/v1/groups/fam/messages?wait={wait}",
        json={"text": "hi", "sender": "alice"},
        headers=AUTH,
    )
    assert (code, answer) == (400, {"error": "wait must be a number of seconds from 0"})
    assert daemon.queue.chat_messages("fam", "alice", 0, 10) == []


def test_a_wait_for_the_answer_reads_the_message_again_only_when_its_turn_has_answered(
    served, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.daemon.core import Cancel, Delivery

    daemon, port = served
    channel = SERVERS[id(daemon)]
    message = daemon.submit("fam", "hi", chat="c", sender="alice", channel="http")
    reads: list[str] = []
    real_get = daemon.queue.get
    monkeypatch.setattr(daemon.queue, "get", lambda mid: reads.append(mid) or real_get(mid))
    results: list[tuple[int, Any]] = []
    polls = [
        threading.Thread(
            target=lambda q=q: results.append(
                _request(port, "GET", f"/v1/messages/{message.id}{q}")
            )
        )
        for q in ("?wait=60", "?wait=60&after=0")
    ]
    for poll in polls:
        poll.start()
    _wait_until(lambda: len(channel.api.waiters.get(message.id, ())) == 2, "both polls wait")
    assert reads == [message.id] * 2
    # Its turn starts: the wait for replies reads it again, the wait for the answer does not.
    assert daemon.queue.claim(message.id)
    delivery = daemon.active[message.id] = Delivery(message, Cancel())
    daemon._changed(message.id)
    _wait_until(lambda: len(reads) == 3, "the wait for replies read it again")
    time.sleep(0.2)
    assert len(reads) == 3 and not results
    # Answered: both read it, and both answer.
    daemon.queue.complete(message.id, ["hello"])
    delivery.answered = True
    daemon._changed(message.id)
    for poll in polls:
        poll.join(30)
    assert sorted(code for code, _ in results) == [200, 200]
    assert all(body["state"] == "done" and body["replies"] == ["hello"] for _, body in results)
    assert len(reads) == 5
    del daemon.active[message.id]


def test_a_file_is_served_to_those_who_may_read_its_message_with_its_own_headers(
    daemon, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """A bridge fetches the files of its own senders' messages only (another's answers
    as an unknown message does); the file goes out with the type the agent gave it, not
    one guessed from the outbox copy's name, as an attachment, never sniffed."""
    from orchestrator.media.outbox import ReplyFile
    from orchestrator.store.messages import new_message

    channel, bridge = _with_bridge(daemon, monkeypatch)
    outbox = daemon.home.state_dir / "outbox" / "fam"
    outbox.mkdir(parents=True)
    ids = {}
    for sender, chan in (("alice", "http"), ("slack:U1", "http:slack")):
        message = daemon.queue.put(
            new_message(group="fam", session=sender, chat="c", thread=None, sender=sender,
                        trust="creator", text="send it", channel=chan)
        )  # fmt: skip
        copy = outbox / f"{message.id}.0.bin"
        copy.write_bytes(b"%PDF-1.4 " + sender.encode())
        daemon.queue.add_file_reply(message.id, "here it is", ReplyFile(
            0, "Café plan.pdf", "application/pdf", 9, "document", str(copy)))  # fmt: skip
        ids[sender] = message.id

    async def go() -> list[tuple[int, bytes, list[tuple[bytes, bytes]]]]:
        out = []
        async with TestClient(TestServer(channel.app())) as client:
            for path, headers in (
                (f"/v1/messages/{ids['slack:U1']}/files/0", bridge),
                (f"/v1/messages/{ids['alice']}/files/0", bridge),  # not its sender's
                (f"/v1/messages/{ids['alice']}/files/0", AUTH),
                ("/v1/messages/nosuch/files/0", AUTH),
                (f"/v1/messages/{ids['alice']}/files/3", AUTH),
            ):
                response = await client.get(path, headers=headers)
                raw = list(response.raw_headers)
                out.append((response.status, await response.read(), raw))
        return out

    own, other, operator, unknown, no_file = asyncio.run(go())
    assert own[:2] == (200, b"%PDF-1.4 slack:U1")
    assert operator[:2] == (200, b"%PDF-1.4 alice")
    for _status, _body, raw in (own, operator):
        assert (b"Content-Type", b"application/pdf") in raw
        assert (b"Content-Disposition", b"attachment; filename*=UTF-8''Caf%C3%A9%20plan.pdf") in raw
        assert (b"X-Content-Type-Options", b"nosniff") in raw
    assert (other[0], json.loads(other[1])) == (404, {"error": f"no message {ids['alice']!r}"})
    assert (unknown[0], json.loads(unknown[1])) == (404, {"error": "no message 'nosuch'"})
    assert (no_file[0], json.loads(no_file[1])) == (
        404,
        {"error": f"message {ids['alice']!r} has no file '3'"},
    )
    (outbox / f"{ids['alice']}.0.bin").unlink()
    status, body = call(daemon, "GET", f"/v1/messages/{ids['alice']}/files/0", headers=AUTH)
    assert (status, body) == (
        410,
        {"error": "Café plan.pdf is no longer kept (files are kept a week)"},
    )


def test_a_chats_messages_are_read_in_the_channel_asked_for_before_the_newest_are_cut(
    daemon, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """A bridge's listing is of its own channel's messages and task runs, the newest of
    them, not the newest of every channel with the others' taken out afterwards (which
    would leave it with none); the operator's is of the channel it names, or of all."""
    monkeypatch.setattr(http_module, "HTTP_CHAT_MESSAGES_MAX", 3)
    GroupStore(daemon.home).add(
        GroupConfig(name="shop", creators=("alice",), members=("slack:U1",))
    )
    channel, bridge = _with_bridge(daemon, monkeypatch)
    settings = daemon.runtime.store.load("shop").config.tasks

    def run(chan: str, author: str, trust: str) -> tuple[int, str]:
        task = daemon.tasks.add(
            group="shop", chat="k", thread=None, channel=chan, text="stretch", kind="at",
            spec="1m", tz=None, author=author, author_trust=trust, settings=settings,
        )  # fmt: skip
        [ran] = daemon.scheduler.tick(float(task.next_run or 0))
        return task.id, str(ran.message_id)

    bridge_task, bridge_run = run("http:slack", "slack:U1", "member")
    posted = daemon.submit("shop", "hi", chat="k", sender="slack:U1", channel="http:slack")
    others = [run("http", "alice", "creator") for _ in range(3)]  # newer, another channel's
    path = "/v1/groups/shop/chats/k/messages"

    def listing(headers: dict[str, str], query: str = "") -> list[tuple[str, int | None]]:
        code, answer = call(daemon, "GET", path + query, server=channel, headers=headers)
        assert code == 200, answer
        return [(m["id"], m["task"]) for m in answer["messages"]]

    own = [(bridge_run, bridge_task), (posted.id, None)]
    assert listing(bridge) == own
    assert listing(bridge, "?channel=http") == own  # a bridge cannot name another channel
    assert listing(AUTH, "?channel=http:slack") == own
    assert listing(AUTH) == [(mid, tid) for tid, mid in others]  # every channel's newest
    assert listing(AUTH, "?channel=") == listing(AUTH)


def test_who_may_name_a_sender_and_read_a_message(daemon, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from aiohttp.test_utils import make_mocked_request

    from orchestrator.store.messages import new_message

    api = _with_bridge(daemon, monkeypatch)[0].api

    def request(token: str) -> Any:
        return make_mocked_request("GET", "/", headers={"Authorization": f"Bearer {token}"})

    operator, bridge, stranger = request(TOKEN), request("s" * 24), request("x" * 24)

    def message(sender: str, channel: str) -> Any:
        return new_message(group="fam", session="s", chat="c", thread=None, sender=sender,
                           trust="member", text="hi", channel=channel)  # fmt: skip

    assert api.may_name(operator, "telegram:1") is True
    assert api.may_name(bridge, "slack:U1") is True
    assert api.may_name(bridge, "telegram:1") is False
    assert api.may_name(stranger, "slack:U1") is False
    assert api.may_read(operator, message("telegram:1", "telegram:fam")) is True
    assert api.may_read(bridge, message("slack:U1", "http:slack")) is True
    assert api.may_read(bridge, message("slack:U1", "http")) is False  # not its channel
    assert api.may_read(bridge, message("alice", "http:slack")) is False  # nor its sender
    assert api.may_read(stranger, message("slack:U1", "http:slack")) is False


def test_the_api_follows_the_daemons_changes_from_start_to_stop(daemon) -> None:  # type: ignore[no-untyped-def]
    api = HttpChannel(daemon).api
    before = list(daemon.listeners)
    loop = asyncio.new_event_loop()
    try:
        api.start(loop)
        assert api.loop is loop and daemon.listeners == [*before, api._wake_soon]
        api.stop()
        assert daemon.listeners == before
    finally:
        loop.close()


def test_only_a_wait_for_replies_wakes_at_every_change(daemon) -> None:  # type: ignore[no-untyped-def]
    """_wait tells the wait for the next change which kind of wait it is: one for
    replies (``after``) wakes at every change, one for the answer only at answers."""
    api = HttpChannel(daemon).api
    woken: list[tuple[str, bool]] = []

    async def next_change(message_id, event, deadline, waits_for_replies) -> None:  # type: ignore[no-untyped-def]
        woken.append((message_id, waits_for_replies))
        assert daemon.queue.claim(message_id)
        daemon.queue.complete(message_id, ["done"])

    api._next_change = next_change  # type: ignore[method-assign]
    for after in (0, None):
        message = daemon.submit("fam", "hi", chat="c", sender="alice", channel="http")
        found = asyncio.run(api._wait(message.id, 60, after))
        assert found is not None and found.state == "done"
        assert woken[-1] == (message.id, after is not None)
    assert len(woken) == 2 and api.waiters == {}
