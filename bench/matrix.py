"""The Matrix channel against a real homeserver (Synapse on loopback, as in the tests):
a message a user sends until the bot's reply is visible to that user (the user's own
long-poll sync returns it): the homeserver's delivery to the bot's sync, the queue, the
turn (an echo runner on a real socket: no engine, no model), the reply's send and the
homeserver's delivery back. Floor: the same turn through the HTTP API in the same
daemon: POST the message, then a long poll until its reply is stored.
"""

from __future__ import annotations

import json
import socket
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.harness import Result, Series

NAME = "matrix-round-trip"
HTTP_TOKEN = "m" * 32


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _rig() -> Iterator[dict[str, Any]]:
    import os

    from orchestrator.channels.chatapp import ChatAppChannel
    from orchestrator.channels.matrix.kind import KIND, MatrixOptions
    from orchestrator.config import OrchestratorConfig
    from orchestrator.config.accounts import ChannelAccount
    from orchestrator.daemon.core import Daemon
    from orchestrator.groups import GroupStore
    from orchestrator.groups.config import GroupConfig
    from orchestrator.home import Home
    from orchestrator.runtime.fake import FakeBackend
    from orchestrator.runtime.lifecycle import GroupRuntime
    from orchestrator.service.web import WebServer
    from orchestrator.store.messages import open_queue
    from tests.fakerunner import FakeRunner
    from tests.homeserver import Homeserver, User, synapse_python

    python = synapse_python()
    if python is None:
        raise RuntimeError("no Matrix homeserver: run scripts/setup-synapse first")
    server = Homeserver(python)
    server.start()
    try:
        bot, member = User(server, "benchbot"), User(server, "benchmember")
        os.environ["BENCH_MATRIX_TOKEN"] = bot.token
        with tempfile.TemporaryDirectory(prefix="bench-matrix-") as tmp:
            home = Home(Path(tmp) / "home")
            home.ensure_writable()
            GroupStore(home).add(
                GroupConfig(name="fam", creators=(f"matrix:{member.user_id}", "op"))
            )
            account = ChannelAccount(
                "mx",
                "matrix",
                token_env="BENCH_MATRIX_TOKEN",
                options=MatrixOptions(server.url, bot.user_id, (member.user_id,)),
                rate_messages=1_000_000,
            )
            config = OrchestratorConfig(
                project="bench",
                mount_allowlist=Path(tmp) / "none",
                channel_accounts={"mx": account},
                http_token=HTTP_TOKEN,
                http_listen=f"127.0.0.1:{_port()}",
            )
            runtime = GroupRuntime(
                home, config, FakeBackend(), lambda: "img:1", ready=lambda _: True
            )
            runner = FakeRunner(home.runtime_dir("fam") / "runner.sock")
            daemon = Daemon(home, config, runtime, open_queue(home), concurrency=2)
            daemon.start()
            matrix, http = ChatAppChannel.of_kind(KIND)(daemon), WebServer(daemon)
            matrix.start()
            http.start()
            try:
                room = member.create_room(invite=[bot.user_id])
                deadline = time.monotonic() + 30
                joined = f"/_matrix/client/v3/rooms/{urllib.parse.quote(room, safe='')}"
                while bot.user_id not in member.call("GET", joined + "/joined_members")["joined"]:
                    assert time.monotonic() < deadline, "the bot did not join"
                    time.sleep(0.1)
                daemon.chats.bind("mx", room, "fam", activation="always")
                yield {
                    "member": member,
                    "bot": bot,
                    "room": room,
                    "http": config.http_listen,
                }
            finally:
                matrix.stop()
                http.stop()
                daemon.drain(1)
                runner.close()
                daemon.queue.close()
    finally:
        server.stop()


def _http(listen: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    request = urllib.request.Request(
        f"http://{listen}{path}",
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {HTTP_TOKEN}", "Content-Type": "application/json"},
        method="GET" if body is None else "POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        answer: dict[str, Any] = json.loads(response.read())
        return answer


def run(quick: bool) -> Result:
    rounds = 20 if quick else 100
    with _rig() as rig:
        member, bot, room, listen = rig["member"], rig["bot"], rig["room"], rig["http"]
        since = member.call("GET", "/_matrix/client/v3/sync?timeout=0")["next_batch"]

        def matrix() -> float:
            nonlocal since
            started = time.perf_counter()
            asked = member.say(room, "ping")
            while True:
                answer = member.call(
                    "GET",
                    f"/_matrix/client/v3/sync?timeout=10000&since={urllib.parse.quote(since)}",
                )
                since = answer["next_batch"]
                events = (
                    answer.get("rooms", {}).get("join", {}).get(room, {}).get("timeline", {})
                ).get("events", [])
                for event in events:
                    relates = event.get("content", {}).get("m.relates_to", {})
                    if (
                        event.get("sender") == bot.user_id
                        and relates.get("m.in_reply_to", {}).get("event_id") == asked
                    ):
                        return time.perf_counter() - started

        def http() -> float:
            started = time.perf_counter()
            posted = _http(listen, "/v1/groups/fam/messages", {"text": "ping", "sender": "op"})
            while True:
                message = _http(listen, f"/v1/messages/{posted['id']}?wait=10")
                if message["state"] in ("done", "dead"):
                    return time.perf_counter() - started

        for _ in range(3):
            http()
            matrix()
        t: list[float] = []
        f: list[float] = []
        for _ in range(rounds):
            f.append(http())
            t.append(matrix())
    return Result(
        NAME,
        Series("Matrix: user's message -> reply visible to the user", t),
        Series("HTTP API: POST -> reply stored (long poll)", f),
        note="Synapse on loopback; an echo runner on a real socket (no engine, no model)",
    )
