"""CHANGELOG.md read as the tests need it: each release's version and commit, newest
first (the upgrade test checks the previous release's commit out of the repository's
own history)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

CHANGELOG = Path(__file__).parent.parent / "CHANGELOG.md"


@dataclass(frozen=True)
class Release:
    version: str
    commit: str | None  # None: this release (the next one names its commit)


def releases(path: Path = CHANGELOG) -> list[Release]:
    """The releases of the changelog, newest first."""
    found: list[Release] = []
    version: str | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        heading = re.fullmatch(r"## (\d+\.\d+\.\d+)\s*", line)
        if heading:
            if version is not None:
                found.append(Release(version, None))
            version = heading[1]
            continue
        commit = re.match(r"Commit: ([0-9a-f]{7,40})\b", line)
        if commit and version is not None:
            found.append(Release(version, commit[1]))
            version = None
    if version is not None:
        found.append(Release(version, None))
    return found


def previous_release() -> Release:
    """The release before this one: the one the upgrade test starts from."""
    return releases()[1]
