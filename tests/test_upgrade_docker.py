"""An upgrade in place from the previous release, on the real engine.

The previous release's commit, as CHANGELOG.md names it, is taken out of this
repository's own history (``git archive``) into a temporary folder and installed into a
venv of its own from PyPI (with uv: seconds where pip takes more than a minute). With it,
a home is made as an operator would: groups with memory and its history, a Telegram chat
(a fake Bot API) bound and answered, a pairing code waiting, a scheduled task, a session
with context, messages queued behind one that is in flight (its model call held) when
the daemon is stopped. Then this release's ``image build`` and ``up`` run on the same
home, and everything is checked: what ``up`` says it migrated, every queued message
answered exactly once, the session resumed (no fresh context), the binding, the pairing
and the task (due at the same time), history and search, and the containers of the old
image replaced at each group's next turn, not all at once.

The previous release builds its agent image into a repository of its own, so that its
build never prunes the image other tests run (an image build drops the older tags of its
repository); both images are kept between runs, so only a first run builds them.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.daemon.upgrade import LAYOUT_STEPS
from orchestrator.store.schema import JOURNAL_FROM, LATEST, MIGRATIONS
from orchestrator.versions import EARLIEST, RELEASE
from tests.changelog import Release, previous_release
from tests.engineclean import remove_containers
from tests.fakeproviders import FakeProvider, Hold, Text
from tests.faketelegram import FakeTelegram

pytestmark = pytest.mark.docker
ROOT = Path(__file__).parent.parent
IMAGE_REPOSITORY = "orchestrator-agent-upgrade-test"
TOKEN = "5550002:AAE-upgrade-test-token_0123456789xyz"
KEY = "sk-upgrade-test-key"
ALICE, STRANGER = 4242, 9999
PRIVATE = {"id": ALICE, "type": "private", "first_name": "Alice"}
STRANGER_CHAT = {"id": STRANGER, "type": "private", "first_name": "Mallory"}


@pytest.fixture(scope="module")
def previous(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Release, Path]]:
    """The previous release, checked out and installed: (its release, its venv's bin/)."""
    release = previous_release()
    assert release.commit is not None
    folder = tmp_path_factory.mktemp("previous")
    source, venv = folder / "src", folder / "venv"
    source.mkdir()
    archive = subprocess.run(
        ["git", "archive", release.commit], cwd=ROOT, capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive.stdout, check=True)
    uv = Path(sys.executable).parent / "uv"
    # --seed: pip in it, which the previous release's image build runs
    subprocess.run([str(uv), "venv", "-q", "--seed", "--python", sys.executable, str(venv)],
                   check=True)  # fmt: skip
    subprocess.run(
        [str(uv), "pip", "install", "-q", "--python", str(venv / "bin/python"),
         "-e", f"{source}[host]"],
        check=True, timeout=900,
    )  # fmt: skip
    shown = subprocess.run([str(venv / "bin/orchestrator"), "--version"], capture_output=True,
                           text=True, check=True)  # fmt: skip
    assert shown.stdout.splitlines()[0] == f"orchestrator, version {release.version}"
    yield release, venv / "bin"


class Operator:
    """The orchestrator command of one release, run on one home as an operator would."""

    def __init__(self, bin_dir: Path, home: Path, env: dict[str, str]) -> None:
        self.bin = bin_dir
        self.home = home
        self.env = env

    def __call__(
        self, *args: str, ok: bool = True, timeout: float = 900
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(self.bin / "orchestrator"), "--home", str(self.home), *args],
            capture_output=True, text=True, env=self.env, timeout=timeout, cwd=self.home,
        )  # fmt: skip
        if ok:
            assert done.returncode == 0, (args, done.stdout, done.stderr, self.log())
        return done

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "--json").stdout)

    def log(self) -> str:
        path = self.home / "state" / "orchestrator.log"
        return path.read_text()[-4000:] if path.exists() else ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(predicate: Any, what: str, log: Any, timeout: float = 180) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached; log:\n{log()}")
        time.sleep(0.1)


def _rows(home: Path, sql: str, args: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
    """The state database read without this release's store (which would migrate it)."""
    db = sqlite3.connect(f"file:{home / 'state/queue.db'}?mode=ro", uri=True)
    try:
        return db.execute(sql, args).fetchall()
    finally:
        db.close()


def _recorded(home: Path, schema: int) -> dict[str, Any]:
    """The home's record as the previous release left it (none before schema 7)."""
    if schema < JOURNAL_FROM:
        return {"layout": 1, "release": None}
    rows = dict(_rows(home, "SELECT key, value FROM home"))
    return {"layout": int(rows.get("layout", 1)), "release": rows.get("release")}


def _containers(client: Any, project: str) -> dict[str, tuple[str, str]]:
    """group folder -> (container id, image) of the project's running containers."""
    found = client.containers.list(filters={"label": f"org.orchestrator.project={project}"})
    return {c.labels["org.orchestrator.group"]: (c.id, c.attrs["Config"]["Image"]) for c in found}


def _contexts(home: Path, folder: str, session: str) -> list[dict[str, Any]]:
    path = home / "groups" / folder / "sessions" / session / "transcript.jsonl"
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [e for e in events if e.get("t") == "context"]


def test_an_upgrade_from_the_previous_release_loses_nothing(
    previous: tuple[Release, Path],
    tmp_path: Path,
    agent_image: str,
    test_project: str,
    docker_client: Any,
) -> None:
    _release, previous_bin = previous
    telegram = FakeTelegram(TOKEN)
    provider = FakeProvider("openai", KEY)
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "ORCHESTRATOR_PROJECT": test_project, "TG_TOKEN": TOKEN,
           "FAKE_OPENAI_KEY": KEY}  # fmt: skip
    env.pop("ORCHESTRATOR_HOME", None)
    old = Operator(previous_bin, home, env)
    new = Operator(Path(sys.executable).parent, home, env)
    (home / "orchestrator.yaml").write_text(  # as the previous release has it: no version
        f"image: {IMAGE_REPOSITORY}\n"
        f'http:\n  listen: "127.0.0.1:{_free_port()}"\n'
        f"channels:\n  familybot:\n    kind: telegram\n    token_env: TG_TOKEN\n"
        f"    api_url: {telegram.url}\n"
        f"providers:\n  fake:\n    kind: openai\n    base_url: {provider.base_url}\n"
        f"    key_env: FAKE_OPENAI_KEY\n    models: [fake-model]\n"
    )
    held = Hold(then=Text("the first answer"))
    try:
        # ---- the previous release makes the home ----
        old("group", "add", "Family", "--creator", "operator", "--creator", f"telegram:{ALICE}")
        old("group", "add", "Work", "--provider", "fake", "--model", "fake-model")
        old("group", "add", "Idle")
        old("image", "build", "--offline")
        old("up")
        fact = old("send", "family", "remember that the cat is called Tom", "--chat", "c")
        assert fact.stdout.strip(), fact.stderr
        old("send", "family", "what do you know about the cat?", "--chat", "c")
        old("send", "idle", "hello", "--chat", "c")
        old("bind", "family", f"familybot:{ALICE}", "--activation", "always")
        telegram.say(PRIVATE, ALICE, "remember that the dog is called Rex")
        wait_for(lambda: telegram.sent(ALICE), "the bound chat answered", old.log)
        telegram.say(STRANGER_CHAT, STRANGER, "let me in")
        notice = wait_for(lambda: telegram.sent(STRANGER), "a pairing code", old.log)
        code = re.search(r"([A-Z0-9]{4}-[A-Z0-9]{4})", notice[0].params["text"])
        assert code, notice[0].params["text"]
        old("task", "add", "family", "--chat", "c", "--every", "2h", "water the plants")
        (task,) = old.json("task", "list")["tasks"]
        # one message in flight (its model call held), two queued behind it in its session
        provider.script.append(held)
        waiting = old("send", "work", "the first question", "--timeout", "1", ok=False)
        assert waiting.returncode == 3, (waiting.stdout, waiting.stderr)
        assert held.reached.wait(120), old.log()
        for text in ("the second question", "the third question"):
            assert old("send", "work", text, "--timeout", "0.5", ok=False).returncode == 3
        before = _containers(docker_client, test_project)
        assert set(before) == {"family", "work", "idle"}
        contexts = _contexts(home, "family", "cli.chat-c")
        # stopped with its turn in flight: SIGTERM drains, a second SIGTERM stops at once
        pid = int((home / "state/orchestrator.pid").read_text())
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: "draining" in old.log(), "the drain began", old.log, timeout=30)
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: not Path(f"/proc/{pid}").exists(), "the daemon stopped", old.log, 60)
        # while it is down, the bound chat says something more
        telegram.say(PRIVATE, ALICE, "what do you know about the dog?")
        ((schema,),) = _rows(home, "PRAGMA user_version")
        assert schema < LATEST
        recorded = _recorded(home, schema)
        states = dict(_rows(home, "SELECT text, state FROM messages WHERE group_folder='work'"))
        assert states["the second question"] == states["the third question"] == "queued"
        assert states["the first question"] in ("inflight", "queued")  # not done, not lost
        assert _rows(home, "SELECT count(*) FROM replies r JOIN messages m ON m.id=r.message_id"
                           " WHERE m.group_folder='work'") == [(0,)]  # fmt: skip
        held.release.set()  # the dead connection's request ends; nobody reads its answer
        provider.default = Text("answered")

        # ---- this release on the same home ----
        new("image", "build", "--offline")
        started = new("up")
        said = started.stdout.splitlines()
        was = recorded["release"] or EARLIEST
        assert said[1] == f"upgraded this home from {was} to {RELEASE}:", said
        done = [line.strip() for line in said[2:-1]]
        assert done[: len(MIGRATIONS) - schema] == [
            f"state database schema {m.version - 1} -> {m.version}: {m.what}"
            for m in MIGRATIONS[schema:]
        ]
        layout = [line for line in done if line.startswith("home layout ")]
        assert [line.rsplit(" (", 1)[0] for line in layout] == [
            f"home layout {step.version - 1} -> {step.version}: {step.what}"
            for step in LAYOUT_STEPS
            if step.version > recorded["layout"]
        ]
        assert done[-1] == f"release {was} -> {RELEASE}"
        assert f"release {RELEASE}" in new("status").stdout
        # the containers of the old image are kept at the start, each replaced at its
        # group's next turn (the chat's message, waiting at the Bot API, may be family's)
        assert "3 containers run an older image; each is made again at its group's next " \
            "turn" in new.log()  # fmt: skip
        assert _containers(docker_client, test_project)["idle"] == before["idle"]

        # every queued message answered exactly once; in flight when stopped, too
        def work_done() -> list[tuple[Any, ...]] | None:
            rows = _rows(home, "SELECT id, text, state FROM messages WHERE group_folder='work'")
            return rows if all(r[2] == "done" for r in rows) else None

        work = wait_for(work_done, "the work group's messages answered", new.log)
        for message_id, _text, _ in work:
            replies = _rows(home, "SELECT text FROM replies WHERE message_id=?", (message_id,))
            assert replies == [("answered",)], (message_id, replies)
        asked = [m["messages"][-1]["content"] for m in (s.body for s in provider.seen)]
        assert asked.count("the second question") == asked.count("the third question") == 1
        # the chat's message sent while it was down: answered once, from memory
        answers = wait_for(lambda: telegram.sent(ALICE)[1:], "the chat answered", new.log)
        time.sleep(3)  # a second answer, were there one, would come within this
        assert len(telegram.sent(ALICE)) == 2 and "Rex" in answers[0].params["text"]
        # the session resumed: no fresh context, and it answers from memory
        answer = new("send", "family", "what do you know about the cat?", "--chat", "c")
        assert "Tom" in answer.stdout, answer.stdout
        assert _contexts(home, "family", "cli.chat-c") == contexts
        # each old container made again at its group's turn; the idle group's is not
        after_turns = _containers(docker_client, test_project)
        assert after_turns["family"][0] != before["family"][0]
        assert after_turns["family"][1] != before["family"][1]  # the new image
        assert after_turns["work"][1] == after_turns["family"][1]
        assert after_turns["idle"] == before["idle"]
        # the binding, the pairing code and the task, as they were
        bound = _rows(home, "SELECT group_folder FROM bindings WHERE account='familybot'"
                            " AND chat=?", (str(ALICE),))  # fmt: skip
        assert bound == [("family",)]
        assert code[1] in {p["code"] for p in new.json("pair", "--list")}
        (kept,) = new.json("task", "list")["tasks"]
        assert (kept["id"], kept["next_run"], kept["state"]) == (
            task["id"], task["next_run"], task["state"],
        )  # fmt: skip
        # history and search
        changes = new.json("memory", "log", "family")["changes"]
        assert any(c["kind"] == "turn" and c["sender"] == "operator" for c in changes)
        found = new.json("memory", "search", "family", "cat")["results"]
        assert any("Tom" in str(r) for r in found), found
        new("down", "--all")
    finally:
        with_pid = home / "state/orchestrator.pid"
        if with_pid.exists():  # a failure left a daemon running
            new("down", ok=False, timeout=120)
        held.release.set()
        telegram.close()
        provider.close()
        remove_containers(docker_client, f"org.orchestrator.project={test_project}")
