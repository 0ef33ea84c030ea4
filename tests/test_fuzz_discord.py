"""Fuzzing Discord's MESSAGE_CREATE events (orchestrator/channels/discord/adapter.py):
discord.py reads the gateway event's data into a Message (ConnectionState
parse_message_create, with the server, its channel and a thread known from
GUILD_CREATE), then the adapter's handle() turns it into the core's Received (or
nothing), and addressed(), mention_forms() and attachment() judge it and store its
files. The content, the names, the file names and types are people's.

Discord's JSON is typed and discord.py trusts it: the seeds' strings and numbers change
and fields come and go (mutated_json with same_types); an event discord.py does not
read is left out (its gateway's concern, not the adapter's). For any message it reads,
handle(), addressed() and attachment() raise nothing (a message that raised was
skipped, its text lost): what reaches the core is well formed (text ids, the chat, or
a thread's parent and the thread, text), and stored files are named by the host in the
group's files/inbox.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import tempfile
from pathlib import Path
from typing import Any, cast
from unittest import mock

import discord
from hypothesis import example, given

from orchestrator.channels.chatapp.adapter import Refusal, StoredFile
from orchestrator.channels.discord.adapter import DiscordAdapter
from orchestrator.channels.discord.kind import DiscordOptions
from tests.fakediscord import BOT_USER, IS_VOICE_MESSAGE, TEXT_CHANNEL, FakeDiscord
from tests.fuzzing import RecordingCore, fuzz, mutated_json

THREAD, DM = "1200000000000000020", "1300000000000000001"
ALICE = FakeDiscord.user("1400000000000000002", "alice")
BOT = FakeDiscord.user(BOT_USER, "helper", bot=True)

# the fake's builders of Discord's shapes, without its servers
shapes = FakeDiscord.__new__(FakeDiscord)
shapes.ids = itertools.count(1500000000000000001)
shapes.threads = {THREAD: TEXT_CHANNEL}
shapes.message_content = True


def attachment(name: str, content_type: str, size: int, **fields: Any) -> dict[str, Any]:
    url = f"https://cdn.discordapp.com/attachments/{TEXT_CHANNEL}/1/{name}"
    return {"id": "1600000000000000001", "filename": name, "content_type": content_type,
            "size": size, "url": url, "proxy_url": url, **fields}  # fmt: skip


EARLIER = shapes.message(TEXT_CHANNEL, BOT, "an earlier answer")
SEEDS = [
    shapes.message(DM, ALICE, "remember that my cat is called **Tom** 👋🏽", guild=False),
    shapes.message(TEXT_CHANNEL, ALICE, f"<@{BOT_USER}> what is on the list?", mentions=[BOT]),
    shapes.message(TEXT_CHANNEL, ALICE, f"<@!{BOT_USER}>, hi <@&1> <#2> @everyone"),
    shapes.message(TEXT_CHANNEL, ALICE, "a reply", reply_to=EARLIER),
    shapes.message(THREAD, ALICE, "in the thread"),
    shapes.message(TEXT_CHANNEL, BOT, "from the bot itself"),
    shapes.message(
        DM,
        ALICE,
        "see attached",
        guild=False,
        attachments=[
            attachment("../../report.pdf", "application/pdf", 12),
            attachment("big.bin", "application/octet-stream", 10**9),
        ],
    ),
    shapes.message(
        DM,
        ALICE,
        "",
        guild=False,
        flags=IS_VOICE_MESSAGE,
        attachments=[
            attachment("voice-message.ogg", "audio/ogg", 12, duration_secs=3.4, waveform="AAAA")
        ],
    ),
    {**shapes.message(TEXT_CHANNEL, ALICE, ""), "type": 7},  # a member joined
]


def adapter(root: Path) -> tuple[DiscordAdapter, RecordingCore, discord.state.ConnectionState]:
    core = RecordingCore(DiscordOptions(attachments_max_bytes=1000), "discord:", root)
    made = DiscordAdapter(cast(Any, core))
    intents = discord.Intents.none()
    intents.guilds = intents.guild_messages = intents.dm_messages = intents.message_content = True
    client = discord.Client(intents=intents, max_messages=None, chunk_guilds_at_startup=False)
    state = client._connection
    state.user = discord.ClientUser(state=state, data=cast(Any, BOT))
    state._add_guild(discord.Guild(data=cast(Any, shapes.guild()), state=state))
    made.client = client
    return made, core, state


async def read(data: Any, root: Path) -> None:
    made, core, state = adapter(root)
    messages: list[discord.Message] = []
    state.dispatch = lambda event, *args: messages.append(args[0]) if event == "message" else None
    try:
        state.parse_message_create(copy.deepcopy(data))
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
        return  # discord.py's reading of the platform's shape, not the adapter's
    (message,) = messages
    await made.handle(message)
    assert len(core.routed) <= 1
    for received in core.routed:
        for text in (received.chat, received.sender, received.message_id, received.event_id):
            assert isinstance(text, str) and text.isdigit()
        assert received.thread is None or received.thread.isdigit()
        assert isinstance(received.text, str) and isinstance(received.title, str)
        assert isinstance(made.addressed(received), bool)
        assert made.mention_forms(received) == (f"<@{BOT_USER}>", f"<@!{BOT_USER}>")
        stored = await made.attachment(received, "fam")
        assert stored is None or isinstance(stored, Refusal | list)
        if isinstance(stored, list) and stored:
            assert all(isinstance(item, StoredFile) for item in stored)
            inbox = root / "fam/files/inbox"
            assert sorted(p.name for p in inbox.iterdir()) == sorted(s.name for s in stored)


async def fetched(self: discord.Attachment, **kwargs: Any) -> bytes:
    return b"OggS fuzz"  # (no network)


# the fields Discord always sends (its API reference: Message, User, Attachment objects)
MESSAGE_FIELDS = ("id", "channel_id", "author", "content", "timestamp", "tts",
                  "mention_everyone", "mentions", "mention_roles", "attachments", "embeds",
                  "pinned", "type")  # fmt: skip
USER_FIELDS = ("id", "username", "discriminator", "avatar")
ATTACHMENT_FIELDS = ("id", "filename", "size", "url", "proxy_url")


def _has(value: Any, fields: tuple[str, ...]) -> bool:
    return isinstance(value, dict) and all(field in value for field in fields)


def shaped(data: Any) -> bool:
    """Whether a message has what Discord always sends (anything else may be anything)."""
    return (
        _has(data, MESSAGE_FIELDS)
        and _has(data["author"], USER_FIELDS)
        and all(_has(user, USER_FIELDS) for user in data["mentions"])
        and all(_has(item, ATTACHMENT_FIELDS) for item in data["attachments"])
        and (data.get("referenced_message") is None or shaped(data["referenced_message"]))
    )


def unicode(data: Any) -> bool:
    """Whether the event's strings have a UTF-8 form (Discord's JSON has no lone
    surrogate)."""
    try:
        repr(data).encode()
    except UnicodeEncodeError:
        return False
    return True


@fuzz(300)
@given(data=mutated_json(SEEDS, max_edits=8, same_types=True))
@example(data=SEEDS[3])
@example(data=SEEDS[6])
@example(data=SEEDS[7])
@example(data={**SEEDS[7], "attachments": [{**SEEDS[7]["attachments"][0], "duration_secs": -1}]})
def test_any_message_create_is_handled_to_a_well_formed_message(data: Any) -> None:
    if not shaped(data) or not unicode(data):
        return
    with (
        tempfile.TemporaryDirectory() as tmp,
        mock.patch.object(discord.Attachment, "read", fetched),
    ):
        (Path(tmp) / "fam").mkdir()
        asyncio.run(read(data, Path(tmp)))
