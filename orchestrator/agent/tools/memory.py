"""The memory tools: the stores the host keeps outside the container (the label
``learned``: the group's learned behaviors; a write is a request to the host, which alone
decides from its record of the turn's sender), and search over the memory tree, answered
by the host's index."""

from __future__ import annotations

from pathlib import Path

from orchestrator import protocol
from orchestrator.agent.hostlink import HostRequestFailed
from orchestrator.agent.tools.base import ToolError, ToolSpec, schema
from orchestrator.agent.tools.box import FunctionTool, StaticSource, Toolbox
from orchestrator.limits import MAX_LEARNED_MAX_CHARS
from orchestrator.protocol import (
    LEARNED_LABEL,
    LEARNED_READ,
    LEARNED_WRITE,
    NOT_PERSISTED,
    PERSISTED,
    UNKNOWN,
)

MEMORY_LIST = ToolSpec(
    "memory_list",
    "List the memory stores kept by the orchestrator outside your files (such as "
    "'learned', the group's learned behaviors).",
    schema([]),
)

MEMORY_READ = ToolSpec(
    "memory_read",
    "Read a memory store by label (see memory_list).",
    schema(["label"], label="string"),
)

MEMORY_WRITE = ToolSpec(
    "memory_write",
    "Replace the whole content of a memory store (not an append: read it first and send "
    "everything that should remain). For 'learned' only a turn from one of the group's "
    "creators is granted; the answer starts PERSISTED, NOT_PERSISTED or "
    "PERSISTENCE_UNKNOWN.",
    schema(["label", "content"], label="string", content="string"),
)

MEMORY_SEARCH = ToolSpec(
    "memory_search",
    "Search the group's memory (every Markdown file under memory/, daily notes and "
    "imports included) for the words of a query. Returns, best first, each file's best "
    "passage: path, line range, a snippet with the matching words in **bold**, and a "
    "score. Read more of a file with memory_get.",
    {
        "type": "object",
        "required": ["query"],
        "additionalProperties": False,
        "properties": {"query": {"type": "string"}, "max_results": {"type": "integer"}},
    },
)

MEMORY_GET = ToolSpec(
    "memory_get",
    "Read lines of a file of the memory tree (a path such as memory/facts/x.md, as "
    "memory_search gives it), from from_line (default 1), at most lines lines (default "
    "60). A file that does not exist gives an empty result.",
    {
        "type": "object",
        "required": ["path"],
        "additionalProperties": False,
        "properties": {
            "path": {"type": "string"},
            "from_line": {"type": "integer"},
            "lines": {"type": "integer"},
        },
    },
)


def _label(label: object) -> str:
    if label != LEARNED_LABEL:
        raise ToolError(f"unknown memory label {label!r}; memory_list shows the labels")
    return LEARNED_LABEL


def memory_list(box: Toolbox) -> str:
    return (
        f"{LEARNED_LABEL}: the group's learned behaviors, standing rules its creators "
        "approved (in every fresh context). memory_read reads them; memory_write "
        "replaces them whole, granted only to a turn from a creator."
    )


def memory_read(box: Toolbox, label: str) -> str:
    _label(label)
    if box.host is None:
        raise ToolError("learned behaviors are kept by the orchestrator; no host here")
    try:
        answer = box.host.request(LEARNED_READ)
    except HostRequestFailed as exc:
        raise ToolError(str(exc)) from None
    content = answer.get("content")
    text = content if isinstance(content, str) else ""
    return text or "(empty: no learned behaviors yet)"


def memory_write(box: Toolbox, label: str, content: str) -> str:
    _label(label)
    if not isinstance(content, str):
        raise ToolError("content must be text")
    if len(content) > MAX_LEARNED_MAX_CHARS:
        return f"{NOT_PERSISTED}: the content is over {MAX_LEARNED_MAX_CHARS:,} characters"
    if box.host is None:
        return (
            f"{NOT_PERSISTED}: learned behaviors are written only by the orchestrator "
            "host, and this turn has no link to it"
        )
    try:
        answer = box.host.request(LEARNED_WRITE, content=content)
    except HostRequestFailed as exc:
        if exc.answer:  # the host answered, and did not write
            return f"{NOT_PERSISTED}: {exc}"
        return f"{UNKNOWN}: the request reached the host, but its answer did not: {exc}"
    result = answer.get("result")
    if isinstance(result, str) and result.startswith(
        (f"{PERSISTED}:", f"{NOT_PERSISTED}:", f"{UNKNOWN}:")
    ):
        return result
    return f"{UNKNOWN}: the host's answer was not understood"


# search, answered by the host's index


def memory_search(box: Toolbox, query: str, max_results: int = 6) -> str:
    if not isinstance(query, str) or not query.strip():
        raise ToolError("query must be a non-empty string")
    if isinstance(max_results, bool) or not isinstance(max_results, int) or max_results < 1:
        raise ToolError("max_results must be a whole number from 1")
    if box.host is None:
        raise ToolError("memory search is answered by the orchestrator; use grep here")
    try:
        answer = box.host.request(
            protocol.MEMORY_SEARCH,
            query=query,
            max_results=max_results,
            changed=box.memory_changed,
        )
    except HostRequestFailed as exc:
        raise ToolError(str(exc)) from None
    box.memory_changed = False
    results = answer.get("results")
    if not isinstance(results, list) or not results:
        return "(no results)"
    out = []
    for hit in results:
        if isinstance(hit, dict):
            out.append(
                f"{hit.get('path')}:{hit.get('start_line')}-{hit.get('end_line')} "
                f"(score {hit.get('score')})\n{hit.get('snippet')}"
            )
    return "\n\n".join(out)


def memory_get(box: Toolbox, path: str, from_line: int = 1, lines: int = 60) -> str:
    for name, value in (("from_line", from_line), ("lines", lines)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ToolError(f"{name} must be a whole number from 1")
    if not isinstance(path, str):
        raise ToolError("path must be a string")
    if box.host is None:
        from orchestrator.memory.reading import read_lines

        agent = Path(box.agent_dir)
        try:
            found = read_lines(agent.parent, agent.name, path, from_line, lines)
        except (ValueError, OSError) as exc:
            raise ToolError(str(exc)) from None
    else:
        try:
            found = box.host.request(
                protocol.MEMORY_GET, path=path, from_line=from_line, lines=lines
            )
        except HostRequestFailed as exc:
            raise ToolError(str(exc)) from None
    text = found.get("text")
    return text if isinstance(text, str) else ""


MEMORY = StaticSource(
    "memory",
    (
        FunctionTool(MEMORY_LIST, memory_list),
        FunctionTool(MEMORY_READ, memory_read),
        FunctionTool(MEMORY_WRITE, memory_write),
        FunctionTool(MEMORY_SEARCH, memory_search),
        FunctionTool(MEMORY_GET, memory_get),
    ),
)
