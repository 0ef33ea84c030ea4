"""Discord's files through the fake Discord (tests/fakediscord.py), with the real daemon
and queue, a real runner and OpenAI-compatible fakes for the model and the transcriber
(tests/chatmedia.py): a voice message is transcribed before its turn, an image reaches
the vision model, a file the agent sends is a message with the file attached that
references the message answered, sent once with its nonce (a claim at a crash is sent
again within Discord's window and Discord drops the copy), and a link or a path outside
files/ is refused by the host. The fake's file routes are checked first with
discord.py's own client."""

from __future__ import annotations

import asyncio
import base64
import io
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.channels.chatapp.core import send_key
from orchestrator.channels.discord.adapter import nonce
from orchestrator.channels.discord.kind import KIND
from orchestrator.limits import DISCORD_FILE_MAX_BYTES
from orchestrator.relay.ops.send_file import send_limit
from tests.chatmedia import (
    MediaRig,
    claimed_at_a_crash,
    media_rig,
    send_file_then,
    sends_what_it_is_told,
)
from tests.fakediscord import TEXT_CHANNEL, FakeDiscord
from tests.fakeproviders import Text
from tests.mediafiles import jpeg_with_exif, pdf_with_text
from tests.test_discord import ALICE, ALICE_ID, DM, TOKEN, wait_for

CREATOR = f"discord:{ALICE_ID}"


@pytest.fixture
def server() -> Iterator[FakeDiscord]:
    fake = FakeDiscord(TOKEN)
    yield fake
    fake.close()


def account(server: FakeDiscord) -> str:
    return f"""
    server:
      kind: discord
      token_env: DISCORD_TOKEN
      api_url: {server.url}
    """


def connected(server: FakeDiscord, rig: MediaRig) -> MediaRig:
    wait_for(lambda: server.identifies and server._newest() is not None)
    wait_for(lambda: (rig.daemon.chats.health("server") or {}).get("last_poll"))
    rig.daemon.chats.bind("server", DM, "fam")
    return rig


@pytest.fixture
def rig(home: Path, monkeypatch: pytest.MonkeyPatch, server: FakeDiscord) -> Iterator[MediaRig]:
    monkeypatch.setenv("DISCORD_TOKEN", TOKEN)
    with media_rig(home, monkeypatch, KIND, account(server), creator=CREATOR) as made:
        yield connected(server, made)


def files_of(posted: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in posted if m["attachments"]]


# the fake, as discord.py sees it


def test_the_fake_takes_files_and_gives_voice_messages_as_discord_py_reads_them() -> None:
    import discord
    import discord.http
    import yarl
    from discord.gateway import DiscordWebSocket

    server = FakeDiscord(TOKEN)
    base, gateway = discord.http.Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY
    discord.http.Route.BASE = f"{server.url}/api/v10"
    DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(f"ws://127.0.0.1:{server.port}/")
    got: list[discord.Message] = []

    async def drive() -> tuple[Any, ...]:
        intents = discord.Intents.none()
        intents.guilds = intents.guild_messages = intents.dm_messages = True
        intents.message_content = True
        client = discord.Client(intents=intents)

        async def on_message(message: discord.Message) -> None:
            got.append(message)

        client.event(on_message)
        await client.login(TOKEN)
        runner = asyncio.create_task(client.connect())
        while server._newest() is None:
            await asyncio.sleep(0.02)
        voice = server.voice_message(DM, ALICE, b"OggS a voice message", 7.0)
        await asyncio.to_thread(server.dispatch, "MESSAGE_CREATE", voice)
        while not got:
            await asyncio.sleep(0.02)
        channel = client.get_partial_messageable(int(TEXT_CHANNEL))
        reference = discord.MessageReference(
            message_id=int(voice["id"]), channel_id=int(TEXT_CHANNEL), fail_if_not_exists=False
        )
        first = await channel.send(
            "the report",
            file=discord.File(io.BytesIO(b"%PDF-1.4 r"), filename="report.pdf"),
            nonce="f-1",
            reference=reference,
        )
        again = await channel.send(
            file=discord.File(io.BytesIO(b"%PDF-1.4 r"), filename="report.pdf"), nonce="f-1"
        )
        with pytest.raises(discord.HTTPException) as refused:
            await channel.send(
                file=discord.File(io.BytesIO(b"x" * (server.file_limit + 1)), filename="big.bin")
            )
        await client.close()
        runner.cancel()
        return first, again, refused.value

    try:
        first, again, refused = asyncio.run(drive())
    finally:
        discord.http.Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY = base, gateway
        server.close()
    [message] = got
    assert message.flags.voice and message.attachments[0].is_voice_message()
    assert message.attachments[0].duration == 7.0
    assert message.attachments[0].content_type == "audio/ogg"
    assert first.id == again.id and first.reference is not None
    assert first.attachments[0].filename == "report.pdf" and first.content == "the report"
    assert server.uploaded[str(first.attachments[0].id)] == b"%PDF-1.4 r"
    assert (refused.status, refused.code) == (413, 40005)
    [posted] = files_of(server.posted())
    assert posted["nonce"] == "f-1"


def test_discords_limit_caps_what_the_agent_may_send() -> None:
    assert KIND.files_out_max_bytes == DISCORD_FILE_MAX_BYTES == 10 * 1024**2
    assert send_limit("discord:server") == DISCORD_FILE_MAX_BYTES


# the channel


def test_a_voice_message_is_transcribed_before_its_turn(rig: MediaRig, server: FakeDiscord) -> None:
    rig.transcriber.script.append(Text("Remember the dentist on Tuesday."))
    ogg = b"OggS a voice message"
    server.dispatch("MESSAGE_CREATE", server.voice_message(DM, ALICE, ogg, 12.0))
    [reply] = wait_for(lambda: server.posted(DM))
    assert reply["content"] == "ok"  # the model's answer
    [stored] = rig.inbox()
    assert stored.read_bytes() == ogg and stored.suffix == ".ogg"
    assert rig.user_messages()[-1]["content"] == (
        "[voice note, 0:12, transcribed] Remember the dentist on Tuesday.\n"
        f'[audio: files/inbox/{stored.name} (voice message "voice-message.ogg", audio/ogg, '
        f"{len(ogg)} B)]"
    )
    upload = rig.transcriber.seen[-1].body["file"]
    assert upload == {"filename": stored.name, "type": "audio/ogg", "size": len(ogg)}


def test_an_image_reaches_the_vision_model(rig: MediaRig, server: FakeDiscord) -> None:
    from PIL import Image

    rig.model.script.append(Text("a red picture"))
    photo = server.add_file("cat.jpg", "image/jpeg", jpeg_with_exif(320, 200), DM)
    server.say(DM, ALICE, "what is this?", guild=False, attachments=[photo])
    [reply] = wait_for(lambda: server.posted(DM))
    assert reply["content"] == "a red picture"
    [stored] = rig.inbox()
    text, image = rig.user_messages()[-1]["content"]
    assert text["text"].startswith(
        f'what is this?\n\n[attachment: files/inbox/{stored.name} (file "cat.jpg", image/jpeg, '
    )
    url = image["image_url"]["url"]
    shown = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert shown.size == (320, 200) and not shown.getexif()  # re-encoded, no EXIF


def test_a_file_the_agent_sends_references_the_message_and_arrives_once(
    rig: MediaRig, server: FakeDiscord
) -> None:
    report = pdf_with_text(["the report"])
    (rig.files / "report.pdf").write_bytes(report)
    send_file_then(rig.model, "files/report.pdf", "here is **the** report", "sent")
    asked = server.say(DM, ALICE, "the report, please", guild=False)
    wait_for(lambda: len(server.posted(DM)) == 2)
    time.sleep(0.5)  # a sweep would send again a file not marked sent
    with_file, last = server.posted(DM)
    assert [a["filename"] for a in with_file["attachments"]] == ["report.pdf"]
    assert server.uploaded[with_file["attachments"][0]["id"]] == report
    assert with_file["content"] == "here is **the** report"  # Discord renders Markdown
    assert str(with_file["message_reference"]["message_id"]) == asked
    assert with_file["allowed_mentions"] == {"parse": [], "replied_user": False}
    [call] = [c for c in server.calls_of("POST", f"/channels/{DM}/messages") if c.body["files"]]
    assert call.body["enforce_nonce"] is True and call.body["nonce"] == with_file["nonce"]
    assert last["content"] == "sent" and len(files_of(server.posted())) == 1


def test_a_file_claimed_at_a_crash_is_sent_again_with_its_nonce_and_shows_once(
    home: Path, monkeypatch: pytest.MonkeyPatch, server: FakeDiscord
) -> None:
    """The daemon stopped after Discord made the file's message and before it answered:
    sent again at the next start with the same nonce, Discord returns that message."""
    monkeypatch.setenv("DISCORD_TOKEN", TOKEN)
    made: list[str] = []
    with media_rig(
        home, monkeypatch, KIND, account(server), creator=CREATOR,
        prepare=lambda h: made.append(
            claimed_at_a_crash(h, DM, CREATOR, "discord:server", "server")
        ),
    ) as rig:  # fmt: skip
        first = server.message(DM, server.bot_user(), "", guild=False)
        server.nonces[nonce(send_key(made[0], 0), 0)] = (time.time(), {**first, "id": "42"})
        connected(server, rig)
        wait_for(lambda: server.posted(DM))
        time.sleep(0.5)
        assert [m["content"] for m in server.posted(DM)] == ["after the file"]
        [again] = [
            c for c in server.calls_of("POST", f"/channels/{DM}/messages") if c.body["files"]
        ]
        assert again.body["files"] == ["a.pdf"] and again.body["enforce_nonce"] is True
        assert rig.daemon.chats.sent(made[0])[0] == ("sent", ["42"])


def test_a_link_or_a_path_outside_files_is_refused_by_the_host(
    home: Path, monkeypatch: pytest.MonkeyPatch, server: FakeDiscord
) -> None:
    monkeypatch.setenv("DISCORD_TOKEN", TOKEN)
    with media_rig(
        home, monkeypatch, KIND, account(server), creator=CREATOR, hostile=sends_what_it_is_told
    ) as rig:
        connected(server, rig)
        (home / "outside.txt").write_text("not the group's")
        (rig.files / "secret.txt").symlink_to(home / "outside.txt")
        server.say(DM, ALICE, "send files/secret.txt", guild=False)
        server.say(DM, ALICE, "send memory/index.md", guild=False)
        wait_for(lambda: len(server.posted(DM)) == 2)
        texts = [m["content"] for m in server.posted(DM)]
        assert "symlink" in texts[0] and "only files under files/ can be sent" in texts[1]
        assert files_of(server.posted()) == []
