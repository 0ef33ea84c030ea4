"""The chat-app core on its own, exactly: one account with a recording adapter, a
recording chat store and queue, and a clock of its own. Routing (pairing, activation,
the sender's rate, the mention, files, the size, the daemon's refusals), notices,
delivery (claims, resends, the dead-letter notice, files, each way a send ends), typing,
connecting with backoff, the sweep and health: the calls made, the words sent and the
lines logged."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar

import pytest

from orchestrator.channels.chatapp import core
from orchestrator.channels.chatapp.adapter import RETRY, OutgoingFile, Received, Refusal
from orchestrator.channels.chatapp.core import (
    DEAD_NOTICE,
    TYPING_MAX,
    AdapterBase,
    Backoff,
    ChatAccount,
    Health,
    SenderRate,
    cannot_send_file,
    describe,
    files_of,
    send_key,
)
from orchestrator.errors import (
    BadInput,
    DaemonStopping,
    GroupNotFound,
    GroupPaused,
    OrchestratorError,
    SenderRefused,
)
from orchestrator.limits import (
    CHANNEL_BACKOFF_MAX_SECONDS,
    CHANNEL_KEEP_SECONDS,
    CHANNEL_SWEEP_SECONDS,
    INBOUND_TEXT_MAX_CHARS,
)
from orchestrator.media.inbox import StoredFile
from orchestrator.media.outbox import ReplyFile, file_line
from orchestrator.redact import register_secret
from orchestrator.store.chats import FAILED, SENT, UNKNOWN, Binding, Pairing
from orchestrator.store.messages import DEAD, DONE, INFLIGHT, Message

T = TypeVar("T")
LOGGER = "orchestrator.channels"
pause = asyncio.sleep  # a test's own yield to the loop, apart from the sleeps it records
NOW = 1_000_000.0  # the account's wall clock (time.time)


class Clock:
    """What the core reads of ``time``: a wall clock, a monotonic one, nanoseconds."""

    def __init__(self) -> None:
        self.wall = NOW
        self.mono = 500.0
        self.ns = 42

    def time(self) -> float:
        return self.wall

    def monotonic(self) -> float:
        return self.mono

    def time_ns(self) -> int:
        return self.ns


class Chats:
    """The chat store: answers set by the test, every call recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.bound: dict[str, Binding] = {}
        self.pairing: Pairing | None = None
        self.fresh = True
        self.refused_claims: set[int] = set()
        self.sent_states: dict[int, tuple[str, list[str]]] = {}
        self.origin: tuple[str, str | None] | None = None
        self.stale: list[tuple[str, int]] = []
        self.in_flight: list[tuple[str, int]] = []
        self.unsent_ids: list[str] = []
        self.state: dict[tuple[str, str], str] = {}
        self.set_state_error: Exception | None = None

    def binding(self, account: str, chat: str) -> Binding | None:
        self.calls.append(("binding", account, chat))
        return self.bound.get(chat)

    def request_pairing(
        self, account: str, chat: str, *, title: str | None, requested_by: str
    ) -> tuple[Pairing | None, bool]:
        self.calls.append(("request_pairing", account, chat, title, requested_by))
        return self.pairing, self.fresh

    def inbound_claim(self, account: str, event_id: str, chat: str, message_id: str) -> str:
        self.calls.append(("inbound_claim", account, event_id, chat, message_id))
        return f"claim-{event_id}"

    def unconfirmed(self, account: str, before: float | None = None) -> list[tuple[str, int]]:
        self.calls.append(("unconfirmed", account, before))
        return self.stale

    def in_flight_sends(self, account: str) -> list[tuple[str, int]]:
        self.calls.append(("in_flight_sends", account))
        return self.in_flight

    def set_state(self, account: str, key: str, value: str) -> None:
        if self.set_state_error is not None:
            raise self.set_state_error
        self.state[(account, key)] = value

    def unsent(self, channel: str, since: float) -> list[str]:
        self.calls.append(("unsent", channel, since))
        return self.unsent_ids

    def inbound_of(self, message_id: str) -> tuple[str, str | None] | None:
        self.calls.append(("inbound_of", message_id))
        return self.origin

    def sent(self, message_id: str) -> dict[int, tuple[str, list[str]]]:
        self.calls.append(("sent", message_id))
        return self.sent_states

    def claim_send(self, message_id: str, seq: int, account: str) -> bool:
        self.calls.append(("claim_send", message_id, seq, account))
        return seq not in self.refused_claims

    def release_send(self, message_id: str, seq: int) -> None:
        self.calls.append(("release_send", message_id, seq))

    def finish_send(
        self,
        message_id: str,
        seq: int,
        outcome: str,
        *,
        error: str | None = None,
        platform_ids: list[str] | None = None,
    ) -> None:
        self.calls.append(("finish_send", message_id, seq, outcome, error, platform_ids))

    def named(self, name: str) -> list[tuple[Any, ...]]:
        return [call for call in self.calls if call[0] == name]

    def health(self) -> dict[str, Any]:
        return dict(json.loads(self.state[("lb", "health")]))


class Queue:
    """The message queue: messages by id, their replies and reply files."""

    def __init__(self) -> None:
        self.messages: dict[str, Message] = {}
        self.replies: dict[str, list[tuple[int, str]]] = {}
        self.files: dict[str, dict[int, ReplyFile]] = {}
        self.calls: list[tuple[str, str]] = []

    def get(self, message_id: str) -> Message | None:
        self.calls.append(("get", message_id))
        return self.messages.get(message_id)

    def replies_of(self, message_id: str) -> list[tuple[int, str]]:
        self.calls.append(("replies_of", message_id))
        return list(self.replies.get(message_id, []))

    def files_of(self, message_id: str) -> dict[int, ReplyFile]:
        self.calls.append(("files_of", message_id))
        return self.files.get(message_id, {})


class Loop:
    """The event loop as the core uses it from other threads: calls recorded."""

    def __init__(self) -> None:
        self.soon: list[tuple[Any, ...]] = []
        self.later: list[tuple[Any, ...]] = []

    def call_soon_threadsafe(self, callback: Callable[..., Any], *args: Any) -> None:
        self.soon.append((callback, *args))

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> None:
        self.later.append((delay, callback, *args))


class Adapter(AdapterBase):
    """A chat app that records what it is asked and answers what the test sets."""

    chat_word = "loop"

    def __init__(self, core: Any) -> None:
        super().__init__(core)
        self.sends: list[tuple[Any, ...]] = []
        self.file_sends: list[tuple[Any, ...]] = []
        self.typed: list[tuple[str, str | None, bool]] = []
        self.send_errors: list[BaseException] = []
        self.typing_errors: list[BaseException] = []
        self.connect_errors: list[BaseException] = []
        self.stored: Any = None
        self.is_addressed = False
        self.asked: list[tuple[Any, ...]] = []  # addressed, mention_forms, attachment
        self.chats_refused: set[str] = set()
        self.received_loop = False
        self.receive_until: asyncio.Event | None = None  # receive returns at once
        self.closed = False
        self.close_error: Exception | None = None

    async def connect(self) -> str:
        if self.connect_errors:
            raise self.connect_errors.pop(0)
        return "@loopbot"

    async def receive(self) -> None:
        self.received_loop = True
        if self.receive_until is not None:
            await self.receive_until.wait()

    async def send(
        self, chat: str, thread: str | None, reply_to: str | None, text: str, key: str
    ) -> list[str]:
        if self.send_errors:
            raise self.send_errors.pop(0)
        self.sends.append((chat, thread, reply_to, text, key))
        return [f"p{len(self.sends)}"]

    async def send_file(
        self, chat: str, thread: str | None, reply_to: str | None, file: OutgoingFile, key: str
    ) -> list[str]:
        if self.send_errors:
            raise self.send_errors.pop(0)
        self.file_sends.append((chat, thread, reply_to, file, key))
        return ["f1", "f2"]

    async def typing(self, chat: str, thread: str | None, on: bool) -> None:
        self.typed.append((chat, thread, on))
        if self.typing_errors:
            raise self.typing_errors.pop(0)

    def classify(self, exc: BaseException) -> str:
        if isinstance(exc, ConnectionRefusedError):
            return RETRY
        return UNKNOWN if isinstance(exc, TimeoutError) else FAILED

    def addressed(self, received: Received) -> bool:
        self.asked.append(("addressed", received))
        return self.is_addressed

    def mention_forms(self, received: Received) -> tuple[str, ...]:
        self.asked.append(("mention_forms", received))
        return ("@loopbot",)

    def may_send(self, chat: str) -> bool:
        return chat not in self.chats_refused

    async def attachment(self, received: Received, group: str) -> Any:
        self.asked.append(("attachment", received, group))
        if isinstance(self.stored, OSError):
            raise self.stored
        return self.stored

    async def close(self) -> None:
        self.closed = True
        if self.close_error is not None:
            raise self.close_error


class Plain(AdapterBase):
    """An app that keeps every default of AdapterBase and only sends text."""

    def __init__(self, core: Any) -> None:
        super().__init__(core)
        self.sends: list[tuple[Any, ...]] = []

    async def send(
        self, chat: str, thread: str | None, reply_to: str | None, text: str, key: str
    ) -> list[str]:
        self.sends.append((chat, thread, reply_to, text, key))
        return ["p1"]


class Rig:
    def __init__(
        self,
        adapter: str = "Adapter",
        rate: tuple[int, int] = (2, 600),
        groups: Path = Path("/nonexistent/groups"),
    ) -> None:
        self.chats = Chats()
        self.queue = Queue()
        self.loop = Loop()
        self.accepted: list[tuple[Any, Any]] = []
        self.accept_error: BaseException | None = None
        self.queued_before: tuple[StoredFile, ...] | None = None  # a repeat's first files
        daemon = SimpleNamespace(
            chats=self.chats,
            queue=self.queue,
            accept=self.accept,
            runtime=SimpleNamespace(store=SimpleNamespace(root=groups)),
        )
        account = SimpleNamespace(
            name="lb",
            channel="loopchat:lb",
            prefix="loopchat:",
            rate_messages=rate[0],
            rate_seconds=rate[1],
        )
        kind = SimpleNamespace(adapter=f"tests.test_chatapp_core_exact:{adapter}", title="Loop")
        self.account = ChatAccount(daemon, account, self.loop, kind)  # type: ignore[arg-type]

    @property
    def adapter(self) -> Adapter:
        adapter = self.account.adapter
        assert isinstance(adapter, Adapter)
        return adapter

    def accept(self, inbound: Any, claim: Any) -> Any:
        if self.accept_error is not None:
            raise self.accept_error
        self.accepted.append((inbound, claim))
        if self.queued_before is not None:
            return SimpleNamespace(media=self.queued_before)
        return SimpleNamespace(media=inbound.media)

    def bind(self, chat: str = "c1", activation: str = "always", trust: str = "member") -> None:
        self.chats.bound[chat] = Binding("lb", chat, "fam", activation, trust, None, 0.0)

    def message(self, state: str = DONE, **extra: Any) -> Message:
        fields: dict[str, Any] = {
            "id": "m1",
            "group": "fam",
            "session": "s",
            "chat": "c1",
            "thread": "t1",
            "sender": "loopchat:ann",
            "trust": "member",
            "text": "hi",
            "channel": "loopchat:lb",
            "state": state,
        }
        message = Message(**{**fields, **extra})
        self.queue.messages[message.id] = message
        return message


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(core, "time", fake)
    return fake


@pytest.fixture(autouse=True)
def every_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, LOGGER)


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """asyncio.sleep made instant and recorded; the tenth in a test cancels its task."""
    asked: list[float] = []
    real = asyncio.sleep

    async def sleep(seconds: float, result: Any = None) -> Any:
        asked.append(seconds)
        if len(asked) >= 10:
            raise asyncio.CancelledError
        return await real(0, result)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    yield asked


def run(make: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await make()

    return asyncio.run(main())


async def until(condition: Callable[[], object]) -> None:
    """Let the loop run until ``condition`` holds (at most about five seconds)."""
    for turn in range(5000):
        if condition():
            return
        await pause(0 if turn < 100 else 0.001)
    raise AssertionError("the condition was not reached")


def received(text: str = "hello", **extra: Any) -> Received:
    fields: dict[str, Any] = {
        "chat": "c1",
        "sender": "ann",
        "text": text,
        "message_id": "41",
        "event_id": "e41",
        "thread": "t1",
    }
    return Received(**{**fields, **extra})


def lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]


# the pure parts


def test_a_send_key_names_the_message_the_reply_and_the_piece() -> None:
    assert send_key("abc", 3) == "orch.abc.3.0"
    assert send_key("abc", 0, 2) == "orch.abc.0.2"
    assert send_key("abc", -1) == "orch.abc.m1.0"
    assert send_key("abc", -12, 1) == "orch.abc.m12.1"


def test_the_sender_rate_allows_its_messages_then_tells_once() -> None:
    rate = SenderRate(2, 60.0)
    assert rate.check("fam", "ann", 0.0) == (True, False)
    assert rate.check("fam", "ann", 1.0) == (True, False)
    assert rate.check("fam", "ann", 2.0) == (False, True)
    assert rate.check("fam", "ann", 3.0) == (False, False)
    assert rate.check("fam", "bob", 3.0) == (True, False)  # another sender
    assert rate.check("pets", "ann", 3.0) == (True, False)  # another group
    assert rate.check("fam", "ann", 59.5) == (False, False)  # the first is 59.5 s old
    assert rate.check("fam", "ann", 60.0) == (True, False)  # 60 s old: it no longer counts
    assert rate.check("fam", "ann", 60.5) == (False, True)  # over again: told again
    assert list(rate.seen[("fam", "ann")]) == [1.0, 60.0]


def test_a_message_refused_is_not_counted() -> None:
    rate = SenderRate(1, 10.0)
    assert rate.check("g", "s", 0.0) == (True, False)
    for now in (1.0, 2.0, 9.0):
        assert rate.check("g", "s", now)[0] is False
    assert rate.check("g", "s", 10.0) == (True, False)


def test_the_sender_rates_wait_is_until_the_oldest_message_leaves() -> None:
    rate = SenderRate(2, 60.0)
    assert rate.wait("fam", "ann", 5.0) == 0.0  # never seen
    rate.check("fam", "ann", 10.0)
    rate.check("fam", "ann", 20.0)
    assert rate.wait("fam", "ann", 25.0) == 45.0
    assert rate.wait("fam", "ann", 70.0) == 0.0
    assert rate.wait("fam", "ann", 100.0) == 0.0  # never negative
    assert rate.wait("fam", "bob", 25.0) == 0.0


def test_health_starts_with_nothing_known() -> None:
    assert json.loads(json.dumps(Health().__dict__)) == {
        "state": "starting",
        "bot": None,
        "can_read_all_group_messages": None,
        "since": None,
        "last_poll": None,
        "last_error": None,
        "last_error_at": None,
        "messages_in": 0,
        "messages_out": 0,
    }


def test_the_backoff_doubles_from_a_second_to_its_most_and_resets(sleeps: list[float]) -> None:
    backoff = Backoff()
    assert backoff.seconds == 1.0

    async def waits() -> None:
        for _ in range(8):
            await backoff.wait()

    run(waits)
    assert CHANNEL_BACKOFF_MAX_SECONDS == 60.0
    assert sleeps == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]
    backoff.reset()
    assert backoff.seconds == 1.0


def test_an_error_is_described_by_its_type_and_text_with_secrets_out_and_cut() -> None:
    register_secret("sekrit-token-4711")
    assert describe(ValueError("bad value")) == "ValueError: bad value"
    assert describe("plain words") == "plain words"
    assert describe("key sekrit-token-4711 used") == "key [redacted] used"
    assert describe(RuntimeError("sekrit-token-4711")) == "RuntimeError: [redacted]"
    assert describe("x" * 501) == "x" * 500
    assert describe("x" * 500) == "x" * 500
    assert describe(KeyError("k")) == "KeyError: 'k'"


def test_the_files_of_an_attachment() -> None:
    one = StoredFile("20260101-120000-0a1b2c3d.png", "image/png", 3, "image")
    two = StoredFile("20260101-120001-0a1b2c3e.ogg", "audio/ogg", 4, "voice")
    assert files_of(one) == (one,)
    assert files_of([one, two]) == (one, two)
    assert files_of((two,)) == (two,)
    assert files_of([]) == ()
    assert files_of("[attachment: a line]") == ()
    assert files_of(Refusal("no")) == ()
    assert files_of(None) == ()


def test_a_file_the_app_cannot_send_is_a_line_after_its_caption() -> None:
    file = OutgoingFile(Path("/x/r.pdf"), "report.pdf", "application/pdf", 2048, "document")
    assert cannot_send_file("Loop", file) == (
        "[a file was meant for you here, report.pdf (2.0 KiB), but I cannot send files in Loop]"
    )
    captioned = OutgoingFile(Path("/x/r.pdf"), "r.pdf", "application/pdf", 5, "document", "see")
    assert cannot_send_file("Signal", captioned) == (
        "see\n\n[a file was meant for you here, r.pdf (5 B), but I cannot send files in Signal]"
    )


def test_the_adapter_defaults(clock: Clock) -> None:
    rig = Rig("Plain")
    plain = rig.account.adapter
    assert isinstance(plain, Plain) and plain.core is rig.account
    assert (plain.chat_word, plain.resends_safely, plain.resend_window, plain.typing_every) == (
        "chat",
        False,
        None,
        5.0,
    )
    assert plain.may_send("any") is True
    file = OutgoingFile(Path("/x/a.txt"), "a.txt", "text/plain", 10, "document", "here")

    async def use() -> tuple[Any, ...]:
        return (
            await plain.typing("c1", None, True),
            await plain.attachment(received(), "fam"),
            await plain.send_file("c1", "t1", "41", file, "orch.m1.0.0"),
            await plain.close(),
        )

    assert run(use) == (None, None, ["p1"], None)
    assert plain.sends == [
        (
            "c1",
            "t1",
            "41",
            "here\n\n[a file was meant for you here, a.txt (10 B), but I cannot send files in "
            "Loop]",
            "orch.m1.0.0",
        )
    ]


def test_an_accounts_lines_start_with_its_kind_and_name(clock: Clock) -> None:
    rig = Rig()
    assert rig.account.name == "lb"
    assert rig.account.line("hello") == "Loop account lb: hello"
    assert (rig.account.rate.messages, rig.account.rate.seconds) == (2, 600)
    assert (rig.account.health, rig.account.stopped, rig.account.tasks) == (Health(), False, [])


# inbound


def test_an_unbound_chat_is_given_a_pairing_code_once(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig()
    rig.chats.pairing = Pairing(
        "K7PQ2", "lb", "c1", "Family", "loopchat:ann", "waiting", 0.0, 0.0, None, None
    )
    run(lambda: rig.account.route(received(title="Family")))
    assert rig.chats.named("request_pairing") == [
        ("request_pairing", "lb", "c1", "Family", "loopchat:ann")
    ]
    assert rig.adapter.sends == [
        (
            "c1",
            "t1",
            None,
            "This loop is not connected to an assistant yet. Pairing code: K7PQ2\n"
            "The operator connects it with: orchestrator pair K7PQ2 GROUP\n"
            "The code is good once, for one hour.",
            "orch.pair.K7PQ2",
        )
    ]
    assert lines(caplog) == [
        (
            logging.INFO,
            "Loop account lb: loop c1 (Family) is not bound; pairing code K7PQ2 issued "
            "(approve: orchestrator pair K7PQ2 GROUP)",
        )
    ]
    assert rig.accepted == [] and rig.chats.named("inbound_claim") == []
    assert rig.adapter.asked == []  # a chat not bound stores no file and is not read
    caplog.clear()
    rig.chats.fresh = False
    run(lambda: rig.account.route(received()))
    assert len(rig.adapter.sends) == 1
    assert lines(caplog) == [
        (logging.DEBUG, "Loop account lb: loop c1 is not bound; it has code K7PQ2 already")
    ]


def test_an_unbound_chat_gets_no_code_when_too_many_wait(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig()
    rig.chats.pairing, rig.chats.fresh = None, True
    run(lambda: rig.account.route(received()))
    assert rig.adapter.sends == [] and rig.accepted == []
    assert lines(caplog) == [
        (
            logging.WARNING,
            "Loop account lb: loop c1 is not bound, and as many pairing codes as allowed wait "
            "already; it gets none (orchestrator pair --list)",
        )
    ]


def test_a_bound_message_goes_to_the_daemon_with_its_claim(clock: Clock) -> None:
    rig = Rig()
    rig.bind(trust="guest")
    run(lambda: rig.account.route(received("what is for dinner?")))
    assert rig.chats.named("binding") == [("binding", "lb", "c1")]
    assert rig.chats.named("inbound_claim") == [("inbound_claim", "lb", "e41", "c1", "41")]
    [(inbound, claim)] = rig.accepted
    assert claim == "claim-e41"
    assert (
        inbound.group,
        inbound.text,
        inbound.chat,
        inbound.sender,
        inbound.channel,
        inbound.thread,
        inbound.bound,
        inbound.said,
        inbound.media,
    ) == (
        "fam",
        "what is for dinner?",
        "c1",
        "loopchat:ann",
        "loopchat:lb",
        "t1",
        "guest",
        None,
        (),
    )
    assert rig.account.health.messages_in == 1
    assert rig.adapter.sends == []
    asked = received("what is for dinner?")
    assert rig.adapter.asked == [("mention_forms", asked), ("attachment", asked, "fam")]


def test_the_bots_mention_is_taken_off_and_what_was_said_kept(clock: Clock) -> None:
    rig = Rig()
    rig.bind()
    run(lambda: rig.account.route(received("@LoopBot: what is up?")))
    [(inbound, _)] = rig.accepted
    assert (inbound.text, inbound.said) == ("what is up?", "@LoopBot: what is up?")


def test_activation_by_mention_applies_only_in_a_group_chat(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig(rate=(10, 600))
    rig.bind(activation="mention")
    run(lambda: rig.account.route(received("just talking", group_chat=True)))
    assert rig.accepted == [] and rig.chats.named("inbound_claim") == []
    assert rig.adapter.asked == [("addressed", received("just talking", group_chat=True))]
    assert lines(caplog) == [
        (
            logging.DEBUG,
            "Loop account lb: message 41 in loop c1 ignored: activation is mention and it "
            "neither mentions the bot nor replies to it",
        )
    ]
    run(lambda: rig.account.route(received("a direct message", group_chat=False)))
    rig.adapter.is_addressed = True
    run(lambda: rig.account.route(received("addressed", group_chat=True)))
    rig.adapter.is_addressed = False
    rig.bind(activation="always")
    run(lambda: rig.account.route(received("every message", group_chat=True)))
    assert [inbound.text for inbound, _ in rig.accepted] == [
        "a direct message",
        "addressed",
        "every message",
    ]


def test_a_sender_over_the_rate_is_told_once_how_long_to_wait(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig(rate=(2, 600))
    rig.bind()
    for text in ("one", "two"):
        run(lambda text=text: rig.account.route(received(text)))  # type: ignore[misc]
        clock.mono += 1.0
    clock.mono = 500.0 + 30.0
    run(lambda: rig.account.route(received("three")))
    run(lambda: rig.account.route(received("four")))
    assert [inbound.text for inbound, _ in rig.accepted] == ["one", "two"]
    assert rig.adapter.sends == [
        (
            "c1",
            "t1",
            "41",
            "You are sending messages faster than I can take them (2 per 10 minutes). I will "
            "read your messages again in about 10 minutes.",
            "orch.n.42",
        )
    ]
    over = (
        logging.INFO,
        "Loop account lb: loopchat:ann is over its rate in group fam (2 per 600s)",
    )
    assert lines(caplog) == [over, over]
    assert rig.account.health.messages_in == 2


def test_the_rate_notice_rounds_to_whole_minutes_and_says_at_least_one(clock: Clock) -> None:
    rig = Rig(rate=(1, 30))
    rig.bind()
    run(lambda: rig.account.route(received("one")))
    run(lambda: rig.account.route(received("two")))
    rig2 = Rig(rate=(1, 7200))
    rig2.bind()
    run(lambda: rig2.account.route(received("one")))
    clock.mono += 90.0 * 60 - 60.0  # 31 minutes of the two hours left
    run(lambda: rig2.account.route(received("two")))
    assert [send[3] for send in rig.adapter.sends + rig2.adapter.sends] == [
        "You are sending messages faster than I can take them (1 per 1 minutes). I will read "
        "your messages again in about 1 minutes.",
        "You are sending messages faster than I can take them (1 per 120 minutes). I will read "
        "your messages again in about 31 minutes.",
    ]


def test_the_rate_is_a_senders_in_a_group_whichever_chat_and_stops_before_the_file(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig(rate=(1, 600))
    rig.bind("c1")
    rig.bind("c2")  # a second chat of the same group
    rig.chats.bound["c3"] = Binding("lb", "c3", "pets", "always", "member", None, 0.0)
    run(lambda: rig.account.route(received("one", chat="c1")))
    rig.adapter.asked.clear()
    run(lambda: rig.account.route(received("two", chat="c2", message_id="52", thread=None)))
    assert rig.adapter.asked == []  # over the rate: no mention looked for, no file stored
    run(lambda: rig.account.route(received("from bob", chat="c1", sender="bob")))
    run(lambda: rig.account.route(received("to pets", chat="c3")))
    assert [(i.group, i.chat, i.sender, i.text) for i, _ in rig.accepted] == [
        ("fam", "c1", "loopchat:ann", "one"),
        ("fam", "c1", "loopchat:bob", "from bob"),
        ("pets", "c3", "loopchat:ann", "to pets"),
    ]
    assert [call[3] for call in rig.chats.named("inbound_claim")] == ["c1", "c1", "c3"]
    assert rig.adapter.sends == [
        (
            "c2",
            None,
            "52",
            "You are sending messages faster than I can take them (1 per 10 minutes). I will "
            "read your messages again in about 10 minutes.",
            "orch.n.42",
        )
    ]
    assert lines(caplog) == [
        (logging.INFO, "Loop account lb: loopchat:ann is over its rate in group fam (1 per 600s)")
    ]
    assert set(rig.account.rate.seen) == {
        ("fam", "loopchat:ann"),
        ("fam", "loopchat:bob"),
        ("pets", "loopchat:ann"),
    }


def test_a_line_from_the_adapter_is_added_to_the_text_and_what_was_said(clock: Clock) -> None:
    rig = Rig(rate=(10, 600))
    rig.bind()
    rig.adapter.stored = "[attachment: written by the app]"
    run(lambda: rig.account.route(received("@loopbot see this")))
    run(lambda: rig.account.route(received("")))
    rig.adapter.stored = ""
    run(lambda: rig.account.route(received("nothing added")))
    assert [(i.text, i.said, i.media) for i, _ in rig.accepted] == [
        (
            "see this\n\n[attachment: written by the app]",
            "@loopbot see this\n\n[attachment: written by the app]",
            (),
        ),
        ("[attachment: written by the app]", None, ()),
        ("nothing added", None, ()),
    ]


def test_a_stored_file_goes_with_the_message_even_without_words(clock: Clock) -> None:
    rig = Rig()
    rig.bind()
    photo = StoredFile("20260101-120002-0a1b2c3f.jpg", "image/jpeg", 9, "image")
    rig.adapter.stored = [photo]
    run(lambda: rig.account.route(received("")))
    [(inbound, _)] = rig.accepted
    assert (inbound.text, inbound.said, inbound.media) == ("", None, (photo,))


def test_a_message_with_neither_words_nor_a_file_is_dropped(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig()
    rig.bind()
    run(lambda: rig.account.route(received("  \n ")))
    assert rig.accepted == [] and rig.adapter.sends == [] and rig.chats.named("inbound_claim") == []
    assert lines(caplog) == [
        (logging.DEBUG, "Loop account lb: message 41 in c1 has no text or file it takes")
    ]


@pytest.mark.parametrize(
    ("stored", "told", "logged"),
    [
        (
            Refusal("That file is too big (30 MiB); I take at most 20 MiB."),
            "That file is too big (30 MiB); I take at most 20 MiB.",
            [],
        ),
        (
            OSError("inbox is a link"),
            "Sorry, I could not store that file.",
            [
                (
                    logging.WARNING,
                    "Loop account lb: a file for group fam was not stored: inbox is a link",
                )
            ],
        ),
    ],
    ids=["refused: the reason told", "not stored: an apology, the cause logged"],
)
def test_a_file_that_is_not_taken_is_told_in_the_chat_and_goes_no_further(
    clock: Clock,
    caplog: pytest.LogCaptureFixture,
    stored: Exception,
    told: str,
    logged: list[tuple[int, str]],
) -> None:
    rig = Rig()
    rig.bind()
    rig.adapter.stored = stored
    run(lambda: rig.account.route(received("look")))
    assert rig.accepted == []
    assert rig.adapter.sends == [("c1", "t1", "41", told, "orch.n.42")]
    assert lines(caplog) == logged


def test_a_message_of_the_most_characters_is_taken_and_one_more_is_refused(clock: Clock) -> None:
    rig = Rig(rate=(10, 600))
    rig.bind()
    longest = "a" * INBOUND_TEXT_MAX_CHARS
    run(lambda: rig.account.route(received(longest)))
    run(lambda: rig.account.route(received(longest + "a")))
    # the mention counts: it is part of what was said
    run(lambda: rig.account.route(received("@loopbot " + longest[9:] + "a")))
    assert [len(i.text) for i, _ in rig.accepted] == [INBOUND_TEXT_MAX_CHARS]
    refusal = (
        f"That message is {INBOUND_TEXT_MAX_CHARS + 1} characters; I take at most "
        f"{INBOUND_TEXT_MAX_CHARS}."
    )
    assert rig.adapter.sends == [("c1", "t1", "41", refusal, "orch.n.42")] * 2
    assert rig.chats.named("inbound_claim") == [("inbound_claim", "lb", "e41", "c1", "41")]


@pytest.mark.parametrize(
    ("error", "notice", "line"),
    [
        (
            GroupNotFound("no group fam"),
            None,
            (
                logging.WARNING,
                "Loop account lb: loop c1 is bound to group 'fam', which does not exist; "
                "message dropped (orchestrator unbind lb:c1)",
            ),
        ),
        (
            SenderRefused("loopchat:ann may not write to fam"),
            None,
            (logging.WARNING, "Loop account lb: loopchat:ann may not write to fam"),
        ),
        (
            GroupPaused("fam is over its disk limit"),
            "I am paused: fam is over its disk limit",
            None,
        ),
        (
            BadInput("that is not a message"),
            "that is not a message",
            (logging.INFO, "Loop account lb: message refused: that is not a message"),
        ),
    ],
)
def test_the_daemons_refusals(
    clock: Clock,
    caplog: pytest.LogCaptureFixture,
    error: OrchestratorError,
    notice: str | None,
    line: tuple[int, str] | None,
) -> None:
    rig = Rig()
    rig.bind()
    rig.accept_error = error
    run(lambda: rig.account.route(received()))
    assert rig.adapter.sends == ([("c1", "t1", "41", notice, "orch.n.42")] if notice else [])
    assert lines(caplog) == ([line] if line else [])
    assert rig.account.health.messages_in == 0


@pytest.mark.parametrize("error", [DaemonStopping("stopping"), OrchestratorError("disk full")])
def test_a_stopping_daemon_or_a_full_queue_is_raised_to_the_adapter(
    clock: Clock, error: OrchestratorError
) -> None:
    rig = Rig()
    rig.bind()
    rig.accept_error = error
    with pytest.raises(type(error)):
        run(lambda: rig.account.route(received()))
    assert rig.adapter.sends == [] and rig.account.health.messages_in == 0


# the files of a message not queued


EARLIER = "20251231-090000-00000000.txt"  # a file of a message queued earlier


class Inbox:
    """A group's files/inbox with two files the app stored for one message."""

    def __init__(self, root: Path) -> None:
        self.groups = root / "groups"
        self.path = self.groups / "fam" / "files" / "inbox"
        self.path.mkdir(parents=True)
        self.files = (
            StoredFile("20260101-120002-0a1b2c3f.jpg", "image/jpeg", 5, "image"),
            StoredFile("20260101-120002-4d5e6f70.pdf", "application/pdf", 5, "document"),
        )
        for file in self.files:
            (self.path / file.name).write_bytes(b"bytes")
        (self.path / EARLIER).write_bytes(b"queued earlier")

    def names(self) -> set[str]:
        return {entry.name for entry in self.path.iterdir()}

    def rig(self) -> Rig:
        """A bound account whose adapter stores this inbox's two files for a message."""
        rig = Rig(groups=self.groups)
        rig.bind()
        rig.adapter.stored = list(self.files)
        return rig


REFUSALS = [
    GroupNotFound("fam is gone"),
    SenderRefused("loopchat:ann may not talk to fam"),
    GroupPaused("fam is paused"),
    BadInput("that is not a message"),
]


@pytest.mark.parametrize("error", REFUSALS, ids=lambda error: type(error).__name__)
def test_the_files_of_a_message_the_daemon_refuses_are_removed_and_no_others(
    clock: Clock, tmp_path: Path, error: OrchestratorError
) -> None:
    inbox = Inbox(tmp_path)
    rig = inbox.rig()
    rig.accept_error = error
    run(lambda: rig.account.route(received("look")))
    assert inbox.names() == {EARLIER}


@pytest.mark.parametrize("error", [DaemonStopping("stopping"), OrchestratorError("disk full")])
def test_the_files_of_a_message_to_be_read_again_are_removed_before_it_is(
    clock: Clock, tmp_path: Path, error: OrchestratorError
) -> None:
    inbox = Inbox(tmp_path)
    rig = inbox.rig()
    rig.accept_error = error
    with pytest.raises(type(error)):
        run(lambda: rig.account.route(received("look")))
    assert inbox.names() == {EARLIER}


def test_the_files_of_a_message_too_long_are_removed(clock: Clock, tmp_path: Path) -> None:
    inbox = Inbox(tmp_path)
    rig = inbox.rig()
    run(lambda: rig.account.route(received("a" * (INBOUND_TEXT_MAX_CHARS + 1))))
    assert rig.accepted == [] and len(rig.adapter.sends) == 1
    assert inbox.names() == {EARLIER}


def test_the_files_of_a_queued_message_stay(clock: Clock, tmp_path: Path) -> None:
    inbox = Inbox(tmp_path)
    rig = inbox.rig()
    run(lambda: rig.account.route(received("look")))
    [(queued, _)] = rig.accepted
    assert queued.media == inbox.files
    assert inbox.names() == {file.name for file in inbox.files} | {EARLIER}


def test_a_repeat_of_a_queued_message_keeps_the_first_files_and_not_its_own(
    clock: Clock, tmp_path: Path
) -> None:
    inbox = Inbox(tmp_path)
    rig = inbox.rig()
    first = StoredFile(EARLIER, "text/plain", 14, "document")
    rig.queued_before = (first, inbox.files[1])
    run(lambda: rig.account.route(received("look")))
    assert inbox.names() == {first.name, inbox.files[1].name}


def test_an_inbox_swapped_for_a_link_is_not_removed_through(
    clock: Clock, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    inbox = Inbox(tmp_path)
    outside = tmp_path / "outside"
    inbox.path.rename(outside)
    inbox.path.symlink_to(outside)
    rig = inbox.rig()
    rig.accept_error = BadInput("no")
    run(lambda: rig.account.route(received("look")))
    assert {entry.name for entry in outside.iterdir()} == {file.name for file in inbox.files} | {
        EARLIER
    }
    [line] = [text for level, text in lines(caplog) if level == logging.WARNING]
    assert line.startswith(
        "group fam: files of a message not queued were not removed from files/inbox: "
    )
    assert line.endswith("files/inbox: is a symlink, not a folder"), line


def test_a_folder_planted_for_one_file_is_left_and_the_rest_removed(
    clock: Clock, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    inbox = Inbox(tmp_path)
    planted = inbox.path / inbox.files[0].name
    planted.unlink()
    planted.mkdir()
    (planted / "inside").write_bytes(b"x")
    rig = inbox.rig()
    rig.accept_error = BadInput("no")
    run(lambda: rig.account.route(received("look")))
    assert inbox.names() == {inbox.files[0].name, EARLIER}
    assert (planted / "inside").read_bytes() == b"x"
    [line] = [text for level, text in lines(caplog) if level == logging.WARNING]
    assert line.startswith(f"group fam: files/inbox/{inbox.files[0].name} was not removed: ")


def test_files_of_a_group_whose_folder_is_gone_are_nothing_to_remove(
    clock: Clock, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig(groups=tmp_path / "groups")
    rig.bind()
    rig.adapter.stored = [StoredFile("20260101-120002-0a1b2c3f.jpg", "image/jpeg", 5, "image")]
    rig.accept_error = GroupNotFound("fam is gone")
    run(lambda: rig.account.route(received("look")))
    assert [entry for entry in lines(caplog) if entry[0] > logging.INFO] == [
        (
            logging.WARNING,
            "Loop account lb: loop c1 is bound to group 'fam', which does not exist; "
            "message dropped (orchestrator unbind lb:c1)",
        )
    ]


# notices


def test_a_notice_that_cannot_be_sent_is_logged(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig()
    rig.adapter.send_errors.append(RuntimeError("gone"))
    run(lambda: rig.account.notice("c1", None, None, "hello"))
    assert lines(caplog) == [
        (logging.WARNING, "Loop account lb: notice not sent: RuntimeError: gone")
    ]
    run(lambda: rig.account.notice("c1", None, "7", "hello", key="orch.pair.X"))
    assert rig.adapter.sends == [("c1", None, "7", "hello", "orch.pair.X")]


def test_a_cancelled_notice_is_cancelled() -> None:
    rig = Rig()
    rig.adapter.send_errors.append(asyncio.CancelledError())
    with pytest.raises(asyncio.CancelledError):
        run(lambda: rig.account.notice("c1", None, None, "hello"))


# outbound


def test_replies_are_claimed_sent_in_reply_and_finished(clock: Clock) -> None:
    rig = Rig()
    rig.message(DONE)
    rig.queue.replies["m1"] = [(0, "first"), (1, "second")]
    rig.chats.origin = ("e41", "41")
    run(lambda: rig.account.deliver("m1"))
    assert rig.adapter.sends == [
        ("c1", "t1", "41", "first", "orch.m1.0.0"),
        ("c1", "t1", "41", "second", "orch.m1.1.0"),
    ]
    assert rig.chats.named("claim_send") == [
        ("claim_send", "m1", 0, "lb"),
        ("claim_send", "m1", 1, "lb"),
    ]
    assert rig.chats.named("finish_send") == [
        ("finish_send", "m1", 0, SENT, None, ["p1"]),
        ("finish_send", "m1", 1, SENT, None, ["p2"]),
    ]
    assert rig.chats.named("sent") == []  # the app does not drop repeats: never asked
    assert rig.chats.named("inbound_of") == [("inbound_of", "m1")]
    assert rig.queue.calls == [("get", "m1"), ("replies_of", "m1"), ("files_of", "m1")]
    assert rig.account.health.messages_out == 2


def test_a_reply_claimed_elsewhere_is_not_sent(clock: Clock) -> None:
    rig = Rig()
    rig.message(DONE)
    rig.queue.replies["m1"] = [(0, "first"), (1, "second")]
    rig.chats.refused_claims = {0}
    run(lambda: rig.account.deliver("m1"))
    assert rig.adapter.sends == [("c1", "t1", None, "second", "orch.m1.1.0")]
    assert rig.account.health.messages_out == 1


def test_no_reply_to_without_the_inbound_messages_id(clock: Clock) -> None:
    rig = Rig()
    rig.message(DONE)
    rig.queue.replies["m1"] = [(0, "first")]
    rig.chats.origin = ("e41", None)
    run(lambda: rig.account.deliver("m1"))
    rig.chats.origin = ("e41", "")
    rig.chats.calls.clear()
    run(lambda: rig.account.deliver("m1"))
    assert [send[2] for send in rig.adapter.sends] == [None, None]


def test_nothing_is_sent_for_an_unknown_message_another_channels_or_a_chat_not_sent_to(
    clock: Clock,
) -> None:
    rig = Rig()
    run(lambda: rig.account.deliver("nope"))
    rig.message(DONE, id="m2", channel="loopchat:other")
    rig.queue.replies["m2"] = [(0, "x")]
    run(lambda: rig.account.deliver("m2"))
    rig.message(DONE, id="m3", chat="secret")
    rig.queue.replies["m3"] = [(0, "x")]
    rig.adapter.chats_refused = {"secret"}
    run(lambda: rig.account.deliver("m3"))
    assert rig.adapter.sends == [] and rig.chats.calls == []
    assert rig.queue.calls == [("get", "nope"), ("get", "m2"), ("get", "m3")]


def test_a_dead_message_without_replies_gets_one_apology(clock: Clock) -> None:
    rig = Rig()
    rig.message(DEAD)
    run(lambda: rig.account.deliver("m1"))
    assert rig.adapter.sends == [("c1", "t1", None, DEAD_NOTICE, "orch.m1.m1.0")]
    assert DEAD_NOTICE == (
        "Sorry, I could not answer that message. The operator can see why (orchestrator status)."
    )
    assert rig.chats.named("claim_send") == [("claim_send", "m1", -1, "lb")]
    assert ("files_of", "m1") not in rig.queue.calls  # no replies: no files asked for
    rig2 = Rig()
    rig2.message(DEAD)
    rig2.queue.replies["m1"] = [(0, "partial answer")]
    run(lambda: rig2.account.deliver("m1"))
    assert rig2.adapter.sends == [("c1", "t1", None, "partial answer", "orch.m1.0.0")]


def test_an_app_that_drops_repeats_sends_again_what_was_claimed_and_not_confirmed(
    clock: Clock,
) -> None:
    rig = Rig()
    rig.adapter.resends_safely = True
    rig.message(DONE)
    rig.queue.replies["m1"] = [(0, "a"), (1, "b"), (2, "c"), (3, "d")]
    rig.chats.sent_states = {0: ("sent", ["p0"]), 1: ("sending", []), 2: ("unknown", [])}
    run(lambda: rig.account.deliver("m1"))
    assert rig.adapter.sends == [
        ("c1", "t1", None, "b", "orch.m1.1.0"),
        ("c1", "t1", None, "d", "orch.m1.3.0"),
    ]
    assert rig.chats.named("sent") == [("sent", "m1")]
    assert rig.chats.named("claim_send") == [("claim_send", "m1", 3, "lb")]


def test_a_reply_with_a_file_is_sent_as_the_file_with_its_caption(clock: Clock) -> None:
    rig = Rig()
    rig.message(DONE)
    report = ReplyFile(0, "report.pdf", "application/pdf", 4, "document", "/out/m1.0.pdf")
    chart = ReplyFile(1, "chart.png", "image/png", 2048, "image", "/out/m1.1.png")
    rig.queue.replies["m1"] = [(0, "the report"), (1, file_line(chart)), (2, "words")]
    rig.queue.files["m1"] = {0: report, 1: chart}
    rig.chats.origin = ("e41", "41")
    run(lambda: rig.account.deliver("m1"))
    assert rig.adapter.file_sends == [
        (
            "c1",
            "t1",
            "41",
            OutgoingFile(
                Path("/out/m1.0.pdf"), "report.pdf", "application/pdf", 4, "document", "the report"
            ),
            "orch.m1.0.0",
        ),
        (
            "c1",
            "t1",
            "41",
            OutgoingFile(Path("/out/m1.1.png"), "chart.png", "image/png", 2048, "image", ""),
            "orch.m1.1.0",
        ),
    ]
    assert rig.adapter.sends == [("c1", "t1", "41", "words", "orch.m1.2.0")]
    assert rig.chats.named("finish_send")[:2] == [
        ("finish_send", "m1", 0, SENT, None, ["f1", "f2"]),
        ("finish_send", "m1", 1, SENT, None, ["f1", "f2"]),
    ]


def test_a_send_that_surely_failed_is_released_and_tried_again_after_the_sweep(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig()
    rig.message(DONE)
    rig.queue.replies["m1"] = [(0, "first")]
    rig.adapter.send_errors.append(ConnectionRefusedError("refused"))
    run(lambda: rig.account.deliver("m1"))
    assert rig.chats.named("release_send") == [("release_send", "m1", 0)]
    assert rig.chats.named("finish_send") == []
    assert rig.loop.later == [(CHANNEL_SWEEP_SECONDS, rig.account.wake_soon, "m1")]
    assert CHANNEL_SWEEP_SECONDS == 5.0
    assert rig.account.health.last_error == "send failed: ConnectionRefusedError: refused"
    assert rig.account.health.last_error_at == NOW
    assert rig.account.health.messages_out == 0
    assert lines(caplog) == [
        (
            logging.WARNING,
            "Loop account lb: cannot reach Loop to send a reply (send failed: "
            "ConnectionRefusedError: refused); trying again in 5s",
        )
    ]


def test_a_send_that_surely_failed_keeps_its_claim_when_the_app_drops_repeats(
    clock: Clock,
) -> None:
    rig = Rig()
    rig.adapter.resends_safely = True
    rig.message(DONE)
    rig.queue.replies["m1"] = [(0, "first")]
    rig.adapter.send_errors.append(ConnectionRefusedError("refused"))
    run(lambda: rig.account.deliver("m1"))
    assert rig.chats.named("release_send") == [] and rig.chats.named("finish_send") == []
    assert rig.loop.later == [(CHANNEL_SWEEP_SECONDS, rig.account.wake_soon, "m1")]


@pytest.mark.parametrize(
    ("error", "outcome", "said"),
    [
        (
            TimeoutError("no answer"),
            UNKNOWN,
            "no answer from Loop (TimeoutError: no answer); not sent again",
        ),
        (ValueError("too long"), FAILED, "Loop refused the reply: ValueError: too long"),
    ],
)
def test_a_send_that_may_have_arrived_or_was_refused_is_finished_with_why(
    clock: Clock, caplog: pytest.LogCaptureFixture, error: Exception, outcome: str, said: str
) -> None:
    rig = Rig()
    rig.message(DONE)
    rig.queue.replies["m1"] = [(3, "first")]
    rig.adapter.send_errors.append(error)
    run(lambda: rig.account.deliver("m1"))
    assert rig.chats.named("finish_send") == [("finish_send", "m1", 3, outcome, said, None)]
    assert rig.chats.named("release_send") == [] and rig.loop.later == []
    assert (rig.account.health.last_error, rig.account.health.last_error_at) == (said, NOW)
    assert rig.account.health.messages_out == 0
    assert lines(caplog) == [(logging.WARNING, f"Loop account lb: reply 3 of m1: {said}")]


def test_a_cancelled_send_is_cancelled(clock: Clock) -> None:
    rig = Rig()
    rig.message(DONE)
    rig.queue.replies["m1"] = [(0, "first")]
    rig.adapter.send_errors.append(asyncio.CancelledError())
    with pytest.raises(asyncio.CancelledError):
        run(lambda: rig.account.deliver("m1"))
    assert rig.chats.named("finish_send") == [] and rig.chats.named("release_send") == []


# typing


def test_typing_is_kept_up_while_the_turn_runs_and_put_down_after(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig()
    rig.adapter.typing_every = 30.0  # it is put down long before its next refresh
    rig.message(INFLIGHT)
    rig.adapter.typing_errors.append(RuntimeError("typing refused"))

    async def turn() -> asyncio.Task[None]:
        await rig.account.deliver("m1")
        assert set(rig.account.typing) == {"m1"}
        first = rig.account.typing["m1"]
        await rig.account.deliver("m1")  # still running: the same indicator
        assert rig.account.typing["m1"] is first
        await until(lambda: rig.adapter.typed)
        await pause(0)
        rig.message(DONE)
        await rig.account.deliver("m1")
        assert rig.account.typing == {}
        with contextlib.suppress(asyncio.CancelledError):
            await first
        return first

    assert run(turn).cancelled()
    assert rig.adapter.typed == [("c1", "t1", True), ("c1", "t1", False)]
    assert lines(caplog) == [
        (logging.DEBUG, "Loop account lb: typing: RuntimeError: typing refused")
    ]


def test_typing_that_cannot_be_put_down_is_left_as_it_is(clock: Clock) -> None:
    rig = Rig()
    rig.adapter.typing_every = 30.0
    message = rig.message(INFLIGHT)

    async def turn() -> None:
        rig.account._start_typing(message)
        await until(lambda: rig.adapter.typed)
        rig.adapter.typing_errors.append(ConnectionResetError("gone"))
        await rig.account._stop_typing(message)

    run(turn)
    assert rig.adapter.typed == [("c1", "t1", True), ("c1", "t1", False)]
    assert rig.account.typing == {}


def test_typing_is_shown_again_after_each_wait_while_the_message_runs(
    clock: Clock, sleeps: list[float]
) -> None:
    rig = Rig()
    rig.adapter.typing_every = 4.0
    message = rig.message(INFLIGHT)

    async def turn() -> None:
        rig.account._start_typing(message)
        await until(lambda: len(rig.adapter.typed) >= 3)
        await rig.account._stop_typing(message)

    run(turn)
    assert rig.adapter.typed[:3] == [("c1", "t1", True)] * 3
    assert set(rig.queue.calls) == {("get", "m1")} and len(rig.queue.calls) >= 2
    assert set(sleeps) == {4.0}


def test_typing_stops_by_itself_when_the_message_is_no_longer_running(
    clock: Clock, sleeps: list[float]
) -> None:
    rig = Rig()
    message = rig.message(INFLIGHT)

    async def turn() -> None:
        rig.account._start_typing(message)
        task = rig.account.typing["m1"]
        await until(lambda: rig.adapter.typed)
        rig.message(DONE)
        await task

    run(turn)
    assert rig.adapter.typed == [("c1", "t1", True)]
    assert sleeps == [5.0] and rig.account.typing == {}


def test_typing_stops_by_itself_when_the_message_is_gone(clock: Clock, sleeps: list[float]) -> None:
    rig = Rig()
    message = rig.message(INFLIGHT)

    async def turn() -> None:
        rig.account._start_typing(message)
        task = rig.account.typing["m1"]
        await until(lambda: rig.adapter.typed)
        del rig.queue.messages["m1"]
        await task

    run(turn)
    assert rig.adapter.typed == [("c1", "t1", True)] and rig.account.typing == {}


def test_at_most_so_many_typing_indicators_at_once(clock: Clock) -> None:
    rig = Rig()
    assert TYPING_MAX == 64

    async def many() -> None:
        for n in range(TYPING_MAX + 1):
            rig.account._start_typing(rig.message(INFLIGHT, id=f"m{n}"))
        assert len(rig.account.typing) == TYPING_MAX
        assert f"m{TYPING_MAX}" not in rig.account.typing
        await rig.account.stop()

    run(many)


def test_stopping_typing_that_was_not_started_does_nothing(clock: Clock) -> None:
    rig = Rig()
    run(lambda: rig.account._stop_typing(rig.message(DONE)))
    assert rig.adapter.typed == []


# life


def test_connecting_is_tried_again_with_backoff_then_stale_claims_are_logged(
    clock: Clock, sleeps: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig()
    rig.adapter.connect_errors += [RuntimeError("down"), OSError("still down")]
    rig.chats.stale = [("m7", 2)]
    seen: list[dict[str, Any]] = []
    original = rig.account.read_failed

    async def read_failed(what: str, error: str, backoff: Backoff) -> None:
        await original(what, error, backoff)
        seen.append(rig.chats.health())

    rig.account.read_failed = read_failed  # type: ignore[method-assign]

    async def life() -> dict[str, Any]:
        await rig.account._run()
        connected = rig.chats.health()
        await rig.account.stop()
        return connected

    connected = run(life)
    assert (connected["state"], connected["since"]) == ("connected", NOW)
    assert sleeps[:2] == [1.0, 2.0]
    assert [(h["state"], h["last_error"], h["last_error_at"]) for h in seen] == [
        ("error", "connecting failed: RuntimeError: down", NOW),
        ("error", "connecting failed: OSError: still down", NOW),
    ]
    assert rig.adapter.received_loop
    health = rig.chats.health()
    assert (health["state"], health["since"]) == ("connected", NOW)
    assert rig.chats.named("unconfirmed") == [("unconfirmed", "lb", NOW)]  # window 0
    assert rig.chats.named("in_flight_sends") == []
    assert lines(caplog) == [
        (
            logging.WARNING,
            "Loop account lb: connecting failed (connecting failed: RuntimeError: down); "
            "trying again in 1s",
        ),
        (
            logging.WARNING,
            "Loop account lb: connecting failed (connecting failed: OSError: still down); "
            "trying again in 2s",
        ),
        (logging.INFO, "Loop account lb: connected as @loopbot"),
        (
            logging.WARNING,
            "Loop account lb: reply 2 of message m7 may not have been sent (the daemon stopped "
            "while sending it); it is not sent again",
        ),
    ]
    assert [task.get_name() for task in rig.account.tasks] == [
        "loopchat:lb-out",
        "loopchat:lb-sweep",
    ]


def test_an_app_that_drops_repeats_for_a_while_resends_what_is_younger(
    clock: Clock, sleeps: list[float]
) -> None:
    rig = Rig()
    rig.adapter.resends_safely = True
    rig.adapter.resend_window = 300.0
    rig.chats.in_flight = [("m5", 0), ("m6", 1)]

    async def life() -> list[str]:
        rig.account.tasks = []
        await rig.account._run()
        woken = []
        while not rig.account.wake.empty():
            woken.append(rig.account.wake.get_nowait())
        await rig.account.stop()
        return woken

    woken = run(life)
    assert rig.chats.named("unconfirmed") == [("unconfirmed", "lb", NOW - 300.0)]
    assert rig.chats.named("in_flight_sends") == [("in_flight_sends", "lb")]
    assert woken == ["m5", "m6"]


def test_an_app_that_drops_repeats_for_ever_marks_nothing_unknown(
    clock: Clock, sleeps: list[float]
) -> None:
    rig = Rig()
    rig.adapter.resends_safely = True

    async def life() -> None:
        await rig.account._run()
        await rig.account.stop()

    run(life)
    assert rig.chats.named("unconfirmed") == []
    assert rig.chats.named("in_flight_sends") == [("in_flight_sends", "lb")]


def test_start_runs_the_account_under_its_channels_name_and_stop_ends_it(
    clock: Clock, sleeps: list[float]
) -> None:
    rig = Rig()

    async def life() -> tuple[list[str], list[str], bool]:
        rig.adapter.receive_until = asyncio.Event()
        await rig.account.start()
        started = [task.get_name() for task in rig.account.tasks]
        run_task = rig.account.tasks[0]
        await until(lambda: rig.adapter.received_loop)
        running = [task.get_name() for task in rig.account.tasks]
        await rig.account.stop()
        return started, running, run_task.cancelled()

    assert run(life) == (
        ["loopchat:lb"],
        ["loopchat:lb", "loopchat:lb-out", "loopchat:lb-sweep"],
        True,
    )


def test_stop_cancels_the_tasks_closes_the_app_and_saves_health(clock: Clock) -> None:
    rig = Rig()
    rig.adapter.close_error = RuntimeError("already closed")

    async def life() -> list[asyncio.Task[None]]:
        forever = asyncio.Event()
        rig.account.tasks = [asyncio.create_task(forever.wait())]  # type: ignore[list-item]
        rig.account.typing["m1"] = asyncio.create_task(forever.wait())  # type: ignore[assignment]
        tasks = [*rig.account.tasks, *rig.account.typing.values()]
        await asyncio.sleep(0)
        rig.account.health.messages_in = 3
        await rig.account.stop()
        return tasks

    tasks = run(life)
    assert all(task.cancelled() for task in tasks)
    assert rig.account.stopped and rig.adapter.closed
    assert rig.chats.health()["messages_in"] == 3


def test_replies_are_looked_at_when_woken_until_stopped(clock: Clock) -> None:
    rig = Rig()
    rig.account.wake_soon("m1")
    assert rig.loop.soon == [(rig.account.wake.put_nowait, "m1")]
    rig.account.stopped = True
    rig.account.wake_soon("m2")
    assert len(rig.loop.soon) == 1


def test_the_sender_of_replies_logs_a_failure_and_goes_on(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig()
    rig.message(DONE)
    rig.queue.replies["m1"] = [(0, "one")]

    async def outbound() -> None:
        real_deliver = rig.account.deliver

        async def deliver(message_id: str) -> None:
            if message_id == "bad":
                raise RuntimeError("broken")
            await real_deliver(message_id)

        rig.account.deliver = deliver  # type: ignore[method-assign]
        rig.account.wake.put_nowait("bad")
        rig.account.wake.put_nowait("m1")
        task = asyncio.create_task(rig.account._outbound())
        await until(lambda: rig.adapter.sends)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(outbound)
    assert rig.adapter.sends == [("c1", "t1", None, "one", "orch.m1.0.0")]
    assert [(r.levelno, r.getMessage(), bool(r.exc_info)) for r in caplog.records] == [
        (logging.ERROR, "Loop account lb: sending replies of bad failed", True)
    ]


def test_the_sweep_wakes_unsent_replies_saves_health_and_survives_a_failure(
    clock: Clock, sleeps: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig()
    rig.chats.unsent_ids = ["m1", "m2"]
    rig.account.health.messages_out = 5
    rig.chats.set_state_error = None
    answers: list[Any] = [RuntimeError("db locked"), ["m1", "m2"]]

    def unsent(channel: str, since: float) -> list[str]:
        rig.chats.calls.append(("unsent", channel, since))
        answer = answers.pop(0) if answers else []
        if isinstance(answer, Exception):
            raise answer
        return list(answer)

    rig.chats.unsent = unsent  # type: ignore[method-assign]

    async def sweep() -> list[str]:
        with pytest.raises(asyncio.CancelledError):
            await rig.account._sweep()
        woken = []
        while not rig.account.wake.empty():
            woken.append(rig.account.wake.get_nowait())
        return woken

    assert run(sweep) == ["m1", "m2"]
    assert set(sleeps) == {CHANNEL_SWEEP_SECONDS} and len(sleeps) == 10
    assert rig.chats.named("unsent")[0] == ("unsent", "loopchat:lb", NOW - CHANNEL_KEEP_SECONDS)
    assert len(rig.chats.named("unsent")) == 9
    assert rig.chats.health()["messages_out"] == 5
    assert [(r.levelno, r.getMessage(), bool(r.exc_info)) for r in caplog.records] == [
        (logging.ERROR, "Loop account lb: sweep failed", True)
    ]


# health


def test_health_is_saved_as_json_and_a_store_error_is_ignored(clock: Clock) -> None:
    rig = Rig()
    rig.account.polled()
    rig.account.save_health()
    assert rig.chats.health() == {
        "state": "connected",
        "bot": None,
        "can_read_all_group_messages": None,
        "since": None,
        "last_poll": NOW,
        "last_error": None,
        "last_error_at": None,
        "messages_in": 0,
        "messages_out": 0,
    }
    rig.chats.set_state_error = OrchestratorError("disk full")
    rig.account.save_health()  # kept for the next save
    rig.chats.set_state_error = RuntimeError("a bug")
    with pytest.raises(RuntimeError):
        rig.account.save_health()


def test_an_error_kept_in_health_is_redacted(clock: Clock) -> None:
    register_secret("loop-token-0815")
    rig = Rig()
    rig.account.error("login with loop-token-0815 refused")
    assert (rig.account.health.last_error, rig.account.health.last_error_at) == (
        "login with [redacted] refused",
        NOW,
    )


def test_what_the_queue_could_not_take_is_read_again_after_the_backoff(
    clock: Clock, sleeps: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig()
    backoff = Backoff()
    backoff.seconds = 4.0
    run(lambda: rig.account.not_queued("update 9", OrchestratorError("disk full"), backoff))
    assert (rig.account.health.last_error, rig.account.health.last_error_at) == (
        "update 9 not queued: disk full",
        NOW,
    )
    assert rig.account.health.state == "starting"
    assert sleeps == [4.0] and backoff.seconds == 8.0
    assert lines(caplog) == [
        (
            logging.ERROR,
            "Loop account lb: update 9 not queued (disk full); reading it again in 4s",
        )
    ]


def test_a_failed_read_says_so_in_health_and_waits_out_the_backoff(
    clock: Clock, sleeps: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig()
    backoff = Backoff()
    run(lambda: rig.account.read_failed("getUpdates", "HTTP 502", backoff))
    assert rig.chats.health()["state"] == "error"
    assert rig.chats.health()["last_error"] == "getUpdates failed: HTTP 502"
    assert sleeps == [1.0] and backoff.seconds == 2.0
    assert lines(caplog) == [
        (
            logging.WARNING,
            "Loop account lb: getUpdates failed (getUpdates failed: HTTP 502); trying again in 1s",
        )
    ]
