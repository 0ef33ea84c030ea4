"""The Slack adapter (orchestrator/channels/slack/adapter.py) driven directly against the
fake Slack on loopback (tests/fakeslack.py: the Web API, the Socket Mode link, the file
host and the upload URL), with the account's state in a real ChatStore: the exact calls
it makes (methods, arguments, tokens), how it reads events into the core's messages,
what it stores of files, its limits at their bounds (and one over), the waits it takes
(as numbers: no test waits them out) and how a failed send is recorded."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import aiohttp
import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.socket_mode.request import SocketModeRequest

from orchestrator.channels.chatapp.adapter import RETRY, OutgoingFile, Received, Refusal
from orchestrator.channels.slack import adapter as module
from orchestrator.channels.slack.adapter import FileElsewhere, NotShared, SlackAdapter
from orchestrator.channels.slack.kind import SlackOptions
from orchestrator.errors import DaemonStopping, OrchestratorError
from orchestrator.home import Home
from orchestrator.secrets import MissingSecret, SecretRef
from orchestrator.store.chats import FAILED, UNKNOWN, ChatStore
from orchestrator.store.messages import open_queue
from tests.adaptercore import StubCore, run_until
from tests.fakeslack import BOT_USER, TEAM, FakeSlack
from tests.test_slack import ALICE, APP_TOKEN, BOB, BOT_TOKEN, CHANNEL, DM

APP_ENV = "SLACK_APP_EXACT"
TS, ROOT = "1764669600.000100", "1764669500.000050"
LOGGER = "orchestrator.channels.slack"


@pytest.fixture
def server() -> Iterator[FakeSlack]:
    fake = FakeSlack(BOT_TOKEN, APP_TOKEN)
    yield fake
    fake.close()


@pytest.fixture
def chats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ChatStore]:
    monkeypatch.setenv(APP_ENV, APP_TOKEN)
    queue = open_queue(Home(tmp_path / "home"))
    yield ChatStore(queue)
    queue.close()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """The groups' root, with group fam."""
    (tmp_path / "groups" / "fam").mkdir(parents=True)
    return tmp_path / "groups"


def make(
    chats: ChatStore, api_url: str | None = None, root: Path | None = None, **options: Any
) -> tuple[SlackAdapter, StubCore]:
    app_token = SecretRef(APP_ENV, None, "app_token_env", "app_token_secret")
    settings = SlackOptions(api_url=api_url, app_token=app_token, **options)
    core = StubCore(settings, "slack:", chats, BOT_TOKEN, root)
    return SlackAdapter(cast(Any, core)), core


Body = Callable[[SlackAdapter, StubCore], Awaitable[Any]]


def drive(
    server: FakeSlack, chats: ChatStore, body: Body, root: Path | None = None, **options: Any
) -> Any:
    """``body`` with an adapter connected to the fake Slack (closed after it)."""

    async def main() -> Any:
        made, core = make(chats, server.api_url, root, **options)
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


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The timeouts of the adapter's own asyncio.wait_for calls, recorded; each waits
    a hundredth of a second instead."""
    seen: list[Any] = []
    real = asyncio.wait_for

    async def wait_for(awaitable: Any, timeout: Any, *args: Any) -> Any:
        if sys._getframe(1).f_globals.get("__name__") != module.__name__:
            return await real(awaitable, timeout, *args)
        seen.append(timeout)
        return await real(awaitable, 0.01)

    monkeypatch.setattr(module.asyncio, "wait_for", wait_for)
    return seen


def logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def event(text: Any = "hello", **fields: Any) -> dict[str, Any]:
    """A ``message`` event in a direct conversation, as the Events API sends it."""
    made = {
        "type": "message",
        "channel": DM,
        "user": ALICE,
        "text": text,
        "ts": TS,
        "event_ts": TS,
        "channel_type": "im",
        "team": TEAM,
        **fields,
    }
    return {k: v for k, v in made.items() if v is not None or k == "text"}


def payload(item: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"team_id": TEAM, "event_id": "Ev1", "type": "event_callback", "event": item, **fields}


def limited(seconds: str | None = None) -> tuple[int, dict[str, Any], dict[str, str]]:
    """A 429, with a Retry-After when given."""
    return 429, {"ok": False, "error": "ratelimited"}, {"Retry-After": seconds} if seconds else {}


# the values it reads


def test_a_file_is_described_by_its_type_and_name() -> None:
    assert module.described({"mimetype": "application/pdf"}) == {
        "mime": "application/pdf",
        "label": "file",
    }
    for odd in ("", 5, None):
        assert module.described({"mimetype": odd}) == {"mime": None, "label": "file"}
    assert module.described({}) == {"mime": None, "label": "file"}
    # only a clip recorded in Slack is a voice note: an audio file is a file
    video = {"mimetype": "video/mp4", "subtype": "slack_video", "duration_ms": 4000}
    assert module.described(video) == {"mime": "video/mp4", "label": "file"}


def test_an_audio_clip_is_a_voice_note_of_audio_with_its_length() -> None:
    def clip(**fields: Any) -> dict[str, Any]:
        return module.described({"subtype": "slack_audio", **fields})

    assert clip(mimetype="video/mp4", duration_ms=7300) == {
        "mime": "audio/mp4",
        "kind": "voice",
        "duration": 7.3,
        "label": "audio clip",
    }
    assert clip(mimetype="video/webm", duration_ms=500)["mime"] == "audio/webm"
    assert clip(mimetype="audio/webm")["mime"] == "audio/webm"
    assert clip(mimetype="audio/ogg", duration_ms=500)["duration"] == 0.5
    assert clip(duration_ms=1500.0) == {
        "mime": "audio/mp4",
        "kind": "voice",
        "duration": 1.5,
        "label": "audio clip",
    }
    assert clip(mimetype="", duration_ms=1)["mime"] == "audio/mp4"
    assert clip(mimetype="my video/mp4")["mime"] == "my video/mp4"
    for length in (None, 0, -5, True, "7300", [7300]):
        assert clip(mimetype="audio/mp4", duration_ms=length)["duration"] is None


def response_with(headers: Any) -> Any:
    return SimpleNamespace(response=SimpleNamespace(headers=headers))


def test_retry_after_is_read_from_its_header_or_one_second() -> None:
    assert module.retry_after(response_with({"Retry-After": "7"})) == 7.0
    assert module.retry_after(response_with({"X-Other": "5", "retry-after": "2.5"})) == 2.5
    assert module.retry_after(response_with({"RETRY-AFTER": "30"})) == 30.0
    assert module.retry_after(response_with({"Retry-After": "soon"})) == 1.0
    assert module.retry_after(response_with({"X-Retry": "9"})) == 1.0
    assert module.retry_after(response_with({})) == 1.0
    assert module.retry_after(response_with(None)) == 1.0
    assert module.retry_after(SimpleNamespace(response=None)) == 1.0


def test_the_errors_say_what_they_are() -> None:
    refused = NotShared("nope", retry=False)
    assert (str(refused), refused.retry) == ("nope", False)
    assert NotShared("later", retry=True).retry is True
    assert str(FileElsewhere("x")) == "x"


# connecting


def test_an_adapter_not_connected_knows_nothing_yet(chats: ChatStore) -> None:
    made, _ = make(chats)
    assert made.name == "fuzzbot" and made.chat_word == "conversation"
    assert made.api_url == "https://slack.com/api/"
    assert (made.web, made.socket, made.http) == (None, None, None)
    assert (made.bot_token, made.me, made.team) == ("", "", "")
    assert made.events.qsize() == 0 and list(made.seen) == []
    assert made.mention_forms(Received("c", "s", "t", "1", "1", raw={})) == ()
    asyncio.run(made.close())  # nothing to close
    assert made.resends_safely is False


def test_connect_checks_both_tokens_and_makes_its_clients(
    server: FakeSlack, chats: ChatStore
) -> None:
    async def body(made: SlackAdapter, core: StubCore) -> Any:
        web, socket = made.web, made.socket
        assert web is not None and socket is not None
        assert (web.token, web.base_url, web.timeout, web.retry_handlers) == (
            BOT_TOKEN,
            server.api_url,
            30,
            [],
        )
        assert (made.bot_token, made.me, made.team) == (BOT_TOKEN, BOT_USER, TEAM)
        assert core.health.bot == "helper"
        assert socket.app_token == APP_TOKEN and socket.web_client is web
        assert socket.logger.name == "slack_sdk.socket_mode"
        assert socket.on_close_listeners == [made._closed]
        assert socket.socket_mode_request_listeners == [made._envelope]
        assert socket.message_listeners == [made._any_message]
        [ticket] = server.tickets
        assert socket.wss_uri == f"ws://127.0.0.1:{server.port}/link/?ticket={ticket}"
        assert isinstance(made.http, aiohttp.ClientSession) and not made.http.closed
        assert made.api_url == server.api_url

    async def connected(made: SlackAdapter, core: StubCore) -> Any:
        return await made.connect()

    assert drive(server, chats, connected) == "@helper (Family)"
    server.calls.clear()
    server.tickets.clear()
    drive(server, chats, body)
    assert [(c.method, c.token, c.params) for c in server.calls] == [
        ("auth.test", BOT_TOKEN, {}),
        ("apps.connections.open", APP_TOKEN, {}),
    ]


def test_connect_names_the_bot_by_its_id_and_team_when_slack_names_neither(
    server: FakeSlack, chats: ChatStore
) -> None:
    async def body(made: SlackAdapter, core: StubCore) -> Any:
        answer = {"ok": True, "user_id": "U0OTHER", "team_id": "T0OTHER"}
        server.fail("auth.test", 200, answer)
        return await made.connect(), core.health.bot, made.me, made.team

    named = drive(server, chats, body)
    assert named == ("@U0OTHER (T0OTHER)", "U0OTHER", "U0OTHER", "T0OTHER")


def test_connect_reads_both_tokens_from_the_secrets_file(
    server: FakeSlack, chats: ChatStore, tmp_path: Path
) -> None:
    secrets = tmp_path / "secrets.yaml"
    secrets.write_text(f"slack_bot: {BOT_TOKEN}\nslack_app: {APP_TOKEN}\n")
    secrets.chmod(0o600)
    app_token = SecretRef(None, "slack_app", "app_token_env", "app_token_secret")
    core = StubCore(
        SlackOptions(api_url=server.api_url, app_token=app_token), "slack:", chats, "unused"
    )
    core.account.token = SecretRef(None, "slack_bot", "bot_token_env", "bot_token_secret")
    core.daemon.config = SimpleNamespace(secrets_file=secrets)
    made = SlackAdapter(cast(Any, core))

    async def main() -> str:
        try:
            return await made.connect()
        finally:
            await made.close()

    assert asyncio.run(main()) == "@helper (Family)"
    assert [(c.method, c.token) for c in server.calls] == [
        ("auth.test", BOT_TOKEN),
        ("apps.connections.open", APP_TOKEN),
    ]


def test_connect_without_the_app_token_says_whose_it_is_and_calls_nothing(
    server: FakeSlack, chats: ChatStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(APP_ENV)
    made, _ = make(chats, server.api_url)
    with pytest.raises(MissingSecret) as missing:
        asyncio.run(made.connect())
    assert missing.value.message == (
        f"channel account 'fuzzbot' (app token): environment variable {APP_ENV} is not set"
    )
    assert server.calls == [] and made.web is None


def test_connect_with_a_token_refused_raises_slacks_error(
    server: FakeSlack, chats: ChatStore
) -> None:
    server.fail("apps.connections.open", 200, {"ok": False, "error": "invalid_auth"})
    made, _ = make(chats, server.api_url)
    with pytest.raises(SlackApiError) as refused:
        asyncio.run(made.connect())
    assert refused.value.response["error"] == "invalid_auth"
    assert made.web is None and made.socket is None and made.http is None


def test_connect_waits_out_a_429_and_closes_what_an_earlier_connect_made(
    server: FakeSlack, chats: ChatStore, waits: list[float]
) -> None:
    server.fail("auth.test", *limited("3"))

    async def body(made: SlackAdapter, core: StubCore) -> Any:
        socket, http = made.socket, made.http
        assert socket is not None and http is not None
        await made.connect()
        closed = socket.closed, http.closed
        await made.close()
        return closed, made.socket, made.http

    assert drive(server, chats, body) == ((True, True), None, None)
    assert waits == [3.0]
    assert [c.method for c in server.calls] == ["auth.test"] * 2 + [
        "apps.connections.open",
        "auth.test",
        "apps.connections.open",
    ]


# the Socket Mode link


class Link:
    """A stand-in for the Socket Mode client: up or down."""

    def __init__(self, up: bool = True) -> None:
        self.up = up
        self.connects = 0

    async def connect(self) -> None:
        self.connects += 1

    async def is_connected(self) -> bool:
        return self.up

    async def close(self) -> None:
        return None


class Acks:
    def __init__(self) -> None:
        self.acknowledged: list[Any] = []

    async def send_socket_mode_response(self, response: Any) -> None:
        self.acknowledged.append(response.to_dict())


def test_each_envelope_is_acknowledged_and_only_events_are_taken(chats: ChatStore) -> None:
    made, _ = make(chats)
    client = Acks()
    taken = payload(event("one"))

    async def main() -> None:
        await made._envelope(client, SocketModeRequest("events_api", "e1", taken))
        await made._envelope(client, SocketModeRequest("slash_commands", "e2", {"x": 1}))
        await made._envelope(client, SocketModeRequest("interactive", "e3", {"y": 2}))

    asyncio.run(main())
    assert client.acknowledged == [
        {"envelope_id": "e1"},
        {"envelope_id": "e2"},
        {"envelope_id": "e3"},
    ]
    assert made.events.qsize() == 1 and made.events.get_nowait() is taken


def test_any_message_on_the_link_is_a_poll_and_its_close_an_error(chats: ChatStore) -> None:
    made, core = make(chats)

    async def main() -> None:
        await made._any_message(None, {"type": "hello"}, None)
        await made._any_message(None, {"type": "events_api"}, "{}")
        await made._closed(None)

    asyncio.run(main())
    assert core.polls == 2
    assert core.errors == ["the Socket Mode connection closed; reconnecting"]


@pytest.mark.parametrize(
    ("link", "state", "errors"),
    [
        (Link(up=False), {"state": "error"}, ["the Socket Mode connection is down; reconnecting"]),
        (Link(up=True), {}, []),
        (None, {}, []),
    ],
)
def test_the_link_check_reports_a_dead_link_and_saves_the_health(
    chats: ChatStore, link: Link | None, state: dict[str, str], errors: list[str]
) -> None:
    made, core = make(chats)
    made.socket = cast(Any, link)
    asyncio.run(made._check_link())
    assert vars(core.health) == state and core.errors == errors and core.saves == 1


def test_a_quiet_link_is_checked_every_ten_seconds(chats: ChatStore, checks: list[Any]) -> None:
    made, core = make(chats)
    link = Link(up=False)
    made.socket = cast(Any, link)

    async def main() -> None:
        # a check goes on reading: the loop returns only when cancelled
        assert await run_until(made.receive(), lambda: core.saves >= 2) is None
        assert core.saves >= 2 and len(checks) >= 2
        made.events.put_nowait(payload(event("after the checks")))
        await run_until(made.receive(), lambda: core.routed)

    asyncio.run(main())
    assert checks[:2] == [10.0, 10.0] and core.errors[0] == (
        "the Socket Mode connection is down; reconnecting"
    )
    assert core.health.state == "error" and link.connects == 2
    assert [r.text for r in core.routed] == ["after the checks"]


def test_the_events_are_read_from_the_link_acknowledged_and_routed(
    server: FakeSlack, chats: ChatStore
) -> None:
    async def body(made: SlackAdapter, core: StubCore) -> list[Received]:
        async def pushed() -> None:
            while not (server.sockets and not server.sockets[-1].closed):
                await asyncio.sleep(0.01)
            await asyncio.to_thread(server.say, DM, ALICE, "over the link")

        push = asyncio.ensure_future(pushed())
        await run_until(made.receive(), lambda: core.routed and server.acks)
        await push
        return core.routed

    [routed] = drive(server, chats, body)
    assert (routed.chat, routed.sender, routed.text) == (DM, f"{TEAM}:{ALICE}", "over the link")
    assert len(server.acks) == 1 and server.unknown_acks == []


def feeding(made: SlackAdapter, *items: dict[str, Any]) -> None:
    made.socket = cast(Any, Link())
    for item in items:
        made.events.put_nowait(item)


def test_an_event_the_queue_does_not_take_is_handled_again_with_the_backoff(
    chats: ChatStore,
) -> None:
    made, core = make(chats)
    feeding(made, payload(event("full", ts="1.1"), event_id="Ev1"))
    feeding(made, payload(event("then", ts="1.2"), event_id="Ev2"))
    tries: list[str] = []

    async def route(r: Received) -> None:
        tries.append(r.text)
        if tries.count(r.text) <= (2 if r.text == "full" else 1):
            raise OrchestratorError("the disk is full")
        core.routed.append(r)

    async def not_queued(what: str, exc: Any, backoff: Any) -> None:
        core.unqueued.append((what, exc.message, backoff.seconds))
        backoff.seconds *= 2  # as the core's wait does, without the wait

    core.route = route  # type: ignore[method-assign]
    core.not_queued = not_queued  # type: ignore[method-assign]
    asyncio.run(run_until(made.receive(), lambda: len(core.routed) == 2))
    assert tries == ["full", "full", "full", "then", "then"]
    assert core.unqueued == [
        ("event Ev1", "the disk is full", 1.0),
        ("event Ev1", "the disk is full", 2.0),
        ("event Ev2", "the disk is full", 1.0),  # reset by the event handled
    ]


def test_a_stop_ends_the_read_and_leaves_the_rest(chats: ChatStore) -> None:
    made, core = make(chats)
    feeding(made, payload(event("one", ts="1.1")), payload(event("two", ts="1.2")))

    async def route(r: Received) -> None:
        raise DaemonStopping("stopping")

    core.route = route  # type: ignore[method-assign]
    assert asyncio.run(asyncio.wait_for(made.receive(), 10)) is None
    assert made.events.qsize() == 1 and core.unqueued == []


def test_an_event_that_fails_otherwise_is_skipped_and_the_rest_handled(
    chats: ChatStore, caplog: pytest.LogCaptureFixture
) -> None:
    made, core = make(chats)
    feeding(made, payload(event("breaks", ts="1.1"), event_id="Ev7"))
    feeding(made, payload(event("fine", ts="1.2"), event_id="Ev8"))

    async def route(r: Received) -> None:
        if r.text == "breaks":
            raise ValueError("a bug")
        core.routed.append(r)

    core.route = route  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        asyncio.run(run_until(made.receive(), lambda: core.routed))
    assert [r.text for r in core.routed] == ["fine"]
    assert logged(caplog) == ["Slack account fuzzbot: event Ev7 could not be handled; skipped"]
    assert core.unqueued == []


# handling one event


def handled(made: SlackAdapter, core: StubCore, *items: dict[str, Any]) -> list[Received]:
    async def main() -> None:
        for item in items:
            await made.handle(item)

    asyncio.run(main())
    return core.routed


@pytest.fixture
def bare(chats: ChatStore) -> tuple[SlackAdapter, StubCore]:
    """An adapter that knows its bot and team, not connected."""
    made, core = make(chats)
    made.me, made.team = BOT_USER, TEAM
    return made, core


def test_a_message_is_received_with_its_ids_text_and_conversation(
    bare: tuple[SlackAdapter, StubCore],
) -> None:
    made, core = bare
    item = event("hi &amp; <@U0BOB> <https://x.org|the site>")
    [routed] = handled(made, core, payload(item))
    assert routed == Received(
        chat=DM,
        sender=f"{TEAM}:{ALICE}",
        text="hi & @U0BOB the site (https://x.org)",
        message_id=TS,
        event_id=f"{DM}:{TS}",
        thread=None,
        group_chat=False,
        title=None,
        raw=item,
    )
    assert list(made.seen) == [f"{DM}:{TS}"]


def test_a_message_without_text_has_none(bare: tuple[SlackAdapter, StubCore]) -> None:
    made, core = bare
    no_text = event(None, ts="1.1")
    del no_text["text"]
    routed = handled(made, core, payload(no_text), payload(event(None, ts="1.2")))
    assert [r.text for r in routed] == ["", ""]


@pytest.mark.parametrize(
    ("thread", "expected"), [(None, None), (TS, None), (ROOT, ROOT), ("", None)]
)
def test_a_thread_is_its_root_and_a_threads_root_is_in_none(
    bare: tuple[SlackAdapter, StubCore], thread: str | None, expected: str | None
) -> None:
    made, core = bare
    [routed] = handled(made, core, payload(event(thread_ts=thread)))
    assert routed.thread == expected


@pytest.mark.parametrize(
    ("kind", "channel_type", "group"),
    [
        ("message", "im", False),
        ("message", "channel", True),
        ("message", "mpim", True),
        ("message", None, True),
        ("app_mention", "im", True),
        ("app_mention", None, True),
    ],
)
def test_only_a_direct_message_is_a_private_chat(
    bare: tuple[SlackAdapter, StubCore], kind: str, channel_type: str | None, group: bool
) -> None:
    made, core = bare
    [routed] = handled(made, core, payload(event(type=kind, channel_type=channel_type)))
    assert routed.group_chat is group


@pytest.mark.parametrize(
    ("fields", "team_id", "team"),
    [
        ({"user_team": "T0GUEST", "team": "T0HOST"}, "T0PAYLOAD", "T0GUEST"),
        ({"team": "T0HOST"}, "T0PAYLOAD", "T0HOST"),
        ({"team": None}, "T0PAYLOAD", "T0PAYLOAD"),
        ({"team": None}, None, TEAM),
        ({"user_team": "", "team": ""}, "", TEAM),
    ],
)
def test_the_sender_is_their_team_and_user(
    bare: tuple[SlackAdapter, StubCore], fields: dict[str, Any], team_id: Any, team: str
) -> None:
    made, core = bare
    item = payload(event(**fields))
    if team_id is None:
        del item["team_id"]
    else:
        item["team_id"] = team_id
    [routed] = handled(made, core, item)
    assert routed.sender == f"{team}:{ALICE}"


def test_a_person_shares_a_file_or_broadcasts_a_thread_reply(
    bare: tuple[SlackAdapter, StubCore],
) -> None:
    made, core = bare
    routed = handled(
        made,
        core,
        payload(event("a", ts="1.1", subtype="file_share")),
        payload(event("b", ts="1.2", subtype="thread_broadcast", thread_ts=ROOT)),
        payload(event("c", ts="1.3", type="app_mention", channel=CHANNEL)),
    )
    assert [(r.text, r.message_id) for r in routed] == [("a", "1.1"), ("b", "1.2"), ("c", "1.3")]


@pytest.mark.parametrize(
    "item",
    [
        event(subtype="message_changed"),
        event(subtype="message_deleted"),
        event(subtype="channel_join"),
        event(subtype="bot_message"),
        event(type="reaction_added"),
        event(type="app_mention", subtype="message_changed"),
        event(user=None),
        event(user=""),
        event(channel=None),
        event(ts=None),
        event(bot_id="B0OTHER"),
        event(user=BOT_USER),
    ],
)
def test_edits_joins_apps_and_the_bots_own_start_nothing(
    bare: tuple[SlackAdapter, StubCore], item: dict[str, Any]
) -> None:
    made, core = bare
    assert handled(made, core, payload(item), {"event": None}, {}) == []
    assert list(made.seen) == []


def test_an_event_without_a_bot_known_is_still_a_persons(chats: ChatStore) -> None:
    made, core = make(chats)
    [routed] = handled(made, core, payload(event(user=ALICE)))
    assert routed.sender == f"{TEAM}:{ALICE}"
    made.team = ""
    routed = handled(made, core, payload(event(team=None, ts="1.9")) | {"team_id": None})[-1]
    assert routed.sender == f":{ALICE}"


def test_a_message_seen_again_is_dropped_also_as_a_mention(
    bare: tuple[SlackAdapter, StubCore],
) -> None:
    made, core = bare
    item = event(f"<@{BOT_USER}> hi", channel=CHANNEL, channel_type="channel")
    mention = {**item, "type": "app_mention"}
    del mention["channel_type"]
    routed = handled(
        made, core, payload(item), payload(mention, event_id="Ev2"), payload(item, retry_attempt=1)
    )
    assert [r.raw for r in routed] == [item]


def queued(chats: ChatStore, account: str, key: str) -> None:
    chats.queue.transaction(
        lambda db: db.execute(
            "INSERT INTO channel_inbound (account, update_id, at) VALUES (?, ?, ?)",
            (account, key, 1.0),
        )
    )


def test_a_message_queued_before_a_restart_is_dropped(chats: ChatStore) -> None:
    queued(chats, "fuzzbot", f"{DM}:1.1")
    queued(chats, "other", f"{DM}:1.2")
    queued(chats, "fuzzbot", f"{CHANNEL}:1.2")
    made, core = make(chats)
    routed = handled(made, core, payload(event(ts="1.1")), payload(event(ts="1.2")))
    assert [r.message_id for r in routed] == ["1.2"]
    assert list(made.seen) == [f"{DM}:1.2"]


def test_the_last_two_thousand_messages_are_remembered(
    bare: tuple[SlackAdapter, StubCore],
) -> None:
    made, core = bare
    for n in range(2000):
        made.seen[f"{DM}:0.{n}"] = None
    handled(made, core, payload(event(ts="9.9")))
    assert len(made.seen) == 2000
    assert next(iter(made.seen)) == f"{DM}:0.1" and next(reversed(made.seen)) == f"{DM}:9.9"
    assert handled(made, core, payload(event(ts="0.0")))[-1].message_id == "0.0"


def test_events_that_start_nothing_or_come_again_are_logged(
    bare: tuple[SlackAdapter, StubCore], caplog: pytest.LogCaptureFixture
) -> None:
    made, core = bare
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        handled(
            made,
            core,
            payload({"type": "reaction_added"}, event_id="Ev3"),
            payload(event(subtype="message_changed"), event_id="Ev4"),
            payload(event(), event_id="Ev5"),
            payload(event(), event_id="Ev6", retry_attempt=2),
            payload(event(), event_id="Ev7"),
        )
    assert logged(caplog) == [
        "Slack account fuzzbot: reaction_added event Ev3 (-) starts no turn",
        "Slack account fuzzbot: message event Ev4 (message_changed) starts no turn",
        f"Slack account fuzzbot: message {DM}:{TS} came again (event Ev6, retry 2); dropped",
        f"Slack account fuzzbot: message {DM}:{TS} came again (event Ev7, retry -); dropped",
    ]


# whom a message is for


def said(**fields: Any) -> Received:
    return Received(CHANNEL, f"{TEAM}:{BOB}", "t", TS, TS, group_chat=True, raw=fields)


@pytest.mark.parametrize(
    ("fields", "me", "addressed"),
    [
        ({"type": "app_mention", "text": "hi"}, BOT_USER, True),
        ({"type": "app_mention"}, "", True),
        ({"type": "message", "text": f"hi <@{BOT_USER}>"}, BOT_USER, True),
        ({"type": "message", "text": f"<@{BOT_USER}|helper> hi"}, BOT_USER, True),
        ({"type": "message", "text": f"hi @{BOT_USER}"}, BOT_USER, False),
        ({"type": "message", "text": "hi <@U0BOB>"}, BOT_USER, False),
        ({"type": "message", "text": "hi <@U0BOB>"}, "", False),
        ({"type": "message", "text": None}, BOT_USER, False),
        ({"type": "message", "parent_user_id": BOT_USER}, BOT_USER, True),
        ({"type": "message", "parent_user_id": BOB}, BOT_USER, False),
        ({"type": "message", "parent_user_id": ""}, "", False),
        ({"type": "message"}, BOT_USER, False),
    ],
)
def test_a_channel_message_is_for_the_bot_when_it_says_so(
    chats: ChatStore, fields: dict[str, Any], me: str, addressed: bool
) -> None:
    made, _ = make(chats)
    made.me = me
    assert made.addressed(said(**fields)) is addressed


def test_the_bot_is_mentioned_by_its_user_id(bare: tuple[SlackAdapter, StubCore]) -> None:
    assert bare[0].mention_forms(said()) == (f"@{BOT_USER}",)


# files in


def files_of(*files: Any) -> Received:
    return Received(DM, f"{TEAM}:{ALICE}", "", TS, TS, raw=event(files=list(files)))


def fetched(
    server: FakeSlack, chats: ChatStore, root: Path, received: Received, **options: Any
) -> Any:
    async def body(made: SlackAdapter, core: StubCore) -> Any:
        return await made.attachment(received, "fam")

    return drive(server, chats, body, root, **options)


def stored_as(root: Path, stored: Any) -> list[tuple[Any, ...]]:
    """What was stored of each file: its bytes and description (the name is the host's)."""
    inbox = root / "fam" / "files" / "inbox"
    return [
        ((inbox / s.name).read_bytes(), s.mime, s.size, s.kind, s.duration, s.original, s.label)
        for s in stored
    ]


def test_a_file_is_downloaded_with_the_token_and_stored(
    server: FakeSlack, chats: ChatStore, root: Path
) -> None:
    pdf = server.add_file("F1", "report.pdf", "application/pdf", b"%PDF-1.4 tiny")
    stored = fetched(server, chats, root, files_of(pdf))
    assert stored_as(root, stored) == [
        (b"%PDF-1.4 tiny", "application/pdf", 13, "document", None, "report.pdf", "file")
    ]
    [download] = server.calls_of("file")
    assert download.token == BOT_TOKEN
    assert download.params["path"] == "/files-pri/T0FAMILY-F1/download/report.pdf"


def test_an_audio_clip_is_stored_as_a_voice_note(
    server: FakeSlack, chats: ChatStore, root: Path
) -> None:
    clip = server.add_file("F2", "audio_message.mp4", "video/mp4", b"\x00 ftyp clip")
    clip.update(subtype="slack_audio", duration_ms=7300)
    nameless = {**server.add_file("F3", "x.bin", "application/octet-stream", b"raw"), "name": ""}
    stored = fetched(server, chats, root, files_of(clip, nameless))
    assert stored_as(root, stored) == [
        (b"\x00 ftyp clip", "audio/mp4", 11, "voice", 7.3, "audio_message.mp4", "audio clip"),
        (b"raw", "application/octet-stream", 3, "other", None, None, "file"),
    ]


def test_a_file_at_the_limit_is_taken_and_one_over_it_refused_unfetched(
    server: FakeSlack, chats: ChatStore, root: Path
) -> None:
    at = server.add_file("F1", "at.bin", "application/octet-stream", b"a" * 1000)
    over = server.add_file("F2", "over.bin", "application/octet-stream", b"b" * 1001)
    stored = fetched(server, chats, root, files_of(at), attachments_max_bytes=1000)
    assert [s.size for s in stored] == [1000]
    refused = fetched(server, chats, root, files_of(at, over), attachments_max_bytes=1000)
    assert refused == Refusal("Sorry, that file is 1001 B; I take files up to 1000 B.")
    assert len(server.calls_of("file")) == 1  # the first only: nothing of the second pair


def test_a_file_larger_than_it_said_is_refused_by_the_limit(
    server: FakeSlack, chats: ChatStore, root: Path
) -> None:
    lying = {**server.add_file("F1", "a.bin", "application/octet-stream", b"x" * 1001), "size": 5}
    refused = fetched(server, chats, root, files_of(lying), attachments_max_bytes=1000)
    assert refused == Refusal("Sorry, that file is 1001 B; I take files up to 1000 B.")
    assert list((root / "fam").iterdir()) == []
    unsized = server.add_file("F2", "b.bin", "application/octet-stream", b"y" * 1000)
    del unsized["size"]
    stored = fetched(server, chats, root, files_of(unsized), attachments_max_bytes=1000)
    assert [s.size for s in stored] == [1000]


def test_a_download_in_many_chunks_is_measured_and_joined_whole(
    server: FakeSlack, chats: ChatStore, root: Path
) -> None:
    data = bytes(range(256)) * 800  # 204,800 bytes: four chunks of the stream
    big = {**server.add_file("F1", "big.bin", "application/octet-stream", data), "size": 1}
    [stored] = fetched(server, chats, root, files_of(big), attachments_max_bytes=len(data))
    assert (root / "fam" / "files" / "inbox" / stored.name).read_bytes() == data
    refused = fetched(server, chats, root, files_of(big), attachments_max_bytes=len(data) - 1)
    assert refused == Refusal("Sorry, that file is 200.0 KiB; I take files up to 200.0 KiB.")


def test_no_files_are_taken_where_the_limit_is_none(
    server: FakeSlack, chats: ChatStore, root: Path
) -> None:
    pdf = server.add_file("F1", "r.pdf", "application/pdf", b"%PDF")
    refused = fetched(server, chats, root, files_of(pdf), attachments_max_bytes=0)
    assert refused == Refusal("Sorry, I do not take files here.")
    # nor one that says no size, nor an empty one: nothing is downloaded
    unsized = server.add_file("F2", "a.bin", "application/octet-stream", b"")
    del unsized["size"]
    empty = server.add_file("F3", "b.bin", "application/octet-stream", b"")
    for item in (unsized, empty):
        refused = fetched(server, chats, root, files_of(item), attachments_max_bytes=0)
        assert refused == Refusal("Sorry, I do not take files here.")
    assert server.calls_of("file") == []
    assert list((root / "fam").iterdir()) == []


def test_ten_files_are_taken_of_a_message(server: FakeSlack, chats: ChatStore, root: Path) -> None:
    files = [server.add_file(f"F{n}", f"{n}.txt", "text/plain", str(n).encode()) for n in range(11)]
    stored = fetched(server, chats, root, files_of("F99", None, *files))
    assert [data for data, *_ in stored_as(root, stored)] == [str(n).encode() for n in range(10)]
    assert len(server.calls_of("file")) == 10


def test_the_download_url_is_preferred_and_links_or_deleted_files_skipped(
    server: FakeSlack, chats: ChatStore, root: Path
) -> None:
    one = server.add_file("F1", "one.txt", "text/plain", b"one")
    two = server.add_file("F2", "two.txt", "text/plain", b"two")
    missing = f"{server.url}/files-pri/{TEAM}-F404/download/none.txt"
    preferred = {**one, "url_private": missing}
    fallback = {**two, "url_private_download": ""}
    external = {**one, "mode": "external"}
    deleted = {**one, "mode": "tombstone"}
    nowhere = {**one, "url_private": None, "url_private_download": None}
    stored = fetched(server, chats, root, files_of(external, deleted, nowhere, preferred, fallback))
    assert [data for data, *_ in stored_as(root, stored)] == [b"one", b"two"]
    assert [c.params["path"] for c in server.calls_of("file")] == [
        f"/files-pri/{TEAM}-F1/download/one.txt",
        f"/files-pri/{TEAM}-F2/download/two.txt",
    ]
    assert fetched(server, chats, root, files_of(external, deleted, nowhere)) is None
    assert fetched(server, chats, root, files_of()) is None
    assert fetched(server, chats, root, Received(DM, "s", "t", TS, TS, raw=event())) is None


def test_a_file_elsewhere_or_refused_is_not_fetched_and_the_sender_told(
    server: FakeSlack, chats: ChatStore, root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    elsewhere = {
        **server.add_file("F1", "a.pdf", "application/pdf", b"%PDF"),
        "url_private_download": "http://127.0.0.2:9/steal",
    }
    missing = f"{server.url}/files-pri/{TEAM}-F404/download/none.txt"
    gone = {
        **server.add_file("F2", "b.pdf", "application/pdf", b"%PDF"),
        "url_private_download": missing,
    }
    sorry = Refusal("Sorry, I could not fetch that file from Slack.")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert fetched(server, chats, root, files_of(elsewhere)) == sorry
        assert fetched(server, chats, root, files_of(gone)) == sorry
    assert [c.params["path"] for c in server.calls_of("file")] == [
        f"/files-pri/{TEAM}-F404/download/none.txt"
    ]
    first, second = logged(caplog)
    assert first == (
        "Slack account fuzzbot: file http://127.0.0.2:9/steal not fetched: "
        "it is not on Slack's file host"
    )
    assert second.startswith(f"Slack account fuzzbot: file {missing} not fetched: 404, ")


def test_a_redirect_is_not_taken_for_the_file(
    server: FakeSlack, chats: ChatStore, root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    moved = {
        **server.add_file("F3", "c.pdf", "application/pdf", b"%PDF"),
        "url_private_download": f"{server.url}/files-pri/{TEAM}-F302/download/c.pdf",
    }
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert fetched(server, chats, root, files_of(moved)) == Refusal(
            "Sorry, I could not fetch that file from Slack."
        )
    assert logged(caplog) == [
        f"Slack account fuzzbot: file {moved['url_private_download']} not fetched: "
        "Slack answered HTTP 302, not the file"
    ]
    assert not list(root.rglob("inbox/*"))


class Answer:
    """A stand-in for an aiohttp response: its status and body."""

    def __init__(self, status: int, body: bytes) -> None:
        self.status = status
        self.body = body
        self.content = self

    def raise_for_status(self) -> None:
        if self.status >= 400:
            raise aiohttp.ClientError(f"HTTP {self.status}")

    async def iter_chunked(self, size: int) -> AsyncIterator[bytes]:
        for start in range(0, len(self.body), size):
            yield self.body[start : start + size]

    async def text(self, errors: str = "strict") -> str:
        return self.body.decode("utf-8", errors=errors)

    async def __aenter__(self) -> Answer:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        return None


class Session:
    """A stand-in for the adapter's aiohttp session: records each request and answers
    ``answer``."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.requests: list[tuple[Any, ...]] = []

    def get(self, url: str, **kwargs: Any) -> Answer:
        self.requests.append(("GET", url, kwargs))
        return self.answer

    def post(self, url: str, **kwargs: Any) -> Answer:
        self.requests.append(("POST", url, kwargs))
        return self.answer


def test_only_slacks_file_host_and_the_api_host_get_the_token(chats: ChatStore) -> None:
    made, _ = make(chats)
    made.bot_token = BOT_TOKEN
    session = Session(Answer(200, b"data"))
    made.http = cast(Any, session)
    files = "https://files.slack.com/files-pri/T-F1/download/a.pdf"
    api = "https://slack.com/files-pri/T-F1/download/a.pdf"

    async def main() -> list[Any]:
        got = [await made._download(files, 4), await made._download(api, 4)]
        for elsewhere in ("https://files.slack.com.evil.example/a", "https://evil.example/a"):
            with pytest.raises(FileElsewhere, match=r"^it is not on Slack's file host$"):
                await made._download(elsewhere, 4)
        return got

    assert asyncio.run(main()) == [b"data", b"data"]
    headers = {"Authorization": f"Bearer {BOT_TOKEN}"}
    assert session.requests == [
        ("GET", files, {"headers": headers, "allow_redirects": False}),
        ("GET", api, {"headers": headers, "allow_redirects": False}),
    ]


# sending


def posted(server: FakeSlack) -> list[dict[str, Any]]:
    return [c.params for c in server.calls_of("chat.postMessage")]


def test_a_reply_is_mrkdwn_unfurling_nothing(server: FakeSlack, chats: ChatStore) -> None:
    async def body(made: SlackAdapter, core: StubCore) -> Any:
        return await made.send(DM, None, "1.1", "**hi** <there>", "k")

    ids = drive(server, chats, body)
    [post] = server.calls_of("chat.postMessage")
    assert post.token == BOT_TOKEN
    assert post.params == {
        "channel": DM,
        "text": "*hi* &lt;there&gt;",
        "mrkdwn": True,
        "unfurl_links": False,
        "unfurl_media": False,
        "ts": ids[0],
    }


def test_a_reply_goes_into_the_thread_answered(server: FakeSlack, chats: ChatStore) -> None:
    async def body(made: SlackAdapter, core: StubCore) -> Any:
        return await made.send(CHANNEL, ROOT, TS, "hi", "k")

    ids = drive(server, chats, body)
    assert posted(server) == [
        {
            "channel": CHANNEL,
            "text": "hi",
            "thread_ts": ROOT,
            "mrkdwn": True,
            "unfurl_links": False,
            "unfurl_media": False,
            "ts": ids[0],
        }
    ]


def test_a_reply_at_the_limit_is_one_message_and_over_it_two(
    server: FakeSlack, chats: ChatStore
) -> None:
    async def body(made: SlackAdapter, core: StubCore) -> Any:
        one = await made.send(DM, ROOT, None, "a" * 4000, "k")
        two = await made.send(DM, ROOT, None, "a" * 3000 + "\n\n" + "b" * 1001, "k")
        return one, two

    one, two = drive(server, chats, body)
    assert [p["text"] for p in posted(server)] == ["a" * 4000, "a" * 3000, "b" * 1001]
    assert [p["thread_ts"] for p in posted(server)] == [ROOT] * 3
    assert (one, two) == ([posted(server)[0]["ts"]], [p["ts"] for p in posted(server)[1:]])


def test_a_429_is_waited_out_for_its_retry_after_capped_at_ten_minutes(
    server: FakeSlack, chats: ChatStore, waits: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    server.fail("chat.postMessage", *limited("7"))
    server.fail("chat.postMessage", *limited("5000"))
    server.fail("chat.postMessage", *limited())

    async def body(made: SlackAdapter, core: StubCore) -> Any:
        return await made.send(DM, None, None, "hi", "k")

    with caplog.at_level(logging.INFO, logger=LOGGER):
        ids = drive(server, chats, body)
    assert waits == [7.0, 600.0, 1.0]
    assert len(posted(server)) == 4 and ids == [posted(server)[-1]["ts"]]
    assert logged(caplog) == [
        "Slack account fuzzbot: rate-limited; waiting 7s",
        "Slack account fuzzbot: rate-limited; waiting 600s",
        "Slack account fuzzbot: rate-limited; waiting 1s",
    ]


@pytest.mark.parametrize(
    ("status", "answer"),
    [
        (200, {"ok": False, "error": "channel_not_found"}),
        (500, {"ok": False, "error": "fatal_error"}),
        (428, {"ok": False, "error": "ratelimited"}),
        (430, {"ok": False, "error": "ratelimited"}),
    ],
)
def test_a_refused_send_is_raised_at_once_and_failed(
    server: FakeSlack, chats: ChatStore, waits: list[float], status: int, answer: Any
) -> None:
    server.fail("chat.postMessage", status, answer, {"Retry-After": "1"})

    async def body(made: SlackAdapter, core: StubCore) -> Any:
        with pytest.raises(SlackApiError) as refused:
            await made.send(DM, None, None, "hi", "k")
        return refused.value, made.classify(refused.value)

    error, outcome = drive(server, chats, body)
    assert error.response["error"] == answer["error"] and outcome == FAILED
    assert waits == [] and len(posted(server)) == 1


def outgoing(tmp_path: Path, caption: str = "", name: str = "r.pdf") -> OutgoingFile:
    path = tmp_path / "outbox.bin"
    path.write_bytes(b"%PDF")
    return OutgoingFile(path, name, "application/pdf", 4, "document", caption)


def test_a_file_is_uploaded_and_shared_once_into_the_thread_with_its_caption(
    server: FakeSlack, chats: ChatStore, tmp_path: Path
) -> None:
    file = outgoing(tmp_path, "here is **the** report")

    async def body(made: SlackAdapter, core: StubCore) -> Any:
        return await made.send_file(DM, ROOT, TS, file, "k")

    assert drive(server, chats, body) == ["F0UP0000001"]
    calls = [(c.method, c.token) for c in server.calls[2:]]
    assert calls == [
        ("files.getUploadURLExternal", BOT_TOKEN),
        ("upload", None),
        ("files.completeUploadExternal", BOT_TOKEN),
    ]
    [issue] = server.calls_of("files.getUploadURLExternal")
    assert issue.params == {"filename": "r.pdf", "length": "4"}
    [upload] = server.calls_of("upload")
    assert upload.params["size"] == 4
    [complete] = server.calls_of("files.completeUploadExternal")
    assert complete.params == {
        "files": json.dumps([{"id": "F0UP0000001", "title": "r.pdf"}]),
        "channel_id": DM,
        "thread_ts": ROOT,
        "initial_comment": "here is *the* report",
    }
    [share] = server.shared(DM)
    assert share["file"] == {"id": "F0UP0000001", "name": "r.pdf", "data": b"%PDF"}
    assert posted(server) == []


@pytest.mark.parametrize("caption", ["", "  \n "])
def test_a_file_without_words_has_no_comment_and_outside_a_thread_none(
    server: FakeSlack, chats: ChatStore, tmp_path: Path, caption: str
) -> None:
    file = outgoing(tmp_path, caption)

    async def body(made: SlackAdapter, core: StubCore) -> Any:
        return await made.send_file(CHANNEL, None, None, file, "k")

    assert drive(server, chats, body) == ["F0UP0000001"]
    [complete] = server.calls_of("files.completeUploadExternal")
    assert complete.params == {
        "files": json.dumps([{"id": "F0UP0000001", "title": "r.pdf"}]),
        "channel_id": CHANNEL,
    }


def test_a_caption_over_the_limit_follows_the_file_in_messages(
    server: FakeSlack, chats: ChatStore, tmp_path: Path
) -> None:
    file = outgoing(tmp_path, "a" * 3000 + "\n\n" + "b" * 3000 + "\n\n" + "c" * 3000)

    async def body(made: SlackAdapter, core: StubCore) -> Any:
        return await made.send_file(DM, ROOT, None, file, "k")

    ids = drive(server, chats, body)
    [complete] = server.calls_of("files.completeUploadExternal")
    assert complete.params["initial_comment"] == "a" * 3000
    rest = posted(server)
    assert rest == [
        {
            "channel": DM,
            "text": text,
            "thread_ts": ROOT,
            "mrkdwn": True,
            "unfurl_links": False,
            "ts": rest[n]["ts"],
        }
        for n, text in enumerate(["b" * 3000, "c" * 3000])
    ]
    assert ids == ["F0UP0000001", rest[0]["ts"], rest[1]["ts"]]


@pytest.mark.parametrize(
    ("files", "ids"),
    [([], ["F0ISSUED"]), (["F0X", {"id": "F0A"}, {"id": "F0B"}], ["F0A", "F0B"])],
)
def test_the_files_shared_are_named_by_slacks_answer_or_the_one_issued(
    server: FakeSlack, chats: ChatStore, tmp_path: Path, files: list[Any], ids: list[str]
) -> None:
    issued = {"ok": True, "upload_url": f"{server.url}/upload/v1/none", "file_id": "F0ISSUED"}
    server.fail("files.getUploadURLExternal", 200, issued)
    server.fail("upload", 200, {})
    server.fail("files.completeUploadExternal", 200, {"ok": True, "files": files})

    async def body(made: SlackAdapter, core: StubCore) -> Any:
        return await made.send_file(DM, None, None, outgoing(tmp_path), "k")

    assert drive(server, chats, body) == ids
    [complete] = server.calls_of("files.completeUploadExternal")
    assert complete.params["files"] == json.dumps([{"id": "F0ISSUED", "title": "r.pdf"}])


def test_a_429_on_an_upload_step_is_waited_out(
    server: FakeSlack, chats: ChatStore, tmp_path: Path, waits: list[float]
) -> None:
    server.fail("files.getUploadURLExternal", *limited("4"))
    server.fail("files.completeUploadExternal", *limited("6"))

    async def body(made: SlackAdapter, core: StubCore) -> Any:
        return await made.send_file(DM, None, None, outgoing(tmp_path), "k")

    assert drive(server, chats, body) == ["F0UP0000001"]
    assert waits == [4.0, 6.0] and len(server.shared(DM)) == 1


def not_shared(server: FakeSlack, chats: ChatStore, tmp_path: Path) -> NotShared:
    async def body(made: SlackAdapter, core: StubCore) -> Any:
        with pytest.raises(NotShared) as failed:
            await made.send_file(DM, None, None, outgoing(tmp_path), "k")
        assert made.classify(failed.value) == (RETRY if failed.value.retry else FAILED)
        return failed.value

    failed = drive(server, chats, body)
    assert server.calls_of("files.completeUploadExternal") == [] and server.shared() == []
    return cast(NotShared, failed)


@pytest.mark.parametrize(
    ("status", "retry"), [(503, True), (500, True), (499, False), (404, False)]
)
def test_an_upload_refused_is_not_shared_and_tried_again_after_a_server_error(
    server: FakeSlack, chats: ChatStore, tmp_path: Path, status: int, retry: bool
) -> None:
    server.fail("upload", status, {"error": "x" * 300})
    failed = not_shared(server, chats, tmp_path)
    body = json.dumps({"error": "x" * 300})[:200]
    assert str(failed) == f"Slack's file upload answered HTTP {status}: {body}"
    assert failed.retry is retry


def test_an_upload_url_not_of_http_is_refused_unsent(
    server: FakeSlack, chats: ChatStore, tmp_path: Path
) -> None:
    url = "ftp://127.0.0.1/" + "u" * 100
    server.fail("files.getUploadURLExternal", 200, {"ok": True, "upload_url": url, "file_id": "F1"})
    failed = not_shared(server, chats, tmp_path)
    assert str(failed) == f"Slack gave an upload URL that is not HTTP: {url[:80]!r}"
    assert failed.retry is False and server.calls_of("upload") == []


def test_an_upload_that_cannot_connect_is_tried_again(
    server: FakeSlack, chats: ChatStore, tmp_path: Path
) -> None:
    url = "http://127.0.0.1:1/upload/v1/x"
    server.fail("files.getUploadURLExternal", 200, {"ok": True, "upload_url": url, "file_id": "F1"})
    failed = not_shared(server, chats, tmp_path)
    assert str(failed).startswith("uploading r.pdf failed: ClientConnectorError(")
    assert failed.retry is True and isinstance(failed.__cause__, aiohttp.ClientConnectorError)


def test_an_upload_goes_without_a_token_redirect_or_longer_than_five_minutes(
    chats: ChatStore,
) -> None:
    made, _ = make(chats)
    made.bot_token = BOT_TOKEN
    session = Session(Answer(200, b"OK"))
    made.http = cast(Any, session)
    asyncio.run(made._upload("https://files.slack.com/upload/v1/abc", b"data"))
    [(verb, url, kwargs)] = session.requests
    assert (verb, url, sorted(kwargs)) == (
        "POST",
        "https://files.slack.com/upload/v1/abc",
        ["allow_redirects", "data", "timeout"],
    )
    assert kwargs["data"] == b"data" and kwargs["allow_redirects"] is False
    assert kwargs["timeout"] == aiohttp.ClientTimeout(total=300)


def test_an_upload_refused_in_bytes_not_utf8_is_read_with_replacements(chats: ChatStore) -> None:
    made, _ = make(chats)
    made.http = cast(Any, Session(Answer(302, b"moved \xff")))
    with pytest.raises(NotShared) as failed:
        asyncio.run(made._upload("http://127.0.0.1:5/u", b"data"))
    assert str(failed.value) == "Slack's file upload answered HTTP 302: moved \ufffd"
    assert failed.value.retry is False


# how a failed send ended


def slack_error(status: int) -> SlackApiError:
    return SlackApiError("refused", SimpleNamespace(status_code=status, headers={}))


@pytest.mark.parametrize(
    ("exc", "outcome"),
    [
        (NotShared("x", retry=True), RETRY),
        (NotShared("x", retry=False), FAILED),
        (
            aiohttp.ClientConnectorError(
                cast(Any, SimpleNamespace(ssl=None, host="slack.com", port=443)),
                OSError(111, "refused"),
            ),
            RETRY,
        ),
        (slack_error(200), FAILED),
        (slack_error(500), FAILED),
        (aiohttp.ServerDisconnectedError(), UNKNOWN),
        (aiohttp.ClientError("reset"), UNKNOWN),
        (TimeoutError(), UNKNOWN),
        (FileElsewhere("x"), UNKNOWN),
        (ValueError("else"), UNKNOWN),
    ],
)
def test_a_failed_send_is_classified_by_whether_it_may_have_arrived(
    chats: ChatStore, exc: BaseException, outcome: str
) -> None:
    assert make(chats)[0].classify(exc) == outcome
