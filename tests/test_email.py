"""The email channel against real mail servers (Dovecot and Postfix, tests/mailserver.py)
on loopback: mail delivered over SMTP into a real mailbox, read by the channel over IMAP,
answered over SMTP into the correspondent's mailbox. The daemon and queue are real, the
group's runner a real socket (no engine needed).

A machine without the servers (scripts/setup-mail) or not running as root skips these
with the reason; under CI=true that is a failure."""

from __future__ import annotations

import asyncio
import base64
import itertools
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest

from orchestrator import wire
from orchestrator.channels.chatapp import ChatAppChannel
from orchestrator.channels.email.adapter import EmailAdapter
from orchestrator.channels.email.kind import KIND, EmailOptions
from orchestrator.config import OrchestratorConfig
from orchestrator.config.accounts import ChannelAccount
from orchestrator.daemon.core import Daemon
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from orchestrator.runtime.fake import FakeBackend
from orchestrator.runtime.lifecycle import GroupRuntime
from orchestrator.store.messages import open_queue
from tests.fakerunner import FakeRunner
from tests.mailserver import MailServers, message
from tests.mediafiles import pdf_with_text

NAMES = itertools.count()


def answer(conn: socket.socket, request: dict[str, Any]) -> None:
    turn = request["turn"]
    if turn["text"].startswith("slow"):
        time.sleep(1.5)
    wire.send_frame(
        conn, {"ok": True, "turn_id": turn["turn_id"], "replies": [f"echo: {turn['text']}"]}
    )


def body(mail: EmailMessage) -> str:
    """A mail's plain text, its line ends as Python writes them."""
    part = mail.get_body(("plain",))
    assert part is not None, mail
    return str(part.get_content()).replace("\r\n", "\n").strip()  # type: ignore[attr-defined]


def wait_for(predicate: Any, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.1)


@dataclass
class Rig:
    servers: MailServers
    daemon: Daemon
    channel: ChatAppChannel | None
    runner: FakeRunner
    bot: str
    alice: str
    home: Path

    def start_channel(self) -> None:
        """A new channel, as at a new start (after stop_channel)."""
        self.channel = ChatAppChannel.of_kind(KIND)(self.daemon)
        self.channel.start()
        wait_for(lambda: (self.daemon.chats.health("mail") or {}).get("state") == "connected")

    def stop_channel(self) -> None:
        if self.channel is not None:
            self.channel.stop()
            self.channel = None

    def replies(self, address: str | None = None) -> list[EmailMessage]:
        """The bot's mails in ``address``'s mailbox (default: alice's)."""
        found = self.servers.inbox(address or self.alice)
        return [m for m in found if str(m["From"]) == self.bot]

    def wait_replies(self, count: int, address: str | None = None) -> list[EmailMessage]:
        return wait_for(lambda: len(self.replies(address)) >= count and self.replies(address))

    def mail(self, subject: str, body: str, **kw: Any) -> EmailMessage:
        made = message(self.alice, self.bot, subject, body, **kw)
        self.servers.send(made)
        return made


def make_rig(
    home: Path, monkeypatch: pytest.MonkeyPatch, servers: MailServers, **options: Any
) -> Rig:
    n = next(NAMES)
    bot = servers.add_user(f"helper{n}")
    alice = servers.add_user(f"alice{n}")
    monkeypatch.setenv("MAIL_PASSWORD", servers.passwords[bot])
    h = Home(home)
    GroupStore(h).add(GroupConfig(name="fam"))
    settings: dict[str, Any] = {
        "imap_url": servers.imap_url(),
        "smtp_url": servers.smtp_url(),
        "user": bot,
        "address": bot,
        "ca_file": str(servers.ca_file),
        **options,
    }
    account = ChannelAccount(
        "mail", "email", token_env="MAIL_PASSWORD", options=EmailOptions(**settings)
    )
    config = OrchestratorConfig(
        project="t", mount_allowlist=home / "none.yaml", channel_accounts={"mail": account}
    )
    runtime = GroupRuntime(h, config, FakeBackend(), lambda: "img:1", ready=lambda _: True)
    runner = FakeRunner(h.runtime_dir("fam") / "runner.sock", answer)
    daemon = Daemon(h, config, runtime, open_queue(h), concurrency=2)
    daemon.start()
    made = Rig(servers, daemon, None, runner, bot, alice, home)
    made.start_channel()
    return made


@pytest.fixture
def rig(home: Path, monkeypatch: pytest.MonkeyPatch, mail_servers: MailServers) -> Iterator[Rig]:
    made = make_rig(home, monkeypatch, mail_servers)
    yield made
    made.stop_channel()
    made.daemon.drain(1)
    made.runner.close()
    made.daemon.queue.close()


def test_a_mail_is_answered_in_its_thread(rig: Rig) -> None:
    rig.daemon.chats.bind("mail", rig.alice, "fam")
    asked = rig.mail("Dinner plans", "Can you suggest a recipe?")
    reply = rig.wait_replies(1)[0]
    assert reply["In-Reply-To"] == asked["Message-ID"]
    assert reply["References"] == asked["Message-ID"]
    assert reply["Subject"] == "Re: Dinner plans"
    assert reply["Auto-Submitted"] == "auto-replied"
    assert body(reply) == "echo: Subject: Dinner plans\n\nCan you suggest a recipe?"
    turn = rig.runner.turns[0]
    assert turn["sender"] == f"email:{rig.alice}" and turn["trust"] == "member"
    assert turn["thread"] == asked["Message-ID"]


def test_a_thread_is_kept_across_three_replies(rig: Rig) -> None:
    rig.daemon.chats.bind("mail", rig.alice, "fam")
    first = rig.mail("Trip", "Where should we go?")
    chain = [str(first["Message-ID"])]
    for n, text in enumerate(["And in June?", "What about trains?"], start=1):
        answered = rig.wait_replies(n)[-1]
        chain.append(str(answered["Message-ID"]))
        quoted = "\n".join(f"> {line}" for line in body(answered).splitlines())
        follow = rig.mail(
            "Re: Trip",
            f"{text}\n\nOn Tue, 1 Dec 2026 at 10:00, Helper <{rig.bot}> wrote:\n{quoted}\n",
            headers={"In-Reply-To": chain[-1], "References": " ".join(chain)},
        )
        chain.append(str(follow["Message-ID"]))
    third = rig.wait_replies(3)[-1]
    assert third["Subject"] == "Re: Trip"
    assert third["In-Reply-To"] == chain[-1]
    assert str(third["References"]).split() == chain
    assert [t["thread"] for t in rig.runner.turns] == [chain[0]] * 3
    # the quoted history is not part of what the turn reads
    assert [t["text"] for t in rig.runner.turns] == [
        "Subject: Trip\n\nWhere should we go?",
        "And in June?",
        "What about trains?",
    ]
    assert len({str(m["Message-ID"]) for m in rig.replies()}) == 3


def test_html_mail_is_read_as_text_without_its_quote(rig: Rig) -> None:
    rig.daemon.chats.bind("mail", rig.alice, "fam")
    rig.mail(
        "Shopping",
        None,
        html=(
            "<html><body><p>Hello <b>there</b>, please buy:</p><ul><li>eggs</li>"
            "<li>milk</li></ul><div class='gmail_quote'>On Mon, Bob wrote:"
            "<blockquote>the old list: flour</blockquote></div></body></html>"
        ),
    )
    rig.wait_replies(1)
    text = rig.runner.turns[0]["text"]
    assert text.startswith("Subject: Shopping\n\nHello there, please buy:")
    assert "* eggs" in text and "* milk" in text
    assert "flour" not in text and "<" not in text


def test_an_attachment_is_stored_in_the_groups_inbox(rig: Rig) -> None:
    rig.daemon.chats.bind("mail", rig.alice, "fam")
    made = message(rig.alice, rig.bot, "Report", "See the report.")
    pdf = pdf_with_text(["Invoice 2026-117", "Total due: 420 EUR"])
    made.add_attachment(pdf, maintype="application", subtype="pdf", filename="../../report.pdf")
    rig.servers.send(made)
    rig.wait_replies(1)
    text = rig.runner.turns[0]["text"]
    inbox = rig.home / "groups" / "fam" / "files" / "inbox"
    stored, extracted = sorted(inbox.iterdir())
    assert stored.suffix == ".pdf" and stored.read_bytes() == pdf
    assert extracted.name == stored.name + ".txt" and "420 EUR" in extracted.read_text()
    assert text.startswith(
        f"Subject: Report\n\nSee the report.\n\n[document: files/inbox/{stored.name} "
        '(file "../../report.pdf", application/pdf, '
    )
    assert f"its text: files/inbox/{extracted.name} (2 pages, " in text


def test_a_restart_in_the_middle_answers_no_mail_twice(rig: Rig) -> None:
    rig.daemon.chats.bind("mail", rig.alice, "fam")
    rig.mail("One", "before")
    rig.wait_replies(1)
    committed = rig.daemon.chats.get_state("mail", "uid")
    rig.mail("Two", "during")
    rig.wait_replies(2)
    # The daemon stops as if it crashed after queueing "during" and before committing
    # its UID: the mail is read again at the next start.
    rig.stop_channel()
    assert committed is not None
    rig.daemon.chats.set_state("mail", "uid", committed)
    rig.mail("Three", "while it was down")
    rig.start_channel()
    rig.wait_replies(3)
    time.sleep(2)  # a second answer, were there one, would come within this
    bodies = [body(m) for m in rig.replies()]
    assert bodies == [
        "echo: Subject: One\n\nbefore",
        "echo: Subject: Two\n\nduring",
        "echo: Subject: Three\n\nwhile it was down",
    ]
    assert rig.daemon.queue.read("SELECT COUNT(*) FROM messages") == [(3,)]


def test_an_unbound_sender_gets_exactly_one_pairing_code(rig: Rig) -> None:
    rig.mail("Hello", "hello?")
    rig.mail("Hello again", "anyone there?")
    notice = rig.wait_replies(1)[0]
    text = body(notice)
    assert "This address is not connected to an assistant yet. Pairing code:" in text
    assert notice["Auto-Submitted"] == "auto-replied"
    time.sleep(2)
    assert len(rig.replies()) == 1 and rig.runner.turns == []
    pairing = rig.daemon.chats.pairings()[0]
    assert pairing.code in text and pairing.requested_by == f"email:{rig.alice}"
    rig.daemon.chats.approve(pairing.code, "fam", trust="guest")
    rig.mail("Now?", "are we connected?")
    assert body(rig.wait_replies(2)[-1]) == "echo: Subject: Now?\n\nare we connected?"
    assert rig.runner.turns[0]["trust"] == "guest"


def test_pairing_mails_of_an_account_are_capped_per_hour(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.channels.email import adapter

    monkeypatch.setattr(adapter, "EMAIL_PAIRING_PER_HOUR", 2)
    strangers = [rig.servers.add_user(f"stranger{next(NAMES)}") for _ in range(3)]
    for stranger in strangers:
        rig.servers.send(message(stranger, rig.bot, "hi", "let me in"))
    wait_for(lambda: sum(len(rig.replies(s)) for s in strangers) >= 2)
    time.sleep(2)
    # (Postfix may deliver the three in any order: whichever came third gets none)
    assert sorted(len(rig.replies(s)) for s in strangers) == [0, 1, 1]
    assert len(rig.daemon.chats.pairings()) == 2


def test_automatic_mail_starts_no_turn_and_gets_no_answer(rig: Rig) -> None:
    rig.daemon.chats.bind("mail", rig.alice, "fam")
    stranger = rig.servers.add_user(f"stranger{next(NAMES)}")
    for headers in (
        {"Auto-Submitted": "auto-replied"},
        {"Precedence": "bulk"},
        {"List-Id": "<family.lists.example.test>"},
    ):
        rig.mail("Automatic", "I am away", headers=headers)
        rig.servers.send(message(stranger, rig.bot, "Automatic", "I am away", headers=headers))
    # a bounce: from the null sender
    rig.servers.send(message(rig.alice, rig.bot, "Undelivered", "it bounced"), sender="")
    rig.servers.send(message(f"MAILER-DAEMON@{rig.alice.split('@')[1]}", rig.bot, "x", "y"))
    rig.mail("Person", "a person writes")
    reply = rig.wait_replies(1)[0]
    time.sleep(2)
    assert body(reply) == "echo: Subject: Person\n\na person writes"
    assert len(rig.replies()) == 1 and rig.replies(stranger) == []
    assert [t["text"] for t in rig.runner.turns] == ["Subject: Person\n\na person writes"]
    assert rig.daemon.chats.pairings() == []


def _dkim_key() -> tuple[bytes, bytes]:
    """A private key (PEM) to sign with, and its DNS TXT record."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private, b"v=DKIM1; k=rsa; p=" + base64.b64encode(public)


def test_with_dkim_only_mail_whose_from_is_signed_is_answered(
    home: Path, monkeypatch: pytest.MonkeyPatch, mail_servers: MailServers
) -> None:
    import dkim

    private, record = _dkim_key()
    asked: list[bytes] = []

    def lookup(name: bytes, timeout: int = 5) -> bytes | None:
        asked.append(name)
        return record if name == b"sel._domainkey.example.test." else None

    monkeypatch.setattr(EmailAdapter, "txt_lookup", staticmethod(lookup))
    rig = make_rig(home, monkeypatch, mail_servers, verify="dkim")
    try:
        rig.daemon.chats.bind("mail", rig.alice, "fam")
        forged = message(rig.alice, rig.bot, "Unsigned", "trust me")
        rig.servers.send(forged)
        signed_by_other = message(rig.alice, rig.bot, "Other", "signed elsewhere")
        raw = signed_by_other.as_bytes(policy=signed_by_other.policy.clone(linesep="\r\n"))
        raw = dkim.sign(raw, b"sel", b"elsewhere.test", private, include_headers=[b"from"]) + raw
        rig.servers.send_raw(raw, rig.alice, rig.bot)
        good = message(rig.alice, rig.bot, "Signed", "it is me")
        raw = good.as_bytes(policy=good.policy.clone(linesep="\r\n"))
        signature = dkim.sign(
            raw, b"sel", b"example.test", private, include_headers=[b"from", b"subject", b"to"]
        )
        rig.servers.send_raw(signature + raw, rig.alice, rig.bot)
        reply = rig.wait_replies(1)[0]
        time.sleep(2)
        assert body(reply) == "echo: Subject: Signed\n\nit is me"
        assert [t["text"] for t in rig.runner.turns] == ["Subject: Signed\n\nit is me"]
        assert b"sel._domainkey.example.test." in asked
    finally:
        rig.stop_channel()
        rig.daemon.drain(1)
        rig.runner.close()
        rig.daemon.queue.close()


def test_a_server_without_idle_is_polled(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests import mailserver

    if mailserver.unavailable():
        pytest.skip(str(mailserver.unavailable()))
    with mailserver.running(idle=False) as servers:
        rig = make_rig(
            home, monkeypatch, servers, imap_url=servers.imap_url(tls=False), poll_interval=5
        )
        try:
            assert rig.channel is not None
            account = rig.channel.accounts["mail"]
            assert isinstance(account.adapter, EmailAdapter)
            assert account.adapter.opened is not None and not account.adapter.opened.idle
            rig.daemon.chats.bind("mail", rig.alice, "fam")
            rig.mail("Polled", "are you polling?")
            assert body(rig.wait_replies(1)[0]) == "echo: Subject: Polled\n\nare you polling?"
        finally:
            rig.stop_channel()
            rig.daemon.drain(1)
            rig.runner.close()
            rig.daemon.queue.close()


def test_a_mail_that_comes_while_another_is_handled_is_answered_without_waiting(
    home: Path, monkeypatch: pytest.MonkeyPatch, mail_servers: MailServers
) -> None:
    # the second mail is in the folder before the first is handled: the server announces
    # it in the answer to a command of the first's, and never again in the next IDLE
    handle = EmailAdapter.handle
    sent: list[EmailMessage] = []

    async def handle_and_receive_another(self: EmailAdapter, fetched: Any) -> None:
        if not sent:
            sent.append(message(made.alice, made.bot, "Second", "and another"))
            await asyncio.to_thread(mail_servers.send, sent[0])
            await asyncio.to_thread(wait_for, lambda: len(mail_servers.inbox(made.bot)) >= 2)
        await handle(self, fetched)

    monkeypatch.setattr(EmailAdapter, "handle", handle_and_receive_another)
    made = make_rig(home, monkeypatch, mail_servers)
    try:
        made.daemon.chats.bind("mail", made.alice, "fam")
        made.mail("First", "one")
        # well before the IDLE's renewal (EMAIL_IDLE_SECONDS, 300 s) would have found it
        replies = made.wait_replies(2)
        assert sorted(body(r).splitlines()[0] for r in replies) == [
            "echo: Subject: First",
            "echo: Subject: Second",
        ]
    finally:
        made.stop_channel()
        made.daemon.drain(1)
        made.runner.close()
        made.daemon.queue.close()


def test_an_address_is_mailed_a_code_at_most_once_a_day(rig: Rig) -> None:
    # a code mailed two hours ago, expired since: not mailed again
    rig.daemon.chats.request_pairing(
        "mail", rig.alice, title=None, requested_by=None, now=time.time() - 7200
    )
    stranger = rig.servers.add_user(f"stranger{next(NAMES)}")
    rig.mail("Hello", "anyone?")
    rig.servers.send(message(stranger, rig.bot, "Hello", "anyone?"))
    wait_for(lambda: rig.replies(stranger))
    time.sleep(2)
    assert rig.replies() == [] and len(rig.replies(stranger)) == 1
