"""Fuzzing Matrix room events (orchestrator/channels/matrix/adapter.py): matrix-nio reads
a timeline event (Event.parse_event, which checks its schema), then the adapter's
_event() turns it into the core's Received (or nothing), and addressed(),
mention_forms() and attachment() judge it and store its file. An event's ``content`` is
whatever JSON the room member's client sent (the homeserver, and any homeserver it
federates with, passes it on), so its values may be of any type: the seeds' contents
are mutated with type changes; the envelope (event id, sender, timestamp) is the
homeserver's and keeps its types.

For any event nio reads, _event(), addressed() and attachment() raise nothing (an
event that raised was skipped with its whole sync batch, and read again at each sync:
one message from anyone in a room would stop the account). What reaches the core is
well formed: text ids, text, a thread that is an event id (text) or none, and stored
files named by the host in the group's files/inbox.
"""

from __future__ import annotations

import asyncio
import copy
import tempfile
from pathlib import Path
from typing import Any, cast

import nio
from hypothesis import example, given

from orchestrator.channels.chatapp.adapter import Refusal, StoredFile
from orchestrator.channels.matrix.adapter import MatrixAdapter
from orchestrator.channels.matrix.kind import MatrixOptions
from tests.fuzzing import RecordingCore, fuzz, json_mutants

BOT, ALICE = "@helper:example.org", "@alice:example.org"
ROOM = "!family:example.org"
OWN = "$own-earlier-answer"


def event(content: dict[str, Any], kind: str = "m.room.message") -> dict[str, Any]:
    return {
        "type": kind,
        "event_id": "$143273582443PhrSn:example.org",
        "sender": ALICE,
        "origin_server_ts": 1764669600000,
        "unsigned": {"age": 1234},
        "content": content,
    }


SEEDS = [
    event({"msgtype": "m.text", "body": "remember that my cat is called Tom 👋🏽"}),
    event(
        {
            "msgtype": "m.text",
            "body": "Helper: what is on the list?",
            "format": "org.matrix.custom.html",
            "formatted_body": f'<a href="https://matrix.to/#/{BOT}">Helper</a>: what is on it?',
            "m.mentions": {"user_ids": [BOT]},
        }
    ),
    event(
        {
            "msgtype": "m.text",
            "body": "> <@helper:example.org> earlier\n\nthanks",
            "m.relates_to": {"m.in_reply_to": {"event_id": OWN}},
        }
    ),
    event(
        {
            "msgtype": "m.text",
            "body": "in the thread",
            "m.relates_to": {
                "rel_type": "m.thread",
                "event_id": "$thread-root",
                "is_falling_back": True,
                "m.in_reply_to": {"event_id": "$thread-root"},
            },
        }
    ),
    event(
        {
            "msgtype": "m.text",
            "body": "* edited",
            "m.new_content": {"msgtype": "m.text", "body": "edited"},
            "m.relates_to": {"rel_type": "m.replace", "event_id": "$original"},
        }
    ),
    event(
        {
            "msgtype": "m.file",
            "body": "the report, as promised",
            "filename": "../../report.pdf",
            "url": "mxc://example.org/AbCdEf",
            "info": {"mimetype": "application/pdf", "size": 12},
        }
    ),
    event(
        {
            "msgtype": "m.audio",
            "body": "Voice message.ogg",
            "url": "mxc://example.org/voice",
            "info": {"mimetype": "audio/ogg", "size": 12, "duration": 3400},
            "org.matrix.msc3245.voice": {},
            "org.matrix.msc1767.audio": {"duration": 3400, "waveform": [0, 512, 1024]},
        }
    ),
    event(
        {
            "msgtype": "m.image",
            "body": "cat.png",
            "url": "mxc://example.org/large",
            "info": {"mimetype": "image/png", "size": 10**9, "w": 640, "h": 480},
        }
    ),
    event({"membership": "join", "displayname": "Alice"}, "m.room.member") | {"state_key": ALICE},
]


def adapter(root: Path) -> tuple[MatrixAdapter, RecordingCore, nio.MatrixRoom]:
    options = MatrixOptions(homeserver="https://example.org", user_id=BOT,
                            attachments_max_bytes=1000)  # fmt: skip
    core = RecordingCore(options, "matrix:", root)
    made = MatrixAdapter(cast(Any, core))
    made.own_events[OWN] = None
    room = nio.MatrixRoom(ROOM, BOT)
    for user, name in ((BOT, "Helper"), (ALICE, "Alice"), ("@bob:example.org", "Bob")):
        room.add_member(user, name, None)

    async def download(url: str, limit: int) -> bytes | None:
        return None if "large" in url else b"OggS fuzz"  # None: over the limit

    made._download = download  # type: ignore[method-assign]
    made.client = cast(Any, type("Client", (), {"rooms": {ROOM: room}})())
    return made, core, room


async def read(data: dict[str, Any], root: Path) -> None:
    made, core, room = adapter(root)
    parsed = nio.Event.parse_event(copy.deepcopy(data))
    await made._event(ROOM, room, parsed)
    assert len(core.routed) <= 1
    for received in core.routed:
        for text in (received.chat, received.sender, received.message_id, received.event_id):
            assert isinstance(text, str) and text
        assert isinstance(received.text, str)
        assert received.thread is None or isinstance(received.thread, str)
        assert isinstance(made.addressed(received), bool)
        assert BOT in made.mention_forms(received)
        stored = await made.attachment(received, "fam")
        assert stored is None or isinstance(stored, Refusal | StoredFile)
        if isinstance(stored, StoredFile):
            inbox = root / "fam/files/inbox"
            assert [p.name for p in inbox.iterdir()] == [stored.name]


def envelope_kept(data: Any) -> bool:
    """Whether the homeserver's part of the event has its types (a content may be any
    JSON object)."""
    return (
        isinstance(data, dict)
        and all(isinstance(data.get(key), str) for key in ("type", "event_id", "sender"))
        and data["event_id"].startswith("$")  # the server's ids: "$...", "@user:server"
        and data["sender"].startswith("@")
        and isinstance(data.get("origin_server_ts"), int)
        and isinstance(data.get("content"), dict)
    )


@fuzz(300)
@given(data=json_mutants(SEEDS))
@example(data=SEEDS[2])
@example(data=SEEDS[5])
@example(data=SEEDS[6])
def test_any_room_event_is_handled_to_a_well_formed_message(data: Any) -> None:
    if not envelope_kept(data):
        return
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "fam").mkdir()
        asyncio.run(read(data, Path(tmp)))
