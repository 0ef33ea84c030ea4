"""Fuzzing Telegram updates (orchestrator/channels/telegram/adapter.py): what getUpdates
returns is read by python-telegram-bot (Update.de_json), then the adapter's handle()
turns the update into the core's Received (or a pairing request, a chat's move, or
nothing), and addressed() and mention_forms() judge a group-chat message by its
entities. The text, the names, the file names and the entities are the chat users'.

Telegram's JSON is typed and has fields it always sends, which the library trusts
without checking (a message without its chat, or text that is an object, is not one
Telegram sends): the seeds' strings and numbers change, optional fields come and go
(mutated_json with same_types), and an update without what the Bot API always sends is
left out. For any other update the library reads, handle() and addressed() raise
nothing (an update that raised was skipped, its message lost), and what reaches the
core is well formed: text ids, a chat and a sender, text (never None), a thread only
for a topic message, as digits.
"""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any, cast

from hypothesis import example, given
from telegram import Bot, Update, User

from orchestrator.channels.telegram.adapter import TelegramAdapter
from orchestrator.channels.telegram.kind import TelegramOptions
from tests.faketelegram import BOT_ID, BOT_USERNAME
from tests.fuzzing import RecordingCore, fuzz, mutated_json

ALICE, BOB = 1001, 1002
PRIVATE = {"id": ALICE, "type": "private", "first_name": "Alice", "username": "alice"}
GROUP = {"id": -100555, "type": "supergroup", "title": "Family"}
FORUM = {"id": -100777, "type": "supergroup", "title": "Support", "is_forum": True}
FROM_ALICE = {"id": ALICE, "is_bot": False, "first_name": "Alice", "language_code": "en"}
FROM_BOT = {"id": BOT_ID, "is_bot": True, "first_name": "Helper", "username": BOT_USERNAME}
MENTION = f"@{BOT_USERNAME} what is on the list? 👋🏽 é"


def message(chat: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"message_id": 42, "date": 1764669600, "chat": chat, "from": FROM_ALICE, **fields}


def update(**fields: Any) -> dict[str, Any]:
    return {"update_id": 900001, **fields}


SEEDS = [
    update(message=message(PRIVATE, text="remember that my cat is called Tom")),
    update(
        message=message(
            GROUP,
            text=MENTION,
            entities=[
                {"type": "mention", "offset": 0, "length": len(BOT_USERNAME) + 1},
                {"type": "bold", "offset": 22, "length": 4},
            ],
        )
    ),
    update(
        message=message(
            GROUP,
            text=f"/clear@{BOT_USERNAME} now",
            entities=[{"type": "bot_command", "offset": 0, "length": len(BOT_USERNAME) + 7}],
        )
    ),
    update(
        message=message(
            GROUP,
            text="Helper, hi",
            entities=[{"type": "text_mention", "offset": 0, "length": 6, "user": FROM_BOT}],
        )
    ),
    update(
        message=message(
            FORUM,
            text="in a topic",
            message_thread_id=7,
            is_topic_message=True,
            reply_to_message=message(FORUM, message_id=40, text="earlier", **{"from": FROM_BOT}),
        )
    ),
    update(
        message=message(
            GROUP,
            caption=f"@{BOT_USERNAME} look",
            caption_entities=[{"type": "mention", "offset": 0, "length": len(BOT_USERNAME) + 1}],
            photo=[
                {
                    "file_id": "p1",
                    "file_unique_id": "u1",
                    "width": 90,
                    "height": 60,
                    "file_size": 1200,
                },
                {"file_id": "p2", "file_unique_id": "u2", "width": 900, "height": 600},
            ],
        )
    ),
    update(
        message=message(
            PRIVATE,
            document={
                "file_id": "d1",
                "file_unique_id": "u3",
                "file_name": "r.pdf",
                "mime_type": "application/pdf",
                "file_size": 5000,
            },
        )
    ),
    update(
        message=message(
            PRIVATE,
            voice={
                "file_id": "v1",
                "file_unique_id": "u4",
                "duration": 3,
                "mime_type": "audio/ogg",
                "file_size": 900,
            },
        )
    ),
    update(edited_message={**message(PRIVATE, text="edited"), "edit_date": 1764669700}),
    update(message=message(GROUP, migrate_to_chat_id=-100999)),
    update(
        my_chat_member={
            "chat": GROUP,
            "from": {"id": BOB, "is_bot": False, "first_name": "Bob"},
            "date": 1764669600,
            "old_chat_member": {"status": "left", "user": FROM_BOT},
            "new_chat_member": {"status": "member", "user": FROM_BOT},
        }
    ),
]


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _user(value: Any) -> bool:
    return (
        isinstance(value, dict) and _int(value.get("id")) and isinstance(value.get("is_bot"), bool)
    )


def _chat(value: Any) -> bool:
    return isinstance(value, dict) and _int(value.get("id")) and isinstance(value.get("type"), str)


def _message(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and _int(value.get("message_id"))
        and _chat(value.get("chat"))
        and ("from" not in value or _user(value["from"]))
        and ("entities" not in value or "text" in value)
        and ("caption_entities" not in value or "caption" in value)
        and ("reply_to_message" not in value or _message(value["reply_to_message"]))
    )


def shaped(data: Any) -> bool:
    """Whether an update has the fields the Bot API always sends, of their types (an
    update without its chat is not one Telegram sends; anything else may be anything)."""
    if not isinstance(data, dict) or not _int(data.get("update_id")):
        return False
    member = data.get("my_chat_member")
    return all(_message(data[key]) for key in ("message", "edited_message") if key in data) and (
        member is None
        or (
            isinstance(member, dict)
            and _chat(member.get("chat"))
            and _user(member.get("from"))
            and all(
                isinstance(member.get(key), dict)
                and isinstance(member[key].get("status"), str)
                and _user(member[key].get("user"))
                for key in ("old_chat_member", "new_chat_member")
            )
        )
    )


def unicode(data: Any) -> bool:
    """Whether the update's strings have a UTF-8 form: Telegram's JSON escapes only whole
    characters (a lone surrogate such as \\ud800 would be the library's UTF-16 entity
    offsets' to refuse, never the platform's to send)."""
    try:
        json.dumps(data, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return False
    return True


BOT = Bot("123456:fuzz")


def adapter() -> tuple[TelegramAdapter, RecordingCore]:
    core = RecordingCore(TelegramOptions(), "telegram:")
    made = TelegramAdapter(cast(Any, core))
    made.me = User(BOT_ID, "Helper", is_bot=True, username=BOT_USERNAME)
    return made, core


@fuzz(300)
@given(data=mutated_json(SEEDS, max_edits=8, same_types=True))
@example(data=SEEDS[1])
@example(data=SEEDS[4])
@example(data=SEEDS[10])
@example(data=update(message=message(GROUP, text="x", entities=[
    {"type": "mention", "offset": 5, "length": 40},
    {"type": "text_mention", "offset": -3, "length": 2, "user": FROM_BOT}])))  # fmt: skip
def test_any_update_is_handled_to_a_well_formed_message(data: Any) -> None:
    if not shaped(data) or not unicode(data):
        return
    try:
        incoming = Update.de_json(copy.deepcopy(data), BOT)  # it takes keys out
    except (TypeError, KeyError, ValueError, AttributeError, OverflowError, OSError):
        return  # the library's reading of the platform's shape, not the adapter's
    made, core = adapter()
    asyncio.run(made.handle(incoming))
    assert len(core.routed) + len(core.pairing) <= 1
    for received in core.routed:
        for text in (received.chat, received.sender, received.message_id, received.event_id):
            assert isinstance(text, str) and text
        assert isinstance(received.text, str)
        assert received.thread is None or received.thread.lstrip("-").isdigit()
        assert received.title is None or isinstance(received.title, str)
        assert isinstance(made.addressed(received), bool)
        assert made.mention_forms(received) == (f"@{BOT_USERNAME}",)
