"""The email adapter (orchestrator/channels/email/adapter.py) and its options
(orchestrator/channels/email/kind.py) driven directly, without servers: the adapter's
IMAP mailbox and SMTP sends replaced by recording fakes, its core a recording stub with
the account's state, bindings and pairings in memory. What it reads from where, what it
commits, what it routes and refuses, the pairing limits at their boundaries, the mails
it hands to SMTP, and every setting's bounds and messages."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import imaplib
import logging
import ssl
import threading
from collections.abc import Callable
from email.message import EmailMessage
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from orchestrator.channels.chatapp.adapter import OutgoingFile, Received, Refusal
from orchestrator.channels.chatapp.core import Backoff
from orchestrator.channels.email import adapter as adapter_module
from orchestrator.channels.email import outbox
from orchestrator.channels.email.adapter import EmailAdapter, Incoming, turn_text
from orchestrator.channels.email.compose import Attached, reply_mail
from orchestrator.channels.email.kind import (
    KIND,
    EmailOptions,
    Endpoint,
    endpoint,
)
from orchestrator.channels.email.mailbox import Fetched, Opened
from orchestrator.channels.email.outbox import NotSent, PartlySent
from orchestrator.channels.email.reading import read_mail
from orchestrator.channels.email.threads import ReplyTarget, thread_key, thread_root
from orchestrator.errors import DaemonStopping, InvalidConfig, OrchestratorError
from orchestrator.limits import (
    DEFAULT_ATTACHMENT_MAX_BYTES,
    EMAIL_FILE_MAX_BYTES,
    EMAIL_IDLE_SECONDS,
    EMAIL_POLL_SECONDS,
    EMAIL_TEXT_MAX,
    FILE_UPLOAD_TIMEOUT_SECONDS,
)
from orchestrator.store.chats import PENDING, UNKNOWN
from tests.test_email_mail import BASE, _key, mail_bytes, options

BOT = "helper@example.org"
ALICE = "alice@example.org"
LOGGER = "orchestrator.channels.email"
NOW = 1_000_000.0


# the fakes


class FakeMailbox:
    """What the adapter calls of a Mailbox, recorded in ``log`` (shared by every box
    the adapter makes); ``mails`` the folder's mails by UID; ``fail`` an error (or
    a function making one) that the named call raises once."""

    def __init__(
        self, server: Endpoint, user: str, password: str, folder: str, context: Any
    ) -> None:
        rig = RIG[0]
        self.rig = rig
        self.args = (server, user, password, folder, context)
        self.client: object | None = None
        rig.boxes.append(self)

    def _call(self, what: str) -> None:
        self.rig.log.append(what)
        name = what.split()[0]
        errors = self.rig.fail.get(name)
        if errors:
            raise errors.pop(0)

    def open(self) -> Opened:
        self._call("open")
        self.client = object()
        return self.rig.opened

    def new_uids(self, after: int) -> list[int]:
        self._call(f"new_uids {after}")
        return [uid for uid in sorted(self.rig.mails) if uid > after]

    def fetch(self, uid: int) -> Fetched | None:
        self._call(f"fetch {uid}")
        raw = self.rig.mails.get(uid)
        if raw is None:
            return None
        return Fetched(uid, raw, len(raw), True)

    def mark_seen(self, uid: int) -> None:
        self._call(f"mark_seen {uid}")

    def wait(self, seconds: float) -> bool:
        self._call(f"wait {seconds}")
        return False

    def noop(self) -> None:
        self._call("noop")

    def interrupt(self) -> None:
        self.rig.log.append("interrupt")

    def close(self) -> None:
        self._call("close")
        self.client = None


class FakeChats:
    def __init__(self) -> None:
        self.state: dict[tuple[str, str], str] = {}
        self.sets: list[tuple[str, str, str]] = []
        self.bound: set[tuple[str, str]] = set()
        self.listed: list[Any] = []
        self.asked: list[dict[str, Any]] = []

    def get_state(self, account: str, key: str) -> str | None:
        return self.state.get((account, key))

    def set_state(self, account: str, key: str, value: str) -> None:
        self.sets.append((account, key, value))
        self.state[(account, key)] = value

    def binding(self, account: str, chat: str) -> object | None:
        return object() if (account, chat) in self.bound else None

    def pairings(self, **kwargs: Any) -> list[Any]:
        self.asked.append(kwargs)
        return self.listed


class Stopped(Exception):
    """Raised by the stub core to end a read loop after a failed read."""


class FakeCore:
    """What the adapter asks of its ChatAccount, recorded."""

    def __init__(self, options: EmailOptions, root: Path | None = None) -> None:
        self.name = "mailbot"
        self.token_asks: list[tuple[str, Any]] = []

        def require(what: str, secrets_file: Any) -> str:
            self.token_asks.append((what, secrets_file))
            return "pw"

        self.account = SimpleNamespace(
            name="mailbot", options=options, token=SimpleNamespace(require=require)
        )
        self.secrets_file = Path("/nowhere/secrets.yaml")
        self.daemon = SimpleNamespace(
            config=SimpleNamespace(secrets_file=self.secrets_file),
            runtime=SimpleNamespace(store=SimpleNamespace(root=root)),
        )
        self.health = SimpleNamespace(bot=None)
        self.chats = FakeChats()
        self.routed: list[Received] = []
        self.route_fails: list[BaseException] = []
        self.failed: list[tuple[str, str, float]] = []
        self.unqueued: list[tuple[str, str, float]] = []
        self.polls = 0
        self.saves = 0
        self.stop_at_failure = False

    def line(self, text: str) -> str:
        return f"Email account mailbot: {text}"

    async def route(self, received: Received) -> None:
        if self.route_fails:
            raise self.route_fails.pop(0)
        self.routed.append(received)

    def polled(self) -> None:
        self.polls += 1

    def save_health(self) -> None:
        self.saves += 1

    async def read_failed(self, what: str, error: str, backoff: Backoff) -> None:
        self.failed.append((what, error, backoff.seconds))
        if self.stop_at_failure:
            raise Stopped
        backoff.seconds *= 2
        await asyncio.sleep(0)

    async def not_queued(self, what: str, exc: OrchestratorError, backoff: Backoff) -> None:
        self.unqueued.append((what, exc.message, backoff.seconds))
        await asyncio.sleep(0)


class Rig:
    def __init__(self, **settings: Any) -> None:
        defaults: dict[str, Any] = {
            "imap_url": "imaps://imap.example.org",
            "smtp_url": "smtps://smtp.example.org",
            "user": "helper-login",
            "address": BOT,
        }
        self.options = EmailOptions(**{**defaults, **settings})
        self.log: list[str] = []
        self.fail: dict[str, list[BaseException]] = {}
        self.mails: dict[int, bytes] = {}
        self.opened = Opened(uidvalidity=7, uidnext=5, idle=True)
        self.boxes: list[FakeMailbox] = []


RIG: list[Rig] = []


@pytest.fixture
def rig(monkeypatch: pytest.MonkeyPatch) -> Rig:
    made = Rig()
    RIG[:] = [made]
    monkeypatch.setattr(adapter_module, "Mailbox", FakeMailbox)
    return made


def make(rig: Rig, root: Path | None = None, **settings: Any) -> tuple[EmailAdapter, FakeCore]:
    core = FakeCore(EmailOptions(**{**vars(rig.options), **settings}), root)
    made = EmailAdapter(cast(Any, core))
    made.context = ssl.create_default_context()
    return made, core


def run(body: Callable[[], Any]) -> Any:
    async def main() -> Any:
        return await body()

    return asyncio.run(main())


def mail_from(sender: str = f"Alice <{ALICE}>", body: str = "hello", **headers: str) -> bytes:
    return mail_bytes(body, sender=sender, headers=headers)


# turn_text


def test_the_turn_reads_the_subject_of_a_mail_that_starts_a_thread() -> None:
    mail = read_mail(mail_bytes("  hi there \n"))
    assert turn_text(mail) == "Subject: Plans\n\nhi there"
    assert turn_text(read_mail(mail_bytes("   "))) == "Subject: Plans"
    assert turn_text(read_mail(mail_bytes("/clear now"))) == "/clear now"
    answer = read_mail(mail_bytes("yes", headers={"In-Reply-To": "<r@example.org>"}))
    assert turn_text(answer) == "yes"
    referring = read_mail(mail_bytes("yes", headers={"References": "<r@example.org>"}))
    assert turn_text(referring) == "yes"
    made = EmailMessage()
    made["From"] = ALICE
    made.set_content(" no subject ")
    assert turn_text(read_mail(made.as_bytes())) == "no subject"


# life


def test_the_adapter_starts_with_nothing_open_and_names_its_bot(rig: Rig) -> None:
    made, core = make(rig)
    assert EmailAdapter(cast(Any, core)).context is None  # until connect makes it
    assert core.health.bot == BOT
    assert made.mailbox is None and made.opened is None and made.context is not None
    assert made.password == "" and made.last_uid == 0
    assert made.name == "mailbot" and made.line("x") == "Email account mailbot: x"
    assert made.chat_word == "address" and made.typing_every == 3600.0
    assert EmailAdapter.txt_lookup is None
    received = Received("c", "s", "t", "m", "e")
    assert made.addressed(received) is True and made.mention_forms(received) == ()
    assert made.classify(NotSent("no")) == outbox.classify(NotSent("no"))
    assert made.classify(PartlySent("1 of 2")) == UNKNOWN


def test_imap_calls_run_one_at_a_time_on_the_accounts_own_thread(rig: Rig) -> None:
    made, _ = make(rig)
    second = threading.Event()

    def first() -> tuple[str, bool]:
        return threading.current_thread().name, second.wait(0.5)

    async def body() -> Any:
        return await asyncio.gather(made._imap(first), made._imap(second.set))

    (name, overlapped), _ = run(body)
    made.pool.shutdown()
    assert name.startswith("imap-mailbot_")
    assert overlapped is False  # the second call waited for the first


def test_connect_logs_in_to_smtp_then_opens_the_folder(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    made, core = make(rig, ca_file="/etc/my-ca.pem", folder="Support")
    made.context = None
    context = ssl.create_default_context()
    contexts: list[Any] = []
    logins: list[tuple[Any, ...]] = []

    def tls(ca_file: Any) -> ssl.SSLContext:
        contexts.append(ca_file)
        return context

    async def check_login(*args: Any) -> None:
        logins.append(args)

    monkeypatch.setattr(adapter_module, "tls_context", tls)
    monkeypatch.setattr(outbox, "check_login", check_login)
    assert run(made.connect) == BOT
    assert core.token_asks == [("channel account 'mailbot'", core.secrets_file)]
    assert made.password == "pw" and made.context is context and contexts == ["/etc/my-ca.pem"]
    assert logins == [(endpoint("smtps://smtp.example.org"), "helper-login", "pw", context)]
    [box] = rig.boxes
    assert box.args == (
        endpoint("imaps://imap.example.org"),
        "helper-login",
        "pw",
        "Support",
        context,
    )
    assert rig.log == ["open"] and made.mailbox is box and made.opened is rig.opened


def test_a_first_start_notes_where_the_folder_ends(rig: Rig) -> None:
    made, core = make(rig)
    opened = run(made._open)
    assert opened is rig.opened and made.opened is opened
    assert made.last_uid == 4
    assert core.chats.sets == [("mailbot", "uid", "7:4")]


@pytest.mark.parametrize("stored", ["6:40", "7:x", "7:", "7", "7:-3", ":40"])
def test_a_folder_made_anew_is_read_from_its_end_with_a_warning(
    rig: Rig, stored: str, caplog: pytest.LogCaptureFixture
) -> None:
    made, core = make(rig, folder="Support")
    core.chats.state[("mailbot", "uid")] = stored
    with caplog.at_level(logging.INFO, LOGGER):
        run(made._open)
    assert made.last_uid == 4 and core.chats.sets == [("mailbot", "uid", "7:4")]
    assert [r.getMessage() for r in caplog.records] == [
        "Email account mailbot: folder Support was made anew (its UIDVALIDITY changed): the "
        "mail in it now is not answered, new mail is"
    ]
    assert caplog.records[0].levelno == logging.WARNING


def test_a_restart_reads_on_from_the_uid_committed(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    made, core = make(rig)
    core.chats.state[("mailbot", "uid")] = "7:40"
    with caplog.at_level(logging.DEBUG, LOGGER):
        run(made._open)
    assert made.last_uid == 40 and core.chats.sets == [] and caplog.records == []


def test_a_server_without_idle_is_said_once_and_polled(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    made, core = make(rig, folder="Support", poll_interval=0)
    rig.opened = Opened(uidvalidity=7, uidnext=1, idle=False)
    with caplog.at_level(logging.INFO, LOGGER):
        run(made._open)
    assert made.last_uid == 0 and core.chats.sets == [("mailbot", "uid", "7:0")]
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (
            logging.INFO,
            "Email account mailbot: the IMAP server offers no IDLE; Support is read every 0s",
        )
    ]
    rig.log.clear()
    run(made._wait)
    assert rig.log == ["noop"]


def test_a_server_with_idle_is_waited_on(rig: Rig) -> None:
    made, _ = make(rig)
    run(made._open)
    rig.log.clear()
    run(made._wait)
    assert rig.log == [f"wait {EMAIL_IDLE_SECONDS}"]


def test_opening_again_closes_the_mailbox_before(rig: Rig) -> None:
    made, _ = make(rig)
    run(made._open)
    first = made.mailbox
    run(made._open)
    assert rig.log == ["open", "close", "open"]
    assert made.mailbox is not first and len(rig.boxes) == 2


def test_close_interrupts_the_wait_closes_and_stops_the_thread(rig: Rig) -> None:
    made, _ = make(rig)
    run(made.close)  # nothing open: nothing to close
    assert rig.log == []
    made, _ = make(rig)
    run(made._open)
    run(made.close)
    assert rig.log == ["open", "interrupt", "close"]
    with pytest.raises(RuntimeError):
        made.pool.submit(print)
    made, _ = make(rig)
    run(made._open)
    rig.fail["close"] = [imaplib.IMAP4.error("gone")]
    run(made.close)  # a failed close is no error
    assert rig.log[-2:] == ["interrupt", "close"]


def asyncio_recording(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """The adapter's asyncio, its waits recorded: ("wait_for", timeout), ("sleep", delay)."""
    calls: list[tuple[str, Any]] = []

    def wait_for(awaitable: Any, timeout: Any) -> Any:
        calls.append(("wait_for", timeout))
        return asyncio.wait_for(awaitable, timeout)

    def sleep(delay: Any) -> Any:
        calls.append(("sleep", delay))
        return asyncio.sleep(0)

    recording = SimpleNamespace(**{**vars(asyncio), "wait_for": wait_for, "sleep": sleep})
    monkeypatch.setattr(adapter_module, "asyncio", recording)
    return calls


def test_the_close_of_the_mailbox_is_given_five_seconds(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = asyncio_recording(monkeypatch)
    made, _ = make(rig)
    run(made._open)
    run(made.close)
    assert calls == [("wait_for", 5)]


def test_a_server_without_idle_is_asked_after_the_poll_interval(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = asyncio_recording(monkeypatch)
    made, _ = make(rig, poll_interval=42)
    rig.opened = Opened(uidvalidity=7, uidnext=1, idle=False)
    run(made._open)
    rig.log.clear()
    run(made._wait)
    assert calls == [("sleep", 42)] and rig.log == ["noop"]


def test_close_leaves_a_blocked_imap_call_and_drops_the_queued_ones(rig: Rig) -> None:
    made, _ = make(rig)
    release = threading.Event()
    started = threading.Event()
    ran: list[str] = []

    def blocked() -> None:
        started.set()
        release.wait(10)
        ran.append("blocked")

    async def body() -> None:
        loop = asyncio.get_running_loop()
        loop.run_in_executor(made.pool, blocked)
        queued = loop.run_in_executor(made.pool, ran.append, "queued")
        assert await asyncio.to_thread(started.wait, 10)
        await made.close()
        assert ran == []  # close did not wait for the blocked call
        with contextlib.suppress(asyncio.CancelledError):
            await queued
        assert queued.cancelled() and ran == []

    try:
        run(body)
    finally:
        release.set()
    made.pool.shutdown(wait=True)
    assert ran == ["blocked"]


# inbound


def test_new_mail_is_handled_marked_seen_and_committed_one_by_one(rig: Rig) -> None:
    made, core = make(rig)
    rig.mails = {5: mail_from(), 6: mail_from(body="again")}
    run(made._open)
    rig.log.clear()
    assert run(lambda: made._read_new(Backoff())) == 2
    assert rig.log == ["new_uids 4", "fetch 5", "mark_seen 5", "fetch 6", "mark_seen 6"]
    assert core.chats.sets[1:] == [("mailbot", "uid", "7:5"), ("mailbot", "uid", "7:6")]
    assert made.last_uid == 6
    assert [r.event_id for r in core.routed] == ["7.5", "7.6"]
    rig.log.clear()
    assert run(lambda: made._read_new(Backoff())) == 0
    assert rig.log == ["new_uids 6"]


def test_a_mail_gone_before_its_fetch_is_skipped_and_committed(rig: Rig) -> None:
    made, core = make(rig)
    run(made._open)
    rig.log.clear()
    rig.mails = {5: mail_from()}

    def gone(uid: int) -> None:
        rig.log.append(f"fetch {uid}")

    cast(Any, made.mailbox).fetch = gone
    assert run(lambda: made._read_new(Backoff())) == 1
    assert rig.log == ["new_uids 4", "fetch 5"]
    assert core.chats.sets[-1] == ("mailbot", "uid", "7:5") and core.routed == []


def test_a_mail_that_cannot_be_handled_is_logged_skipped_and_committed(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    made, core = make(rig)
    rig.mails = {5: mail_from()}
    core.route_fails = [ValueError("broken")]
    run(made._open)
    rig.fail["mark_seen"] = [imaplib.IMAP4.error("read-only")]
    with caplog.at_level(logging.INFO, LOGGER):
        assert run(lambda: made._read_new(Backoff())) == 1
    assert [r.getMessage() for r in caplog.records] == [
        "Email account mailbot: mail 5 could not be handled; skipped"
    ]
    assert caplog.records[0].exc_info is not None
    assert rig.log[-1] == "mark_seen 5" and core.chats.sets[-1] == ("mailbot", "uid", "7:5")
    assert made.last_uid == 5


def test_a_mail_the_queue_does_not_take_is_left_for_the_next_read(rig: Rig) -> None:
    made, core = make(rig)
    rig.mails = {5: mail_from(), 6: mail_from()}
    core.route_fails = [OrchestratorError("queue full")]
    run(made._open)
    rig.log.clear()
    backoff = Backoff()
    backoff.seconds = 4.0
    assert run(lambda: made._read_new(backoff)) is None
    assert core.unqueued == [("mail 5", "queue full", 4.0)]
    assert rig.log == ["new_uids 4", "fetch 5"] and made.last_uid == 4
    assert core.chats.sets == [("mailbot", "uid", "7:4")]


@pytest.mark.parametrize("error", [DaemonStopping("stop"), asyncio.CancelledError()])
def test_a_stop_while_a_mail_is_handled_commits_nothing(rig: Rig, error: BaseException) -> None:
    made, core = make(rig)
    rig.mails = {5: mail_from()}
    core.route_fails = [error]
    run(made._open)
    with pytest.raises(type(error)):
        run(lambda: made._read_new(Backoff()))
    assert made.last_uid == 4 and core.chats.sets == [("mailbot", "uid", "7:4")]
    assert "mark_seen 5" not in rig.log


def test_the_read_loop_reads_again_before_it_waits_and_stops_on_a_stop(rig: Rig) -> None:
    made, core = make(rig)
    rig.mails = {5: mail_from()}
    rig.fail["wait"] = [DaemonStopping("stopping")]

    async def body() -> Any:
        return await asyncio.wait_for(made.receive(), 10)

    assert run(body) is None
    assert rig.log == [
        "open",
        "new_uids 4",
        "fetch 5",
        "mark_seen 5",
        "new_uids 5",
        f"wait {EMAIL_IDLE_SECONDS}",
    ]
    assert core.polls == 2 and core.saves == 2 and len(core.routed) == 1
    assert core.failed == []


def test_a_failed_read_closes_reports_and_opens_again_with_backoff(rig: Rig) -> None:
    made, core = make(rig)
    rig.fail["new_uids"] = [OSError("reset")]
    rig.fail["wait"] = [imaplib.IMAP4.error("bye"), DaemonStopping("stop")]

    async def body() -> Any:
        return await asyncio.wait_for(made.receive(), 10)

    assert run(body) is None
    assert core.failed == [
        ("reading mail", "OSError: reset", 1.0),
        ("reading mail", "error: bye", 1.0),  # a good read in between reset the backoff
    ]
    assert rig.log == [
        "open",
        "new_uids 4",
        "close",
        "close",
        "open",
        "new_uids 4",
        f"wait {EMAIL_IDLE_SECONDS}",
        "close",
        "close",
        "open",
        "new_uids 4",
        f"wait {EMAIL_IDLE_SECONDS}",
    ]


def test_an_orchestrator_error_while_reading_is_a_failed_read(rig: Rig) -> None:
    made, core = make(rig)
    rig.fail["open"] = [OrchestratorError("insecure")]
    core.stop_at_failure = True
    with pytest.raises(Stopped):
        run(made.receive)
    assert core.failed == [("reading mail", "OrchestratorError: insecure", 1.0)]
    assert rig.log == ["open", "close"]


def test_an_error_before_any_mailbox_reports_without_a_close(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    made, core = make(rig)

    def refused(*_: Any) -> Any:
        raise OSError("refused")

    monkeypatch.setattr(adapter_module, "Mailbox", refused)
    core.stop_at_failure = True
    with pytest.raises(Stopped):
        run(made.receive)
    assert core.failed == [("reading mail", "OSError: refused", 1.0)] and rig.log == []


def test_a_mail_the_queue_does_not_take_is_read_again_at_once(rig: Rig) -> None:
    made, core = make(rig)
    rig.mails = {5: mail_from()}
    core.route_fails = [OrchestratorError("busy")]
    rig.fail["wait"] = [DaemonStopping("stopping")]

    async def body() -> Any:
        return await asyncio.wait_for(made.receive(), 10)

    run(body)
    assert core.unqueued == [("mail 5", "busy", 1.0)]
    assert rig.log == [
        "open",
        "new_uids 4",
        "fetch 5",
        "new_uids 4",
        "fetch 5",
        "mark_seen 5",
        "new_uids 5",
        f"wait {EMAIL_IDLE_SECONDS}",
    ]
    assert core.polls == 2 and len(core.routed) == 1


def test_a_cancelled_read_loop_is_cancelled(rig: Rig) -> None:
    made, _ = make(rig)
    rig.fail["open"] = [asyncio.CancelledError()]

    async def body() -> Any:
        await made.receive()

    with pytest.raises(asyncio.CancelledError):
        run(body)


# one mail


def routed_of(rig: Rig, raw: bytes, **settings: Any) -> tuple[FakeCore, EmailAdapter]:
    made, core = make(rig, **settings)
    core.chats.bound.add(("mailbot", ALICE))
    run(made._open)
    run(lambda: made.handle(Fetched(9, raw, len(raw), True)))
    return core, made


def test_a_mail_goes_to_the_core_with_its_ids_thread_and_title(rig: Rig) -> None:
    raw = mail_from(References="<root@example.org> <mid@example.org>")
    core, _ = routed_of(rig, raw)
    mail = read_mail(raw)
    [received] = core.routed
    assert received == Received(
        chat=ALICE,
        sender=ALICE,
        text="hello",
        message_id=ReplyTarget.of(mail).encode(),
        event_id="7.9",
        thread=thread_key(thread_root(mail)),
        group_chat=False,
        title="Alice",
        raw=Incoming(mail, Fetched(9, raw, len(raw), True)),
    )
    assert received.group_chat is False and received.thread is not None


def test_a_title_is_the_name_else_the_subject_else_none(rig: Rig) -> None:
    core, _ = routed_of(rig, mail_from(sender=ALICE))
    assert core.routed[0].title == "Plans"
    made = EmailMessage()
    made["From"] = ALICE
    made.set_content("hi")
    raw = made.as_bytes()
    core, _ = routed_of(rig, raw)
    assert core.routed[0].title is None


def test_mail_from_the_account_itself_is_ignored(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, LOGGER):
        core, _ = routed_of(rig, mail_from(sender=f"Me <{BOT}>"))
    assert core.routed == []
    assert [r.getMessage() for r in caplog.records] == [
        "Email account mailbot: mail 9 is from this account itself; ignored"
    ]


def test_automatic_mail_is_dropped_and_said(rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, LOGGER):
        core, _ = routed_of(rig, mail_from(**{"Auto-Submitted": "auto-replied"}))
    assert core.routed == []
    assert [r.getMessage() for r in caplog.records] == [
        f"Email account mailbot: mail 9 from {ALICE} is automatic (Auto-Submitted: "
        "auto-replied): no turn, no answer"
    ]
    caplog.clear()
    made = EmailMessage()
    made["To"] = BOT
    made["Auto-Submitted"] = "auto-generated"
    made.set_content("hi")
    with caplog.at_level(logging.INFO, LOGGER):
        core, _ = routed_of(rig, made.as_bytes())
    assert core.routed == []
    assert "mail 9 from nobody is automatic" in caplog.records[-1].getMessage()


def dkim_signed(raw: bytes, private: bytes, domain: bytes = b"example.org") -> bytes:
    import dkim

    raw = raw.replace(b"\n", b"\r\n")
    return bytes(dkim.sign(raw, b"s1", domain, private, include_headers=[b"from"])) + raw


def test_with_dkim_only_a_proven_from_is_routed(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    private, record = _key()
    looked: list[bytes] = []

    def lookup(name: bytes, *_: Any, **__: Any) -> bytes | None:
        looked.append(name)
        return record if name == b"s1._domainkey.example.org." else None

    monkeypatch.setattr(EmailAdapter, "txt_lookup", staticmethod(lookup))
    core, _ = routed_of(rig, dkim_signed(mail_from(), private), verify="dkim")
    assert [r.chat for r in core.routed] == [ALICE] and looked
    with caplog.at_level(logging.INFO, LOGGER):
        core, _ = routed_of(rig, mail_from(), verify="dkim")
    assert core.routed == []
    assert [r.getMessage() for r in caplog.records] == [
        f"Email account mailbot: mail 9 claims to be from {ALICE}, unproven (the mail has no DKIM "
        "signature): no turn, no answer"
    ]
    caplog.clear()
    forged = dkim_signed(mail_from(sender="Eve <eve@elsewhere.org>"), private)
    with caplog.at_level(logging.INFO, LOGGER):
        core, _ = routed_of(rig, forged, verify="dkim")
    assert core.routed == [] and "unproven" in caplog.records[-1].getMessage()
    core, _ = routed_of(rig, mail_from(), verify="none")  # not checked without dkim
    assert len(core.routed) == 1


def test_an_address_up_to_its_limit_is_routed_and_a_longer_one_ignored(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    domain = "b" * 63 + "." + "c" * 63 + ".org"
    longest = "a" * (200 - 1 - len(domain)) + "@" + domain
    assert len(longest) == 200
    made, core = make(rig)
    core.chats.bound.add(("mailbot", longest))
    core.chats.bound.add(("mailbot", "x" + longest))
    run(made._open)

    async def both() -> None:
        for uid, sender in ((1, longest), (2, "x" + longest)):
            raw = mail_from(sender=sender)
            await made.handle(Fetched(uid, raw, len(raw), True))

    with caplog.at_level(logging.INFO, LOGGER):
        run(both)
    assert [r.chat for r in core.routed] == [longest]
    assert [r.getMessage() for r in caplog.records] == [
        f"Email account mailbot: mail 2: the address {('x' + longest)[:80]!r} is too long; ignored"
    ]


def test_an_unprintable_address_is_ignored(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    made, core = make(rig)
    run(made._open)
    raw = mail_from()
    odd = "al\x7fice@example.org"
    core.chats.bound.add(("mailbot", odd))
    monkeypatch.setattr(
        adapter_module, "read_mail", lambda data: dataclasses.replace(read_mail(data), sender=odd)
    )
    run(lambda: made.handle(Fetched(1, raw, len(raw), True)))
    assert core.routed == []


def pairing(
    chat: str,
    created: float,
    *,
    state: str = "denied",
    expires: float = 0.0,
    account: str = "mailbot",
) -> Any:
    return SimpleNamespace(
        account=account, chat=chat, state=state, created=created, expires=expires
    )


def may_pair(rig: Rig, monkeypatch: pytest.MonkeyPatch, listed: list[Any]) -> tuple[bool, FakeCore]:
    monkeypatch.setattr(adapter_module, "time", SimpleNamespace(time=lambda: NOW))
    made, core = make(rig)
    core.chats.listed = listed
    return run(lambda: made._may_pair(ALICE)), core


def test_an_unbound_address_gets_a_code_unless_mailed_one_recently(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    day = 86_400
    assert may_pair(rig, monkeypatch, [])[0] is True
    ok, core = may_pair(rig, monkeypatch, [pairing(ALICE, NOW - day)])
    assert ok is True and core.chats.asked == [{"everything": True}]
    with caplog.at_level(logging.INFO, LOGGER):
        assert may_pair(rig, monkeypatch, [pairing(ALICE, NOW - day + 1)])[0] is False
    assert [r.getMessage() for r in caplog.records] == [
        f"Email account mailbot: {ALICE} is not bound and was mailed a code recently; no code again"
    ]
    # another account's code, or another address's, does not count
    assert may_pair(rig, monkeypatch, [pairing(ALICE, NOW, account="other")])[0] is True
    assert may_pair(rig, monkeypatch, [pairing("bob@example.org", NOW)])[0] is True
    # a live code: the core says so again, no new mail
    live = pairing(ALICE, NOW, state=PENDING, expires=NOW + 1)
    assert may_pair(rig, monkeypatch, [live])[0] is True
    expired = pairing(ALICE, NOW, state=PENDING, expires=NOW)
    assert may_pair(rig, monkeypatch, [expired])[0] is False
    decided = pairing(ALICE, NOW, state="approved", expires=NOW + 100)
    assert may_pair(rig, monkeypatch, [decided])[0] is False
    live_elsewhere = pairing(ALICE, NOW, state=PENDING, expires=NOW + 100, account="other")
    assert may_pair(rig, monkeypatch, [live_elsewhere, pairing(ALICE, NOW - 5)])[0] is False
    live_other = pairing("bob@example.org", NOW, state=PENDING, expires=NOW + 100)
    assert may_pair(rig, monkeypatch, [live_other, pairing(ALICE, NOW - 5)])[0] is False


def test_an_account_mails_at_most_ten_codes_an_hour(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    others = [pairing(f"p{n}@example.org", NOW - 3599) for n in range(9)]
    assert may_pair(rig, monkeypatch, others)[0] is True
    assert may_pair(rig, monkeypatch, [*others, pairing("q@example.org", NOW - 3600)])[0] is True
    assert (
        may_pair(rig, monkeypatch, [*others, pairing("q@example.org", NOW, account="x")])[0] is True
    )
    with caplog.at_level(logging.INFO, LOGGER):
        ok, _ = may_pair(rig, monkeypatch, [*others, pairing("q@example.org", NOW - 3599)])
    assert ok is False
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (
            logging.WARNING,
            f"Email account mailbot: {ALICE} is not bound; 10 pairing codes were mailed in "
            "the last hour, the most an account sends: it gets none",
        )
    ]


def test_an_unbound_address_is_routed_only_when_it_may_get_a_code(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(adapter_module, "time", SimpleNamespace(time=lambda: NOW))
    made, core = make(rig)
    run(made._open)
    raw = mail_from()
    run(lambda: made.handle(Fetched(1, raw, len(raw), True)))
    assert [r.chat for r in core.routed] == [ALICE]
    core.chats.listed = [pairing(ALICE, NOW - 10)]
    run(lambda: made.handle(Fetched(2, raw, len(raw), True)))
    assert len(core.routed) == 1
    core.chats.bound.add(("mailbot", ALICE))  # bound: no pairing asked
    run(lambda: made.handle(Fetched(3, raw, len(raw), True)))
    assert len(core.routed) == 2


# files in


def with_files(*files: tuple[str, bytes]) -> bytes:
    made = EmailMessage()
    made["From"] = ALICE
    made["Subject"] = "files"
    made.set_content("see")
    for name, data in files:
        made.add_attachment(data, maintype="application", subtype="octet-stream", filename=name)
    return made.as_bytes()


def attachment(
    rig: Rig, root: Path | None, raw: bytes, whole: bool = True, size: int = 0, **settings: Any
) -> Any:
    made, _ = make(rig, root, **settings)
    fetched = Fetched(1, raw, size or len(raw), whole)
    received = Received(ALICE, ALICE, "t", "m", "e", raw=Incoming(read_mail(raw), fetched))
    return run(lambda: made.attachment(received, "fam"))


def test_a_mails_files_are_stored_in_the_groups_inbox(rig: Rig, tmp_path: Path) -> None:
    (tmp_path / "fam").mkdir()
    stored = attachment(
        rig, tmp_path, with_files(("a.bin", b"12345"), ("b.txt", b"xy")), attachments_max_bytes=5
    )
    assert [(s.original, s.mime, s.size, s.label) for s in stored] == [
        ("a.bin", "application/octet-stream", 5, "file"),
        ("b.txt", "application/octet-stream", 2, "file"),
    ]
    inbox = tmp_path / "fam" / "files" / "inbox"
    assert sorted(p.read_bytes() for p in inbox.iterdir()) == [b"12345", b"xy"]
    assert attachment(rig, tmp_path, mail_from()) is None


def test_a_mail_or_its_files_over_the_limits_are_refused(rig: Rig, tmp_path: Path) -> None:
    (tmp_path / "fam").mkdir()
    big = attachment(rig, tmp_path, mail_from(), whole=False, size=40 * 1024 * 1024)
    assert big == Refusal("Sorry, your mail is 40.0 MiB; I read mails up to 32.0 MiB.")
    over = attachment(rig, tmp_path, with_files(("a", b"123456")), attachments_max_bytes=5)
    assert over == Refusal("Sorry, a file of your mail is 6 B; I take files up to 5 B.")
    none = attachment(rig, tmp_path, with_files(("a", b"1")), attachments_max_bytes=0)
    assert none == Refusal("Sorry, I do not take files here.")
    # nor an empty one
    empty = attachment(rig, tmp_path, with_files(("a", b"")), attachments_max_bytes=0)
    assert empty == Refusal("Sorry, I do not take files here.")
    assert not (tmp_path / "fam" / "files").exists()
    ten = with_files(*[(f"f{n}", b"x") for n in range(10)])
    assert len(attachment(rig, tmp_path, ten)) == 10
    eleven = with_files(*[(f"f{n}", b"x") for n in range(11)])
    assert attachment(rig, tmp_path, eleven) == Refusal(
        "Sorry, your mail has 11 files; I take at most 10 per mail."
    )


# outbound


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    calls: list[tuple[Any, ...]] = []

    async def send_mails(*args: Any, **kwargs: Any) -> list[str]:
        calls.append((*args, kwargs))
        return [str(m["Message-ID"]) for m in args[4]]

    monkeypatch.setattr(outbox, "send_mails", send_mails)
    return calls


def shape(mail: EmailMessage) -> list[Any]:
    """A mail but for its Date and its parts' boundaries: its headers, then each part's
    type, file name and content."""
    found: list[Any] = [(k, str(v)) for k, v in mail.items() if k not in ("Date", "Content-Type")]
    for part in mail.walk():
        content = None if part.is_multipart() else cast(Any, part).get_content()
        found.append((part.get_content_type(), part.get_filename(), content))
    return found


def same(a: EmailMessage, b: EmailMessage) -> bool:
    return shape(a) == shape(b) and len(shape(a)) > 3


def test_a_reply_is_mailed_threaded_from_the_account(rig: Rig, sent: list[tuple[Any, ...]]) -> None:
    made, _ = make(rig)
    made.password = "pw"
    target = ReplyTarget("<m1@example.org>", "Plans", ("<r@example.org>",))
    ids = run(lambda: made.send(ALICE, "t1", target.encode(), "the answer", "k1"))
    [(server, user, password, context, mails, kwargs)] = sent
    assert (server, user, password, context, kwargs) == (
        endpoint("smtps://smtp.example.org"),
        "helper-login",
        "pw",
        made.context,
        {},
    )
    expected = reply_mail(
        sender=BOT,
        to=ALICE,
        text="the answer",
        target=target,
        thread="t1",
        key="k1",
        piece=0,
        pieces=1,
    )
    [mail] = mails
    assert ids == [str(mail["Message-ID"])]
    assert same(mail, expected)


def test_a_long_reply_is_mailed_in_pieces(rig: Rig, sent: list[tuple[Any, ...]]) -> None:
    made, _ = make(rig)
    text = ("word " * (EMAIL_TEXT_MAX // 5 + 10)).strip()
    run(lambda: made.send(ALICE, None, None, text, "k2"))
    mails = sent[0][4]
    assert len(mails) == 2
    for index, mail in enumerate(mails):
        body = cast(Any, mail.get_body(("plain",))).get_content()
        expected = reply_mail(
            sender=BOT,
            to=ALICE,
            text=body.rstrip("\n"),
            target=None,
            thread=None,
            key="k2",
            piece=index,
            pieces=2,
        )
        assert str(mail["Message-ID"]) == str(expected["Message-ID"])
        assert str(mail["Subject"]) == str(expected["Subject"])
    assert str(mails[0]["Message-ID"]) != str(mails[1]["Message-ID"])


def test_a_file_is_mailed_attached_to_a_threaded_reply(
    rig: Rig, sent: list[tuple[Any, ...]], tmp_path: Path
) -> None:
    made, _ = make(rig)
    made.password = "pw"
    path = tmp_path / "out.pdf"
    path.write_bytes(b"%PDF-1.4 data")
    target = ReplyTarget("<m1@example.org>", "Plans", ())
    file = OutgoingFile(path, "report.pdf", "application/pdf", 2048, "document", " see this ")
    run(lambda: made.send_file(ALICE, "t1", target.encode(), file, "k3"))
    [(server, user, password, context, [mail], kwargs)] = sent
    assert (server, user, password, context) == (
        endpoint("smtps://smtp.example.org"),
        "helper-login",
        "pw",
        made.context,
    )
    assert kwargs == {"timeout": FILE_UPLOAD_TIMEOUT_SECONDS}
    expected = reply_mail(
        sender=BOT,
        to=ALICE,
        text="see this",
        target=target,
        thread="t1",
        key="k3",
        piece=0,
        pieces=1,
        files=(Attached("report.pdf", "application/pdf", b"%PDF-1.4 data"),),
    )
    assert same(mail, expected)
    plain = OutgoingFile(path, "report.pdf", "application/pdf", 2048, "document", "  ")
    run(lambda: made.send_file(ALICE, None, None, plain, "k4"))
    body = cast(Any, sent[1][4][0].get_body(("plain",))).get_content().strip()
    assert body == "report.pdf (2.0 KiB) is attached."


# the settings


def test_settings_keep_every_value_given(tmp_path: Path) -> None:
    found = options(
        "imap_url: imap://127.0.0.1:1143/\nsmtp_url: smtp://[::1]:2525\nuser: login\n"
        "address: Bot@Example.org\nfolder: Support/Bots\nverify: dkim\n"
        "ca_file: /etc/ca.pem\npoll_interval: 5s\nattachments_max_bytes: 0\n"
    )
    assert found == EmailOptions(
        "imap://127.0.0.1:1143",
        "smtp://[::1]:2525",
        "login",
        "bot@example.org",
        "Support/Bots",
        "dkim",
        "/etc/ca.pem",
        5,
        0,
    )
    assert found.imap == Endpoint("127.0.0.1", 1143, False)
    assert found.smtp == Endpoint("::1", 2525, False)
    assert found.imap.loopback and found.smtp.loopback
    upper = options("imap_url: imaps://MAILX/\nsmtp_url: smtps://MAILX//\nuser: h@x.org\n")
    assert (upper.imap_url, upper.smtp_url) == ("imaps://MAILX", "smtps://MAILX")
    defaults = options(BASE + "user: h@x.org\n")
    assert defaults == EmailOptions(
        "imaps://mail.example.org",
        "smtps://mail.example.org:465",
        "h@x.org",
        "h@x.org",
        "INBOX",
        "none",
        None,
        EMAIL_POLL_SECONDS,
        DEFAULT_ATTACHMENT_MAX_BYTES,
    )
    assert EmailOptions() == EmailOptions(
        "", "", "", "", "INBOX", "none", None, EMAIL_POLL_SECONDS, DEFAULT_ATTACHMENT_MAX_BYTES
    )
    assert options(BASE + "user: h@x.org\npoll_interval: 1h\n").poll_interval == 3600
    big = options(BASE + "user: h@x.org\nattachments_max_bytes: 2g\n")
    assert big.attachments_max_bytes == 2 * 1024**3


def test_endpoints_and_their_default_ports() -> None:
    assert endpoint("imaps://h") == Endpoint("h", 993, True)
    assert endpoint("imap://h") == Endpoint("h", 143, False)
    assert endpoint("smtps://h") == Endpoint("h", 465, True)
    assert endpoint("smtp://h") == Endpoint("h", 587, False)
    assert endpoint("smtp://h/") == Endpoint("h", 587, False)
    assert endpoint("imaps://h:1") == Endpoint("h", 1, True)
    assert Endpoint("localhost", 1, False).loopback
    assert not Endpoint("X127.0.0.1X", 1, False).loopback  # a name, not an address
    assert Endpoint("[::1]", 1, False).loopback and Endpoint("127.0.0.2", 1, False).loopback
    assert not Endpoint("10.0.0.1", 1, False).loopback
    assert not Endpoint("localhost.example.org", 1, False).loopback


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://h", "'http://h': the scheme must be one of imaps, imap, smtps, smtp"),
        ("imaps://u@h", "'imaps://u@h': no login in the URL (user and password_env say it)"),
        ("imaps://:p@h", "'imaps://:p@h': no login in the URL (user and password_env say it)"),
        ("imaps://h/x", "'imaps://h/x': a server URL has a host and a port only"),
        ("imaps://h?x=1", "'imaps://h?x=1': a server URL has a host and a port only"),
        ("imaps://h#x", "'imaps://h#x': a server URL has a host and a port only"),
        ("imaps://:993", "'imaps://:993' has no host"),
        ("imaps://h:99999", "'imaps://h:99999': the port is not a number from 1 to 65535"),
        ("imaps://h:x", "'imaps://h:x': the port is not a number from 1 to 65535"),
    ],
)
def test_a_bad_endpoint_says_what_is_wrong(url: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        endpoint(url)
    assert str(caught.value) == message


def refused(text: str) -> str:
    with pytest.raises(InvalidConfig) as caught:
        options(text)
    return caught.value.message


USER = "user: h@x.org\n"


def test_bad_settings_say_exactly_what_is_wrong() -> None:
    assert refused("imap_url: smtps://x\nsmtp_url: smtps://x\n" + USER).endswith(
        "imap_url: 'smtps://x': expected imaps://HOST[:PORT] or imap://..."
    )
    assert refused("imap_url: imaps://x\nsmtp_url: imap://x\n" + USER).endswith(
        "smtp_url: 'imap://x': expected smtps://HOST[:PORT] or smtp://..."
    )
    assert refused("imap_url: imaps://x/y\nsmtp_url: smtps://x\n" + USER).endswith(
        "imap_url: 'imaps://x/y': a server URL has a host and a port only"
    )
    assert refused("imap_url: imaps://x\nsmtp_url: smtps://x/y\n" + USER).endswith(
        "smtp_url: 'smtps://x/y': a server URL has a host and a port only"
    )
    long_url = "imaps://" + "h" * 505
    assert "at most 512 allowed" in refused(f"imap_url: {long_url}\nsmtp_url: smtps://x\n" + USER)
    assert options(f"imap_url: {long_url[:-1]}\nsmtp_url: smtps://x\n" + USER).imap_url
    assert refused(BASE + "user: helper\n").endswith(
        "address: user 'helper' is not an email address: give address (the From: of replies)"
    )
    assert "at most 320 allowed" in refused(BASE + "user: " + "u" * 321 + "\n")
    assert options(BASE + "user: " + "u" * 320 + "\naddress: a@x.org\n").user == "u" * 320
    assert "does not match" in refused(BASE + USER + "address: not-an-address\n")
    assert "at most 320 allowed" in refused(BASE + USER + "address: a@" + "x" * 319 + "\n")
    assert "does not match" in refused(BASE + USER + 'folder: "a\\"b"\n')
    assert "at most 200 allowed" in refused(BASE + USER + "folder: " + "f" * 201 + "\n")
    assert options(BASE + USER + "folder: " + "f" * 200 + "\n").folder == "f" * 200
    assert refused(BASE + USER + "ca_file: rel.pem\n").endswith(
        "ca_file: 'rel.pem': give an absolute path to a PEM file"
    )
    assert "at most 1024 allowed" in refused(BASE + USER + "ca_file: /" + "c" * 1024 + "\n")
    assert options(BASE + USER + "ca_file: /" + "c" * 1023 + "\n").ca_file == "/" + "c" * 1023
    assert refused(BASE + USER + "poll_interval: 4s\n").endswith(
        "poll_interval: got '4s'; expected a duration from 5s to 1h"
    )
    assert "from 5s to 1h" in refused(BASE + USER + "poll_interval: 3601s\n")
    assert "from 5s to 1h" in refused(BASE + USER + "poll_interval: soon\n")
    assert refused(BASE + USER + "attachments_max_bytes: 3g\n").endswith(
        "attachments_max_bytes: got '3g'; expected a size up to 2g (such as 10m; 0 refuses "
        "every file)"
    )
    over = 2 * 1024**3 + 1
    assert "up to 2g" in refused(BASE + USER + f"attachments_max_bytes: {over}\n")
    assert "up to 2g" in refused(BASE + USER + "attachments_max_bytes: -1\n")
    assert "up to 2g" in refused(BASE + USER + "attachments_max_bytes: big\n")
    assert "valid values: none, dkim" in refused(BASE + USER + "verify: spf\n")


def test_the_kind_as_the_command_line_and_doctor_see_it() -> None:
    assert (KIND.name, KIND.title, KIND.credential) == ("email", "Email", "password")
    assert KIND.adapter == "orchestrator.channels.email.adapter:EmailAdapter"
    assert KIND.loggers == ("imapclient", "aiosmtplib")
    assert KIND.proves_senders is False and KIND.files_out_max_bytes == EMAIL_FILE_MAX_BYTES
    assert KIND.parse is not None
    flags = [(o.key, o.flag, o.metavar, o.required, o.multiple) for o in KIND.options]
    assert flags == [
        ("imap_url", "--imap-url", "URL", True, False),
        ("smtp_url", "--smtp-url", "URL", True, False),
        ("user", "--user", "LOGIN", True, False),
        ("address", "--address", "ADDRESS", False, False),
        ("folder", "--folder", "FOLDER", False, False),
        ("verify", "--verify", "none|dkim", False, False),
        ("ca_file", "--ca-file", "PATH", False, False),
        ("poll_interval", "--poll-interval", "DURATION", False, False),
        ("attachments_max_bytes", "--attachments-max", "SIZE", False, False),
    ]
    assert [o.help for o in KIND.options] == [
        "Email: the IMAP server, imaps://HOST[:PORT] (or imap:// with STARTTLS).",
        "Email: the SMTP server, smtps://HOST[:PORT] (or smtp:// with STARTTLS).",
        "Email: the login of both servers.",
        "Email: the From: of replies (default: the login).",
        "Email: the IMAP folder read (default INBOX).",
        "Email: dkim takes only mail whose From: a DKIM signature proves (bindings then "
        "default to member); default none.",
        "Email: a CA file the servers' certificates chain to.",
        "Email: how often a server without IMAP IDLE is asked (default 60s).",
        "Telegram and Email: the largest file stored per message (default 10m; 0 refuses files).",
    ]
    assert KIND.summary == (
        "Email: a mailbox's IMAP and SMTP servers (--imap-url, --smtp-url), its login "
        "(--user) and password (--password-env or --password-secret); a From: line is not "
        "proof, so chats are bound as guests unless --verify dkim."
    )
    assert KIND.example == (
        "orchestrator channel add email mailbot --imap-url imaps://mail.example.org \\\n"
        "      --smtp-url smtps://mail.example.org --user helper@example.org "
        "--password-env MAIL_PASSWORD"
    )
