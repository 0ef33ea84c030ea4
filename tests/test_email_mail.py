"""The pure parts of the email channel: reading a mail (HTML, quoted history, files),
the loop rules, threading, the reply's headers, the account's settings, DKIM's verdict,
and what a failed send means. No server: real servers are tests/test_email.py's."""

from __future__ import annotations

import base64
import hashlib
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


def test_recipients_subject_and_ids_are_read_whole_or_left_empty() -> None:
    made = EmailMessage()
    made["From"] = "a@example.org"
    made["To"] = "helper@example.org"
    made["Cc"] = "Bea <Bea@Example.org>, c@example.org"
    made["Subject"] = "Plans for  the Über trip"  # sent encoded (RFC 2047)
    mail = read_mail(made.as_bytes())
    assert mail.to == ("helper@example.org", "bea@example.org", "c@example.org")
    assert mail.subject == "Plans for the Über trip"
    bare = read_mail(b"From: a@example.org\r\n\r\nhi\r\n")
    assert (bare.to, bare.subject, bare.message_id, bare.in_reply_to) == ((), "", None, None)
    assert bare.references == () and bare.text == "hi"


def test_a_header_the_parser_refuses_is_kept_unfolded_with_replacements() -> None:
    raw = b"From: a@example.org\r\nMessage-ID: <@> caf\xe9   two\r\n words\r\n\r\nhi\r\n"
    mail = read_mail(raw)
    assert mail.headers == (("From", "a@example.org"), ("Message-ID", "<@> caf\ufffd two words"))
    assert mail.message_id == "<@>"


def test_inline_files_are_attachments_unless_html_refers_to_them() -> None:
    made = EmailMessage()
    made["From"] = "a@example.org"
    made.set_content("see the photo")
    made.add_attachment(
        b"JPEG photo", maintype="image", subtype="jpeg", disposition="inline", filename="p.jpg"
    )
    made.add_attachment(
        b"\x89PNG logo", maintype="image", subtype="png", disposition="inline", filename="l.png"
    )
    logo = made.get_payload()[-1]  # type: ignore[index]
    logo["Content-ID"] = "<logo@x>"
    mail = read_mail(made.as_bytes())
    assert [(a.filename, a.mime, a.data) for a in mail.attachments] == [
        ("p.jpg", "image/jpeg", b"JPEG photo")
    ]


def test_a_mail_with_no_text_part_has_no_text() -> None:
    made = EmailMessage()
    made["From"] = "a@example.org"
    made.set_content(b"%PDF-1.4 x", maintype="application", subtype="pdf")
    mail = read_mail(made.as_bytes())
    assert (mail.text, mail.html_only) == ("", False)
    assert html_to_text("") == ""


def test_trimming_at_the_edges_of_quotes_signatures_and_header_blocks() -> None:
    # CRLF line ends; a signature separator is exactly "-- "
    assert trim_quoted("Ok\r\n-- \r\nAlice") == "Ok"
    assert trim_quoted("Ok\n-- X\nmore") == "Ok\n-- X\nmore"
    # an attribution with nothing after it, or an indented quote after it
    assert trim_quoted("Ok\n\nOn Mon, Alice <a@x> wrote:\n") == "Ok"
    assert trim_quoted("Ok\nOn Mon, Alice <a@x> wrote:\n  > old") == "Ok"
    # the quote right after the attribution is what counts, not the line after it
    assert trim_quoted("Ok\nOn Mon, Alice <a@x> wrote:\n> old\nNew") == "Ok"
    # wrapped over two lines: at the very end, and with a quote and more text after it
    assert trim_quoted("Fine.\nOn Mon, Helper\n<h@x> wrote:") == "Fine."
    assert trim_quoted("Fine.\nOn Mon, Helper\n<h@x> wrote:\n> old\nNew") == "Fine."
    # an indented quote at the end goes too
    assert trim_quoted("Ok\n  > old") == "Ok"
    # exactly three header lines make a block; two do not
    assert trim_quoted("Hi\nFrom: a\nSent: b\nTo: c\nold") == "Hi"
    assert trim_quoted("Hi\nFrom: a\nTo: b\nBye") == "Hi\nFrom: a\nTo: b\nBye"
    # a block is looked for in six lines (blank ones count) from its first header line
    spread = "Hi\nFrom: a\n\n\n\n\nTo: b\nSubject: c"
    assert trim_quoted(spread) == spread


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


def test_automatic_reasons_are_exact_and_cut() -> None:
    def reason(headers: dict[str, str], sender: str = "Alice <alice@example.org>") -> str | None:
        return automatic_reason(read_mail(mail_bytes("x", sender=sender, headers=headers)))

    long = "auto-generated; type=vacation; " + "x" * 40
    assert reason({"Auto-Submitted": long}) == f"Auto-Submitted: {long[:40]}"
    # "no" with a parameter is still no
    assert reason({"Auto-Submitted": "no; reason=person"}) is None
    assert reason({"Return-Path": "<>"}) == "the null sender (a bounce)"
    assert reason({"Return-Path": ""}) == "the null sender (a bounce)"
    envelope = "<owner-" + "f" * 90 + "@example.org>"
    assert reason({"Return-Path": envelope}) == f"a machine's envelope sender ({envelope[:80]})"
    assert reason({}, sender="") == "no From: address"
    assert reason({"List-Id": "<fam.example.org>"}) == "a mailing list's List-Id header"
    assert reason({"X-Autoreply": "yes"}) == "an auto-responder's X-Autoreply header"
    assert reason({"Precedence": " Bulk "}) == "Precedence: bulk"
    assert reason({}, sender="Daemon <MAILER-DAEMON@example.org>") == (
        "a machine's address (mailer-daemon@example.org)"
    )
    report = EmailMessage()
    report["From"] = "postmaster@example.org"
    report.set_content("delivery failed")
    report.make_mixed()
    report.replace_header("Content-Type", "multipart/report; report-type=delivery-status")
    assert automatic_reason(read_mail(report.as_bytes())) == "a delivery or read report"


def test_a_machine_sender_is_told_by_its_local_part_alone() -> None:
    # a bare local part (no domain) is the whole address, in any case
    assert machine_sender("MAILER-DAEMON") and machine_sender("Fam-Request")
    assert not machine_sender("alice")
    # the domain is what follows the last "@": the local part may hold one
    assert machine_sender("x@fam-request@example.org")
    # only the angle brackets around it are taken off, not letters
    assert not machine_sender("Xowner-fam@example.org")
    assert not machine_sender("fam-requestX@example.org")


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
    assert target == ReplyTarget("<m1@example.org>", "Plans", ("<r@x>",))
    assert ReplyTarget.decode(target.encode()) == target
    long = read_mail(mail_bytes("x").replace(b"Subject: Plans", b"Subject: " + b"s" * 300))
    assert ReplyTarget.of(long).subject == "s" * 200  # the first SUBJECT_MAX_CHARS
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


def test_a_thread_key_of_a_long_or_unprintable_root_is_its_digest() -> None:
    edge = "<" + "a" * 196 + "@x>"  # exactly SENDER_ID_MAX_CHARS
    assert len(edge) == 200 and thread_key(edge) == edge
    longer = "<" + "a" * 197 + "@x>"
    digest = hashlib.sha256(longer.encode()).hexdigest()[:40]
    assert thread_key(longer) == f"<sha256.{digest}>"
    unprintable = "<a\tb@x>"
    digest = hashlib.sha256(unprintable.encode()).hexdigest()[:40]
    assert thread_key(unprintable) == f"<sha256.{digest}>"
    assert thread_key(None) is None


def test_references_of_a_reply_to_a_mail_without_an_id() -> None:
    assert reply_references(("<a@x>", "<b@x>"), None) == ("<a@x>", "<b@x>")
    assert reply_references((), None) == ()


def test_message_ids_keep_letters_and_digits_and_cut_edges() -> None:
    assert message_id_for("Orch.ABC.1", 0, "Mail.Example.ORG") == "<Orch.ABC.1.0@Mail.Example.ORG>"
    assert message_id_for(".k.", 2, "-.ex.org.-") == "<k.2@ex.org>"
    assert message_id_for(" k ", 0, " ex.org ") == "<-k-.0@ex.org>"
    assert message_id_for("XkX", 0, "Xex.orgX") == "<XkX.0@Xex.orgX>"
    assert message_id_for("", 0, "") == "<reply.0@localhost>"
    assert message_id_for("...", 0, ".-") == "<reply.0@localhost>"


def test_a_reply_target_is_compact_json_and_reads_back_what_it_can() -> None:
    target = ReplyTarget("<m@x>", "Über", ("<r@x>",))
    assert target.encode() == '{"id":"<m@x>","subject":"Über","refs":["<r@x>"]}'
    assert ReplyTarget.decode('{"id":"<m@x>"}') == ReplyTarget("<m@x>", "", ())
    assert ReplyTarget.decode('{"subject":"","refs":"<r@x>"}') == ReplyTarget(None, "", ())
    bare = ReplyTarget(None, "", ())
    assert ReplyTarget.decode(bare.encode()) == bare
    assert ReplyTarget.decode("neither json nor an id") is None


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
    assert code == 2 and "--token-env: an email account's secret is its password" in out
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
