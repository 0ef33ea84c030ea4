"""Fuzzing inbound mail (orchestrator/channels/email): anyone can send the account a mail,
whose bytes read_mail reads ("pure functions of the message's bytes") before the loop
rules (automatic_reason), the thread (thread_key of thread_root) and the reply target
(ReplyTarget, the inbound message's platform id). For any bytes, each gives a value and
raises nothing (a mail that raised was skipped unread); every text that goes on to the
queue's database is valid Unicode (SQLite refuses lone surrogates); a reply target
decodes back to itself.
"""

from __future__ import annotations

from email.message import EmailMessage

from hypothesis import example, given
from hypothesis import strategies as st

from orchestrator.channels.email.adapter import turn_text
from orchestrator.channels.email.reading import Mail, read_mail
from orchestrator.channels.email.rules import automatic_reason
from orchestrator.channels.email.threads import ReplyTarget, thread_key, thread_root
from orchestrator.limits import SENDER_ID_MAX_CHARS
from tests.fuzzing import fuzz, mutated


def made(
    body: str = "See you at 8.", html: str | None = None, **headers: str
) -> bytes:  # as tests/test_email_mail.py makes them
    message = EmailMessage()
    message["From"] = "Alice <Alice@Example.org>"
    message["To"] = "helper@example.org"
    message["Subject"] = "Plans"
    message["Message-ID"] = "<m1@example.org>"
    for key, value in headers.items():
        del message[key.replace("_", "-")]
        message[key.replace("_", "-")] = value
    message.set_content(body)
    if html is not None:
        message.add_alternative(html, subtype="html")
    return message.as_bytes()


def with_files() -> bytes:
    message = EmailMessage()
    message["From"] = "a@example.org"
    message.set_content("see attached")
    message.add_attachment(b"%PDF-1.4 x", maintype="application", subtype="pdf", filename="r.pdf")
    message.add_attachment(b"\x89PNG", maintype="image", subtype="png", disposition="inline")
    return message.as_bytes()


SEEDS = [
    made(),
    made(
        "Yes.\n\nOn Mon, 1 Dec 2025 at 10:00, Bob <b@x> wrote:\n> old\n-- \nsig",
        html="<p>Yes.</p><blockquote>old</blockquote>",
        In_Reply_To="<r0@x>",
        References="<r0@x> <r1@x>",
    ),
    made("auto", Auto_Submitted="auto-replied", Precedence="bulk", List_Id="<l.x>"),
    made("é ü 漢字 👋", Subject="=?utf-8?b?w6kgw7w=?="),
    with_files(),
    b"From: x\r\nSubject: =?x-unknown?q?a?=\r\n\r\nbody",
    b"Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n"
    b"Content-Type: text/plain\r\n\r\nx\r\n--b--",
]


def utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def nested(depth: int) -> bytes:
    head = b"From: a@b.org\r\n"
    for _ in range(depth):
        head += b"Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n"
    return head + b"Content-Type: text/plain\r\n\r\nx\r\n"


@fuzz(300)
@given(raw=st.one_of(mutated(SEEDS, max_edits=8), st.binary(max_size=200)))
@example(raw=SEEDS[1])
@example(raw=nested(2000)).via("deep multipart nesting")
@example(
    raw=b"From: \xff\xfe <a\xff@b.org>\r\nSubject: \xe9t\xe9\r\nMessage-ID: <\xff@x>\r\n\r\n\xff"
)
@example(raw=b"Content-Type: text/plain; charset=utf-7\r\n\r\n+AGEAYgBj-")
@example(raw=b"Content-Type: text/plain; charset=x-nonsense\r\n\r\nabc")
@example(raw=b"Content-Transfer-Encoding: base64\r\n\r\n!!!=")
@example(raw=b"Content-Disposition: attachment; filename*=utf-8''%ff%fe\r\n\r\nx")
@example(raw=b"Content-Disposition: attachment; filename*0*=x''a; filename*1=b\r\n\r\nx")
@example(raw=b'To: =?utf-8?q?=ff?= <a@b>, "\\\r\n\r\nx')
@example(raw=b"Content-Type: text/html\r\n\r\n<html><blockquote>" * 300)
@example(raw=b"Subject: " + b"=?utf-8?b?" * 500 + b"\r\n\r\nx")
def test_any_mail_is_read_and_judged(raw: bytes) -> None:
    mail = read_mail(raw)
    assert isinstance(mail, Mail)
    reason = automatic_reason(mail)
    assert reason is None or reason
    key = thread_key(thread_root(mail))
    assert key is None or (len(key) <= SENDER_ID_MAX_CHARS and key.isprintable())
    target = ReplyTarget.of(mail)
    encoded = target.encode()
    for text in (mail.sender, mail.sender_name, mail.subject, turn_text(mail), encoded, key or ""):
        assert utf8(text), text
    again = ReplyTarget.decode(encoded)
    assert again is not None
    assert again.message_id == target.message_id and again.subject == target.subject


@fuzz(200)
@given(text=st.one_of(st.none(), st.text(max_size=40), st.sampled_from(['{"id": 1}', "[1]"])))
@example(text='{"id": "<a@b>", "subject": 5, "refs": "x"}')
@example(text="<a@b> and <c@d>")
def test_a_platform_id_decodes_or_is_none(text: str | None) -> None:
    decoded = ReplyTarget.decode(text)
    assert decoded is None or isinstance(decoded, ReplyTarget)
