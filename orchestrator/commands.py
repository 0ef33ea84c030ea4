"""Chat commands the host answers itself (``/confirm``, ``/approve ID``), recognized
with the mentions chat apps put around them: ``/approve@helperbot 12``,
``@helperbot /confirm``, ``/confirm @helperbot``."""

from __future__ import annotations

import re
from dataclasses import dataclass

CONFIRM = "confirm"
APPROVE = "approve"
_NAME = re.compile(r"/([A-Za-z][A-Za-z0-9_]{0,31})(?:@[\w.\-]{1,64})?")
_MENTION = re.compile(r"@[^\s@]{1,255}[,:]?")
_ARGS_MAX = 8


@dataclass(frozen=True)
class Command:
    name: str  # lowercase, without the slash
    args: tuple[str, ...]


def parse_command(text: str) -> Command | None:
    """The command ``text`` is (mentions before and after it dropped, a bot suffix on
    the command dropped), or None when it is not one: text that merely contains a
    slash-word somewhere is not a command."""
    words = text.split()
    while words and _MENTION.fullmatch(words[0]):
        words.pop(0)
    while len(words) > 1 and _MENTION.fullmatch(words[-1]):
        words.pop()
    if not words or len(words) > 1 + _ARGS_MAX:
        return None
    match = _NAME.fullmatch(words[0])
    if match is None:
        return None
    return Command(match[1].lower(), tuple(words[1:]))
