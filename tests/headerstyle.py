"""Mail header names the package looks up are spelled as the RFCs spell them, in mixed
case ("Auto-Submitted", "Return-Path"). The lookup (``Mail.header``) ignores case, so a
name in one case finds the same header; conftest.py watches every lookup during a test
and fails the test at its end on a name spelled all in lower or upper case."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


def misspelled(name: str) -> bool:
    """Whether ``name`` is all in one case, as no RFC spells a header name."""
    return name in (name.lower(), name.upper())


class HeaderWatch:
    """The header names looked up misspelled since the last ``take``."""

    problem = "mail header names not spelled as the RFCs spell them (tests/headerstyle.py)"

    def __init__(self) -> None:
        self.seen: list[str] = []

    def wrap(self, lookup: Callable[[Any, str], str | None]) -> Callable[[Any, str], str | None]:
        """``Mail.header`` with every name it is given watched."""

        @functools.wraps(lookup)
        def header(mail: Any, name: str) -> str | None:
            if misspelled(name):
                self.seen.append(name)
            return lookup(mail, name)

        return header

    def take(self) -> list[str]:
        seen, self.seen = self.seen, []
        return seen
