"""``file.send``: the agent sends a file of its ``files/`` folder to the chat it answers.

The host copies the file at once, through the confined file layer, into its outbox
(``media.outbox``: what the chat gets is the file as it was when sent, whatever the
container does to it afterwards), capped by the chat's app (``AccountKind.
files_out_max_bytes``; the CLI, HTTP API and dashboard by FILE_SEND_MAX_BYTES), and
stores it as the turn's next reply, with its caption (or a line naming it) as the
reply's text. Each channel then sends it exactly once, as it sends text replies.
At most FILES_SENT_PER_TURN_MAX a turn; a number the runner sent already in this turn
is not stored again.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from orchestrator import protocol
from orchestrator.limits import (
    FILE_CAPTION_MAX_CHARS,
    FILE_SEND_MAX_BYTES,
    FILES_SENT_PER_TURN_MAX,
    RELAY_OPS_PER_TURN,
)
from orchestrator.relay.errors import RelayViolation
from orchestrator.relay.ops.base import FixedCap

if TYPE_CHECKING:
    from orchestrator.relay.turn import TurnRelay

log = logging.getLogger("orchestrator.relay")


def send_limit(channel: str) -> int:
    """The largest file a chat of ``channel`` takes: its app's, else FILE_SEND_MAX_BYTES."""
    from orchestrator.config.kinds import account_kinds

    kind = account_kinds().get(channel.partition(":")[0]) if ":" in channel else None
    return min(kind.files_out_max_bytes, FILE_SEND_MAX_BYTES) if kind else FILE_SEND_MAX_BYTES


class SendFile(FixedCap):
    name = protocol.FILE_SEND

    def handle(self, turn: TurnRelay, frame: dict[str, Any]) -> dict[str, Any]:
        from orchestrator.media.outbox import NotSendable, copy_to_outbox, file_line

        seq, path, caption = frame.get("seq"), frame.get("path"), frame.get("caption", "")
        if not isinstance(seq, int) or isinstance(seq, bool) or not 0 <= seq < RELAY_OPS_PER_TURN:
            raise RelayViolation(
                f"file.send.seq must be a whole number from 0 to {RELAY_OPS_PER_TURN - 1}"
            )
        if not isinstance(path, str) or not isinstance(caption, str):
            raise RelayViolation("file.send: path and caption must be text")
        if seq in turn.replied:
            return {"ok": True, "stored": False}
        if turn.files_sent >= FILES_SENT_PER_TURN_MAX:
            return {
                "ok": False,
                "error": f"at most {FILES_SENT_PER_TURN_MAX} files are sent in one turn",
            }
        context, message = turn.context, turn.message
        if context.state_dir is None:
            return {"ok": False, "error": "this host keeps no outbox; files cannot be sent"}
        reply_seq = turn.next_seq
        try:
            file = copy_to_outbox(
                turn.group.path.parent,
                context.state_dir,
                turn.group.folder,
                path,
                message_id=message.id,
                seq=reply_seq,
                limit=send_limit(message.channel),
            )
        except NotSendable as exc:
            log.info("group %s: send_file refused: %s", turn.group.folder, exc)
            return {"ok": False, "error": str(exc)}
        caption = caption.strip()[:FILE_CAPTION_MAX_CHARS]
        turn.next_seq += 1
        turn.replied.add(seq)
        turn.files_sent += 1
        context.queue.add_file_reply(message.id, caption or file_line(file), file)
        context.notify(message.id)
        return {"ok": True, "stored": True, "name": file.name, "size": file.size,
                "text": caption or file_line(file)}  # fmt: skip
