"""Typed reading of a YAML mapping; errors name file, line, key, value and what is valid."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from orchestrator.errors import InvalidConfig

if TYPE_CHECKING:  # yaml is not imported by what only validates text (the runner's tools)
    from orchestrator.yamldoc import YamlDocument

_MISSING = object()
T = TypeVar("T")
_SURROGATE = re.compile("[\ud800-\udfff]")
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def text_problem(value: str, *, multiline: bool = False) -> str | None:
    """Why ``value`` is not acceptable text (a lone surrogate, a control character), or
    None. Tabs are fine, and newlines when ``multiline``."""
    if match := _SURROGATE.search(value):
        return f"is not valid Unicode (a lone surrogate at character {match.start() + 1})"
    for match in _CONTROL.finditer(value):
        if multiline and match.group() in "\n\r":
            continue
        return f"contains the control character U+{ord(match.group()):04X}"
    if not multiline and ("\n" in value or "\r" in value):
        return "contains a line break"
    return None


# What a file name may hold for the host to show it as it is: anything but lone
# surrogates (bytes that were not UTF-8, as Python keeps them), C0/C1 controls, and the
# marks that reorder text.
_NAME_UNSAFE = re.compile("[\ud800-\udfff\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _name_escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    return f"\\u{{{code:04x}}}"


NOT_UTF8 = re.compile("[\ud800-\udfff]")  # lone surrogates: bytes that were not UTF-8


def escape_not_utf8(text: str) -> str:
    """``text`` with the bytes that were not UTF-8 shown as ``\\xff`` (all else kept)."""
    return NOT_UTF8.sub(_name_escape, text) if NOT_UTF8.search(text) else text


def shown_name(name: str) -> str:
    """A file name (as the file system gave it) for people, logs and models: bytes that
    are not UTF-8 shown as ``\\xff``, control characters and bidirectional marks as
    ``\\u{...}``; always valid, printable UTF-8."""
    return _NAME_UNSAFE.sub(_name_escape, name)


# Characters that change how text is shown without being seen (bidirectional overrides
# and isolates): content holding them is never held, since its notice would show other
# text than the one approved.
_HIDING = re.compile("[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]")


def hiding_problem(content: str) -> str | None:
    """Why ``content`` cannot be shown faithfully in a notice, or None."""
    match = _HIDING.search(content)
    if match is None:
        return None
    return (
        f"contains U+{ord(match.group()):04X} (a direction control) at character "
        f"{match.start() + 1}, which would show other text than the one approved"
    )


class Problems:
    """Collects InvalidConfig errors of independent keys, so a file reports all of them
    at once rather than one per attempt."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.hints: list[str] = []

    def check(self, read: Callable[[], T], default: T) -> T:
        """``read()``, or ``default`` after recording the InvalidConfig it raised."""
        try:
            return read()
        except InvalidConfig as exc:
            self.add(exc)
            return default

    def add(self, error: InvalidConfig) -> None:
        self.messages.append(error.message)
        if error.hint:
            self.hints.append(error.hint)

    def raise_if_any(self) -> None:
        if len(self.messages) == 1:
            raise InvalidConfig(self.messages[0], hint=self.hints[0] if self.hints else None)
        if self.messages:
            raise InvalidConfig(
                f"{len(self.messages)} problems: " + "; ".join(self.messages),
                hint=self.hints[0] if self.hints else None,
            )


class MappingReader:
    """Reads keys of one mapping inside a YamlDocument, at path ``prefix``."""

    def __init__(self, doc: YamlDocument, data: Any, prefix: tuple[str | int, ...] = ()) -> None:
        self.doc = doc
        self.prefix = prefix
        if data is None:
            data = {}
        if not isinstance(data, dict):
            where = self.doc.where(*prefix)
            what = self._dotted(prefix) or "the document"
            raise InvalidConfig(
                f"{where}: {what} must be a mapping of keys to values, got {_kind(data)}"
            )
        self.data: dict[Any, Any] = data

    def _dotted(self, keys: Iterable[str | int]) -> str:
        out = ""
        for key in keys:
            out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else str(key))
        return out

    def fail(self, key: str, message: str) -> InvalidConfig:
        path = (*self.prefix, key)
        return InvalidConfig(f"{self.doc.where(*path)}: {self._dotted(path)}: {message}")

    def fail_here(self, message: str) -> InvalidConfig:
        """An error about this mapping as a whole (named by its own key and line)."""
        return InvalidConfig(
            f"{self.doc.where(*self.prefix)}: {self._dotted(self.prefix)}: {message}"
        )

    def reject_unknown(self, allowed: Iterable[str]) -> None:
        allowed = sorted(allowed)
        unknown = [k for k in self.data if k not in allowed]
        if unknown:
            # a key YAML read as another type (a number, a date) is named as it is written
            others = f" (and {', '.join(map(str, unknown[1:]))})" if unknown[1:] else ""
            raise self.fail(
                str(unknown[0]), f"unknown key{others}; valid keys here: {', '.join(allowed)}"
            )

    def raw(self, key: str, default: Any = _MISSING) -> Any:
        if key not in self.data or self.data[key] is None:
            if default is _MISSING:
                raise self.fail(key, "is required")
            return default
        return self.data[key]

    def text(
        self, key: str, default: Any = _MISSING, *, max_chars: int = 200, pattern: str = ""
    ) -> str:
        value = self.raw(key, default)
        if isinstance(value, bool):
            raise self.fail(
                key,
                f"must be a non-empty string, got {_show(value)} (YAML reads an unquoted yes, "
                "no, on, off, true or false as true or false: put the value in quotes)",
            )
        if not isinstance(value, str) or not value.strip():
            raise self.fail(key, f"must be a non-empty string, got {_show(value)}")
        if len(value) > max_chars:
            raise self.fail(key, f"is {len(value)} characters; at most {max_chars} allowed")
        if problem := text_problem(value):
            raise self.fail(key, problem)
        if pattern and not re.fullmatch(pattern, value):
            raise self.fail(key, f"{value!r} does not match {pattern}")
        return value

    def choice(self, key: str, options: tuple[str, ...], default: str) -> str:
        value = self.raw(key, default)
        if value not in options:
            raise self.fail(key, f"got {_show(value)}; valid values: {', '.join(options)}")
        return str(value)

    def whole_number(
        self, key: str, default: Any, minimum: int, maximum: int | None, valid: str
    ) -> int:
        """An int within [minimum, maximum]; ``valid`` says what is accepted."""
        value = self.raw(key, default)
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or value < minimum
            or (maximum is not None and value > maximum)
        ):
            raise self.fail(key, f"got {value!r}; expected {valid}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self.raw(key, default)
        if not isinstance(value, bool):
            raise self.fail(key, f"must be true or false, got {_show(value)}")
        return value

    def id_list(self, key: str, *, max_chars: int) -> tuple[str, ...]:
        value = self.raw(key, [])
        if not isinstance(value, list):
            raise self.fail(key, f"must be a list of ids, got {_show(value)}")
        out: list[str] = []
        for index, item in enumerate(value):
            if isinstance(item, bool) or not isinstance(item, str | int):
                raise self.child_fail(key, index, f"must be a string id, got {_show(item)}")
            text = str(item).strip()
            if not text or len(text) > max_chars:
                raise self.child_fail(
                    key, index, f"must be 1..{max_chars} characters, got {_show(item)}"
                )
            if problem := text_problem(text):
                raise self.child_fail(key, index, problem)
            out.append(text)
        return tuple(out)

    def child_fail(self, key: str, index: int, message: str) -> InvalidConfig:
        path = (*self.prefix, key, index)
        return InvalidConfig(f"{self.doc.where(*path)}: {self._dotted(path)}: {message}")

    def child(self, key: str) -> MappingReader:
        return MappingReader(self.doc, self.data.get(key), (*self.prefix, key))

    def file_version(self, supported: int) -> int:
        """The document's ``version`` key: 1 when absent (written before versions);
        InvalidConfig when it is not a whole number from 1, FileTooNew (naming the file)
        when a newer release wrote it. Checked before any other key, since a newer
        release's keys are not this one's to judge."""
        from orchestrator.versions import file_version, too_new

        if "version" not in self.data:
            return 1
        found = file_version(self.data["version"])
        if found is None:
            raise self.fail(
                "version",
                f"got {_show(self.data['version'])}; expected a whole number from 1 "
                f"(this release writes {supported})",
            )
        if found > supported:
            raise too_new(str(self.doc.path), found, supported)
        return found


def _kind(value: Any) -> str:
    return {list: "a list", str: "a string", int: "a number", float: "a number"}.get(
        type(value), type(value).__name__
    )


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
