"""The message path on the real engine: the daemon as a process, its channels, its queue."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from orchestrator.limits import TURN_TIMEOUT_SECONDS
from orchestrator.service import control_request
from orchestrator.store.messages import MessageQueue
from tests.engineclean import remove_containers

pytestmark = pytest.mark.docker
TOKEN = "test-token-0123456789abcdef"


class DaemonProcess:
    """`orchestrator serve` for a test home, under the test's own project name."""

    def __init__(self, home: Path, project: str) -> None:
        self.home = Home(home)
        self.project = project
        self.process: subprocess.Popen[bytes] | None = None
        self.log = home / "daemon.log"

    def start(self) -> None:
        env = {**os.environ, "ORCHESTRATOR_PROJECT": self.project, "ORCHESTRATOR_HTTP_TOKEN": TOKEN}
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "orchestrator", "--home", str(self.home.root), "serve"],
                stdout=log,
                stderr=log,
                env=env,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log.read_text()
            try:
                if control_request(self.home, {"op": "ping"}, timeout=2).get("ok"):
                    return
            except Exception:
                pass
            time.sleep(0.1)
        raise AssertionError("daemon did not start: " + self.log.read_text())

    def request(self, **message: Any) -> dict[str, Any]:
        # as long as a turn may take (its default timeout) and then some: a loaded
        # machine's model server can take minutes over a long prompt
        return control_request(self.home, message, timeout=TURN_TIMEOUT_SECONDS + 30)

    def send(
        self,
        group: str,
        text: str,
        *,
        chat: str = "c",
        wait: bool = False,
        sender: str = "operator",
    ) -> dict[str, Any]:
        answer = self.request(
            op="send", group=group, text=text, chat=chat, sender=sender, wait=wait
        )
        assert answer["ok"], answer
        message: dict[str, Any] = answer["message"]
        return message

    def get(self, message_id: str) -> dict[str, Any]:
        message: dict[str, Any] = self.request(op="get", id=message_id)["message"]
        return message

    def signal(self, sig: int) -> None:
        assert self.process is not None
        self.process.send_signal(sig)
        self.process.wait(timeout=60)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.signal(signal.SIGTERM)


@pytest.fixture
def daemon(tmp_path: Path, agent_image, test_project, docker_client) -> Iterator[DaemonProcess]:  # type: ignore[no-untyped-def]
    home = tmp_path / "home"
    home.mkdir()
    port = _free_port()
    (home / "orchestrator.yaml").write_text(f'http:\n  listen: "127.0.0.1:{port}"\n')
    proc = DaemonProcess(home, test_project)
    proc.port = port  # type: ignore[attr-defined]
    try:
        yield proc
    finally:
        proc.stop()
        remove_containers(docker_client, f"org.orchestrator.project={test_project}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_all(
    daemon: DaemonProcess, ids: list[str], timeout: float = 300
) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + timeout
    pending = set(ids)
    final: dict[str, dict[str, Any]] = {}
    while pending and time.monotonic() < deadline:
        for message_id in list(pending):
            message = daemon.get(message_id)
            if message["state"] in ("done", "dead"):
                final[message_id] = message
                pending.discard(message_id)
        time.sleep(0.2)
    assert not pending, (
        f"{len(pending)} messages never finished; log: " + daemon.log.read_text()[-3000:]
    )
    return final


def user_turns(group_dir: Path, chat: str) -> list[str]:
    """The texts of the user messages in a session's transcript, first occurrence each."""
    seen: list[str] = []
    path = group_dir / "sessions" / f"cli.chat-{chat}" / "transcript.jsonl"
    for line in path.read_text().splitlines():
        event = json.loads(line)
        is_user = event.get("t") == "msg" and event.get("role") == "user"
        if is_user and event["content"] not in seen:
            seen.append(event["content"])
    return seen


def test_200_messages_survive_container_kills_and_a_daemon_sigkill(daemon, docker_client) -> None:  # type: ignore[no-untyped-def]
    store = GroupStore(daemon.home)
    groups = [
        store.add(GroupConfig(name=f"Chaos {i}", creators=("operator",))).folder for i in range(5)
    ]
    daemon.start()
    rng = random.Random(7)
    plan = [
        (groups[i % 5], f"chat{i % 2}", f"what do you know about item-{i:03d}?") for i in range(200)
    ]
    ids: list[str] = []
    kills: list[str] = []

    def kill_one() -> None:
        running = docker_client.containers.list(
            filters={"label": f"org.orchestrator.project={daemon.project}"}
        )
        if running:
            victim = rng.choice(running)
            victim.kill()
            kills.append(victim.name)

    for n, (group, chat, text) in enumerate(plan[:100], 1):
        ids.append(daemon.send(group, text, chat=chat)["id"])
        if n % 20 == 0:  # a container killed after every 20 messages, whatever the speed
            while not docker_client.containers.list(
                filters={"label": f"org.orchestrator.project={daemon.project}"}
            ):
                time.sleep(0.05)
            kill_one()
    while daemon.request(op="status")["inflight"] < 1:  # something is in flight now
        time.sleep(0.01)
    pending = [i for i in ids if daemon.get(i)["state"] != "done"]
    daemon.signal(signal.SIGKILL)  # no drain, no cleanup
    assert pending, "the SIGKILL must land with messages still pending"
    daemon.start()
    for group, chat, text in plan[100:]:
        ids.append(daemon.send(group, text, chat=chat)["id"])
    final = wait_all(daemon, ids)
    assert len(kills) == 5, kills

    for (_, _, text), message_id in zip(plan, ids, strict=True):
        message = final[message_id]
        assert message["state"] == "done", message
        item = text.split("about ")[1].rstrip("?")
        assert message["replies"] == [f"I have nothing in memory about {item}."], message
    db = MessageQueue(daemon.home.state_dir / "queue.db")
    rows = db._db.execute("SELECT message_id, COUNT(*) FROM replies GROUP BY message_id")
    assert all(count == 1 for _, count in rows)
    db.close()
    # every turn ran to completion exactly once, by the runners' own records
    completed: dict[str, int] = {}
    for group in groups:
        for transcript in (store.root / group / "sessions").glob("*/transcript.jsonl"):
            for line in transcript.read_text().splitlines():
                event = json.loads(line)
                if event.get("t") == "done":
                    completed[event["turn_id"]] = completed.get(event["turn_id"], 0) + 1
    assert sorted(completed) == sorted(ids) and set(completed.values()) == {1}
    # order kept within each session
    for group in groups:
        for chat in ("chat0", "chat1"):
            sent = [t for g, c, t in plan if g == group and c == chat]
            assert user_turns(store.root / group, chat) == sent


def test_a_container_sending_bad_frames_does_not_stop_the_others(daemon, docker_client) -> None:  # type: ignore[no-untyped-def]
    store = GroupStore(daemon.home)
    store.add(GroupConfig(name="Rogue", creators=("operator",)))
    store.add(GroupConfig(name="Good", creators=("operator",)))
    daemon.start()
    assert daemon.send("rogue", "hello", wait=True)["state"] == "done"
    rogue = docker_client.containers.get(f"{daemon.project}.rogue")
    # Inside the rogue container: replace the runner's socket by a server that answers
    # pings but sends an oversized frame, then a malformed one, to every turn.
    script = r"""
import json, os, socket, struct
path = '/run/orchestrator/runner.sock'
os.unlink(path)
s = socket.socket(socket.AF_UNIX); s.bind(path); s.listen(8)
n = 0
while True:
    c, _ = s.accept()
    size = struct.unpack('>I', c.recv(4))[0]; req = json.loads(c.recv(size))
    if req.get('op') == 'ping':
        body = b'{"ok": true}'; c.sendall(struct.pack('>I', len(body)) + body)
    elif n % 2 == 0:
        c.sendall(struct.pack('>I', 64 * 1024 * 1024) + b'x' * 1000)
    else:
        c.sendall(struct.pack('>I', 9) + b'not json!')
    n += 1
    c.close()
"""
    sock = daemon.home.runtime_dir("rogue") / "runner.sock"
    before = sock.stat().st_ino
    rogue.exec_run(["python3", "-c", script], detach=True)
    while not sock.exists() or sock.stat().st_ino == before:  # the rogue socket is up
        time.sleep(0.02)
    bad = daemon.send("rogue", "hello again")
    good = [daemon.send("good", f"what do you know about g{i}?", chat=f"c{i}") for i in range(5)]
    final = wait_all(daemon, [bad["id"], *[g["id"] for g in good]], timeout=120)
    assert final[bad["id"]]["state"] == "dead"
    assert "exceeds" in final[bad["id"]]["error"] or "not UTF-8 JSON" in final[bad["id"]]["error"]
    assert all(final[g["id"]]["state"] == "done" for g in good)
    assert daemon.process is not None and daemon.process.poll() is None
    assert daemon.request(op="ping")["ok"]
    assert "delivery of" in daemon.log.read_text()  # the violation was logged


def http(
    daemon: DaemonProcess,
    method: str,
    path: str,
    body: bytes | None = None,
    token: str | None = TOKEN,
) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{daemon.port}{path}",
        data=body,  # type: ignore[attr-defined]
        method=method,
    )
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_http_api_rejects_bad_input_and_queues_nothing(daemon) -> None:  # type: ignore[no-untyped-def]
    store = GroupStore(daemon.home)
    store.add(GroupConfig(name="Api", creators=("alice",)))
    daemon.start()
    good = json.dumps({"text": "hi", "sender": "alice"}).encode()
    assert http(daemon, "GET", "/healthz", token=None) == (200, {"ok": True, "accepting": True})
    cases = [
        (http(daemon, "POST", "/v1/groups/api/messages", good, token=None), 401),
        (http(daemon, "POST", "/v1/groups/api/messages", good, token="wrong"), 401),
        (http(daemon, "POST", "/v1/groups/nope/messages", good), 404),
        (http(daemon, "POST", "/v1/groups/api/messages", b"{not json"), 400),
        (http(daemon, "POST", "/v1/groups/api/messages", b"[1, 2]"), 400),
        (http(daemon, "POST", "/v1/groups/api/messages", json.dumps({"text": "x"}).encode()), 400),
        (
            http(
                daemon,
                "POST",
                "/v1/groups/api/messages",
                json.dumps({"text": "x" * 70_000, "sender": "alice"}).encode(),
            ),
            413,
        ),
        (
            http(
                daemon,
                "POST",
                "/v1/groups/api/messages",
                json.dumps({"text": "hi", "sender": "stranger"}).encode(),
            ),
            403,
        ),
        (http(daemon, "GET", "/v1/messages/unknown"), 404),
    ]
    for (status, body), expected in cases:
        assert status == expected, (status, body)
        assert isinstance(body.get("error"), str) and body["error"]
    assert daemon.request(op="status")["counts"] == {}  # nothing was queued
    status, accepted = http(daemon, "POST", "/v1/groups/api/messages", good)
    assert status == 202 and accepted["state"] == "queued"
    status, message = http(daemon, "GET", f"/v1/messages/{accepted['id']}?wait=60")
    assert status == 200 and message["state"] == "done" and message["trust"] == "creator"
    assert "offline provider" in message["replies"][0]
    status, groups = http(daemon, "GET", "/v1/groups")
    assert status == 200
    assert groups == [{"folder": "api", "name": "Api", "valid": True, "problem": None}]


def test_sigterm_with_messages_in_flight_loses_nothing(daemon) -> None:  # type: ignore[no-untyped-def]
    store = GroupStore(daemon.home)
    for i in range(3):
        store.add(GroupConfig(name=f"Drain {i}", creators=("operator",)))
    daemon.start()
    ids = [
        daemon.send(f"drain-{i % 3}", f"remember that fact {i} is true", chat=f"c{i % 2}")["id"]
        for i in range(30)
    ]
    daemon.signal(signal.SIGTERM)
    assert daemon.process is not None and daemon.process.returncode == 0
    assert "draining" in daemon.log.read_text()
    daemon.start()
    final = wait_all(daemon, ids)
    assert all(m["state"] == "done" and m["replies"] for m in final.values())
    saved = sorted(
        p.name
        for i in range(3)
        for p in (store.root / f"drain-{i}" / "memory" / "facts").glob("fact-*.md")
    )
    assert len(saved) == 30


def test_cli_send_and_refused_sender(daemon) -> None:  # type: ignore[no-untyped-def]
    from click.testing import CliRunner

    from orchestrator.cli import cli

    GroupStore(daemon.home).add(GroupConfig(name="Cli", creators=("operator",)))
    daemon.start()
    runner = CliRunner(env={"ORCHESTRATOR_PROJECT": daemon.project})
    base = ["--home", str(daemon.home.root)]
    sent = runner.invoke(cli, [*base, "send", "cli", "remember that the sky is blue"])
    assert sent.exit_code == 0, sent.output
    assert sent.stdout.strip() == "Noted: the sky is blue. Saved to memory/facts/the-sky.md."
    refused = runner.invoke(cli, [*base, "send", "cli", "hi", "--sender", "eve"])
    assert refused.exit_code == 1
    assert "sender 'eve' may not talk to group 'cli'" in refused.stderr
    chat = runner.invoke(
        cli, [*base, "chat", "cli"], input="what do you know about the sky?\n/status\n/exit\n"
    )
    assert chat.exit_code == 0, chat.output
    assert "the sky is blue" in chat.stdout.lower() and "queue:" in chat.stdout


def test_status_rows_come_from_the_running_daemon_as_the_command_computes_them(daemon) -> None:  # type: ignore[no-untyped-def]
    """With the daemon running, `status` and `group list` take the groups' rows from it
    (`status` does not even import the engine's SDK); with none, the commands compute
    the same rows."""
    store = GroupStore(daemon.home)
    store.add(GroupConfig(name="Fam", creators=("operator",)))
    store.add(GroupConfig(name="Quiet", creators=("operator",)))
    broken = daemon.home.groups_dir / "broken"
    broken.mkdir()
    (broken / "group.yaml").write_text("name: Broken\nmodel: [\n")
    daemon.start()
    daemon.send("fam", "hello", wait=True)

    command = ["--home", str(daemon.home.root), "status", "--json"]

    def status() -> tuple[dict[str, Any], str]:
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "orchestrator", *command],
            capture_output=True,
            text=True,
            env={**os.environ, "ORCHESTRATOR_PROJECT": daemon.project},
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        imported = [line.split("|")[-1].strip() for line in done.stderr.splitlines()]
        return json.loads(done.stdout), " ".join(imported)

    def group_list() -> Any:
        done = subprocess.run(
            [sys.executable, "-m", "orchestrator", *command[:2], "group", "list", "--json"],
            capture_output=True,
            text=True,
            env={**os.environ, "ORCHESTRATOR_PROJECT": daemon.project},
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout)

    served, imported = status()
    assert served["daemon"] is not None
    assert "docker" not in imported.split()  # no engine connection of its own
    listed = group_list()
    assert daemon.request(op="listing")["groups"] == listed  # the daemon's rows
    os.replace(broken / "group.yaml", broken / "aside.yaml")  # the daemon reads them anew
    assert [g["valid"] for g in group_list()] == [False, True, True]
    os.replace(broken / "aside.yaml", broken / "group.yaml")
    daemon.stop()
    computed, imported = status()
    assert computed["daemon"] is None and "docker" in imported.split()
    assert group_list() == listed
    assert [(g["folder"], g["valid"], g["name"]) for g in listed] == [
        ("broken", False, None),
        ("fam", True, "Fam"),
        ("quiet", True, "Quiet"),
    ]
    assert listed[1]["path"] == str(daemon.home.groups_dir / "fam")

    def steady(row: dict[str, Any]) -> dict[str, Any]:  # what a second later still holds
        return {k: v for k, v in row.items() if k not in ("uptime_seconds", "memory_bytes")}

    rows = {row["folder"]: row for row in served["groups"]}
    assert sorted(rows) == ["fam", "quiet"]
    assert rows["fam"]["state"] == "running" and rows["fam"]["memory_bytes"] > 0
    assert rows["fam"]["disk_bytes"] > 0 and rows["fam"]["drift"] is False
    assert rows["quiet"]["state"] == "absent" and rows["quiet"]["memory_bytes"] is None
    assert [steady(r) for r in served["groups"]] == [steady(r) for r in computed["groups"]]
    assert served["invalid_groups"] == computed["invalid_groups"]
    assert [i["folder"] for i in served["invalid_groups"]] == ["broken"]
    assert "broken/group.yaml" in served["invalid_groups"][0]["problem"]


def test_a_reminder_set_in_a_chat_arrives_in_that_chat(daemon) -> None:  # type: ignore[no-untyped-def]
    """`orchestrator chat` through the CLI channel, the offline provider in a container:
    a reminder set in the chat fires (its due time moved to now, as ten minutes passing
    would) and its reply shows in that open chat, marked with its task."""
    import queue as lines_queue
    import sqlite3
    import threading

    GroupStore(daemon.home).add(GroupConfig(name="Fam", members=("bob",)))
    daemon.start()
    env = {**os.environ, "ORCHESTRATOR_PROJECT": daemon.project}
    chat = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "--home", str(daemon.home.root), "chat", "fam",
         "--chat", "kitchen", "--sender", "bob"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=env,
    )  # fmt: skip
    assert chat.stdin is not None and chat.stdout is not None
    out: lines_queue.Queue[str] = lines_queue.Queue()
    reader = threading.Thread(target=lambda: [out.put(line) for line in chat.stdout], daemon=True)  # type: ignore[union-attr]
    reader.start()

    def wait_for(prefix: str, timeout: float = 120) -> str:
        deadline = time.monotonic() + timeout
        seen = []
        while time.monotonic() < deadline:
            try:
                line = out.get(timeout=1).strip()
            except lines_queue.Empty:
                continue
            seen.append(line)
            if line.startswith(prefix):
                return line
        raise AssertionError(
            f"no line starting {prefix!r}; got {seen}; log: {daemon.log.read_text()[-2000:]}"
        )

    try:
        chat.stdin.write("remind me in 10 minutes to stretch\n")
        chat.stdin.flush()
        scheduled = wait_for("Scheduled task ")
        task_id = int(scheduled.split()[2].rstrip(":"))
        queue_file = daemon.home.state_dir / "queue.db"
        with sqlite3.connect(queue_file, timeout=30) as db:
            row = db.execute("SELECT chat, author, state FROM tasks WHERE id=?", (task_id,))
            assert row.fetchone() == ("kitchen", "bob", "active")
            db.execute("UPDATE tasks SET next_run=? WHERE id=?", (time.time(), task_id))
        assert wait_for("[task ") == f"[task {task_id}] Reminder: stretch"
        with sqlite3.connect(queue_file, timeout=30) as db:
            row = db.execute("SELECT state, runs FROM tasks WHERE id=?", (task_id,))
            assert row.fetchone() == ("done", 1)
    finally:
        chat.stdin.close()
        chat.wait(30)
        reader.join(10)
        chat.stdout.close()
    assert chat.returncode == 0


class EngineProxy:
    """A Unix socket that forwards to the engine's, which a test can cut and restore, as
    an engine restart would look to the daemon (the machine's engine is never touched)."""

    def __init__(self, path: Path, engine: str = "/var/run/docker.sock") -> None:
        import threading

        self.path, self.engine = path, engine
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        self.server: socket.socket | None = None
        self.restore()

    def restore(self) -> None:
        import threading

        self.path.unlink(missing_ok=True)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(self.path))
        server.listen(64)
        self.server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def cut(self) -> None:
        assert self.server is not None
        self.server.close()
        self.path.unlink(missing_ok=True)
        with self.lock:
            for conn in self.conns:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
                    conn.close()
            self.conns.clear()

    def _accept(self, server: socket.socket) -> None:
        import threading

        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(self.engine)
            with self.lock:
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)


def test_an_engine_restart_loses_nothing_and_answers_once(daemon, docker_client, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The daemon talks to the engine through a proxy; the proxy is cut (the engine
    restarting) while a message needs a container; the message waits, its attempts not
    counted, and once the engine is back it is answered exactly once."""
    proxy = EngineProxy(tmp_path / "engine.sock")
    os.environ["DOCKER_HOST"] = f"unix://{proxy.path}"
    try:
        GroupStore(daemon.home).add(GroupConfig(name="Fam", creators=("operator",)))
        daemon.start()
    finally:
        del os.environ["DOCKER_HOST"]
    first = daemon.send("fam", "remember that the engine restarts at night", wait=True)
    assert first["state"] == "done", first
    proxy.cut()
    docker_client.containers.get(f"{daemon.project}.fam").stop(timeout=5)  # it needs a start
    sent = daemon.send("fam", "what do you know about the engine?")
    deadline = time.monotonic() + 180
    while daemon.log.read_text().count("the engine is away") < 2:
        assert time.monotonic() < deadline, daemon.log.read_text()[-3000:]
        time.sleep(0.5)
    waiting = daemon.get(sent["id"])
    assert waiting["state"] in ("queued", "inflight") and waiting["attempts"] <= 1, waiting
    proxy.restore()
    final = wait_all(daemon, [sent["id"]], timeout=180)[sent["id"]]
    assert final["state"] == "done", final
    assert len(final["replies"]) == 1 and "restarts at night" in final["replies"][0]
