"""Secrets never reach a log line or a stored error.

Every token the daemon loads (chat-app bot tokens, HTTP tokens, provider keys) is
registered here; ``redact`` replaces each with ``[redacted]`` (or another marker when a
secret could be made again from that one and the text beside it, see ``mask``), and
``RedactingFilter`` does that to every log record (its message, its arguments and its
traceback) before a handler writes it. HTTP client libraries log request URLs, and
Telegram's URLs hold the bot token: their loggers are also kept at WARNING
(``quiet_clients``).
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Iterable

REDACTED = "[redacted]"
_MIN_SECRET_CHARS = 8  # shorter strings would redact ordinary words
_lock = threading.Lock()
_secrets: frozenset[str] = frozenset()
# HTTP client libraries any part of the daemon may use; each chat-app kind names its own
CLIENT_LOGGERS = ("httpx", "httpcore", "hpack", "urllib3", "aiohttp.client")


def register_secret(value: str | None) -> None:
    global _secrets
    if value and len(value) >= _MIN_SECRET_CHARS and value not in _secrets:
        with _lock:
            _secrets = _secrets | {value}


def mask(text: str, values: Iterable[str], word: str) -> str:
    """``text`` with each of ``values`` in it (the longest first) replaced by a marker,
    ``[word]``, such that none of them is left: a marker's brackets could join the text
    around it into a value again when the value holds one, and a value could lie inside
    ``word``, so then the first pair of brackets no value holds is taken (``<word>``,
    ``{word}``, ``(word)``), or, past those, a character none holds, three times."""
    given = {value for value in values if value}
    found = sorted((value for value in given if value in text), key=len, reverse=True)
    if not found:
        return text
    # the marker is chosen against every value given, not only those found: one that is
    # not in the text could be made by the marker and its neighbours
    marker = None
    for opening, closing in ("[]", "<>", "{}", "()"):
        candidate = f"{opening}{word}{closing}"
        if not any(opening in v or closing in v or v in candidate for v in given):
            marker = candidate
            break
    if marker is None:
        free = next(c for c in map(chr, itertools.count(0x2591)) if all(c not in v for v in given))
        marker = free * 3
    for value in found:
        text = text.replace(value, marker)
    return text


def redact(text: str) -> str:
    """``text`` with every registered secret replaced (``[redacted]``, see ``mask``)."""
    return mask(text, _secrets, REDACTED[1:-1])


class RedactingFilter(logging.Filter):
    """Formats the record's message once, with every known secret replaced."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not _secrets:
            return True
        message = record.getMessage()
        clean = redact(message)
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if clean != message or record.args:
            record.msg, record.args = clean, None
        return True


def quiet_clients(extra: tuple[str, ...] = ()) -> None:
    """HTTP client libraries log request URLs at INFO and DEBUG; a URL may hold a token.
    ``extra``: more such loggers (those the chat-app kinds name)."""
    for name in (*CLIENT_LOGGERS, *extra):
        logging.getLogger(name).setLevel(logging.WARNING)
