"""The Matrix adapter (orchestrator/channels/matrix/adapter.py) driven directly, its nio
client talking to a fake homeserver on loopback (tests/fakematrix.py) that records every
request, with the account's state in a real ChatStore: the exact requests it makes
(paths, bodies, transaction ids), how it reads events into the core's messages, how it
answers invites, and its limits at their boundaries."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import nio
import pytest

from orchestrator.channels.chatapp.adapter import RETRY, OutgoingFile, Received, Refusal
from orchestrator.channels.matrix import adapter as module
from orchestrator.channels.matrix.adapter import MatrixAdapter, SendRefused
from orchestrator.channels.matrix.kind import MatrixOptions
from orchestrator.errors import DaemonStopping, OrchestratorError
from orchestrator.home import Home
from orchestrator.secrets import SecretRef
from orchestrator.store.chats import FAILED, ChatStore
from orchestrator.store.messages import open_queue
from tests.adaptercore import StubCore, run_until
from tests.fakematrix import FakeHomeserver

BOT, OPERATOR, EVE = "@helper:example.org", "@me:example.org", "@eve:evil.example"
ROOM = "!family:example.org"
TOKEN = "syt_aGVscGVy_fakeTokenForTests_0000"
NOTICE = "This room is end-to-end encrypted, which I do not support: I cannot read it, "


@pytest.fixture
def server() -> Iterator[FakeHomeserver]:
    fake = FakeHomeserver(BOT, TOKEN)
    yield fake
    fake.close()


@pytest.fixture
def chats(tmp_path: Path) -> Iterator[ChatStore]:
    queue = open_queue(Home(tmp_path / "home"))
    yield ChatStore(queue)
    queue.close()


Body = Callable[[MatrixAdapter, StubCore], Awaitable[Any]]


def make(
    server_url: str, chats: ChatStore, root: Path | None = None, **options: Any
) -> tuple[MatrixAdapter, StubCore]:
    settings = {"allow_inviters": (OPERATOR,), **options}
    core = StubCore(MatrixOptions(server_url, BOT, **settings), "matrix:", chats, TOKEN, root)
    return MatrixAdapter(cast(Any, core)), core


def drive(
    server: FakeHomeserver, chats: ChatStore, body: Body, root: Path | None = None, **options: Any
) -> Any:
    """``body`` with an adapter connected to the fake homeserver (closed after it)."""

    async def main() -> Any:
        made, core = make(server.url, chats, root, **options)
        await made.connect()
        try:
            return await body(made, core)
        finally:
            await made.close()

    return asyncio.run(main())


def message(
    body: str = "hello", sender: str = OPERATOR, event_id: str = "$m1", **content: Any
) -> dict[str, Any]:
    return {
        "type": "m.room.message",
        "event_id": event_id,
        "sender": sender,
        "origin_server_ts": 1764669600000,
        "content": {"msgtype": "m.text", "body": body, **content},
    }


def joined(
    events: list[dict[str, Any]], members: int = 3, *, encrypted: bool = False, batch: str = "s2"
) -> dict[str, Any]:
    """A /sync answer: ROOM joined with ``members`` members, these events in its timeline."""
    people = [BOT, OPERATOR, "@bob:example.org", "@carol:example.org"][:members]
    state = [
        {
            "type": "m.room.member",
            "state_key": who,
            "sender": who,
            "event_id": f"$j{i}",
            "origin_server_ts": 1,
            "content": {"membership": "join"},
        }
        for i, who in enumerate(people)
    ]
    if encrypted:
        state.append(
            {
                "type": "m.room.encryption",
                "state_key": "",
                "sender": OPERATOR,
                "event_id": "$enc",
                "origin_server_ts": 1,
                "content": {"algorithm": "m.megolm.v1.aes-sha2"},
            }
        )
    return {
        "next_batch": batch,
        "rooms": {
            "join": {
                ROOM: {
                    "state": {"events": state},
                    "timeline": {"events": events, "limited": False},
                    "summary": {"m.joined_member_count": members},
                }
            }
        },
    }


# the contents it writes


def test_a_reply_relates_to_its_thread_or_the_message_it_answers() -> None:
    assert module.relation("$t", "$r") == {
        "rel_type": "m.thread",
        "event_id": "$t",
        "is_falling_back": False,
        "m.in_reply_to": {"event_id": "$r"},
    }
    assert module.relation("$t", None) == {
        "rel_type": "m.thread",
        "event_id": "$t",
        "is_falling_back": True,
        "m.in_reply_to": {"event_id": "$t"},
    }
    assert module.relation(None, "$r") == {"m.in_reply_to": {"event_id": "$r"}}
    assert module.relation(None, None) is None
    assert module.relation("", "") is None


def test_a_notice_has_its_text_plain_and_rendered() -> None:
    assert module.notice_content("**hi**", None, None) == {
        "msgtype": "m.notice",
        "body": "**hi**",
        "format": "org.matrix.custom.html",
        "formatted_body": "<b>hi</b>",
    }
    assert module.notice_content("x", None, "$r")["m.relates_to"] == {
        "m.in_reply_to": {"event_id": "$r"}
    }


def test_a_file_events_caption_is_its_body_beside_a_filename() -> None:
    assert module._caption({"body": "look", "filename": "a.jpg"}) == "look"
    assert module._caption({"body": "a.jpg", "filename": "a.jpg"}) == ""
    assert module._caption({"body": "a.jpg"}) == ""
    assert module._caption({"body": 5, "filename": "a.jpg"}) == ""
    assert module._caption({"body": "look", "filename": ["a.jpg"]}) == ""
    assert module._object({"a": 1}) == {"a": 1} and module._object([1]) == {}


# reading /sync


def invite_state(
    sender: str, membership: str = "invite", name: str | None = "Kitchen", to: str = BOT
) -> dict[str, Any]:
    events: list[dict[str, Any]] = []
    if name is not None:
        events.append(
            {"type": "m.room.name", "state_key": "", "sender": sender, "content": {"name": name}}
        )
    events.append(
        {
            "type": "m.room.member",
            "state_key": to,
            "sender": sender,
            "content": {"membership": membership},
        }
    )
    return {"invite_state": {"events": events}}


def test_read_sync_leaves_out_only_the_invites_nio_cannot_read(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bad = invite_state(EVE)
    bad["invite_state"]["events"][-1]["unsigned"] = "not an object"
    answer = {
        "next_batch": "s9",
        "rooms": {"invite": {"!good:x": invite_state(OPERATOR), "!bad:x": bad}},
    }
    with caplog.at_level(logging.WARNING, logger="orchestrator.channels.matrix"):
        read = module.read_sync(answer)
    assert isinstance(read, nio.SyncResponse) and read.next_batch == "s9"
    assert list(read.rooms.invite) == ["!good:x"]
    assert [r.getMessage() for r in caplog.records] == [
        "Matrix: the invite to !bad:x could not be read; left out"
    ]
    assert isinstance(module.read_sync([]), nio.SyncError)
    plain = module.read_sync({"next_batch": "s1", "rooms": {"invite": []}})
    assert isinstance(plain, nio.SyncError)


def test_the_client_reads_a_sync_nio_fails_on_without_the_bad_invite(
    server: FakeHomeserver, chats: ChatStore
) -> None:
    bad = invite_state(EVE)
    bad["invite_state"]["events"][-1]["unsigned"] = "not an object"
    server.syncs.append(
        {"next_batch": "s5", "rooms": {"invite": {"!bad:x": bad, "!ok:x": invite_state(OPERATOR)}}}
    )

    async def body(made: MatrixAdapter, core: StubCore) -> Any:
        assert made.client is not None
        return await made.client.sync(timeout=0, since="s4")

    read = drive(server, chats, body)
    assert isinstance(read, nio.SyncResponse) and list(read.rooms.invite) == ["!ok:x"]
    assert read.transport_response is not None


def test_connect_checks_the_token_is_the_bots(server: FakeHomeserver, chats: ChatStore) -> None:
    async def body(made: MatrixAdapter, core: StubCore) -> Any:
        assert made.client is not None
        return made.client.user_id, made.client.device_id, made.client.access_token

    assert drive(server, chats, body) == (BOT, "FAKEDEVICE", TOKEN)
    [whoami] = server.of("GET", "/account/whoami$")
    assert whoami.headers["Authorization"] == f"Bearer {TOKEN}"
    made, core = make(server.url, chats)
    assert made.name == "fuzzbot" and made.user_id == BOT and core.health.bot == BOT
    assert made.typing_every == 15.0 and made.chat_word == "room" and made.resends_safely


@pytest.mark.parametrize(
    ("status", "answer", "error"),
    [
        (
            200,
            {"user_id": "@other:example.org"},
            f"the token belongs to @other:example.org, not to {BOT}",
        ),
        (
            401,
            {"errcode": "M_UNKNOWN_TOKEN", "error": "Invalid token"},
            "whoami failed: Invalid token",
        ),
    ],
)
def test_connect_refuses_a_token_of_someone_else_or_none(
    server: FakeHomeserver, chats: ChatStore, status: int, answer: Any, error: str
) -> None:
    server.answer("GET", "/account/whoami$", status, answer)
    made, _ = make(server.url, chats)
    with pytest.raises(OrchestratorError) as caught:
        asyncio.run(made.connect())
    assert caught.value.message == error
    assert made.client is None


def test_the_token_is_read_from_the_secrets_file(
    server: FakeHomeserver, chats: ChatStore, tmp_path: Path
) -> None:
    secrets = tmp_path / "secrets.yaml"
    secrets.write_text(f"matrix_bot: {TOKEN}\n")
    secrets.chmod(0o600)
    made, core = make(server.url, chats)
    core.account.token = SecretRef(None, "matrix_bot", "token_env", "token_secret")
    core.daemon.config = SimpleNamespace(secrets_file=secrets)

    async def main() -> Any:
        try:
            await made.connect()
            return made.client.access_token if made.client else None
        finally:
            await made.close()

    assert asyncio.run(main()) == TOKEN
    [whoami] = server.of("GET", "/account/whoami$")
    assert whoami.headers["Authorization"] == f"Bearer {TOKEN}"


def test_a_device_id_absent_is_empty(server: FakeHomeserver, chats: ChatStore) -> None:
    server.answer("GET", "/account/whoami$", 200, {"user_id": BOT})

    async def body(made: MatrixAdapter, core: StubCore) -> Any:
        return made.client.device_id if made.client else None

    assert drive(server, chats, body) == ""


def syncs(server: FakeHomeserver) -> list[dict[str, str]]:
    return [r.query for r in server.of("GET", "/sync$")]


def test_the_first_sync_learns_the_rooms_and_answers_no_history(
    server: FakeHomeserver, chats: ChatStore
) -> None:
    server.syncs += [joined([message("old")], batch="s1"), joined([message("new")], batch="s2")]

    async def body(made: MatrixAdapter, core: StubCore) -> list[str]:
        await run_until(made.receive(), lambda: core.routed)
        return [r.text for r in core.routed]

    assert drive(server, chats, body) == ["new"]
    first, second = syncs(server)[:2]
    assert "since" not in first and first["full_state"] == "true"
    assert first["timeout"] == "25000"
    assert (second["since"], second["full_state"]) == ("s1", "false")
    assert chats.get_state("fuzzbot", "since") in ("s1", "s2")


def test_a_sync_from_the_committed_token_answers_its_events(
    server: FakeHomeserver, chats: ChatStore
) -> None:
    chats.set_state("fuzzbot", "since", "s7")
    server.syncs.append(joined([message("now")], batch="s8"))

    async def body(made: MatrixAdapter, core: StubCore) -> Any:
        await run_until(made.receive(), lambda: core.saves)
        return [r.text for r in core.routed], core.polls, core.saves

    texts, polls, saves = drive(server, chats, body)
    assert texts == ["now"] and polls >= 1 and saves >= 1
    assert chats.get_state("fuzzbot", "since") == "s8"
    assert (syncs(server)[0]["since"], syncs(server)[0]["full_state"]) == ("s7", "false")


def test_a_room_of_two_read_from_a_sync_is_a_private_chat(
    server: FakeHomeserver, chats: ChatStore
) -> None:
    chats.set_state("fuzzbot", "since", "s1")
    server.syncs.append(joined([message("just us")], members=2))

    async def body(made: MatrixAdapter, core: StubCore) -> Any:
        await run_until(made.receive(), lambda: core.routed)
        return [(r.text, r.group_chat) for r in core.routed]

    assert drive(server, chats, body) == [("just us", False)]


def test_a_failed_sync_is_reported_with_a_backoff_reset_by_a_good_one(
    server: FakeHomeserver, chats: ChatStore
) -> None:
    chats.set_state("fuzzbot", "since", "s1")
    for _ in range(2):
        server.answer("GET", "/sync$", 502, {"errcode": "M_UNKNOWN", "error": "Bad Gateway"})
    server.syncs.append(joined([message("between")], batch="s2"))

    async def body(made: MatrixAdapter, core: StubCore) -> list[Any]:
        real = core.route

        async def route(r: Received) -> None:
            await real(r)
            server.answer("GET", "/sync$", 502, {"errcode": "M_UNKNOWN", "error": "Again"})

        core.route = route  # type: ignore[method-assign]
        await run_until(made.receive(), lambda: len(core.failed) >= 3)
        return core.failed

    failed = drive(server, chats, body)
    assert failed[:3] == [
        ("sync", "Bad Gateway", 1.0),
        ("sync", "Bad Gateway", 2.0),
        ("sync", "Again", 1.0),
    ]


def test_a_sync_that_raises_is_reported_as_failed(server: FakeHomeserver, chats: ChatStore) -> None:
    async def body(made: MatrixAdapter, core: StubCore) -> list[Any]:
        assert made.client is not None

        async def down(**_: Any) -> Any:
            raise OSError("Connection refused")

        made.client.sync = down  # type: ignore[method-assign]
        await run_until(made.receive(), lambda: len(core.failed) >= 2)
        return core.failed

    assert drive(server, chats, body)[:2] == [
        ("sync", "Connection refused", 1.0),
        ("sync", "Connection refused", 2.0),
    ]


def test_a_sync_the_queue_does_not_take_is_read_again(
    server: FakeHomeserver, chats: ChatStore
) -> None:
    chats.set_state("fuzzbot", "since", "s1")
    server.syncs += [joined([message("full disk")], batch="s2")] * 2

    async def body(made: MatrixAdapter, core: StubCore) -> list[Any]:
        tries: list[str] = []

        async def route(r: Received) -> None:
            tries.append(r.text)
            if len(tries) == 1:
                raise OrchestratorError("the disk is full")

        core.route = route  # type: ignore[method-assign]
        await run_until(made.receive(), lambda: chats.get_state("fuzzbot", "since") == "s2")
        return [tries, core.unqueued]

    tries, unqueued = drive(server, chats, body)
    assert tries == ["full disk", "full disk"]
    assert unqueued == [("events", "the disk is full", 1.0)]
    assert [q["since"] for q in syncs(server)[:2]] == ["s1", "s1"]


def test_a_stop_leaves_the_sync_uncommitted(server: FakeHomeserver, chats: ChatStore) -> None:
    chats.set_state("fuzzbot", "since", "s1")
    server.syncs.append(joined([message("one")], batch="s2"))

    async def body(made: MatrixAdapter, core: StubCore) -> Any:
        async def route(r: Received) -> None:
            raise DaemonStopping("stopping")

        core.route = route  # type: ignore[method-assign]
        return await asyncio.wait_for(made.receive(), 10)

    assert drive(server, chats, body) is None
    assert chats.get_state("fuzzbot", "since") == "s1"


def test_an_event_that_fails_otherwise_is_skipped_and_the_rest_handled(
    server: FakeHomeserver, chats: ChatStore, caplog: pytest.LogCaptureFixture
) -> None:
    chats.set_state("fuzzbot", "since", "s1")
    server.syncs.append(joined([message("breaks", event_id="$bad"), message("fine")]))

    async def body(made: MatrixAdapter, core: StubCore) -> list[str]:
        async def route(r: Received) -> None:
            if r.text == "breaks":
                raise ValueError("a bug")
            core.routed.append(r)

        core.route = route  # type: ignore[method-assign]
        await run_until(made.receive(), lambda: core.routed)
        return [r.text for r in core.routed]

    with caplog.at_level(logging.ERROR, logger="orchestrator.channels.matrix"):
        assert drive(server, chats, body) == ["fine"]
    assert f"Matrix account fuzzbot: event $bad in {ROOM} could not be handled; skipped" in [
        r.getMessage() for r in caplog.records
    ]


def test_an_encrypted_room_is_told_once_and_never_read(
    server: FakeHomeserver, chats: ChatStore
) -> None:
    chats.set_state("fuzzbot", "since", "s1")
    server.syncs += [
        joined([message("secret")], encrypted=True, batch="s2"),
        joined([message("again")], encrypted=True, batch="s3"),
    ]

    async def body(made: MatrixAdapter, core: StubCore) -> Any:
        await run_until(made.receive(), lambda: chats.get_state("fuzzbot", "since") == "s3")
        return core.routed, core.notices, made.may_send(ROOM), made.may_send("!other:x")

    routed, notices, may, other = drive(server, chats, body)
    assert routed == [] and (may, other) == (False, True)
    [(room, thread, reply_to, text, key)] = notices
    assert (room, thread, reply_to, key) == (ROOM, None, None, f"orch.e2e.{ROOM}")
    assert text == NOTICE + "and I will not answer here. Talk to me in a room without encryption."
    assert chats.get_state("fuzzbot", f"e2e-notice:{ROOM}")


def two_rooms(first: dict[str, Any], second: dict[str, Any], batch: str) -> dict[str, Any]:
    """A /sync answer with the room of ``first`` as !other:x, then the room of ``second``."""
    rooms = {"!other:x": first["rooms"]["join"][ROOM], ROOM: second["rooms"]["join"][ROOM]}
    return {"next_batch": batch, "rooms": {"join": rooms}}


def test_an_encrypted_room_keeps_no_other_room_from_being_read(
    server: FakeHomeserver, chats: ChatStore
) -> None:
    chats.set_state("fuzzbot", "since", "s1")
    secret = joined([message("secret")], encrypted=True)
    server.syncs.append(two_rooms(secret, joined([message("open", event_id="$o")]), "s2"))

    async def body(made: MatrixAdapter, core: StubCore) -> Any:
        await run_until(made.receive(), lambda: chats.get_state("fuzzbot", "since") == "s2")
        return [(r.chat, r.text) for r in core.routed], [n[0] for n in core.notices]

    assert drive(server, chats, body) == ([(ROOM, "open")], ["!other:x"])


def test_the_first_sync_tells_every_encrypted_room_it_learns(
    server: FakeHomeserver, chats: ChatStore
) -> None:
    server.syncs.append(
        two_rooms(joined([message("old")]), joined([message("x")], encrypted=True), "s1")
    )

    async def body(made: MatrixAdapter, core: StubCore) -> Any:
        await run_until(made.receive(), lambda: chats.get_state("fuzzbot", "since") == "s1")
        return core.routed, [n[0] for n in core.notices]

    assert drive(server, chats, body) == ([], [ROOM])
    assert float(chats.get_state("fuzzbot", f"e2e-notice:{ROOM}") or 0) > 0  # when it was told


# invites


def answered(
    server: FakeHomeserver, chats: ChatStore, invites: dict[str, Any], **options: Any
) -> StubCore:
    chats.set_state("fuzzbot", "since", "s1")
    server.syncs.append({"next_batch": "s2", "rooms": {"invite": invites}})

    async def body(made: MatrixAdapter, core: StubCore) -> StubCore:
        await run_until(made.receive(), lambda: chats.get_state("fuzzbot", "since") == "s2")
        return core

    return cast(StubCore, drive(server, chats, body, **options))


def test_an_allowed_inviter_is_joined(server: FakeHomeserver, chats: ChatStore) -> None:
    core = answered(server, chats, {ROOM: invite_state(OPERATOR)})
    [join] = server.of("POST", "/join/")
    assert join.path == "/_matrix/client/v3/join/!family:example.org"
    assert server.of("POST", "/leave$") == [] and core.errors == []


def test_a_bound_room_is_joined_whoever_invites(server: FakeHomeserver, chats: ChatStore) -> None:
    chats.bind("fuzzbot", ROOM, "fam")
    answered(server, chats, {ROOM: invite_state(EVE)})
    assert len(server.of("POST", "/join/")) == 1 and chats.pairings() == []


def test_a_join_refused_is_an_error(server: FakeHomeserver, chats: ChatStore) -> None:
    server.answer("POST", "/join/", 403, {"errcode": "M_FORBIDDEN", "error": "banned"})
    core = answered(server, chats, {ROOM: invite_state(OPERATOR)})
    assert core.errors == [f"join {ROOM} failed: banned"]


def test_a_strangers_invite_is_refused_with_a_pairing_code(
    server: FakeHomeserver, chats: ChatStore
) -> None:
    room = "!a/b:example.org"
    core = answered(server, chats, {room: invite_state(EVE)})
    assert core.errors == []  # the refusal was taken
    [pairing] = chats.pairings()
    assert (pairing.chat, pairing.title, pairing.requested_by) == (room, "Kitchen", f"matrix:{EVE}")
    [leave] = server.of("POST", "/leave$")
    assert leave.path == "/_matrix/client/v3/rooms/!a%2Fb:example.org/leave"  # one segment
    assert leave.headers["Authorization"] == f"Bearer {TOKEN}"
    assert leave.headers["Content-Type"] == "application/json"
    assert leave.body == {
        "reason": (
            f"Not connected to an assistant yet. Pairing code: {pairing.code}. The operator "
            f"connects this room with: orchestrator pair {pairing.code} GROUP; then invite me "
            "again. The code is good once, for one hour."
        )
    }
    assert server.of("POST", "/join/") == []


def test_a_second_invite_is_refused_without_a_new_code(
    server: FakeHomeserver, chats: ChatStore, caplog: pytest.LogCaptureFixture
) -> None:
    chats.request_pairing("fuzzbot", ROOM, title="t", requested_by=f"matrix:{EVE}")
    with caplog.at_level(logging.INFO, logger="orchestrator.channels.matrix"):
        answered(server, chats, {ROOM: invite_state(EVE, name=None)})
    [leave] = server.of("POST", "/leave$")
    assert leave.body == {}
    assert f"invite to {ROOM} by {EVE} refused (its code was given already)" in caplog.text


def test_a_leave_refused_is_an_error(server: FakeHomeserver, chats: ChatStore) -> None:
    server.answer("POST", "/leave$", 403, {"errcode": "M_FORBIDDEN", "error": "no"})
    core = answered(server, chats, {ROOM: invite_state(EVE)})
    assert core.errors == [f"leave {ROOM}: HTTP 403"]


@pytest.mark.parametrize(
    "state",
    [
        invite_state(OPERATOR, "join"),
        invite_state(OPERATOR, to="@bob:example.org"),
        {"invite_state": {"events": []}},
    ],
)
def test_an_invite_not_for_the_bot_is_not_answered(
    server: FakeHomeserver,
    chats: ChatStore,
    state: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="orchestrator.channels.matrix"):
        answered(server, chats, {ROOM: state})
    assert server.of("POST", "/join/") == [] and server.of("POST", "/leave$") == []
    assert [r for r in caplog.records if r.name == "orchestrator.channels.matrix"] == []


def test_an_invite_to_a_room_without_a_name_is_paired_without_a_title(
    server: FakeHomeserver, chats: ChatStore
) -> None:
    answered(server, chats, {ROOM: invite_state(EVE, name=None)})
    [pairing] = chats.pairings()
    assert (pairing.chat, pairing.title, pairing.requested_by) == (ROOM, None, f"matrix:{EVE}")


def test_the_bots_membership_is_told_by_its_own_event_whatever_follows(
    server: FakeHomeserver, chats: ChatStore
) -> None:
    state = invite_state(EVE, name=None)
    # another member's invite by an allowed inviter, after the bot's own
    state["invite_state"]["events"].append(
        invite_state(OPERATOR, to="@bob:example.org", name=None)["invite_state"]["events"][0]
    )
    answered(server, chats, {ROOM: state})
    assert server.of("POST", "/join/") == [] and len(server.of("POST", "/leave$")) == 1


def test_an_invite_event_nio_cannot_read_is_not_answered(
    chats: ChatStore, caplog: pytest.LogCaptureFixture
) -> None:
    made, _ = make("https://example.org", chats)
    source = {"type": "m.room.member", "state_key": BOT, "sender": EVE, "content": {}}
    unread = nio.BadEvent(source, "$x", EVE, 1, "m.room.member")
    info = type("Info", (), {"invite_state": [unread]})()
    with caplog.at_level(logging.INFO, logger="orchestrator.channels.matrix"):
        asyncio.run(made._invite(ROOM, info))
    assert [r.getMessage() for r in caplog.records] == [
        f"Matrix account fuzzbot: the invite to {ROOM} could not be read; not answered"
    ]
    assert chats.pairings() == []


# whether a message is for the bot


def said(text: str, **content: Any) -> Received:
    return Received(ROOM, OPERATOR, text, "$m", "$m", raw={"body": text, **content})


@pytest.mark.parametrize(
    ("text", "content", "expected"),
    [
        ("hi", {"m.mentions": {"user_ids": [BOT]}}, True),
        ("hi", {"m.mentions": {"user_ids": [OPERATOR]}}, False),
        ("hi", {"m.mentions": {"user_ids": BOT}}, False),
        ("hi", {"m.mentions": [BOT]}, False),
        (f"ask {BOT.upper()} now", {}, True),
        ("helper: hi", {}, True),
        ("hi @Helper", {}, True),
        ("helper", {}, True),
        ("(helper)", {}, True),
        ("helpers hi", {}, False),
        ("thehelper hi", {}, False),
        ("hi", {"m.relates_to": {"m.in_reply_to": {"event_id": "$own"}}}, True),
        ("hi", {"m.relates_to": {"m.in_reply_to": {"event_id": "$other"}}}, False),
        (
            "hi",
            {"m.relates_to": {"m.in_reply_to": {"event_id": "$own"}, "is_falling_back": True}},
            False,
        ),
        ("hi", {"m.relates_to": {"m.in_reply_to": "$own"}}, False),
    ],
)
def test_a_room_message_is_for_the_bot_when_it_says_so(
    chats: ChatStore, text: str, content: dict[str, Any], expected: bool
) -> None:
    made, _ = make("https://example.org", chats)
    made.own_events["$own"] = None
    assert made.addressed(said(text, **content)) is expected


def test_a_historical_user_id_with_capitals_keeps_its_localpart(chats: ChatStore) -> None:
    core = StubCore(
        MatrixOptions("https://example.org", "@Xena:example.org"), "matrix:", chats, TOKEN
    )
    made = MatrixAdapter(cast(Any, core))
    assert made.mention_forms(said("x")) == ("@Xena:example.org", "@Xena", "Xena")
    assert made.addressed(said("xena, hi")) is True
    assert made.addressed(said("ena, hi")) is False


def test_the_forms_a_mention_takes(chats: ChatStore) -> None:
    made, _ = make("https://example.org", chats)
    assert made.mention_forms(said("x")) == (BOT, "@helper", "helper")
    room = nio.MatrixRoom(ROOM, BOT)
    room.add_member(BOT, "Family Helper", None)
    made.client = cast(Any, type("Client", (), {"rooms": {ROOM: room}})())
    assert made.mention_forms(said("x")) == (BOT, "@helper", "Family Helper")
    assert made.may_send(ROOM) is True
    assert make("https://example.org", chats)[0].may_send(ROOM) is True  # not connected


# events into messages


def room_of(members: int, name: str | None = "Family") -> nio.MatrixRoom:
    room = nio.MatrixRoom(ROOM, BOT)
    for user in [BOT, OPERATOR, "@bob:example.org"][:members]:
        room.add_member(user, None, None)
    room.name = name
    return room


def event_in(
    made: MatrixAdapter, core: StubCore, data: Any, room: nio.MatrixRoom | None
) -> list[Received]:
    event = nio.Event.parse_event(data) if isinstance(data, dict) else data
    asyncio.run(made._event(ROOM, room, event))
    return core.routed


def encrypted_image() -> nio.RoomEncryptedImage:
    """A file in an encrypted room (nio reads one only from a decrypted event)."""
    key = {"kty": "oct", "alg": "A256CTR", "ext": True, "k": "a", "key_ops": ["decrypt"]}
    content = {
        "msgtype": "m.image",
        "body": "a.jpg",
        "file": {"url": "mxc://x/y", "key": key, "iv": "i", "hashes": {"sha256": "h"}, "v": "v2"},
    }
    made = nio.RoomEncryptedImage.from_dict({**message(), "content": content})
    assert isinstance(made, nio.RoomEncryptedImage)
    return made


def test_a_message_is_received_with_its_ids_text_and_room(chats: ChatStore) -> None:
    made, core = make("https://example.org", chats)
    [got] = event_in(made, core, message("hello", event_id="$e1"), room_of(3))
    assert (got.chat, got.sender, got.text, got.message_id, got.event_id) == (
        ROOM,
        OPERATOR,
        "hello",
        "$e1",
        "$e1",
    )
    assert (got.thread, got.group_chat, got.title) == (None, True, "Family")
    assert got.raw == {"msgtype": "m.text", "body": "hello"}


def test_an_event_nio_could_not_read_starts_nothing(
    chats: ChatStore, caplog: pytest.LogCaptureFixture
) -> None:
    made, core = make("https://example.org", chats)
    unread = nio.Event.parse_event({"type": "m.room.message", "content": {"body": "x"}})
    with caplog.at_level(logging.DEBUG, logger="orchestrator.channels.matrix"):
        assert event_in(made, core, unread, room_of(3)) == []
    assert logged(caplog) == [
        f"Matrix account fuzzbot: {type(unread).__name__} in {ROOM} starts no turn"
    ]


def test_a_message_without_words_is_received_empty(chats: ChatStore) -> None:
    made, core = make("https://example.org", chats)
    [got] = event_in(made, core, message(""), room_of(3))
    assert got.text == ""


def test_two_members_are_a_private_chat_and_an_unknown_room_a_group(chats: ChatStore) -> None:
    made, core = make("https://example.org", chats)
    event_in(made, core, message("a"), room_of(2))
    event_in(made, core, message("b"), None)
    assert [(r.group_chat, r.title) for r in core.routed] == [(False, "Family"), (True, None)]


def test_a_thread_is_its_root_and_an_edit_starts_nothing(chats: ChatStore) -> None:
    made, core = make("https://example.org", chats)
    room = room_of(3)
    event_in(
        made,
        core,
        message("t", **{"m.relates_to": {"rel_type": "m.thread", "event_id": "$root"}}),
        room,
    )
    event_in(
        made,
        core,
        message("r", **{"m.relates_to": {"rel_type": "m.reference", "event_id": "$root"}}),
        room,
    )
    event_in(
        made,
        core,
        message("* e", **{"m.relates_to": {"rel_type": "m.replace", "event_id": "$root"}}),
        room,
    )
    assert [(r.text, r.thread) for r in core.routed] == [("t", "$root"), ("r", None)]


def test_own_encrypted_and_other_events_start_nothing(chats: ChatStore) -> None:
    made, core = make("https://example.org", chats)
    room = room_of(3)
    event_in(made, core, message("mine", sender=BOT), room)
    event_in(
        made,
        core,
        {
            "type": "m.room.topic",
            "event_id": "$t",
            "sender": OPERATOR,
            "origin_server_ts": 1,
            "state_key": "",
            "content": {"topic": "x"},
        },
        room,
    )
    event_in(made, core, encrypted_image(), room)
    assert core.routed == [] and core.notices == []
    megolm = {
        "type": "m.room.encrypted",
        "event_id": "$x",
        "sender": OPERATOR,
        "origin_server_ts": 1,
        "content": {
            "algorithm": "m.megolm.v1.aes-sha2",
            "ciphertext": "c",
            "sender_key": "k",
            "device_id": "D",
            "session_id": "s",
        },
    }
    event_in(made, core, megolm, room)
    assert core.routed == [] and [n[0] for n in core.notices] == [ROOM]


def test_a_files_text_is_its_caption(chats: ChatStore) -> None:
    made, core = make("https://example.org", chats)
    image = {"msgtype": "m.image", "url": "mxc://x/y"}
    event_in(
        made,
        core,
        {**message(), "content": {**image, "body": "look", "filename": "a.jpg"}},
        room_of(2),
    )
    event_in(made, core, {**message(), "content": {**image, "body": "a.jpg"}}, room_of(2))
    assert [r.text for r in core.routed] == ["look", ""]


# files received


def fetched(
    server: FakeHomeserver,
    chats: ChatStore,
    tmp_path: Path,
    content: dict[str, Any],
    limit: int = 1000,
) -> Any:
    (tmp_path / "fam").mkdir(exist_ok=True)

    async def body(made: MatrixAdapter, core: StubCore) -> Any:
        return await made.attachment(said("x", **content), "fam")

    return drive(server, chats, body, tmp_path, attachments_max_bytes=limit)


def test_an_image_is_downloaded_with_the_token_and_stored(
    server: FakeHomeserver, chats: ChatStore, tmp_path: Path
) -> None:
    server.media["example.org/a%20b"] = b"p" * 1000
    got = fetched(
        server,
        chats,
        tmp_path,
        {
            "msgtype": "m.image",
            "url": "mxc://example.org/a b",
            "body": "cat.jpg",
            "info": {"mimetype": "image/jpeg", "size": 1000},
        },
    )
    [download] = server.of("GET", "/media/download/")
    assert download.path == "/_matrix/client/v1/media/download/example.org/a%20b"
    assert download.headers["Authorization"] == f"Bearer {TOKEN}"
    assert (got.mime, got.size, got.kind, got.label, got.original, got.duration) == (
        "image/jpeg",
        1000,
        "image",
        "image",
        "cat.jpg",
        None,
    )
    assert (tmp_path / "fam" / "files" / "inbox" / got.name).read_bytes() == b"p" * 1000


@pytest.mark.parametrize(
    ("content", "kind", "label", "duration"),
    [
        (
            {"msgtype": "m.audio", "info": {"duration": 3400}, "org.matrix.msc3245.voice": {}},
            "voice",
            "voice note",
            3.4,
        ),
        ({"msgtype": "m.audio", "m.voice": {}}, "voice", "voice note", None),
        ({"msgtype": "m.audio", "info": {"duration": 61000}}, "audio", "audio", 61.0),
        ({"msgtype": "m.video", "info": {"duration": "long"}}, "other", "video", None),
        ({"msgtype": "m.file", "info": []}, "other", "file", None),
        ({"msgtype": "m.image"}, "image", "image", None),  # an image whatever its name
    ],
)
def test_audio_voice_video_and_files_are_told_apart(
    server: FakeHomeserver,
    chats: ChatStore,
    tmp_path: Path,
    content: dict[str, Any],
    kind: str,
    label: str,
    duration: Any,
) -> None:
    server.media["x/m"] = b"data"
    got = fetched(server, chats, tmp_path, {**content, "url": "mxc://x/m", "body": "thing.bin"})
    assert (got.kind, got.label, got.duration, got.original) == (kind, label, duration, "thing.bin")


def test_a_files_name_is_its_filename_and_its_type_only_text(
    server: FakeHomeserver, chats: ChatStore, tmp_path: Path
) -> None:
    server.media["x/m"] = b"data"
    got = fetched(
        server,
        chats,
        tmp_path,
        {
            "msgtype": "m.file",
            "url": "mxc://x/m",
            "body": "caption",
            "filename": "r.txt",
            "info": {"mimetype": 5},
        },
    )
    assert (got.original, got.mime) == ("r.txt", None)
    got = fetched(server, chats, tmp_path, {"msgtype": "m.file", "url": "mxc://x/m", "body": ["x"]})
    assert got.original is None


def test_a_text_message_has_no_file(
    server: FakeHomeserver, chats: ChatStore, tmp_path: Path
) -> None:
    assert fetched(server, chats, tmp_path, {"msgtype": "m.text"}) is None
    assert fetched(server, chats, tmp_path, {"msgtype": "m.notice", "url": "mxc://x/m"}) is None


@pytest.mark.parametrize(
    ("content", "refusal"),
    [
        (
            {"url": "mxc://x/m", "info": {"size": 1001}},
            "Sorry, that file is 1001 B; I take files up to 1000 B.",
        ),
        ({"url": "https://x/m"}, "Sorry, I could not read that file (it has no mxc:// address)."),
        ({"url": 5}, "Sorry, I could not read that file (it has no mxc:// address)."),
        ({"url": "mxc://x/missing"}, "Sorry, I could not download that file."),
        ({"url": "mxc://x/big"}, "Sorry, that file is 1001 B; I take files up to 1000 B."),
        ({"url": "mxc://x/chunked"}, "Sorry, that file is 1001 B; I take files up to 1000 B."),
    ],
)
def test_a_file_too_large_or_unreachable_is_refused(
    server: FakeHomeserver,
    chats: ChatStore,
    tmp_path: Path,
    content: dict[str, Any],
    refusal: str,
) -> None:
    server.media["x/m"] = b"x"
    server.media["x/big"] = b"x" * 1001
    server.media["x/chunked"] = b"x" * 1001
    server.chunked.add("x/chunked")
    got = fetched(server, chats, tmp_path, {"msgtype": "m.file", "body": "f", **content})
    assert got == Refusal(refusal)
    assert list((tmp_path / "fam").iterdir()) == []


def test_a_file_at_the_limit_is_taken_also_in_chunks(
    server: FakeHomeserver, chats: ChatStore, tmp_path: Path
) -> None:
    server.media["x/m"] = bytes(range(250)) * 4
    server.chunked.add("x/m")
    got = fetched(
        server,
        chats,
        tmp_path,
        {"msgtype": "m.file", "body": "f", "url": "mxc://x/m", "info": {"size": 1000}},
    )
    assert (tmp_path / "fam" / "files" / "inbox" / got.name).read_bytes() == server.media["x/m"]


def test_no_files_are_taken_where_the_limit_is_none(
    server: FakeHomeserver, chats: ChatStore, tmp_path: Path
) -> None:
    got = fetched(
        server,
        chats,
        tmp_path,
        {"msgtype": "m.file", "url": "mxc://x/m", "info": {"size": 1}},
        limit=0,
    )
    assert got == Refusal("Sorry, I do not take files here.")
    # nor one that says no size, nor an empty one: nothing is downloaded
    server.media["x/e"] = b""
    for info in ({}, {"size": 0}):
        got = fetched(
            server,
            chats,
            tmp_path,
            {"msgtype": "m.file", "url": "mxc://x/e", "info": info},
            limit=0,
        )
        assert got == Refusal("Sorry, I do not take files here.")
    assert server.of("GET", "/download/") == []
    assert not (tmp_path / "fam" / "files").exists()


def test_a_download_refused_says_its_status(server: FakeHomeserver, chats: ChatStore) -> None:
    async def body(made: MatrixAdapter, core: StubCore) -> Any:
        with pytest.raises(OrchestratorError) as caught:
            await made._download("mxc://x/none", 10)
        return caught.value.message

    assert drive(server, chats, body) == "the homeserver refused the download: HTTP 404"


# sending


def sent(server: FakeHomeserver) -> list[tuple[str, Any]]:
    return [(r.path, r.body) for r in server.of("PUT", "/send/")]


def test_a_reply_is_a_notice_with_the_key_as_its_transaction_id(
    server: FakeHomeserver, chats: ChatStore
) -> None:
    async def body(made: MatrixAdapter, core: StubCore) -> Any:
        return await made.send(ROOM, None, "$asked", "**hi**", "k1"), dict(made.own_events)

    ids, own = drive(server, chats, body)
    assert ids == ["$event1"] and own == {"$event1": None}
    assert sent(server) == [
        (
            "/_matrix/client/v3/rooms/!family:example.org/send/m.room.message/k1",
            {
                "msgtype": "m.notice",
                "body": "**hi**",
                "format": "org.matrix.custom.html",
                "formatted_body": "<b>hi</b>",
                "m.relates_to": {"m.in_reply_to": {"event_id": "$asked"}},
            },
        )
    ]


def test_a_reply_at_the_limit_is_one_event_and_over_it_more(
    server: FakeHomeserver, chats: ChatStore
) -> None:
    async def body(made: MatrixAdapter, core: StubCore) -> Any:
        one = await made.send(ROOM, "$t", "$asked", "a" * 6000, "k")
        three = await made.send(ROOM, "$t", "$asked", "\n\n".join(["b" * 5000] * 3), "k2")
        return one, three

    one, three = drive(server, chats, body)
    assert len(one) == 1 and len(three) == 3
    paths = [path.rsplit("/", 1)[1] for path, _ in sent(server)]
    assert paths == ["k", "k2", "k2.1", "k2.2"]
    relations = [content["m.relates_to"] for _, content in sent(server)]
    assert relations[1]["m.in_reply_to"] == {"event_id": "$asked"}
    assert (
        relations[2]
        == relations[3]
        == {
            "rel_type": "m.thread",
            "event_id": "$t",
            "is_falling_back": True,
            "m.in_reply_to": {"event_id": "$t"},
        }
    )


def test_a_refused_send_fails_the_reply(server: FakeHomeserver, chats: ChatStore) -> None:
    server.answer("PUT", "/send/", 403, {"errcode": "M_FORBIDDEN", "error": "not in room"})

    async def body(made: MatrixAdapter, core: StubCore) -> Any:
        with pytest.raises(SendRefused) as caught:
            await made.send(ROOM, None, None, "hi", "k")
        return caught.value

    refused = drive(server, chats, body)
    assert refused.message == f"sending to {ROOM} failed: not in room"
    made, _ = make("https://example.org", chats)
    assert made.classify(refused) == FAILED
    assert made.classify(OSError("reset")) == RETRY


def test_the_last_two_thousand_sent_events_are_remembered(
    server: FakeHomeserver, chats: ChatStore
) -> None:
    async def body(made: MatrixAdapter, core: StubCore) -> Any:
        for n in range(2000):
            made.own_events[f"$old{n}"] = None
        await made.send(ROOM, None, None, "hi", "k")
        return list(made.own_events)

    own = drive(server, chats, body)
    assert len(own) == 2000 and own[0] == "$old1" and own[-1] == "$event1"


def test_a_file_is_uploaded_once_and_sent_with_the_key(
    server: FakeHomeserver, chats: ChatStore, tmp_path: Path
) -> None:
    path = tmp_path / "r.pdf"
    path.write_bytes(b"%PDF")
    file = OutgoingFile(path, "r.pdf", "application/pdf", 4, "document", "the report")

    async def body(made: MatrixAdapter, core: StubCore) -> Any:
        first = await made.send_file(ROOM, None, "$asked", file, "k")
        again = await made.send_file(ROOM, None, "$asked", file, "k")
        return first, again

    first, again = drive(server, chats, body)
    assert first == ["$event2", "$event3"] and again == ["$event4", "$event5"]
    [upload] = server.of("POST", "/upload")
    assert upload.body == b"%PDF" and upload.query["filename"] == "r.pdf"
    assert upload.headers["Content-Type"] == "application/pdf"
    assert upload.headers["Content-Length"] == "4"
    assert chats.get_state("fuzzbot", "upload:k") == "mxc://fake.example/up1"
    (path1, content), (path2, caption) = sent(server)[:2]
    assert path1.endswith("/send/m.room.message/k") and path2.endswith("/k.caption")
    assert content == {
        "msgtype": "m.file",
        "body": "r.pdf",
        "filename": "r.pdf",
        "url": "mxc://fake.example/up1",
        "info": {"mimetype": "application/pdf", "size": 4},
        "m.relates_to": {"m.in_reply_to": {"event_id": "$asked"}},
    }
    assert caption["body"] == "the report" and "m.relates_to" not in caption


@pytest.mark.parametrize(
    ("kind", "msgtype"),
    [("image", "m.image"), ("audio", "m.audio"), ("voice", "m.audio"), ("other", "m.file")],
)
def test_a_file_is_sent_as_its_kind(
    server: FakeHomeserver, chats: ChatStore, tmp_path: Path, kind: str, msgtype: str
) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x")
    file = OutgoingFile(path, "f", "application/octet-stream", 1, kind)

    async def body(made: MatrixAdapter, core: StubCore) -> Any:
        return await made.send_file(ROOM, None, None, file, "k")

    assert len(drive(server, chats, body)) == 1
    [(_, content)] = sent(server)
    assert content["msgtype"] == msgtype and "m.relates_to" not in content


def test_a_refused_upload_or_file_send_fails_the_reply(
    server: FakeHomeserver, chats: ChatStore, tmp_path: Path
) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"x")
    file = OutgoingFile(path, "f.bin", "application/octet-stream", 1, "other")
    server.answer("POST", "/upload", 413, {"errcode": "M_TOO_LARGE", "error": "too big"})
    server.answer("PUT", "/send/", 403, {"errcode": "M_FORBIDDEN", "error": "no"})

    async def body(made: MatrixAdapter, core: StubCore) -> list[str]:
        messages = []
        for _ in range(2):
            with pytest.raises(SendRefused) as caught:
                await made.send_file(ROOM, None, None, file, "k")
            messages.append(caught.value.message)
        return messages

    assert drive(server, chats, body) == [
        "uploading f.bin failed: too big",
        f"sending to {ROOM} failed: no",
    ]


def test_typing_is_held_for_thirty_seconds_and_released(
    server: FakeHomeserver, chats: ChatStore, caplog: pytest.LogCaptureFixture
) -> None:
    async def body(made: MatrixAdapter, core: StubCore) -> None:
        await made.typing(ROOM, None, True)
        await made.typing(ROOM, None, False)

    with caplog.at_level(logging.DEBUG, logger="orchestrator.channels.matrix"):
        drive(server, chats, body)
    assert not [r for r in caplog.records if "typing refused" in r.getMessage()]
    typed = server.of("PUT", "/typing/")
    assert typed[0].path == (
        "/_matrix/client/v3/rooms/!family:example.org/typing/@helper:example.org"
    )
    assert [r.body for r in typed] == [{"typing": True, "timeout": 30000}, {"typing": False}]
    made, _ = make("https://example.org", chats)
    asyncio.run(made.typing(ROOM, None, True))  # not connected: nothing
    asyncio.run(made.close())


# what the operator reads in the log


def logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "orchestrator.channels.matrix"]


def test_invites_answered_are_logged(
    server: FakeHomeserver, chats: ChatStore, caplog: pytest.LogCaptureFixture
) -> None:
    chats.bind("fuzzbot", "!bound:x", "fam")
    for n in range(20):  # the account's pairing codes all wait: no more are given
        chats.request_pairing("fuzzbot", f"!wait{n}:x", title=None, requested_by=None)
    with caplog.at_level(logging.INFO, logger="orchestrator.channels.matrix"):
        answered(
            server,
            chats,
            {
                ROOM: invite_state(OPERATOR),
                "!bound:x": invite_state(EVE),
                "!new:x": invite_state(EVE),
            },
        )
    assert logged(caplog) == [
        f"Matrix account fuzzbot: joined {ROOM}, invited by {OPERATOR} (an allowed inviter)",
        f"Matrix account fuzzbot: joined !bound:x, invited by {EVE} (the room is bound)",
        f"Matrix account fuzzbot: invite to !new:x by {EVE} refused (too many pairing codes wait)",
    ]
    assert server.of("POST", "/leave$")[0].body == {}


def test_a_pairing_code_issued_is_logged(
    server: FakeHomeserver, chats: ChatStore, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="orchestrator.channels.matrix"):
        answered(server, chats, {ROOM: invite_state(EVE)})
    code = chats.pairings()[0].code
    assert logged(caplog) == [
        f"Matrix account fuzzbot: invite to {ROOM} by {EVE} refused; pairing code {code} "
        f"issued (approve: orchestrator pair {code} GROUP)"
    ]


def test_events_that_start_nothing_are_logged(
    chats: ChatStore, caplog: pytest.LogCaptureFixture
) -> None:
    made, core = make("https://example.org", chats)
    room = room_of(3)
    megolm = {
        "type": "m.room.encrypted",
        "event_id": "$x",
        "sender": OPERATOR,
        "origin_server_ts": 1,
        "content": {
            "algorithm": "m.megolm.v1.aes-sha2",
            "ciphertext": "c",
            "sender_key": "k",
            "device_id": "D",
            "session_id": "s",
        },
    }
    with caplog.at_level(logging.DEBUG, logger="orchestrator.channels.matrix"):
        event_in(made, core, encrypted_image(), room)
        event_in(
            made,
            core,
            {
                "type": "m.room.topic",
                "event_id": "$t",
                "sender": OPERATOR,
                "origin_server_ts": 1,
                "state_key": "",
                "content": {"topic": "x"},
            },
            room,
        )
        event_in(
            made,
            core,
            message("* e", **{"m.relates_to": {"rel_type": "m.replace", "event_id": "$r"}}),
            room,
        )
        event_in(made, core, megolm, room)
        event_in(made, core, megolm, room)
    assert logged(caplog) == [
        f"Matrix account fuzzbot: an encrypted file in {ROOM} starts no turn",
        f"Matrix account fuzzbot: RoomTopicEvent in {ROOM} starts no turn",
        f"Matrix account fuzzbot: an edit in {ROOM} starts no turn",
        f"Matrix account fuzzbot: {ROOM} is end-to-end encrypted; the bot does not act there",
    ]
    assert len(core.notices) == 1


def test_a_download_that_failed_and_typing_refused_are_logged(
    server: FakeHomeserver, chats: ChatStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server.answer("PUT", "/typing/", 403, {"errcode": "M_FORBIDDEN", "error": "not in room"})
    server.answer("PUT", "/typing/", 403, {"errcode": "M_FORBIDDEN", "error": "not in room"})
    (tmp_path / "fam").mkdir()

    async def body(made: MatrixAdapter, core: StubCore) -> None:
        await made.attachment(said("x", msgtype="m.file", url="mxc://x/missing"), "fam")
        await made.typing(ROOM, None, True)
        await made.typing(ROOM, None, False)  # a release refused is not worth a line

    with caplog.at_level(logging.DEBUG, logger="orchestrator.channels.matrix"):
        drive(server, chats, body, tmp_path)
    lines = [line for line in logged(caplog) if "account" in line]
    assert lines[0] == (
        "Matrix account fuzzbot: mxc://x/missing not downloaded: the homeserver refused the "
        "download: HTTP 404"
    )
    assert lines[1].startswith("Matrix account fuzzbot: typing refused: RoomTypingError")
    assert len(lines) == 2


def test_a_media_id_with_a_slash_is_one_path_segment(
    server: FakeHomeserver, chats: ChatStore, tmp_path: Path
) -> None:
    server.media["example.org/a%2Fb"] = b"data"
    got = fetched(server, chats, tmp_path, {"msgtype": "m.file", "url": "mxc://example.org/a/b"})
    assert got.size == 4
    [download] = server.of("GET", "/media/download/")
    assert download.path == "/_matrix/client/v1/media/download/example.org/a%2Fb"


@pytest.mark.parametrize(("limit", "taken"), [(200_000, True), (100_000, False)])
def test_a_download_in_many_chunks_is_measured_and_joined_whole(
    server: FakeHomeserver, chats: ChatStore, tmp_path: Path, limit: int, taken: bool
) -> None:
    data = bytes(range(256)) * 600  # 153,600 bytes: more than one chunk of 64 KiB
    server.media["x/m"] = data
    server.chunked.add("x/m")
    got = fetched(server, chats, tmp_path, {"msgtype": "m.file", "url": "mxc://x/m"}, limit)
    if taken:
        assert (tmp_path / "fam" / "files" / "inbox" / got.name).read_bytes() == data
    else:
        assert got == Refusal("Sorry, that file is 97.7 KiB; I take files up to 97.7 KiB.")


def test_a_file_in_a_thread_and_its_caption_go_to_the_room_and_thread(
    server: FakeHomeserver, chats: ChatStore, tmp_path: Path
) -> None:
    path = tmp_path / "f.txt"
    path.write_bytes(b"x")
    file = OutgoingFile(path, "f.txt", "text/plain", 1, "document", "words")

    async def body(made: MatrixAdapter, core: StubCore) -> Any:
        return await made.send_file(ROOM, "$t", "$asked", file, "k")

    assert drive(server, chats, body) == ["$event2", "$event3"]
    room = "/_matrix/client/v3/rooms/!family:example.org/send/m.room.message"
    (path1, content), (path2, caption) = sent(server)
    assert (path1, path2) == (f"{room}/k", f"{room}/k.caption")
    assert content["m.relates_to"] == module.relation("$t", "$asked")
    assert caption["m.relates_to"] == module.relation("$t", None)
