"""The home's upgrade at the daemon's start, exactly: the counts and the lines logged
when old sessions move to their (channel, chat) keys, the groups and folders left as
they are (gone, invalid, no sessions folder, a key taken, a rename refused), the report
of the layout step and of the change of release, and the journal lines it says."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from orchestrator.confined import ConfinedDir
from orchestrator.daemon import upgrade
from orchestrator.daemon.upgrade import (
    LAYOUT_STEPS,
    OLD_PREFIX,
    SessionsCarried,
    UpgradeReport,
    carry_sessions_to_channels,
    upgrade_home,
)
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from orchestrator.protocol import session_key
from orchestrator.store.homerecord import HomeRecord, Upgrade
from orchestrator.store.messages import MessageQueue, open_queue
from orchestrator.versions import EARLIEST, LAYOUT_VERSION, RELEASE, FileTooNew

LOGGER = "orchestrator.upgrade"


def logged(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]


def old(queue: MessageQueue, chat: str, channel: str, group: str = "fam") -> str:
    return queue.enqueue(
        group=group, session=f"chat-{chat}", chat=chat, thread=None, sender="alice",
        trust="creator", text="hi", channel=channel,
    ).id  # fmt: skip


@pytest.fixture
def setup(home: Path) -> tuple[GroupStore, MessageQueue]:
    store = GroupStore(Home(home))
    store.add(GroupConfig(name="fam", creators=("alice",)))
    queue = open_queue(Home(home))
    yield store, queue  # type: ignore[misc]
    queue.close()


def sessions(store: GroupStore, group: str = "fam") -> Path:
    path = store.root / group / "sessions"
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_nothing_old_is_nothing_done(
    setup: tuple[GroupStore, MessageQueue], caplog: pytest.LogCaptureFixture
) -> None:
    store, queue = setup
    caplog.set_level(logging.INFO, logger=LOGGER)
    queue.enqueue(
        group="fam", session="cli.chat-x", chat="x", thread=None, sender="alice",
        trust="creator", text="hi", channel="cli",
    )  # fmt: skip
    assert OLD_PREFIX == "chat-"
    assert carry_sessions_to_channels(queue, store) == SessionsCarried(0, 0, 0)
    assert logged(caplog) == []
    assert LAYOUT_STEPS[0].apply(queue, store) == "nothing to move"


def test_moves_are_counted_and_logged(
    setup: tuple[GroupStore, MessageQueue], caplog: pytest.LogCaptureFixture
) -> None:
    store, queue = setup
    caplog.set_level(logging.INFO, logger=LOGGER)
    old(queue, "a", "cli")
    old(queue, "b", "cli")
    (sessions(store) / "chat-a").mkdir()
    done = carry_sessions_to_channels(queue, store)
    assert done == SessionsCarried(renamed=1, messages=2, left=0)
    assert logged(caplog) == [
        (
            logging.INFO,
            "sessions now kept per channel: 1 session folders renamed, 2 messages re-keyed",
        )
    ]
    assert (sessions(store) / session_key("per-chat", "cli", "a", None)).is_dir()


def test_a_taken_key_is_left_and_said(
    setup: tuple[GroupStore, MessageQueue], caplog: pytest.LogCaptureFixture
) -> None:
    store, queue = setup
    caplog.set_level(logging.INFO, logger=LOGGER)
    old(queue, "a", "cli")
    new = session_key("per-chat", "cli", "a", None)
    (sessions(store) / "chat-a").mkdir()
    (sessions(store) / new).mkdir()
    assert LAYOUT_STEPS[0].apply(queue, store) == (
        "0 session folders renamed, 1 messages re-keyed, 1 left where they were"
    )
    assert logged(caplog) == [
        (logging.WARNING, f"group fam: session chat-a left as it is: {new} exists already"),
        (
            logging.INFO,
            "sessions now kept per channel: 0 session folders renamed, 1 messages re-keyed, "
            "1 old folders left (their new key was in use)",
        ),
    ]


def test_a_rename_refused_is_left_and_said(
    setup: tuple[GroupStore, MessageQueue],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store, queue = setup
    old(queue, "a", "cli")
    old(queue, "b", "cli")
    (sessions(store) / "chat-a").mkdir()
    (sessions(store) / "chat-b").mkdir()
    moved: list[tuple[str, str]] = []

    def move(self: ConfinedDir, source: str, target: str) -> None:
        moved.append((source, target))
        if source == "chat-a":
            raise PermissionError(13, "Permission denied")
        os.rename(
            store.root / "fam" / "sessions" / source, store.root / "fam" / "sessions" / target
        )

    monkeypatch.setattr(ConfinedDir, "move", move)
    done = carry_sessions_to_channels(queue, store)
    b = session_key("per-chat", "cli", "b", None)
    assert moved == [("chat-a", session_key("per-chat", "cli", "a", None)), ("chat-b", b)]
    assert done == SessionsCarried(renamed=1, messages=2, left=1)
    assert logged(caplog)[0] == (
        logging.WARNING,
        "group fam: session chat-a not renamed: [Errno 13] Permission denied",
    )
    assert (sessions(store) / b).is_dir()


def test_a_group_without_a_sessions_folder_keeps_its_folders_and_is_said(
    setup: tuple[GroupStore, MessageQueue], caplog: pytest.LogCaptureFixture
) -> None:
    store, queue = setup
    caplog.set_level(logging.INFO, logger=LOGGER)
    message = old(queue, "a", "cli")
    assert not (store.root / "fam" / "sessions").exists()
    done = carry_sessions_to_channels(queue, store)
    assert done == SessionsCarried(renamed=0, messages=1, left=0)
    assert queue.get(message).session == session_key("per-chat", "cli", "a", None)  # type: ignore[union-attr]
    [(level, line), _] = logged(caplog)
    assert level == logging.WARNING
    assert line.startswith("sessions of fam not carried over: [Errno 2]")


def test_a_gone_group_keeps_its_keys_and_the_others_move(
    setup: tuple[GroupStore, MessageQueue],
) -> None:
    store, queue = setup
    gone = old(queue, "a", "cli", group="gone")
    mine = old(queue, "a", "cli")
    (sessions(store) / "chat-a").mkdir()
    done = carry_sessions_to_channels(queue, store)
    assert done == SessionsCarried(renamed=1, messages=1, left=0)
    assert queue.get(gone).session == "chat-a"  # type: ignore[union-attr]
    assert queue.get(mine).session == session_key("per-chat", "cli", "a", None)  # type: ignore[union-attr]


def test_the_latest_channel_of_a_shared_chat_takes_the_folder_in_the_groups_mode(
    home: Path,
) -> None:
    store = GroupStore(Home(home))
    store.add(GroupConfig(name="fam", creators=("alice",), session_mode="per-thread"))
    queue = open_queue(Home(home))
    try:
        first = queue.enqueue(
            group="fam", session="chat-a", chat="a", thread="t", sender="alice",
            trust="creator", text="hi", channel="http",
        ).id  # fmt: skip
        second = old(queue, "a", "cli")
        (sessions(store) / "chat-a").mkdir()
        carry_sessions_to_channels(queue, store)
        threaded = session_key("per-thread", "http", "a", "t")
        assert queue.get(first).session == threaded  # type: ignore[union-attr]
        assert queue.get(second).session == session_key("per-thread", "cli", "a", None)  # type: ignore[union-attr]
        assert sorted(p.name for p in sessions(store).iterdir()) == [
            session_key("per-thread", "cli", "a", None)
        ]
    finally:
        queue.close()


def test_the_report() -> None:
    line = Upgrade(1, 5.0, "0.1.0", "did a thing")
    report = UpgradeReport(None, "1.2.3", [line])
    assert report.lines() == ["did a thing"]
    assert report.to_dict() == {
        "previous": EARLIEST,
        "release": "1.2.3",
        "done": [{"at": 5.0, "release": "0.1.0", "what": "did a thing"}],
    }
    assert UpgradeReport("0.9").to_dict() == {"previous": "0.9", "release": RELEASE, "done": []}
    assert UpgradeReport(None).done == []
    assert UpgradeReport(None).done is not UpgradeReport(None).done


def test_the_layout_step_is_recorded_with_what_it_did_and_said(
    setup: tuple[GroupStore, MessageQueue],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store, queue = setup
    caplog.set_level(logging.INFO, logger=LOGGER)
    record = HomeRecord(queue)
    queue.transaction(lambda db: db.execute("DELETE FROM home"))
    assert record.layout() == 1
    report = upgrade_home(queue, store)
    step = "home layout 1 -> 2: sessions kept per (channel, chat) (nothing to move)"
    assert report.previous is None
    assert report.release == RELEASE
    assert report.lines() == [step, f"release {EARLIEST} -> {RELEASE}"]
    assert [u.release for u in report.done] == [RELEASE, RELEASE]
    assert record.layout() == LAYOUT_VERSION
    assert record.release() == RELEASE
    assert record.unreported() == []
    assert [m for lv, m in logged(caplog) if lv == logging.INFO] == [
        f"upgraded: {step}",
        f"upgraded: release {EARLIEST} -> {RELEASE}",
    ]
    # a release recorded before this one: only the change of release is done and said
    record.set_release("0.0.1", None)
    applied: list[int] = []
    monkeypatch.setattr(
        upgrade,
        "LAYOUT_STEPS",
        (upgrade.LayoutStep(2, "x", lambda q, g: str(applied.append(2))),),
    )
    again = upgrade_home(queue, store)
    assert applied == []
    assert again.previous == "0.0.1"
    assert again.lines() == [f"release 0.0.1 -> {RELEASE}"]


def test_a_layout_one_newer_is_refused(setup: tuple[GroupStore, MessageQueue]) -> None:
    store, queue = setup
    record = HomeRecord(queue)
    record.set_layout(LAYOUT_VERSION + 1, "later", "9.0.0")
    with pytest.raises(FileTooNew) as refused:
        upgrade_home(queue, store)
    assert refused.value.message.startswith(
        f"the layout of {store.home.root} (recorded in {queue.path}) is at version "
        f"{LAYOUT_VERSION + 1}, written by a newer release than this orchestrator ({RELEASE}, "
        f"which reads up to version {LAYOUT_VERSION})"
    )


def test_the_key_follows_the_groups_mode(home: Path) -> None:
    store = GroupStore(Home(home))
    store.add(GroupConfig(name="fam", creators=("alice",), session_mode="per-chat"))
    store.add(GroupConfig(name="team", creators=("alice",), session_mode="shared"))
    queue = open_queue(Home(home))
    try:
        threaded = queue.enqueue(
            group="fam", session="chat-a", chat="a", thread="t", sender="alice",
            trust="creator", text="hi", channel="cli",
        ).id  # fmt: skip
        shared = old(queue, "b", "cli", group="team")
        carry_sessions_to_channels(queue, store)
        assert queue.get(threaded).session == session_key("per-chat", "cli", "a", None)  # type: ignore[union-attr]
        assert queue.get(shared).session == "shared"  # type: ignore[union-attr]
    finally:
        queue.close()


def test_every_old_folder_is_looked_at_whatever_came_before(
    setup: tuple[GroupStore, MessageQueue], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, queue = setup
    for chat in "abcdef":
        old(queue, chat, "cli")
    folders = sessions(store)
    # a: never made; b, c: their new keys taken; d, e: refused; f: moved
    for name in ("chat-b", "chat-c", "chat-d", "chat-e", "chat-f"):
        (folders / name).mkdir()
    for chat in "bc":
        (folders / session_key("per-chat", "cli", chat, None)).mkdir()
    real = ConfinedDir.move

    def move(self: ConfinedDir, source: str, target: str) -> None:
        if source in ("chat-d", "chat-e"):
            raise PermissionError(13, "Permission denied")
        real(self, source, target)

    monkeypatch.setattr(ConfinedDir, "move", move)
    done = carry_sessions_to_channels(queue, store)
    assert done == SessionsCarried(renamed=1, messages=6, left=4)
    assert (folders / session_key("per-chat", "cli", "f", None)).is_dir()


def test_rows_re_keyed_with_no_folder_moved_are_said(
    setup: tuple[GroupStore, MessageQueue],
) -> None:
    store, queue = setup
    old(queue, "a", "cli")
    sessions(store)
    assert LAYOUT_STEPS[0].apply(queue, store) == "0 session folders renamed, 1 messages re-keyed"


def test_each_missing_layout_step_is_applied_in_order(
    setup: tuple[GroupStore, MessageQueue], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, queue = setup
    applied: list[int] = []

    def step(version: int) -> upgrade.LayoutStep:
        def apply(q: MessageQueue, g: GroupStore) -> str:
            assert (q, g) == (queue, store)
            applied.append(version)
            return f"did {version}"

        return upgrade.LayoutStep(version, f"step {version}", apply)

    monkeypatch.setattr(upgrade, "LAYOUT_STEPS", (step(2), step(3)))
    monkeypatch.setattr(upgrade, "LAYOUT_VERSION", 3)
    record = HomeRecord(queue)
    queue.transaction(lambda db: db.execute("DELETE FROM home"))
    report = upgrade_home(queue, store)
    assert applied == [2, 3]
    assert report.lines()[:2] == [
        "home layout 1 -> 2: step 2 (did 2)",
        "home layout 2 -> 3: step 3 (did 3)",
    ]
    assert record.layout() == 3
    applied.clear()
    queue.transaction(lambda db: db.execute("DELETE FROM home"))
    record.set_layout(2, "done before", RELEASE)
    upgrade_home(queue, store)
    assert applied == [3]
