"""What an older release left behind, carried over at the daemon's start: sessions kept
per chat id become sessions per (channel, chat), their transcripts kept."""

from __future__ import annotations

from pathlib import Path

from orchestrator.daemon.upgrade import carry_sessions_to_channels
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from orchestrator.protocol import session_key
from orchestrator.store.messages import MessageQueue, open_queue


def _old(queue: MessageQueue, chat: str, channel: str, text: str = "hi") -> str:
    """A message as an older release stored it: its session keyed by the chat alone."""
    return queue.enqueue(
        group="fam", session=f"chat-{chat}", chat=chat, thread=None, sender="alice",
        trust="creator", text=text, channel=channel,
    ).id  # fmt: skip


def test_old_sessions_move_to_the_channel_that_used_them_last(home: Path) -> None:
    store = GroupStore(Home(home))
    group = store.add(GroupConfig(name="fam", creators=("alice",)))
    queue = open_queue(Home(home))
    try:
        first = _old(queue, "kitchen", "cli")
        shared = [_old(queue, "-100", "http"), _old(queue, "-100", "telegram:fam")]
        for chat in ("kitchen", "-100"):
            folder = group.sessions_dir / f"chat-{chat}"
            folder.mkdir(parents=True)
            (folder / "transcript.jsonl").write_text(f'{{"t": "context", "chat": "{chat}"}}\n')
        (group.sessions_dir / "chat-gone").mkdir()  # no message knows it: left alone

        done = carry_sessions_to_channels(queue, store)
        assert (done.renamed, done.messages, done.left) == (2, 3, 0)
        kitchen = session_key("per-chat", "cli", "kitchen", None)
        telegram = session_key("per-chat", "telegram:fam", "-100", None)
        assert (group.sessions_dir / kitchen / "transcript.jsonl").read_text().count("kitchen")
        # a session two channels shared goes to the one that used it last
        assert (group.sessions_dir / telegram / "transcript.jsonl").exists()
        assert sorted(p.name for p in group.sessions_dir.iterdir()) == sorted(
            ["chat-gone", kitchen, telegram]
        )
        assert queue.get(first).session == kitchen
        assert [queue.get(i).session for i in shared] == [
            session_key("per-chat", "http", "-100", None),
            telegram,
        ]
        # a second start finds nothing to do
        again = carry_sessions_to_channels(queue, store)
        assert (again.renamed, again.messages) == (0, 0)
    finally:
        queue.close()


def test_a_start_stopped_between_the_rename_and_the_rows_completes_next_time(
    home: Path,
) -> None:
    store = GroupStore(Home(home))
    group = store.add(GroupConfig(name="fam", creators=("alice",)))
    queue = open_queue(Home(home))
    try:
        message = _old(queue, "kitchen", "cli")
        new = session_key("per-chat", "cli", "kitchen", None)
        (group.sessions_dir / new).mkdir(parents=True)  # renamed, then the start stopped
        (group.sessions_dir / new / "transcript.jsonl").write_text("{}\n")
        done = carry_sessions_to_channels(queue, store)
        assert (done.renamed, done.messages) == (0, 1)
        assert queue.get(message).session == new
        assert (group.sessions_dir / new / "transcript.jsonl").read_text() == "{}\n"
    finally:
        queue.close()


def test_an_old_session_whose_new_key_is_taken_is_left_as_it_was(home: Path) -> None:
    store = GroupStore(Home(home))
    group = store.add(GroupConfig(name="fam", creators=("alice",)))
    queue = open_queue(Home(home))
    try:
        _old(queue, "kitchen", "cli")
        new = session_key("per-chat", "cli", "kitchen", None)
        for name in ("chat-kitchen", new):
            (group.sessions_dir / name).mkdir(parents=True)
            (group.sessions_dir / name / "transcript.jsonl").write_text(f"{name}\n")
        done = carry_sessions_to_channels(queue, store)
        assert (done.renamed, done.left) == (0, 1)
        assert (group.sessions_dir / new / "transcript.jsonl").read_text() == f"{new}\n"
        assert (group.sessions_dir / "chat-kitchen").is_dir()  # nothing overwritten
    finally:
        queue.close()
