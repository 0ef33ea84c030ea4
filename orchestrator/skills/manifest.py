"""One skill's ``SKILL.md``: its frontmatter and body, read without trusting the file.

Used on the host (validation, listing) and in the container (the runner lists the
skills mounted at /workspace/skills and loads one's body), so it imports only the
standard library and yaml.
"""

from __future__ import annotations

import os
import re
import reprlib
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MANIFEST = "SKILL.md"
# the Agent Skills grammar: lowercase letters, digits and single hyphens inside
NAME_RE = re.compile(r"[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){0,63}")
NAME_MAX_CHARS = 64
NAME_RULE = (
    "1 to 64 lowercase letters, digits and hyphens, not starting or ending with a hyphen "
    "and without two hyphens in a row (e.g. pdf-tools)"
)
MANIFEST_MAX_BYTES = 64 * 1024
DESCRIPTION_MAX_CHARS = 1024


# A value shown in an error: bounded, since YAML aliases let a few hundred bytes of
# frontmatter name a list of 9**9 items, which repr() would write out in full.
_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother = 2, 200, 200


class ManifestError(ValueError):
    """A SKILL.md that cannot be read as a skill; the message names the key and says
    what would be valid."""


def valid_name(name: object) -> bool:
    return isinstance(name, str) and len(name) <= NAME_MAX_CHARS and bool(NAME_RE.fullmatch(name))


@dataclass(frozen=True)
class Manifest:
    name: str
    description: str
    host: bool = False  # a built-in that runs on the host (``orchestrator skill run``)
    front: dict[str, Any] = field(default_factory=dict)
    body: str = ""
    text: str = ""  # the whole file

    @property
    def summary(self) -> str:
        """The description on one line."""
        return " ".join(self.description.split())


def split(text: str) -> tuple[dict[str, Any], str]:
    """(frontmatter, body) of a SKILL.md; ManifestError when the frontmatter is missing
    or is not a YAML mapping."""
    import yaml

    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.split("\n")
    if not lines or lines[0].rstrip("\r") != "---":
        raise ManifestError(
            "no frontmatter: the file must begin with a line '---', then YAML with name "
            "and description, then a line '---'"
        )
    end = next((i for i in range(1, len(lines)) if lines[i].rstrip("\r") == "---"), None)
    if end is None:
        raise ManifestError("the frontmatter is not closed: add a line '---' after its YAML")
    try:
        front = yaml.safe_load("\n".join(lines[1:end])) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (frontmatter line {mark.line + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise ManifestError(f"the frontmatter is not valid YAML{where}: {problem}") from None
    except RecursionError:
        raise ManifestError(
            "the frontmatter is not valid YAML: lists or mappings nested too deeply"
        ) from None
    if not isinstance(front, dict):
        raise ManifestError(
            f"the frontmatter is {type(front).__name__}, not a mapping; expected keys such "
            "as name: and description:"
        )
    return front, "\n".join(lines[end + 1 :]).lstrip("\n")


def parse(text: str, folder_name: str | None = None) -> Manifest:
    """The manifest of a SKILL.md's text; ManifestError naming the first key that is
    wrong. ``folder_name``: the folder the file is in, which must be the name."""
    front, body = split(text)
    name = front.get("name")
    if name is None:
        raise ManifestError("name: missing; expected the skill's name, " + NAME_RULE)
    if not isinstance(name, str) or not valid_name(name):
        raise ManifestError(f"name: got {_SHOWN.repr(name)}; expected {NAME_RULE}")
    if folder_name is not None and folder_name != name:
        raise ManifestError(
            f"name: {name!r} differs from its folder's name {folder_name!r}; they must be "
            "the same (rename the folder or the name)"
        )
    description = front.get("description")
    if description is None:
        raise ManifestError(
            "description: missing; expected a sentence saying what the skill does and "
            "when to use it"
        )
    if not isinstance(description, str) or not description.strip():
        raise ManifestError(f"description: got {_SHOWN.repr(description)}; expected non-empty text")
    if len(description) > DESCRIPTION_MAX_CHARS:
        raise ManifestError(
            f"description: {len(description)} characters; expected at most {DESCRIPTION_MAX_CHARS}"
        )
    host = front.get("host", False)
    if not isinstance(host, bool):
        raise ManifestError(f"host: got {_SHOWN.repr(host)}; expected true or false")
    return Manifest(name, description.strip(), host, front, body, text)


def read_text(path: Path, max_bytes: int = MANIFEST_MAX_BYTES) -> str:
    """A regular file's UTF-8 text, never through a symlink; ManifestError when it is
    missing, not a regular file, too large or not UTF-8."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ManifestError("missing: a skill is a folder with a SKILL.md") from None
    except OSError as exc:
        raise ManifestError(f"cannot be read ({exc.strerror}); expected a regular file") from None
    # checked before fdopen, which raises IsADirectoryError on a folder
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ManifestError("is not a regular file")
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ManifestError(f"is larger than {max_bytes // 1024} KiB; keep it at most that")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(f"is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None


def load(folder: Path) -> Manifest:
    """The manifest of the skill in ``folder``, its name checked against the folder's."""
    return parse(read_text(folder / MANIFEST), folder.name)
