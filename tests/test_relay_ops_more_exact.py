"""More of the relay ops word for word (beside tests/test_relay_ops_exact.py): what the
exact tests there leave open, each behavior on its own."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.relay.ops.send_file import SendFile, send_limit
from orchestrator.relay.turn import TurnRelay
from tests import test_relay_ops_exact

turn = test_relay_ops_exact.turn  # the fixture: a turn of fam with files/report.txt

# file.send


def test_send_limit_takes_the_app_from_before_the_first_colon() -> None:
    from orchestrator.limits import DISCORD_FILE_MAX_BYTES

    assert send_limit("discord:bot:x") == DISCORD_FILE_MAX_BYTES


def test_send_file_without_a_caption_in_the_frame_says_what_the_file_is(
    served: dict[str, Any],
    turn: TurnRelay,
) -> None:
    line = "[file: report.txt (text/plain, 8 B)]"
    assert SendFile().handle(turn, {"seq": 0, "path": "files/report.txt"}) == {
        "ok": True,
        "stored": True,
        "name": "report.txt",
        "size": 8,
        "text": line,
    }
    assert served["daemon"].queue.replies_of(turn.message.id)[-1] == (turn.next_seq - 1, line)


def test_send_file_copies_the_file_to_the_outbox_named_by_message_and_reply(
    served: dict[str, Any],
    turn: TurnRelay,
) -> None:
    from orchestrator.media.outbox import ReplyFile, outbox_dir

    first = turn.next_seq
    SendFile().handle(turn, {"seq": 5, "path": "files/report.txt", "caption": "the numbers"})
    copy = outbox_dir(turn.context.state_dir, "fam") / f"{turn.message.id}.{first}.txt"
    assert copy.read_bytes() == b"numbers\n"
    assert served["daemon"].queue.files_of(turn.message.id) == {
        first: ReplyFile(first, "report.txt", "text/plain", 8, "document", str(copy))
    }


def test_send_file_tells_the_chat_of_the_message_answered(
    turn: TurnRelay, monkeypatch: pytest.MonkeyPatch
) -> None:
    told: list[str] = []
    monkeypatch.setattr(turn.context, "notify", told.append)
    SendFile().handle(turn, {"seq": 0, "path": "files/report.txt"})
    assert told == [turn.message.id]
