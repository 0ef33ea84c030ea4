"""The versions of this release: the release itself, and the version of every shape it
writes to disk that a later release may change.

Each shape is read by this code up to its version; an older one is read as it is or
migrated (the state database by ``store.schema``, the home's folders by
``daemon.upgrade``). A file without a version was written before versions existed and
is version 1. One newer than this code is refused with ``FileTooNew``, naming it, and
nothing in it changes. CHANGELOG.md says, for each release, its commit and what an
operator must know. Standard library only: the container's runner imports this.
"""

from __future__ import annotations

from orchestrator import __version__
from orchestrator.errors import OrchestratorError

RELEASE = __version__
# the release of a home (or a daemon) that left no record of it: every one before versions
EARLIEST = "a release before 0.2.0"
GROUP_FILE_VERSION = 1  # groups/<folder>/group.yaml (`version:`)
CONFIG_FILE_VERSION = 1  # orchestrator.yaml (`version:`)
TRANSCRIPT_VERSION = 1  # sessions/<key>/transcript.jsonl (its first line, a header event)
# the home's folders: 1 before versions (sessions kept per chat id), 2 sessions kept per
# (channel, chat); recorded in the state database, brought up to date by daemon.upgrade
LAYOUT_VERSION = 2
BACKUP_FORMAT_VERSION = 1  # archives of `orchestrator backup`


class FileTooNew(OrchestratorError):
    """A file (or record) was written by a newer release than this code; nothing in it
    was changed."""


def too_new(shown: str, found: int, supported: int) -> FileTooNew:
    """The refusal of ``shown`` (a file, or what it holds) at version ``found`` when this
    code reads up to ``supported``."""
    return FileTooNew(
        f"{shown} is at version {found}, written by a newer release than this "
        f"orchestrator ({RELEASE}, which reads up to version {supported}); nothing was changed",
        hint="run the release that wrote it, or a newer one (see CHANGELOG.md)",
    )


def file_version(value: object) -> int | None:
    """A version as a file gives it: a whole number from 1, else None."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return None
    return value


def describe() -> str:
    """The formats this release reads and writes, for ``--version``."""
    return (
        f"group.yaml {GROUP_FILE_VERSION}, orchestrator.yaml {CONFIG_FILE_VERSION}, "
        f"transcripts {TRANSCRIPT_VERSION}, home layout {LAYOUT_VERSION}, "
        f"backups {BACKUP_FORMAT_VERSION}"
    )
