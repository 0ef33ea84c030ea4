"""The held-request mechanism's pure parts: commands as chat apps write them, and the
notices that show a request whole."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from orchestrator.commands import Command, parse_command
from orchestrator.limits import HELD_NOTICE_PIECE_CHARS
from orchestrator.relay.approvals import notice_pieces
from orchestrator.store.held import HeldRequest, content_sha256
from orchestrator.validate import hiding_problem


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/confirm", Command("confirm", ())),
        ("  /CONFIRM \n", Command("confirm", ())),
        ("/approve 12", Command("approve", ("12",))),
        ("/approve@helperbot 12", Command("approve", ("12",))),
        ("@helperbot /approve 12", Command("approve", ("12",))),
        ("@helperbot, /confirm", Command("confirm", ())),
        ("/confirm @helperbot", Command("confirm", ())),
        ("@a @b /approve 7 @a", Command("approve", ("7",))),
        ("/clear@helper_bot", Command("clear", ())),
    ],
)
def test_commands_are_recognized_with_mentions_around_them(text: str, expected: Command) -> None:
    assert parse_command(text) == expected


@pytest.mark.parametrize(
    "text",
    ["please /confirm", "confirm", "/", "@helperbot", "", "/approve " + "1 " * 20, "//confirm"],
)
def test_text_that_only_contains_a_command_is_not_one(text: str) -> None:
    assert parse_command(text) is None


def _request(content: str, *, approvable: bool = True) -> HeldRequest:
    return HeldRequest(
        7, "fam", "learned", content, content_sha256(content), "cli", "c", None, "alice", "m",
        approvable, 0.0, 24 * 3600.0,
    )  # fmt: skip


def test_a_notice_shows_the_content_in_a_fence_it_cannot_close() -> None:
    content = "rule one\n```\nnot code any more?\n````"
    [notice] = notice_pieces(_request(content), "fam")
    assert f"`````\n{content}\n`````" in notice
    assert "Request 7:" in notice and "/approve 7" in notice and "24 hours" in notice


def test_a_long_notice_comes_in_pieces_that_hold_everything() -> None:
    content = "".join(chr(0x4E00 + i % 500) for i in range(HELD_NOTICE_PIECE_CHARS * 2 + 1))
    pieces = notice_pieces(_request(content), "fam")
    assert len(pieces) == 3
    assert "in 3 parts" in pieces[0] and "part 2 of 3" in pieces[1]
    assert "/approve 7" in pieces[2] and "/approve 7" not in pieces[0]
    inner = "".join(p.split("```\n", 1)[1].rsplit("\n```", 1)[0] for p in pieces)
    assert inner == content


def test_a_notice_too_long_for_the_chat_shows_none_of_it() -> None:
    [notice] = notice_pieces(_request("secret-ish " * 10, approvable=False), "fam")
    assert "secret-ish" not in notice
    assert "orchestrator learned approve fam 7" in notice
    assert "orchestrator learned show fam --pending" in notice


def test_direction_controls_are_named() -> None:
    assert hiding_problem("plain text, émojis 🙂 and 中文") is None
    assert hiding_problem("ab\u2067c") == (
        "contains U+2067 (a direction control) at character 3, which would show other text "
        "than the one approved"
    )


# exact words


def test_a_short_notice_in_full() -> None:
    [notice] = notice_pieces(_request("be brief"), "fam")
    assert notice == (
        "[orchestrator] Request 7: a change to this group's learned behaviors waits for a "
        "creator's approval. This conversation has had messages from people who are not "
        "creators since it last started fresh, so the request may carry their words. The new "
        "text (8 characters), whole:\n\n```\nbe brief\n```\n\nA creator approves exactly this "
        "text with /approve 7 in this chat (or /confirm, when it is the only request waiting "
        "here). It expires in 24 hours; ignore it to leave everything as it is."
    )
    soon = HeldRequest(
        8, "fam", "packages", "", content_sha256(""), "cli", "c", None, "bob", "m", True,
        1000.0, 1000.0 + 1700,
    )  # fmt: skip
    [notice] = notice_pieces(soon, "fam")
    assert notice.startswith(
        "[orchestrator] Request 8: packages for this group's image waits for a creator's "
        "approval. The agent asks for software in this group's sandbox. The request, with the "
        "exact versions and hashes an approval installs (0 characters), whole:\n\n```\n\n```"
    )
    assert "It expires in 1 hours;" in notice  # never "0 hours"


def test_a_long_notice_in_full() -> None:
    size = HELD_NOTICE_PIECE_CHARS + 1
    content = "a" * size
    first, second = notice_pieces(_request(content), "fam")
    assert first == (
        "[orchestrator] Request 7: a change to this group's learned behaviors waits for a "
        "creator's approval. This conversation has had messages from people who are not "
        "creators since it last started fresh, so the request may carry their words. The new "
        f"text ({size:,} characters) follows whole, in 2 parts.\n\n"
        f"Part 1 of 2:\n```\n{'a' * HELD_NOTICE_PIECE_CHARS}\n```"
    )
    assert second == (
        "[orchestrator] Request 7, part 2 of 2:\n```\na\n```\n\nA creator approves exactly this "
        "text with /approve 7 in this chat (or /confirm, when it is the only request waiting "
        "here). It expires in 24 hours; ignore it to leave everything as it is."
    )


def test_a_notice_too_long_for_the_chat_in_full() -> None:
    [notice] = notice_pieces(_request("x" * 1234, approvable=False), "fam")
    assert notice == (
        "[orchestrator] Request 7: a change to this group's learned behaviors (1,234 "
        "characters) waits for approval. This conversation has had messages from people who "
        "are not creators since it last started fresh, so the request may carry their words. "
        "It is too long to show here, so it cannot be approved from this chat: the operator "
        "reads it with `orchestrator learned show fam --pending` and approves it with "
        "`orchestrator learned approve fam 7`."
    )


def test_chat_replies_to_confirm_and_approve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.home import Home
    from orchestrator.relay import approvals
    from orchestrator.relay.approvals import chat_reply
    from orchestrator.store.held import HeldRequests
    from orchestrator.store.messages import open_queue

    applied: list[tuple[Path, str, int, str]] = []

    def apply_held(
        groups_dir: Path, folder: str, request: HeldRequest, by: str
    ) -> tuple[bool, str]:
        applied.append((groups_dir, folder, request.id, by))
        return True, "done it"

    kind = approvals.Kind(
        "a test change", f"{__name__}:_unused", "show {folder}", "approve {folder} {id}"
    )
    monkeypatch.setitem(approvals.KINDS, "test", kind)
    monkeypatch.setattr(sys.modules[__name__], "_unused", apply_held, raising=False)
    queue = open_queue(Home(tmp_path))
    held = HeldRequests(queue)

    def hold(content: str, *, chat: str = "c", approvable: bool = True, ttl: float = 3600) -> int:
        return held.hold(
            group="fam", kind="test", content=content, channel="cli", chat=chat, thread=None,
            sender="bob", message_id="m", chat_approvable=approvable, ttl=ttl, now=1000.0,
        ).id  # fmt: skip

    def reply(
        name: str, *args: str, trust: str = "creator", sender: str = "alice", now: float = 1500.0
    ) -> str:
        return chat_reply(
            queue, tmp_path / "groups", "fam", Command(name, args), channel="cli", chat="c",
            trust=trust, sender=sender, creators=("alice",), now=now,
        )  # fmt: skip

    try:
        only = "Only this group's creators can approve what waits for approval."
        assert reply("confirm", trust="member") == only
        assert reply("confirm", sender="bob") == only
        assert reply("confirm") == "Nothing is waiting for approval in this chat."
        # the same chat name in another group or on another channel is another chat
        held.hold(
            group="other", kind="test", content="o", channel="cli", chat="c", thread=None,
            sender="bob", message_id="m", chat_approvable=True, ttl=3600, now=1000.0,
        )  # fmt: skip
        held.hold(
            group="fam", kind="test", content="o", channel="tg", chat="c", thread=None,
            sender="bob", message_id="m", chat_approvable=True, ttl=3600, now=1000.0,
        )  # fmt: skip
        assert reply("confirm") == "Nothing is waiting for approval in this chat."
        first = hold("one")
        second = hold("second")
        assert reply("confirm") == (
            f"2 requests wait in this chat: {first} (a test change, 3 characters, from bob), "
            f"{second} (a test change, 6 characters, from bob). Approve one with /approve ID."
        )
        assert reply("approve") == (
            f"Give the number of the request: /approve ID (waiting here: {first} (a test change, "
            f"3 characters, from bob), {second} (a test change, 6 characters, from bob))."
        )
        assert reply("approve", "x") == reply("approve", "1", "2") == reply("approve")
        elsewhere = hold("elsewhere", chat="other")
        assert reply("approve", str(elsewhere)) == f"No request {elsewhere} waits in this chat."
        assert reply("approve", "999") == "No request 999 waits in this chat."
        assert reply("approve", str(first)) == f"Approved request {first}: done it."
        assert applied == [(tmp_path / "groups", "fam", first, "alice")]
        assert reply("confirm") == f"Approved request {second}: done it."
        assert reply("approve") == "Give the number of the request: /approve ID."
        old = hold("old", ttl=100)
        assert reply("approve", str(old)) == (
            f"Request {old} expired; ask again if it is still wanted."
        )
        long = hold("long", approvable=False)
        assert reply("approve", str(long)) == (
            f"Request {long} is too long to approve from a chat; the operator approves it "
            f"with `approve fam {long}`."
        )
        with pytest.raises(ValueError, match="not an approval command: /help"):
            reply("help")
    finally:
        queue.close()


def test_an_approval_applies_the_held_content_only_and_then_what_follows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from orchestrator.home import Home
    from orchestrator.relay import approvals
    from orchestrator.store.held import HeldRequests
    from orchestrator.store.messages import open_queue

    calls: list[object] = []
    outcome = [(False, "not yet")]

    def apply_held(
        groups_dir: Path, folder: str, request: HeldRequest, by: str
    ) -> tuple[bool, str]:
        calls.append(("apply", groups_dir, folder, request.id, by))
        return outcome[0]

    def after(given: object, groups_dir: Path, request: HeldRequest, *, background: bool) -> None:
        assert given is queue
        calls.append(("after", groups_dir, request.id, background))

    monkeypatch.setattr(sys.modules[__name__], "_apply", apply_held, raising=False)
    monkeypatch.setattr(sys.modules[__name__], "_after", after, raising=False)
    kind = approvals.Kind(
        "a test change", f"{__name__}:_apply", "s", "a", after=f"{__name__}:_after"
    )
    monkeypatch.setitem(approvals.KINDS, "test", kind)
    queue = open_queue(Home(tmp_path))
    try:
        request = HeldRequests(queue).hold(
            group="fam", kind="test", content="x", channel="cli", chat="c", thread=None,
            sender="bob", message_id="m", chat_approvable=True, ttl=3600,
        )  # fmt: skip
        groups = tmp_path / "groups"
        changed = dataclasses.replace(request, content="y")
        assert approvals.apply(groups, "fam", changed, "alice") == approvals.Applied(
            False, f"request {request.id} does not match what was shown; not applied"
        )
        assert calls == []
        assert approvals.approve(queue, groups, request, "alice", background=False) == (
            approvals.Applied(False, "not yet")
        )
        assert HeldRequests(queue).get(request.id) is not None  # still held: approve again
        outcome[0] = (True, "done")
        with caplog.at_level("INFO", logger="orchestrator.approvals"):
            applied = approvals.approve(queue, groups, request, "alice")
        assert applied == approvals.Applied(True, "done")
        assert HeldRequests(queue).get(request.id) is None
        assert calls[-2:] == [
            ("apply", groups, "fam", request.id, "alice"),
            ("after", groups, request.id, True),  # in the background unless told
        ]
        assert caplog.messages == [f"group fam: request {request.id} (test) approved by 'alice'"]
    finally:
        queue.close()


def test_a_fence_is_one_backtick_longer_than_the_longest_run_and_never_under_three() -> None:
    for content, fence in (("plain", "```"), ("a ` b `` c", "```"), ("x ```` y", "`````")):
        [notice] = notice_pieces(_request(content), "fam")
        assert f"whole:\n\n{fence}\n{content}\n{fence}\n\nA creator" in notice


def test_the_hours_left_count_from_the_request_s_own_creation() -> None:
    created = 1_800_000_000.0
    request = dataclasses.replace(_request("x"), created=created, expires=created + 5 * 3600)
    [notice] = notice_pieces(request, "fam")
    assert "It expires in 5 hours;" in notice
    # rounded to the nearest hour: a second past an hour and a half is two hours
    request = dataclasses.replace(request, expires=created + 5401)
    [notice] = notice_pieces(request, "fam")
    assert "It expires in 2 hours;" in notice


def test_hold_keeps_the_asking_message_s_thread_tells_its_chat_and_logs_the_request(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from orchestrator.home import Home
    from orchestrator.limits import HELD_NOTICE_MAX_CHARS
    from orchestrator.relay.approvals import hold
    from orchestrator.store.held import HeldRequests
    from orchestrator.store.messages import open_queue

    queue = open_queue(Home(tmp_path))
    try:
        message = queue.enqueue(
            group="fam", session="s", chat="c9", thread="t4", sender="bob", trust="member",
            text="hi", channel="telegram:main",
        )  # fmt: skip
        at_limit = "a" * HELD_NOTICE_MAX_CHARS
        with caplog.at_level("INFO", logger="orchestrator.approvals"):
            request = hold(queue, kind="learned", folder="fam", message=message, content=at_limit)
        stored = HeldRequests(queue).get(request.id)
        assert stored is not None and stored.to_dict() == request.to_dict()
        assert {
            k: request.to_dict()[k]
            for k in ("group", "kind", "chars", "channel", "chat", "thread", "sender",
                      "message_id", "chat_approvable")
        } == {
            "group": "fam", "kind": "learned", "chars": HELD_NOTICE_MAX_CHARS,
            "channel": "telegram:main", "chat": "c9", "thread": "t4", "sender": "bob",
            "message_id": message.id, "chat_approvable": True,  # at the limit: shown whole
        }  # fmt: skip
        assert caplog.messages == [
            f"group fam: request {request.id} (learned, 16000 characters) held for approval "
            "in telegram:main:c9"
        ]
        told = queue.get(message.id)
        assert told is not None and list(told.replies) == notice_pieces(request, "fam")
        over = hold(queue, kind="learned", folder="fam", message=message, content=at_limit + "a")
        assert over.chat_approvable is False
        told = queue.get(message.id)
        assert told is not None and told.replies[-1] == notice_pieces(over, "fam")[0]
        assert "orchestrator learned show fam --pending" in told.replies[-1]
    finally:
        queue.close()


def test_what_follows_an_approval_tells_the_chat_now_or_from_a_thread(tmp_path: Path) -> None:
    from orchestrator.home import Home
    from orchestrator.relay.approvals import tell_after
    from orchestrator.store.messages import open_queue

    queue = open_queue(Home(tmp_path))
    try:
        message = queue.enqueue(
            group="fam", session="s", chat="c", thread=None, sender="bob", trust="member",
            text="hi", channel="cli",
        )  # fmt: skip
        request = dataclasses.replace(_request("x"), message_id=message.id)
        assert tell_after(queue, request, lambda: "built.", background=False, name="n") is None
        told = queue.get(message.id)
        assert told is not None and told.replies == ("[orchestrator] Request 7: built.",)
        thread = tell_after(queue, request, lambda: "again.", background=True, name="image")
        assert thread is not None
        thread.join(10)
        assert (thread.name, thread.daemon, thread.is_alive()) == ("image-fam", True, False)
        told = queue.get(message.id)
        assert told is not None and told.replies[-1] == "[orchestrator] Request 7: again."
        assert len(told.replies) == 2
    finally:
        queue.close()
