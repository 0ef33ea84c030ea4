"""The Matrix channel against a real homeserver (Synapse, tests/homeserver.py) on
loopback, driven as people would through the client-server API; the daemon and queue
are real, the group's runner a real socket (no engine needed).

A machine without Synapse's virtual environment (scripts/setup-synapse) skips these with
that reason; under CI=true its absence is a failure."""

from __future__ import annotations

import itertools
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator import wire
from orchestrator.channels.chatapp import ChatAppChannel
from orchestrator.channels.matrix.kind import KIND, MatrixOptions
from orchestrator.config import OrchestratorConfig
from orchestrator.config.accounts import ChannelAccount
from orchestrator.daemon.core import Daemon
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from orchestrator.runtime.fake import FakeBackend
from orchestrator.runtime.lifecycle import GroupRuntime
from orchestrator.store.messages import open_queue
from tests.fakerunner import FakeRunner
from tests.homeserver import Homeserver, User

NAMES = itertools.count()


def answer(conn: socket.socket, request: dict[str, Any]) -> None:
    turn = request["turn"]
    reply = (
        "\n\n".join(f"Part {i}: " + "word " * 200 for i in range(12))
        if turn["text"].startswith("long")
        else f"echo: {turn['text']}"
    )
    if turn["text"].startswith("slow"):
        time.sleep(1.5)
    wire.send_frame(conn, {"ok": True, "turn_id": turn["turn_id"], "replies": [reply]})


@dataclass
class Rig:
    server: Homeserver
    daemon: Daemon
    channel: ChatAppChannel
    runner: FakeRunner
    bot: User
    operator: User
    member: User
    home: Path

    def restart(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A new channel (as at a new start) after the test stopped the old one."""
        self.channel = ChatAppChannel.of_kind(KIND)(self.daemon)
        self.channel.start()
        wait_for(lambda: (self.daemon.chats.health("mx") or {}).get("state") == "connected")

    def replies(self, room: str, user: User | None = None) -> list[dict[str, Any]]:
        """The bot's messages in a room, as ``user`` (default: the member) sees them."""
        return (user or self.member).notices_from(room, self.bot.user_id)


def wait_for(predicate: Any, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.1)


def make_rig(home: Path, monkeypatch: pytest.MonkeyPatch, server: Homeserver) -> Rig:
    n = next(NAMES)
    bot = User(server, f"helper{n}")
    operator = User(server, f"operator{n}")
    member = User(server, f"member{n}")
    monkeypatch.setenv("MX_TOKEN", bot.token)
    h = Home(home)
    GroupStore(h).add(GroupConfig(name="fam", creators=(f"matrix:{operator.user_id}",)))
    account = ChannelAccount(
        "mx",
        "matrix",
        token_env="MX_TOKEN",
        options=MatrixOptions(server.url, bot.user_id, (operator.user_id,)),
    )
    config = OrchestratorConfig(
        project="t", mount_allowlist=home / "none.yaml", channel_accounts={"mx": account}
    )
    runtime = GroupRuntime(h, config, FakeBackend(), lambda: "img:1", ready=lambda _: True)
    runner = FakeRunner(h.runtime_dir("fam") / "runner.sock", answer)
    daemon = Daemon(h, config, runtime, open_queue(h), concurrency=2)
    daemon.start()
    channel = ChatAppChannel.of_kind(KIND)(daemon)
    channel.start()
    wait_for(lambda: (daemon.chats.health("mx") or {}).get("state") == "connected")
    return Rig(server, daemon, channel, runner, bot, operator, member, home)


@pytest.fixture
def rig(home: Path, monkeypatch: pytest.MonkeyPatch, homeserver: Homeserver) -> Iterator[Rig]:
    made = make_rig(home, monkeypatch, homeserver)
    yield made
    made.channel.stop()
    made.daemon.drain(1)
    made.runner.close()
    made.daemon.queue.close()


def _q(room: str) -> str:
    import urllib.parse

    return urllib.parse.quote(room, safe="")


def bot_is_in(rig: Rig, room: str, user: User | None = None) -> bool:
    asker = user or rig.operator
    members = asker.call("GET", f"/_matrix/client/v3/rooms/{_q(room)}/joined_members")
    return rig.bot.user_id in members.get("joined", {})


def shared_room(rig: Rig, *, encrypted: bool = False) -> str:
    """A room the operator made, the member joined and the bot was invited to (by an
    allowed inviter: it joins)."""
    room = rig.operator.create_room(invite=[rig.member.user_id], encrypted=encrypted)
    rig.member.join(room)
    rig.operator.invite(room, rig.bot.user_id)
    wait_for(lambda: bot_is_in(rig, room))
    return room


def test_an_invited_bot_joins_and_a_member_gets_a_reply_in_the_room(rig: Rig) -> None:
    room = shared_room(rig)
    rig.daemon.chats.bind("mx", room, "fam", activation="always")
    asked = rig.member.say(room, "hello from a member")
    reply = wait_for(lambda: rig.replies(room))[0]
    content = reply["content"]
    assert content["msgtype"] == "m.notice"
    assert content["body"] == "echo: hello from a member"
    assert content["format"] == "org.matrix.custom.html"
    assert content["m.relates_to"]["m.in_reply_to"]["event_id"] == asked
    turn = rig.runner.turns[0]
    assert turn["sender"] == f"matrix:{rig.member.user_id}" and turn["trust"] == "member"


def test_activation_mention_in_a_room_of_three(rig: Rig) -> None:
    room = shared_room(rig)
    rig.daemon.chats.bind("mx", room, "fam")  # mention is the default
    rig.member.say(room, "just talking among ourselves")
    localpart = rig.bot.user_id.split(":")[0].lstrip("@")
    rig.member.say(room, f"{localpart}: what time is it?")
    rig.member.say(room, "and you?", **{"m.mentions": {"user_ids": [rig.bot.user_id]}})
    wait_for(lambda: len(rig.replies(room)) == 2)
    time.sleep(1)
    # the name a pill puts in the body is taken off; the turn keeps what was said
    assert [t["text"] for t in rig.runner.turns] == ["what time is it?", "and you?"]
    assert rig.runner.turns[0]["said"] == f"{localpart}: what time is it?"


def test_an_invite_from_a_stranger_gets_a_pairing_code_not_a_join(rig: Rig) -> None:
    stranger = User(rig.server, f"stranger{next(NAMES)}")
    room = stranger.create_room(invite=[rig.bot.user_id])
    pairing = wait_for(lambda: rig.daemon.chats.pairings())[0]
    assert pairing.chat == room and pairing.requested_by == f"matrix:{stranger.user_id}"

    def refusal() -> Any:
        for event in stranger.timeline(room):
            if (
                event["type"] == "m.room.member"
                and event.get("state_key") == rig.bot.user_id
                and event["content"].get("membership") == "leave"
            ):
                return event
        return None

    left = wait_for(refusal)
    assert pairing.code in left["content"]["reason"]
    assert not bot_is_in(rig, room, stranger)
    # Approved, and invited again: now it joins and answers.
    rig.daemon.chats.approve(pairing.code, "fam", activation="always")
    stranger.invite(room, rig.bot.user_id)
    wait_for(lambda: bot_is_in(rig, room, stranger))
    stranger.say(room, "now?")
    assert wait_for(lambda: rig.replies(room, stranger))[0]["content"]["body"] == "echo: now?"


def test_a_thread_is_answered_in_its_thread(rig: Rig) -> None:
    room = shared_room(rig)
    rig.daemon.chats.bind("mx", room, "fam", activation="always")
    root = rig.member.say(room, "a thread starts here")
    wait_for(lambda: rig.replies(room))
    asked = rig.member.say(room, "inside the thread", thread=root)
    reply = wait_for(lambda: rig.replies(room)[1:])[0]
    relates = reply["content"]["m.relates_to"]
    assert relates["rel_type"] == "m.thread" and relates["event_id"] == root
    assert relates["m.in_reply_to"]["event_id"] == asked
    assert rig.runner.turns[1]["thread"] == root


def test_a_long_reply_is_split(rig: Rig) -> None:
    room = shared_room(rig)
    rig.daemon.chats.bind("mx", room, "fam", activation="always")
    rig.member.say(room, "long please")
    pieces = wait_for(lambda: len(rig.replies(room)) >= 3 and rig.replies(room))
    time.sleep(1)
    bodies = [p["content"]["body"] for p in rig.replies(room)]
    assert all(len(b) <= 6000 for b in bodies)
    assert "\n\n".join(bodies).count("Part ") == 12
    assert pieces[0]["content"]["m.relates_to"]["m.in_reply_to"]


def test_a_sync_read_again_after_a_crash_loses_nothing_and_answers_once(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    room = shared_room(rig)
    rig.daemon.chats.bind("mx", room, "fam", activation="always")
    rig.member.say(room, "before")
    wait_for(lambda: rig.replies(room))
    since_before = rig.daemon.chats.get_state("mx", "since")
    rig.member.say(room, "during")
    wait_for(lambda: len(rig.replies(room)) == 2)
    # The crash came before the since token of the batch holding "during" was
    # committed: the batch is read again at the next start.
    rig.channel.stop()
    rig.daemon.chats.set_state("mx", "since", str(since_before))
    rig.member.say(room, "while it was down")
    rig.restart(monkeypatch)
    wait_for(lambda: len(rig.replies(room)) == 3)
    time.sleep(2)
    bodies = [r["content"]["body"] for r in rig.replies(room)]
    assert bodies == ["echo: before", "echo: during", "echo: while it was down"]
    assert rig.daemon.queue.read("SELECT COUNT(*) FROM messages") == [(3,)]


def test_a_reply_claimed_before_a_crash_is_sent_again_and_seen_once(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The crash came after the server took the reply and before the daemon recorded
    it: the reply is sent again with the same transaction id, and the room shows it once."""
    room = shared_room(rig)
    rig.daemon.chats.bind("mx", room, "fam", activation="always")
    rig.member.say(room, "first")
    wait_for(lambda: rig.replies(room))
    message_id = str(rig.daemon.queue.read("SELECT id FROM messages")[0][0])
    rig.channel.stop()
    # Back to "claimed, not confirmed", as a crash right after the send would leave it.
    rig.daemon.queue.transaction(
        lambda db: db.execute(
            "UPDATE channel_outbound SET state='sending', platform_ids=NULL WHERE message_id=?",
            (message_id,),
        )
    )
    rig.restart(monkeypatch)
    wait_for(lambda: rig.daemon.chats.sent(message_id)[0][0] == "sent")
    time.sleep(1)
    assert [r["content"]["body"] for r in rig.replies(room)] == ["echo: first"]


def test_an_encrypted_room_is_refused_with_one_notice(rig: Rig) -> None:
    room = shared_room(rig, encrypted=True)
    rig.daemon.chats.bind("mx", room, "fam", activation="always")
    rig.member.say(room, "are you there?")
    rig.member.say(room, "hello?")
    notice = wait_for(lambda: rig.replies(room))[0]
    assert "end-to-end encrypted" in notice["content"]["body"]
    time.sleep(2)
    assert len(rig.replies(room)) == 1
    assert rig.runner.turns == []
    assert rig.daemon.queue.read("SELECT COUNT(*) FROM messages") == [(0,)]


def test_a_joined_room_that_is_not_bound_gets_a_code_once(rig: Rig) -> None:
    room = shared_room(rig)
    rig.member.say(room, "hello?")
    rig.member.say(room, "anyone?")
    notice = wait_for(lambda: rig.replies(room))[0]
    assert "Pairing code:" in notice["content"]["body"]
    time.sleep(1.5)
    assert len(rig.replies(room)) == 1 and rig.runner.turns == []


def test_typing_is_shown_while_a_turn_runs(rig: Rig) -> None:
    room = shared_room(rig)
    rig.daemon.chats.bind("mx", room, "fam", activation="always")
    since = rig.member.call("GET", "/_matrix/client/v3/sync?timeout=0")["next_batch"]
    rig.member.say(room, "slow one")
    seen = False
    deadline = time.monotonic() + 20
    while not seen and time.monotonic() < deadline:
        answer = rig.member.call("GET", f"/_matrix/client/v3/sync?timeout=3000&since={_q(since)}")
        since = answer["next_batch"]
        ephemeral = answer.get("rooms", {}).get("join", {}).get(room, {}).get("ephemeral", {})
        seen = any(
            e["type"] == "m.typing" and rig.bot.user_id in e["content"]["user_ids"]
            for e in ephemeral.get("events", [])
        )
    assert seen, "the bot never showed it was typing"
    wait_for(lambda: rig.replies(room))
