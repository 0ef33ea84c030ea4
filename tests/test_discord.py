"""The Discord channel against a fake Discord on loopback (tests/fakediscord.py: the
REST routes it calls and the gateway), with the real daemon and queue and runners on
real Unix sockets (no engine needed). The fake is checked first by driving it with
discord.py's own client: it is right when the library accepts it."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator import wire
from orchestrator.channels.chatapp import ChatAppChannel
from orchestrator.channels.discord.adapter import nonce
from orchestrator.channels.discord.kind import KIND, DiscordOptions
from orchestrator.config import OrchestratorConfig, load_config
from orchestrator.config.accounts import ChannelAccount
from orchestrator.config.kinds import reserved_prefixes
from orchestrator.daemon.core import Daemon
from orchestrator.errors import InvalidConfig
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig, set_option
from orchestrator.home import Home
from orchestrator.runtime.fake import FakeBackend
from orchestrator.runtime.lifecycle import GroupRuntime
from orchestrator.store.chats import ChatStore
from orchestrator.store.messages import open_queue
from tests.chatrig import close_rig, wait_for
from tests.fakediscord import (
    BOT_USER,
    MESSAGE_CONTENT,
    TEXT_CHANNEL,
    FakeDiscord,
)
from tests.fakerunner import FakeRunner

DiscordChannel = ChatAppChannel.of_kind(KIND)
TOKEN = "MTEwMDAwMDAwMDAwMDAwMDAwMg.fake.discord-bot-token-for-tests"
ALICE_ID, BOB_ID = "1500000000000000001", "1500000000000000002"
DM = "1600000000000000001"
ALICE = FakeDiscord.user(ALICE_ID, "alice")
BOB = FakeDiscord.user(BOB_ID, "bob")
BOT = FakeDiscord.user(BOT_USER, "helper", bot=True)


def answer(conn: socket.socket, request: dict[str, Any]) -> None:
    turn = request["turn"]
    text = turn["text"]
    if text.startswith("long"):
        reply = "\n\n".join(f"Paragraph {i}: " + "word " * 60 for i in range(30))
    elif text.startswith("slow"):
        time.sleep(1.0)
        reply = "done"
    elif text.startswith("ping"):
        reply = "@everyone look, <@1500000000000000002>"
    else:
        reply = f"echo: {text}"
    wire.send_frame(conn, {"ok": True, "turn_id": turn["turn_id"], "replies": [reply]})


@dataclass
class Rig:
    daemon: Daemon
    channel: ChatAppChannel
    server: FakeDiscord
    runner: FakeRunner
    home: Home


def make_rig(
    home: Path, monkeypatch: pytest.MonkeyPatch, server: FakeDiscord, **settings: Any
) -> Rig:
    monkeypatch.setenv("DISCORD_TOKEN", TOKEN)
    h = Home(home)
    store = GroupStore(h)
    if not (store.root / "fam").exists():
        store.add(GroupConfig(name="fam", creators=(f"discord:{ALICE_ID}",)))
    rate = {k: settings.pop(k) for k in ("rate_messages", "rate_seconds") if k in settings}
    definition = ChannelAccount(
        "server",
        "discord",
        token_env="DISCORD_TOKEN",
        options=DiscordOptions(api_url=server.url, **settings),
        **rate,
    )
    config = OrchestratorConfig(
        project="t", mount_allowlist=home / "none.yaml", channel_accounts={"server": definition}
    )
    runtime = GroupRuntime(h, config, FakeBackend(), lambda: "img:1", ready=lambda _: True)
    runner = FakeRunner(h.runtime_dir("fam") / "runner.sock", answer)
    daemon = Daemon(h, config, runtime, open_queue(h), concurrency=2)
    daemon.start()
    before = server.identifies
    channel = DiscordChannel(daemon)
    channel.start()
    wait_for(lambda: server.identifies > before and server._newest() is not None)
    wait_for(lambda: (daemon.chats.health("server") or {}).get("last_poll"))
    return Rig(daemon, channel, server, runner, h)


@pytest.fixture
def server() -> Iterator[FakeDiscord]:
    fake = FakeDiscord(TOKEN)
    yield fake
    fake.close()


@pytest.fixture
def rig(home: Path, monkeypatch: pytest.MonkeyPatch, server: FakeDiscord) -> Iterator[Rig]:
    made = make_rig(home, monkeypatch, server)
    yield made
    close_rig(made)


def bind(rig: Rig, chat: str, **kw: Any) -> None:
    rig.daemon.chats.bind("server", chat, "fam", **kw)


def mention(text: str) -> tuple[str, dict[str, Any]]:
    return f"<@{BOT_USER}> {text}", {"mentions": [BOT]}


# the fake, as discord.py sees it


def test_the_fake_speaks_the_gateway_and_rest_as_discord_py_reads_them() -> None:
    import discord
    import discord.http
    import yarl
    from discord.gateway import DiscordWebSocket

    server = FakeDiscord(TOKEN, heartbeat_ms=300)
    base, gateway = discord.http.Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY
    discord.http.Route.BASE = f"{server.url}/api/v10"
    DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(f"ws://127.0.0.1:{server.port}/")
    got: list[discord.Message] = []

    async def drive() -> list[Any]:
        intents = discord.Intents.none()
        intents.guilds = intents.guild_messages = intents.dm_messages = True
        intents.message_content = True
        client = discord.Client(intents=intents)
        ready = asyncio.Event()
        resumed = asyncio.Event()
        client.event(_named("on_ready", ready.set))
        client.event(_named("on_resumed", resumed.set))

        async def on_message(message: discord.Message) -> None:
            got.append(message)

        client.event(on_message)
        await client.login(TOKEN)
        assert client.application_flags.gateway_message_content_limited
        runner = asyncio.create_task(client.connect())
        await asyncio.wait_for(ready.wait(), 10)
        guild = client.get_guild(int(server.guild()["id"]))
        assert guild is not None and guild.get_channel(int(TEXT_CHANNEL)) is not None
        thread = await asyncio.to_thread(server.add_thread, TEXT_CHANNEL)
        await asyncio.to_thread(server.say, thread, ALICE, "in a thread")
        await asyncio.to_thread(server.say, DM, ALICE, "a direct message", guild=False)
        while len(got) < 2:
            await asyncio.sleep(0.02)
        await asyncio.sleep(1.0)  # heartbeats every 0.3 s, each acknowledged
        await asyncio.to_thread(server.reconnect)  # op 7: a new connection that resumes
        await asyncio.wait_for(resumed.wait(), 10)
        await asyncio.to_thread(server.say, TEXT_CHANNEL, BOB, "after the resume")
        while len(got) < 3:
            await asyncio.sleep(0.02)
        channel = client.get_partial_messageable(int(TEXT_CHANNEL))
        first = await channel.send("hello", nonce="n-1")
        again = await channel.send("hello", nonce="n-1")  # enforced: the same message
        other = await channel.send(
            "hi", nonce="n-2", reference=got[2].to_reference(fail_if_not_exists=False)
        )
        async with channel.typing():
            pass
        with pytest.raises(discord.HTTPException, match="2000 or fewer"):
            await channel.send("x" * 2001)
        await client.close()
        runner.cancel()
        return [first, again, other, thread]

    try:
        first, again, other, _thread = asyncio.run(drive())
    finally:
        discord.http.Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY = base, gateway
        server.close()
    assert isinstance(got[0].channel, discord.Thread) and got[0].channel.parent_id == int(
        TEXT_CHANNEL
    )
    assert got[1].guild is None and got[1].content == "a direct message"
    assert got[2].content == "after the resume"
    assert first.id == again.id != other.id and other.reference is not None
    assert [m["content"] for m in server.posted()] == ["hello", "hi"]
    assert server.connections[0].intents is not None
    assert server.connections[0].intents & MESSAGE_CONTENT
    assert server.connections[0].heartbeats >= 2 and server.resumes == 1
    assert server.calls_of("POST", "/typing")


def _named(name: str, action: Any) -> Any:
    async def handler() -> None:
        action()

    handler.__name__ = name
    return handler


# the channel


def test_a_direct_message_round_trip(rig: Rig) -> None:
    bind(rig, DM)
    asked = rig.server.say(DM, ALICE, "hello there", guild=False)
    [post] = wait_for(lambda: rig.server.posted(DM))
    assert post["content"] == "echo: hello there"
    assert str(post["message_reference"]["message_id"]) == asked
    assert post["allowed_mentions"] == {"parse": [], "replied_user": False}
    [turn] = rig.runner.turns
    assert (turn["sender"], turn["trust"], turn["channel"]) == (
        f"discord:{ALICE_ID}",
        "creator",
        "discord:server",
    )
    [call] = rig.server.calls_of("POST", f"/channels/{DM}/messages")
    assert call.body["enforce_nonce"] is True and len(call.body["nonce"]) <= 25
    health = wait_for(lambda: (h := rig.daemon.chats.health("server")) and h["messages_out"] and h)
    assert (health["state"], health["bot"], health["can_read_all_group_messages"]) == (
        "connected",
        "helper",
        True,
    )
    assert rig.server.connections[-1].intents & MESSAGE_CONTENT  # granted, so asked for


def test_mention_activation_in_a_server_channel(rig: Rig) -> None:
    bind(rig, TEXT_CHANNEL, activation="mention")
    rig.server.say(TEXT_CHANNEL, BOB, "just chatting")
    text, extra = mention("what is for dinner?")
    rig.server.say(TEXT_CHANNEL, BOB, text, **extra)
    wait_for(lambda: rig.server.posted(TEXT_CHANNEL))
    bot_message = rig.server.posted(TEXT_CHANNEL)[0]
    rig.server.say(TEXT_CHANNEL, BOB, "and a reply to you", reply_to=bot_message)
    wait_for(lambda: len(rig.server.posted(TEXT_CHANNEL)) == 2)
    time.sleep(0.3)
    assert [(t["text"], t.get("said")) for t in rig.runner.turns] == [
        ("what is for dinner?", text),
        ("and a reply to you", None),
    ]
    assert [t["trust"] for t in rig.runner.turns] == ["member", "member"]


def test_threads_are_threads_and_replies_go_into_them(rig: Rig) -> None:
    set_option(rig.home.groups_dir / "fam" / "group.yaml", "session_mode", "per-thread")
    bind(rig, TEXT_CHANNEL, activation="always")
    first, second = rig.server.add_thread(TEXT_CHANNEL), rig.server.add_thread(TEXT_CHANNEL)
    rig.server.say(first, BOB, "in the first")
    rig.server.say(second, BOB, "in the second")
    rig.server.say(TEXT_CHANNEL, BOB, "in the channel")
    wait_for(lambda: len(rig.server.posted()) == 3)
    where = {m["content"]: m["channel_id"] for m in rig.server.posted()}
    assert where == {
        "echo: in the first": first,
        "echo: in the second": second,
        "echo: in the channel": TEXT_CHANNEL,
    }
    rows = rig.daemon.queue.read("SELECT chat, thread, session FROM messages")
    assert {r[0] for r in rows} == {TEXT_CHANNEL} and len({r[2] for r in rows}) == 3


def test_a_long_reply_is_split_under_2000_characters(rig: Rig) -> None:
    bind(rig, DM)
    asked = rig.server.say(DM, ALICE, "long answer please", guild=False)
    wait_for(lambda: len(rig.server.posted(DM)) >= 3)
    time.sleep(0.3)
    pieces = rig.server.posted(DM)
    assert all(len(p["content"]) <= 2000 for p in pieces)
    assert str(pieces[0]["message_reference"]["message_id"]) == asked
    assert all("message_reference" not in p for p in pieces[1:])
    assert len({p["nonce"] for p in pieces}) == len(pieces)
    assert "\n\n".join(p["content"] for p in pieces).count("Paragraph ") == 30


def test_a_429_is_waited_out_for_its_retry_after(rig: Rig) -> None:
    bind(rig, DM)
    rig.server.fail(
        "POST messages",
        429,
        {"message": "You are being rate limited.", "retry_after": 1.0, "global": False},
        {"Retry-After": "1", "X-RateLimit-Scope": "user"},
    )
    rig.server.say(DM, ALICE, "busy?", guild=False)
    [post] = wait_for(lambda: rig.server.posted(DM))
    first, second = rig.server.calls_of("POST", f"/channels/{DM}/messages")
    assert second.at - first.at >= 1.0 and post["content"] == "echo: busy?"


def test_nothing_the_model_writes_pings_anyone(rig: Rig) -> None:
    bind(rig, DM)
    rig.server.say(DM, ALICE, "ping them", guild=False)
    [post] = wait_for(lambda: rig.server.posted(DM))
    assert post["content"].startswith("@everyone")
    assert post["allowed_mentions"] == {"parse": [], "replied_user": False}


def test_a_message_delivered_again_is_answered_once(rig: Rig) -> None:
    bind(rig, DM)
    data = rig.server.message(DM, ALICE, "only once", guild=False)
    rig.server.dispatch("MESSAGE_CREATE", data)
    wait_for(lambda: rig.server.posted(DM))
    rig.server.dispatch("MESSAGE_CREATE", data)  # a replayed event
    time.sleep(0.5)
    assert rig.daemon.queue.read("SELECT COUNT(*) FROM messages") == [(1,)]
    assert len(rig.server.posted(DM)) == 1


def test_a_reconnect_resumes_and_loses_nothing(rig: Rig) -> None:
    bind(rig, DM)
    rig.server.reconnect()
    wait_for(lambda: rig.server.resumes == 1)
    rig.server.say(DM, ALICE, "after the resume", guild=False)
    wait_for(lambda: rig.server.posted(DM))
    assert rig.server.posted(DM)[0]["content"] == "echo: after the resume"


def test_an_unbound_channel_gets_a_code_once_and_reaches_nothing(rig: Rig) -> None:
    for text in ("hello?", "anyone?"):
        rig.server.say(DM, ALICE, text, guild=False)
    wait_for(lambda: rig.server.posted(DM))
    time.sleep(0.5)
    [notice] = rig.server.posted(DM)
    assert notice["content"].startswith("This channel is not connected")
    [pairing] = rig.daemon.chats.pairings()
    assert pairing.code in notice["content"]
    assert (pairing.chat, pairing.requested_by) == (DM, f"discord:{ALICE_ID}")
    assert pairing.title == "direct messages with alice"
    assert rig.runner.turns == []
    rig.daemon.chats.approve(pairing.code, "fam")
    rig.server.say(DM, ALICE, "now?", guild=False)
    wait_for(lambda: len(rig.server.posted(DM)) == 2)


def test_files_are_stored_and_an_oversized_one_refused(
    home: Path, monkeypatch: pytest.MonkeyPatch, server: FakeDiscord
) -> None:
    rig = make_rig(home, monkeypatch, server, attachments_max_bytes=1000)
    try:
        bind(rig, DM)
        pdf = server.add_file("../report\n.pdf", "application/pdf", b"%PDF-1.4 tiny", DM)
        server.say(DM, ALICE, "read this", guild=False, attachments=[pdf])
        wait_for(lambda: rig.runner.turns)
        [stored] = list((home / "groups" / "fam" / "files" / "inbox").iterdir())
        assert stored.read_bytes() == b"%PDF-1.4 tiny" and stored.suffix == ".pdf"
        text = rig.runner.turns[0]["text"]
        assert text.startswith("read this\n\n[document: files/inbox/" + stored.name)
        assert "it could not be read as a PDF" in text  # the core read it: a PDF in name only
        assert '"../report.pdf"' in text
        big = server.add_file("big.bin", "application/octet-stream", b"x" * 5000, DM)
        server.say(DM, ALICE, "and this", guild=False, attachments=[big])
        wait_for(lambda: any("up to" in m["content"] for m in server.posted(DM)))
        assert len(server.calls_of("GET", "/attachments/")) == 1 and len(rig.runner.turns) == 1
    finally:
        close_rig(rig)


def test_without_the_message_content_intent_mentions_work_and_doctor_says_why(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.service.doctor import WARN, check_channels

    server = FakeDiscord(TOKEN, message_content=False)
    (home / "orchestrator.yaml").write_text(
        f"channels:\n  server:\n    kind: discord\n    token_env: DISCORD_TOKEN\n"
        f"    api_url: {server.url}\n"
    )
    rig = make_rig(home, monkeypatch, server)
    try:
        assert not rig.server.connections[-1].intents & MESSAGE_CONTENT  # else 4014
        assert rig.server.close_codes == []
        bind(rig, TEXT_CHANNEL, activation="always")
        rig.server.say(TEXT_CHANNEL, BOB, "no mention: its text never comes")
        text, extra = mention("but this one does")
        rig.server.say(TEXT_CHANNEL, BOB, text, **extra)
        wait_for(lambda: rig.server.posted(TEXT_CHANNEL))
        time.sleep(0.3)
        assert [t["text"] for t in rig.runner.turns] == ["but this one does"]
        [check] = check_channels(Home(home))
    finally:
        close_rig(rig)
        server.close()
    assert check.status == WARN and "Message Content intent" in check.detail
    assert "Privileged Gateway Intents" in check.hint and TOKEN not in repr(check)


def test_a_reply_claimed_at_a_crash_is_sent_again_within_the_nonce_window_only(
    home: Path, monkeypatch: pytest.MonkeyPatch, server: FakeDiscord
) -> None:
    """The daemon stopped between the claim and Discord's answer. A claim younger than
    the window is sent again with its nonce (Discord returns the message it made, if it
    made one); an older one is marked unknown and never sent."""
    h = Home(home)
    GroupStore(h).add(GroupConfig(name="fam", creators=(f"discord:{ALICE_ID}",)))
    queue = open_queue(h)
    chats = ChatStore(queue)
    chats.bind("server", DM, "fam")
    ids = []
    for text, age in (("young", 5.0), ("old", 3600.0)):
        message = queue.enqueue(
            group="fam",
            session="s",
            chat=DM,
            thread=None,
            sender=f"discord:{ALICE_ID}",
            trust="creator",
            text=text,
            channel="discord:server",
        )
        queue.complete(message.id, [f"answer to {text}"])
        assert chats.claim_send(message.id, 0, "server")
        queue.transaction(
            lambda db, m=message.id, a=age: db.execute(
                "UPDATE channel_outbound SET at=? WHERE message_id=?", (time.time() - a, m)
            )
        )
        ids.append(message.id)
    queue.close()
    # The young reply had reached Discord before the crash: its nonce is known there.
    from orchestrator.channels.chatapp.core import send_key

    server.nonces[nonce(send_key(ids[0], 0), 0)] = (
        time.time(),
        {**server.message(DM, server.bot_user(), "answer to young", guild=False), "id": "42"},
    )
    rig = make_rig(home, monkeypatch, server)
    try:
        wait_for(lambda: rig.daemon.chats.sent(ids[0]).get(0, ("",))[0] == "sent")
        time.sleep(0.5)
        assert rig.server.posted(DM) == []  # Discord dropped the repeat
        assert len(rig.server.calls_of("POST", f"/channels/{DM}/messages")) == 1
        assert rig.daemon.chats.sent(ids[0])[0] == ("sent", ["42"])
        assert rig.daemon.chats.sent(ids[1])[0][0] == "unknown"
    finally:
        close_rig(rig)


def test_a_bridge_token_may_not_name_discord_senders(home: Path) -> None:
    assert "discord:" in reserved_prefixes()
    (home / "orchestrator.yaml").write_text(
        "http:\n  tokens:\n    b:\n      token_env: X\n      senders: 'discord:'\n"
    )
    with pytest.raises(InvalidConfig, match="such as 'discord-bridge:'"):
        load_config(Home(home))


def test_nonces_are_short_stable_and_distinct() -> None:
    assert nonce("orch.m1.0.0", 0) == nonce("orch.m1.0.0", 0)
    assert len(nonce("orch." + "x" * 200, 7)) == 25
    assert nonce("orch.m1.0.0", 0) != nonce("orch.m1.0.0", 1) != nonce("orch.m1.1.0", 0)
