"""The Telegram adapter (orchestrator/channels/telegram/adapter.py) driven directly
against the fake Bot API on loopback (tests/faketelegram.py), with the account's state in
a real ChatStore: the exact calls it makes (methods, parameters), how it reads updates
into the core's messages, the limits at their boundaries, and the waits it takes (as
numbers: no test waits them out)."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import httpx
import pytest
from telegram import Update
from telegram.error import BadRequest, NetworkError, RetryAfter, TelegramError, TimedOut

from orchestrator.channels.chatapp.adapter import RETRY, OutgoingFile, Received, Refusal
from orchestrator.channels.telegram import adapter as module
from orchestrator.channels.telegram.adapter import TelegramAdapter
from orchestrator.channels.telegram.kind import TelegramOptions
from orchestrator.errors import DaemonStopping, OrchestratorError
from orchestrator.home import Home
from orchestrator.secrets import SecretRef
from orchestrator.store.chats import FAILED, UNKNOWN, ChatStore
from orchestrator.store.messages import open_queue
from tests.adaptercore import StubCore, run_until
from tests.faketelegram import BOT_ID, BOT_USERNAME, FakeTelegram
from tests.test_telegram import ALICE, BOB, FORUM, GROUP_CHAT, PRIVATE, TOKEN

ALLOWED = ["message", "edited_message", "my_chat_member"]
FROM_BOT = {"id": BOT_ID, "is_bot": True, "first_name": "Helper", "username": BOT_USERNAME}


@pytest.fixture
def server() -> Iterator[FakeTelegram]:
    fake = FakeTelegram(TOKEN)
    yield fake
    fake.close()


@pytest.fixture
def chats(tmp_path: Path) -> Iterator[ChatStore]:
    queue = open_queue(Home(tmp_path))
    yield ChatStore(queue)
    queue.close()


Body = Callable[[TelegramAdapter, StubCore], Awaitable[Any]]


def drive(
    server: FakeTelegram, chats: ChatStore, body: Body, root: Path | None = None, **options: Any
) -> Any:
    """``body`` with an adapter connected to the fake server (closed after it)."""

    async def main() -> Any:
        core = StubCore(
            TelegramOptions(api_url=server.url, **options), "telegram:", chats, TOKEN, root
        )
        made = TelegramAdapter(cast(Any, core))
        await made.connect()
        try:
            return await body(made, core)
        finally:
            await made.close()

    return asyncio.run(main())


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The adapter's own asyncio.sleep calls, recorded and not waited."""
    seen: list[float] = []
    real = asyncio.sleep

    async def sleep(seconds: float, *args: Any) -> Any:
        if sys._getframe(1).f_globals.get("__name__") != module.__name__:
            return await real(seconds, *args)
        seen.append(seconds)
        return await real(0)

    monkeypatch.setattr(module.asyncio, "sleep", sleep)
    return seen


def ok(result: Any) -> tuple[int, dict[str, Any]]:
    return 200, {"ok": True, "result": result}


def retry_after(seconds: int) -> dict[str, Any]:
    return {
        "ok": False,
        "error_code": 429,
        "description": f"Too Many Requests: retry after {seconds}",
        "parameters": {"retry_after": seconds},
    }


def message(chat: dict[str, Any], **fields: Any) -> dict[str, Any]:
    base = {
        "message_id": 42,
        "date": 1764669600,
        "chat": chat,
        "from": {"id": ALICE, "is_bot": False, "first_name": "Alice"},
    }
    return {**base, **fields}


def update(**fields: Any) -> Update:
    return Update.de_json({"update_id": 900001, **fields}, None)


def received(made: TelegramAdapter, msg: dict[str, Any]) -> Received:
    return Received("c", "s", "t", "1", "1", raw=update(message=msg).message)


# the values it reads


def test_retry_after_and_durations_are_read_as_seconds() -> None:
    assert module.retry_seconds(RetryAfter(dt.timedelta(seconds=90))) == 90.0
    assert module.retry_seconds(type("E", (), {"retry_after": 7})()) == 7.0
    assert module._seconds(dt.timedelta(milliseconds=2500)) == 2.5
    assert module._seconds(3) == 3.0 and module._seconds(1.5) == 1.5
    assert module._seconds(None) is None and module._seconds("3") is None


def test_a_topic_is_a_whole_number_or_none() -> None:
    assert module._topic("5") == 5 and module._topic("-12") == -12
    for thread in (None, "", "5a", "a5", "1.5", "$event:server"):
        assert module._topic(thread) is None


# connecting


def test_the_bot_is_made_for_the_api_url_with_its_timeouts(
    server: FakeTelegram, chats: ChatStore
) -> None:
    async def body(made: TelegramAdapter, core: StubCore) -> None:
        assert made.bot is not None
        assert made.bot.base_url == f"{server.url}/bot{TOKEN}"
        assert made.bot.base_file_url == f"{server.url}/file/bot{TOKEN}"
        polls, sends = (cast(Any, r)._client_kwargs for r in made.bot._request)
        assert polls["timeout"] == httpx.Timeout(connect=10, read=40, write=5, pool=1)
        assert polls["limits"].max_connections == 1
        assert sends["timeout"] == httpx.Timeout(connect=10, read=30, write=30, pool=1)
        assert sends["limits"].max_connections == 8

    drive(server, chats, body)
    assert [c.method for c in server.calls] == ["getMe"]


def test_without_an_api_url_the_bot_talks_to_telegram(chats: ChatStore) -> None:
    core = StubCore(TelegramOptions(), "telegram:", chats, TOKEN)
    bot = TelegramAdapter(cast(Any, core))._make_bot()
    assert bot.base_url == f"https://api.telegram.org/bot{TOKEN}"
    assert bot.base_file_url == f"https://api.telegram.org/file/bot{TOKEN}"


def test_the_token_is_read_from_the_secrets_file(chats: ChatStore, tmp_path: Path) -> None:
    secrets = tmp_path / "secrets.yaml"
    secrets.write_text(f"telegram_bot: '{TOKEN}'\n")
    secrets.chmod(0o600)
    core = StubCore(TelegramOptions(), "telegram:", chats, "unused")
    core.account.token = SecretRef(None, "telegram_bot", "token_env", "token_secret")
    core.daemon.config = SimpleNamespace(secrets_file=secrets)
    bot = TelegramAdapter(cast(Any, core))._make_bot()
    assert bot.token == TOKEN
    assert bot.base_url == f"https://api.telegram.org/bot{TOKEN}"


@pytest.mark.parametrize("read_all", [True, False])
def test_connect_names_the_bot_and_its_privacy_mode(chats: ChatStore, read_all: bool) -> None:
    fake = FakeTelegram(TOKEN, can_read_all_group_messages=read_all)
    core = StubCore(TelegramOptions(api_url=fake.url), "telegram:", chats, TOKEN)
    made = TelegramAdapter(cast(Any, core))

    async def main() -> str:
        try:
            return await made.connect()
        finally:
            await made.close()

    try:
        assert made.name == "fuzzbot"
        assert asyncio.run(main()) == f"@{BOT_USERNAME}"
        assert core.health.bot == BOT_USERNAME
        assert core.health.can_read_all_group_messages is read_all
    finally:
        fake.close()


# reading updates


def test_the_poll_asks_for_its_updates_and_commits_each_offset(
    server: FakeTelegram, chats: ChatStore
) -> None:
    first = server.push({"message": server.message(PRIVATE, ALICE, "one")})
    server.say(PRIVATE, ALICE, "two")

    async def body(made: TelegramAdapter, core: StubCore) -> None:
        await run_until(made.receive(), lambda: len(server.calls_of("getUpdates")) >= 2)

    drive(server, chats, body)
    polls = server.calls_of("getUpdates")
    assert "offset" not in polls[0].params  # nothing committed yet: from the oldest
    assert int(polls[0].params["timeout"]) == 25
    assert polls[0].params["allowed_updates"] == ALLOWED
    assert int(polls[1].params["offset"]) == first + 2
    assert chats.get_state("fuzzbot", "offset") == str(first + 2)


def test_the_poll_starts_from_the_committed_offset(server: FakeTelegram, chats: ChatStore) -> None:
    chats.set_state("fuzzbot", "offset", "1007")

    async def body(made: TelegramAdapter, core: StubCore) -> None:
        await run_until(made.receive(), lambda: server.calls_of("getUpdates"))

    drive(server, chats, body)
    assert int(server.calls_of("getUpdates")[0].params["offset"]) == 1007


def test_each_batch_read_is_a_poll_and_a_health_save(
    server: FakeTelegram, chats: ChatStore
) -> None:
    server.say(PRIVATE, ALICE, "one")

    async def body(made: TelegramAdapter, core: StubCore) -> tuple[int, int, list[Any]]:
        await run_until(made.receive(), lambda: core.saves)
        return core.polls, core.saves, core.routed

    polls, saves, routed = drive(server, chats, body)
    assert (polls, saves) == (1, 1) and [r.text for r in routed] == ["one"]


def test_a_429_on_the_poll_waits_its_retry_after_capped_at_ten_minutes(
    server: FakeTelegram, chats: ChatStore, waits: list[float]
) -> None:
    server.fail("getUpdates", 429, retry_after(7))
    server.fail("getUpdates", 429, retry_after(5000))
    server.say(PRIVATE, ALICE, "after")

    async def body(made: TelegramAdapter, core: StubCore) -> list[Any]:
        await run_until(made.receive(), lambda: core.routed)
        return core.failed

    assert drive(server, chats, body) == []
    assert waits[:2] == [7.0, 600.0]


def test_a_failed_poll_is_reported_with_a_backoff_reset_by_a_good_one(
    server: FakeTelegram, chats: ChatStore
) -> None:
    bad = (502, {"ok": False, "error_code": 502, "description": "Bad Gateway"})
    server.fail("getUpdates", *bad)
    server.fail("getUpdates", *bad)
    server.say(PRIVATE, ALICE, "between")

    async def body(made: TelegramAdapter, core: StubCore) -> list[Any]:
        real = core.route

        async def route(r: Received) -> None:
            await real(r)
            server.fail("getUpdates", *bad)  # the poll after this batch fails again

        core.route = route  # type: ignore[method-assign]
        await run_until(made.receive(), lambda: len(core.failed) >= 3)
        return core.failed

    failed = drive(server, chats, body)
    assert [(what, wait) for what, _, wait in failed[:3]] == [
        ("getUpdates", 1.0),
        ("getUpdates", 2.0),
        ("getUpdates", 1.0),
    ]
    assert failed[0][1] == "NetworkError: Bad Gateway"


def test_an_update_the_queue_does_not_take_is_read_again_uncommitted(
    server: FakeTelegram, chats: ChatStore
) -> None:
    first = server.push({"message": server.message(PRIVATE, ALICE, "full disk")})
    server.say(PRIVATE, ALICE, "next")

    async def body(made: TelegramAdapter, core: StubCore) -> list[Any]:
        tries: list[str] = []

        async def route(r: Received) -> None:
            tries.append(r.text)
            if len(tries) == 1:
                raise OrchestratorError("the disk is full")
            core.routed.append(r)

        core.route = route  # type: ignore[method-assign]
        await run_until(made.receive(), lambda: len(core.routed) >= 2)
        return [tries, core.unqueued]

    tries, unqueued = drive(server, chats, body)
    # the batch stopped at the update: the one after it waited for it
    assert tries[:3] == ["full disk", "full disk", "next"]
    assert unqueued == [(f"update {first}", "the disk is full", 1.0)]
    assert int(server.calls_of("getUpdates")[1].params.get("offset") or 0) in (0, first)


def test_a_stop_leaves_the_update_uncommitted(server: FakeTelegram, chats: ChatStore) -> None:
    server.say(PRIVATE, ALICE, "one")

    async def body(made: TelegramAdapter, core: StubCore) -> Any:
        async def route(r: Received) -> None:
            raise DaemonStopping("stopping")

        core.route = route  # type: ignore[method-assign]
        return await asyncio.wait_for(made.receive(), 10)

    assert drive(server, chats, body) is None
    assert chats.get_state("fuzzbot", "offset") is None
    assert len(server.calls_of("getUpdates")) == 1


def test_an_update_that_fails_otherwise_is_skipped_and_committed(
    server: FakeTelegram, chats: ChatStore, caplog: pytest.LogCaptureFixture
) -> None:
    first = server.push({"message": server.message(PRIVATE, ALICE, "breaks")})
    server.say(PRIVATE, ALICE, "fine")

    async def body(made: TelegramAdapter, core: StubCore) -> list[str]:
        async def route(r: Received) -> None:
            if r.text == "breaks":
                raise ValueError("a bug")
            core.routed.append(r)

        core.route = route  # type: ignore[method-assign]
        # the offset is committed after the update is routed: wait for both
        await run_until(
            made.receive(),
            lambda: core.routed and chats.get_state("fuzzbot", "offset") == str(first + 2),
        )
        return [r.text for r in core.routed]

    with caplog.at_level(logging.ERROR, logger="orchestrator.channels.telegram"):
        assert drive(server, chats, body) == ["fine"]
    assert f"Telegram account fuzzbot: update {first} could not be handled; skipped" in [
        r.getMessage() for r in caplog.records
    ]
    assert chats.get_state("fuzzbot", "offset") == str(first + 2)


def test_a_batch_the_library_cannot_read_is_read_apart(
    server: FakeTelegram, chats: ChatStore, caplog: pytest.LogCaptureFixture
) -> None:
    chats.set_state("fuzzbot", "offset", "500")
    good = {"update_id": 501, "message": message(PRIVATE, text="readable")}
    batch = [{"update_id": 500, "message": {"message_id": 1, "date": 1, "chat": {"id": 5}}}, good]
    server.fail("getUpdates", *ok(batch))
    server.fail("getUpdates", *ok(batch))

    async def body(made: TelegramAdapter, core: StubCore) -> list[str]:
        # the offset is committed after the batch is routed: wait for both
        await run_until(
            made.receive(),
            lambda: core.routed and chats.get_state("fuzzbot", "offset") == "502",
        )
        # the message read apart belongs to the bot, as one of a batch read whole does
        assert [r.raw.get_bot() for r in core.routed] == [made.bot]
        return [r.text for r in core.routed]

    with caplog.at_level(logging.WARNING, logger="orchestrator.channels.telegram"):
        assert drive(server, chats, body) == ["readable"]
    again = server.calls_of("getUpdates")[1].params
    assert {k: str(v) for k, v in again.items() if k != "allowed_updates"} == {
        "timeout": "0",
        "offset": "500",
    }
    assert again["allowed_updates"] == ALLOWED
    [warned] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned.startswith("Telegram account fuzzbot: update 500 could not be read (TypeError: ")
    assert warned.endswith("); skipped")  # what the library said, in the parentheses
    assert chats.get_state("fuzzbot", "offset") == "502"


def test_a_batch_read_apart_without_an_offset_asks_for_none(
    server: FakeTelegram, chats: ChatStore
) -> None:
    batch = [{"update_id": 9, "message": {"message_id": 1, "date": 1, "chat": {"id": 5}}}]
    server.fail("getUpdates", *ok(batch))
    server.fail("getUpdates", *ok(batch))

    async def body(made: TelegramAdapter, core: StubCore) -> None:
        await run_until(made.receive(), lambda: chats.get_state("fuzzbot", "offset"))

    drive(server, chats, body)
    assert "offset" not in server.calls_of("getUpdates")[1].params
    assert chats.get_state("fuzzbot", "offset") == "10"


@pytest.mark.parametrize(
    "again",
    [
        ok({"update_id": 9}),  # not a list
        ok([{"update_id": "9"}]),  # what to skip cannot be told
        ok([{"update_id": True}]),
        ok(["9"]),
        (500, {"ok": False, "error_code": 500, "description": "Internal"}),
    ],
)
def test_a_batch_that_cannot_be_read_apart_fails_the_poll(
    server: FakeTelegram, chats: ChatStore, again: tuple[int, dict[str, Any]]
) -> None:
    batch = [{"update_id": 9, "message": {"message_id": 1, "date": 1, "chat": {"id": 5}}}]
    for _ in range(2):
        server.fail("getUpdates", *ok(batch))
        server.fail("getUpdates", *again)

    async def body(made: TelegramAdapter, core: StubCore) -> list[Any]:
        await run_until(made.receive(), lambda: len(core.failed) >= 2)
        return core.failed

    # what failed is the library's reading of the batch; the poll goes on, backing off
    first, second = drive(server, chats, body)[:2]
    assert first == ("getUpdates", first[1], 1.0) and second == ("getUpdates", first[1], 2.0)
    assert first[1].startswith("TypeError: ")
    assert chats.get_state("fuzzbot", "offset") is None


# handling one update


def handled(made: TelegramAdapter, core: StubCore, data: dict[str, Any]) -> list[Received]:
    asyncio.run(made.handle(Update.de_json({"update_id": 900001, **data}, None)))
    return core.routed


@pytest.fixture
def bare(chats: ChatStore) -> tuple[TelegramAdapter, StubCore]:
    """An adapter that knows its bot, not connected."""
    from telegram import User

    core = StubCore(TelegramOptions(), "telegram:", chats, TOKEN)
    made = TelegramAdapter(cast(Any, core))
    made.me = User(BOT_ID, "Helper", is_bot=True, username=BOT_USERNAME)
    return made, core


def test_a_message_is_received_with_its_ids_text_and_chat(
    bare: tuple[TelegramAdapter, StubCore],
) -> None:
    made, core = bare
    [got] = handled(made, core, {"message": message(GROUP_CHAT, text="hello")})
    assert (got.chat, got.sender, got.text, got.message_id, got.event_id) == (
        "-100555",
        str(ALICE),
        "hello",
        "42",
        "900001",
    )
    assert (got.thread, got.group_chat, got.title) == (None, True, "Family")
    assert got.raw.message_id == 42


@pytest.mark.parametrize(
    ("chat", "group", "title"),
    [
        ({"id": -5, "type": "group", "title": "Old"}, True, "Old"),
        ({"id": 5, "type": "private", "first_name": "Al", "last_name": "B"}, False, "Al B"),
        ({"id": 5, "type": "private", "username": "al"}, False, "al"),
        ({"id": -9, "type": "channel"}, False, None),
    ],
)
def test_the_chat_type_and_title(
    bare: tuple[TelegramAdapter, StubCore], chat: dict[str, Any], group: bool, title: Any
) -> None:
    made, core = bare
    [got] = handled(made, core, {"message": message(chat, text="x")})
    assert (got.group_chat, got.title) == (group, title)


def test_a_caption_is_the_text_and_no_words_are_empty(
    bare: tuple[TelegramAdapter, StubCore],
) -> None:
    made, core = bare
    handled(made, core, {"message": message(PRIVATE, caption="look")})
    handled(made, core, {"message": message(PRIVATE, text="words", caption="ignored")})
    handled(made, core, {"message": message(PRIVATE)})
    assert [r.text for r in core.routed] == ["look", "words", ""]


def test_a_thread_is_a_forum_topic_only(bare: tuple[TelegramAdapter, StubCore]) -> None:
    made, core = bare
    handled(
        made,
        core,
        {"message": message(FORUM, text="t", message_thread_id=7, is_topic_message=True)},
    )
    # a reply in a group without topics carries a thread id too; it is no topic
    handled(made, core, {"message": message(GROUP_CHAT, text="r", message_thread_id=8)})
    handled(made, core, {"message": message(FORUM, text="g", is_topic_message=True)})
    assert [r.thread for r in core.routed] == ["7", None, None]


def test_edits_bots_and_senderless_messages_start_nothing(
    bare: tuple[TelegramAdapter, StubCore],
) -> None:
    made, core = bare
    handled(made, core, {"edited_message": {**message(PRIVATE, text="e"), "edit_date": 2}})
    handled(made, core, {"message": message(PRIVATE, text="b", **{"from": FROM_BOT})})
    without = message(GROUP_CHAT, text="c")
    del without["from"]
    handled(made, core, {"message": without})
    handled(made, core, {"message": message(GROUP_CHAT, migrate_from_chat_id=-5)})
    handled(made, core, {})
    assert core.routed == [] and core.pairing == []


def test_a_migration_moves_the_binding_and_routes_nothing(
    bare: tuple[TelegramAdapter, StubCore], chats: ChatStore
) -> None:
    made, core = bare
    chats.bind("fuzzbot", "-555", "fam")
    handled(
        made,
        core,
        {
            "message": message(
                {"id": -555, "type": "group", "title": "F"}, migrate_to_chat_id=-100999
            )
        },
    )
    assert chats.binding("fuzzbot", "-555") is None
    assert chats.binding("fuzzbot", "-100999") is not None
    assert core.routed == []


ADMIN_RIGHTS = (
    "can_be_edited",
    "is_anonymous",
    "can_manage_chat",
    "can_delete_messages",
    "can_manage_video_chats",
    "can_restrict_members",
    "can_promote_members",
    "can_change_info",
    "can_invite_users",
    "can_post_stories",
    "can_edit_stories",
    "can_delete_stories",
)


def status(name: str) -> dict[str, Any]:
    """The bot's ChatMember of that status, with the fields the Bot API sends for it."""
    fields: dict[str, Any] = {"status": name, "user": FROM_BOT}
    if name == "kicked":
        fields["until_date"] = 0
    if name == "administrator":
        fields.update(dict.fromkeys(ADMIN_RIGHTS, False))
    return fields


def member_change(chat: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    return {
        "my_chat_member": {
            "chat": chat,
            "date": 1,
            "from": {"id": BOB, "is_bot": False, "first_name": "Bob"},
            "old_chat_member": status(old),
            "new_chat_member": status(new),
        }
    }


@pytest.mark.parametrize(
    ("old", "new", "asked"),
    [
        ("left", "member", True),
        ("kicked", "administrator", True),
        ("left", "left", False),
        ("member", "administrator", False),
        ("member", "left", False),
        ("left", "kicked", False),
    ],
)
def test_being_added_to_a_group_asks_for_pairing(
    bare: tuple[TelegramAdapter, StubCore], old: str, new: str, asked: bool
) -> None:
    made, core = bare
    handled(made, core, member_change(GROUP_CHAT, old, new))
    assert core.pairing == ([("-100555", "Family", f"telegram:{BOB}", None)] if asked else [])


def test_being_added_to_a_bound_group_or_a_private_chat_asks_nothing(
    bare: tuple[TelegramAdapter, StubCore], chats: ChatStore
) -> None:
    made, core = bare
    chats.bind("fuzzbot", "-100555", "fam")
    handled(made, core, member_change(GROUP_CHAT, "left", "member"))
    handled(made, core, member_change(PRIVATE, "left", "member"))
    assert core.pairing == []
    untitled = {"id": -7, "type": "group", "username": "grp"}
    handled(made, core, member_change(untitled, "left", "member"))
    assert core.pairing == [("-7", "grp", f"telegram:{BOB}", None)]


# whether a group message is for the bot


def entity(kind: str, offset: int, length: int, **more: Any) -> dict[str, Any]:
    return {"type": kind, "offset": offset, "length": length, **more}


def reply(of: dict[str, Any], message_id: int = 40) -> dict[str, Any]:
    return {"message_id": message_id, "date": 1, "chat": GROUP_CHAT, "from": of, "text": "x"}


ANN = {"id": ALICE, "is_bot": False, "first_name": "Ann"}
HANDLE = f"@{BOT_USERNAME.upper()}"


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"text": "hi", "reply_to_message": reply(FROM_BOT)}, True),
        ({"text": "hi", "reply_to_message": reply(ANN)}, False),
        ({"text": "hi", "reply_to_message": {**reply(FROM_BOT), "from": None}}, False),
        # in a topic, every message replies to the topic's first one: that is no reply
        (
            {
                "text": "hi",
                "is_topic_message": True,
                "message_thread_id": 40,
                "reply_to_message": reply(FROM_BOT, 40),
            },
            False,
        ),
        (
            {
                "text": "hi",
                "is_topic_message": True,
                "message_thread_id": 40,
                "reply_to_message": reply(FROM_BOT, 41),
            },
            True,
        ),
        (
            {
                "text": "hi",
                "is_topic_message": True,
                "message_thread_id": 40,
                "reply_to_message": reply(ANN, 41),
            },
            False,
        ),
        ({"text": f"{HANDLE} hi", "entities": [entity("mention", 0, len(HANDLE))]}, True),
        ({"text": "@someone hi", "entities": [entity("mention", 0, 8)]}, False),
        ({"text": f"x {HANDLE}", "entities": [entity("bold", 2, len(HANDLE))]}, False),
        (
            {"text": f"/clear{HANDLE}", "entities": [entity("bot_command", 0, 6 + len(HANDLE))]},
            True,
        ),
        ({"text": "/clear@other_bot", "entities": [entity("bot_command", 0, 16)]}, False),
        ({"text": "/clear", "entities": [entity("bot_command", 0, 6)]}, False),
        ({"text": "Helper hi", "entities": [entity("text_mention", 0, 6, user=FROM_BOT)]}, True),
        ({"text": "Ann hi", "entities": [entity("text_mention", 0, 3, user=ANN)]}, False),
        (
            {
                "caption": f"{HANDLE} look",
                "caption_entities": [entity("mention", 0, len(HANDLE))],
                "photo": [{"file_id": "p", "file_unique_id": "u", "width": 1, "height": 1}],
            },
            True,
        ),
        (
            {
                "caption": "look",
                "photo": [{"file_id": "p", "file_unique_id": "u", "width": 1, "height": 1}],
            },
            False,
        ),
    ],
)
def test_a_group_message_is_for_the_bot_when_it_says_so(
    bare: tuple[TelegramAdapter, StubCore], fields: dict[str, Any], expected: bool
) -> None:
    made, _ = bare
    assert made.addressed(received(made, message(GROUP_CHAT, **fields))) is expected


def test_a_bot_unknown_or_without_a_username_is_not_mentioned(
    bare: tuple[TelegramAdapter, StubCore],
) -> None:
    from telegram import User

    made, _ = bare
    said = received(made, message(GROUP_CHAT, text="@ hi", entities=[entity("mention", 0, 1)]))
    command = received(
        made, message(GROUP_CHAT, text="/x@", entities=[entity("bot_command", 0, 3)])
    )
    assert made.mention_forms(said) == (f"@{BOT_USERNAME}",)
    made.me = User(BOT_ID, "Helper", is_bot=True)
    assert made.addressed(said) is False and made.addressed(command) is False
    for text, kind, length in (("@None hi", "mention", 5), ("/x@none", "bot_command", 7)):
        named = received(made, message(GROUP_CHAT, text=text, entities=[entity(kind, 0, length)]))
        assert made.addressed(named) is False
    assert made.mention_forms(said) == ()
    made.me = None
    replied = received(made, message(GROUP_CHAT, text="hi", reply_to_message=reply(FROM_BOT)))
    assert made.addressed(replied) is False
    assert made.mention_forms(replied) == ()
    fresh = TelegramAdapter(made.core)  # not connected: it knows no bot yet
    assert (fresh.me, fresh.bot) == (None, None)
    assert fresh.addressed(replied) is False and fresh.mention_forms(replied) == ()


# files received


def photo(file_id: str, size: int | None) -> dict[str, Any]:
    sized = {"file_size": size} if size is not None else {}
    return {"file_id": file_id, "file_unique_id": "u" + file_id, "width": 9, "height": 9, **sized}


def stored(
    server: FakeTelegram, chats: ChatStore, tmp_path: Path, msg: dict[str, Any], limit: int = 1000
) -> Any:
    (tmp_path / "fam").mkdir(exist_ok=True)

    async def body(made: TelegramAdapter, core: StubCore) -> Any:
        return await made.attachment(received(made, msg), "fam")

    return drive(server, chats, body, tmp_path, attachments_max_bytes=limit)


def test_the_largest_photo_under_the_limit_is_stored(
    server: FakeTelegram, chats: ChatStore, tmp_path: Path
) -> None:
    sizes = (("small", 10), ("middle", 500), ("fits", 1000), ("big", 1001))
    for file_id, size in sizes:
        server.add_file(file_id, b"p" * size)
    got = stored(server, chats, tmp_path, message(PRIVATE, photo=[photo(*size) for size in sizes]))
    assert server.calls_of("getFile")[0].params == {"file_id": "fits"}
    assert (got.mime, got.size, got.kind, got.label, got.original, got.duration) == (
        "image/jpeg",
        1000,
        "image",
        "photo",
        None,
        None,
    )
    assert got.name.endswith(".jpg")
    assert (tmp_path / "fam" / "files" / "inbox" / got.name).read_bytes() == b"p" * 1000


def test_photos_all_over_the_limit_are_refused_by_the_largest(
    server: FakeTelegram, chats: ChatStore, tmp_path: Path
) -> None:
    sizes = (("a", 2000), ("b", 3000), ("c", 3 * 1024**2))
    got = stored(server, chats, tmp_path, message(PRIVATE, photo=[photo(*size) for size in sizes]))
    assert got == Refusal("Sorry, that file is 3.0 MiB; I take files up to 1000 B.")
    assert server.calls_of("getFile") == []


def test_a_photo_of_unknown_size_is_taken(
    server: FakeTelegram, chats: ChatStore, tmp_path: Path
) -> None:
    server.add_file("p", b"jpeg")
    got = stored(server, chats, tmp_path, message(PRIVATE, photo=[photo("p", None)]))
    assert got.size == 4


def test_a_voice_note_is_stored_as_one_with_its_duration(
    server: FakeTelegram, chats: ChatStore, tmp_path: Path
) -> None:
    server.add_file("v", b"OggS")
    voice = {"file_id": "v", "file_unique_id": "uv", "duration": 3}
    got = stored(server, chats, tmp_path, message(PRIVATE, voice=voice))
    assert (got.mime, got.kind, got.label, got.duration, got.original) == (
        "audio/ogg",
        "voice",
        "voice note",
        3.0,
        None,
    )
    assert got.name.endswith(".ogg")
    got = stored(
        server, chats, tmp_path, message(PRIVATE, voice={**voice, "mime_type": "audio/mpeg"})
    )
    assert got.mime == "audio/mpeg"
    # a type the inbox has no extension for is stored as a voice note's
    odd = {**voice, "mime_type": "audio/x-unheard"}
    assert stored(server, chats, tmp_path, message(PRIVATE, voice=odd)).name.endswith(".ogg")


def test_an_audio_file_keeps_its_name_and_duration(
    server: FakeTelegram, chats: ChatStore, tmp_path: Path
) -> None:
    server.add_file("a", b"ID3")
    audio = {
        "file_id": "a",
        "file_unique_id": "ua",
        "duration": 61,
        "file_name": "song.mp3",
        "mime_type": "audio/mpeg",
        "file_size": 3,
    }
    got = stored(server, chats, tmp_path, message(PRIVATE, audio=audio))
    assert (got.mime, got.kind, got.label, got.duration, got.original) == (
        "audio/mpeg",
        "audio",
        "audio",
        61.0,
        "song.mp3",
    )
    unnamed = {"file_id": "a", "file_unique_id": "ua", "duration": 1}
    assert stored(server, chats, tmp_path, message(PRIVATE, audio=unnamed)).name.endswith(".mp3")


def test_a_document_keeps_its_name_and_type(
    server: FakeTelegram, chats: ChatStore, tmp_path: Path
) -> None:
    server.add_file("d", b"plain words")
    document = {
        "file_id": "d",
        "file_unique_id": "ud",
        "file_name": "notes.txt",
        "mime_type": "text/plain",
        "file_size": 11,
    }
    got = stored(server, chats, tmp_path, message(PRIVATE, document=document))
    assert (got.mime, got.label, got.duration, got.original, got.size) == (
        "text/plain",
        "document",
        None,
        "notes.txt",
        11,
    )
    bare = {"file_id": "d", "file_unique_id": "ud"}
    assert stored(server, chats, tmp_path, message(PRIVATE, document=bare)).name.endswith(".bin")


def test_a_message_without_a_file_has_no_attachment(
    server: FakeTelegram, chats: ChatStore, tmp_path: Path
) -> None:
    assert stored(server, chats, tmp_path, message(PRIVATE, text="words")) is None


@pytest.mark.parametrize(
    ("claimed", "data", "limit", "said"),
    [
        (1001, b"x" * 10, 1000, "Sorry, that file is 1001 B; I take files up to 1000 B."),
        # the size getFile tells (the fake's: the real length) when the message said none
        (None, b"x" * 1001, 1000, "Sorry, that file is 1001 B; I take files up to 1000 B."),
        (None, b"x", 0, "Sorry, I do not take files here."),
    ],
)
def test_a_file_over_the_limit_is_refused_before_its_download(
    server: FakeTelegram,
    chats: ChatStore,
    tmp_path: Path,
    claimed: Any,
    data: bytes,
    limit: int,
    said: str,
) -> None:
    server.add_file("d", data)
    document = {
        "file_id": "d",
        "file_unique_id": "ud",
        **({"file_size": claimed} if claimed else {}),
    }
    assert stored(server, chats, tmp_path, message(PRIVATE, document=document), limit) == (
        Refusal(said)
    )
    assert [c for c in server.calls if c.method == "file"] == []


def test_a_file_at_the_limit_is_taken_and_one_larger_than_getfile_said_is_not(
    server: FakeTelegram, chats: ChatStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.add_file("d", b"x" * 1000)
    document = {"file_id": "d", "file_unique_id": "ud", "file_size": 1000}
    assert stored(server, chats, tmp_path, message(PRIVATE, document=document)).size == 1000
    # the download is measured too, whatever the sizes said
    server.add_file("d", b"x" * 1001)
    original = server._m_getFile

    async def understated(params: dict[str, Any]) -> Any:
        return {**await original(params), "file_size": 10}

    monkeypatch.setattr(server, "_m_getFile", understated)
    assert stored(server, chats, tmp_path, message(PRIVATE, document=document)) == Refusal(
        "Sorry, that file is 1001 B; I take files up to 1000 B."
    )


def test_where_no_files_are_taken_none_is_asked_for_whatever_its_size(
    server: FakeTelegram, chats: ChatStore, tmp_path: Path
) -> None:
    server.add_file("d", b"x")
    server.add_file("e", b"")
    server.add_file("p", b"jpeg")
    refused = Refusal("Sorry, I do not take files here.")
    for document in (
        {"file_id": "d", "file_unique_id": "ud"},
        {"file_id": "e", "file_unique_id": "ue", "file_size": 0},
    ):
        assert stored(server, chats, tmp_path, message(PRIVATE, document=document), 0) == refused
    assert stored(server, chats, tmp_path, message(PRIVATE, photo=[photo("p", None)]), 0) == (
        refused
    )
    assert server.calls_of("getFile") == []
    assert [c for c in server.calls if c.method == "file"] == []


# sending


def sends(server: FakeTelegram) -> list[dict[str, Any]]:
    return [c.params for c in server.sent()]


def test_a_reply_is_html_threaded_to_the_message_it_answers(
    server: FakeTelegram, chats: ChatStore
) -> None:
    async def body(made: TelegramAdapter, core: StubCore) -> Any:
        return await made.send(str(ALICE), None, "12", "**hi**", "k")

    ids = drive(server, chats, body)
    assert sends(server) == [
        {
            "chat_id": str(ALICE),
            "text": "<b>hi</b>",
            "parse_mode": "HTML",
            "reply_parameters": {"message_id": 12, "allow_sending_without_reply": True},
        }
    ]
    assert ids == ["1"]


def test_a_reply_to_no_message_id_is_not_threaded_and_a_topic_is_named(
    server: FakeTelegram, chats: ChatStore
) -> None:
    async def body(made: TelegramAdapter, core: StubCore) -> Any:
        await made.send(str(ALICE), "7", "$not-a-number", "a", "k")
        await made.send(str(ALICE), "x7", None, "b", "k")

    drive(server, chats, body)
    assert sends(server) == [
        {"chat_id": str(ALICE), "text": "a", "parse_mode": "HTML", "message_thread_id": "7"},
        {"chat_id": str(ALICE), "text": "b", "parse_mode": "HTML"},
    ]


def test_a_reply_at_the_limit_is_one_message_and_over_it_two(
    server: FakeTelegram, chats: ChatStore
) -> None:
    async def body(made: TelegramAdapter, core: StubCore) -> Any:
        one = await made.send(str(ALICE), None, "5", "a" * 4096, "k")
        two = await made.send(str(ALICE), None, "5", "a" * 4000 + "\n\n" + "b" * 97, "k")
        return one, two

    one, two = drive(server, chats, body)
    assert len(one) == 1 and len(two) == 2
    texts = [p["text"] for p in sends(server)]
    assert texts == ["a" * 4096, "a" * 4000, "b" * 97]
    assert [("reply_parameters" in p) for p in sends(server)] == [True, True, False]


def test_a_refused_html_reply_is_sent_again_as_plain_text(
    server: FakeTelegram, chats: ChatStore
) -> None:
    server.reject_entities = 1

    async def body(made: TelegramAdapter, core: StubCore) -> Any:
        return await made.send(str(ALICE), "3", "8", "**x**", "k")

    assert drive(server, chats, body) == ["1"]
    html, plain = sends(server)
    assert html["parse_mode"] == "HTML"
    reply_to = {"message_id": 8, "allow_sending_without_reply": True}
    assert plain == {
        "chat_id": str(ALICE),
        "text": "**x**",
        "message_thread_id": "3",
        "reply_parameters": reply_to,
    }


def test_a_429_on_a_send_is_waited_out_and_sent_once(
    server: FakeTelegram, chats: ChatStore, waits: list[float]
) -> None:
    server.fail("sendMessage", 429, retry_after(3))
    server.fail("sendMessage", 429, retry_after(3600))

    async def body(made: TelegramAdapter, core: StubCore) -> Any:
        return await made.send(str(ALICE), None, None, "hi", "k")

    assert drive(server, chats, body) == ["1"]
    assert waits == [3.0, 600.0]
    assert len(server.sent()) == 3


def test_a_chat_that_moved_is_followed_and_its_binding_too(
    server: FakeTelegram, chats: ChatStore
) -> None:
    chats.bind("fuzzbot", "-556", "fam")
    server.migrated[-556] = -100998

    async def body(made: TelegramAdapter, core: StubCore) -> Any:
        return await made.send("-556", "7", "4", "one\n\n" + "x" * 4095, "k")

    assert drive(server, chats, body) == ["1", "2"]
    tried, moved, rest = sends(server)
    assert tried["chat_id"] == "-556"
    # sent again to the new chat, in the same topic
    assert moved == {
        "chat_id": "-100998",
        "text": "one",
        "parse_mode": "HTML",
        "message_thread_id": "7",
    }
    assert rest["chat_id"] == "-100998" and "reply_parameters" not in rest
    assert rest["message_thread_id"] == "7"
    assert chats.binding("fuzzbot", "-100998") is not None


def outgoing(
    tmp_path: Path, name: str, mime: str, kind: str, size: int | None = None, caption: str = ""
) -> OutgoingFile:
    path = tmp_path / name
    path.write_bytes(b"data")
    return OutgoingFile(path, name, mime, 4 if size is None else size, kind, caption)


@pytest.mark.parametrize(
    ("name", "mime", "kind", "size", "method"),
    [
        ("a.jpg", "image/jpeg", "image", 10 * 1024**2, "sendPhoto"),
        ("a.png", "image/png", "image", 4, "sendPhoto"),
        ("a.webp", "image/webp", "image", 4, "sendPhoto"),
        ("a.jpg", "image/jpeg", "image", 10 * 1024**2 + 1, "sendDocument"),
        ("a.gif", "image/gif", "image", 4, "sendDocument"),
        ("a.jpg", "image/jpeg", "document", 4, "sendDocument"),
        ("a.ogg", "audio/ogg", "voice", 4, "sendVoice"),
        ("a.oga", "audio/ogg", "voice", 4, "sendVoice"),
        ("a.bin", "audio/opus", "audio", 4, "sendVoice"),
        ("a.ogg", "application/octet-stream", "other", 4, "sendVoice"),
        ("a.opus", "application/octet-stream", "other", 4, "sendVoice"),
        ("a.mp3", "audio/mpeg", "audio", 4, "sendDocument"),
    ],
)
def test_a_file_goes_out_as_a_photo_a_voice_note_or_a_document(
    server: FakeTelegram,
    chats: ChatStore,
    tmp_path: Path,
    name: str,
    mime: str,
    kind: str,
    size: int,
    method: str,
) -> None:
    file = outgoing(tmp_path, name, mime, kind, size)

    async def body(made: TelegramAdapter, core: StubCore) -> Any:
        return await made.send_file(str(ALICE), None, None, file, "k")

    assert drive(server, chats, body) == ["1"]
    [call] = [c for c in server.calls if c.method.startswith("send")]
    assert call.method == method
    field = method[4:].lower()
    upload = call.params.pop(field)
    assert (upload.filename, upload.data) == (name, b"data")
    assert call.params == {"chat_id": str(ALICE)}


def test_a_file_is_captioned_threaded_and_a_reply(
    server: FakeTelegram, chats: ChatStore, tmp_path: Path
) -> None:
    file = outgoing(tmp_path, "r.pdf", "application/pdf", "document", caption="c" * 1024)

    async def body(made: TelegramAdapter, core: StubCore) -> Any:
        return await made.send_file(str(ALICE), "9", "31", file, "k")

    assert drive(server, chats, body) == ["1"]
    [call] = server.calls_of("sendDocument")
    call.params.pop("document")
    assert call.params == {
        "chat_id": str(ALICE),
        "caption": "c" * 1024,
        "message_thread_id": "9",
        "reply_parameters": {"message_id": 31, "allow_sending_without_reply": True},
    }
    assert server.sent() == []


def test_a_caption_over_the_limit_follows_as_a_message(
    server: FakeTelegram, chats: ChatStore, tmp_path: Path
) -> None:
    file = outgoing(tmp_path, "r.pdf", "application/pdf", "document", caption="c" * 1025)

    async def body(made: TelegramAdapter, core: StubCore) -> Any:
        return await made.send_file(str(ALICE), "9", "x31", file, "k")

    assert drive(server, chats, body) == ["1", "2"]
    [call] = server.calls_of("sendDocument")
    assert "caption" not in call.params and "reply_parameters" not in call.params
    assert sends(server) == [
        {"chat_id": str(ALICE), "text": "c" * 1025, "parse_mode": "HTML", "message_thread_id": "9"}
    ]


def test_typing_is_sent_only_when_on(server: FakeTelegram, chats: ChatStore) -> None:
    async def body(made: TelegramAdapter, core: StubCore) -> None:
        await made.typing(str(ALICE), None, True)
        await made.typing(str(ALICE), "5", True)
        await made.typing(str(ALICE), None, False)

    drive(server, chats, body)
    assert [c.params for c in server.calls_of("sendChatAction")] == [
        {"chat_id": str(ALICE), "action": "typing"},
        {"chat_id": str(ALICE), "action": "typing", "message_thread_id": "5"},
    ]
    core = StubCore(TelegramOptions(), "telegram:", chats, TOKEN)
    asyncio.run(TelegramAdapter(cast(Any, core)).typing(str(ALICE), None, True))  # no bot
    asyncio.run(TelegramAdapter(cast(Any, core)).close())  # nothing to close


def caused(exc: BaseException, cause: BaseException) -> BaseException:
    exc.__cause__ = cause
    return exc


@pytest.mark.parametrize(
    ("exc", "outcome"),
    [
        (caused(NetworkError("x"), httpx.ConnectError("refused")), RETRY),
        (caused(TimedOut(), httpx.ConnectTimeout("slow")), RETRY),
        (caused(TimedOut(), httpx.PoolTimeout("busy")), RETRY),
        (caused(TimedOut(), httpx.ReadTimeout("late")), UNKNOWN),
        (TimedOut(), UNKNOWN),
        (NetworkError("reset"), UNKNOWN),
        (BadRequest("chat not found"), FAILED),  # a NetworkError to the library
        (TelegramError("other"), FAILED),
        (ValueError("else"), UNKNOWN),
    ],
)
def test_a_failed_send_is_classified_by_whether_it_may_have_arrived(
    bare: tuple[TelegramAdapter, StubCore], exc: BaseException, outcome: str
) -> None:
    assert bare[0].classify(exc) == outcome


# what the operator reads in the log


def logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "orchestrator.channels.telegram"]


def test_edits_moves_and_membership_changes_are_logged(
    bare: tuple[TelegramAdapter, StubCore],
    chats: ChatStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    made, core = bare
    chats.bind("fuzzbot", "-555", "fam")
    old = {"id": -555, "type": "group", "title": "F"}
    with caplog.at_level(logging.DEBUG, logger="orchestrator.channels.telegram"):
        handled(made, core, {"edited_message": {**message(PRIVATE, text="e"), "edit_date": 2}})
        handled(made, core, {"message": message(old, migrate_to_chat_id=-100999)})
        handled(made, core, {"message": message(old, migrate_to_chat_id=-100998)})
        handled(made, core, member_change(GROUP_CHAT, "member", "left"))
    assert logged(caplog) == [
        f"Telegram account fuzzbot: message 42 in chat {ALICE} was edited; edits start no turn",
        "Telegram account fuzzbot: chat -555 is now -100999; its binding follows",
        "Telegram account fuzzbot: chat -555 is now -100998",
        "Telegram account fuzzbot: the bot is now left in chat -100555",
    ]


def test_waits_moves_and_plain_text_sends_are_logged(
    server: FakeTelegram,
    chats: ChatStore,
    waits: list[float],
    caplog: pytest.LogCaptureFixture,
) -> None:
    server.fail("getUpdates", 429, retry_after(7))
    server.say(PRIVATE, ALICE, "after")
    server.fail("sendMessage", 429, retry_after(3))
    server.migrated[-556] = -100998

    async def body(made: TelegramAdapter, core: StubCore) -> None:
        await run_until(made.receive(), lambda: core.routed)
        await made.send(str(ALICE), None, None, "a", "k")
        await made.send("-556", None, None, "b", "k")
        server.reject_entities = 1
        await made.send(str(ALICE), None, None, "c", "k")

    with caplog.at_level(logging.INFO, logger="orchestrator.channels.telegram"):
        drive(server, chats, body)
    assert logged(caplog) == [
        "Telegram account fuzzbot: getUpdates asked to wait 7s",
        "Telegram account fuzzbot: rate-limited; waiting 3s",
        "Telegram account fuzzbot: chat -556 moved to -100998",
        "Telegram account fuzzbot: the formatted reply was refused (Can't parse entities: "
        "can't find end of the entity starting at byte offset 12); sent as plain text",
    ]
