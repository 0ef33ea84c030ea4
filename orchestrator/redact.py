"""Secrets never reach a log line or a stored error.

Every token the daemon loads (chat-app bot tokens, HTTP tokens, provider keys) is
registered here; ``redact`` replaces each with ``[redacted]``, and ``RedactingFilter``
does that to every log record (its message, its arguments and its traceback) before a
handler writes it. HTTP client libraries log request URLs, and Telegram's URLs hold the
bot token: their loggers are also kept at WARNING (``quiet_clients``).
"""

from __future__ import annotations

import logging
import threading

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


def redact(text: str) -> str:
    for secret in sorted(_secrets, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


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
