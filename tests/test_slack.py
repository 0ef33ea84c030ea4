"""The Slack channel against a fake Slack on loopback (tests/fakeslack.py: the Web API
methods it calls and the Socket Mode WebSocket), with the real daemon and queue and
runners on real Unix sockets (no engine needed). The fake is checked first by driving
it with slack_sdk's own clients: it is right when the SDK accepts it."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from orchestrator import wire
from orchestrator.channels.chatapp import ChatAppChannel
from orchestrator.channels.slack.kind import KIND, SlackOptions
from orchestrator.channels.slack.mrkdwn import markdown_to_mrkdwn, mrkdwn_pieces, slack_to_text
from orchestrator.cli import cli
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
from orchestrator.secrets import SecretRef
from orchestrator.store.messages import open_queue
from tests.chatrig import close_rig, wait_for
from tests.fakerunner import FakeRunner
from tests.fakeslack import BOT_USER, TEAM, FakeSlack

SlackChannel = ChatAppChannel.of_kind(KIND)
BOT_TOKEN = "xoxb-1111-2222-fakeBotTokenForTests"
APP_TOKEN = "xapp-1-A0HELPER-3333-fakeAppTokenForTests"
ALICE, BOB = "U0ALICE", "U0BOB"
DM, CHANNEL = "D0ALICE", "C0FAMILY"


def answer(conn: socket.socket, request: dict[str, Any]) -> None:
    """The group's runner: echoes, or answers long or in Markdown when asked."""
    turn = request["turn"]
    text = turn["text"]
    if text.startswith("long"):
        reply = "\n\n".join(f"Paragraph {i}: " + "word " * 60 for i in range(30))
    elif text.startswith("markdown"):
        reply = "**bold** and `code` and <!channel> & [a link](https://example.org)"
    else:
        reply = f"echo: {text}"
    wire.send_frame(conn, {"ok": True, "turn_id": turn["turn_id"], "replies": [reply]})


@dataclass
class Rig:
    daemon: Daemon
    channel: ChatAppChannel
    server: FakeSlack
    runner: FakeRunner
    home: Home


def app_token() -> SecretRef:
    return SecretRef("SLACK_APP", None, "app_token_env", "app_token_secret")


def make_rig(
    home: Path, monkeypatch: pytest.MonkeyPatch, server: FakeSlack, **settings: Any
) -> Rig:
    monkeypatch.setenv("SLACK_BOT", BOT_TOKEN)
    monkeypatch.setenv("SLACK_APP", APP_TOKEN)
    h = Home(home)
    store = GroupStore(h)
    if not (store.root / "fam").exists():
        store.add(GroupConfig(name="fam", creators=(f"slack:{TEAM}:{ALICE}",)))
    rate = {k: settings.pop(k) for k in ("rate_messages", "rate_seconds") if k in settings}
    definition = ChannelAccount(
        "team",
        "slack",
        token_env="SLACK_BOT",
        options=SlackOptions(api_url=server.api_url, app_token=app_token(), **settings),
        **rate,
    )
    config = OrchestratorConfig(
        project="t", mount_allowlist=home / "none.yaml", channel_accounts={"team": definition}
    )
    runtime = GroupRuntime(h, config, FakeBackend(), lambda: "img:1", ready=lambda _: True)
    runner = FakeRunner(h.runtime_dir("fam") / "runner.sock", answer)
    daemon = Daemon(h, config, runtime, open_queue(h), concurrency=2)
    daemon.start()
    before = server.connections
    channel = SlackChannel(daemon)
    channel.start()
    wait_for(lambda: server.connections > before and not server.sockets[-1].closed)
    return Rig(daemon, channel, server, runner, h)


@pytest.fixture
def server() -> Iterator[FakeSlack]:
    fake = FakeSlack(BOT_TOKEN, APP_TOKEN)
    yield fake
    fake.close()


@pytest.fixture
def rig(home: Path, monkeypatch: pytest.MonkeyPatch, server: FakeSlack) -> Iterator[Rig]:
    made = make_rig(home, monkeypatch, server)
    yield made
    close_rig(made)


def bind(rig: Rig, chat: str, **kw: Any) -> None:
    rig.daemon.chats.bind("team", chat, "fam", **kw)


# the fake, as the SDK sees it


def test_the_fake_speaks_the_web_api_as_slack_sdk_reads_it(server: FakeSlack) -> None:
    from slack_sdk.errors import SlackApiError
    from slack_sdk.web.async_client import AsyncWebClient

    async def drive() -> None:
        web = AsyncWebClient(token=BOT_TOKEN, base_url=server.api_url, retry_handlers=[])
        auth = await web.auth_test()
        assert (auth["user_id"], auth["team_id"]) == (BOT_USER, TEAM)
        posted = await web.chat_postMessage(channel=DM, text="hi", thread_ts="1700000000.000100")
        assert posted["ok"] and posted["message"]["thread_ts"] == "1700000000.000100"
        opened = await web.apps_connections_open(app_token=APP_TOKEN)
        assert str(opened["url"]).startswith("ws://127.0.0.1:")
        wrong = AsyncWebClient(token="xoxb-wrong", base_url=server.api_url)
        for call, error in (
            (lambda: web.apps_connections_open(app_token=BOT_TOKEN), "not_allowed_token_type"),
            (wrong.auth_test, "invalid_auth"),
            (lambda: web.api_call("chat.postMessage", json={"channel": DM}), "no_text"),
            (
                lambda: web.chat_postMessage(channel=DM, text="x", thread_ts="today"),
                "invalid_thread_ts",
            ),
            (lambda: web.chat_postMessage(channel=DM, text="x" * 40_001), "msg_too_long"),
            (lambda: web.chat_postMessage(channel=DM, text="x", as_user=True), "invalid_arguments"),
        ):  # fmt: skip
            with pytest.raises(SlackApiError) as refused:
                await call()
            assert refused.value.response["error"] == error
        server.fail(
            "chat.postMessage", 429, {"ok": False, "error": "ratelimited"}, {"Retry-After": "7"}
        )
        with pytest.raises(SlackApiError) as limited:
            await web.chat_postMessage(channel=DM, text="x")
        assert limited.value.response.status_code == 429
        assert limited.value.response.headers["Retry-After"] == "7"

    asyncio.run(drive())
    for call in server.calls:
        assert BOT_TOKEN not in repr(call.params)  # the token travels in the header only


def test_the_fake_speaks_socket_mode_as_slack_sdk_reads_it(server: FakeSlack) -> None:
    from slack_sdk.socket_mode.aiohttp import SocketModeClient
    from slack_sdk.socket_mode.response import SocketModeResponse
    from slack_sdk.web.async_client import AsyncWebClient

    async def drive() -> list[Any]:
        got: list[Any] = []

        async def listener(client: Any, request: Any) -> None:
            got.append(request)
            await client.send_socket_mode_response(SocketModeResponse(request.envelope_id))

        client = SocketModeClient(
            APP_TOKEN, web_client=AsyncWebClient(token=BOT_TOKEN, base_url=server.api_url)
        )
        client.socket_mode_request_listeners.append(listener)
        await client.connect()  # type: ignore[no-untyped-call]
        await asyncio.to_thread(server.say, DM, ALICE, "hello")
        while not got:
            await asyncio.sleep(0.02)
        await asyncio.to_thread(server.disconnect)  # the SDK opens a new link and goes on
        while server.connections < 2:
            await asyncio.sleep(0.02)
        await asyncio.to_thread(server.say, DM, ALICE, "after the refresh")
        while len(got) < 2:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)
        await client.close()  # type: ignore[no-untyped-call]
        return got

    got = asyncio.run(drive())
    assert [r.type for r in got] == ["events_api", "events_api"]
    assert [r.payload["event"]["text"] for r in got] == ["hello", "after the refresh"]
    assert got[0].retry_attempt == 0 and got[0].payload["event_id"].startswith("Ev")
    assert server.acks == [r.envelope_id for r in got] and server.unknown_acks == []
    assert len(server.calls_of("apps.connections.open")) == 2


# the channel


def test_a_direct_message_round_trip(rig: Rig) -> None:
    bind(rig, DM)
    envelope = rig.server.push(rig.server.message(DM, ALICE, "hello there"))
    [post] = wait_for(lambda: rig.server.posted(DM))
    assert post.params["text"] == "echo: hello there" and post.params.get("thread_ts") is None
    assert post.params["mrkdwn"] is True and post.token == BOT_TOKEN
    [turn] = rig.runner.turns
    assert (turn["sender"], turn["trust"], turn["channel"]) == (
        f"slack:{TEAM}:{ALICE}",
        "creator",
        "slack:team",
    )
    assert envelope in rig.server.acks
    health = wait_for(lambda: (h := rig.daemon.chats.health("team")) and h["messages_out"] and h)
    assert (health["state"], health["bot"]) == ("connected", "helper")
    assert BOT_TOKEN not in str(health) and APP_TOKEN not in str(health)


def test_mention_activation_in_a_channel(rig: Rig) -> None:
    bind(rig, CHANNEL, activation="mention")
    rig.server.say(CHANNEL, BOB, "just chatting", channel_type="channel")
    # A mention comes twice: as a message (the app reads the channel) and as app_mention.
    asked = f"<@{BOT_USER}> what is for dinner?"
    mention = rig.server.message(CHANNEL, BOB, asked, channel_type="channel")
    rig.server.push(mention)
    rig.server.push(rig.server.mention_of(mention))
    # An app subscribed to app_mention only gets that one.
    only = rig.server.message(CHANNEL, BOB, f"<@{BOT_USER}> and you?", channel_type="channel")
    rig.server.push(rig.server.mention_of(only))
    wait_for(lambda: len(rig.server.posted(CHANNEL)) == 2)
    time.sleep(0.5)
    assert [(t["text"], t["said"]) for t in rig.runner.turns] == [
        ("what is for dinner?", f"@{BOT_USER} what is for dinner?"),
        ("and you?", f"@{BOT_USER} and you?"),
    ]
    assert [t["trust"] for t in rig.runner.turns] == ["member", "member"]
    assert len(rig.server.posted()) == 2


def test_activation_always_and_a_reply_in_a_thread_the_bot_started(rig: Rig) -> None:
    bind(rig, CHANNEL, activation="always", trust="guest")
    rig.server.say(CHANNEL, BOB, "no mention at all", channel_type="channel")
    wait_for(lambda: rig.server.posted(CHANNEL))
    assert rig.runner.turns[0]["trust"] == "guest"
    bind(rig, CHANNEL, activation="mention")
    root = rig.server.posted(CHANNEL)[0].params["ts"]
    rig.server.say(
        CHANNEL, BOB, "about that", channel_type="channel", thread_ts=root, parent_user_id=BOT_USER
    )
    wait_for(lambda: len(rig.server.posted(CHANNEL)) == 2)
    assert rig.runner.turns[1]["text"] == "about that"


def test_threads_are_threads_and_replies_go_into_them(rig: Rig) -> None:
    set_option(rig.home.groups_dir / "fam" / "group.yaml", "session_mode", "per-thread")
    bind(rig, CHANNEL, activation="always")
    root = rig.server.say(CHANNEL, BOB, "top level", channel_type="channel")
    rig.server.say(CHANNEL, BOB, "in the thread", channel_type="channel", thread_ts=root)
    rig.server.say(CHANNEL, BOB, "another", channel_type="channel", thread_ts="1700000000.000009")
    wait_for(lambda: len(rig.server.posted(CHANNEL)) == 3)
    by_text = {c.params["text"]: c.params.get("thread_ts") for c in rig.server.posted()}
    assert by_text == {
        "echo: top level": None,
        "echo: in the thread": root,
        "echo: another": "1700000000.000009",
    }
    sessions = {r[0] for r in rig.daemon.queue.read("SELECT session FROM messages")}
    assert len(sessions) == 3


def test_a_long_reply_is_split_under_slacks_limit_in_its_thread(rig: Rig) -> None:
    bind(rig, DM)
    root = "1700000000.000042"
    rig.server.say(DM, ALICE, "long answer please", thread_ts=root)
    wait_for(lambda: len(rig.server.posted(DM)) >= 3)
    time.sleep(0.3)
    pieces = [c.params for c in rig.server.posted(DM)]
    assert all(len(p["text"]) <= 4000 for p in pieces)
    assert all(p["text"].startswith("Paragraph ") and p["thread_ts"] == root for p in pieces)
    assert "\n\n".join(p["text"] for p in pieces).count("Paragraph ") == 30


def test_a_429_is_waited_out_for_its_retry_after(rig: Rig) -> None:
    bind(rig, DM)
    rig.server.fail(
        "chat.postMessage", 429, {"ok": False, "error": "ratelimited"}, {"Retry-After": "1"}
    )
    rig.server.say(DM, ALICE, "busy?")
    [posted] = wait_for(lambda: rig.server.posted(DM))
    first, second = rig.server.calls_of("chat.postMessage")
    assert second is posted and second.at - first.at >= 1.0
    assert posted.params["text"] == "echo: busy?"


def test_markdown_is_rendered_as_mrkdwn_with_everything_else_escaped(rig: Rig) -> None:
    bind(rig, DM)
    rig.server.say(DM, ALICE, "markdown please")
    [post] = wait_for(lambda: rig.server.posted(DM))
    assert post.params["text"] == (
        "*bold* and `code` and &lt;!channel&gt; &amp; <https://example.org|a link>"
    )


def test_a_redelivered_event_is_answered_once_even_after_a_restart(
    home: Path, monkeypatch: pytest.MonkeyPatch, server: FakeSlack
) -> None:
    rig = make_rig(home, monkeypatch, server)
    bind(rig, DM)
    first = server.push(server.message(DM, ALICE, "only once"))
    wait_for(lambda: server.posted(DM))
    again = server.redeliver(first)  # the ack was lost: Slack sends it again
    wait_for(lambda: again in server.acks)
    time.sleep(0.5)
    close_rig(rig)
    rig = make_rig(home, monkeypatch, server)  # a new daemon remembers it too
    try:
        later = server.redeliver(again)
        wait_for(lambda: later in server.acks)
        time.sleep(0.5)
        assert rig.daemon.queue.read("SELECT COUNT(*) FROM messages") == [(1,)]
        assert len(server.posted(DM)) == 1
        assert server.sent_envelopes[later]["retry_attempt"] == 2
    finally:
        close_rig(rig)


def test_a_refreshed_or_dropped_connection_is_made_again(rig: Rig) -> None:
    bind(rig, DM)
    rig.server.disconnect("refresh_requested")
    wait_for(lambda: rig.server.connections == 2 and rig.server.sockets[0].closed)
    rig.server.say(DM, ALICE, "after the refresh")
    wait_for(lambda: rig.server.posted(DM))
    rig.server.drop()
    wait_for(lambda: rig.server.connections == 3, timeout=30)
    rig.server.say(DM, ALICE, "after the drop")
    wait_for(lambda: len(rig.server.posted(DM)) == 2)
    assert [c.params["text"] for c in rig.server.posted(DM)] == [
        "echo: after the refresh",
        "echo: after the drop",
    ]


def test_an_unbound_conversation_gets_a_code_once_and_reaches_nothing(rig: Rig) -> None:
    for text in ("hello?", "anyone?"):
        rig.server.say(DM, ALICE, text)
    wait_for(lambda: rig.server.posted(DM))
    time.sleep(0.5)
    [notice] = rig.server.posted(DM)
    assert notice.params["text"].startswith("This conversation is not connected")
    [pairing] = rig.daemon.chats.pairings()
    assert pairing.code in notice.params["text"]
    assert (pairing.chat, pairing.requested_by) == (DM, f"slack:{TEAM}:{ALICE}")
    assert rig.runner.turns == []
    rig.daemon.chats.approve(pairing.code, "fam")
    rig.server.say(DM, ALICE, "now?")
    wait_for(lambda: len(rig.server.posted(DM)) == 2)
    assert rig.server.posted(DM)[1].params["text"] == "echo: now?"


def test_edits_and_other_apps_start_no_turn(rig: Rig) -> None:
    bind(rig, DM)
    rig.server.push(rig.server.message(DM, ALICE, "edited", subtype="message_changed"))
    other_app = rig.server.message(DM, ALICE, "from an app", subtype="bot_message")
    rig.server.push(other_app)
    own = rig.server.message(DM, BOT_USER, "my own")
    rig.server.push(own)
    rig.server.say(DM, ALICE, "real")
    wait_for(lambda: rig.server.posted(DM))
    time.sleep(0.3)
    assert [t["text"] for t in rig.runner.turns] == ["real"]


def test_files_are_stored_safely_and_an_oversized_one_refused(
    home: Path, monkeypatch: pytest.MonkeyPatch, server: FakeSlack
) -> None:
    rig = make_rig(home, monkeypatch, server, attachments_max_bytes=1000)
    try:
        bind(rig, DM)
        pdf = server.add_file("F1", "../../etc/passwd\n.pdf", "application/pdf", b"%PDF-1.4 tiny")
        server.say(DM, ALICE, "read this", files=[pdf])
        wait_for(lambda: rig.runner.turns)
        files = home / "groups" / "fam" / "files" / "inbox"
        [stored] = list(files.iterdir())
        assert stored.read_bytes() == b"%PDF-1.4 tiny" and stored.suffix == ".pdf"
        text = rig.runner.turns[0]["text"]
        assert text.startswith("read this\n\n[document: files/inbox/" + stored.name)
        assert "it could not be read as a PDF" in text  # the core read it: a PDF in name only
        assert '"../../etc/passwd.pdf"' in text
        [download] = server.calls_of("file")
        assert download.token == BOT_TOKEN
        # Over the limit: refused politely, never downloaded, never a turn.
        big = server.add_file("F2", "big.bin", "application/octet-stream", b"x" * 5000)
        server.say(DM, ALICE, "and this", files=[big])
        wait_for(lambda: any("up to" in c.params["text"] for c in server.posted(DM)))
        assert len(server.calls_of("file")) == 1 and len(rig.runner.turns) == 1
        # A file said to be elsewhere never gets the token.
        elsewhere = {**pdf, "url_private_download": "http://127.0.0.2:9/steal"}
        elsewhere["url_private"] = elsewhere["url_private_download"]
        server.say(DM, ALICE, "and that", files=[elsewhere])
        time.sleep(1.0)
        assert len(server.calls_of("file")) == 1 and len(rig.runner.turns) == 1
    finally:
        close_rig(rig)


def test_doctor_names_a_missing_app_token(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.service.doctor import FAIL, check_channels

    (home / "orchestrator.yaml").write_text(
        "channels:\n  team:\n    kind: slack\n    bot_token_env: SLACK_BOT\n"
        "    app_token_env: SLACK_APP_MISSING\n"
    )
    monkeypatch.setenv("SLACK_BOT", BOT_TOKEN)
    monkeypatch.delenv("SLACK_APP_MISSING", raising=False)
    [check] = check_channels(Home(home))
    assert check.status == FAIL
    assert "'team': environment variable SLACK_APP_MISSING is not set" in check.detail


# configuration and the command line


def run(home: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--home", str(home), *args])
    return result.exit_code, result.output


def test_channel_add_slack_takes_its_two_tokens(home: Path) -> None:
    code, out = run(home, "channel", "add", "slack", "team", "--bot-token-env", "B")
    assert code == 2 and "give app_token_env or app_token_secret" in out
    assert (
        not (home / "orchestrator.yaml").exists()
        or "team" not in load_config(Home(home)).channel_accounts
    )
    code, out = run(home, "channel", "add", "slack", "team", "--token-env", "B")
    assert code == 2 and "a slack account's secret is its bot_token" in out
    code, out = run(
        home, "channel", "add", "slack", "team", "--bot-token-env", "B", "--app-token-secret", "a"
    )
    assert code == 0 and "(slack, bot_token: env B)" in out, out
    account = load_config(Home(home)).channel_accounts["team"]
    assert account.options.app_token.secret == "a" and account.token.env == "B"
    listing = run(home, "channel", "list", "--json")[1]
    assert '"app_token": "secret a"' in listing
    code, out = run(
        home, "channel", "add", "telegram", "bot", "--token-env", "T", "--app-token-env", "A"
    )
    assert code == 2 and "--app-token-env is for slack accounts, not telegram" in out
    (home / "orchestrator.yaml").write_text("channels:\n  t:\n    kind: slack\n    token_env: X\n")
    with pytest.raises(InvalidConfig, match="unknown key; valid keys here: api_url, app_token_env"):
        load_config(Home(home))


def test_a_bridge_token_may_not_name_slack_senders(home: Path) -> None:
    assert "slack:" in reserved_prefixes()
    (home / "orchestrator.yaml").write_text(
        "http:\n  tokens:\n    b:\n      token_env: X\n      senders: 'slack:'\n"
    )
    with pytest.raises(InvalidConfig, match="rename the bridge's prefix, such as 'slack-bridge:'"):
        load_config(Home(home))


# text both ways


def test_markdown_becomes_mrkdwn_and_nothing_else_is_read_as_markup() -> None:
    assert markdown_to_mrkdwn("# Plan\n- **one** & _two_\n* ~~three~~") == (
        "*Plan*\n\u2022 *one* &amp; _two_\n\u2022 ~three~"
    )
    assert markdown_to_mrkdwn("<@U1> <!here> <https://evil|x>") == (
        "&lt;@U1&gt; &lt;!here&gt; &lt;https://evil|x&gt;"
    )
    assert markdown_to_mrkdwn("[a|b](https://x.org/?q=1&r=2)") == (
        "<https://x.org/?q=1&amp;r=2|a\u2758b>"
    )
    assert markdown_to_mrkdwn("```py\nif a < b:\n    pass\n```") == (
        "```\nif a &lt; b:\n    pass\n```"
    )
    # escapes make a piece longer: it is cut smaller, never sent over the limit
    pieces = mrkdwn_pieces("<" * 3000 + "\n\n" + "&" * 3000)
    assert all(len(p) <= 4000 for p in pieces) and "".join(pieces).count("&lt;") == 3000


def test_what_slack_sends_is_read_as_plain_text() -> None:
    assert (
        slack_to_text("<@U0HELPER> see <https://x.org|the site>, <#C1|general> &amp; <!here> &lt;3")
        == "@U0HELPER see the site (https://x.org), #general & @here <3"
    )
    assert slack_to_text("<https://x.org> <mailto:a@b.c|a@b.c> <!subteam^S1|@ops>") == (
        "https://x.org a@b.c (mailto:a@b.c) @ops"
    )
