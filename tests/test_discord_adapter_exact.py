"""The Discord adapter (orchestrator/channels/discord/adapter.py) driven directly, its
discord.py client talking to the fake Discord on loopback (tests/fakediscord.py: the REST
routes and the gateway, recording every call), with the account's state in a real
ChatStore: the exact requests it makes (paths, bodies, nonces, references, mentions), how
it reads messages into the core's, how its gateway loop fails and recovers, the limits at
their boundaries (a message of 2,000 characters and of 2,001, a file at the limit and one
byte over), and how a failed send is classified."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import aiohttp
import discord
import discord.http
import pytest
import yarl
from discord.gateway import DiscordWebSocket

from orchestrator.channels.chatapp.adapter import RETRY, OutgoingFile, Received, Refusal
from orchestrator.channels.discord.adapter import DiscordAdapter, nonce
from orchestrator.channels.discord.kind import DiscordOptions
from orchestrator.errors import DaemonStopping, OrchestratorError
from orchestrator.home import Home
from orchestrator.limits import DISCORD_NONCE_WINDOW_SECONDS
from orchestrator.media.inbox import StoredFile
from orchestrator.store.chats import FAILED, UNKNOWN, ChatStore
from orchestrator.store.messages import open_queue
from tests.adaptercore import StubCore, run_until
from tests.fakediscord import (
    APPLICATION,
    BOT_USER,
    GUILD,
    IS_VOICE_MESSAGE,
    TEXT_CHANNEL,
    FakeDiscord,
)
from tests.test_discord import ALICE, ALICE_ID, BOB, BOT, DM, TOKEN

# the intents asked for: guilds, guild messages, direct messages (and message content)
BASE_INTENTS = (1 << 0) | (1 << 9) | (1 << 12)
CONTENT_INTENT = 1 << 15
NO_MENTIONS = {"parse": [], "replied_user": False}
KEY = "orch.m1.0.0"
LOGGER = "orchestrator.channels.discord"


@pytest.fixture(autouse=True)
def discord_globals() -> Iterator[None]:
    """discord.py's process-wide REST base and gateway, as the adapter sets them, put
    back after each test."""
    base, gateway = discord.http.Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY
    yield
    discord.http.Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY = base, gateway


@pytest.fixture
def server() -> Iterator[FakeDiscord]:
    fake = FakeDiscord(TOKEN)
    yield fake
    fake.close()


@pytest.fixture
def chats(tmp_path: Path) -> Iterator[ChatStore]:
    queue = open_queue(Home(tmp_path / "home"))
    yield ChatStore(queue)
    queue.close()


Body = Callable[[DiscordAdapter, StubCore], Awaitable[Any]]


def make(
    chats: ChatStore, root: Path | None = None, token: str = TOKEN, **options: Any
) -> tuple[DiscordAdapter, StubCore]:
    core = StubCore(DiscordOptions(**options), "discord:", chats, token, root)
    return DiscordAdapter(cast(Any, core)), core


def drive(
    server: FakeDiscord, chats: ChatStore, body: Body, root: Path | None = None, **options: Any
) -> Any:
    """``body`` with an adapter logged in to the fake Discord (closed after it)."""

    async def main() -> Any:
        made, core = make(chats, root, api_url=server.url, **options)
        await made.connect()
        try:
            return await body(made, core)
        finally:
            await made.close()

    return asyncio.run(main())


def parsed(made: DiscordAdapter, server: FakeDiscord, data: dict[str, Any]) -> discord.Message:
    """A MESSAGE_CREATE event's data read by the adapter's client, as its gateway would
    (the server and its channels known, as from GUILD_CREATE)."""
    assert made.client is not None
    state = made.client._connection
    if state._get_guild(int(GUILD)) is None:
        state._add_guild(discord.Guild(data=cast(Any, server.guild()), state=state))
    got: list[discord.Message] = []
    dispatch = state.dispatch
    state.dispatch = lambda event, *args: got.append(args[0]) if event == "message" else None
    try:
        state.parse_message_create(cast(Any, data))
    finally:
        state.dispatch = dispatch
    [message] = got
    return message


async def until(done: Callable[[], Any], task: asyncio.Future[Any], timeout: float = 15) -> None:
    """Wait for ``done()`` while ``task`` (a read loop) runs: its error, or a failure when
    it returned."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not done():
        if task.done():
            task.result()
            raise AssertionError("the read loop returned")
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


def received(message: discord.Message) -> Received:
    return Received("c", "s", message.content, str(message.id), str(message.id), raw=message)


# the nonce


def test_a_nonce_is_the_start_of_the_sha256_of_the_key_and_piece() -> None:
    assert nonce(KEY, 0) == "0802d6d41d9b27447413f7b21"
    assert nonce(KEY, 1) == "80b5059ed31f8f7a6409d8f4f"


# the adapter before it connects


def test_a_new_adapter_has_no_client_and_nothing_to_close(chats: ChatStore) -> None:
    made, core = make(chats)
    options = core.account.options
    assert made.options is options and made.core is core and made.name == "fuzzbot"
    assert made.client is None and made.gateway is None
    assert isinstance(made.inbox, asyncio.Queue) and made.inbox.empty()
    assert (made.chat_word, made.resends_safely, made.typing_every) == ("channel", True, 8.0)
    assert made.resend_window == DISCORD_NONCE_WINDOW_SECONDS
    asyncio.run(made.close())
    assert made.client is None and made.gateway is None


# connecting


def test_connect_logs_in_at_the_api_url_and_asks_its_gateway(
    server: FakeDiscord, chats: ChatStore
) -> None:
    seen: list[tuple[str, Any]] = []

    async def main() -> tuple[str, DiscordAdapter, StubCore]:
        made, core = make(chats, api_url=server.url)
        core.daemon.config.secrets_file = Path("/run/secrets.env")
        core.account.token = SimpleNamespace(
            require=lambda what, secrets: seen.append((what, secrets)) or TOKEN
        )
        try:
            return await made.connect(), made, core
        finally:
            await made.close()

    bot, _, core = asyncio.run(main())
    assert bot == "@helper"
    assert seen == [("channel account 'fuzzbot'", Path("/run/secrets.env"))]
    routes = (discord.http.Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY)
    assert routes == (f"{server.url}/api/v10", yarl.URL(f"ws://127.0.0.1:{server.port}"))
    assert [(c.method, c.path) for c in server.calls] == [
        ("GET", "/users/@me"),
        ("GET", "/oauth2/applications/@me"),
        ("GET", "/gateway/bot"),
    ]
    assert (core.health.bot, core.health.can_read_all_group_messages) == ("helper", True)


def test_the_client_asks_for_the_intents_granted_keeps_no_cache_and_calls_the_adapter(
    server: FakeDiscord, chats: ChatStore
) -> None:
    async def body(made: DiscordAdapter, core: StubCore) -> None:
        client = made.client
        assert client is not None and client.user is not None
        assert client.user.id == int(BOT_USER) and client.application_id == int(APPLICATION)
        state = client._connection
        assert client.intents.value == BASE_INTENTS | CONTENT_INTENT
        assert state.max_messages is None and state._messages is None
        assert not state._chunk_guilds
        for event in ("on_message", "on_ready", "on_resumed", "on_disconnect"):
            assert getattr(client, event) == getattr(made, event)

    drive(server, chats, body)


def test_without_the_message_content_intent_it_is_not_asked_for_and_a_warning_says_so(
    chats: ChatStore, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeDiscord(TOKEN, message_content=False)

    async def body(made: DiscordAdapter, core: StubCore) -> int:
        assert made.client is not None
        return made.client.intents.value

    try:
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            intents = drive(fake, chats, lambda made, core: body(made, core))
    finally:
        fake.close()
    assert intents == BASE_INTENTS
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == [
        "Discord account fuzzbot: the application has no Message Content intent; in "
        "servers only messages that mention the bot carry text (orchestrator doctor)"
    ]


def test_with_the_intent_granted_nothing_is_logged(
    server: FakeDiscord, chats: ChatStore, caplog: pytest.LogCaptureFixture
) -> None:
    async def body(made: DiscordAdapter, core: StubCore) -> bool:
        return cast(bool, core.health.can_read_all_group_messages)

    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        assert drive(server, chats, body) is True
    assert [r for r in caplog.records if r.name == LOGGER] == []


@pytest.mark.parametrize(
    ("flags", "granted"),
    [(1 << 18, True), (1 << 19, True), ((1 << 18) | (1 << 19), True), (0, False)],
)
def test_either_flag_of_the_intent_grants_it(
    server: FakeDiscord,
    chats: ChatStore,
    monkeypatch: pytest.MonkeyPatch,
    flags: int,
    granted: bool,
) -> None:
    monkeypatch.setattr(server, "_app_flags", lambda: flags)

    async def body(made: DiscordAdapter, core: StubCore) -> tuple[Any, int]:
        assert made.client is not None
        return core.health.can_read_all_group_messages, made.client.intents.value

    assert drive(server, chats, body) == (
        granted,
        BASE_INTENTS | (CONTENT_INTENT if granted else 0),
    )


def test_without_an_api_url_discords_own_routes_are_kept(
    server: FakeDiscord, chats: ChatStore
) -> None:
    # (the process's routes pointed at the fake, as only a test would)
    discord.http.Route.BASE = f"{server.url}/api/v10"
    DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL("wss://gateway.example/")

    async def main() -> str:
        made, _ = make(chats)
        try:
            return await made.connect()
        finally:
            await made.close()

    assert asyncio.run(main()) == "@helper"
    routes = (discord.http.Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY)
    assert routes == (f"{server.url}/api/v10", yarl.URL("wss://gateway.example/"))
    assert server.calls_of("GET", "/gateway/bot") == []


def test_a_refused_login_closes_its_client(
    server: FakeDiscord, chats: ChatStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed: list[discord.Client] = []
    real = discord.Client.close

    async def close(self: discord.Client) -> None:
        closed.append(self)
        await real(self)

    monkeypatch.setattr(discord.Client, "close", close)
    made, _ = make(chats, token="not-the-token", api_url=server.url)

    async def main() -> None:
        await made.connect()

    with pytest.raises(discord.LoginFailure, match="Improper token has been passed"):
        asyncio.run(main())
    assert len(closed) == 1 and closed[0].is_closed()
    assert made.client is None


def test_connecting_again_closes_the_client_and_gateway_before(
    server: FakeDiscord, chats: ChatStore
) -> None:
    async def body(made: DiscordAdapter, core: StubCore) -> None:
        first = made.client
        assert first is not None
        gateway = asyncio.ensure_future(asyncio.sleep(3600))
        made.gateway = gateway
        await made.connect()
        await asyncio.sleep(0)
        assert first.is_closed() and gateway.cancelled()
        assert made.client is not None and made.client is not first
        assert not made.client.is_closed() and made.gateway is None

    drive(server, chats, body)


def test_close_cancels_the_gateway_and_closes_the_client(
    server: FakeDiscord, chats: ChatStore
) -> None:
    async def body(made: DiscordAdapter, core: StubCore) -> None:
        client = made.client
        assert client is not None
        gateway = asyncio.ensure_future(asyncio.sleep(3600))
        made.gateway = gateway
        await made.close()
        await asyncio.sleep(0)
        assert made.client is None and made.gateway is None
        assert client.is_closed() and gateway.cancelled()

    drive(server, chats, body)


# the events discord.py calls


def test_the_events_queue_messages_and_report_the_connection(chats: ChatStore) -> None:
    made, core = make(chats)
    message = cast(discord.Message, object())

    async def main() -> None:
        await made.on_message(message)
        await made.on_ready()
        await made.on_resumed()
        await made.on_disconnect()

    asyncio.run(main())
    assert made.inbox.get_nowait() is message and made.inbox.empty()
    assert core.polls == 2
    assert core.errors == ["the gateway connection closed; reconnecting"]


def test_the_gateway_up_again_starts_the_login_backoff_over(chats: ChatStore) -> None:
    made, _ = make(chats)

    async def main() -> list[float]:
        seen = []
        for event in (made.on_ready, made.on_resumed):
            made.backoff.seconds = 32.0  # after failed logins
            await event()
            seen.append(made.backoff.seconds)
        return seen

    assert asyncio.run(main()) == [1.0, 1.0]


# the read loop


def test_a_refused_login_is_reported_and_tried_again_with_a_growing_backoff(
    server: FakeDiscord, chats: ChatStore
) -> None:
    made, core = make(chats, token="not-the-token", api_url=server.url)

    async def main() -> Any:
        return await run_until(made.receive(), lambda: len(core.failed) >= 3)

    assert asyncio.run(main()) is None
    assert core.failed[:3] == [
        ("logging in", "LoginFailure: Improper token has been passed.", 1.0),
        ("logging in", "LoginFailure: Improper token has been passed.", 2.0),
        ("logging in", "LoginFailure: Improper token has been passed.", 4.0),
    ]
    assert made.client is None


def test_in_the_read_loop_a_gateway_up_starts_the_grown_login_backoff_over(
    server: FakeDiscord, chats: ChatStore
) -> None:
    made, core = make(chats, token="not-the-token", api_url=server.url)

    async def main() -> None:
        task = asyncio.ensure_future(made.receive())
        try:
            await until(lambda: len(core.failed) >= 2, task)  # logins refused: it grew
            core.account.token = SimpleNamespace(require=lambda *_: TOKEN)  # fixed
            await until(lambda: core.polls, task)  # logged in, and the gateway is ready
            gateway = made.client
            await made.close()  # the gateway ends under it
            await until(lambda: core.failed[-1][0] == "the gateway", task)
            assert gateway is not None
        finally:
            task.cancel()
            await made.close()

    asyncio.run(main())
    *logins, (what, error, waited) = core.failed
    assert len(logins) >= 2 and {w for w, _, _ in logins} == {"logging in"}
    assert [seconds for *_, seconds in logins] == [2.0**n for n in range(len(logins))]
    assert (what, error, waited) == ("the gateway", "the connection ended", 1.0)


def test_the_gateway_connects_and_hands_messages_over_in_order(
    server: FakeDiscord, chats: ChatStore
) -> None:
    made, core = make(chats, api_url=server.url)

    async def main() -> None:
        task = asyncio.ensure_future(made.receive())
        try:
            await until(lambda: core.polls, task)
            for text in ("one", "two", "three"):
                await asyncio.to_thread(server.say, DM, ALICE, text, guild=False)
            await until(lambda: len(core.routed) >= 3, task)
        finally:
            task.cancel()
            await made.close()

    asyncio.run(main())
    assert [r.text for r in core.routed] == ["one", "two", "three"]
    assert core.failed == [] and server.identifies == 1
    assert server.connections[0].intents == BASE_INTENTS | CONTENT_INTENT


def test_a_gateway_that_refuses_the_intent_is_reported_and_logged_in_again(
    server: FakeDiscord, chats: ChatStore
) -> None:
    """The application lost the intent between the login and the gateway: Discord
    closes with 4014, and the next login no longer asks for it."""
    made, core = make(chats, api_url=server.url)

    async def main() -> None:
        await made.connect()
        server.message_content = False
        try:
            await run_until(made.receive(), lambda: core.polls)
        finally:
            await made.close()

    asyncio.run(main())
    assert core.failed == [
        (
            "the gateway",
            "PrivilegedIntentsRequired: Shard ID None is requesting privileged intents that "
            "have not been explicitly enabled in the developer portal. It is recommended to "
            "go to https://discord.com/developers/applications/ and explicitly enable the "
            "privileged intents within your application's page. If this is not possible, "
            "then consider disabling the privileged intents instead.",
            1.0,
        )
    ]
    assert server.close_codes == [4014] and server.identifies == 1
    # (the refused connection's intents are not recorded: its close code says them)
    assert [c.intents for c in server.connections] == [None, BASE_INTENTS]
    assert core.health.can_read_all_group_messages is False


def test_a_gateway_closed_under_it_ends_and_the_next_one_gets_every_message(
    server: FakeDiscord, chats: ChatStore
) -> None:
    made, core = make(chats, api_url=server.url)

    async def main() -> None:
        task = asyncio.ensure_future(made.receive())
        try:
            await until(lambda: core.polls == 1, task)
            first = made.client
            assert first is not None
            await made.close()  # the gateway task cancelled, the client closed
            await until(lambda: core.polls == 2 and server._newest() is not None, task)
            assert made.client is not None and made.client is not first
            await asyncio.to_thread(server.say, DM, ALICE, "after", guild=False)
            await until(lambda: core.routed, task)
        finally:
            task.cancel()
            await made.close()

    asyncio.run(main())
    assert core.failed == [("the gateway", "the connection ended", 1.0)]
    assert [r.text for r in core.routed] == ["after"] and server.identifies == 2


def test_the_gateway_ending_by_itself_is_reported_and_the_loop_goes_on(
    server: FakeDiscord, chats: ChatStore
) -> None:
    made, core = make(chats, api_url=server.url)

    async def main() -> None:
        task = asyncio.ensure_future(made.receive())
        try:
            await until(lambda: core.polls == 1, task)
            assert made.client is not None
            await made.client.close()  # discord.py's loop returns: no error
            await until(lambda: core.polls == 2, task)
        finally:
            task.cancel()
            await made.close()

    asyncio.run(main())
    assert core.failed == [("the gateway", "the connection ended", 1.0)]


# handing messages to the core


def consume(made: DiscordAdapter, messages: list[discord.Message], done: Callable[[], Any]) -> Any:
    """Run ``_consume`` over ``messages`` with a gateway that never ends until ``done()``."""

    async def main() -> Any:
        gateway = asyncio.get_running_loop().create_future()
        for message in messages:
            made.inbox.put_nowait(message)
        return await run_until(made._consume(gateway), done)

    return asyncio.run(main())


def test_consume_ends_with_the_gateway_and_leaves_no_reader_behind(
    server: FakeDiscord, chats: ChatStore
) -> None:
    async def body(made: DiscordAdapter, core: StubCore) -> tuple[Any, list[str]]:
        gateway = asyncio.get_running_loop().create_future()
        reading = asyncio.ensure_future(made._consume(gateway))
        await asyncio.sleep(0.05)
        gateway.set_result(None)
        ended = await asyncio.wait_for(reading, 10)
        message = parsed(made, server, server.message(DM, ALICE, "later", guild=False))
        made.inbox.put_nowait(message)
        await asyncio.sleep(0.05)
        return ended, [m.content for m in [made.inbox.get_nowait()]]

    assert drive(server, chats, body) == (False, ["later"])


def test_a_message_the_queue_does_not_take_is_handled_again_with_a_backoff_reset_after(
    server: FakeDiscord, chats: ChatStore
) -> None:
    async def body(made: DiscordAdapter, core: StubCore) -> Any:
        first = parsed(made, server, server.message(DM, ALICE, "full disk", guild=False))
        second = parsed(made, server, server.message(DM, ALICE, "again full", guild=False))
        third = parsed(made, server, server.message(DM, ALICE, "fine", guild=False))
        failures = {"full disk": 2, "again full": 1}
        tries: list[str] = []

        async def route(r: Received) -> None:
            tries.append(r.text)
            if failures.get(r.text):
                failures[r.text] -= 1
                raise OrchestratorError("the disk is full")
            core.routed.append(r)

        async def not_queued(what: str, exc: Any, backoff: Any) -> None:
            core.unqueued.append((what, exc.message, backoff.seconds))
            backoff.seconds *= 2  # as the backoff's wait would, without the wait
            await asyncio.sleep(0)

        core.route = route  # type: ignore[method-assign]
        core.not_queued = not_queued  # type: ignore[method-assign]
        gateway = asyncio.get_running_loop().create_future()
        for message in (first, second, third):
            made.inbox.put_nowait(message)
        await run_until(made._consume(gateway), lambda: len(core.routed) == 3)
        return tries, core.unqueued, [r.text for r in core.routed], first.id, second.id

    tries, unqueued, routed, first, second = drive(server, chats, body)
    assert tries == ["full disk", "full disk", "full disk", "again full", "again full", "fine"]
    assert unqueued == [
        (f"message {first}", "the disk is full", 1.0),
        (f"message {first}", "the disk is full", 2.0),
        (f"message {second}", "the disk is full", 1.0),
    ]
    assert routed == ["full disk", "again full", "fine"]


def test_a_stop_ends_consume_at_once(server: FakeDiscord, chats: ChatStore) -> None:
    async def body(made: DiscordAdapter, core: StubCore) -> Any:
        async def route(r: Received) -> None:
            raise DaemonStopping("stopping")

        core.route = route  # type: ignore[method-assign]
        made.inbox.put_nowait(parsed(made, server, server.message(DM, ALICE, "x", guild=False)))
        gateway = asyncio.get_running_loop().create_future()
        return await asyncio.wait_for(made._consume(gateway), 10)

    assert drive(server, chats, body) is True


def test_a_stop_ends_the_read_loop(server: FakeDiscord, chats: ChatStore) -> None:
    made, core = make(chats, api_url=server.url)

    async def route(r: Received) -> None:
        raise DaemonStopping("stopping")

    core.route = route  # type: ignore[method-assign]

    async def main() -> Any:
        task = asyncio.ensure_future(made.receive())
        try:
            await until(lambda: core.polls, task)
            await asyncio.to_thread(server.say, DM, ALICE, "stop", guild=False)
            return await asyncio.wait_for(task, 10)
        finally:
            await made.close()

    assert asyncio.run(main()) is None
    assert core.failed == []


def test_a_message_that_fails_otherwise_is_logged_and_skipped(
    server: FakeDiscord, chats: ChatStore, caplog: pytest.LogCaptureFixture
) -> None:
    async def body(made: DiscordAdapter, core: StubCore) -> Any:
        broken = parsed(made, server, server.message(DM, ALICE, "breaks", guild=False))
        fine = parsed(made, server, server.message(DM, ALICE, "fine", guild=False))

        async def route(r: Received) -> None:
            if r.text == "breaks":
                raise ValueError("a bug")
            core.routed.append(r)

        core.route = route  # type: ignore[method-assign]
        gateway = asyncio.get_running_loop().create_future()
        made.inbox.put_nowait(broken)
        made.inbox.put_nowait(fine)
        await run_until(made._consume(gateway), lambda: core.routed)
        await asyncio.sleep(0)
        return [r.text for r in core.routed], broken.id, core.unqueued

    with caplog.at_level(logging.ERROR, logger=LOGGER):
        routed, broken, unqueued = drive(server, chats, body)
    assert routed == ["fine"] and unqueued == []
    [record] = [r for r in caplog.records if r.name == LOGGER]
    assert record.getMessage() == (
        f"Discord account fuzzbot: message {broken} could not be handled; skipped"
    )
    assert record.exc_info is not None and str(record.exc_info[1]) == "a bug"


# reading one message


def handled(server: FakeDiscord, chats: ChatStore, *events: dict[str, Any]) -> list[Received]:
    async def body(made: DiscordAdapter, core: StubCore) -> list[Received]:
        for data in events:
            await made.handle(parsed(made, server, data))
        return core.routed

    return cast(list[Received], drive(server, chats, body))


def test_a_direct_message_is_received_with_its_ids_text_and_a_title(
    server: FakeDiscord, chats: ChatStore
) -> None:
    data = server.message(DM, ALICE, "hello there", guild=False)
    [got] = handled(server, chats, data)
    assert (got.chat, got.sender, got.text, got.message_id, got.event_id, got.thread) == (
        DM,
        ALICE_ID,
        "hello there",
        data["id"],
        data["id"],
        None,
    )
    assert (got.group_chat, got.title) == (False, "direct messages with alice")
    assert isinstance(got.raw, discord.Message) and str(got.raw.id) == data["id"]


def test_a_server_message_is_a_group_chat_titled_by_server_and_channel(
    server: FakeDiscord, chats: ChatStore
) -> None:
    data = server.message(TEXT_CHANNEL, BOB, "in general")
    [got] = handled(server, chats, data)
    assert (got.chat, got.sender, got.thread, got.group_chat, got.title) == (
        TEXT_CHANNEL,
        BOB["id"],
        None,
        True,
        "Family #general",
    )


def test_a_server_channel_the_client_does_not_know_has_no_channel_name_to_title(
    server: FakeDiscord, chats: ChatStore
) -> None:
    """A channel missing from the client's cache (a partial one, without a name): the
    title falls back to the sender's, with no "#None"."""
    data = server.message("1200000000000000077", BOB, "from an unknown channel")
    [got] = handled(server, chats, data)
    assert (got.chat, got.group_chat, got.title) == (
        "1200000000000000077",
        True,
        "direct messages with bob",
    )


def test_a_thread_is_a_thread_of_its_parent_channel(server: FakeDiscord, chats: ChatStore) -> None:
    thread = server.new_id()
    server.threads[thread] = TEXT_CHANNEL
    data = server.message(thread, BOB, "in the thread")
    [got] = handled(server, chats, data)
    assert (got.chat, got.thread, got.group_chat, got.title) == (
        TEXT_CHANNEL,
        thread,
        True,
        f"Family #thread {thread[-3:]}",
    )


def test_a_reply_is_a_message_and_bots_and_the_bot_itself_start_nothing(
    server: FakeDiscord, chats: ChatStore
) -> None:
    earlier = server.message(DM, BOT, "an answer", guild=False)
    events = [
        server.message(DM, ALICE, "a reply", guild=False, reply_to=earlier),
        server.message(DM, FakeDiscord.user("1500000000000000009", "other", bot=True), "bot"),
        # the bot's own user without the bot flag (as a user token would be)
        server.message(DM, FakeDiscord.user(BOT_USER, "helper"), "myself", guild=False),
        server.message(DM, ALICE, "plain", guild=False),
    ]
    assert [r.text for r in handled(server, chats, *events)] == ["a reply", "plain"]


def test_without_a_client_every_persons_message_is_received(
    server: FakeDiscord, chats: ChatStore
) -> None:
    async def body(made: DiscordAdapter, core: StubCore) -> list[str]:
        messages = [
            parsed(made, server, server.message(DM, FakeDiscord.user(BOT_USER, "me"), "a")),
            parsed(made, server, server.message(DM, ALICE, "b", guild=False)),
        ]
        client, made.client = made.client, None
        try:
            for message in messages:
                await made.handle(message)
        finally:
            made.client = client
        return [r.text for r in core.routed]

    assert drive(server, chats, body) == ["a", "b"]


def test_a_system_message_starts_no_turn_and_is_logged(
    server: FakeDiscord, chats: ChatStore, caplog: pytest.LogCaptureFixture
) -> None:
    joined = {**server.message(TEXT_CHANNEL, BOB, ""), "type": 7}
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        assert handled(server, chats, joined) == []
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == [
        "Discord account fuzzbot: a new_member message starts no turn"
    ]


def test_a_message_queued_already_is_dropped_and_logged(
    server: FakeDiscord, chats: ChatStore, caplog: pytest.LogCaptureFixture
) -> None:
    again = server.message(DM, ALICE, "again", guild=False)
    other = server.message(DM, ALICE, "queued elsewhere", guild=False)
    chats.queue.transaction(
        lambda db: db.executemany(
            "INSERT INTO channel_inbound (account, update_id, message_id, platform_chat,"
            " platform_message, at) VALUES (?,?,?,?,?,?)",
            [
                ("fuzzbot", again["id"], "m1", DM, again["id"], 1.0),
                ("other-account", other["id"], "m2", DM, other["id"], 1.0),
            ],
        )
    )
    fresh = server.message(DM, ALICE, "fresh", guild=False)
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        got = handled(server, chats, again, other, fresh)
    assert [r.text for r in got] == ["queued elsewhere", "fresh"]
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == [
        f"Discord account fuzzbot: message {again['id']} came again; dropped"
    ]


# whether a message is for the bot


def test_a_message_is_for_the_bot_when_it_mentions_it_or_replies_to_it(
    server: FakeDiscord, chats: ChatStore
) -> None:
    earlier_bot = server.message(TEXT_CHANNEL, BOT, "an answer")
    earlier_bob = server.message(TEXT_CHANNEL, BOB, "a question")
    cases = {
        "mention": server.message(TEXT_CHANNEL, ALICE, f"<@{BOT_USER}> hi", mentions=[BOT]),
        "both": server.message(TEXT_CHANNEL, ALICE, "x", mentions=[BOB, BOT]),
        "reply": server.message(TEXT_CHANNEL, ALICE, "yes", reply_to=earlier_bot),
        "other mention": server.message(TEXT_CHANNEL, ALICE, "hi bob", mentions=[BOB]),
        "reply to other": server.message(TEXT_CHANNEL, ALICE, "no", reply_to=earlier_bob),
        "plain": server.message(TEXT_CHANNEL, ALICE, "hi all"),
    }

    async def body(made: DiscordAdapter, core: StubCore) -> dict[str, Any]:
        messages = {name: received(parsed(made, server, d)) for name, d in cases.items()}
        answers: dict[str, Any] = {name: made.addressed(r) for name, r in messages.items()}
        answers["forms"] = made.mention_forms(messages["plain"])
        client, made.client = made.client, None
        try:
            answers["no client"] = made.addressed(messages["mention"])
            answers["no client forms"] = made.mention_forms(messages["plain"])
        finally:
            made.client = client
        return answers

    assert drive(server, chats, body) == {
        "mention": True,
        "both": True,
        "reply": True,
        "other mention": False,
        "reply to other": False,
        "plain": False,
        "forms": (f"<@{BOT_USER}>", f"<@!{BOT_USER}>"),
        "no client": False,
        "no client forms": (),
    }


# files received


def stored_files(
    server: FakeDiscord,
    chats: ChatStore,
    root: Path,
    attachments: list[dict[str, Any]],
    flags: int = 0,
    limit: int = 100,
) -> Any:
    (root / "fam").mkdir(exist_ok=True)

    async def body(made: DiscordAdapter, core: StubCore) -> Any:
        data = server.message(DM, ALICE, "files", guild=False, attachments=attachments)
        data["flags"] = flags
        return await made.attachment(received(parsed(made, server, data)), "fam")

    return drive(server, chats, body, root, attachments_max_bytes=limit)


def inbox(root: Path) -> dict[str, bytes]:
    folder = root / "fam" / "files" / "inbox"
    return {p.name: p.read_bytes() for p in folder.iterdir()} if folder.exists() else {}


def test_a_message_without_files_has_no_attachment(
    server: FakeDiscord, chats: ChatStore, tmp_path: Path
) -> None:
    assert stored_files(server, chats, tmp_path, []) is None
    assert inbox(tmp_path) == {}


def test_a_file_at_the_limit_is_stored_with_its_name_and_type(
    server: FakeDiscord, chats: ChatStore, tmp_path: Path
) -> None:
    data = b"x" * 100
    items = [
        server.add_file("blob", None, data, DM),  # type: ignore[arg-type]
        server.add_file("notes.txt", "text/plain", b"hello", DM),
    ]
    first, second = stored_files(server, chats, tmp_path, items)
    assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{8}\.bin", first.name)
    assert first == StoredFile(first.name, None, 100, "other", None, "blob", "file")
    assert second == StoredFile(second.name, "text/plain", 5, "document", None, "notes.txt",
                                "file")  # fmt: skip
    assert second.name.endswith(".txt")
    assert inbox(tmp_path) == {first.name: data, second.name: b"hello"}


def test_a_file_over_the_limit_is_refused_before_any_is_fetched(
    server: FakeDiscord, chats: ChatStore, tmp_path: Path
) -> None:
    items = [
        server.add_file("small.txt", "text/plain", b"hello", DM),
        server.add_file("big.bin", "application/octet-stream", b"x" * 101, DM),
    ]
    refusal = stored_files(server, chats, tmp_path, items)
    assert refusal == Refusal("Sorry, that file is 101 B; I take files up to 100 B.")
    assert server.calls_of("GET", "/attachments/") == [] and inbox(tmp_path) == {}


def test_a_file_larger_than_discord_said_is_refused_by_its_bytes(
    server: FakeDiscord, chats: ChatStore, tmp_path: Path
) -> None:
    item = server.add_file("liar.bin", "application/octet-stream", b"x" * 2048, DM)
    item["size"] = 10
    refusal = stored_files(server, chats, tmp_path, [item], limit=1024)
    assert refusal == Refusal("Sorry, that file is 2.0 KiB; I take files up to 1.0 KiB.")
    assert inbox(tmp_path) == {}


def test_a_file_of_exactly_the_limit_read_is_taken(
    server: FakeDiscord, chats: ChatStore, tmp_path: Path
) -> None:
    item = server.add_file("exact.bin", "application/octet-stream", b"y" * 100, DM)
    item["size"] = 1
    [stored] = stored_files(server, chats, tmp_path, [item])
    assert stored.size == 100 and inbox(tmp_path) == {stored.name: b"y" * 100}


def test_no_files_are_taken_at_a_limit_of_zero(
    server: FakeDiscord, chats: ChatStore, tmp_path: Path
) -> None:
    item = server.add_file("a.txt", "text/plain", b"a", DM)
    refusal = stored_files(server, chats, tmp_path, [item], limit=0)
    assert refusal == Refusal("Sorry, I do not take files here.")
    # nor an empty one: nothing is read
    empty = server.add_file("empty.txt", "text/plain", b"", DM)
    refusal = stored_files(server, chats, tmp_path, [empty], limit=0)
    assert refusal == Refusal("Sorry, I do not take files here.")
    assert server.calls_of("GET", "/attachments/") == [] and inbox(tmp_path) == {}


def test_a_file_that_cannot_be_fetched_is_refused_and_logged(
    server: FakeDiscord, chats: ChatStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    item = server.add_file("gone.txt", "text/plain", b"gone", DM)
    del server.files[item["id"]]
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        refusal = stored_files(server, chats, tmp_path, [item])
    assert refusal == Refusal("Sorry, I could not fetch that file from Discord.")
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == [
        "Discord account fuzzbot: a file was not fetched: 404 Not Found (error code: 0): "
        "asset not found"
    ]


def test_a_voice_message_by_its_flag_is_a_voice_note(
    server: FakeDiscord, chats: ChatStore, tmp_path: Path
) -> None:
    item = server.add_file("recording", None, b"OggS voice", DM)  # type: ignore[arg-type]
    [stored] = stored_files(server, chats, tmp_path, [item], flags=IS_VOICE_MESSAGE)
    assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{8}\.ogg", stored.name)
    assert stored == StoredFile(stored.name, None, 10, "voice", None, "recording",
                                "voice message")  # fmt: skip
    assert inbox(tmp_path) == {stored.name: b"OggS voice"}


def test_a_voice_attachment_without_the_flag_is_a_voice_note_with_its_length(
    server: FakeDiscord, chats: ChatStore, tmp_path: Path
) -> None:
    item = server.add_file("voice-message.ogg", "audio/ogg", b"OggS voice", DM)
    item.update(duration_secs=7.5, waveform="AAAA")
    plain = server.add_file("song.ogg", "audio/ogg", b"OggS song", DM)
    plain.update(duration_secs=3.0)  # a length without a waveform: not a voice message
    voice, song = stored_files(server, chats, tmp_path, [item, plain])
    assert voice == StoredFile(voice.name, "audio/ogg", 10, "voice", 7.5, "voice-message.ogg",
                               "voice message")  # fmt: skip
    assert song == StoredFile(song.name, "audio/ogg", 9, "audio", None, "song.ogg", "file")


# sending


def posts(server: FakeDiscord, channel: str) -> list[dict[str, Any]]:
    return [c.body for c in server.calls_of("POST", f"/channels/{channel}/messages")]


def sent(
    server: FakeDiscord,
    chats: ChatStore,
    chat: str,
    thread: str | None,
    reply_to: str | None,
    text: str,
) -> list[str]:
    async def body(made: DiscordAdapter, core: StubCore) -> list[str]:
        return await made.send(chat, thread, reply_to, text, KEY)

    return cast(list[str], drive(server, chats, body))


def reference(message_id: str, channel: str) -> dict[str, Any]:
    return {
        "type": 0,
        "message_id": int(message_id),
        "channel_id": int(channel),
        "fail_if_not_exists": False,
    }


def test_a_reply_at_the_limit_is_one_message_referencing_the_one_it_answers(
    server: FakeDiscord, chats: ChatStore
) -> None:
    text = "a" * 2000
    ids = sent(server, chats, DM, None, "1700000000000000001", text)
    [body] = posts(server, DM)
    assert body == {
        "content": text,
        "nonce": nonce(KEY, 0),
        "enforce_nonce": True,
        "message_reference": reference("1700000000000000001", DM),
        "tts": False,
        "allowed_mentions": NO_MENTIONS,
        "components": [],
        "files": [],
    }
    assert ids == [m["id"] for m in server.posted(DM)] and len(ids) == 1


def test_a_reply_over_the_limit_is_two_messages_the_first_a_reply(
    server: FakeDiscord, chats: ChatStore
) -> None:
    text = "a" * 2001
    ids = sent(server, chats, DM, None, "1700000000000000001", text)
    first, second = posts(server, DM)
    assert first["message_reference"] == reference("1700000000000000001", DM)
    assert (first["nonce"], second["nonce"]) == (nonce(KEY, 0), nonce(KEY, 1))
    assert second == {
        "content": second["content"],
        "nonce": nonce(KEY, 1),
        "enforce_nonce": True,
        "tts": False,
        "allowed_mentions": NO_MENTIONS,
        "components": [],
        "files": [],
    }
    assert first["content"] + second["content"] == text
    assert ids == [m["id"] for m in server.posted(DM)] and len(ids) == 2


def test_a_reply_in_a_thread_goes_into_the_thread(server: FakeDiscord, chats: ChatStore) -> None:
    thread = server.new_id()
    server.threads[thread] = TEXT_CHANNEL
    sent(server, chats, TEXT_CHANNEL, thread, "1700000000000000001", "in the thread")
    [body] = posts(server, thread)
    assert body["message_reference"] == reference("1700000000000000001", thread)
    assert posts(server, TEXT_CHANNEL) == []


@pytest.mark.parametrize("reply_to", [None, "", "$event", "12a"])
def test_a_reply_to_no_message_id_references_nothing(
    server: FakeDiscord, chats: ChatStore, reply_to: str | None
) -> None:
    sent(server, chats, DM, None, reply_to, "hello")
    [body] = posts(server, DM)
    assert "message_reference" not in body
    assert body["allowed_mentions"] == NO_MENTIONS and body["nonce"] == nonce(KEY, 0)


def test_a_429_on_a_send_is_waited_out_by_discord_py_and_posts_once(
    server: FakeDiscord, chats: ChatStore
) -> None:
    server.fail(
        "POST messages",
        429,
        {"message": "You are being rate limited.", "retry_after": 0.05, "global": False},
        {"Retry-After": "0.05", "X-RateLimit-Scope": "user"},
    )
    ids = sent(server, chats, DM, None, None, "busy?")
    first, second = posts(server, DM)
    assert first == second and first["nonce"] == nonce(KEY, 0)
    [post] = server.posted(DM)
    assert ids == [post["id"]] and post["content"] == "busy?"


# sending files


def file_sent(
    server: FakeDiscord,
    chats: ChatStore,
    tmp_path: Path,
    caption: str,
    thread: str | None = None,
    reply_to: str | None = "1700000000000000001",
) -> list[str]:
    path = tmp_path / "outbox-copy"
    path.write_bytes(b"%PDF-1.4 the report")
    outgoing = OutgoingFile(path, "report.pdf", "application/pdf", "document", 19, caption)

    async def body(made: DiscordAdapter, core: StubCore) -> list[str]:
        return await made.send_file(DM, thread, reply_to, outgoing, KEY)

    return cast(list[str], drive(server, chats, body))


def test_a_file_goes_with_its_caption_as_a_reply(
    server: FakeDiscord, chats: ChatStore, tmp_path: Path
) -> None:
    ids = file_sent(server, chats, tmp_path, "the **report**")
    [body] = posts(server, DM)
    assert body == {
        "content": "the **report**",
        "nonce": nonce(KEY, 0),
        "enforce_nonce": True,
        "message_reference": reference("1700000000000000001", DM),
        "tts": False,
        "allowed_mentions": NO_MENTIONS,
        "components": [],
        "attachments": [{"id": 0, "filename": "report.pdf"}],
        "files": ["report.pdf"],
    }
    [post] = server.posted(DM)
    assert ids == [post["id"]]
    assert server.uploaded[post["attachments"][0]["id"]] == b"%PDF-1.4 the report"


@pytest.mark.parametrize("caption", ["", " \n "])
def test_a_file_without_a_caption_has_no_content(
    server: FakeDiscord, chats: ChatStore, tmp_path: Path, caption: str
) -> None:
    ids = file_sent(server, chats, tmp_path, caption, reply_to=None)
    [body] = posts(server, DM)
    assert body["content"] is None and "message_reference" not in body
    assert body["files"] == ["report.pdf"] and body["nonce"] == nonce(KEY, 0)
    assert len(ids) == 1


def test_a_caption_at_the_limit_is_one_message(
    server: FakeDiscord, chats: ChatStore, tmp_path: Path
) -> None:
    caption = "c" * 2000
    ids = file_sent(server, chats, tmp_path, caption)
    [body] = posts(server, DM)
    assert body["content"] == caption and len(ids) == 1


def test_a_caption_over_the_limit_follows_in_a_message_of_its_own(
    server: FakeDiscord, chats: ChatStore, tmp_path: Path
) -> None:
    caption = "c" * 1995 + "\n\nthe rest"
    ids = file_sent(server, chats, tmp_path, caption)
    first, second = posts(server, DM)
    assert (first["content"], first["files"], first["nonce"]) == (
        "c" * 1995,
        ["report.pdf"],
        nonce(KEY, 0),
    )
    assert first["message_reference"] == reference("1700000000000000001", DM)
    assert second == {
        "content": "the rest",
        "nonce": nonce(KEY, 1),
        "enforce_nonce": True,
        "tts": False,
        "allowed_mentions": {"parse": []},  # (no reply: no replied user to leave out)
        "components": [],
        "files": [],
    }
    assert ids == [m["id"] for m in server.posted(DM)] and len(ids) == 2


def test_a_caption_of_three_pieces_numbers_its_nonces_on(
    server: FakeDiscord, chats: ChatStore, tmp_path: Path
) -> None:
    caption = "\n\n".join(c * 1990 for c in "abc")
    ids = file_sent(server, chats, tmp_path, caption)
    bodies = posts(server, DM)
    assert [b["nonce"] for b in bodies] == [nonce(KEY, 0), nonce(KEY, 1), nonce(KEY, 2)]
    assert [b["content"] for b in bodies] == ["a" * 1990, "b" * 1990, "c" * 1990]
    assert len(ids) == 3


def test_a_file_in_a_thread_goes_into_the_thread(
    server: FakeDiscord, chats: ChatStore, tmp_path: Path
) -> None:
    thread = server.new_id()
    server.threads[thread] = TEXT_CHANNEL
    path = tmp_path / "copy"
    path.write_bytes(b"data")
    outgoing = OutgoingFile(path, "a.txt", "text/plain", "document", 4, "here")

    async def body(made: DiscordAdapter, core: StubCore) -> list[str]:
        return await made.send_file(TEXT_CHANNEL, thread, "1700000000000000001", outgoing, KEY)

    drive(server, chats, body)
    [post] = posts(server, thread)
    assert post["message_reference"] == reference("1700000000000000001", thread)
    assert post["files"] == ["a.txt"] and posts(server, TEXT_CHANNEL) == []


# a send that raised


def test_a_failed_send_is_classified_by_whether_it_may_have_arrived(chats: ChatStore) -> None:
    made, _ = make(chats)
    key = SimpleNamespace(host="discord.com", port=443, ssl=True)
    refused = aiohttp.ClientConnectorError(cast(Any, key), OSError(111, "Connection refused"))
    answer = SimpleNamespace(status=403, reason="Forbidden")
    busy = SimpleNamespace(status=503, reason="Service Unavailable")
    assert made.classify(refused) == RETRY
    assert made.classify(discord.Forbidden(cast(Any, answer), "Missing Access")) == FAILED
    assert made.classify(discord.HTTPException(cast(Any, answer), "refused")) == FAILED
    assert made.classify(discord.DiscordServerError(cast(Any, busy), "busy")) == UNKNOWN
    assert made.classify(aiohttp.ServerDisconnectedError()) == UNKNOWN
    assert made.classify(TimeoutError()) == UNKNOWN


def test_a_refused_send_raises_what_classify_calls_failed(
    server: FakeDiscord, chats: ChatStore
) -> None:
    server.fail("POST messages", 403, {"message": "Missing Access", "code": 50001})

    async def body(made: DiscordAdapter, core: StubCore) -> str:
        try:
            await made.send(DM, None, None, "hello", KEY)
        except discord.HTTPException as exc:
            return made.classify(exc)
        return "sent"

    assert drive(server, chats, body) == FAILED


# typing


def test_typing_is_sent_only_when_on_and_into_the_thread(
    server: FakeDiscord, chats: ChatStore
) -> None:
    async def body(made: DiscordAdapter, core: StubCore) -> None:
        await made.typing(DM, None, True)
        await made.typing(TEXT_CHANNEL, "1200000000000000099", True)
        await made.typing(DM, None, False)

    drive(server, chats, body)
    assert [c.path for c in server.calls_of("POST", "/typing")] == [
        f"/channels/{DM}/typing",
        "/channels/1200000000000000099/typing",
    ]


def test_typing_without_a_client_does_nothing(chats: ChatStore) -> None:
    made, _ = make(chats)
    asyncio.run(made.typing(DM, None, True))
    assert made.client is None
