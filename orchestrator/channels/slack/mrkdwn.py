"""Slack's text, both ways.

Out: the model's Markdown as Slack's mrkdwn (bold, italic, strike, code, code blocks,
links, headings as bold, list bullets), with every other ``&``, ``<`` and ``>`` escaped
as Slack asks, so nothing the model writes becomes a link, a user mention or an
``@channel`` (those are written ``<...>`` and nothing else); split into pieces of at most
``SLACK_TEXT_MAX`` characters of mrkdwn.

In: what Slack sends (``<@U123>``, ``<#C123|general>``, ``<!here>``,
``<https://x|label>`` and the three escaped characters) as plain text for the turn.
"""

from __future__ import annotations

import re

from orchestrator.channels.textfmt import (
    FENCE_CLOSE,
    FENCE_OPEN,
    HEADING,
    INLINE,
    split_message,
)
from orchestrator.limits import SLACK_TEXT_MAX

_BULLET = re.compile(r"^(\s*)[-*+]\s+")
_ANGLE = re.compile(r"<([^<>\n]*)>")


def escape(text: str) -> str:
    """The three characters Slack reads as control sequences, escaped."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _inline(text: str) -> str:
    out: list[str] = []
    last = 0
    for match in INLINE.finditer(text):
        out.append(escape(text[last : match.start()]))
        last = match.end()
        if match["code"]:
            out.append(f"`{escape(match['code'][1:-1])}`")
        elif match["url"]:
            label = escape(match["label"]).replace("|", "\u2758")  # '|' ends a link's url
            out.append(f"<{escape(match['url'])}|{label}>")
        elif match["bold"] or match["bold2"]:
            out.append(f"*{_inline(match['bold'] or match['bold2'])}*")
        elif match["italic"] or match["italic2"]:
            out.append(f"_{_inline(match['italic'] or match['italic2'])}_")
        else:
            out.append(f"~{_inline(match['strike'])}~")
    out.append(escape(text[last:]))
    return "".join(out)


def markdown_to_mrkdwn(text: str) -> str:
    """Slack mrkdwn for common Markdown: fenced and inline code, bold, italic, strike,
    links, headings (bold) and bullets; ``&``, ``<`` and ``>`` escaped everywhere else.
    An unclosed fence runs to the end."""
    out: list[str] = []
    lines = text.split("\n")
    index = 0
    while index < len(lines):
        line = lines[index]
        if FENCE_OPEN.match(line):
            body: list[str] = []
            index += 1
            while index < len(lines) and not FENCE_CLOSE.match(lines[index]):
                body.append(lines[index])
                index += 1
            index += 1  # the closing fence
            out.append("```\n" + escape("\n".join(body)) + "\n```")
            continue
        heading = HEADING.match(line)
        if heading:
            out.append(f"*{_inline(heading[1])}*")
        else:
            bullet = _BULLET.match(line)
            if bullet:
                line = f"{bullet[1]}\u2022 {line[bullet.end() :]}"
            out.append(_inline(line))
        index += 1
    return "\n".join(out)


# the smallest limit every text can be cut to: split_message's smallest piece (16
# characters), each of them escaped to the longest escape (& as &amp;, 5 characters)
MRKDWN_LIMIT_MIN = 16 * 5


def mrkdwn_pieces(text: str, limit: int = SLACK_TEXT_MAX, cut: int | None = None) -> list[str]:
    """``text`` rendered as mrkdwn in pieces of at most ``limit`` characters, cut on
    paragraph boundaries of the Markdown every ``cut`` characters (``limit`` at first; a
    piece whose escapes made it too long is cut smaller, down to 16 characters, which
    render to at most MRKDWN_LIMIT_MIN; a piece of 16 still too long is a ValueError)."""
    size = cut or limit
    pieces: list[str] = []
    for piece in split_message(text, size):
        rendered = markdown_to_mrkdwn(piece)
        if len(rendered) <= limit:
            pieces.append(rendered)
        elif size <= 16:
            raise ValueError(
                f"{piece!r} renders to {len(rendered)} characters, over the limit of {limit}; "
                f"a limit of at least {MRKDWN_LIMIT_MIN} fits any text"
            )
        else:
            pieces.extend(mrkdwn_pieces(piece, limit, max(16, size * 2 // 3)))
    return pieces


def _angle(match: re.Match[str]) -> str:
    inner = match[1]
    target, _, label = inner.partition("|")
    if target.startswith("@"):  # a user: <@U123> or <@U123|name>
        return f"@{label or target[1:]}"
    if target.startswith("#"):  # a channel: <#C123|general>
        return f"#{label or target[1:]}"
    if target.startswith("!"):  # <!here>, <!subteam^S1|@team>, <!date^...|fallback>
        return label or f"@{target[1:].split('^')[0]}"
    return f"{label} ({target})" if label and label != target else target


def slack_to_text(text: str) -> str:
    """What a person wrote in Slack as plain text: mentions as ``@U123``, channels as
    ``#name``, links as ``label (url)``, and the escaped characters as themselves."""
    plain = _ANGLE.sub(_angle, text)
    return plain.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
