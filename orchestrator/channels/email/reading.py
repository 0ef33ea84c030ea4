"""One inbound mail read into what a turn needs: who wrote it, its threading headers,
its text (HTML reduced to text, quoted history and signature trimmed) and its files.
Pure functions of the message's bytes; nothing here touches the network or a disk."""

from __future__ import annotations

import email
import email.errors
import email.policy
import email.utils
import re
from dataclasses import dataclass, field
from email.message import EmailMessage, Message

# A reply's attribution line before the quote it introduces ("On Mon, 1 Dec 2025 at
# 10:00, Alice <a@x> wrote:"); clients wrap it, so it may span two lines.
_ATTRIBUTION = re.compile(
    r"^(On|Le|Am|El|Il|Op)\s.{0,300}(wrote|écrit|schrieb|escribió|scritto|schreef)\s*:\s*$",
    re.I | re.S,
)
# Outlook's and others' header block before a forwarded or replied-to message.
_SEPARATORS = (
    re.compile(
        r"^-{2,}\s*(Original Message|Forwarded message|Ursprüngliche Nachricht)\s*-{2,}\s*$", re.I
    ),
    re.compile(r"^_{20,}\s*$"),
)
_HEADER_LINE = re.compile(
    r"^\*?(From|Von|De|Sent|Gesendet|Date|To|An|Subject|Betreff|Cc)\s*:\*?\s", re.I
)
_SIGNATURE = "-- "  # RFC 3676's signature separator line
# HTML elements that hold quoted history: taken out before the HTML becomes text.
_QUOTE_XPATH = (
    "//blockquote"
    "|//div[contains(concat(' ', normalize-space(@class), ' '), ' gmail_quote ')]"
    "|//div[@id='divRplyFwdMsg']|//div[@id='appendonsend']"
    "|//div[contains(concat(' ', normalize-space(@class), ' '), ' moz-cite-prefix ')]"
)


@dataclass(frozen=True)
class Attachment:
    """A file that came with a mail: the sender's name for it (never a path), its type
    and its bytes."""

    filename: str | None
    mime: str
    data: bytes


@dataclass(frozen=True)
class Mail:
    """What a turn and the loop rules need of one inbound mail."""

    sender: str  # the From: address, lowercased ("" when there is none)
    sender_name: str  # its display name
    message_id: str | None  # with its angle brackets, as in the header
    in_reply_to: str | None
    references: tuple[str, ...]
    subject: str
    text: str  # the new text of the mail, quoted history trimmed
    headers: tuple[tuple[str, str], ...]  # every header, in order, as (name, value)
    attachments: tuple[Attachment, ...] = ()
    html_only: bool = False  # the text came from an HTML part
    to: tuple[str, ...] = field(default_factory=tuple)  # To: and Cc: addresses

    def header(self, name: str) -> str | None:
        """The first header called ``name`` (any case), or None."""
        wanted = name.lower()
        return next((v for k, v in self.headers if k.lower() == wanted), None)

    def has_header(self, name: str) -> bool:
        return self.header(name) is not None


def message_ids(value: str | None) -> tuple[str, ...]:
    """The ``<id>`` tokens of a Message-ID, In-Reply-To or References header, in order."""
    return tuple(re.findall(r"<[^<>\s]{1,998}>", value or ""))


def html_to_text(html: str) -> str:
    """HTML mail as plain text, its quoted history (blockquotes, the quote blocks of
    Gmail, Outlook and Thunderbird) left out; layout (lists, tables) kept as text."""
    import lxml.html
    from inscriptis import Inscriptis
    from inscriptis.model.config import ParserConfig
    from lxml.etree import ParserError

    try:
        tree = lxml.html.fromstring(html)
    except (ParserError, ValueError):
        return ""
    for element in tree.xpath(_QUOTE_XPATH):
        element.drop_tree()
    return str(Inscriptis(tree, ParserConfig()).get_text())


def trim_quoted(text: str) -> str:
    """The new text of a mail: without the quoted message it answers (an attribution
    line and the ``>`` lines after it, an "Original Message" block, Outlook's header
    block), without a trailing quote, and without the signature after ``-- ``. Quotes
    answered between them (interleaved replies) are kept. ``text`` itself when trimming
    would leave nothing (a mail that is all quote, such as a forward)."""
    lines = text.replace("\r\n", "\n").split("\n")
    end = len(lines)
    for index, line in enumerate(lines):
        stripped = line.strip()
        if line.rstrip("\n") == _SIGNATURE or any(p.match(stripped) for p in _SEPARATORS):
            end = index
            break
        if _HEADER_LINE.match(stripped) and _outlook_block(lines, index):
            end = index
            break
        if _ATTRIBUTION.match(stripped) and _quote_follows(lines, index + 1):
            end = index
            break
        joined = f"{stripped} {lines[index + 1].strip()}" if index + 1 < len(lines) else ""
        if joined and _ATTRIBUTION.match(joined) and _quote_follows(lines, index + 2):
            end = index
            break
    kept = lines[:end]
    # a quote at the very end answers nothing after it (bottom-quoting)
    while kept and (not kept[-1].strip() or kept[-1].lstrip().startswith(">")):
        kept.pop()
    result = "\n".join(kept).strip()
    return result or text.strip()


def _quote_follows(lines: list[str], start: int) -> bool:
    """Whether a ``>`` line (or the end) comes next, past blank lines."""
    for line in lines[start:]:
        if line.strip():
            return line.lstrip().startswith(">")
    return True


def _outlook_block(lines: list[str], start: int) -> bool:
    """Whether ``lines[start]`` opens a block of three or more header lines (From:,
    Sent:, To:, Subject: ...), as clients put above a message they quote whole."""
    count = 0
    for line in lines[start : start + 6]:
        if _HEADER_LINE.match(line.strip()):
            count += 1
        elif line.strip():
            break
    return count >= 3


def _address(value: str | None) -> tuple[str, str]:
    name, address = email.utils.parseaddr(value or "")
    return name.strip(), address.strip().lower()


def _body_text(message: EmailMessage) -> tuple[str, bool]:
    """The mail's text: its text/plain part, else its text/html part reduced to text."""
    plain = message.get_body(preferencelist=("plain",))
    if plain is not None:
        content = _decoded(plain)
        if content.strip():
            return content, False
    html = message.get_body(preferencelist=("html",))
    if html is not None:
        return html_to_text(_decoded(html)), True
    return "", False


def _decoded(part: Message) -> str:
    """A text part's content; undecodable bytes replaced, not raised."""
    try:
        content = part.get_content()  # type: ignore[attr-defined]
    # ValueError: undecodable bytes (UnicodeError), or a NUL in the charset's name
    except (LookupError, ValueError, AssertionError):
        payload = part.get_payload(decode=True)
        content = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else ""
    return content if isinstance(content, str) else ""


def _attachments(message: EmailMessage) -> tuple[Attachment, ...]:
    """Files sent with the mail: parts marked as attachments, and inline files that no
    HTML part shows (an image a signature refers to by Content-ID is not one)."""
    found = []
    for part in message.walk():
        if part.is_multipart():
            continue
        disposition = part.get_content_disposition()
        filename = part.get_filename()
        if disposition == "attachment" or (
            disposition == "inline" and filename and part.get("Content-ID") is None
        ):
            payload = part.get_payload(decode=True)
            if isinstance(payload, bytes):
                found.append(Attachment(filename, part.get_content_type(), payload))
    return tuple(found)


def read_mail(raw: bytes) -> Mail:
    """``raw`` (a message as IMAP returns it) read into a Mail."""
    parsed = email.message_from_bytes(raw, policy=email.policy.default)
    assert isinstance(parsed, EmailMessage)  # the default policy's factory
    headers = _headers(parsed)
    name, sender = _address(_header(headers, "From"))
    text, html_only = _body_text(parsed)
    recipients = tuple(
        a.lower()
        for _, a in email.utils.getaddresses(
            [_header(headers, "To") or "", _header(headers, "Cc") or ""]
        )
        if a
    )
    ids = message_ids(_header(headers, "Message-ID"))
    replied = message_ids(_header(headers, "In-Reply-To"))
    return Mail(
        sender=sender,
        sender_name=name,
        message_id=ids[0] if ids else None,
        in_reply_to=replied[0] if replied else None,
        references=message_ids(_header(headers, "References")),
        subject=" ".join((_header(headers, "Subject") or "").split()),
        text=trim_quoted(text),
        headers=headers,
        attachments=_attachments(parsed),
        html_only=html_only,
        to=recipients,
    )


def _headers(message: EmailMessage) -> tuple[tuple[str, str], ...]:
    """Every header as (name, value), in order. The standard library's header parser
    raises on some malformed values (IndexError on ``Message-ID: <@>``, AttributeError,
    HeaderParseError): such a value is kept as it came, unfolded, its bytes that are not
    UTF-8 replaced."""
    found = []
    for name, raw in message.raw_items():
        try:
            value = _safe_str(message.policy.header_fetch_parse(name, raw))
        except (IndexError, AttributeError, ValueError, email.errors.MessageError):
            text = raw.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
            value = " ".join(text.split())
        found.append((name, value))
    return tuple(found)


def _header(headers: tuple[tuple[str, str], ...], name: str) -> str | None:
    """The first of ``headers`` called ``name`` (any case), or None."""
    wanted = name.lower()
    return next((v for k, v in headers if k.lower() == wanted), None)


def _safe_str(value: object) -> str:
    """A header's value as text (a malformed one as what could be read of it)."""
    try:
        return str(value)
    except (ValueError, LookupError, UnicodeError):
        return ""
