"""What an older release left behind, carried over at the daemon's start.

The home's folders have a layout version (``versions.LAYOUT_VERSION``), recorded in the
state database beside its schema version. At start the daemon applies each layout step
the home lacks, in order, and records each; a step is idempotent, so a start stopped
midway does it again and nothing twice. A layout newer than this code is refused with
nothing changed. Then the release is recorded, and every line of the upgrades journal
not reported yet (schema migrations, layout steps, the change of release, including
those a command made before this start) is returned for ``up`` and the log to say.

Layout 2, sessions by channel: releases before it kept one session per chat id
(``sessions/chat-<chat>``), whichever channel the chat came from, so one channel could
name another's chat and join its conversation. Sessions are now keyed by (channel, chat)
(``agent.session.session_key``). Each old session folder is renamed to the key of the
channel that last used it, then the queue's messages get their new keys; in that order,
so a start stopped between the two finds the rows still to update and nothing renamed
twice. An old session that several channels shared goes to the one that used it last;
the others start afresh (their context carried another channel's words). Folders are
renamed through the confined file layer: the container can write ``sessions/``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from orchestrator.confined import ConfinedDir
from orchestrator.errors import OrchestratorError
from orchestrator.groups import GroupStore
from orchestrator.protocol import session_key
from orchestrator.store.homerecord import HomeRecord, Upgrade
from orchestrator.store.messages import MessageQueue
from orchestrator.versions import EARLIEST, LAYOUT_VERSION, RELEASE, too_new

log = logging.getLogger("orchestrator.upgrade")
OLD_PREFIX = "chat-"  # keys of the old scheme; a new key starts with its channel


@dataclass
class SessionsCarried:
    renamed: int = 0  # session folders moved to their new keys
    messages: int = 0  # queue rows given their new keys
    left: int = 0  # old folders left where they were (the new key was taken already)


def carry_sessions_to_channels(queue: MessageQueue, groups: GroupStore) -> SessionsCarried:
    """Move every session of the old scheme to its (channel, chat) key; idempotent."""
    messages = queue.with_session_prefix(OLD_PREFIX)
    done = SessionsCarried()
    if not messages:
        return done
    by_group: dict[str, list[tuple[str, str, str]]] = {}  # folder -> (id, old, new)
    for message in messages:
        try:
            mode = groups.load(message.group).config.session_mode
        except OrchestratorError:
            continue  # a group gone or invalid keeps its keys (its runner uses them too)
        new = session_key(mode, message.channel, message.chat, message.thread)
        by_group.setdefault(message.group, []).append((message.id, message.session, new))
    for folder, changes in by_group.items():
        latest = {old: new for _, old, new in changes}  # rows are oldest first
        _rename(groups, folder, latest, done)
    done.messages = queue.set_sessions(
        {mid: new for changes in by_group.values() for mid, _, new in changes}
    )
    log.info(
        "sessions now kept per channel: %d session folders renamed, %d messages re-keyed%s",
        done.renamed,
        done.messages,
        f", {done.left} old folders left (their new key was in use)" if done.left else "",
    )
    return done


def _rename(groups: GroupStore, folder: str, latest: dict[str, str], done: SessionsCarried) -> None:
    try:
        sessions = ConfinedDir.open(groups.root, f"{folder}/sessions")
    except OSError as exc:
        log.warning("sessions of %s not carried over: %s", folder, exc)
        return
    with sessions:
        for old, new in sorted(latest.items()):
            if sessions.lstat(old) is None:
                continue  # renamed at an earlier start, or never made
            try:
                sessions.move(old, new)
            except FileExistsError:
                done.left += 1
                log.warning(
                    "group %s: session %s left as it is: %s exists already", folder, old, new
                )
                continue
            except OSError as exc:
                done.left += 1
                log.warning("group %s: session %s not renamed: %s", folder, old, exc)
                continue
            done.renamed += 1


def _sessions_by_channel(queue: MessageQueue, groups: GroupStore) -> str:
    done = carry_sessions_to_channels(queue, groups)
    if not (done.renamed or done.messages or done.left):
        return "nothing to move"
    left = f", {done.left} left where they were" if done.left else ""
    return f"{done.renamed} session folders renamed, {done.messages} messages re-keyed{left}"


@dataclass(frozen=True)
class LayoutStep:
    """What brings the home's folders from ``version - 1`` to ``version``: ``apply``
    (idempotent) returns what it did, in a few words."""

    version: int
    what: str
    apply: Callable[[MessageQueue, GroupStore], str]


LAYOUT_STEPS: tuple[LayoutStep, ...] = (
    LayoutStep(2, "sessions kept per (channel, chat)", _sessions_by_channel),
)
assert LAYOUT_STEPS[-1].version == LAYOUT_VERSION, "a layout step per layout version"


@dataclass
class UpgradeReport:
    """What the daemon's start found and did to the home."""

    previous: str | None  # the release that last started the daemon (None: EARLIEST)
    release: str = RELEASE
    done: list[Upgrade] = field(default_factory=list)  # journal lines reported now

    def lines(self) -> list[str]:
        return [u.what for u in self.done]

    def to_dict(self) -> dict[str, object]:
        return {
            "previous": self.previous or EARLIEST,
            "release": self.release,
            "done": [u.to_dict() for u in self.done],
        }


def upgrade_home(queue: MessageQueue, groups: GroupStore) -> UpgradeReport:
    """Bring the home's layout up to date, record this release, and return what was
    done since the last start (FileTooNew, changing nothing, for a newer layout). Run
    by the daemon at its start, holding the home's lock."""
    record = HomeRecord(queue)
    found = record.layout()
    if found > LAYOUT_VERSION:
        raise too_new(f"the layout of {groups.home.root} (recorded in {queue.path})", found,
                      LAYOUT_VERSION)  # fmt: skip
    for step in LAYOUT_STEPS:
        if step.version <= found:
            continue
        did = step.apply(queue, groups)
        what = f"home layout {step.version - 1} -> {step.version}: {step.what} ({did})"
        record.set_layout(step.version, what, RELEASE)
        found = step.version
    previous = record.release()
    if previous != RELEASE:
        record.set_release(RELEASE, f"release {previous or EARLIEST} -> {RELEASE}")
    report = UpgradeReport(previous, RELEASE, record.unreported())
    record.mark_reported(report.done)
    for line in report.lines():
        log.info("upgraded: %s", line)
    return report
