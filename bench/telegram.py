"""The Telegram channel's own latency, against a fake Bot API on loopback
(tests/faketelegram.py), beside the HTTP API in the same run and the same daemon.

telegram-inbound: an update offered by the Bot API (pushed into a long poll that is
waiting) until the message is committed to the queue: the long poll's answer, parsing
with python-telegram-bot, binding lookup, the queue commit with its update id. Floor:
POST /v1/groups/{name}/messages until its 202 (the message committed).

telegram-outbound: a reply stored (the queue commit and the daemon's change event, as
a finished turn makes them) until the Bot API's sendMessage is called: the claim commit,
Markdown rendering, the HTTP call. Floor: the same reply stored until a waiting
GET /v1/messages/{id}?wait=... long poll answers.

The daemon's dispatcher is not started, so no turn runs: only the channels are measured.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.harness import Result, Series

INBOUND = "telegram-inbound"
OUTBOUND = "telegram-outbound"
TOKEN = "4242:AAbenchTokenNotARealOne_0123456789"
HTTP_TOKEN = "h" * 32
USER = 1001


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _rig() -> Iterator[dict[str, Any]]:
    from orchestrator.channels.chatapp import ChatAppChannel
    from orchestrator.channels.telegram.kind import KIND, TelegramOptions
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
    from tests.faketelegram import FakeTelegram

    server = FakeTelegram(TOKEN)
    os.environ["BENCH_TELEGRAM_TOKEN"] = TOKEN
    with tempfile.TemporaryDirectory(prefix="bench-telegram-") as tmp:
        home = Home(Path(tmp) / "home")
        home.ensure_writable()
        GroupStore(home).add(GroupConfig(name="fam", creators=(f"telegram:{USER}", "op")))
        account = ChannelAccount(
            "bench",
            "telegram",
            token_env="BENCH_TELEGRAM_TOKEN",
            options=TelegramOptions(api_url=server.url),
            rate_messages=1_000_000,
        )
        config = OrchestratorConfig(
            project="bench",
            mount_allowlist=Path(tmp) / "none",
            channel_accounts={"bench": account},
            http_token=HTTP_TOKEN,
            http_listen=f"127.0.0.1:{_port()}",
        )
        runtime = GroupRuntime(home, config, FakeBackend(), lambda: "img:1", ready=lambda _: True)
        daemon = Daemon(home, config, runtime, open_queue(home), concurrency=1)
        daemon.chats.bind("bench", str(USER), "fam")
        telegram = ChatAppChannel.of_kind(KIND)(daemon)
        http = WebServer(daemon)
        telegram.start()
        http.start()
        deadline = time.monotonic() + 30
        while (daemon.chats.health("bench") or {}).get("state") != "connected":
            assert time.monotonic() < deadline, "the Telegram channel did not connect"
            time.sleep(0.05)
        try:
            yield {"daemon": daemon, "server": server, "http": config.http_listen}
        finally:
            telegram.stop()
            http.stop()
            daemon.queue.close()
            server.close()


def _post(listen: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    request = urllib.request.Request(
        f"http://{listen}{path}",
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {HTTP_TOKEN}", "Content-Type": "application/json"},
        method="GET" if body is None else "POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        answer: dict[str, Any] = json.loads(response.read())
        return answer


def _alternate(
    rounds: int, target: Callable[[], float], floor: Callable[[], float]
) -> tuple[list[float], list[float]]:
    for _ in range(5):  # warm up
        floor()
        target()
    t: list[float] = []
    f: list[float] = []
    for _ in range(rounds):
        f.append(floor())
        t.append(target())
    return t, f


def inbound(quick: bool) -> Result:
    rounds = 100 if quick else 500
    with _rig() as rig:
        daemon, server, listen = rig["daemon"], rig["server"], rig["http"]
        committed = threading.Event()
        stamp = [0.0]
        accept = daemon.accept  # where every channel hands its messages over

        def timed(*args: Any, **kwargs: Any) -> Any:
            message = accept(*args, **kwargs)
            stamp[0] = time.perf_counter()
            committed.set()
            return message

        daemon.accept = timed  # type: ignore[method-assign]
        chat = {"id": USER, "type": "private", "first_name": "Ann"}

        def telegram() -> float:
            committed.clear()
            time.sleep(0.002)  # the long poll is waiting again
            started = time.perf_counter()
            server.say(chat, USER, "hello")
            assert committed.wait(10), "the update was not queued"
            return stamp[0] - started

        def http() -> float:
            started = time.perf_counter()
            _post(listen, "/v1/groups/fam/messages", {"text": "hello", "sender": "op"})
            return time.perf_counter() - started

        t, f = _alternate(rounds, telegram, http)
    return Result(
        INBOUND,
        Series("Telegram update offered -> queued", t),
        Series("HTTP POST -> 202 (queued)", f),
        note="fake Bot API on loopback; the dispatcher is not started",
    )


def outbound(quick: bool) -> Result:
    rounds = 100 if quick else 500
    with _rig() as rig:
        daemon, server, listen = rig["daemon"], rig["server"], rig["http"]
        queue = daemon.queue

        def fresh(channel: str) -> str:
            message = queue.enqueue(
                group="fam",
                session="s",
                chat=str(USER),
                thread=None,
                sender=f"telegram:{USER}",
                trust="creator",
                text="hello",
                channel=channel,
            )
            return message.id

        def store(message_id: str) -> float:
            started = time.perf_counter()
            queue.complete(message_id, ["**Sure**, here is `the answer`."])
            daemon._changed(message_id)
            return started

        def telegram() -> float:
            message_id = fresh("telegram:bench")
            server.send_event.clear()
            started = store(message_id)
            assert server.send_event.wait(10), "no sendMessage"
            return server.last_send - started

        def http() -> float:
            message_id = fresh("http")
            done: list[float] = []
            poller = threading.Thread(
                target=lambda: (
                    _post(listen, f"/v1/messages/{message_id}?wait=10"),
                    done.append(time.perf_counter()),
                )
            )
            poller.start()
            time.sleep(0.005)  # the long poll is waiting
            started = store(message_id)
            poller.join(15)
            return done[0] - started

        t, f = _alternate(rounds, telegram, http)
    return Result(
        OUTBOUND,
        Series("reply stored -> Telegram sendMessage called", t),
        Series("reply stored -> HTTP long poll answered", f),
        note="fake Bot API on loopback",
    )
