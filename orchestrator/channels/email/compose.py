"""The mail a reply is sent as: threaded to the mail it answers (``threads``), marked
``Auto-Submitted: auto-replied`` (RFC 3834: other auto-responders do not answer it),
the model's Markdown as the plain text and rendered as an HTML alternative, and the
files it carries attached."""

from __future__ import annotations

import email.utils
from collections.abc import Sequence
from dataclasses import dataclass
from email.message import EmailMessage
from email.policy import SMTP

from orchestrator.channels.email.threads import (
    NO_SUBJECT,
    ReplyTarget,
    message_id_for,
    reply_references,
    reply_subject,
)
from orchestrator.channels.textfmt import markdown_to_html

_CONTAINERS = ("multipart", "message")  # types a file is never attached as


@dataclass(frozen=True)
class Attached:
    """A file a reply carries: its name for people, its MIME type and its bytes."""

    name: str
    mime: str
    data: bytes

    @property
    def filename(self) -> str:
        """The name as the mail gives it: printable characters only (the name is the
        agent's, and a header must not be broken by it), no path."""
        clean = "".join(c for c in self.name if c.isprintable() and c not in "/\\")
        return clean.strip()[:200] or "file"

    @property
    def types(self) -> tuple[str, str]:
        maintype, _, subtype = self.mime.lower().partition("/")
        if not maintype or not subtype or maintype in _CONTAINERS:
            return "application", "octet-stream"
        return maintype, subtype


_HTML_PAGE = (
    '<!DOCTYPE html><html><head><meta charset="utf-8"></head>'
    '<body><div style="white-space: pre-wrap">{}</div></body></html>'
)


def reply_mail(
    *,
    sender: str,
    to: str,
    text: str,
    target: ReplyTarget | None,
    thread: str | None,
    key: str,
    piece: int,
    pieces: int,
    now: float | None = None,
    files: Sequence[Attached] = (),
) -> EmailMessage:
    """One piece of a reply from ``sender`` to ``to``, with ``files`` attached.
    ``target``: the mail answered (None for a notice that answers none, threaded to
    ``thread`` when there is one)."""
    message = EmailMessage(policy=SMTP)
    domain = sender.rpartition("@")[2] or "localhost"
    message["From"] = sender
    message["To"] = to
    subject = reply_subject(target.subject) if target is not None else f"Re: {NO_SUBJECT}"
    if pieces > 1:
        subject += f" ({piece + 1}/{pieces})"
    message["Subject"] = subject
    message["Date"] = email.utils.formatdate(now, localtime=False)
    message["Message-ID"] = message_id_for(key, piece, domain)
    answered = target.message_id if target is not None else thread
    references = reply_references(target.references if target is not None else (), answered)
    if thread and (not references or references[0] != thread):
        references = (thread, *references)
    if answered:
        message["In-Reply-To"] = answered
    if references:
        message["References"] = " ".join(references)
    message["Auto-Submitted"] = "auto-replied"
    # Exchange's own auto-replies (out of office) are not sent back to us
    message["X-Auto-Response-Suppress"] = "All"
    message.set_content(text)
    message.add_alternative(_HTML_PAGE.format(markdown_to_html(text)), subtype="html")
    for file in files:
        maintype, subtype = file.types
        message.add_attachment(
            file.data, maintype=maintype, subtype=subtype, filename=file.filename
        )
    return message
