"""sessions_search: recall from this group's conversations what was said but never saved.

The transcripts (``sessions/<key>/transcript.jsonl``, the runner's own store, which no
file tool reads) are searched with the memory index's own terms (orchestrator.memory
.terms: Chinese, Japanese and Korean by character pairs, English stemmed by FTS5's
porter tokenizer) in an SQLite FTS5 table made for the call in memory. Only the
conversations of this turn's sender are searched: the session the turn is in, and the
sessions in which the sender has said something themselves; never a chat they are not
in. Each transcript is read from its end, at most SESSIONS_SEARCH_READ_BYTES, and each
result is a bounded excerpt with its session, time and speaker. What comes back is
other people's words (anyone may have said it), which the host is told of: it holds a
creator's learned-behaviors write like any other words from others.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sqlite3
import stat
from datetime import UTC, datetime
from pathlib import Path

from orchestrator.agent.hostlink import HostRequestFailed
from orchestrator.agent.session import HEADER_READ_BYTES, check_header
from orchestrator.agent.tools.base import TURN, ToolError, ToolSpec, schema
from orchestrator.agent.tools.box import FunctionTool, StaticSource, Toolbox
from orchestrator.protocol import OTHERS_WORDS, SESSIONS_SOURCE
from orchestrator.versions import FileTooNew

log = logging.getLogger(__name__)

SESSIONS_SEARCH_READ_BYTES = 2 * 1024 * 1024  # of each transcript, from its end
SESSIONS_SEARCH_TOTAL_BYTES = 16 * 1024 * 1024  # of all of them in one call
SESSIONS_SEARCH_MAX_RESULTS = 8
SESSIONS_SEARCH_EXCERPT_CHARS = 300
QUERY_MAX_CHARS = 200

SEARCH = ToolSpec(
    "sessions_search",
    "Search what was said in your earlier conversations with this sender (this chat "
    "and the others they are in), including what was never saved to memory. Returns "
    "short excerpts with when and who.",
    schema(["query"], query="string", max_results="integer"),
)


def sessions_search(box: Toolbox, query: str, max_results: int = 5) -> str:
    if not isinstance(query, str) or not query.strip() or len(query) > QUERY_MAX_CHARS:
        raise ToolError(f"give a query of 1 to {QUERY_MAX_CHARS} characters")
    if isinstance(max_results, bool) or not isinstance(max_results, int) or max_results < 1:
        raise ToolError("max_results must be a whole number from 1")
    from orchestrator.memory import terms  # its patterns are compiled at the first search

    found = terms.expression(terms.query_terms(query))
    if found is None:
        return "(no results: the query holds no words)"
    root = Path(box.agent_dir) / "sessions"
    db = sqlite3.connect(":memory:")
    try:
        db.execute("CREATE VIRTUAL TABLE t USING fts5(text, session UNINDEXED, "
                   "at UNINDEXED, who UNINDEXED, tokenize = 'porter unicode61')")  # fmt: skip
        budget = SESSIONS_SEARCH_TOTAL_BYTES
        for key in _sessions(root, box.session_key, box.sender):
            if budget <= 0:
                break
            events, used = _tail_events(root / key / "transcript.jsonl", budget)
            budget -= used
            db.executemany(
                "INSERT INTO t (text, session, at, who) VALUES (?,?,?,?)",
                [(terms.indexed(text), key, at, who) for text, at, who in events],
            )
        rows = db.execute(
            "SELECT text, session, at, who FROM t WHERE t MATCH ? ORDER BY bm25(t) LIMIT ?",
            (found, min(max_results, SESSIONS_SEARCH_MAX_RESULTS)),
        ).fetchall()
    except sqlite3.Error as exc:
        raise ToolError(f"the search failed: {exc}") from None
    finally:
        db.close()
    if not rows:
        return f"(nothing said in these conversations matches {query!r})"
    if box.host is not None:
        try:
            box.host.request(OTHERS_WORDS, source=SESSIONS_SOURCE)
        except HostRequestFailed as exc:
            raise ToolError(f"the search could not be recorded: {exc}") from None
    lines = [
        f"[{session}, {_when(at)}, {who}] {_excerpt(terms.shown(text), query)}"
        for text, session, at, who in rows
    ]
    return "[earlier conversations: others' words; what was said, not what is true]\n" + (
        "\n".join(lines)
    )


def _sessions(root: Path, current: str | None, sender: str | None) -> list[str]:
    """The session keys searched: the current one, then those the sender spoke in."""
    keys: list[str] = [current] if current else []
    if not sender:
        return keys
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return keys
    # how the sender's name stands in a line: as it is, or with its non-ASCII characters
    # escaped (a line holding a lone surrogate is written so)
    needles = tuple(dict.fromkeys((json.dumps(sender, ensure_ascii=False), json.dumps(sender))))
    for entry in entries:
        if entry.name in keys or not entry.is_dir(follow_symlinks=False):
            continue
        events, _ = _tail_events(Path(entry.path) / "transcript.jsonl", SESSIONS_SEARCH_READ_BYTES,
                                 raw_filter=needles)  # fmt: skip
        if any(who == sender for _, _, who in events):
            keys.append(entry.name)
    return keys


# a lone surrogate (kept in a transcript line as an escape) has no UTF-8 form: SQLite and
# the answer take U+FFFD in its place
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _tail_events(
    path: Path, budget: int, raw_filter: tuple[str, ...] | None = None
) -> tuple[list[tuple[str, float, str]], int]:
    """(text, time, who) of the messages at the end of ``path`` (at most ``budget`` and
    SESSIONS_SEARCH_READ_BYTES of it), and the bytes read. A symlink or anything but a
    regular file is not read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return [], 0
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or not _readable_version(fd, path):
            return [], 0
        size = min(info.st_size, budget, SESSIONS_SEARCH_READ_BYTES)
        os.lseek(fd, max(0, info.st_size - size), os.SEEK_SET)
        data = os.read(fd, size)
    finally:
        os.close(fd)
    out = []
    for line in data.decode("utf-8", errors="replace").splitlines():
        if raw_filter is not None and not any(needle in line for needle in raw_filter):
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue  # the first line, cut where reading began, or a torn one
        if not isinstance(event, dict) or event.get("t") != "msg":
            continue
        role, content = event.get("role"), event.get("content")
        if role not in ("user", "assistant") or not isinstance(content, str) or not content:
            continue
        who = str(event.get("sender") or "") if role == "user" else "you"
        at = event.get("ts")
        out.append((_LONE_SURROGATE.sub("\ufffd", content),
                    float(at) if isinstance(at, int | float) else 0.0,
                    _LONE_SURROGATE.sub("\ufffd", who) or "?"))  # fmt: skip
    return out, len(data)


def _readable_version(fd: int, path: Path) -> bool:
    """Whether this code can read the transcript: its header (the first line) is not
    of a newer release. One that is is left out of the search, with a warning."""
    first = os.pread(fd, HEADER_READ_BYTES, 0).split(b"\n", 1)[0]
    try:
        event = json.loads(first)
    except ValueError:
        return True  # no header (before versions), or a torn line
    try:
        check_header(event if isinstance(event, dict) else None, str(path))
    except FileTooNew as exc:
        log.warning("sessions_search leaves a transcript out: %s", exc.message)
        return False
    return True


def _when(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M UTC") if at else "?"


def _excerpt(text: str, query: str) -> str:
    """The part of ``text`` around the query's first word found in it, bounded."""
    flat = " ".join(text.split())
    if len(flat) <= SESSIONS_SEARCH_EXCERPT_CHARS:
        return flat
    lowered = flat.casefold()
    at = min(
        (i for w in query.casefold().split() if (i := lowered.find(w)) >= 0),
        default=0,
    )
    start = max(0, at - SESSIONS_SEARCH_EXCERPT_CHARS // 3)
    cut = flat[start : start + SESSIONS_SEARCH_EXCERPT_CHARS]
    return ("…" if start else "") + cut + ("…" if start + len(cut) < len(flat) else "")


SESSIONS = StaticSource("sessions", (FunctionTool(SEARCH, sessions_search, frozenset({TURN})),))
