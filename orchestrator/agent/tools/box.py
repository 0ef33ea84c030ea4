"""What a tool is (a spec the model sees, the modes it is offered in, and a call), where
tools come from (a ``ToolSource`` yields them when a turn starts, so a source whose tools
are known only at run time, an MCP server's or a skill's, fits beside the built-in
ones), and a turn's ``Toolbox``: the context its tools share (the agent folder, the mode,
the link to the host, the locks) and the dispatch from a tool's name to its tool.

Paths are resolved (symlinks followed) and must stay inside ``/workspace/agent``; writes
go only to ``memory/`` and ``files/``.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from orchestrator.agent.hostlink import HostLink
from orchestrator.agent.tools.base import FLUSH, TURN, FileLocks, ToolError, ToolSpec
from orchestrator.validate import shown_name, text_problem

WRITABLE_ROOTS = ("memory", "files")
PRIVATE_ROOT = "sessions"  # the runner's transcripts: no file tool reads them


class Tool(Protocol):
    """One tool: its spec, the modes (TURN, FLUSH) it is offered in, and its call, which
    answers text for the model or raises ToolError (an OSError is reported too)."""

    @property
    def spec(self) -> ToolSpec: ...

    @property
    def modes(self) -> frozenset[str]: ...

    def call(self, box: Toolbox, args: dict[str, Any]) -> str: ...


class ToolSource(Protocol):
    """A family of tools under one name (the name a turn's grant can give or withhold);
    ``tools`` is asked once per turn, so what it yields may change between turns."""

    @property
    def name(self) -> str: ...

    def tools(self, box: Toolbox) -> Iterable[Tool]: ...


@dataclass(frozen=True)
class FunctionTool:
    """A tool whose call is ``function(box, **arguments)``; arguments that do not fit
    the function (a missing or unknown name, a value of a type it cannot take) are
    refused as bad arguments."""

    spec: ToolSpec
    function: Callable[..., str]
    modes: frozenset[str] = frozenset({TURN})

    def call(self, box: Toolbox, args: dict[str, Any]) -> str:
        try:
            inspect.signature(self.function).bind(box, **args)
        except TypeError as exc:
            raise ToolError(f"bad arguments for {self.spec.name}: {exc}") from None
        try:
            return str(self.function(box, **args))
        except TypeError as exc:
            raise ToolError(f"bad arguments for {self.spec.name}: {exc}") from None


@dataclass(frozen=True)
class StaticSource:
    """A source whose tools are fixed when it is made."""

    name: str
    members: tuple[Tool, ...]

    def tools(self, box: Toolbox) -> Iterable[Tool]:
        return self.members


@dataclass
class Toolbox:
    """The tools of one turn (or flush), from ``sources`` (the built-in ones unless
    given), offered in ``mode`` and, when the host named them, only those of
    ``allowed`` (source names or tool names)."""

    agent_dir: Path
    mode: str = TURN
    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    outbox: list[str] = field(default_factory=list)
    flushed_chars: int = 0
    locks: FileLocks = field(default_factory=FileLocks)
    host: HostLink | None = None  # replies go to the host as they are made
    memory_changed: bool = False  # memory was written since the last memory_search
    sources: Sequence[ToolSource] | None = None
    allowed: frozenset[str] | None = None  # None: every tool of the mode
    session_key: str | None = None  # the conversation (a shell is kept per conversation)
    deadline: float | None = None  # time.monotonic() by which the turn must end
    # a flush's: where the lines it appends came from (senders, chat, time; notes.py)
    source: str = ""
    sender: str | None = None  # the turn's sender, as the host recorded it
    _tools: dict[str, tuple[str, Tool]] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.sources is None:
            from orchestrator.agent.tools import BUILT_IN

            self.sources = BUILT_IN
        for source in self.sources:
            for tool in source.tools(self):
                # the first source to name a tool keeps it: a source found at run time
                # cannot take a built-in tool's name over
                self._tools.setdefault(tool.spec.name, (source.name, tool))

    def _offered(self, source: str, tool: Tool) -> bool:
        if self.mode not in tool.modes:
            return False
        return self.allowed is None or bool({source, tool.spec.name} & self.allowed)

    @property
    def specs(self) -> tuple[ToolSpec, ...]:
        return tuple(t.spec for s, t in self._tools.values() if self._offered(s, t))

    def call(self, name: str, args: dict[str, object]) -> str:
        """Run one tool call; ToolError for anything refused."""
        found = self._tools.get(name)
        if found is None:
            raise ToolError(f"unknown tool {name!r}")
        source, tool = found
        if not self._offered(source, tool):
            if self.mode == FLUSH and self.mode not in tool.modes:
                raise ToolError(
                    f"{name} is refused during a memory flush: the only write "
                    "allowed is append_daily to today's daily note"
                )
            if self.mode not in tool.modes:
                raise ToolError(f"unknown tool {name!r}")
            raise ToolError(f"{name} is not granted on this turn")
        return tool.call(self, dict(args))

    # paths

    def resolve(self, path: str, *, write: bool = False) -> Path:
        if not isinstance(path, str) or not path or "\x00" in path:
            raise ToolError("path must be a non-empty string")
        if problem := text_problem(path):
            # a name that is not UTF-8, or holds a line break or a control character,
            # breaks every tool that shows names (and a reader's terminal)
            raise ToolError(f"{shown_name(path)}: refused: the path {problem}")
        root = Path(os.path.realpath(self.agent_dir))
        given = Path(path)
        if given.is_absolute():
            try:
                given = given.relative_to(self.agent_dir)
            except ValueError:
                raise ToolError(f"{path}: outside /workspace/agent") from None
        lexical = Path(os.path.normpath(given))
        if lexical.parts[:1] == ("..",):
            raise ToolError(f"{path}: outside /workspace/agent")
        real = Path(os.path.realpath(root / lexical))
        if real != root and root not in real.parents:
            raise ToolError(f"{path}: resolves outside /workspace/agent (symlink refused)")
        relative = real.relative_to(root)
        if relative.parts[:1] == (PRIVATE_ROOT,):
            # the runner's own store: every chat's transcript of the group; a turn of one
            # chat reads none of it (what was saved is in memory/)
            raise ToolError(f"{path}: sessions/ holds the conversations; it is not readable")
        if write and (not relative.parts or relative.parts[0] not in WRITABLE_ROOTS):
            raise ToolError(f"{path}: writes are allowed only under memory/ and files/")
        return real

    def shown(self, path: Path) -> str:
        return path.relative_to(os.path.realpath(self.agent_dir)).as_posix()

    # tools
