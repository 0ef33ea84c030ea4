"""Redaction of registered secrets, and the secrets the host reads (precise cases)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from orchestrator import redact as redact_module
from orchestrator.redact import (
    CLIENT_LOGGERS,
    REDACTED,
    RedactingFilter,
    mask,
    quiet_clients,
    redact,
    register_secret,
)
from orchestrator.validate import MappingReader


def test_a_secret_needs_eight_characters_and_empty_values_are_ignored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(redact_module, "_secrets", frozenset())
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
    # by length, not by letters: "bbbbbbbb" sorts after "aaaaaaaa-bbbbbbbb" but is shorter
    register_secret("bbbbbbbb")
    register_secret("aaaaaaaa-bbbbbbbb")
    assert redact("aaaaaaaa-bbbbbbbb") == REDACTED


def test_mask_replaces_each_value_with_the_word_in_square_brackets() -> None:
    assert mask("a secret-one and secret-two", ["secret-one", "secret-two"], "x") == (
        "a [x] and [x]"
    )
    assert mask("nothing here", ["secret-one"], "x") == "nothing here"
    assert mask("an empty value", ["", "absent"], "x") == "an empty value"


def test_mask_takes_the_longest_value_first() -> None:
    assert mask("abcdefgh-more", ["abcdefgh", "abcdefgh-more"], "x") == "[x]"
    # the same value twice, or a value that is not in the text, changes nothing
    assert mask("k abcdefgh k", ["abcdefgh", "abcdefgh", "zzzzzzzzz"], "x") == "k [x] k"


def test_mask_leaves_no_value_that_a_marker_joins_again() -> None:
    # with "[key]", "[k" + "[key]" + "abcdefgh" would hold "ey]abcdefgh" again
    value = "ey]abcdefgh"
    assert mask(f"[k{value}abcdefgh", [value], "key") == "[k<key>abcdefgh"
    # a value that ends as the marker begins: "[ke" + "[key]" would hold "zzzz[ke"
    assert mask("zzzz[kezzzz[ke", ["zzzz[ke"], "key") == "<key><key>"
    # brackets of every pair but the last
    assert mask("v = a[]<>{}b", ["a[]<>{}b"], "key") == "v = (key)"
    assert mask("v = a[]<>b", ["a[]<>b"], "key") == "v = {key}"
    # a closing bracket alone rules its pair out
    assert mask("v = a)>}]b", ["a)>}]b", "a)>}"], "key") == "v = ░░░"


def test_mask_takes_a_character_no_value_holds_past_every_pair() -> None:
    value = "a[]<>{}()b"
    assert mask(f"x {value} y", [value], "key") == "x ░░░ y"
    taken = "a[]<>{}()░▒b"
    assert mask(f"x {taken} y", [taken], "key") == "x ▓▓▓ y"
    # a second value that holds the character rules it out too
    assert mask("p a[]<>{}()b q ░b[]<>{}()", [value, "░b[]<>{}()"], "key") == "p ▒▒▒ q ▒▒▒"


def test_mask_never_leaves_a_value_that_lies_inside_the_word() -> None:
    assert mask("it was redacted", ["redacted"], "redacted") == "it was ░░░"
    assert mask("it was redact", ["redact"], "redacted") == "it was ░░░"
    # a value the word does not hold keeps the square brackets
    assert mask("it was redacts", ["redacts"], "redacted") == "it was [redacted]"


def test_mask_chooses_the_marker_against_values_not_in_the_text_too() -> None:
    # a value the text does not hold could be made by the marker, or by it and its
    # neighbours
    assert mask("SECRET", ["SECRET", "key"], "key") == "░░░"
    assert mask("SECRETx", ["SECRET", "[key]x"], "key") == "<key>x"
    assert mask("x", ["x", "░░░"], "[]<>{}()x") == "▒▒▒"
    assert mask("no value here", ["[key]x"], "key") == "no value here"


def test_redact_never_leaves_a_secret_that_reads_as_the_marker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(redact_module, "_secrets", frozenset())
    register_secret("redacted")
    assert redact("the word redacted") == "the word ░░░"
    monkeypatch.setattr(redact_module, "_secrets", frozenset())
    register_secret("dacted]-tail")
    assert redact("[re" + "dacted]-tail") == "[re<redacted>"
    # a secret the text does not hold still rules a marker out
    monkeypatch.setattr(redact_module, "_secrets", frozenset())
    register_secret("password1")
    register_secret("redacted")
    assert redact("pw=password1") == "pw=░░░"
    monkeypatch.setattr(redact_module, "_secrets", frozenset())
    register_secret("SECRET-TOKEN")
    register_secret("ed]-suffix")
    assert redact("[redactSECRET-TOKEN-suffix") == "[redact<redacted>-suffix"


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
    assert plain.msg == 12345 and plain.args is None and plain.exc_text is None
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


# secrets


def _reader(text: str) -> MappingReader:
    from orchestrator.validate import MappingReader
    from orchestrator.yamldoc import parse_yaml_text

    doc = parse_yaml_text(text, Path("x.yaml"))
    return MappingReader(doc, doc.data)


def test_a_reference_names_an_environment_variable_or_a_secret_not_both() -> None:
    from orchestrator.errors import InvalidConfig
    from orchestrator.secrets import SecretRef, parse_secret_ref

    ref = parse_secret_ref(_reader("key_env: MY_KEY\n"), "key_env", "key_secret", required=True)
    assert ref == SecretRef("MY_KEY", None, "key_env", "key_secret")
    assert (ref.given, ref.describe()) == (True, "env MY_KEY")
    ref = parse_secret_ref(_reader("tok_secret: tg-1\n"), "tok_env", "tok_secret", required=True)
    assert ref == SecretRef(None, "tg-1", "tok_env", "tok_secret")
    assert (ref.given, ref.describe()) == (True, "secret tg-1")
    ref = parse_secret_ref(_reader("other: 1\n"), "key_env", "key_secret", required=False)
    assert ref == SecretRef(None, None, "key_env", "key_secret")
    assert (ref.given, ref.describe()) == (False, "no key")
    with pytest.raises(InvalidConfig, match=r"key_secret: give key_env or key_secret, not both"):
        parse_secret_ref(
            _reader("key_env: A\nkey_secret: b\n"), "key_env", "key_secret", required=False
        )
    with pytest.raises(InvalidConfig, match=r"key_env: give key_env or key_secret \(one of them\)"):
        parse_secret_ref(_reader("other: 1\n"), "key_env", "key_secret", required=True)
    with pytest.raises(InvalidConfig, match="does not match"):
        parse_secret_ref(_reader("key_env: 1BAD\n"), "key_env", "key_secret", required=True)
    with pytest.raises(InvalidConfig, match="does not match"):
        parse_secret_ref(_reader("key_secret: Upper\n"), "key_env", "key_secret", required=True)


@pytest.fixture
def secrets_file(tmp_path: Path) -> Path:
    """A private secrets file naming one key: a, one-value."""
    path = tmp_path / "secrets.yaml"
    path.write_text("a: one-value\n")
    path.chmod(0o600)
    return path


def test_the_environment_wins_and_an_empty_variable_is_missing(
    secrets_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.secrets import MissingSecret, SecretRef

    secrets = secrets_file
    monkeypatch.setattr(redact_module, "_secrets", frozenset())
    monkeypatch.setenv("TEST_REDACT_KEY", "from-the-env-1")
    ref = SecretRef("TEST_REDACT_KEY", "a")
    assert redact("key from-the-env-1") == "key from-the-env-1"
    assert ref.resolve("p", secrets) == "from-the-env-1"
    assert redact("key from-the-env-1") == f"key {REDACTED}"  # registered once read
    assert redact("key one-value") == "key one-value"
    assert SecretRef(None, "a").resolve("p", secrets) == "one-value"
    assert redact("key one-value") == f"key {REDACTED}"
    assert ref.describe() == "env TEST_REDACT_KEY"
    monkeypatch.setenv("TEST_REDACT_KEY", "")
    with pytest.raises(MissingSecret) as caught:
        ref.resolve("provider p", secrets)
    assert caught.value.message == "provider p: environment variable TEST_REDACT_KEY is not set"
    assert caught.value.hint == "export TEST_REDACT_KEY=... for the daemon, or use key_secret"
    assert SecretRef().resolve("p", secrets) is None
    with pytest.raises(MissingSecret) as caught:
        SecretRef(None, "a").resolve("provider p", None)
    assert caught.value.message == "provider p names secret 'a' but no secrets_file is configured"
    assert caught.value.hint == "set secrets_file in orchestrator.yaml"
    secrets.write_text("a: ''\n")
    with pytest.raises(MissingSecret, match="has no entry 'a'"):
        SecretRef(None, "a").resolve("p", secrets)
    with pytest.raises(MissingSecret, match=r"^p names neither key_env nor key_secret$"):
        SecretRef().require("p", secrets)
    secrets.write_text("a: one-value\n")
    assert SecretRef(None, "a").require("p", secrets) == "one-value"
    with pytest.raises(MissingSecret, match=r"^provider q: environment variable TEST_REDACT_KEY"):
        SecretRef("TEST_REDACT_KEY").require("provider q", secrets)


def test_the_secrets_file_must_be_a_private_regular_mapping_of_text(secrets_file: Path) -> None:
    from orchestrator.errors import BadInput
    from orchestrator.secrets import MissingSecret, read_secrets

    path = secrets_file
    for mode in (0o640, 0o604, 0o601, 0o610):
        path.chmod(mode)
        with pytest.raises(BadInput) as caught:
            read_secrets(path)
        assert caught.value.message == (
            f"secrets file {path} has mode {mode:04o}; others may read it"
        )
        assert caught.value.hint == f"chmod 600 {path}"
    path.chmod(0o400)
    assert read_secrets(path) == {"a": "one-value"}
    path.chmod(0o600)
    path.write_text("")
    assert read_secrets(path) == {}
    for bad in ("- a\n", "a: 1\n", "1: a\n"):
        path.write_text(bad)
        with pytest.raises(BadInput, match="must be a mapping of names to text keys"):
            read_secrets(path)
    path.unlink()
    with pytest.raises(MissingSecret, match=f"^secrets file {path} does not exist$"):
        read_secrets(path)
    path.mkdir()
    with pytest.raises(BadInput, match="is not a regular file"):
        read_secrets(path)


def test_the_secrets_file_is_parsed_again_only_when_its_bytes_change(
    secrets_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import yaml

    from orchestrator.secrets import read_secrets

    path = secrets_file
    calls: list[str] = []
    real = yaml.safe_load

    def counted(text: str) -> object:
        calls.append(text)
        return real(text)

    monkeypatch.setattr(yaml, "safe_load", counted)
    first = read_secrets(path)
    first["a"] = "changed by the caller"
    assert read_secrets(path) == {"a": "one-value"}  # the cache hands out copies
    assert len(calls) == 1
    path.write_text("a: two-value\n")
    assert read_secrets(path) == {"a": "two-value"} and len(calls) == 2
