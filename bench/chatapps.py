"""What the chat apps' benchmarks share: one daemon with an account of the app (against
the app's fake on loopback) and the HTTP API side by side, and the two measures.

inbound: a message offered by the app until it is committed to the queue (the daemon's
``accept`` returns). Floor: POST /v1/groups/{name}/messages until its 202.

outbound: a reply stored (the queue commit and the daemon's change event, as a finished
turn makes them) until the app's send is called. Floor: the same reply stored until a
waiting GET /v1/messages/{id}?wait=... long poll answers.

The daemon's dispatcher is not started, so no turn runs: only the channels are measured.
"""

from __future__ import annotations

import json
import socket
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.harness import Result, Series

if TYPE_CHECKING:
    from orchestrator.config.accounts import ChannelAccount
    from orchestrator.daemon.core import Daemon

HTTP_TOKEN = "c" * 32


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Rig:
    daemon: Daemon
    listen: str  # the HTTP API's address
    account: ChannelAccount
    chat: str  # the app's chat bound to group fam


@contextmanager
def served(account: ChannelAccount, sender: str, chat: str) -> Iterator[Rig]:
    """A daemon with ``account`` (its chat ``chat`` bound to group fam, whose creator is
    ``sender``) and the HTTP API, the account connected."""
    from orchestrator.channels.chatapp import ChatAppChannel
    from orchestrator.config import OrchestratorConfig
    from orchestrator.config.kinds import account_kind
    from orchestrator.daemon.core import Daemon
    from orchestrator.groups import GroupStore
    from orchestrator.groups.config import GroupConfig
    from orchestrator.home import Home
    from orchestrator.runtime.fake import FakeBackend
    from orchestrator.runtime.lifecycle import GroupRuntime
    from orchestrator.service.web import WebServer
    from orchestrator.store.messages import open_queue

    with tempfile.TemporaryDirectory(prefix=f"bench-{account.kind}-") as tmp:
        home = Home(Path(tmp) / "home")
        home.ensure_writable()
        GroupStore(home).add(GroupConfig(name="fam", creators=(sender, "op")))
        config = OrchestratorConfig(
            project="bench",
            mount_allowlist=Path(tmp) / "none",
            channel_accounts={account.name: account},
            http_token=HTTP_TOKEN,
            http_listen=f"127.0.0.1:{_port()}",
        )
        runtime = GroupRuntime(home, config, FakeBackend(), lambda: "img:1", ready=lambda _: True)
        daemon = Daemon(home, config, runtime, open_queue(home), concurrency=1)
        daemon.chats.bind(account.name, chat, "fam")
        channel = ChatAppChannel.of_kind(account_kind(account.kind))(daemon)
        http = WebServer(daemon)
        channel.start()
        http.start()
        deadline = time.monotonic() + 30
        while not (daemon.chats.health(account.name) or {}).get("last_poll"):
            assert time.monotonic() < deadline, f"the {account.kind} channel did not connect"
            time.sleep(0.05)
        try:
            yield Rig(daemon, config.http_listen, account, chat)
        finally:
            channel.stop()
            http.stop()
            daemon.queue.close()


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


def inbound(name: str, title: str, rig: Rig, offer: Callable[[], None], rounds: int) -> Result:
    """``offer`` makes the app send one message in the bound chat; timed until queued."""
    daemon = rig.daemon
    committed = threading.Event()
    stamp = [0.0]
    accept = daemon.accept  # where every channel hands its messages over

    def timed(*args: Any, **kwargs: Any) -> Any:
        message = accept(*args, **kwargs)
        stamp[0] = time.perf_counter()
        committed.set()
        return message

    daemon.accept = timed  # type: ignore[method-assign]

    def app() -> float:
        committed.clear()
        time.sleep(0.002)  # the channel is idle again
        started = time.perf_counter()
        offer()
        assert committed.wait(10), "the message was not queued"
        return stamp[0] - started

    def http() -> float:
        started = time.perf_counter()
        _post(rig.listen, "/v1/groups/fam/messages", {"text": "hello", "sender": "op"})
        return time.perf_counter() - started

    t, f = _alternate(rounds, app, http)
    return Result(
        name,
        Series(f"{title} message offered -> queued", t),
        Series("HTTP POST -> 202 (queued)", f),
        note=f"fake {title} on loopback; the dispatcher is not started",
    )


def outbound(
    name: str, title: str, rig: Rig, sent: threading.Event, last_send: Callable[[], float],
    rounds: int,
) -> Result:  # fmt: skip
    """A reply stored until the app's send is called (``sent`` set, ``last_send`` its
    perf_counter time)."""
    daemon, queue = rig.daemon, rig.daemon.queue

    def fresh(channel: str) -> str:
        message = queue.enqueue(
            group="fam",
            session="s",
            chat=rig.chat,
            thread=None,
            sender="op",
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

    def app() -> float:
        message_id = fresh(rig.account.channel)
        sent.clear()
        started = store(message_id)
        assert sent.wait(10), "nothing sent"
        return last_send() - started

    def http() -> float:
        message_id = fresh("http")
        done: list[float] = []
        poller = threading.Thread(
            target=lambda: (
                _post(rig.listen, f"/v1/messages/{message_id}?wait=10"),
                done.append(time.perf_counter()),
            )
        )
        poller.start()
        time.sleep(0.005)  # the long poll is waiting
        started = store(message_id)
        poller.join(15)
        return done[0] - started

    t, f = _alternate(rounds, app, http)
    return Result(
        name,
        Series(f"reply stored -> {title} send called", t),
        Series("reply stored -> HTTP long poll answered", f),
        note=f"fake {title} on loopback",
    )
