"""The ``skill`` tool and the skills' list at a fresh context.

The group's skills are folders mounted read-only under ``/workspace/skills`` (the
built-in ones and those the operator installed, as group.yaml ``skills:`` selects
them). At a fresh context the model sees each one's name and description, capped, not
its body; ``skill`` loads a skill's SKILL.md and lists its files, or reads one named
file of it. Its scripts run with the shell, e.g. ``bash /workspace/skills/NAME/run.sh``.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

from orchestrator.agent.settings import DEFAULT_SKILLS_DIR
from orchestrator.agent.tools.base import TURN, NotRegular, ToolError, ToolSpec, open_regular
from orchestrator.agent.tools.box import FunctionTool, Toolbox, ToolSource
from orchestrator.limits import TOOL_READ_MAX_CHARS
from orchestrator.skills.manifest import (
    DESCRIPTION_MAX_CHARS,
    MANIFEST,
    MANIFEST_MAX_BYTES,
    ManifestError,
    load,
    read_text,
    valid_name,
)
from orchestrator.validate import shown_name, text_problem

log = logging.getLogger(__name__)

SKILLS = "skills"  # the source's name, as the host grants it
SKILL_TOOL = "skill"
PROMPT_MAX_CHARS = 8_000  # the skills' names and descriptions at a fresh context, in all
LOAD_MAX_CHARS = 40_000  # of a SKILL.md the tool returns
FILES_LISTED_MAX = 200  # of a skill's files the tool lists

SPEC = ToolSpec(
    SKILL_TOOL,
    "Load a skill by name: its instructions (SKILL.md) and the list of its files. With "
    "file, read one file of the skill instead (a path inside its folder, such as "
    "reference.md or scripts/run.py). Skills are read-only folders under "
    "/workspace/skills; run a skill's scripts with the shell, e.g. "
    "bash /workspace/skills/NAME/scripts/run.sh.",
    {
        "type": "object",
        "required": ["name"],
        "additionalProperties": False,
        "properties": {
            "name": {"type": "string", "description": "the skill's name"},
            "file": {"type": "string", "description": "a file of the skill to read"},
        },
    },
)


class SkillSource:
    """The ``skill`` tool, for the skills under ``root``."""

    name = SKILLS

    def __init__(self, root: Path = Path(DEFAULT_SKILLS_DIR)) -> None:
        self.root = root

    def tools(self, box: Toolbox) -> Iterable[FunctionTool]:
        return (FunctionTool(SPEC, self._call, frozenset({TURN})),)

    def names(self) -> list[str]:
        try:
            entries = list(os.scandir(self.root))
        except OSError:
            return []
        return sorted(e.name for e in entries if valid_name(e.name) and e.is_dir())

    def folder(self, name: str) -> Path:
        if not isinstance(name, str) or not valid_name(name) or name not in self.names():
            known = ", ".join(self.names()) or "none"
            raise ToolError(f"no skill named {shown_name(str(name))!r}; the skills here: {known}")
        return self.root / name

    def _call(self, box: Toolbox, name: str, file: str | None = None) -> str:
        folder = self.folder(name)
        if file not in (None, "", MANIFEST):
            return self._read(folder, str(file))
        try:
            text = read_text(folder / MANIFEST, MANIFEST_MAX_BYTES)
        except ManifestError as exc:
            raise ToolError(f"skill {name}: {MANIFEST} {exc}") from None
        if len(text) > LOAD_MAX_CHARS:
            text = (
                text[:LOAD_MAX_CHARS]
                + f"\n[{MANIFEST} cut at {LOAD_MAX_CHARS} of {len(text)} characters]"
            )
        return (
            f"Skill {name} (folder {folder}, read-only)\n\nFiles:\n{_files(folder)}\n\n"
            f"{MANIFEST}:\n{text}"
        )

    def _read(self, folder: Path, file: str) -> str:
        if problem := text_problem(file):
            raise ToolError(f"file {shown_name(file)!r}: refused: the path {problem}")
        given = Path(file)
        if given.is_absolute():
            try:
                given = given.relative_to(folder)
            except ValueError:
                raise ToolError(f"{file}: not in the skill's folder {folder}") from None
        lexical = Path(os.path.normpath(given))
        root = Path(os.path.realpath(folder))
        real = Path(os.path.realpath(root / lexical))
        if lexical.parts[:1] == ("..",) or root not in real.parents:
            raise ToolError(f"{file}: outside the skill's folder {folder}")
        try:
            handle, _ = open_regular(real)
        except FileNotFoundError:
            raise ToolError(f"{file}: no such file in the skill; see its files") from None
        except NotRegular as exc:
            if stat.S_ISDIR(exc.mode):
                raise ToolError(f"{file}: is a folder; see the skill's files") from None
            raise ToolError(f"{file}: not a regular file") from None
        with handle:
            data = handle.read(TOOL_READ_MAX_CHARS * 4 + 1)
        text = data.decode("utf-8", errors="replace")
        if len(text) > TOOL_READ_MAX_CHARS:
            return text[:TOOL_READ_MAX_CHARS] + f"\n[cut at {TOOL_READ_MAX_CHARS} characters]"
        return text


def _files(folder: Path) -> str:
    """The skill's files, one per line (folders with a slash), at most FILES_LISTED_MAX."""
    listed: list[str] = []
    more = 0
    for parent, dirs, names in os.walk(folder):
        dirs.sort()
        base = Path(parent)
        for name, mark in [(n, "") for n in sorted(names)] + [(d, "/") for d in dirs]:
            if len(listed) < FILES_LISTED_MAX:
                listed.append(shown_name((base / name).relative_to(folder).as_posix() + mark))
            else:
                more += 1
    listed.sort()
    if more:
        listed.append(f"[{more} more not listed]")
    return "\n".join(f"- {entry}" for entry in listed)


def skills_prompt(root: Path, limit: int = PROMPT_MAX_CHARS) -> str:
    """The system prompt's block naming each skill under ``root`` with its description
    ('' when there is none), at most ``limit`` characters: a notice says how many were
    left out."""
    entries = []
    for name in SkillSource(root).names():
        try:
            manifest = load(root / name)
        except (ManifestError, OSError) as exc:
            log.warning("skill %s left out of the list: %s %s", name, MANIFEST, exc)
            continue
        where = " (runs on the host: only the operator runs it)" if manifest.host else ""
        entries.append(f"- `{name}`{where}: {manifest.summary[:DESCRIPTION_MAX_CHARS]}")
    if not entries:
        return ""
    head = (
        "## Skills\n\n"
        f"Skills are folders of instructions and scripts, read-only under {root}. When a "
        "request matches a skill's description, first call `skill` with its name: it "
        "returns the skill's instructions (SKILL.md) and its files; then follow them. "
        f"Run a skill's scripts with the shell (e.g. `bash {root}/NAME/script.sh`) when "
        "you have it, and read its other files with `skill` (name and file).\n\n"
    )
    kept: list[str] = []
    used = len(head)
    reserve = 200  # room for the notice
    for index, entry in enumerate(entries):
        last = index == len(entries) - 1
        if used + len(entry) + 1 > limit - (0 if last else reserve):
            break
        kept.append(entry)
        used += len(entry) + 1
    text = head + "\n".join(kept)
    if left := len(entries) - len(kept):
        text += (
            f"\n[{left} more skill(s) not listed here: the list is capped at {limit} "
            f"characters. Their folders are in {root}; `skill` loads any of them by name.]"
        )
    return text


def rooted(sources: Sequence[ToolSource], root: Path) -> tuple[ToolSource, ...]:
    """``sources`` with the skills source looking at ``root``."""
    return tuple(SkillSource(root) if isinstance(s, SkillSource) else s for s in sources)


SKILL_TOOLS = SkillSource()
