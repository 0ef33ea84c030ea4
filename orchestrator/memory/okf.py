"""Open Knowledge Format (OKF v0.1) primitives shared by host and container code.

Kept free of heavy imports: the in-container memory hook and the host lint both use it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

OKF_VERSION = "0.1"
RESERVED_NAMES = frozenset({"index.md", "log.md"})
# Daily notes (memory/daily/YYYY-MM-DD.md): a working layer reached by date, not by links.
DAILY_DIR = "daily"
_OPEN_RE = re.compile(r"\A\ufeff?---[ \t]*\r?\n")
_CLOSE_RE = re.compile(r"^(?:---|\.\.\.)[ \t]*\r?$\n?", re.MULTILINE)


@dataclass(frozen=True)
class Frontmatter:
    """The frontmatter block of a Markdown file, as found.

    ``status`` is "none" (no block), "ok" (a YAML mapping, possibly empty) or
    "invalid" (a block that is not a YAML mapping; ``error`` says why).
    """

    status: str
    data: dict[str, Any] | None
    raw: str
    block_end: int  # offset in the text where the body starts
    raw_start: int = 0
    error: str | None = None


def split_frontmatter(text: str) -> Frontmatter:
    """Find and parse a leading ``---`` YAML block; never raises."""
    opening = _OPEN_RE.match(text)
    if not opening:
        return Frontmatter("none", None, "", 0)
    closing = _CLOSE_RE.search(text, opening.end())
    if not closing:
        return Frontmatter(
            "invalid",
            None,
            text[opening.end() :],
            len(text),
            opening.end(),
            "the opening '---' has no closing '---' line",
        )
    raw = text[opening.end() : closing.start()]
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        data = yaml.load(raw, Loader=loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (frontmatter line {mark.line + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return Frontmatter("invalid", None, raw, closing.end(), opening.end(), f"{problem}{where}")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return Frontmatter(
            "invalid",
            None,
            raw,
            closing.end(),
            opening.end(),
            f"frontmatter is a YAML {type(data).__name__}, not a mapping",
        )
    return Frontmatter("ok", data, raw, closing.end(), opening.end())


def concept_type(frontmatter: Frontmatter) -> str | None:
    """The non-empty string ``type`` of a concept file, or None."""
    if frontmatter.data is None:
        return None
    value = frontmatter.data.get("type")
    return value.strip() if isinstance(value, str) and value.strip() else None
