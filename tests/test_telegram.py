"""The Telegram channel against a fake Bot API on loopback (tests/faketelegram.py), with
the real daemon and queue, and runners on real Unix sockets (no engine needed)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator import wire
from orchestrator.channels.chatapp import ChatAppChannel
from orchestrator.channels.telegram.kind import KIND, TelegramOptions
from orchestrator.config import OrchestratorConfig
from orchestrator.config.accounts import ChannelAccount
from orchestrator.daemon.core import Daemon
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig, set_option
from orchestrator.home import Home
from orchestrator.runtime.fake import FakeBackend
from orchestrator.runtime.lifecycle import GroupRuntime
from orchestrator.store.messages import open_queue
from tests.chatrig import close_rig, wait_for
from tests.fakerunner import FakeRunner
from tests.faketelegram import BOT_ID, BOT_USERNAME, FakeTelegram

TelegramChannel = ChatAppChannel.of_kind(KIND)
TOKEN = "123456789:AAHfakeTokenForTestsOnly_abcdefghijk"
ALICE, BOB = 1001, 1002
PRIVATE = {"id": ALICE, "type": "private", "first_name": "Alice"}
GROUP_CHAT = {"id": -100555, "type": "supergroup", "title": "Family"}
FORUM = {"id": -100777, "type": "supergroup", "title": "Support", "is_forum": True}


def answer(conn: socket.socket, request: dict[str, Any]) -> None:
    """The group's runner: echoes, or answers long when asked."""
    turn = request["turn"]
    text = turn["text"]
    if text.startswith("long"):
        reply = "\n\n".join(f"Paragraph {i}: " + "word " * 60 for i in range(30))
    elif text.startswith("slow"):
        time.sleep(1.0)
        reply = "done"
    elif text.startswith("markdown"):
        reply = "**bold** and `code` and <tag> & [a link](https://example.org)"
    else:
        reply = f"echo: {text}"
    wire.send_frame(conn, {"ok": True, "turn_id": turn["turn_id"], "replies": [reply]})


@dataclass
class Rig:
    daemon: Daemon
    channel: ChatAppChannel
    server: FakeTelegram
    runner: FakeRunner
    home: Home

    def start_channel(self) -> None:
        self.channel = TelegramChannel(self.daemon)
        self.channel.start()

    def stop_channel(self) -> None:
        self.channel.stop()


def make_rig(
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
    server: FakeTelegram,
    *,
    account: dict[str, Any] | None = None,
) -> Rig:
    monkeypatch.setenv("TG_TOKEN", TOKEN)
    h = Home(home)
    store = GroupStore(h)
    if not (store.root / "fam").exists():
        store.add(GroupConfig(name="fam", creators=(f"telegram:{ALICE}",)))
    settings = dict(account or {})
    rate = {k: settings.pop(k) for k in ("rate_messages", "rate_seconds") if k in settings}
    definition = ChannelAccount(
        "fambot",
        "telegram",
        token_env="TG_TOKEN",
        options=TelegramOptions(api_url=server.url, **settings),
        **rate,
    )
    config = OrchestratorConfig(
        project="t",
        mount_allowlist=home / "none.yaml",
        channel_accounts={definition.name: definition},
    )
    runtime = GroupRuntime(h, config, FakeBackend(), lambda: "img:1", ready=lambda _: True)
    runner = FakeRunner(h.runtime_dir("fam") / "runner.sock", answer)
    daemon = Daemon(h, config, runtime, open_queue(h), concurrency=2)
    daemon.start()
    channel = TelegramChannel(daemon)
    channel.start()
    return Rig(daemon, channel, server, runner, h)


@pytest.fixture
def server() -> Iterator[FakeTelegram]:
    fake = FakeTelegram(TOKEN)
    yield fake
    fake.close()


@pytest.fixture
def rig(home: Path, monkeypatch: pytest.MonkeyPatch, server: FakeTelegram) -> Iterator[Rig]:
    made = make_rig(home, monkeypatch, server)
    yield made
    close_rig(made)


def bind(rig: Rig, chat: dict[str, Any], **kw: Any) -> None:
    rig.daemon.chats.bind("fambot", str(chat["id"]), "fam", **kw)


def test_a_private_chat_round_trip(rig: Rig) -> None:
    bind(rig, PRIVATE)
    asked = rig.server.say(PRIVATE, ALICE, "hello there")
    sent = wait_for(lambda: rig.server.sent(ALICE))
    call = sent[0].params
    assert call["text"] == "echo: hello there"
    assert call["parse_mode"] == "HTML"
    assert call["reply_parameters"]["message_id"] == asked
    turn = rig.runner.turns[0]
    assert turn["sender"] == f"telegram:{ALICE}" and turn["trust"] == "creator"
    message = rig.daemon.queue.read("SELECT chat, channel, sender FROM messages")[0]
    assert message == (str(ALICE), "telegram:fambot", f"telegram:{ALICE}")
    # The offset is committed: the update is confirmed at the next poll.
    wait_for(lambda: rig.server.confirmed > 0)
    health = rig.daemon.chats.health("fambot")
    assert health is not None and health["bot"] == BOT_USERNAME
    wait_for(lambda: (rig.daemon.chats.health("fambot") or {}).get("messages_out") == 1)


def test_the_token_is_sent_only_in_the_url_path_of_the_api(rig: Rig) -> None:
    bind(rig, PRIVATE)
    rig.server.say(PRIVATE, ALICE, "hi")
    wait_for(lambda: rig.server.sent(ALICE))
    for call in rig.server.calls:
        assert TOKEN not in repr(call.params)


def test_a_group_chat_with_activation_mention(rig: Rig) -> None:
    bind(rig, GROUP_CHAT, activation="mention")
    rig.server.say(GROUP_CHAT, BOB, "just chatting, not for the bot")
    mention = f"@{BOT_USERNAME} what is for dinner?"
    rig.server.say(
        GROUP_CHAT,
        BOB,
        mention,
        entities=[{"type": "mention", "offset": 0, "length": len(BOT_USERNAME) + 1}],
    )
    rig.server.say(GROUP_CHAT, BOB, "and a reply to you", reply_to_bot=True)
    rig.server.say(
        GROUP_CHAT,
        BOB,
        "@someone_else hello",
        entities=[{"type": "mention", "offset": 0, "length": 13}],
    )
    wait_for(lambda: len(rig.server.sent(GROUP_CHAT["id"])) == 2)
    time.sleep(0.5)
    texts = [t["text"] for t in rig.runner.turns]
    # the bot's mention is not part of the question; the turn keeps what was said
    assert texts == ["what is for dinner?", "and a reply to you"]
    assert [t.get("said") for t in rig.runner.turns] == [mention, None]
    # A bound chat's people are members through the binding; creators stay creators.
    assert [t["trust"] for t in rig.runner.turns] == ["member", "member"]


def test_activation_always_takes_every_message(rig: Rig) -> None:
    bind(rig, GROUP_CHAT, activation="always", trust="guest")
    rig.server.say(GROUP_CHAT, BOB, "no mention at all")
    wait_for(lambda: rig.server.sent(GROUP_CHAT["id"]))
    assert rig.runner.turns[0]["trust"] == "guest"


def test_an_unbound_chat_gets_a_code_once_and_reaches_nothing(rig: Rig) -> None:
    for text in ("hello?", "anyone?", "HELLO"):
        rig.server.say(PRIVATE, ALICE, text)
    wait_for(lambda: rig.server.confirmed >= 1003)
    time.sleep(0.3)
    sent = rig.server.sent(ALICE)
    assert len(sent) == 1, "the code is sent once, not per message"
    assert "Pairing code:" in sent[0].params["text"]
    assert rig.runner.turns == []
    assert rig.daemon.queue.read("SELECT COUNT(*) FROM messages") == [(0,)]
    pairing = rig.daemon.chats.pairings()[0]
    assert pairing.code in sent[0].params["text"]
    assert pairing.chat == str(ALICE) and pairing.requested_by == f"telegram:{ALICE}"
    # Approved: the chat is bound and its next message routed.
    rig.daemon.chats.approve(pairing.code, "fam")
    rig.server.say(PRIVATE, ALICE, "now?")
    wait_for(lambda: len(rig.server.sent(ALICE)) == 2)
    assert rig.server.sent(ALICE)[1].params["text"] == "echo: now?"
    # The code is used up.
    with pytest.raises(Exception, match="approved already"):
        rig.daemon.chats.approve(pairing.code, "fam")


def test_expired_and_reused_codes_are_refused(rig: Rig) -> None:
    chats = rig.daemon.chats
    old, fresh = chats.request_pairing("fambot", "42", title="t", requested_by=None, now=1000.0)
    assert fresh and old is not None
    with pytest.raises(Exception, match=f"pairing code {old.code} expired"):
        chats.approve(old.code, "fam", now=1000.0 + 3601)
    live, _ = chats.request_pairing("fambot", "43", title="t", requested_by=None)
    assert live is not None
    chats.reject(live.code.lower().replace("-", ""))
    with pytest.raises(Exception, match="was rejected already"):
        chats.approve(live.code, "fam")
    assert chats.binding("fambot", "43") is None


def test_a_bot_added_to_a_group_asks_for_pairing(rig: Rig) -> None:
    rig.server.push(
        {
            "my_chat_member": {
                "chat": GROUP_CHAT,
                "from": {"id": BOB, "is_bot": False, "first_name": "Bob"},
                "date": int(time.time()),
                "old_chat_member": {
                    "status": "left",
                    "user": {"id": BOT_ID, "is_bot": True, "first_name": "Helper"},
                },
                "new_chat_member": {
                    "status": "member",
                    "user": {"id": BOT_ID, "is_bot": True, "first_name": "Helper"},
                },
            }
        }
    )
    sent = wait_for(lambda: rig.server.sent(GROUP_CHAT["id"]))
    assert "Pairing code:" in sent[0].params["text"]
    assert rig.daemon.chats.pairings()[0].title == "Family"


def test_a_forum_topic_is_a_thread(rig: Rig) -> None:
    set_option(rig.home.groups_dir / "fam" / "group.yaml", "session_mode", "per-thread")
    bind(rig, FORUM, activation="always")
    rig.server.say(FORUM, BOB, "in topic 5", thread=5)
    rig.server.say(FORUM, BOB, "in topic 9", thread=9)
    wait_for(lambda: len(rig.server.sent(FORUM["id"])) == 2)
    by_thread = {c.params["message_thread_id"]: c.params["text"] for c in rig.server.sent()}
    assert by_thread == {"5": "echo: in topic 5", "9": "echo: in topic 9"}
    sessions = {r[0] for r in rig.daemon.queue.read("SELECT session FROM messages")}
    assert len(sessions) == 2


def test_a_long_reply_is_split_at_paragraphs_under_the_limit(rig: Rig) -> None:
    bind(rig, PRIVATE)
    asked = rig.server.say(PRIVATE, ALICE, "long answer please")
    wait_for(lambda: len(rig.server.sent(ALICE)) >= 3)
    time.sleep(0.3)
    pieces = [c.params for c in rig.server.sent(ALICE)]
    assert all(len(p["text"]) <= 4096 for p in pieces)
    assert all(p["text"].startswith("Paragraph ") for p in pieces)
    assert pieces[0]["reply_parameters"]["message_id"] == asked
    assert all("reply_parameters" not in p for p in pieces[1:])
    joined = "\n\n".join(p["text"] for p in pieces)
    assert joined.count("Paragraph ") == 30


def test_a_429_is_waited_out_with_its_retry_after(rig: Rig) -> None:
    bind(rig, PRIVATE)
    rig.server.fail(
        "sendMessage",
        429,
        {
            "ok": False,
            "error_code": 429,
            "description": "Too Many Requests: retry after 1",
            "parameters": {"retry_after": 1},
        },
    )
    rig.server.say(PRIVATE, ALICE, "busy?")
    wait_for(lambda: len(rig.server.sent(ALICE)) == 2)
    first, second = rig.server.sent(ALICE)
    assert second.at - first.at >= 1.0
    assert second.params["text"] == "echo: busy?"


def test_markdown_is_rendered_and_a_rejection_falls_back_to_plain_text(rig: Rig) -> None:
    bind(rig, PRIVATE)
    rig.server.say(PRIVATE, ALICE, "markdown one")
    first = wait_for(lambda: rig.server.sent(ALICE))[0].params
    assert first["parse_mode"] == "HTML"
    assert first["text"] == (
        "<b>bold</b> and <code>code</code> and &lt;tag&gt; &amp; "
        '<a href="https://example.org">a link</a>'
    )
    rig.server.reject_entities = 1
    rig.server.say(PRIVATE, ALICE, "markdown two")
    wait_for(lambda: len(rig.server.sent(ALICE)) == 3)
    refused, plain = rig.server.sent(ALICE)[1:]
    assert refused.params["parse_mode"] == "HTML"
    assert "parse_mode" not in plain.params
    assert plain.params["text"] == "**bold** and `code` and <tag> & [a link](https://example.org)"


def test_an_attachment_is_stored_safely_and_an_oversized_one_refused(
    home: Path, monkeypatch: pytest.MonkeyPatch, server: FakeTelegram
) -> None:
    rig = make_rig(home, monkeypatch, server, account={"attachments_max_bytes": 1000})
    try:
        bind(rig, PRIVATE)
        # A link planted where the inbox would be must not redirect the write.
        files = home / "groups" / "fam" / "files"
        files.mkdir(exist_ok=True)
        outside = home / "outside"
        outside.mkdir()
        (files / "inbox").symlink_to(outside)
        server.add_file("doc1", b"%PDF-1.4 tiny")
        document = {
            "file_id": "doc1",
            "file_unique_id": "u1",
            "file_name": "../../etc/passwd\n.pdf",
            "mime_type": "application/pdf",
            "file_size": 13,
        }
        server.say(PRIVATE, ALICE, None, extra={"document": document, "caption": "read this"})
        wait_for(lambda: server.sent(ALICE))
        assert list(outside.iterdir()) == [], "nothing written through the planted link"
        assert rig.runner.turns == []  # the refusal to write is not a turn
        (files / "inbox").unlink()
        server.say(PRIVATE, ALICE, None, extra={"document": document, "caption": "again"})
        wait_for(lambda: rig.runner.turns)
        stored = list((files / "inbox").iterdir())
        assert len(stored) == 1 and stored[0].read_bytes() == b"%PDF-1.4 tiny"
        assert stored[0].suffix == ".pdf" and ".." not in stored[0].name
        text = rig.runner.turns[0]["text"]
        assert text.startswith("again\n\n[document: files/inbox/" + stored[0].name)
        assert "it could not be read as a PDF" in text  # its bytes are not a PDF
        assert '"../../etc/passwd.pdf"' in text  # the sender's name as quoted text only
        # Oversized: refused politely, never downloaded, never a turn.
        big = {**document, "file_id": "big", "file_size": 5000}
        server.add_file("big", b"x" * 5000)
        server.say(PRIVATE, ALICE, None, extra={"document": big})
        wait_for(lambda: any("up to" in c.params["text"] for c in server.sent(ALICE)))
        assert not [c for c in server.calls if c.method == "file" and "big" in c.params["path"]]
        assert len(rig.runner.turns) == 1
    finally:
        close_rig(rig)


def test_a_group_id_migration_is_followed(rig: Rig) -> None:
    old = {"id": -555, "type": "group", "title": "Family"}
    new_id = -100999
    bind(rig, old, activation="always")
    rig.server.push(
        {
            "message": {
                **rig.server.message(old, ALICE, None),
                "migrate_to_chat_id": new_id,
            }
        }
    )
    wait_for(lambda: rig.daemon.chats.binding("fambot", str(new_id)))
    assert rig.daemon.chats.binding("fambot", "-555") is None
    rig.server.say({"id": new_id, "type": "supergroup", "title": "Family"}, ALICE, "after")
    wait_for(lambda: rig.server.sent(new_id))
    # A reply to a message from before the move follows the chat (Telegram says where).
    rig.server.migrated[-556] = -100998
    rig.daemon.chats.bind("fambot", "-556", "fam", activation="always")
    rig.server.say({"id": -556, "type": "group", "title": "Other"}, ALICE, "before")
    wait_for(lambda: rig.server.sent(-100998))
    assert rig.daemon.chats.binding("fambot", "-100998") is not None


def test_edits_and_bots_start_no_turn(rig: Rig) -> None:
    bind(rig, PRIVATE)
    rig.server.push({"edited_message": rig.server.message(PRIVATE, ALICE, "edited")})
    bot_message = rig.server.message(PRIVATE, ALICE, "from a bot")
    bot_message["from"]["is_bot"] = True
    rig.server.push({"message": bot_message})
    rig.server.say(PRIVATE, ALICE, "real")
    wait_for(lambda: rig.server.sent(ALICE))
    assert [t["text"] for t in rig.runner.turns] == ["real"]


def test_an_update_the_library_cannot_read_is_skipped_and_the_rest_are_handled(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """One update python-telegram-bot cannot read (a chat without its type) failed
    the whole batch, and every read after it: the account was stuck on it for good. The
    batch is read again as it came, the update that cannot be read is skipped with its
    id in the log, and the others are handled in order."""
    bind(rig, PRIVATE)
    bad = rig.server.push({"message": {"message_id": 77, "date": 1, "chat": {"id": ALICE}}})
    with caplog.at_level("WARNING", logger="orchestrator.channels.telegram"):
        good = rig.server.push({"message": rig.server.message(PRIVATE, ALICE, "after it")})
        wait_for(lambda: rig.server.sent(ALICE))
    assert [t["text"] for t in rig.runner.turns] == ["after it"]
    assert f"update {bad} could not be read" in caplog.text
    wait_for(lambda: rig.daemon.chats.get_state("fambot", "offset") == str(good + 1))


def test_a_sender_over_the_rate_is_told_once(
    home: Path, monkeypatch: pytest.MonkeyPatch, server: FakeTelegram
) -> None:
    rig = make_rig(home, monkeypatch, server, account={"rate_messages": 2, "rate_seconds": 600})
    try:
        bind(rig, PRIVATE)
        for i in range(5):
            server.say(PRIVATE, ALICE, f"m{i}")
        wait_for(lambda: len(server.sent(ALICE)) == 3)
        time.sleep(0.5)
        texts = [c.params["text"] for c in server.sent(ALICE)]
        assert sum("faster than I can take them" in t for t in texts) == 1
        assert len(rig.runner.turns) == 2
    finally:
        close_rig(rig)


def test_an_update_read_again_after_a_crash_is_queued_and_answered_once(
    home: Path, monkeypatch: pytest.MonkeyPatch, server: FakeTelegram
) -> None:
    """The daemon dies after queuing an update and before committing its offset: the
    update is read again at the next start, dropped as a duplicate, answered once."""
    rig = make_rig(home, monkeypatch, server)
    bind(rig, PRIVATE)
    rig.server.say(PRIVATE, ALICE, "only once")
    wait_for(lambda: rig.server.sent(ALICE))
    close_rig(rig)
    # Roll the committed offset back, as if the crash came before the commit.
    queue = open_queue(Home(home))
    queue.transaction(lambda db: db.execute("DELETE FROM channel_state WHERE key='offset'"))
    queue.close()
    server.confirmed = 0
    rig = make_rig(home, monkeypatch, server)
    try:
        wait_for(lambda: server.polls_served >= 2 and server.confirmed > 1000)
        time.sleep(0.5)
        assert rig.daemon.queue.read("SELECT COUNT(*) FROM messages") == [(1,)]
        assert len(server.sent(ALICE)) == 1
    finally:
        close_rig(rig)


def test_a_reply_claimed_but_unconfirmed_at_a_crash_is_never_sent_again(
    home: Path, monkeypatch: pytest.MonkeyPatch, server: FakeTelegram
) -> None:
    h = Home(home)
    queue = open_queue(h)
    GroupStore(h).add(GroupConfig(name="fam", creators=(f"telegram:{ALICE}",)))
    from orchestrator.store.chats import ChatStore

    chats = ChatStore(queue)
    chats.bind("fambot", str(ALICE), "fam")
    message = queue.enqueue(
        group="fam",
        session="s",
        chat=str(ALICE),
        thread=None,
        sender=f"telegram:{ALICE}",
        trust="creator",
        text="x",
        channel="telegram:fambot",
    )
    queue.complete(message.id, ["first", "second"])
    assert chats.claim_send(message.id, 0, "fambot")  # the crash came after this claim
    queue.close()
    # Sweeps come often here, and the test waits for three of them after the first send,
    # each of which would have resent the first piece if it were going to.
    sweeps = []
    unsent = ChatStore.unsent
    monkeypatch.setattr("orchestrator.channels.chatapp.core.CHANNEL_SWEEP_SECONDS", 0.05)
    monkeypatch.setattr(ChatStore, "unsent", lambda self, *a: sweeps.append(1) or unsent(self, *a))
    rig = make_rig(home, monkeypatch, server)
    try:
        wait_for(lambda: server.sent(ALICE))
        seen = len(sweeps)
        wait_for(lambda: len(sweeps) >= seen + 3)
        assert [c.params["text"] for c in server.sent(ALICE)] == ["second"]
        assert rig.daemon.chats.sent(message.id)[0][0] == "unknown"
    finally:
        close_rig(rig)


def test_a_poll_loop_that_fails_keeps_retrying_and_says_so(
    home: Path, monkeypatch: pytest.MonkeyPatch, server: FakeTelegram
) -> None:
    for _ in range(2):
        server.fail(
            "getUpdates",
            502,
            {"ok": False, "error_code": 502, "description": "Bad Gateway"},
        )
    rig = make_rig(home, monkeypatch, server)
    try:
        bind(rig, PRIVATE)
        health = wait_for(
            lambda: (h := rig.daemon.chats.health("fambot")) and h.get("last_error") and h
        )
        assert "getUpdates failed" in health["last_error"]
        rig.server.say(PRIVATE, ALICE, "after the outage")
        wait_for(lambda: rig.server.sent(ALICE))
        assert TOKEN not in str(health)
    finally:
        close_rig(rig)


def test_a_typing_indicator_is_sent_while_a_turn_runs(rig: Rig) -> None:
    bind(rig, PRIVATE)
    rig.server.say(PRIVATE, ALICE, "slow one")
    wait_for(lambda: rig.server.sent(ALICE))
    actions = rig.server.calls_of("sendChatAction")
    assert actions and actions[0].params == {"chat_id": str(ALICE), "action": "typing"}


def test_a_message_that_could_not_be_answered_gets_an_apology_once(rig: Rig) -> None:
    bind(rig, PRIVATE)
    queue = rig.daemon.queue
    message = queue.enqueue(
        group="nosuchgroup",  # never runnable: no container answers for it
        session="s",
        chat=str(ALICE),
        thread=None,
        sender=f"telegram:{ALICE}",
        trust="member",
        text="x",
        channel="telegram:fambot",
    )
    queue.transaction(
        lambda db: db.execute(
            "UPDATE messages SET state='dead', attempts=5 WHERE id=?", (message.id,)
        )
    )
    rig.daemon._changed(message.id)
    rig.daemon._changed(message.id)
    sent = wait_for(lambda: rig.server.sent(ALICE))
    time.sleep(0.5)
    assert len(rig.server.sent(ALICE)) == 1
    assert sent[0].params["text"].startswith("Sorry, I could not answer that message.")


def test_doctor_reports_a_missing_token_and_privacy_mode(
    home: Path, monkeypatch: pytest.MonkeyPatch, server: FakeTelegram
) -> None:
    from orchestrator.service.doctor import FAIL, WARN, check_channels

    (home / "orchestrator.yaml").write_text(
        "channels:\n"
        f"  fambot:\n    kind: telegram\n    token_env: TG_TOKEN\n    api_url: {server.url}\n"
        "  other:\n    kind: telegram\n    token_env: TG_MISSING\n"
    )
    monkeypatch.delenv("TG_MISSING", raising=False)
    rig = make_rig(home, monkeypatch, server)
    try:
        bind(rig, GROUP_CHAT)
        wait_for(lambda: (rig.daemon.chats.health("fambot") or {}).get("state") == "connected")
        checks = {c.name: c for c in check_channels(Home(home))}
    finally:
        close_rig(rig)
    assert checks["channel other"].status == FAIL
    assert "environment variable TG_MISSING is not set" in checks["channel other"].detail
    privacy = checks["channel fambot"]
    assert privacy.status == WARN and "privacy mode on" in privacy.detail
    assert "/setprivacy" in privacy.hint
    assert TOKEN not in repr(checks)


@pytest.fixture
def served_rig(home: Path, monkeypatch: pytest.MonkeyPatch, server: FakeTelegram) -> Iterator[Rig]:
    """The channel, the daemon and a real runner with the offline provider."""
    import threading

    from orchestrator.agent.serve import RunnerServer
    from orchestrator.agent.settings import AgentSettings
    from tests.fakerunner import bind_unix

    h = Home(home)
    store = GroupStore(h)
    store.add(
        GroupConfig(name="fam", creators=(f"telegram:{ALICE}",), members=(f"telegram:{BOB}",))
    )
    monkeypatch.setenv("TG_TOKEN", TOKEN)
    definition = ChannelAccount(
        "fambot", "telegram", token_env="TG_TOKEN", options=TelegramOptions(api_url=server.url)
    )
    config = OrchestratorConfig(
        project="t", mount_allowlist=home / "none.yaml", channel_accounts={"fambot": definition}
    )
    runtime = GroupRuntime(h, config, FakeBackend(), lambda: "img:1", ready=lambda _: True)
    group = store.load("fam")
    runtime.prepare_host(group, runtime.desired_spec(group))
    runner = RunnerServer(
        AgentSettings(
            agent_dir=group.path,
            runtime_dir=h.runtime_dir("fam"),
            provider="offline",
            model="offline-rules",
            hooks_file=None,
        )
    )
    runner.sock = bind_unix(h.runtime_dir("fam") / "runner.sock")
    thread = threading.Thread(target=runner.serve_forever, daemon=True)
    thread.start()
    daemon = Daemon(h, config, runtime, open_queue(h), concurrency=2)
    daemon.start()
    channel = TelegramChannel(daemon)
    channel.start()
    yield Rig(daemon, channel, server, None, h)  # type: ignore[arg-type]
    channel.stop()
    daemon.drain(2)
    runner.stop()
    thread.join(5)
    assert runner.sock is not None
    runner.sock.close()
    daemon.relay.close()
    daemon.relay.usage.close()
    daemon.queue.close()


def _mention(text: str) -> dict[str, Any]:
    return {"type": "mention", "offset": 0, "length": len(BOT_USERNAME) + 1}


def test_a_question_behind_the_bots_mention_is_answered_as_the_question(
    served_rig: Rig,
) -> None:
    rig = served_rig
    bind(rig, PRIVATE)
    bind(rig, GROUP_CHAT, activation="mention")
    rig.server.say(PRIVATE, ALICE, "remember that my cat is called Tom")
    wait_for(lambda: rig.server.sent(ALICE))
    question = "what do you know about my cat?"
    rig.server.say(PRIVATE, ALICE, question)
    wait_for(lambda: len(rig.server.sent(ALICE)) == 2)
    asked = f"@{BOT_USERNAME} {question}"
    rig.server.say(GROUP_CHAT, BOB, asked, entities=[_mention(asked)])
    group_id = GROUP_CHAT["id"]
    wait_for(lambda: rig.server.sent(group_id))
    private_answer = rig.server.sent(ALICE)[1].params["text"]
    group_answer = rig.server.sent(group_id)[0].params["text"]
    assert "Tom" in private_answer
    assert group_answer == private_answer
    # what the turn got, and what Bob said, are both kept
    [message] = [m for m in rig.daemon.queue.recent(10) if m.chat == str(group_id)]
    assert (message.text, message.said) == (question, asked)


def test_confirm_with_the_bots_name_approves_what_waits_in_the_group(served_rig: Rig) -> None:
    rig = served_rig
    bind(rig, GROUP_CHAT, activation="mention")
    group_id = GROUP_CHAT["id"]
    hello = f"@{BOT_USERNAME} hello"
    rig.server.say(GROUP_CHAT, BOB, hello, entities=[_mention(hello)])
    wait_for(lambda: rig.server.sent(group_id))
    rule = f"@{BOT_USERNAME} from now on, give every deadline with its timezone"
    rig.server.say(GROUP_CHAT, ALICE, rule, entities=[_mention(rule)])
    # Bob spoke in this conversation: the write waits, and the host says so in the chat
    wait_for(lambda: any("/approve" in c.params["text"] for c in rig.server.sent(group_id)))
    wait_for(lambda: any("I did not learn" in c.params["text"] for c in rig.server.sent(group_id)))
    learned = GroupStore(rig.home).load("fam").learned_file
    assert not learned.exists() or learned.read_text() == ""
    confirm = f"/confirm@{BOT_USERNAME}"
    rig.server.say(
        GROUP_CHAT,
        ALICE,
        confirm,
        entities=[{"type": "bot_command", "offset": 0, "length": len(confirm)}],
    )
    wait_for(
        lambda: any(
            c.params["text"].startswith("Approved request 1") for c in rig.server.sent(group_id)
        )
    )
    assert "timezone" in learned.read_text()


def test_clear_with_the_bots_name_starts_a_fresh_context(served_rig: Rig) -> None:
    rig = served_rig
    bind(rig, GROUP_CHAT, activation="mention")
    group_id = GROUP_CHAT["id"]
    clear = f"/clear@{BOT_USERNAME}"
    rig.server.say(
        GROUP_CHAT, BOB, clear, entities=[{"type": "bot_command", "offset": 0, "length": 24}]
    )
    wait_for(lambda: rig.server.sent(group_id))
    assert rig.server.sent(group_id)[0].params["text"].startswith("Started a fresh context")


def test_a_reply_telegram_refuses_as_a_bad_request_is_recorded_as_refused(rig: Rig) -> None:
    """A 400 is Telegram's answer (python-telegram-bot's BadRequest is a NetworkError):
    the reply was refused, not possibly delivered."""
    bind(rig, PRIVATE)
    refusal = {"ok": False, "error_code": 400, "description": "Bad Request: chat not found"}
    for _ in range(2):  # the HTML form, then the plain text
        rig.server.fail("sendMessage", 400, refusal)
    rig.server.say(PRIVATE, ALICE, "hi")
    [(message_id,)] = wait_for(lambda: rig.daemon.queue.read("SELECT id FROM messages"))
    wait_for(lambda: rig.daemon.chats.sent(str(message_id)).get(0, ("",))[0] == "failed")
    health = wait_for(
        lambda: (h := rig.daemon.chats.health("fambot")) and h.get("last_error") and h
    )
    assert health["last_error"] == "Telegram refused the reply: BadRequest: Chat not found"
