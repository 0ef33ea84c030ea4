"""Redaction of registered secrets, and the secrets the host reads (precise cases)."""

from __future__ import annotations

import logging
import sys

import pytest

from orchestrator import redact as redact_module
from orchestrator.redact import (
    CLIENT_LOGGERS,
    REDACTED,
    RedactingFilter,
    quiet_clients,
    redact,
    register_secret,
)


def test_a_secret_needs_eight_characters_and_empty_values_are_ignored() -> None:
    register_secret(None)
    register_secret("")
    register_secret("seven77")
    register_secret("eight888")
    assert redact("seven77 eight888") == f"seven77 {REDACTED}"
    assert "seven77" not in redact_module._secrets and "" not in redact_module._secrets


def test_the_longest_secret_is_replaced_first() -> None:
    register_secret("prefix-secret-1")
    register_secret("prefix-secret-1-and-more")
    assert redact("a prefix-secret-1-and-more b") == f"a {REDACTED} b"
    assert redact("x prefix-secret-1 y") == f"x {REDACTED} y"


def _record(msg: object, args: tuple[object, ...] | None) -> logging.LogRecord:
    return logging.LogRecord("n", logging.INFO, "f", 1, msg, args, None)


def test_the_filter_without_secrets_leaves_the_record_as_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(redact_module, "_secrets", frozenset())
    record = _record("value %s", ("x",))
    assert RedactingFilter().filter(record) is True
    assert (record.msg, record.args, record.exc_text) == ("value %s", ("x",), None)


def test_the_filter_formats_once_and_keeps_a_message_without_arguments() -> None:
    register_secret("filter-secret-value")
    record = _record("calling %s now", ("/bot-filter-secret-value/x",))
    assert RedactingFilter().filter(record) is True
    assert (record.msg, record.args) == (f"calling /bot-{REDACTED}/x now", None)
    assert record.getMessage() == f"calling /bot-{REDACTED}/x now"
    # nothing to replace and no arguments: the message object stays as it was
    plain = _record(12345, None)
    assert RedactingFilter().filter(plain) is True
    assert plain.msg == 12345 and plain.args is None
    # a secret in a message without arguments is replaced too
    inline = _record("token filter-secret-value here", None)
    RedactingFilter().filter(inline)
    assert inline.msg == f"token {REDACTED} here"


def test_the_filter_redacts_a_traceback_formatted_or_given() -> None:
    register_secret("trace-secret-value")
    try:
        raise RuntimeError("failed at trace-secret-value")
    except RuntimeError:
        info = sys.exc_info()
    record = _record("boom", None)
    record.exc_info = info
    RedactingFilter().filter(record)
    assert record.exc_text is not None
    assert "Traceback" in record.exc_text and f"failed at {REDACTED}" in record.exc_text
    given = _record("boom", None)
    given.exc_text = "already formatted: trace-secret-value"
    RedactingFilter().filter(given)
    assert given.exc_text == f"already formatted: {REDACTED}"


def test_quiet_clients_sets_the_client_loggers_and_the_extra_ones_to_warning() -> None:
    names = (*CLIENT_LOGGERS, "test-redact-extra-client")
    for name in names:
        logging.getLogger(name).setLevel(logging.DEBUG)
    quiet_clients(("test-redact-extra-client",))
    assert [logging.getLogger(n).level for n in names] == [logging.WARNING] * len(names)
    assert set(CLIENT_LOGGERS) == {"httpx", "httpcore", "hpack", "urllib3", "aiohttp.client"}
