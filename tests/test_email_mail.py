"""The pure parts of the email channel: reading a mail (HTML, quoted history, files),
the loop rules, threading, the reply's headers, the account's settings, DKIM's verdict,
and what a failed send means. No server: real servers are tests/test_email.py's."""

from __future__ import annotations

import base64
import json
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from orchestrator.channels.chatapp.adapter import RETRY
from orchestrator.channels.email.compose import reply_mail
from orchestrator.channels.email.dkimverify import aligned, verify_from
from orchestrator.channels.email.kind import EmailOptions, endpoint, parse
from orchestrator.channels.email.outbox import NotSent, PartlySent, classify
from orchestrator.channels.email.reading import html_to_text, read_mail, trim_quoted
from orchestrator.channels.email.rules import automatic_reason, machine_sender
from orchestrator.channels.email.threads import (
    ReplyTarget,
    message_id_for,
    reply_references,
    reply_subject,
    thread_key,
    thread_root,
)
from orchestrator.cli import cli
from orchestrator.errors import InvalidConfig
from orchestrator.groups.config import GroupConfig, classify_sender
from orchestrator.home import Home
from orchestrator.store.chats import FAILED, UNKNOWN, ChatStore
from orchestrator.store.messages import open_queue
from orchestrator.validate import MappingReader
from orchestrator.yamldoc import parse_yaml_text


def mail_bytes(
    body: str | None = "hello",
    *,
    sender: str = "Alice <Alice@Example.org>",
    headers: dict[str, str] | None = None,
    html: str | None = None,
) -> bytes:
    made = EmailMessage()
    made["From"] = sender
    made["To"] = "helper@example.org"
    made["Subject"] = "Plans"
    made["Message-ID"] = "<m1@example.org>"
    for key, value in (headers or {}).items():
        made[key] = value
    if body is not None:
        made.set_content(body)
        if html is not None:
            made.add_alternative(html, subtype="html")
    elif html is not None:
        made.set_content(html, subtype="html")
    return made.as_bytes()


# reading


def test_a_mail_is_read_into_its_sender_ids_and_text() -> None:
    mail = read_mail(
        mail_bytes(
            "See you at 8.",
            headers={"In-Reply-To": "<r1@x>", "References": "<root@x> <r1@x>"},
        )
    )
    assert (mail.sender, mail.sender_name) == ("alice@example.org", "Alice")
    assert mail.message_id == "<m1@example.org>" and mail.in_reply_to == "<r1@x>"
    assert mail.references == ("<root@x>", "<r1@x>")
    assert mail.subject == "Plans" and mail.text == "See you at 8."
    assert mail.to == ("helper@example.org",)


def test_a_top_posted_reply_loses_its_quote() -> None:
    text = (
        "Yes, Tuesday works.\n\nOn Mon, 30 Nov 2026 at 10:00, Helper <helper@example.org>"
        " wrote:\n> Shall we meet on Tuesday?\n> \n> Helper\n"
    )
    assert trim_quoted(text) == "Yes, Tuesday works."


def test_an_attribution_wrapped_over_two_lines_is_recognized() -> None:
    text = "Fine.\n\nOn Mon, 30 Nov 2026 at 10:00, Helper\n<helper@example.org> wrote:\n> old\n"
    assert trim_quoted(text) == "Fine."


def test_outlook_blocks_separators_and_signatures_are_trimmed() -> None:
    outlook = (
        "Thanks!\n\nFrom: Helper <helper@example.org>\nSent: Monday\nTo: Alice\n"
        "Subject: Plans\n\nold text"
    )
    assert trim_quoted(outlook) == "Thanks!"
    assert trim_quoted("Ok\n-----Original Message-----\nold") == "Ok"
    assert trim_quoted("Ok\n\n-- \nAlice Example\nPhone 123") == "Ok"


def test_interleaved_answers_keep_their_quotes_and_a_bottom_quote_goes() -> None:
    interleaved = "> Tuesday?\nYes.\n> At 8?\nAt 9.\n> bye\n"
    assert trim_quoted(interleaved) == "> Tuesday?\nYes.\n> At 8?\nAt 9."


def test_a_mail_that_is_all_quote_is_kept_whole() -> None:
    assert trim_quoted("> forwarded text\n> more") == "> forwarded text\n> more"


def test_one_line_that_names_from_is_not_a_header_block() -> None:
    assert trim_quoted("From: the garden, with love.\nBye") == "From: the garden, with love.\nBye"


def test_html_is_reduced_to_text_without_the_quoted_message() -> None:
    text = html_to_text(
        "<p>Hi <b>there</b></p><table><tr><td>a</td><td>b</td></tr></table>"
        "<blockquote type='cite'>old</blockquote><div id='divRplyFwdMsg'>From: x</div>"
        "<script>alert(1)</script>"
    )
    assert "Hi there" in text and "a" in text and "b" in text
    assert "old" not in text and "From: x" not in text and "alert" not in text


def test_an_html_only_mail_is_read_from_its_html() -> None:
    mail = read_mail(mail_bytes(None, html="<p>Only <i>html</i></p>"))
    assert mail.text == "Only html" and mail.html_only


def test_the_plain_part_is_preferred_to_the_html_one() -> None:
    mail = read_mail(mail_bytes("plain words", html="<p>html words</p>"))
    assert mail.text == "plain words" and not mail.html_only


def test_attachments_are_files_and_inline_images_of_a_signature_are_not() -> None:
    made = EmailMessage()
    made["From"] = "a@example.org"
    made.set_content("see attached")
    made.add_attachment(b"%PDF-1.4 x", maintype="application", subtype="pdf", filename="r.pdf")
    made.add_attachment(b"\x89PNG logo", maintype="image", subtype="png", disposition="inline")
    logo = made.get_payload()[-1]  # type: ignore[index]
    logo["Content-ID"] = "<logo@x>"
    mail = read_mail(made.as_bytes())
    assert [(a.filename, a.mime, a.data) for a in mail.attachments] == [
        ("r.pdf", "application/pdf", b"%PDF-1.4 x")
    ]


def test_an_undecodable_body_is_read_with_replacements() -> None:
    raw = (
        b"From: a@example.org\r\nSubject: x\r\nContent-Type: text/plain; charset=nonesuch\r\n"
        b"\r\nh\xe9llo\r\n"
    )
    assert read_mail(raw).text.startswith("h")


# loop rules


@pytest.mark.parametrize(
    ("headers", "why"),
    [
        ({"Auto-Submitted": "auto-replied"}, "Auto-Submitted"),
        ({"Auto-Submitted": "auto-generated; type=vacation"}, "Auto-Submitted"),
        ({"Precedence": "bulk"}, "Precedence: bulk"),
        ({"Precedence": "List"}, "Precedence: list"),
        ({"Precedence": "junk"}, "Precedence: junk"),
        ({"List-Id": "<fam.lists.example.org>"}, "List-Id"),
        ({"List-Unsubscribe": "<mailto:x@example.org>"}, "List-Unsubscribe"),
        ({"X-Autoreply": "yes"}, "X-Autoreply"),
        ({"Return-Path": "<>"}, "null sender"),
        ({"Return-Path": "<owner-fam@example.org>"}, "envelope sender"),
    ],
)
def test_automatic_mail_is_recognized(headers: dict[str, str], why: str) -> None:
    mail = read_mail(mail_bytes("x", headers=headers))
    reason = automatic_reason(mail)
    assert reason is not None and why in reason


def test_a_delivery_report_is_automatic() -> None:
    report = EmailMessage()
    report["From"] = "postmaster@example.org"
    report.set_content("delivery failed")
    report.make_mixed()
    report.replace_header("Content-Type", "multipart/report; report-type=delivery-status")
    reason = automatic_reason(read_mail(report.as_bytes()))
    assert reason is not None and "report" in reason


def test_a_persons_mail_and_auto_submitted_no_are_answered() -> None:
    assert automatic_reason(read_mail(mail_bytes("x"))) is None
    assert automatic_reason(read_mail(mail_bytes("x", headers={"Auto-Submitted": "no"}))) is None
    assert (
        automatic_reason(read_mail(mail_bytes("x", headers={"Precedence": "first-class"}))) is None
    )


def test_machine_senders() -> None:
    for address in ("", "<>", "MAILER-DAEMON@example.org", "owner-fam@x", "fam-request@x"):
        assert machine_sender(address), address
    for address in ("alice@example.org", "requester@x", "postmaster-fan@x"):
        assert not machine_sender(address), address
    mail = read_mail(mail_bytes("x", sender="Mail Delivery <MAILER-DAEMON@example.org>"))
    assert "machine" in str(automatic_reason(mail))
    assert "no From" in str(automatic_reason(read_mail(mail_bytes("x", sender=""))))


# threads


def test_the_root_of_a_thread_is_its_first_reference() -> None:
    assert thread_root(read_mail(mail_bytes("x"))) == "<m1@example.org>"
    replied = read_mail(mail_bytes("x", headers={"In-Reply-To": "<p@x>"}))
    assert thread_root(replied) == "<p@x>"
    deep = read_mail(mail_bytes("x", headers={"In-Reply-To": "<p@x>", "References": "<r@x> <p@x>"}))
    assert thread_root(deep) == "<r@x>"
    assert thread_key("<short@x>") == "<short@x>"
    long = "<" + "a" * 300 + "@x>"
    key = thread_key(long)
    assert key is not None and len(key) <= 200 and key == thread_key(long) != long


def test_reply_subjects_do_not_pile_up_prefixes() -> None:
    assert reply_subject("Plans") == "Re: Plans"
    assert reply_subject("Re: AW: re[2]: Plans") == "Re: Plans"
    assert reply_subject("  ") == "Re: Your message"


def test_references_keep_the_root_and_the_newest() -> None:
    chain = tuple(f"<{n}@x>" for n in range(30))
    kept = reply_references(chain, "<new@x>")
    assert len(kept) == 20 and kept[0] == "<0@x>" and kept[-1] == "<new@x>"
    assert reply_references((), "<a@x>") == ("<a@x>",)
    assert reply_references(("<a@x>",), "<a@x>") == ("<a@x>",)


def test_message_ids_are_the_same_for_the_same_key_and_piece() -> None:
    one = message_id_for("orch.abc.0.0", 0, "example.org")
    assert one == message_id_for("orch.abc.0.0", 0, "example.org") == "<orch.abc.0.0.0@example.org>"
    assert message_id_for("orch.abc.0.0", 1, "example.org") != one
    assert message_id_for("orch.n.1/2 3", 0, "ex ample.org") == "<orch.n.1-2-3.0@ex-ample.org>"


def test_a_reply_target_travels_as_the_platform_id() -> None:
    mail = read_mail(mail_bytes("x", headers={"References": "<r@x>"}))
    target = ReplyTarget.of(mail)
    assert ReplyTarget.decode(target.encode()) == target
    assert ReplyTarget.decode("<bare@x>") == ReplyTarget("<bare@x>", "", ())
    assert ReplyTarget.decode(None) is None and ReplyTarget.decode("[1]") is None


def test_a_reply_is_threaded_marked_and_has_both_parts() -> None:
    target = ReplyTarget("<m2@x>", "Re: Plans", ("<m0@x>", "<m1@x>"))
    mail = reply_mail(
        sender="helper@example.org",
        to="alice@example.org",
        text="**Yes**, at 8.",
        target=target,
        thread="<m0@x>",
        key="orch.id.0.0",
        piece=0,
        pieces=1,
        now=0,
    )
    assert mail["Subject"] == "Re: Plans"
    assert mail["In-Reply-To"] == "<m2@x>"
    assert mail["References"] == "<m0@x> <m1@x> <m2@x>"
    assert mail["Message-ID"] == "<orch.id.0.0.0@example.org>"
    assert mail["Auto-Submitted"] == "auto-replied"
    assert mail.get_body(("plain",)).get_content().strip() == "**Yes**, at 8."  # type: ignore[union-attr]
    assert "<b>Yes</b>" in mail.get_body(("html",)).get_content()  # type: ignore[union-attr]


def test_a_notice_without_a_target_is_threaded_to_the_thread() -> None:
    mail = reply_mail(
        sender="helper@example.org",
        to="alice@example.org",
        text="Pairing code: X",
        target=None,
        thread="<root@x>",
        key="orch.pair.ABCD-EFGH",
        piece=1,
        pieces=2,
    )
    assert mail["In-Reply-To"] == "<root@x>" and mail["References"] == "<root@x>"
    assert mail["Subject"] == "Re: Your message (2/2)"


# settings


def options(text: str) -> EmailOptions:
    data = parse_yaml_text(text, "orchestrator.yaml")
    return parse(MappingReader(data, data.data))


BASE = "imap_url: imaps://mail.example.org\nsmtp_url: smtps://mail.example.org:465\n"


def test_settings_and_their_defaults() -> None:
    found = options(BASE + "user: Helper@Example.org\n")
    assert found.address == "helper@example.org" and found.folder == "INBOX"
    assert found.imap == endpoint("imaps://mail.example.org")
    assert (found.imap.port, found.smtp.port, found.imap.implicit_tls) == (993, 465, True)
    assert found.default_trust == "guest"
    assert options(BASE + "user: h@x.org\nverify: dkim\n").default_trust == "member"
    assert endpoint("smtp://127.0.0.1:2525").loopback
    assert not endpoint("smtp://mail.example.org").loopback


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("imap_url: http://x\nsmtp_url: smtps://x\nuser: a@x.org\n", "scheme must be one of"),
        ("imap_url: smtps://x\nsmtp_url: smtps://x\nuser: a@x.org\n", "expected imaps://"),
        ("imap_url: imaps://u:p@x\nsmtp_url: smtps://x\nuser: a@x.org\n", "no login in the URL"),
        (BASE + "user: helper\n", "give address"),
        (BASE + "user: a@x.org\nverify: spf\n", "verify"),
        (BASE + "user: a@x.org\nca_file: rel.pem\n", "absolute path"),
        (BASE + "user: a@x.org\npoll_interval: 1s\n", "from 5s to 1h"),
        ("imap_url: imaps://x:99999\nsmtp_url: smtps://x\nuser: a@x.org\n", "port"),
    ],
)
def test_bad_settings_are_refused_by_name(text: str, message: str) -> None:
    with pytest.raises(InvalidConfig, match=message):
        options(text)


# DKIM


def _key() -> tuple[bytes, bytes]:
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


def test_dkim_verdicts() -> None:
    import dkim

    private, record = _key()

    def lookup(name: bytes, **_: Any) -> bytes | None:
        return record if name.endswith(b"._domainkey.example.org.") else None

    raw = mail_bytes("hello").replace(b"\n", b"\r\n")

    def signed(domain: bytes, headers: list[bytes], **kw: Any) -> bytes:
        return dkim.sign(raw, b"s1", domain, private, include_headers=headers, **kw) + raw

    good = verify_from(signed(b"example.org", [b"from", b"subject"]), "alice@example.org", lookup)
    assert good.verified and "example.org" in good.why
    assert not verify_from(raw, "alice@example.org", lookup).verified
    part = verify_from(signed(b"example.org", [b"from"], length=True), "alice@example.org", lookup)
    assert not part.verified and "part of the body" in part.why
    other = verify_from(signed(b"example.org", [b"from"]), "alice@elsewhere.org", lookup)
    assert not other.verified and "not elsewhere.org" in other.why
    tampered = signed(b"example.org", [b"from"]).replace(b"hello", b"HELLO")
    assert not verify_from(tampered, "alice@example.org", lookup).verified
    assert aligned("example.org", "mail.example.org") and not aligned(
        "mail.example.org", "example.org"
    )


# sending


def test_a_failed_send_is_classified_by_when_it_failed() -> None:
    import aiosmtplib

    assert classify(NotSent("connection refused")) == RETRY
    assert classify(PartlySent("1 of 2")) == UNKNOWN
    assert classify(aiosmtplib.SMTPDataError(554, "rejected")) == FAILED
    assert classify(aiosmtplib.SMTPDataError(451, "try later")) == RETRY
    assert (
        classify(
            aiosmtplib.SMTPRecipientsRefused([aiosmtplib.SMTPRecipientRefused(550, "no", "x")])
        )
        == FAILED
    )
    assert classify(aiosmtplib.SMTPServerDisconnected("gone")) == UNKNOWN
    assert classify(aiosmtplib.SMTPReadTimeoutError("slow")) == UNKNOWN


# the command line


def run(home: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--home", str(home), *args])
    return result.exit_code, result.output


ADD = (
    "channel", "add", "email", "mailbot", "--imap-url", "imaps://mail.example.org",
    "--smtp-url", "smtps://mail.example.org", "--user", "helper@example.org",
)  # fmt: skip


def test_an_email_account_is_added_with_its_password_and_binds_as_guests(home: Path) -> None:
    assert run(home, "group", "add", "fam")[0] == 0
    code, out = run(home, *ADD, "--token-env", "X")
    assert code == 2 and "--token-env: a email account's secret is its password" in out
    code, out = run(home, *ADD)
    assert code == 2 and "give --password-env VAR or --password-secret NAME" in out
    code, out = run(home, *ADD, "--password-env", "MAIL_PW", "--verify", "none")
    assert code == 0 and "channel account mailbot (email, password: env MAIL_PW)" in out
    text = (home / "orchestrator.yaml").read_text()
    assert "password_env: MAIL_PW" in text and "token_env" not in text
    code, out = run(home, "channel", "add", "telegram", "tg", "--password-env", "X")
    assert code == 2 and "a telegram account's secret is its token" in out
    code, out = run(home, "bind", "fam", "mailbot:alice@example.org")
    assert code == 0 and "its people are guests" in out
    queue = open_queue(Home(home))
    pairing, _ = ChatStore(queue).request_pairing(
        "mailbot", "bob@example.org", title="Bob", requested_by="email:bob@example.org"
    )
    queue.close()
    assert pairing is not None
    code, out = run(home, "pair", pairing.code, "fam")
    assert code == 0 and "its people are guests" in out
    listing = json.loads(run(home, "channel", "list", "--json")[1])
    assert listing[0]["credential"] == "password" and listing[0]["token"] == "env MAIL_PW"
    assert {b["trust"] for b in listing[0]["bindings"]} == {"guest"}
    code, out = run(home, "channel", "list")
    assert "password: env MAIL_PW" in out


def test_with_dkim_bindings_default_to_members(home: Path) -> None:
    assert run(home, "group", "add", "fam")[0] == 0
    assert run(home, *ADD, "--password-secret", "mail", "--verify", "dkim")[0] == 0
    code, out = run(home, "bind", "fam", "mailbot:alice@example.org")
    assert code == 0 and "its people are members" in out


def test_an_email_sender_is_never_a_creator(home: Path) -> None:
    assert run(home, "group", "add", "fam")[0] == 0
    config = home / "groups" / "fam" / "group.yaml"
    config.write_text("name: fam\ncreators: [telegram:1, 'email:boss@example.org']\n")
    code, out = run(home, "group", "show", "fam")
    assert code != 0 and "creators[1]" in out and "Email senders cannot be creators" in out
    made = GroupConfig(
        name="fam", creators=("email:boss@example.org",), members=("email:boss@example.org",)
    )
    assert classify_sender(made, "email:boss@example.org") == "member"
