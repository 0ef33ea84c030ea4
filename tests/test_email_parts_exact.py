"""The email channel's parts, exactly: the mail a reply is composed as (compose), the
DKIM verdict on an inbound mail (dkimverify), the IMAP connection to the folder
(mailbox) and the SMTP send of a reply (outbox). The servers are stand-ins recording
what they are asked, so each call, each header and each reason is checked as sent."""

from __future__ import annotations

import asyncio
import datetime
import logging
import socket
import ssl
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import aiosmtplib
import dkim
import imapclient
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from orchestrator.channels.chatapp.adapter import RETRY
from orchestrator.channels.email import dkimverify
from orchestrator.channels.email.compose import Attached, reply_mail
from orchestrator.channels.email.dkimverify import DkimResult, _unsigned_copy, aligned, verify_from
from orchestrator.channels.email.kind import Endpoint
from orchestrator.channels.email.mailbox import (
    Fetched,
    InsecureServer,
    Mailbox,
    Opened,
    _announces_mail,
    tls_context,
)
from orchestrator.channels.email.outbox import (
    NotSent,
    PartlySent,
    check_login,
    classify,
    send_mails,
)
from orchestrator.channels.email.threads import ReplyTarget
from orchestrator.channels.textfmt import markdown_to_html
from orchestrator.errors import OrchestratorError
from orchestrator.limits import EMAIL_FETCH_MAX_BYTES, EMAIL_TIMEOUT_SECONDS
from orchestrator.store.chats import FAILED, UNKNOWN

# compose


def _reply(**kw: Any) -> EmailMessage:
    args: dict[str, Any] = {
        "sender": "helper@example.org",
        "to": "alice@example.org",
        "text": "Hi",
        "target": None,
        "thread": None,
        "key": "k",
        "piece": 0,
        "pieces": 1,
        "now": 0,
    }
    args.update(kw)
    return reply_mail(**args)


def test_a_file_name_keeps_printable_characters_and_no_path() -> None:
    assert Attached("Xray/notes\\v1\x00\n.txt", "text/plain", b"").filename == "Xraynotesv1.txt"
    assert Attached("  report.pdf \t", "application/pdf", b"").filename == "report.pdf"
    assert Attached(" " + "a" * 250, "text/plain", b"").filename == "a" * 200
    assert Attached("", "text/plain", b"").filename == "file"
    assert Attached("/\\ \x07", "text/plain", b"").filename == "file"


def test_a_file_type_is_its_mime_type_or_bytes() -> None:
    assert Attached("a", "Image/PNG", b"").types == ("image", "png")
    assert Attached("a", "application/vnd.x/y", b"").types == ("application", "vnd.x/y")
    octets = ("application", "octet-stream")
    for mime in ("text", "/plain", "text/", "", "multipart/mixed", "message/rfc822"):
        assert Attached("a", mime, b"").types == octets, mime


def test_a_reply_has_every_header_as_sent() -> None:
    mail = _reply(key="orch.k", now=0)
    assert mail["From"] == "helper@example.org"
    assert mail["To"] == "alice@example.org"
    assert mail["Subject"] == "Re: Your message"
    assert mail["Date"] == "Thu, 01 Jan 1970 00:00:00 -0000"
    assert mail["Message-ID"] == "<orch.k.0@example.org>"
    assert mail["Auto-Submitted"] == "auto-replied"
    assert mail["X-Auto-Response-Suppress"] == "All"
    # answering nothing and in no thread: no threading headers at all
    assert "In-Reply-To" not in mail and "References" not in mail


def test_a_reply_without_a_date_is_dated_now() -> None:
    mail = _reply(now=None)
    sent = datetime.datetime.strptime(str(mail["Date"]), "%a, %d %b %Y %H:%M:%S %z")
    assert abs(sent.timestamp() - datetime.datetime.now().timestamp()) < 3600


def test_the_message_id_domain_is_the_senders_last_at() -> None:
    assert _reply(sender="a@b@example.net", key="k")["Message-ID"] == "<k.0@example.net>"
    assert _reply(sender="", key="k", piece=3, pieces=5)["Message-ID"] == "<k.3@localhost>"


def test_a_piece_of_a_long_reply_is_numbered_in_its_subject() -> None:
    target = ReplyTarget("<m@x>", "Plans", ())
    assert _reply(target=target)["Subject"] == "Re: Plans"
    assert _reply(target=target, piece=0, pieces=2)["Subject"] == "Re: Plans (1/2)"
    assert _reply(target=None, piece=2, pieces=3)["Subject"] == "Re: Your message (3/3)"


def test_a_reply_is_threaded_under_the_thread_root_once() -> None:
    target = ReplyTarget("<m2@x>", "Plans", ("<m1@x>",))
    mail = _reply(target=target, thread="<root@x>")
    assert mail["In-Reply-To"] == "<m2@x>"
    assert mail["References"] == "<root@x> <m1@x> <m2@x>"
    same = _reply(target=ReplyTarget("<m2@x>", "Plans", ("<root@x>",)), thread="<root@x>")
    assert same["References"] == "<root@x> <m2@x>"
    alone = _reply(target=ReplyTarget("<m2@x>", "Plans", ()), thread=None)
    assert alone["In-Reply-To"] == "<m2@x>" and alone["References"] == "<m2@x>"
    # a mail without an id: nothing to answer, the thread still referenced
    no_id = _reply(target=ReplyTarget("", "Plans", ()), thread="<root@x>")
    assert "In-Reply-To" not in no_id and no_id["References"] == "<root@x>"
    bare = _reply(target=ReplyTarget("", "Plans", ()), thread=None)
    assert "In-Reply-To" not in bare and "References" not in bare


def test_a_reply_body_is_the_text_and_its_html_page() -> None:
    text = "**Yes**, at 8.\nSee you"
    mail = _reply(text=text)
    assert mail.get_content_type() == "multipart/alternative"
    parts = list(mail.iter_parts())
    assert [p.get_content_type() for p in parts] == ["text/plain", "text/html"]
    assert parts[0].get_content() == text + "\n"
    assert parts[1].get_content() == (
        '<!DOCTYPE html><html><head><meta charset="utf-8"></head>'
        '<body><div style="white-space: pre-wrap">'
        + markdown_to_html(text)
        + "</div></body></html>\n"
    )


def test_a_reply_carries_its_files_in_order() -> None:
    files = [
        Attached("a/notes.txt", "TEXT/plain", b"one"),
        Attached("x.bin", "multipart/mixed", b"\x00\x01"),
    ]
    mail = _reply(files=files)
    assert mail.get_content_type() == "multipart/mixed"
    attached = list(mail.iter_attachments())
    assert [a.get_filename() for a in attached] == ["anotes.txt", "x.bin"]
    assert [a.get_content_type() for a in attached] == ["text/plain", "application/octet-stream"]
    assert [a.get_payload(decode=True) for a in attached] == [b"one", b"\x00\x01"]


# dkimverify


def test_alignment_is_the_domain_or_a_parent_of_it() -> None:
    assert aligned("Example.ORG.", "example.org")
    assert aligned("example.org", "Mail.Example.org.")
    assert not aligned("ample.org", "example.org")
    assert not aligned("mail.example.org", "example.org")
    assert not aligned("", "example.org") and not aligned(".", "")
    assert not aligned("example.org", "exampleXorg")


def test_an_unsigned_copy_is_a_header_the_mail_has_more_of_than_signed() -> None:
    one = [(b"From", b"a"), (b"Subject", b"s")]
    assert _unsigned_copy(one, (b"from", b"subject")) is None
    assert _unsigned_copy(one, (b"FROM",)) is None
    two = [(b"from", b"a"), (b"Subject", b"s"), (b"FROM", b"b")]
    assert _unsigned_copy(two, (b"subject", b"from")) == "from"
    assert _unsigned_copy(two, (b"From", b"from", b"subject")) is None
    assert _unsigned_copy(two, (b"cc", b"cc")) is None  # signed as absent
    odd = [(b"X-\xff", b"1"), (b"x-\xff", b"2")]
    assert _unsigned_copy(odd, (b"x-\xff",)) == "x-\ufffd"


class _Checker:
    """A stand-in for dkim.DKIM: each signature's verdict from a script."""

    made: list[_Checker] = []
    script: list[dict[str, Any]] = []
    headers: list[tuple[bytes, bytes]] = []
    fails: BaseException | None = None

    def __init__(self, raw: bytes, logger: Any = None) -> None:
        if _Checker.fails is not None:
            raise _Checker.fails
        self.raw = raw
        self.logger = logger
        self.headers = list(_Checker.headers)
        self.calls: list[tuple[int, Any]] = []
        self.domain: bytes | None = None
        self.signature_fields: dict[bytes, bytes] | None = None
        self.include_headers: tuple[bytes, ...] | None = None
        _Checker.made.append(self)

    def verify(self, idx: int = 0, dnsfunc: Any = "default") -> bool:
        self.calls.append((idx, dnsfunc))
        step = _Checker.script[idx]
        if "raises" in step:
            raise step["raises"]
        self.domain = step.get("domain")
        self.signature_fields = step.get("fields")
        self.include_headers = step.get("include")
        return bool(step.get("valid"))


SIGNATURE = (b"DKIM-Signature", b"v=1")


@pytest.fixture
def checker(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[_Checker]]:
    _Checker.made, _Checker.script, _Checker.fails = [], [], None
    _Checker.headers = [SIGNATURE, (b"From", b"a@example.org")]
    monkeypatch.setattr(dkim, "DKIM", _Checker)
    yield _Checker


def _txt(name: bytes, **_: Any) -> bytes | None:
    return None


GOOD = {"valid": True, "domain": b"example.org", "fields": {}, "include": (b"from",)}


def test_a_valid_aligned_signature_verifies(checker: type[_Checker]) -> None:
    checker.script = [GOOD]
    assert verify_from(b"raw", "alice@mail.example.org", _txt) == DkimResult(
        True, "signed by example.org"
    )
    made = checker.made[0]
    assert made.raw == b"raw" and made.logger is dkimverify.log
    assert made.calls == [(0, _txt)]


def test_without_a_lookup_dkimpy_asks_dns_itself(checker: type[_Checker]) -> None:
    checker.script = [GOOD]
    assert verify_from(b"raw", "alice@example.org").verified
    assert checker.made[0].calls == [(0, "default")]


def test_a_sender_without_a_domain_or_a_signature_is_not_verified(
    checker: type[_Checker],
) -> None:
    assert verify_from(b"raw", "alice@", _txt) == DkimResult(
        False, "the From: address has no domain"
    )
    assert checker.made == []
    checker.headers = [(b"From", b"a@example.org"), (b"X-DKIM-Signature", b"v=1")]
    assert verify_from(b"raw", "alice@example.org", _txt) == DkimResult(
        False, "the mail has no DKIM signature"
    )


@pytest.mark.parametrize(
    "error",
    [dkim.MessageFormatError("bad header"), IndexError("bad header"), ValueError("bad header")],
)
def test_a_mail_dkim_cannot_read_is_not_verified(
    checker: type[_Checker], error: BaseException
) -> None:
    checker.fails = error
    assert verify_from(b"raw", "alice@example.org", _txt) == DkimResult(
        False, "the mail cannot be read for DKIM: bad header"
    )


def test_other_errors_are_not_taken_for_an_unreadable_mail(checker: type[_Checker]) -> None:
    checker.fails = KeyError("x")
    with pytest.raises(KeyError):
        verify_from(b"raw", "alice@example.org", _txt)
    checker.fails = None
    checker.script = [{"raises": KeyError("y")}]
    with pytest.raises(KeyError):
        verify_from(b"raw", "alice@example.org", _txt)


def test_each_signature_is_tried_and_every_reason_told(checker: type[_Checker]) -> None:
    checker.headers = [SIGNATURE, (b"dkim-signature", b"v=1")] * 3 + [(b"From", b"a")]
    checker.script = [
        {"raises": dkim.ValidationError("bad bh")},
        {"raises": ValueError("not base64")},
        {"valid": False, "domain": None},
        {"valid": True, "domain": b"example.org", "fields": None, "include": None},
        {"valid": True, "domain": b"example.org", "fields": {b"l": b"4"}, "include": (b"from",)},
        {"valid": True, "domain": b"evil.org", "fields": {}, "include": (b"from",)},
    ]
    result = verify_from(b"raw", "alice@example.org", _txt)
    assert result == DkimResult(
        False,
        "signature 1: bad bh; signature 2: not base64; signature 3 by  does not verify; "
        "signature 4 by example.org does not cover From:; "
        "signature 5 by example.org covers part of the body only; "
        "signature 6 is by evil.org, not example.org",
    )
    assert [idx for idx, _ in checker.made[0].calls] == [0, 1, 2, 3, 4, 5]


def test_a_later_good_signature_counts(checker: type[_Checker]) -> None:
    checker.headers = [SIGNATURE, SIGNATURE, SIGNATURE, (b"From", b"a")]
    checker.script = [
        {"valid": True, "domain": b"\xffx.org", "fields": {}, "include": (b"subject",)},
        {**GOOD, "fields": None},
        {"raises": AssertionError("not reached")},
    ]
    assert verify_from(b"raw", "alice@example.org", _txt) == DkimResult(
        True, "signed by example.org"
    )
    assert [idx for idx, _ in checker.made[0].calls] == [0, 1]
    checker.script = [
        {"valid": True, "domain": b"\xffx.org", "fields": {}, "include": (b"subject",)}
    ] * 3
    assert verify_from(b"raw", "alice@example.org", _txt).why.startswith(
        "signature 1 by \ufffdx.org does not cover From:; signature 2 by"
    )


def test_a_signature_leaving_a_header_copy_unsigned_does_not_count(
    checker: type[_Checker],
) -> None:
    checker.headers = [SIGNATURE, (b"Subject", b"evil"), (b"From", b"a"), (b"Subject", b"s")]
    checker.script = [{**GOOD, "include": (b"from", b"subject")}]
    assert verify_from(b"raw", "alice@example.org", _txt) == DkimResult(
        False,
        "signature 1 by example.org leaves a subject header unsigned "
        "(the mail has more of them than it signs)",
    )


def test_a_real_signature_from_dkimpy() -> None:
    from tests.test_fuzz_dkim import PLAIN, signed, txt

    assert verify_from(signed(), "alice@example.org", txt) == DkimResult(
        True, "signed by example.org"
    )
    assert verify_from(PLAIN, "alice@example.org", txt) == DkimResult(
        False, "the mail has no DKIM signature"
    )
    assert verify_from(signed(), "alice@example.net", txt) == DkimResult(
        False, "signature 1 is by example.org, not example.net"
    )
    tampered = signed().replace(b"Subject: Plans", b"Subject: Plant")
    assert verify_from(tampered, "alice@example.org", txt) == DkimResult(
        False, "signature 1 by example.org does not verify"
    )


# mailbox

REMOTE = Endpoint("mail.example.org", 993, True)
PLAIN_REMOTE = Endpoint("mail.example.org", 143, False)
LOCAL = Endpoint("127.0.0.1", 1143, False)


class _Imap:
    """A stand-in for imapclient.IMAPClient, recording every call."""

    made: list[_Imap] = []
    capabilities: tuple[str, ...] = ("IDLE", "STARTTLS")
    selected: dict[bytes, Any] = {}
    fails_at: str | None = None
    uids: list[int] = []

    def __init__(self, host: str, **kw: Any) -> None:
        self.host = host
        self.kw = kw
        self.calls: list[Any] = []
        self.uids: list[int] = list(_Imap.uids)
        self.sizes: dict[int, dict[bytes, Any]] = {}
        self.bodies: dict[int, dict[bytes, Any]] = {}
        self.noop_says: list[Any] = []
        self.sock = _Socket()
        _Imap.made.append(self)

    def _call(self, *call: Any) -> None:
        self.calls.append(call)
        if call[0] == _Imap.fails_at:
            raise OSError(f"{call[0]} failed")

    def has_capability(self, name: str) -> bool:
        return name in _Imap.capabilities

    def starttls(self, context: Any) -> None:
        self._call("starttls", context)

    def login(self, user: str, password: str) -> None:
        self._call("login", user, password)

    def select_folder(self, folder: str) -> dict[bytes, Any]:
        self._call("select_folder", folder)
        return dict(_Imap.selected)

    def search(self, criteria: Any) -> list[int]:
        self._call("search", criteria)
        return list(self.uids)

    def fetch(self, uids: list[int], parts: list[str]) -> dict[int, dict[bytes, Any]]:
        self._call("fetch", uids, parts)
        return self.sizes if parts == ["RFC822.SIZE"] else self.bodies

    def add_flags(self, uids: list[int], flags: list[bytes], silent: bool = False) -> None:
        self._call("add_flags", uids, flags, silent)

    def noop(self) -> tuple[bytes, list[Any]]:
        self._call("noop")
        return b"NOOP completed", self.noop_says

    def idle(self) -> None:
        self._call("idle")

    def idle_check(self, timeout: float) -> list[Any]:
        self._call("idle_check", timeout)
        return []

    def idle_done(self) -> None:
        self._call("idle_done")

    def socket(self) -> _Socket:
        self._call("socket")
        return self.sock

    def logout(self) -> None:
        self._call("logout")

    def shutdown(self) -> None:
        self._call("shutdown")


class _Socket:
    def __init__(self) -> None:
        self.how: list[int] = []

    def shutdown(self, how: int) -> None:
        self.how.append(how)


@pytest.fixture
def imap(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[_Imap]]:
    _Imap.made, _Imap.fails_at, _Imap.uids = [], None, []
    _Imap.capabilities = ("IDLE", "STARTTLS")
    _Imap.selected = {b"UIDVALIDITY": 7, b"UIDNEXT": 42}
    monkeypatch.setattr(imapclient, "IMAPClient", _Imap)
    yield _Imap


CONTEXT = ssl.create_default_context()


def _box(server: Endpoint = REMOTE) -> Mailbox:
    return Mailbox(server, "bot@example.org", "pw", "Support", CONTEXT)


def test_open_over_tls_logs_in_and_selects_the_folder(imap: type[_Imap]) -> None:
    box = _box()
    assert box.open() == Opened(7, 42, True)
    client = imap.made[0]
    assert box.client is client
    assert client.host == "mail.example.org"
    assert client.kw == {
        "port": 993,
        "ssl": True,
        "ssl_context": CONTEXT,
        "timeout": EMAIL_TIMEOUT_SECONDS,
    }
    assert client.calls == [("login", "bot@example.org", "pw"), ("select_folder", "Support")]


def test_open_upgrades_with_starttls(imap: type[_Imap]) -> None:
    imap.capabilities = ("STARTTLS",)
    imap.selected = {b"UIDVALIDITY": b"9", b"UIDNEXT": b"3"}
    assert _box(PLAIN_REMOTE).open() == Opened(9, 3, False)
    client = imap.made[0]
    assert client.kw["ssl"] is False and client.kw["port"] == 143
    assert client.calls[0] == ("starttls", CONTEXT)
    assert client.calls[1] == ("login", "bot@example.org", "pw")


def test_open_sends_no_password_in_clear_text_away_from_this_machine(
    imap: type[_Imap],
) -> None:
    imap.capabilities = ("IDLE",)
    box = _box(PLAIN_REMOTE)
    with pytest.raises(InsecureServer) as raised:
        box.open()
    assert str(raised.value) == (
        "the IMAP server mail.example.org:143 offers no STARTTLS; "
        "the password is not sent in clear text"
    )
    assert raised.value.hint == "use imaps:// (TLS from the start)"
    assert imap.made[0].calls == [("shutdown",)]
    assert box.client is None


def test_open_on_this_machine_may_stay_in_clear_text(imap: type[_Imap]) -> None:
    imap.capabilities = ()
    assert _box(LOCAL).open() == Opened(7, 42, False)
    assert imap.made[0].calls[0] == ("login", "bot@example.org", "pw")


@pytest.mark.parametrize("step", ["login", "select_folder"])
def test_a_failed_login_or_select_drops_the_connection(imap: type[_Imap], step: str) -> None:
    imap.fails_at = step
    box = _box()
    with pytest.raises(OSError, match=f"{step} failed"):
        box.open()
    assert imap.made[0].calls[-1] == ("shutdown",)
    assert box.client is None


def test_a_failing_shutdown_leaves_the_login_error(
    imap: type[_Imap], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: _Imap) -> None:
        raise OSError("shutdown failed")

    monkeypatch.setattr(_Imap, "shutdown", broken)
    imap.fails_at = "login"
    with pytest.raises(OSError, match="login failed"):
        _box().open()


def test_without_uidnext_the_next_uid_follows_the_highest(imap: type[_Imap]) -> None:
    imap.selected = {}
    box = _box()
    assert box.open() == Opened(0, 1, True)
    assert imap.made[0].calls[-1] == ("search", "ALL")
    imap.uids = [3, 11, 5]
    assert box.open() == Opened(0, 12, True)


def test_open_closes_the_connection_it_had(imap: type[_Imap]) -> None:
    box = _box()
    box.open()
    first = imap.made[0]
    box.open()
    assert first.calls[-2:] == [("logout",), ("shutdown",)]
    assert box.client is imap.made[1]


def test_a_closed_mailbox_refuses_commands() -> None:
    box = _box()
    for command in (lambda: box.new_uids(0), lambda: box.fetch(1), box.noop):
        with pytest.raises(OrchestratorError, match=r"^the IMAP connection is closed$"):
            command()


def _opened(imap: type[_Imap]) -> tuple[Mailbox, _Imap]:
    box = _box()
    box.open()
    client = imap.made[-1]
    client.calls.clear()
    return box, client


def test_new_uids_are_those_above_the_last_lowest_first(imap: type[_Imap]) -> None:
    box, client = _opened(imap)
    client.uids = [9, 12, 10, 8]  # "N:*" answers the last mail when none is above
    assert box.new_uids(8) == [9, 10, 12]
    assert client.calls == [("search", ["UID", "9:*"])]
    client.uids = [8]
    assert box.new_uids(8) == []


def test_fetch_downloads_a_mail_whole_up_to_the_limit(imap: type[_Imap]) -> None:
    box, client = _opened(imap)
    client.sizes = {5: {b"RFC822.SIZE": EMAIL_FETCH_MAX_BYTES}}
    client.bodies = {5: {b"BODY[]": b"whole mail"}}
    assert box.fetch(5) == Fetched(5, b"whole mail", EMAIL_FETCH_MAX_BYTES, True)
    assert client.calls == [("fetch", [5], ["RFC822.SIZE"]), ("fetch", [5], ["BODY.PEEK[]"])]


def test_fetch_takes_only_the_header_of_a_larger_mail(imap: type[_Imap]) -> None:
    box, client = _opened(imap)
    client.sizes = {5: {b"RFC822.SIZE": EMAIL_FETCH_MAX_BYTES + 1}}
    client.bodies = {5: {b"BODY[HEADER]": b"header", b"BODY[]": b"whole"}}
    assert box.fetch(5) == Fetched(5, b"header", EMAIL_FETCH_MAX_BYTES + 1, False)
    assert client.calls[-1] == ("fetch", [5], ["BODY.PEEK[HEADER]"])


def test_fetch_of_a_gone_or_odd_mail_is_none(imap: type[_Imap]) -> None:
    box, client = _opened(imap)
    assert box.fetch(5) is None
    assert client.calls == [("fetch", [5], ["RFC822.SIZE"])]
    client.sizes = {5: {}}  # no size told: taken as small
    client.bodies = {}
    assert box.fetch(5) is None
    assert client.calls[-1] == ("fetch", [5], ["BODY.PEEK[]"])
    client.bodies = {5: {b"BODY[]": None}}
    assert box.fetch(5) is None
    client.bodies = {5: {b"BODY[]": b""}}
    assert box.fetch(5) == Fetched(5, b"", 0, True)


def test_mark_seen_and_noop(imap: type[_Imap]) -> None:
    box, client = _opened(imap)
    box.mark_seen(4)
    box.noop()
    assert client.calls == [("add_flags", [4], [b"\\Seen"], True), ("noop",)]


def test_wait_is_told_of_mail_by_the_noop(imap: type[_Imap]) -> None:
    box, client = _opened(imap)
    client.noop_says = [(3, b"RECENT")]
    assert box.wait(10) is True
    assert client.calls == [("noop",)]


def test_wait_idles_and_marks_itself_idling_meanwhile(imap: type[_Imap]) -> None:
    box, client = _opened(imap)
    seen: list[bool] = []

    def idle_check(timeout: float) -> list[Any]:
        seen.append(box.idling)
        raise OSError("dropped")

    client.idle_check = idle_check  # type: ignore[method-assign]
    client._imap = "not imaplib"  # type: ignore[attr-defined]
    with pytest.raises(OSError):
        box.wait(10)
    assert seen == [True] and box.idling is False
    assert client.calls == [("noop",), ("idle",), ("idle_done",)]
    client._imap = type("I", (), {"untagged_responses": [("EXISTS", 1)]})()  # type: ignore[attr-defined]
    client.idle_check = lambda timeout: []  # type: ignore[method-assign]
    assert box.wait(10) is False


def test_interrupt_shuts_the_socket_from_another_thread(imap: type[_Imap]) -> None:
    box = _box()
    box.interrupt()  # nothing open: nothing to do
    box, client = _opened(imap)
    box.interrupt()
    assert client.sock.how == [socket.SHUT_RDWR]
    client.sock = None  # type: ignore[assignment]
    box.interrupt()  # a socket already gone: no error
    assert box.client is client


def test_close_logs_out_or_drops_an_idle(imap: type[_Imap]) -> None:
    box, client = _opened(imap)
    box.close()
    assert client.calls == [("logout",), ("shutdown",)] and box.client is None
    box.close()
    assert client.calls == [("logout",), ("shutdown",)]
    box, client = _opened(imap)
    box.idling = True
    box.close()
    assert client.calls == [("shutdown",), ("shutdown",)]


def test_close_goes_on_past_errors(imap: type[_Imap]) -> None:
    box, client = _opened(imap)
    imap.fails_at = "logout"
    box.close()
    assert client.calls == [("logout",), ("shutdown",)] and box.client is None


def test_only_exists_and_recent_announce_mail() -> None:
    assert _announces_mail([(2, b"EXISTS")]) and _announces_mail([(1, b"RECENT")])
    assert _announces_mail([(1, b"FETCH", ()), (2, b"EXISTS")])
    assert not _announces_mail([])
    assert not _announces_mail([(1, b"FETCH"), (b"EXISTS",), b"EXISTS", [2, b"EXISTS"]])
    assert not _announces_mail([(2, b"EXPUNGE")])


def _ca(path: Path) -> Path:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Test CA")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def test_a_tls_context_verifies_against_the_given_ca(tmp_path: Path) -> None:
    context = tls_context(str(_ca(tmp_path / "ca.pem")))
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert [c["subject"] for c in context.get_ca_certs()] == [((("commonName", "Test CA"),),)]
    with pytest.raises(OSError):
        tls_context(str(tmp_path / "missing.pem"))
    assert tls_context(None).verify_mode == ssl.CERT_REQUIRED


# outbox


class _Smtp:
    """A stand-in for aiosmtplib.SMTP, recording every call."""

    made: list[_Smtp] = []
    extensions: tuple[str, ...] = ("starttls",)
    fails: dict[str, BaseException] = {}
    send_fails_at = -1
    send_error: BaseException = aiosmtplib.SMTPDataError(554, "rejected")

    def __init__(self, **kw: Any) -> None:
        self.kw = kw
        self.calls: list[Any] = []
        _Smtp.made.append(self)

    async def _call(self, *call: Any) -> None:
        self.calls.append(call)
        if call[0] in _Smtp.fails:
            raise _Smtp.fails[call[0]]

    async def connect(self) -> None:
        await self._call("connect")

    async def ehlo(self) -> None:
        await self._call("ehlo")

    def supports_extension(self, name: str) -> bool:
        return name in _Smtp.extensions

    async def starttls(self, tls_context: Any) -> None:
        await self._call("starttls", tls_context)

    async def login(self, user: str, password: str) -> None:
        await self._call("login", user, password)

    async def send_message(self, message: EmailMessage, timeout: float) -> None:
        sent = sum(1 for c in self.calls if c[0] == "send")
        self.calls.append(("send", message["Message-ID"], timeout))
        if sent == _Smtp.send_fails_at:
            raise _Smtp.send_error

    async def quit(self) -> None:
        await self._call("quit")

    def close(self) -> None:
        self.calls.append(("close",))


@pytest.fixture
def smtp(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[_Smtp]]:
    _Smtp.made, _Smtp.fails, _Smtp.send_fails_at = [], {}, -1
    _Smtp.extensions = ("starttls",)
    _Smtp.send_error = aiosmtplib.SMTPDataError(554, "rejected")
    monkeypatch.setattr(aiosmtplib, "SMTP", _Smtp)
    yield _Smtp


SMTPS = Endpoint("smtp.example.org", 465, True)
SUBMISSION = Endpoint("smtp.example.org", 587, False)
LOCAL_SMTP = Endpoint("localhost", 2525, False)
LOGIN = ("login", "bot@example.org", "pw")


def _check(server: Endpoint) -> None:
    asyncio.run(check_login(server, "bot@example.org", "pw", CONTEXT))


def test_check_login_over_tls(smtp: type[_Smtp]) -> None:
    _check(SMTPS)
    client = smtp.made[0]
    assert client.kw == {
        "hostname": "smtp.example.org",
        "port": 465,
        "use_tls": True,
        "start_tls": False,
        "tls_context": CONTEXT,
        "timeout": EMAIL_TIMEOUT_SECONDS,
    }
    assert client.calls == [("connect",), LOGIN, ("quit",)]


def test_check_login_upgrades_with_starttls(smtp: type[_Smtp]) -> None:
    _check(SUBMISSION)
    client = smtp.made[0]
    assert client.kw["use_tls"] is False and client.kw["port"] == 587
    assert client.calls == [("connect",), ("ehlo",), ("starttls", CONTEXT), LOGIN, ("quit",)]


def test_no_password_in_clear_text_away_from_this_machine(smtp: type[_Smtp]) -> None:
    smtp.extensions = ()
    with pytest.raises(InsecureServer) as raised:
        _check(SUBMISSION)
    assert str(raised.value) == (
        "the SMTP server smtp.example.org:587 offers no STARTTLS; "
        "the password is not sent in clear text"
    )
    assert raised.value.hint == "use smtps:// (TLS from the start)"
    assert smtp.made[0].calls == [("connect",), ("ehlo",), ("close",)]
    assert classify(raised.value) == FAILED


def test_on_this_machine_the_login_may_be_in_clear_text(smtp: type[_Smtp]) -> None:
    smtp.extensions = ()
    _check(LOCAL_SMTP)
    assert smtp.made[0].calls == [("connect",), ("ehlo",), LOGIN, ("quit",)]


@pytest.mark.parametrize(
    ("step", "error", "told"),
    [
        ("connect", ConnectionRefusedError("refused"), "ConnectionRefusedError: refused"),
        (
            "login",
            aiosmtplib.SMTPAuthenticationError(535, "bad password"),
            "SMTPAuthenticationError: (535, 'bad password')",
        ),
    ],
)
def test_a_failed_connection_or_login_is_not_sent(
    smtp: type[_Smtp], step: str, error: BaseException, told: str
) -> None:
    smtp.fails = {step: error}
    with pytest.raises(NotSent) as raised:
        _check(SMTPS)
    assert str(raised.value) == f"SMTP smtp.example.org:465: {told}"
    assert raised.value.__cause__ is error
    assert smtp.made[0].calls[-1] == ("close",)
    assert classify(raised.value) == RETRY


def test_an_unexpected_error_is_not_taken_for_a_failed_login(smtp: type[_Smtp]) -> None:
    smtp.fails = {"login": RuntimeError("bug")}
    with pytest.raises(RuntimeError, match="bug"):
        _check(SMTPS)
    assert smtp.made[0].calls == [("connect",), LOGIN]


def test_a_failed_quit_closes_the_connection(smtp: type[_Smtp]) -> None:
    smtp.fails = {"quit": aiosmtplib.SMTPServerDisconnected("gone")}
    _check(SMTPS)
    assert smtp.made[0].calls == [("connect",), LOGIN, ("quit",), ("close",)]


def _mails(count: int) -> list[EmailMessage]:
    return [_reply(key="k", piece=i, pieces=count) for i in range(count)]


def _send(mails: list[EmailMessage], **kw: Any) -> list[str]:
    return asyncio.run(send_mails(SMTPS, "bot@example.org", "pw", CONTEXT, mails, **kw))


def test_send_mails_hands_over_each_in_order(smtp: type[_Smtp]) -> None:
    assert _send(_mails(2), timeout=120) == ["<k.0@example.org>", "<k.1@example.org>"]
    assert smtp.made[0].calls == [
        ("connect",),
        LOGIN,
        ("send", "<k.0@example.org>", 120),
        ("send", "<k.1@example.org>", 120),
        ("quit",),
    ]
    assert _send(_mails(1)) == ["<k.0@example.org>"]
    assert smtp.made[1].calls[2] == ("send", "<k.0@example.org>", EMAIL_TIMEOUT_SECONDS)


def test_a_refused_first_mail_is_the_servers_answer(smtp: type[_Smtp]) -> None:
    smtp.send_fails_at = 0
    with pytest.raises(aiosmtplib.SMTPDataError) as raised:
        _send(_mails(2))
    assert raised.value is smtp.send_error
    assert smtp.made[0].calls[-2:] == [("send", "<k.0@example.org>", 30), ("quit",)]
    assert classify(raised.value) == FAILED


def test_a_failure_after_a_mail_was_taken_is_partly_sent(smtp: type[_Smtp]) -> None:
    smtp.send_fails_at = 1
    smtp.fails = {"quit": aiosmtplib.SMTPServerDisconnected("gone")}
    with pytest.raises(PartlySent) as raised:
        _send(_mails(3))
    assert str(raised.value) == (
        "1 of 3 mails of the reply were sent, then: SMTPDataError: (554, 'rejected')"
    )
    assert raised.value.__cause__ is smtp.send_error
    assert [c[0] for c in smtp.made[0].calls] == [
        "connect",
        "login",
        "send",
        "send",
        "quit",
        "close",
    ]
    assert classify(raised.value) == UNKNOWN


def test_a_send_that_cannot_log_in_sends_nothing(smtp: type[_Smtp]) -> None:
    smtp.fails = {"connect": OSError("unreachable")}
    with pytest.raises(NotSent):
        _send(_mails(1))
    assert smtp.made[0].calls == [("connect",), ("close",)]


def test_a_refusal_is_classified_by_its_code() -> None:
    def response(code: int) -> str:
        return classify(aiosmtplib.SMTPResponseException(code, "x"))

    assert [response(c) for c in (399, 400, 421, 499, 500, 550)] == [
        FAILED,
        RETRY,
        RETRY,
        RETRY,
        FAILED,
        FAILED,
    ]

    def refused(*codes: int) -> str:
        return classify(
            aiosmtplib.SMTPRecipientsRefused(
                [aiosmtplib.SMTPRecipientRefused(c, "x", f"r{c}") for c in codes]
            )
        )

    assert refused(400, 499) == RETRY
    assert refused(450, 550) == FAILED
    assert refused(550, 450) == FAILED
    assert refused(399) == FAILED and refused(500) == FAILED
    assert refused() == FAILED


def test_errors_before_the_data_are_retried_others_unknown() -> None:
    assert classify(ConnectionRefusedError("refused")) == RETRY
    assert classify(ssl.SSLError("handshake")) == RETRY
    assert classify(ssl.SSLCertVerificationError("bad cert")) == RETRY
    assert classify(ConnectionResetError("reset")) == UNKNOWN
    assert classify(TimeoutError("slow")) == UNKNOWN
    assert classify(OrchestratorError("other")) == UNKNOWN
    assert classify(NotSent("x")) == RETRY
    assert classify(PartlySent("x")) == UNKNOWN
    assert classify(InsecureServer("x")) == FAILED


def test_dkim_logger_is_the_channels() -> None:
    assert dkimverify.log is logging.getLogger("orchestrator.channels.email")


def test_a_long_reply_in_base64_keeps_canonical_line_breaks() -> None:
    # MIME text is CRLF-delimited even inside base64: a reader decodes "\r\n"
    from email.parser import BytesParser
    from email.policy import default

    from aiosmtplib.email import flatten_message

    text = ("ä" * 100 + "\n") * 2
    sent = BytesParser(policy=default).parsebytes(flatten_message(_reply(text=text)))
    plain, html = sent.iter_parts()
    assert plain["Content-Transfer-Encoding"] == "base64"
    assert plain.get_payload(decode=True) == ("ä" * 100 + "\r\n").encode() * 2
    assert html["Content-Transfer-Encoding"] == "base64"
    assert ("ä" * 100 + "\r\n").encode() in html.get_payload(decode=True)


def test_the_domain_checked_is_after_the_senders_last_at(checker: type[_Checker]) -> None:
    # a quoted local part may hold an "@": the address's domain is after the last one
    checker.script = [GOOD]
    assert verify_from(b"raw", '"a@evil.org"@example.org', _txt).verified
    checker.script = [{**GOOD, "domain": b"evil.org"}]
    assert verify_from(b"raw", "x@evil.org@example.org", _txt) == DkimResult(
        False, "signature 1 is by evil.org, not example.org"
    )


def test_close_goes_on_past_a_failing_shutdown(imap: type[_Imap]) -> None:
    box, client = _opened(imap)
    imap.fails_at = "shutdown"
    box.close()
    assert client.calls == [("logout",), ("shutdown",)] and box.client is None
    box, client = _opened(imap)
    box.idling = True
    box.close()  # the idle's drop and the last shutdown both fail: no error
    assert client.calls == [("shutdown",), ("shutdown",)] and box.client is None


def test_send_mails_logs_in_with_the_accounts_tls_context(smtp: type[_Smtp]) -> None:
    _send(_mails(1))
    assert smtp.made[0].kw["tls_context"] is CONTEXT


def test_a_reply_is_written_with_the_headers_spelt_and_ordered_as_usual() -> None:
    target = ReplyTarget("<m2@x>", "Plans", ("<m1@x>",))
    sent = bytes(_reply(target=target, thread="<m1@x>"))
    head = sent.split(b"\r\n\r\n", 1)[0]
    names = [line.split(b":", 1)[0] for line in head.split(b"\r\n") if line[:1] not in b" \t"]
    assert names == [
        b"From",
        b"To",
        b"Subject",
        b"Date",
        b"Message-ID",
        b"In-Reply-To",
        b"References",
        b"Auto-Submitted",
        b"X-Auto-Response-Suppress",
        b"MIME-Version",
        b"Content-Type",
    ]
    assert b'\r\nContent-Type: text/html; charset="utf-8"\r\n' in sent
