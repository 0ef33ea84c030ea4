"""Printing for the CLI: tables for people, JSON for machines."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import click

# C0 controls but tab and newline, DEL, C1 controls, the Unicode marks that reorder or
# hide text (bidirectional overrides and isolates, zero-width joiners aside), and lone
# surrogates (bytes of a file name that were not UTF-8).
_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u200e\u200f\ud800-\udfff]"
)


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if 0xDC80 <= ord(char) <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape)
        return f"\\x{ord(char) - 0xDC00:02x}"
    return {"\r": "\\r", "\x1b": "\\e"}.get(char, f"\\u{{{ord(char):04x}}}")


def safe_text(text: str) -> str:
    """Text from a container (a reply), made harmless for a terminal: escape sequences
    (window titles, clipboard writes, cursor moves) and bidi overrides are shown escaped;
    newlines and tabs are kept."""
    return _UNSAFE.sub(_escape, text)


def safe_line(text: object) -> str:
    """As safe_text, for a one-line field (an error in a table): newlines escaped too, so
    text cannot forge a line of its own."""
    return safe_text(str(text)).replace("\n", "\\n").replace("\t", "\\t")


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(c) for c in headers], *[[safe_line(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for index, row in enumerate(cells):
        line = "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        click.echo(click.style(line, bold=True) if index == 0 else line)


def print_error(message: object, hint: object = None) -> None:
    """``error: ...`` and ``hint: ...`` on stderr, each one line whatever they contain."""
    click.echo(f"error: {safe_line(message)}", err=True)
    if hint:
        click.echo(f"hint: {safe_line(hint)}", err=True)
