"""The hostile-group suite, on the real engine: attacks run from inside a group's
container, as its own user (what a prompt-injected agent with tools amounts to), while
the host does its work. Every later feature runs against this gate.

Each test checks that canary files outside the attacking group (root-owned, and another
group's) keep their owner and bytes, that another group is still answered, and that
nothing queued is lost.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import OrchestratorConfig
from orchestrator.errors import InvalidConfig
from orchestrator.groups import Group, GroupStore, memory_usage
from orchestrator.groups.config import GroupConfig, set_option
from orchestrator.groups.disk import group_disk_usage
from orchestrator.home import Home, lock_holder
from orchestrator.limits import HTTP_MAX_CONNECTIONS
from orchestrator.memory.reading import render_memory
from orchestrator.runtime.base import LABEL_PROJECT
from orchestrator.runtime.docker import DockerBackend
from orchestrator.runtime.lifecycle import GroupRuntime, default_skills_root
from orchestrator.service import down
from tests.engineclean import remove_containers
from tests.hostile import SWAP_SCRIPT, fingerprint
from tests.test_daemon_docker import TOKEN, DaemonProcess, _free_port

pytestmark = pytest.mark.docker

# A runner a hostile container puts in place of ours: it answers pings, and drips a
# turn's answer a byte at a time, forever.
DRIPPING_RUNNER = r"""
import json, os, socket, struct, threading, time
path = "/run/orchestrator/runner.sock"
try:
    os.unlink(path)
except FileNotFoundError:
    pass
s = socket.socket(socket.AF_UNIX); s.bind(path); s.listen(64)
open("/run/orchestrator/evil.ready", "w").close()
def serve(c):
    with c:
        while True:
            head = c.recv(4, socket.MSG_WAITALL)
            if len(head) < 4:
                return
            body = json.loads(c.recv(struct.unpack(">I", head)[0], socket.MSG_WAITALL))
            if body.get("op") == "ping":
                out = json.dumps({"ok": True}).encode()
                c.sendall(struct.pack(">I", len(out)) + out)
                continue
            c.sendall(struct.pack(">I", 100000))
            try:
                while True:
                    time.sleep(1)
                    c.sendall(b" ")
            except OSError:
                return
while True:
    conn, _ = s.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""


def container_of(runtime: GroupRuntime, group: Group) -> Any:
    return runtime.backend.client.containers.get(runtime.container_name(group))  # type: ignore[attr-defined]


def inside(runtime: GroupRuntime, group: Group, code: str, *, detach: bool = False) -> str:
    """Run Python in the group's container as its user (as the agent could)."""
    result = container_of(runtime, group).exec_run(
        ["python3", "-c", textwrap.dedent(code)], detach=detach
    )
    if detach:
        return ""
    assert result.exit_code == 0, result.output.decode()
    return str(result.output.decode())


def swap_inside(runtime: GroupRuntime, group: Group, a: str, b: str, seconds: float) -> None:
    container_of(runtime, group).exec_run(
        ["python3", "-c", SWAP_SCRIPT, a, b, str(seconds)], detach=True
    )


@pytest.fixture
def runtime(docker_client, agent_image, test_project, home, tmp_path) -> Iterator[GroupRuntime]:  # type: ignore[no-untyped-def]
    h = Home(home)
    h.ensure_writable()
    config = OrchestratorConfig(project=test_project, mount_allowlist=tmp_path / "none.yaml")
    backend = DockerBackend(docker_client)
    skills = default_skills_root()
    runtime = GroupRuntime(h, config, backend, lambda: agent_image, skills_root=skills)
    try:
        yield runtime
    finally:
        for container in backend.list({LABEL_PROJECT: test_project}):
            backend.remove(container.name)


def test_swapped_folders_never_lead_the_host_outside_the_group(  # type: ignore[no-untyped-def]
    runtime, run, tmp_path: Path, test_project
) -> None:
    store = runtime.store
    a = store.add(GroupConfig(name="attacker"))
    b = store.add(GroupConfig(name="victim"))
    runtime.ensure_running(a)
    runtime.ensure_running(b)
    (b.memory_dir / "system/definition.md").write_text("VICTIM-ONLY DOCTRINE\n")
    canary = tmp_path / "canary"
    canary.mkdir()
    (canary / "secret.md").write_text("root's secret\n")
    before = fingerprint(canary), fingerprint(b.path)

    mem, files = "/workspace/agent/memory", "/workspace/agent/files"
    inside(
        runtime,
        a,
        f"""
        import os
        os.mkdir("{mem}/real")
        open("{mem}/real/definition.md", "w").write("no frontmatter: lint --fix rewrites me")
        os.symlink("{b.memory_dir}/system", "{mem}/link")
        os.symlink("{b.memory_dir}/system", "{mem}/sys-link")
        os.mkdir("{files}/real")
        open("{files}/real/x", "w").write("x")
        os.symlink("{canary}", "{files}/link")
        """,
    )
    seconds = 25
    real_inode = os.lstat(a.memory_dir / "real").st_ino
    swap_inside(runtime, a, f"{mem}/real", f"{mem}/link", seconds)
    swap_inside(runtime, a, f"{mem}/system", f"{mem}/sys-link", seconds)
    swap_inside(runtime, a, f"{files}/real", f"{files}/link", seconds)
    while os.lstat(a.memory_dir / "real").st_ino == real_inode:  # the attack is under way
        time.sleep(0.01)
    rounds = 0
    end = time.monotonic() + seconds - 3
    while time.monotonic() < end:
        # a changed owner makes the host hand the folders over again, walking them
        os.chown(a.memory_dir, 0, 0)
        os.chown(a.files_dir, 0, 0)
        with contextlib.suppress(InvalidConfig):  # refusing under attack is right
            runtime.prepare_host(a, runtime.desired_spec(a))
        run("memory", "lint", "attacker", "--fix")
        run("memory", "scaffold", "attacker")
        assert "VICTIM-ONLY DOCTRINE" not in render_memory(str(a.path))
        memory_usage(a)
        group_disk_usage(store.root, "attacker")
        rounds += 1
    assert rounds >= 3
    with contextlib.suppress(InvalidConfig):
        runtime.ensure_running(a)  # what a start does, under the same attack
    container = container_of(runtime, a)
    while any(f"{mem}/real" in " ".join(p) for p in container.top()["Processes"] or []):
        time.sleep(0.2)  # the swap loops end
    assert (fingerprint(canary), fingerprint(b.path)) == before
    assert run("group", "remove", "attacker", "--purge", "--yes").exit_code == 0
    assert (fingerprint(canary), fingerprint(b.path)) == before


@pytest.fixture
def served(tmp_path: Path, agent_image, test_project, docker_client) -> Iterator[DaemonProcess]:  # type: ignore[no-untyped-def]
    home = tmp_path / "home"
    home.mkdir()
    port = _free_port()
    (home / "orchestrator.yaml").write_text(
        f'concurrency: 2\nhttp:\n  listen: "127.0.0.1:{port}"\n'
    )
    proc = DaemonProcess(home, test_project)
    proc.port = port  # type: ignore[attr-defined]
    try:
        yield proc
    finally:
        proc.stop()
        remove_containers(docker_client, f"{LABEL_PROJECT}={test_project}")


def add_group(home: Path, name: str, turn_timeout: str | None = None) -> Group:
    group = GroupStore(Home(home)).add(GroupConfig(name=name, creators=("operator",)))
    if turn_timeout:
        set_option(group.config_file, "turn_timeout", turn_timeout)
    return GroupStore(Home(home)).load(name)


def runtime_for(proc: DaemonProcess, docker_client: Any) -> GroupRuntime:  # type: ignore[no-untyped-def]
    config = OrchestratorConfig(project=proc.project, mount_allowlist=Path("/nonexistent"))
    return GroupRuntime(proc.home, config, DockerBackend(docker_client), lambda: "unused")


def test_a_dripping_runner_cannot_hold_the_workers_or_the_daemon(served, docker_client) -> None:  # type: ignore[no-untyped-def]
    evil = add_group(served.home.root, "evil", "6s")
    add_group(served.home.root, "good")
    served.start()
    for name in ("evil", "good"):  # both containers up
        assert served.send(name, "hello", wait=True)["state"] == "done"
    runtime = runtime_for(served, docker_client)
    inside(runtime, evil, DRIPPING_RUNNER, detach=True)
    ready = served.home.runtime_dir("evil") / "evil.ready"
    deadline = time.monotonic() + 30
    while not ready.exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)

    evil_ids = [served.send("evil", "hi", chat=f"x{i}")["id"] for i in range(3)]
    while served.request(op="status")["inflight"] < 1:
        time.sleep(0.02)
    started = time.monotonic()
    good = served.send("good", "what do you know about anything?", wait=True)
    latency = time.monotonic() - started
    assert good["state"] == "done" and good["replies"], good
    for message_id in evil_ids:
        assert served.get(message_id)["error"] is None  # still within its first attempt
    print(f"another group's turn while one group attacks: {latency * 1000:.0f} ms")

    # each dripping turn is cut at its deadline and retried; none holds a worker for good
    deadline = time.monotonic() + 120
    while not all(served.get(i)["attempts"] >= 2 for i in evil_ids):
        assert time.monotonic() < deadline, [served.get(i) for i in evil_ids]
        time.sleep(0.2)
    assert "did not finish within 6s" in str(served.get(evil_ids[0])["error"])

    # down stops it with turns still dripping; the lock goes with the process
    assert served.process is not None
    result = down(served.home)
    assert result.pid == served.process.pid and lock_holder(served.home) is None
    served.process.wait(5)
    served.process = None
    # nothing lost: each message of the hostile group waits, or is a dead letter that
    # says why (and can be retried)
    from orchestrator.store.messages import open_queue

    queue = open_queue(served.home)
    messages = [queue.get(i) for i in evil_ids]
    queue.close()
    for message in messages:
        assert message is not None and message.state in ("queued", "inflight", "dead")
        if message.state == "dead":
            assert "did not finish within 6s" in str(message.last_error)


def test_http_header_floods_do_not_starve_the_daemon(served) -> None:  # type: ignore[no-untyped-def]
    import urllib.request

    add_group(served.home.root, "good")
    served.start()
    port = served.port  # type: ignore[attr-defined]
    assert served.process is not None
    assert served.send("good", "warm up", wait=True)["state"] == "done"  # container up
    baseline = len(os.listdir(f"/proc/{served.process.pid}/fd"))
    slow = []
    for _ in range(400):  # more than the connection cap
        with contextlib.suppress(OSError):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"POST /v1/groups/good/messages HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            slow.append(s)
    # the CLI still works, and the API still takes a message once slow heads are cut off
    assert served.send("good", "hello", wait=True)["state"] == "done"
    fds = len(os.listdir(f"/proc/{served.process.pid}/fd"))
    body = json.dumps({"text": "hello again", "sender": "operator"}).encode()
    deadline = time.monotonic() + 60
    while True:
        try:
            req = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/groups/good/messages",
                data=body,
                headers={"Authorization": f"Bearer {TOKEN}"},
            )
            with urllib.request.urlopen(req, timeout=10) as response:
                message = json.loads(response.read())
            break
        except OSError:
            assert time.monotonic() < deadline, "the API never came back"
            time.sleep(0.5)
    with urllib.request.urlopen(
        urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/messages/{message['id']}?wait=60",
            headers={"Authorization": f"Bearer {TOKEN}"},
        ),
        timeout=70,
    ) as response:
        assert json.loads(response.read())["state"] == "done"
    for s in slow:
        s.close()
    assert fds - baseline <= HTTP_MAX_CONNECTIONS + 8, f"{fds} descriptors ({baseline} before)"
    log = served.log.read_text()
    assert log.count("HTTP connection refused") <= 25  # rate-limited, not one per attempt


def test_escape_sequences_in_replies_reach_the_terminal_escaped(served, docker_client) -> None:  # type: ignore[no-untyped-def]
    group = add_group(served.home.root, "fam")
    served.start()
    assert served.send("fam", "hello", wait=True)["state"] == "done"
    inside(
        runtime_for(served, docker_client),
        group,
        r"""
        import os
        os.makedirs("/workspace/agent/memory/facts", exist_ok=True)
        open("/workspace/agent/memory/facts/banner.md", "w").write(
            "---\ntype: fact\n---\nThe banner is \x1b]0;owned\x07\x1b]52;c;ZXZpbA==\x07 red\n"
        )
        """,
    )
    result = subprocess.run(
        [
            ".venv/bin/orchestrator",
            "--home",
            str(served.home.root),
            "send",
            "fam",
            "what do you know about the banner?",
        ],
        capture_output=True,
        env={**os.environ, "ORCHESTRATOR_PROJECT": served.project},
        timeout=120,
        cwd=Path(__file__).parent.parent,
    )
    assert result.returncode == 0, result.stderr
    assert b"\x1b" not in result.stdout and b"\x07" not in result.stdout
    assert b"\\e]0;owned" in result.stdout


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=80m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small filesystem needs root")
def test_a_group_filling_the_disk_is_paused_and_nothing_is_lost(  # type: ignore[no-untyped-def]
    small_disk, agent_image, test_project, docker_client
) -> None:
    home = small_disk / "home"
    home.mkdir()
    (home / "orchestrator.yaml").write_text(f'http:\n  listen: "127.0.0.1:{_free_port()}"\n')
    proc = DaemonProcess(home, test_project)
    try:
        evil = add_group(home, "evil")
        set_option(evil.config_file, "container.disk", "8m")
        add_group(home, "good")
        proc.start()
        for name in ("evil", "good"):
            assert proc.send(name, "hello", wait=True)["state"] == "done"
        runtime = runtime_for(proc, docker_client)
        # fill the shared disk from inside the hostile group (dd stops at ENOSPC)
        container_of(runtime, evil).exec_run(
            ["sh", "-c", "dd if=/dev/zero of=/workspace/agent/files/fill bs=1M count=500"]
        )
        assert os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize < 1024**2
        # the queue still commits (the reserve is released): the other group's message is
        # taken; the hostile group's too, unless the minutely disk check has paused it since
        ids = [proc.send("good", "still there?")["id"]]
        more = proc.request(op="send", group="evil", text="more", sender="operator")
        if more["ok"]:
            ids.append(more["message"]["id"])
        else:
            assert more.get("paused") is True and "over its disk limit" in more["error"], more
        deadline = time.monotonic() + 60
        while not any(p["group"] == "evil" for p in proc.request(op="status")["pauses"]):
            assert time.monotonic() < deadline, proc.log.read_text()[-2000:]
            time.sleep(0.2)
        refused = proc.request(op="send", group="evil", text="and more", sender="operator")
        assert refused["ok"] is False and refused.get("paused") is True
        assert "over its disk limit" in refused["error"]
        # the operator frees space; the group resumes and every message is answered
        (evil.files_dir / "fill").unlink()
        deadline = time.monotonic() + 60
        while any(p["group"] == "evil" for p in proc.request(op="status")["pauses"]):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        for message_id in ids:
            while (message := proc.get(message_id))["state"] not in ("done", "dead"):
                assert time.monotonic() < deadline + 120, message
                time.sleep(0.2)
            if message["state"] == "dead":  # failed while the disk was full: retry it
                assert proc.request(op="retry", id=message_id)["ok"]
        for message_id in ids:
            while proc.get(message_id)["state"] != "done":
                assert time.monotonic() < deadline + 240, proc.get(message_id)
                time.sleep(0.2)
        assert proc.request(op="status")["counts"].get("inflight", 0) == 0
    finally:
        proc.stop()
        remove_containers(docker_client, f"{LABEL_PROJECT}={test_project}")
