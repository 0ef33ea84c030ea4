"""Replies for chat apps: split at a length limit on paragraph boundaries, and Markdown
rendered as the small HTML subset Telegram accepts, with everything else escaped.

Lengths are counted in UTF-16 code units, as Telegram counts them (an emoji outside the
Basic Multilingual Plane is two).
"""

from __future__ import annotations

import html
import re

FENCE = "```"
FENCE_OPEN = re.compile(r"^\s*```([\w+-]*)\s*$")
FENCE_CLOSE = re.compile(r"^\s*```\s*$")
HEADING = re.compile(r"^#{1,6}\s+(.*)$")


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _hard_cut(text: str, limit: int) -> tuple[str, str]:
    """The longest head of ``text`` within ``limit`` UTF-16 units (never half a
    character), and the rest."""
    units = 0
    for index, char in enumerate(text):
        units += 2 if ord(char) > 0xFFFF else 1
        if units > limit:
            return text[:index], text[index:]
    return text, ""


def _cut(text: str, limit: int) -> tuple[str, str]:
    """A head of ``text`` within ``limit``, cut at the last paragraph break, else line
    break, else space that fits; a hard cut when there is none."""
    head, _ = _hard_cut(text, limit)
    if len(head) == len(text):
        return text, ""
    for separator in ("\n\n", "\n", " "):
        at = head.rfind(separator)
        if at > 0:
            return text[:at], text[at + len(separator) :]
    return head, text[len(head) :]


def split_message(text: str, limit: int) -> list[str]:
    """``text`` in pieces of at most ``limit`` UTF-16 units, cut on paragraph boundaries
    where it can be. A code fence cut in two is closed at the end of one piece and
    opened again at the start of the next, so each piece renders on its own."""
    if limit < 16:
        raise ValueError("limit must be at least 16")
    text = text.strip("\n")
    pieces: list[str] = []
    reopen = ""
    budget = limit - utf16_len(FENCE) - 1  # room to close a fence
    while text:
        text = reopen + text
        if utf16_len(text) <= limit:
            pieces.append(text)
            break
        head, rest = _cut(text, budget)
        # no progress (its only break is the reopened fence's own line), or a piece that
        # would be an empty code block (its last line opens a fence): cut within the line
        opens_last = head.count(FENCE) % 2 and "\n" not in head[head.rfind(FENCE) :]
        if len(head) <= len(reopen) or opens_last:
            head, rest = _hard_cut(text, budget)
        text = rest.lstrip("\n")
        if head.count(FENCE) % 2:
            language = re.findall(r"```([^\n`]*)", head)[-1]
            pieces.append(head + "\n" + FENCE)
            # a language kept short: the next piece has room past its fence
            reopen = FENCE + _hard_cut(language, budget // 4)[0] + "\n"
        else:
            pieces.append(head)
            reopen = ""
    return [p.rstrip() for p in pieces if p.strip()]


# Markdown's inline spans a reply may use (each app renders them in its own markup)
INLINE = re.compile(
    r"(?P<code>`[^`\n]+`)"
    r"|\[(?P<label>[^\]\n]+)\]\((?P<url>https?://[^\s)]+)\)"
    r"|\*\*(?P<bold>[^*\n]+?)\*\*"
    r"|__(?P<bold2>[^_\n]+?)__"
    r"|(?<![\w*])\*(?P<italic>[^*\s][^*\n]*?)\*(?![\w*])"
    r"|(?<![\w_])_(?P<italic2>[^_\s][^_\n]*?)_(?![\w_])"
    r"|~~(?P<strike>[^~\n]+?)~~"
)


def _inline(text: str) -> str:
    out: list[str] = []
    last = 0
    for match in INLINE.finditer(text):
        out.append(html.escape(text[last : match.start()], quote=False))
        last = match.end()
        if match["code"]:
            out.append(f"<code>{html.escape(match['code'][1:-1], quote=False)}</code>")
        elif match["url"]:
            out.append(f'<a href="{html.escape(match["url"])}">{_inline(match["label"])}</a>')
        elif match["bold"] or match["bold2"]:
            out.append(f"<b>{_inline(match['bold'] or match['bold2'])}</b>")
        elif match["italic"] or match["italic2"]:
            out.append(f"<i>{_inline(match['italic'] or match['italic2'])}</i>")
        else:
            out.append(f"<s>{_inline(match['strike'])}</s>")
    out.append(html.escape(text[last:], quote=False))
    return "".join(out)


def markdown_to_html(text: str) -> str:
    """Telegram HTML for common Markdown: fenced and inline code, bold, italic, strike,
    links and headings; any other character is escaped, so nothing the model writes
    can open a tag. An unclosed fence runs to the end."""
    out: list[str] = []
    lines = text.split("\n")
    index = 0
    while index < len(lines):
        line = lines[index]
        fence = FENCE_OPEN.match(line)
        if fence:
            body: list[str] = []
            index += 1
            while index < len(lines) and not FENCE_CLOSE.match(lines[index]):
                body.append(lines[index])
                index += 1
            index += 1  # the closing fence
            code = html.escape("\n".join(body), quote=False)
            language = fence[1]
            if language:
                out.append(f'<pre><code class="language-{language}">{code}</code></pre>')
            else:
                out.append(f"<pre>{code}</pre>")
            continue
        heading = HEADING.match(line)
        if heading:
            out.append(f"<b>{_inline(heading[1])}</b>")
        else:
            out.append(_inline(line))
        index += 1
    return "\n".join(out)
