"""Versions wherever a shape can change: group.yaml, orchestrator.yaml, transcripts and
the home's layout are read by this code up to their version (a file without one is
version 1, as the release before versions wrote it), and one of a newer release is
refused with a message naming it, with nothing changed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from orchestrator.agent.session import Session, header_event
from orchestrator.config import load_config
from orchestrator.config.edit import edit_config
from orchestrator.daemon.upgrade import LAYOUT_STEPS, upgrade_home
from orchestrator.errors import InvalidConfig
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig, parse_group_config
from orchestrator.home import Home
from orchestrator.protocol import session_key
from orchestrator.store.homerecord import HomeRecord
from orchestrator.store.messages import open_queue
from orchestrator.versions import (
    CONFIG_FILE_VERSION,
    EARLIEST,
    GROUP_FILE_VERSION,
    LAYOUT_VERSION,
    RELEASE,
    TRANSCRIPT_VERSION,
    FileTooNew,
)

NEWER_MESSAGE = (
    "{path} is at version {found}, written by a newer release than this orchestrator "
    "({release}, which reads up to version {supported}); nothing was changed"
)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# group.yaml


def test_group_yaml_without_a_version_is_read_and_new_ones_carry_it(home: Path) -> None:
    path = Path("/g/group.yaml")
    assert parse_group_config("name: Family\n", path) == GroupConfig(name="Family")
    assert parse_group_config(f"version: {GROUP_FILE_VERSION}\nname: Family\n", path).name == (
        "Family"
    )
    group = GroupStore(Home(home)).add(GroupConfig(name="Family"))
    assert f"\nversion: {GROUP_FILE_VERSION}\nname: " in group.config_file.read_text()


def test_a_group_yaml_of_a_newer_release_is_refused_alone_and_left_as_it_is(home: Path) -> None:
    store = GroupStore(Home(home))
    group = store.add(GroupConfig(name="Family"))
    newer = GROUP_FILE_VERSION + 1
    # a newer release's keys too: only the version is reported, not "unknown key"
    group.config_file.write_text(f"version: {newer}\nname: Family\nfuture_key: 1\n")
    before = _digest(group.config_file)
    with pytest.raises(FileTooNew) as refused:
        store.load("family")
    assert refused.value.message == NEWER_MESSAGE.format(
        path=group.config_file, found=newer, release=RELEASE, supported=GROUP_FILE_VERSION
    )
    (listed,) = store.listing()  # listed as a group that cannot be loaded, with why
    assert listed.group is None and listed.problem == refused.value.message
    assert _digest(group.config_file) == before


@pytest.mark.parametrize("value", ["0", "'1'", "1.5", "true", "[1]"])
def test_a_group_yaml_version_that_is_not_a_whole_number_is_named(value: str) -> None:
    with pytest.raises(InvalidConfig) as refused:
        parse_group_config(f"name: F\nversion: {value}\n", Path("/g/group.yaml"))
    assert refused.value.message.startswith("/g/group.yaml:2: version: got ")
    assert "expected a whole number from 1 (this release writes 1)" in refused.value.message


# orchestrator.yaml


def test_orchestrator_yaml_takes_a_version_and_a_new_file_gets_it(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ORCHESTRATOR_PROJECT", raising=False)
    (home / "orchestrator.yaml").write_text("version: 1\nconcurrency: 3\n")
    assert load_config(Home(home)).concurrency == 3
    (home / "orchestrator.yaml").unlink()
    edit_config(Home(home), lambda data: data.update({"concurrency": 2}))
    assert (home / "orchestrator.yaml").read_text() == (
        f"version: {CONFIG_FILE_VERSION}\nconcurrency: 2\n"
    )


def test_an_orchestrator_yaml_of_a_newer_release_is_refused_and_not_edited(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ORCHESTRATOR_PROJECT", raising=False)
    path = home / "orchestrator.yaml"
    path.write_text("version: 7\nconcurrency: 3\nsome_new_section: {}\n")
    before = _digest(path)
    expected = NEWER_MESSAGE.format(
        path=path, found=7, release=RELEASE, supported=CONFIG_FILE_VERSION
    )
    with pytest.raises(FileTooNew) as refused:
        load_config(Home(home))
    assert refused.value.message == expected
    with pytest.raises(FileTooNew):
        edit_config(Home(home), lambda data: data.update({"concurrency": 2}))
    assert _digest(path) == before


# transcripts


def test_a_new_transcript_starts_with_its_version_and_an_old_one_is_read(tmp_path: Path) -> None:
    session = Session(tmp_path, "cli.chat-c")
    session.append({"t": "done", "turn_id": "t1", "replies": ["hi"]})
    first, second = (json.loads(line) for line in session.path.read_text().splitlines())
    assert (first["t"], first["version"], first["release"]) == (
        "header",
        TRANSCRIPT_VERSION,
        RELEASE,
    )
    assert second["t"] == "done"
    assert Session(tmp_path, "cli.chat-c").current_context() is None  # the header is no event
    # a transcript of the release before versions (no header) is read as it is
    old = tmp_path / "cli.chat-old" / "transcript.jsonl"
    old.parent.mkdir()
    old.write_text(
        json.dumps({"t": "context", "context_id": 1, "source": "startup", "provider": "offline",
                    "model": "offline-rules", "system": "S"}) + "\n"
        + json.dumps({"t": "msg", "role": "user", "content": "hello", "turn_id": "a"}) + "\n"
        + json.dumps({"t": "done", "turn_id": "a", "replies": ["hey"]}) + "\n"
    )  # fmt: skip
    resumed = Session(tmp_path, "cli.chat-old")
    context = resumed.current_context()
    assert context is not None and context.system == "S" and len(context.messages) == 1
    assert resumed.completed == {"a": ["hey"]}
    resumed.append({"t": "note", "text": "carried on"})  # appended to, never given a header
    assert old.read_text().splitlines()[0].startswith('{"t": "context"')


def test_a_transcript_of_a_newer_release_is_refused_and_never_appended_to(tmp_path: Path) -> None:
    path = tmp_path / "cli.chat-c" / "transcript.jsonl"
    path.parent.mkdir()
    newer = {**header_event(), "version": TRANSCRIPT_VERSION + 1}
    path.write_text(json.dumps(newer) + "\n" + json.dumps({"t": "later-kind"}) + "\n")
    before = _digest(path)
    session = Session(tmp_path, "cli.chat-c")
    with pytest.raises(FileTooNew) as refused:
        session.current_context()
    assert refused.value.message == NEWER_MESSAGE.format(
        path=path, found=TRANSCRIPT_VERSION + 1, release=RELEASE, supported=TRANSCRIPT_VERSION
    )
    with pytest.raises(FileTooNew):
        session.append({"t": "note", "text": "x"})
    assert _digest(path) == before


def test_the_runner_fails_a_turn_of_a_newer_transcript_and_search_leaves_it_out(
    tmp_path: Path,
) -> None:
    from orchestrator.agent.serve import RunnerServer
    from orchestrator.agent.settings import AgentSettings
    from orchestrator.agent.tools.sessions import _tail_events
    from orchestrator.memory.scaffold import scaffold_memory

    agent = tmp_path / "agent"
    scaffold_memory(agent)
    settings = AgentSettings(agent_dir=agent, runtime_dir=agent / "run", provider="offline",
                             model="offline-rules", hooks_file=None)  # fmt: skip
    path = settings.sessions_dir / "cli.chat-c" / "transcript.jsonl"
    path.parent.mkdir(parents=True)
    newer = {**header_event(), "version": TRANSCRIPT_VERSION + 1}
    message = {"t": "msg", "role": "user", "content": "the cat is Tom", "sender": "alice"}
    path.write_text(json.dumps(newer) + "\n" + json.dumps(message) + "\n")
    before = _digest(path)
    server = RunnerServer(settings)
    answer = server.answer({"op": "turn", "turn": {"turn_id": "t1", "chat": "c", "text": "hi"}})
    assert (
        answer["ok"] is False
        and f"{path} is at version {TRANSCRIPT_VERSION + 1}" in answer["error"]
    )
    assert _digest(path) == before
    assert _tail_events(path, 1 << 20) == ([], 0)  # not read by sessions_search
    path.write_text(json.dumps(header_event()) + "\n" + json.dumps(message) + "\n")
    assert [text for text, _, _ in _tail_events(path, 1 << 20)[0]] == ["the cat is Tom"]


# the home's layout


def _old_session(home: Path) -> tuple[GroupStore, str]:
    """A home as a release before versions left it: a session kept per chat id."""
    store = GroupStore(Home(home))
    group = store.add(GroupConfig(name="fam", creators=("alice",)))
    queue = open_queue(Home(home))
    try:
        message = queue.enqueue(
            group="fam", session="chat-kitchen", chat="kitchen", thread=None,
            sender="alice", trust="creator", text="hi", channel="cli",
        )  # fmt: skip
        HomeRecord(queue).db.transaction(lambda db: db.execute("DELETE FROM home"))
    finally:
        queue.close()
    (group.sessions_dir / "chat-kitchen").mkdir(parents=True)
    (group.sessions_dir / "chat-kitchen" / "transcript.jsonl").write_text("{}\n")
    return store, message.id


def test_the_layout_is_brought_up_to_date_once_and_journaled(home: Path) -> None:
    store, message_id = _old_session(home)
    queue = open_queue(Home(home))
    try:
        report = upgrade_home(queue, store)
        new = session_key("per-chat", "cli", "kitchen", None)
        assert (store.root / "fam" / "sessions" / new / "transcript.jsonl").read_text() == "{}\n"
        assert queue.get(message_id).session == new  # type: ignore[union-attr]
        assert report.previous is None and report.lines() == [
            f"home layout 1 -> 2: {LAYOUT_STEPS[0].what} (1 session folders renamed, "
            "1 messages re-keyed)",
            f"release {EARLIEST} -> {RELEASE}",
        ]
        assert HomeRecord(queue).layout() == LAYOUT_VERSION
        again = upgrade_home(queue, store)  # the next start: nothing to do or to say
        assert (again.previous, again.done) == (RELEASE, [])
    finally:
        queue.close()


def test_a_new_home_has_nothing_to_upgrade(home: Path) -> None:
    store = GroupStore(Home(home))
    store.add(GroupConfig(name="fam"))
    queue = open_queue(Home(home))
    try:
        report = upgrade_home(queue, store)
        assert (report.previous, report.done) == (RELEASE, [])
    finally:
        queue.close()


def test_a_layout_of_a_newer_release_is_refused_with_nothing_changed(home: Path) -> None:
    store, message_id = _old_session(home)
    queue = open_queue(Home(home))
    try:
        record = HomeRecord(queue)
        record.set_layout(LAYOUT_VERSION + 1, "a later release's step", "9.0.0")
        journal = record.journal()
        with pytest.raises(FileTooNew) as refused:
            upgrade_home(queue, store)
        assert refused.value.message.startswith(
            f"the layout of {home} (recorded in {queue.path}) is at version {LAYOUT_VERSION + 1}"
        )
        assert (store.root / "fam" / "sessions" / "chat-kitchen").is_dir()  # not renamed
        assert queue.get(message_id).session == "chat-kitchen"  # type: ignore[union-attr]
        assert record.journal() == journal and record.release() is None
    finally:
        queue.close()


def test_the_transcript_command_refuses_a_newer_transcript_and_shows_the_others(
    home: Path,
) -> None:
    from click.testing import CliRunner

    from orchestrator.cli import cli

    group = GroupStore(Home(home)).add(GroupConfig(name="fam"))
    event = {"t": "msg", "role": "user", "content": "hello there", "sender": "alice", "ts": 1.0}
    for key, header in (
        ("cli.chat-new", {**header_event(), "version": TRANSCRIPT_VERSION + 1}),
        ("cli.chat-old", None),  # before versions
        ("cli.chat-now", header_event()),
    ):
        path = group.sessions_dir / key / "transcript.jsonl"
        path.parent.mkdir(parents=True)
        lines = ([json.dumps(header)] if header else []) + [json.dumps(event)]
        path.write_text("\n".join(lines) + "\n")
    shown = CliRunner().invoke(cli, ["--home", str(home), "transcript", "fam"])
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.count("alice (?): hello there") == 2  # old and now; no header shown
    assert f"cli.chat-new: {group.sessions_dir}/cli.chat-new/transcript.jsonl is at version" in (
        shown.stderr
    )
    one = CliRunner().invoke(cli, ["--home", str(home), "transcript", "fam", "--chat", "new"])
    assert one.exit_code == 1 and "written by a newer release" in one.stderr
