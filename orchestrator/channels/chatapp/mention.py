"""The bot's mention taken off the front of what a person said, so the turn gets the
question: "@helperbot what do you know about my cat?" -> "what do you know about my
cat?", "/clear@helperbot" -> "/clear", "Helper: hi" -> "hi" (a Matrix pill shows the
display name)."""

from __future__ import annotations

import re
from collections.abc import Iterable

_COMMAND = re.compile(r"/([A-Za-z][A-Za-z0-9_]{0,31})@([\w.\-]{1,64})(?=\s|$)")
_AFTER = re.compile(r"[,:]?\s*")


def _drop_leading(text: str, forms: Iterable[str]) -> str:
    for form in sorted({f for f in forms if f}, key=len, reverse=True):
        head = text[: len(form)]
        if head.casefold() != form.casefold():
            continue
        rest = text[len(form) :]
        if rest and (rest[0].isalnum() or rest[0] in "_-."):
            continue  # a longer name that starts like the bot's ("@helperbot2")
        after = _AFTER.match(rest)
        return rest[after.end() if after else 0 :]
    return text


def strip_mention(text: str, forms: Iterable[str]) -> str:
    """``text`` without a leading mention of the bot (any of ``forms``, any case,
    followed by nothing, a space, ',' or ':') and without the bot's name on a leading
    command; ``text`` unchanged when nothing would be left."""
    forms = tuple(forms)
    handles = {f.lstrip("@").casefold() for f in forms if f}
    body = text.lstrip()
    body = _drop_leading(body, forms)
    command = _COMMAND.match(body)
    if command and command[2].casefold() in handles:
        body = f"/{command[1]}{body[command.end() :]}"
    return body if body.strip() else text
