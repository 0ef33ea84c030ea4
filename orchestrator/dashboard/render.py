"""What the dashboard shows that came from a container or a chat: memory files rendered
from Markdown with raw HTML escaped and only safe link schemes kept (markdown-it-py with
``html`` off validates every link and image URL), and the usage chart as SVG built from
numbers only."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from markdown_it import MarkdownIt

# what a browser skips at the start of a URL: C0 controls and the space
CONTROL_AND_SPACE = "".join(map(chr, range(0x21)))
_FRONT = re.compile(r"\A---\n(.*?)\n---\n?", re.DOTALL)


def _markdown() -> MarkdownIt:
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable("table")
    md.disable("image")  # no picture is fetched from anywhere a memory file names
    default_validate = md.validateLink

    def validate(url: str) -> bool:
        # markdown-it refuses javascript:, vbscript:, file: and data: (but for some
        # images); we keep only http(s), mailto and links inside the page or tree.
        # Browsers drop tabs and newlines from a URL and read a backslash as a slash, so
        # "//host", "/\\host" and "/\t/host" all leave the site: refused, as is
        # "https:host" (off-site from a page served over http).
        clean = re.sub(r"[\t\n\r]", "", url).lstrip(CONTROL_AND_SPACE)
        if re.match(r"[/\\]{2}", clean):
            return False
        scheme = re.match(r"([a-zA-Z][a-zA-Z0-9+.-]*):", clean)
        if scheme:
            name = scheme[1].lower()
            if name not in ("http", "https", "mailto"):
                return False
            if name != "mailto" and not re.match(r"[a-zA-Z]+://[^/\\]", clean):
                return False
        return bool(default_validate(url))

    md.validateLink = validate  # type: ignore[method-assign]
    return md


_MD: MarkdownIt | None = None


def render_markdown(text: str) -> tuple[str, str | None]:
    """(safe HTML of the body, the frontmatter as text or None). Raw HTML in the file is
    shown as text; a link or image with another scheme stays Markdown source."""
    global _MD
    if _MD is None:
        _MD = _markdown()
    front = None
    match = _FRONT.match(text)
    if match:
        front, text = match[1], text[match.end() :]
    rendered: str = _MD.render(text)
    return rendered, front


@dataclass(frozen=True)
class Bar:
    label: str
    value: float


def bar_chart(
    title: str, bars: list[Bar], *, width: int = 640, height: int = 180, digits: int = 0
) -> str:
    """An SVG bar chart: every piece of text in it escaped, every number computed here
    (values shown with ``digits`` decimals)."""
    top = max((b.value for b in bars), default=0) or 1
    slot = width / max(len(bars), 1)
    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height + 40}" role="img" '
        f'aria-label="{html.escape(title)}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{html.escape(title)}</title>",
    ]
    for index, bar in enumerate(bars):
        h = round(height * bar.value / top)
        x = round(index * slot + slot * 0.15)
        w = max(1, round(slot * 0.7))
        parts.append(
            f'<rect x="{x}" y="{height - h}" width="{w}" height="{h}">'
            f"<title>{html.escape(bar.label)}: {bar.value:,.{digits}f}</title></rect>"
        )
        parts.append(
            f'<text x="{x + w // 2}" y="{height + 14}" text-anchor="middle">'
            f"{html.escape(bar.label[-5:])}</text>"
        )
        parts.append(
            f'<text x="{x + w // 2}" y="{max(12, height - h - 4)}" text-anchor="middle">'
            f"{bar.value:,.{digits}f}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)
