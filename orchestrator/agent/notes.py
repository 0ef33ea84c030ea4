"""Daily-note lines: which lines of a flush are new facts, and how they are written.

A flush sends a block of lines for today's daily note. Before anything is written:

- each line is **normalized** (Unicode NFKC, case folded, bullets and numbering, the
  attribution a line was written with, punctuation and runs of whitespace taken off),
  and compared with every line today's and yesterday's notes already hold and with the
  lines before it in the same block;
- a line is a **duplicate** when its normalized text is the same, or when it is nearly
  the same (a similarity ratio of at least NEAR_DUPLICATE) and holds the same numbers:
  "at 4pm" and "at 5pm" are two facts, however alike the rest;
- **housekeeping is not a fact**: the flush's and compaction's own markers (a line
  starting with ``[memory flush]``, ``[compaction]``, ``[Summary of the earlier
  conversation]``), front matter, headings, and questions (a line ending in ``?``, a
  question addressed to the agent) are dropped;
- the lines kept are written up to the flush's cap in **whole lines**: what does not
  fit is left for the next flush, never refused whole.

Each line written carries where it came from: the senders of the conversation it was
flushed from (with their trust), the chat and the local time, after `` — ``.

A fresh context is given today's and yesterday's lines (``recent_notes``), scoped to the
conversation: the lines said in its chat, and those only creators said anywhere.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from difflib import SequenceMatcher
from pathlib import Path

NEAR_DUPLICATE = 0.88  # the similarity ratio from which two lines are one fact
ATTRIBUTION = " — "  # between a line's text and where it came from
HOUSEKEEPING = ("[memory flush]", "[compaction]", "[summary of the earlier conversation]")
_BULLET = re.compile(r"^\s*(?:[-*+•·]|\d{1,3}[.)])\s+")
_NUMBERS = re.compile(r"\d+")
_SPACE = re.compile(r"\s+")


def normalize(line: str) -> str:
    """The text a line is compared by (see the module's docstring)."""
    text = unicodedata.normalize("NFKC", line)
    text = text.split(ATTRIBUTION, 1)[0]
    text = _BULLET.sub("", text).casefold()
    text = "".join(" " if unicodedata.category(c).startswith(("P", "S")) else c for c in text)
    return _SPACE.sub(" ", text).strip()


def is_fact(line: str) -> bool:
    """Whether ``line`` may be a fact at all (not blank, housekeeping, or a question)."""
    stripped = _BULLET.sub("", line.strip())
    if not stripped or not normalize(stripped):
        return False
    lowered = stripped.casefold()
    if lowered.startswith(HOUSEKEEPING) or stripped.startswith(("#", "---")):
        return False
    return (
        not stripped.split(ATTRIBUTION, 1)[0].rstrip().endswith(("?", "\uff1f"))
    )  # and the full-width one


def same_fact(a: str, b: str) -> bool:
    """Two normalized lines hold one fact (equal, or nearly and with the same numbers)."""
    if a == b:
        return True
    if _NUMBERS.findall(a) != _NUMBERS.findall(b):
        return False
    if min(len(a), len(b)) < 0.8 * max(len(a), len(b)):
        return False  # one says much more than the other
    return SequenceMatcher(None, a, b, autojunk=False).ratio() >= NEAR_DUPLICATE


@dataclass
class Sorted:
    """A flushed block, sorted: the lines to write, those left for the next flush (over
    the cap), and how many were dropped as duplicates or as no facts."""

    kept: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)
    duplicates: int = 0
    not_facts: int = 0


def sort_block(block: str, known: Iterable[str], room: int) -> Sorted:
    """Sort the lines of ``block`` against the ``known`` lines (today's and yesterday's
    notes), keeping at most ``room`` characters of new facts, in whole lines."""
    seen = [n for n in (normalize(k) for k in known if is_fact(k)) if n]
    out = Sorted()
    used = 0
    lines = block.replace("\r\n", "\n").split("\n")
    if lines and lines[0].strip() == "---" and "---" in (x.strip() for x in lines[1:]):
        end = next(i for i, x in enumerate(lines[1:], 1) if x.strip() == "---")
        out.not_facts += end + 1  # a note's front matter, replayed: not facts
        lines = lines[end + 1 :]
    for raw in lines:
        line = raw.rstrip()
        if not is_fact(line):
            out.not_facts += bool(line.strip())
            continue
        text = normalize(line)
        if any(same_fact(text, other) for other in seen):
            out.duplicates += 1
            continue
        seen.append(text)
        if out.left or used + len(line) + 1 > room:
            out.left.append(line)
            continue
        out.kept.append(line)
        used += len(line) + 1
    return out


def attributed(line: str, source: str) -> str:
    """``line`` as a bullet with where it came from (``source``) after it."""
    text = _BULLET.sub("", line.strip()).split(ATTRIBUTION, 1)[0].rstrip()
    return f"- {text}{ATTRIBUTION}{source}" if source else f"- {text}"


def describe_source(senders: Sequence[tuple[str, str]], chat: str, when: str) -> str:
    """``alice (creator), bob (member); chat c; 14:05``: who said what a flush kept (each
    sender once, in the order they spoke), in which chat, at what local time."""
    who = ", ".join(f"{s} ({t})" for s, t in dict.fromkeys(senders)) or "unknown"
    return f"{who}; chat {chat}; {when}"


RECENT_HEADER = "## Recent notes (today's and yesterday's daily notes)"
_TRUST = re.compile(r"\(([a-z]+)\)")


@dataclass(frozen=True)
class Recent:
    """The daily-note lines a fresh context is given: the block, and whether any line
    in it came from someone who is not a creator (others' words)."""

    block: str
    others_words: bool
    truncated: bool = False


def recent_notes(daily_dir: Path, today: date, chat: str, max_chars: int) -> Recent:
    """Today's and yesterday's lines for a fresh context in ``chat``, read from
    ``daily_dir`` (the runner's own folder; see ``recent_lines``)."""
    texts = []
    for day in (today - timedelta(days=1), today):
        path = daily_dir / f"{day:%Y-%m-%d}.md"
        try:
            if path.is_symlink() or not path.is_file():
                continue
            texts.append(path.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
    return recent_lines(texts, chat, max_chars)


def recent_lines(texts: Sequence[str], chat: str | None, max_chars: int) -> Recent:
    """The lines of ``texts`` (yesterday's and today's notes, oldest first) a fresh
    context in ``chat`` is given: those said in this chat, and those only creators said
    anywhere (``chat`` None: only those); the newest that fit ``max_chars``, with a
    notice naming what was left out. Lines without a source (written by hand or by an
    older release) are left to memory_search."""
    lines: list[tuple[str, bool]] = []
    for text in texts:
        for line in text.splitlines():
            if ATTRIBUTION not in line or not is_fact(line):
                continue
            source = line.split(ATTRIBUTION, 1)[1]
            parts = [p.strip() for p in source.split(";")]
            trusts = _TRUST.findall(parts[0]) if parts else []
            here = chat is not None and len(parts) > 1 and parts[1] == f"chat {chat}"
            creators_only = bool(trusts) and all(t == "creator" for t in trusts)
            if here or creators_only:
                lines.append((line, not creators_only))
    if not lines:
        return Recent("", False)
    kept: list[tuple[str, bool]] = []
    used = 0
    for line, others in reversed(lines):  # the newest first, to what fits
        if used + len(line) + 1 > max_chars:
            break
        kept.append((line, others))
        used += len(line) + 1
    kept.reverse()
    left = len(lines) - len(kept)
    notice = (
        f"\n[truncated: {left} older lines of the recent notes are not shown; "
        "memory_search finds them]"
        if left
        else ""
    )
    body = "\n".join(line for line, _ in kept)
    return Recent(f"{RECENT_HEADER}\n\n{body}{notice}", any(o for _, o in kept), left > 0)


def reported(texts: list[str]) -> tuple[int, bool]:
    """For the context report (``memory status``, the dashboard): the characters of the
    recent lines every chat's fresh context is given (creators' lines; each chat adds
    its own) and whether they were cut, at RECENT_NOTES_MAX_CHARS."""
    from orchestrator.limits import RECENT_NOTES_MAX_CHARS

    found = recent_lines(texts, None, RECENT_NOTES_MAX_CHARS)
    return len(found.block), found.truncated
