"""A third chat app, written only against the adapter interface and registered as a kind
from this file: routing, pairing, activation, the bot's mention, claims and health all
come from the chat-app core, with no core module touched. The app itself is in memory
(a queue in, a list out); the daemon, the queue and the runner socket are real."""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from orchestrator.channels import load_channels
from orchestrator.channels.chatapp import AdapterBase, ChatAppChannel, Received
from orchestrator.channels.chatapp.adapter import RETRY
from orchestrator.config import load_config
from orchestrator.config.kinds import (
    AccountKind,
    KindOption,
    KindOptions,
    kind_loggers,
    register_kind,
    reserved_prefixes,
    unregister_kind,
)
from orchestrator.daemon.core import Daemon
from orchestrator.errors import InvalidConfig
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from orchestrator.runtime.fake import FakeBackend
from orchestrator.runtime.lifecycle import GroupRuntime
from orchestrator.store.chats import FAILED, UNKNOWN
from orchestrator.store.messages import open_queue
from orchestrator.validate import MappingReader
from tests.chatrig import wait_for
from tests.fakerunner import FakeRunner


@dataclass
class LoopApp:
    """The chat service: what people said, what the bot sent, what a send will raise."""

    inbox: queue.Queue[dict[str, Any]] = field(default_factory=queue.Queue)
    sent: list[dict[str, Any]] = field(default_factory=list)
    failures: list[BaseException] = field(default_factory=list)
    typing: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    said_count: int = 0

    def say(self, chat: str, user: str, text: str, *, group: bool = False, **extra: Any) -> str:
        with self.lock:
            self.said_count += 1
            number = str(self.said_count)
        self.inbox.put(
            {"chat": chat, "user": user, "text": text, "id": number, "group": group, **extra}
        )
        return number

    def texts(self, chat: str) -> list[str]:
        with self.lock:
            return [s["text"] for s in self.sent if s["chat"] == chat]


APPS: dict[str, LoopApp] = {}


@dataclass(frozen=True)
class LoopOptions(KindOptions):
    greeting: str = "hi"


class LoopAdapter(AdapterBase):
    chat_word = "loop"

    def __init__(self, core: Any) -> None:
        super().__init__(core)
        self.app = APPS[core.name]

    async def connect(self) -> str:
        return "@loopbot"

    async def receive(self) -> None:
        while True:
            try:
                item = await asyncio.to_thread(self.app.inbox.get, True, 0.05)
            except queue.Empty:
                continue
            self.core.polled()
            await self.core.route(
                Received(
                    chat=item["chat"],
                    sender=item["user"],
                    text=item["text"],
                    message_id=item["id"],
                    event_id=f"e{item['id']}",
                    group_chat=item["group"],
                    raw=item,
                )
            )

    async def send(
        self, chat: str, thread: str | None, reply_to: str | None, text: str, key: str
    ) -> list[str]:
        with self.app.lock:
            if self.app.failures:
                raise self.app.failures.pop(0)
            self.app.sent.append({"chat": chat, "reply_to": reply_to, "text": text, "key": key})
            return [f"s{len(self.app.sent)}"]

    async def typing(self, chat: str, thread: str | None, on: bool) -> None:
        self.app.typing.append(f"{chat}:{on}")

    def classify(self, exc: BaseException) -> str:
        if isinstance(exc, ConnectionRefusedError):
            return RETRY
        return UNKNOWN if isinstance(exc, TimeoutError) else FAILED

    def addressed(self, received: Received) -> bool:
        return "@loopbot" in received.text.lower()

    def mention_forms(self, received: Received) -> tuple[str, ...]:
        return ("@loopbot",)

    async def attachment(self, received: Received, group: str) -> Any:
        """The older form: a line the adapter wrote itself (an app not yet moved over);
        or a file stored and described, for the core to name."""
        if received.raw.get("line"):
            return received.raw["line"]
        if received.raw.get("file") is not None:
            from orchestrator.channels.chatapp.files import store_received

            root = self.core.daemon.runtime.store.root
            return store_received(
                root, group, received.raw["file"], original="notes.bin", mime=None
            )
        return None


def parse(item: MappingReader) -> LoopOptions:
    return LoopOptions(item.text("greeting", "hi", max_chars=20))


KIND = AccountKind(
    name="loopchat",
    title="Loop",
    summary="Loop: an in-memory chat app of the tests.",
    options=(KindOption("greeting", "TEXT", "Loop: how the bot greets."),),
    parse=parse,
    adapter="tests.test_chatapp:LoopAdapter",
    loggers=("loopchat.client",),
)


@pytest.fixture(autouse=True)
def loop_kind() -> Iterator[None]:
    register_kind(KIND)
    yield
    unregister_kind(KIND.name)


@dataclass
class Rig:
    daemon: Daemon
    channel: Any
    app: LoopApp
    runner: FakeRunner


@pytest.fixture
def rig(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    monkeypatch.setattr("orchestrator.channels.chatapp.core.CHANNEL_SWEEP_SECONDS", 0.05)
    monkeypatch.setenv("LOOP_TOKEN", "loop-token-value")
    h = Home(home)
    GroupStore(h).add(GroupConfig(name="fam", creators=("loopchat:ann",)))
    h.config_file.write_text(
        "channels:\n  lb:\n    kind: loopchat\n    token_env: LOOP_TOKEN\n"
        "    greeting: hello\n    sender_rate: {messages: 3, per: 10m}\n"
    )
    config = load_config(h)
    APPS["lb"] = app = LoopApp()
    runtime = GroupRuntime(h, config, FakeBackend(), lambda: "img:1", ready=lambda _: True)
    runner = FakeRunner(h.runtime_dir("fam") / "runner.sock")
    daemon = Daemon(h, config, runtime, open_queue(h), concurrency=2)
    daemon.start()
    [cls] = [c for c in load_channels() if c.name == "loopchat"]
    assert cls.enabled(daemon)
    channel = cls(daemon)
    channel.start()
    yield Rig(daemon, channel, app, runner)
    channel.stop()
    daemon.drain(1)
    runner.close()
    daemon.queue.close()


def test_a_kind_registered_outside_the_package_is_configured_like_the_built_in_ones(
    home: Path,
) -> None:
    h = Home(home)
    h.config_file.write_text("channels:\n  lb:\n    kind: loopchat\n    token_env: X\n")
    account = load_config(h).channel_accounts["lb"]
    assert (account.options, account.channel, account.prefix) == (
        LoopOptions("hi"),
        "loopchat:lb",
        "loopchat:",
    )
    assert account.to_dict()["greeting"] == "hi"
    h.config_file.write_text(
        "channels:\n  lb:\n    kind: loopchat\n    token_env: X\n    api_url: x\n"
    )
    with pytest.raises(InvalidConfig, match="unknown key; valid keys here: greeting, kind"):
        load_config(h)
    h.config_file.write_text(
        "http:\n  tokens:\n    b:\n      token_env: X\n      senders: 'loopchat:'\n"
    )
    with pytest.raises(InvalidConfig, match="belongs to a channel of the daemon's own"):
        load_config(h)
    assert "loopchat:" in reserved_prefixes() and "loopchat.client" in kind_loggers()
    assert ChatAppChannel.of_kind(KIND).name == "loopchat"


def test_an_unbound_chat_gets_one_pairing_code_and_reaches_nothing(rig: Rig) -> None:
    rig.app.say("room1", "bob", "hello?")
    rig.app.say("room1", "bob", "anyone?")
    wait_for(lambda: rig.app.texts("room1"))
    time.sleep(0.3)
    [notice] = rig.app.texts("room1")
    assert notice.startswith("This loop is not connected to an assistant yet. Pairing code: ")
    [pairing] = rig.daemon.chats.pairings()
    assert (pairing.account, pairing.chat, pairing.requested_by) == ("lb", "room1", "loopchat:bob")
    assert rig.runner.turns == []


def test_a_bound_chat_is_answered_in_reply_and_health_is_kept(rig: Rig) -> None:
    rig.daemon.chats.bind("lb", "dm-ann", "fam")
    asked = rig.app.say("dm-ann", "ann", "what is for dinner?")
    wait_for(lambda: rig.app.texts("dm-ann"))
    [reply] = rig.app.sent
    assert (reply["text"], reply["reply_to"]) == ("echo: what is for dinner?", asked)
    [turn] = rig.runner.turns
    assert (turn["sender"], turn["trust"], turn["channel"]) == (
        "loopchat:ann",
        "creator",
        "loopchat:lb",
    )
    health = wait_for(lambda: (h := rig.daemon.chats.health("lb")) and h["messages_out"] == 1 and h)
    assert (health["state"], health["messages_in"]) == ("connected", 1)


def test_activation_and_the_bots_mention_in_a_group_chat(rig: Rig) -> None:
    rig.daemon.chats.bind("lb", "family", "fam", activation="mention")
    rig.app.say("family", "ann", "just talking", group=True)
    rig.app.say("family", "ann", "@LoopBot: what is up?", group=True)
    wait_for(lambda: rig.app.texts("family"))
    time.sleep(0.3)
    assert [(t["text"], t["said"]) for t in rig.runner.turns] == [
        ("what is up?", "@LoopBot: what is up?")
    ]
    assert rig.app.texts("family") == ["echo: what is up?"]


def test_the_senders_rate_is_kept_and_told_once(rig: Rig) -> None:
    rig.daemon.chats.bind("lb", "dm-bob", "fam")
    for number in range(5):
        rig.app.say("dm-bob", "bob", f"message {number}")
    wait_for(lambda: len(rig.app.texts("dm-bob")) == 4)
    time.sleep(0.3)
    texts = rig.app.texts("dm-bob")
    assert sum("faster than I can take them" in t for t in texts) == 1
    assert len(rig.runner.turns) == 3


def test_a_send_that_surely_failed_is_sent_later_and_one_that_may_have_arrived_never(
    rig: Rig,
) -> None:
    rig.daemon.chats.bind("lb", "dm-ann", "fam")
    rig.app.failures.append(ConnectionRefusedError("refused"))
    rig.app.say("dm-ann", "ann", "one")
    wait_for(lambda: rig.app.texts("dm-ann") == ["echo: one"])  # released, sent again
    rig.app.failures.append(TimeoutError("no answer"))
    rig.app.say("dm-ann", "ann", "two")
    message = wait_for(
        lambda: next((m for m in rig.daemon.queue.recent(10) if m.text == "two"), None)
    )
    wait_for(lambda: rig.daemon.chats.sent(message.id).get(0, (None,))[0] == UNKNOWN)
    time.sleep(0.3)  # several sweeps: none sends it again
    assert rig.app.texts("dm-ann") == ["echo: one"]
    health = rig.daemon.chats.health("lb") or {}
    assert "no answer from Loop" in str(health.get("last_error"))


def test_an_adapter_may_still_answer_a_line_or_describe_a_file(rig: Rig) -> None:
    rig.daemon.chats.bind("lb", "dm-ann", "fam")
    rig.app.say("dm-ann", "ann", "see this", line="[attachment: written by the app]")
    wait_for(lambda: rig.runner.turns)
    assert rig.runner.turns[0]["text"] == "see this\n\n[attachment: written by the app]"
    rig.app.say("dm-ann", "ann", "", file=b"\x00\x01")
    wait_for(lambda: len(rig.runner.turns) == 2)
    text = rig.runner.turns[1]["text"]
    assert text.startswith("[attachment: files/inbox/") and '(other "notes.bin", unknown' in text


def test_an_app_that_cannot_send_files_says_so_in_the_chat(rig: Rig, home: Path) -> None:
    from orchestrator.media.outbox import ReplyFile
    from orchestrator.store.messages import new_message

    rig.daemon.chats.bind("lb", "dm-ann", "fam")
    queue = rig.daemon.queue
    message = queue.put(new_message(group="fam", session="s", chat="dm-ann", thread=None,
                                    sender="loopchat:ann", trust="creator", text="x",
                                    channel="loopchat:lb"))  # fmt: skip
    copy = home / "state" / "outbox" / "fam" / f"{message.id}.0.pdf"
    copy.parent.mkdir(parents=True)
    copy.write_bytes(b"%PDF")
    file = ReplyFile(0, "report.pdf", "application/pdf", 4, "document", str(copy))
    queue.add_file_reply(message.id, "the report", file)
    queue.complete(message.id, [], first_seq=1)
    rig.daemon._changed(message.id)
    [line] = wait_for(lambda: rig.app.texts("dm-ann"))
    assert line == (
        "the report\n\n[a file was meant for you here, report.pdf (4 B), but I cannot send "
        "files in Loop]"
    )
    # the chat shows the line before the delivery is recorded as sent
    wait_for(lambda: rig.daemon.chats.sent(message.id)[0][0] == "sent")
