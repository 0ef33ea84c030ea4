"""What an older release left behind, carried over at the daemon's start.

Sessions by channel: releases before it kept one session per chat id
(``sessions/chat-<chat>``), whichever channel the chat came from, so one channel could
name another's chat and join its conversation. Sessions are now keyed by (channel, chat)
(``agent.session.session_key``). At start, each old session folder is renamed to the
key of the channel that last used it, then the queue's messages get their new keys; in
that order, so a start stopped between the two finds the rows still to update and
nothing renamed twice. An old session that several channels shared goes to the one
that used it last; the others start afresh (their context carried another channel's
words). Folders are renamed through the confined file layer: the container can write
``sessions/``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from orchestrator.confined import ConfinedDir
from orchestrator.errors import OrchestratorError
from orchestrator.groups import GroupStore
from orchestrator.protocol import session_key
from orchestrator.store.messages import MessageQueue

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
