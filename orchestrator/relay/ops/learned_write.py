"""``learned.write``: replace the group's learned behaviors, if this turn may.

The decision rests only on the host's record of the message this turn answers: its
sender must be one of the group's ``creators`` (recorded as such and still listed).
When the session has had messages from anyone else since its last ``/clear``, the
context may carry their words, so the write is held (``approvals``): a request with an
id of its own, whose whole text the host shows in the chat, applied only when a creator
approves that id in that chat (``/approve ID``) or the operator does
(``orchestrator learned approve NAME ID``). Every answer is ``ok`` with a ``result``
beginning PERSISTED, NOT_PERSISTED or PERSISTENCE_UNKNOWN: a refusal is an answer for
the model, not a failed turn.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from orchestrator import protocol
from orchestrator.limits import MAX_LEARNED_MAX_CHARS, RELAY_SMALL_REQUEST_BYTES
from orchestrator.memory.history import LEARNED_WRITE, Provenance, record_quietly
from orchestrator.memory.learned import LearnedStore, Outcome, write_refusal
from orchestrator.protocol import CREATOR, NOT_PERSISTED
from orchestrator.relay.approvals import LEARNED, hold

if TYPE_CHECKING:
    from orchestrator.relay.turn import TurnRelay

log = logging.getLogger("orchestrator.relay")


def decide(turn: TurnRelay, content: object) -> Outcome:
    message, group = turn.message, turn.group
    reason = write_refusal(
        trust=message.trust,
        sender=message.sender,
        creators=group.config.creators,
        content=content,
        max_chars=group.config.learned_max_chars,
    )
    if reason is not None:
        log.warning("group %s: learned-behaviors write refused: %s", group.folder, reason)
        return Outcome(NOT_PERSISTED, reason)
    assert isinstance(content, str)
    queue = turn.context.queue
    others = queue.others_in_session(message.id, CREATOR)
    if others:
        request = hold(queue, kind=LEARNED, folder=group.folder, message=message, content=content)
        turn.context.notify(message.id)
        log.info(
            "group %s: learned-behaviors write held as request %d (%d messages from others "
            "in the session)",
            group.folder,
            request.id,
            others,
        )
        how = (
            f"they reply /approve {request.id}"
            if request.chat_approvable
            else "it is too long to show in the chat, so the operator approves it"
        )
        return Outcome(
            NOT_PERSISTED,
            f"pending approval as request {request.id}: this conversation has had messages "
            "from people who are not creators, so a creator must approve the change (the "
            f"orchestrator has shown them the whole text in the chat; {how})",
        )
    outcome = LearnedStore(group.path.parent, group.folder).replace(content)
    if outcome.persisted:
        record_quietly(
            group.path.parent,
            group.folder,
            Provenance.of_turn(LEARNED_WRITE, message, group.config),
            turn.context.config.history_max_file_bytes,
        )
    log.info("group %s: learned-behaviors write by %r: %s", group.folder, message.sender, outcome)
    return outcome


class LearnedWrite:
    name = protocol.LEARNED_WRITE

    def cap(self, turn: TurnRelay) -> int:
        # Any text the runner lets through (at most MAX_LEARNED_MAX_CHARS characters, four
        # UTF-8 bytes each) reaches the decision, which refuses what is over the group's
        # own limit with a reason instead of failing the turn.
        return 4 * MAX_LEARNED_MAX_CHARS + RELAY_SMALL_REQUEST_BYTES

    def handle(self, turn: TurnRelay, frame: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "result": str(decide(turn, frame.get("content")))}
