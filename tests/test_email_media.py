"""Files by mail against real mail servers (Dovecot and Postfix, tests/mailserver.py), with
the real daemon and queue, a real runner and OpenAI-compatible fakes for the model and
the transcriber (tests/chatmedia.py): an audio file a person mails (a voice memo) is
transcribed before its turn, an image reaches the vision model, a file the agent sends
arrives once attached to a reply threaded to the mail answered, a claim not confirmed at
a crash is never sent again (the documented choice), and a link or a path outside files/
is refused by the host.

A machine without the servers (scripts/setup-mail) or not running as root skips these
with the reason; under CI=true that is a failure."""

from __future__ import annotations

import base64
import io
import itertools
import time
from collections.abc import Callable, Iterator
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest

from orchestrator.channels.chatapp.core import send_key
from orchestrator.channels.email.compose import Attached, reply_mail
from orchestrator.channels.email.kind import KIND
from orchestrator.channels.email.threads import message_id_for
from orchestrator.limits import EMAIL_FILE_MAX_BYTES
from orchestrator.relay.ops.send_file import send_limit
from tests.chatmedia import (
    MediaRig,
    claimed_at_a_crash,
    media_rig,
    send_file_then,
    sends_what_it_is_told,
)
from tests.fakeproviders import Text
from tests.mailserver import MailServers, message
from tests.mediafiles import jpeg_with_exif, pdf_with_text
from tests.test_email import body, wait_for

NAMES = itertools.count()


class Mailboxes:
    """The bot's and a correspondent's addresses on the servers, and their mail."""

    def __init__(self, servers: MailServers) -> None:
        n = next(NAMES)
        self.servers = servers
        self.bot = servers.add_user(f"mediabot{n}")
        self.alice = servers.add_user(f"mediaalice{n}")

    def account(self) -> str:
        s = self.servers
        return f"""
        mail:
          kind: email
          password_env: MAIL_PASSWORD
          imap_url: {s.imap_url()}
          smtp_url: {s.smtp_url()}
          user: {self.bot}
          ca_file: {s.ca_file}
        """

    def replies(self) -> list[EmailMessage]:
        return [m for m in self.servers.inbox(self.alice) if str(m["From"]) == self.bot]

    def wait_replies(self, count: int) -> list[EmailMessage]:
        return wait_for(lambda: len(self.replies()) >= count and self.replies(), timeout=60)


@pytest.fixture
def boxes(mail_servers: MailServers, monkeypatch: pytest.MonkeyPatch) -> Mailboxes:
    made = Mailboxes(mail_servers)
    monkeypatch.setenv("MAIL_PASSWORD", mail_servers.passwords[made.bot])
    return made


def started(boxes: Mailboxes, rig: MediaRig) -> MediaRig:
    wait_for(lambda: (rig.daemon.chats.health("mail") or {}).get("state") == "connected")
    rig.daemon.chats.bind("mail", boxes.alice, "fam", trust="member")
    return rig


@pytest.fixture
def rig(home: Path, monkeypatch: pytest.MonkeyPatch, boxes: Mailboxes) -> Iterator[MediaRig]:
    with media_rig(home, monkeypatch, KIND, boxes.account(), creator=None) as made:
        yield started(boxes, made)


def mail_with(boxes: Mailboxes, subject: str, text: str, *files: tuple[str, str, bytes]) -> Any:
    made = message(boxes.alice, boxes.bot, subject, text)
    for name, mime, data in files:
        maintype, subtype = mime.split("/")
        made.add_attachment(data, maintype=maintype, subtype=subtype, filename=name)
    boxes.servers.send(made)
    return made


def attachments(mail: EmailMessage) -> list[tuple[str | None, str, bytes]]:
    found = []
    for part in mail.iter_attachments():
        payload = part.get_payload(decode=True)
        assert isinstance(payload, bytes)
        found.append((part.get_filename(), part.get_content_type(), payload))
    return found


def test_a_mails_file_limit_and_the_attached_file_of_a_reply() -> None:
    assert KIND.files_out_max_bytes == EMAIL_FILE_MAX_BYTES == 10 * 1024**2
    assert send_limit("email:mail") == EMAIL_FILE_MAX_BYTES
    mail = reply_mail(sender="bot@example.test", to="a@example.test", text="here", target=None,
                      thread=None, key="orch.m1.0.0", piece=0, pieces=1,
                      files=(Attached("re\r\nBcc: x@evil/port.pdf", "application/pdf", b"%PDF"),
                             Attached("notes", "multipart/mixed", b"plain bytes")))  # fmt: skip
    assert mail.get_content_type() == "multipart/mixed" and "Bcc" not in mail
    assert attachments(mail) == [
        ("reBcc: x@evilport.pdf", "application/pdf", b"%PDF"),
        ("notes", "application/octet-stream", b"plain bytes"),
    ]
    assert body(mail) == "here"


def test_an_audio_file_is_transcribed_before_its_turn(rig: MediaRig, boxes: Mailboxes) -> None:
    rig.transcriber.script.append(Text("Remember the dentist on Tuesday."))
    memo = b"OggS a voice memo"
    mail_with(boxes, "A memo", "listen", ("memo.ogg", "audio/ogg", memo))
    [reply] = boxes.wait_replies(1)
    assert body(reply) == "ok"  # the model's answer
    [stored] = rig.inbox()
    assert stored.read_bytes() == memo and stored.suffix == ".ogg"
    assert rig.user_messages()[-1]["content"] == (
        "Subject: A memo\n\nlisten\n\n[audio, transcribed] Remember the dentist on Tuesday.\n"
        f'[audio: files/inbox/{stored.name} (file "memo.ogg", audio/ogg, {len(memo)} B)]'
    )
    upload = rig.transcriber.seen[-1].body["file"]
    assert upload == {"filename": stored.name, "type": "audio/ogg", "size": len(memo)}


def test_an_image_reaches_the_vision_model(rig: MediaRig, boxes: Mailboxes) -> None:
    from PIL import Image

    rig.model.script.append(Text("a red picture"))
    mail_with(boxes, "Look", "what is this?", ("cat.jpg", "image/jpeg", jpeg_with_exif(320, 200)))
    [reply] = boxes.wait_replies(1)
    assert body(reply) == "a red picture"
    [stored] = rig.inbox()
    text, image = rig.user_messages()[-1]["content"]
    assert text["text"].startswith(
        f'Subject: Look\n\nwhat is this?\n\n[attachment: files/inbox/{stored.name} (file "cat.jpg"'
    )
    url = image["image_url"]["url"]
    shown = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert shown.size == (320, 200) and not shown.getexif()  # re-encoded, no EXIF


def test_a_file_the_agent_sends_arrives_once_attached_to_a_threaded_reply(
    rig: MediaRig, boxes: Mailboxes
) -> None:
    report = pdf_with_text(["the report"])
    (rig.files / "report.pdf").write_bytes(report)
    send_file_then(rig.model, "files/report.pdf", "here is **the** report", "sent")
    asked = mail_with(boxes, "The report", "the report, please")
    replies = boxes.wait_replies(2)
    time.sleep(2)  # a second mail, were there one, would come within this
    assert len(boxes.replies()) == 2
    # (two mails, two SMTP sessions: Postfix may deliver them in either order)
    [with_file] = [m for m in replies if attachments(m)]
    [last] = [m for m in replies if not attachments(m)]
    assert attachments(with_file) == [("report.pdf", "application/pdf", report)]
    assert body(with_file) == "here is **the** report"
    assert with_file["In-Reply-To"] == asked["Message-ID"]
    assert with_file["References"] == asked["Message-ID"]
    assert with_file["Subject"] == "Re: The report"
    assert with_file["Auto-Submitted"] == "auto-replied"
    [row] = rig.daemon.queue.read("SELECT id FROM messages")
    domain = boxes.bot.split("@")[1]
    assert with_file["Message-ID"] == message_id_for(send_key(row[0], 0), 0, domain)
    assert body(last) == "sent" and last["In-Reply-To"] == asked["Message-ID"]


def test_a_file_claimed_but_unconfirmed_at_a_crash_is_never_sent_again(
    home: Path, monkeypatch: pytest.MonkeyPatch, boxes: Mailboxes
) -> None:
    made: list[str] = []
    prepare: Callable[[Any], None] = lambda h: made.append(  # noqa: E731
        claimed_at_a_crash(h, boxes.alice, f"email:{boxes.alice}", "email:mail", "mail")
    )
    with media_rig(home, monkeypatch, KIND, boxes.account(), creator=None, prepare=prepare) as rig:
        started(boxes, rig)
        [reply] = boxes.wait_replies(1)
        time.sleep(2)
        assert body(reply) == "after the file" and attachments(reply) == []
        assert len(boxes.replies()) == 1
        assert rig.daemon.chats.sent(made[0])[0][0] == "unknown"


def test_a_link_or_a_path_outside_files_is_refused_by_the_host(
    home: Path, monkeypatch: pytest.MonkeyPatch, boxes: Mailboxes
) -> None:
    with media_rig(
        home, monkeypatch, KIND, boxes.account(), creator=None, hostile=sends_what_it_is_told
    ) as rig:
        started(boxes, rig)
        (home / "outside.txt").write_text("not the group's")
        (rig.files / "secret.txt").symlink_to(home / "outside.txt")
        # (answers in a thread: the turn reads the words alone, without the subject)
        answering = {"In-Reply-To": "<earlier@example.test>"}
        for text in ("send files/secret.txt", "send memory/index.md"):
            boxes.servers.send(message(boxes.alice, boxes.bot, "Re: x", text, headers=answering))
            wait_for(lambda: boxes.replies(), timeout=60)
        replies = boxes.wait_replies(2)
        texts = [body(m) for m in replies]
        assert "symlink" in texts[0] and "only files under files/ can be sent" in texts[1]
        assert all(attachments(m) == [] for m in replies)
