"""The shell in a group's real container: tools the agent uses, state per conversation,
and a hostile agent with it (a fork bomb, a command that never ends, an output flood, a
disk fill, the network, the host's environment, a process left running), each while a
neighbour group goes on being answered. The model is a scripted fake on the host."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.groups import GroupStore
from orchestrator.groups.config import ContainerSettings, GroupConfig, ToolSettings
from orchestrator.home import Home
from orchestrator.runtime.base import LABEL_PROJECT
from tests.engineclean import remove_containers
from tests.fakeproviders import FakeProvider, Text, ToolUse
from tests.test_daemon_docker import DaemonProcess, _free_port

pytestmark = pytest.mark.docker
KEY = "sk-docker-shell-0123456789abcdefghij"
HOST_SECRET = "host-secret-value-0123456789"
ROOT = Path(__file__).parent.parent


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    fake = FakeProvider("openai", KEY)
    yield fake
    fake.close()


@pytest.fixture
def served(
    tmp_path: Path,
    provider: FakeProvider,
    agent_image: str,
    test_project: str,
    docker_client: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[DaemonProcess]:
    monkeypatch.setenv("FAKE_OPENAI_KEY", KEY)
    monkeypatch.setenv("SHELL_TEST_HOST_SECRET", HOST_SECRET)  # the daemon's; never a group's
    home = tmp_path / "home"
    home.mkdir()
    (home / "orchestrator.yaml").write_text(
        f'http:\n  listen: "127.0.0.1:{_free_port()}"\n'
        f"providers:\n  fake:\n    kind: openai\n    base_url: {provider.base_url}\n"
        "    key_env: FAKE_OPENAI_KEY\n    models: [fake-model]\n"
    )
    store = GroupStore(Home(home))
    store.add(
        GroupConfig(
            name="fam",
            provider="fake",
            model="fake-model",
            creators=("operator",),
            members=("bob",),
            container=ContainerSettings(disk_bytes=20 * 1024**2, pids=128),
            tools=ToolSettings(shell=("creator",)),
        )
    )
    store.add(GroupConfig(name="neighbour", creators=("operator",)))  # the offline model
    proc = DaemonProcess(home, test_project)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()
        remove_containers(docker_client, f"{LABEL_PROJECT}={test_project}")


def ask(proc: DaemonProcess, text: str, group: str = "fam", **kw: Any) -> dict[str, Any]:
    answer = proc.send(group, text, wait=True, **kw)
    message = answer.get("message", answer)
    assert message.get("state") == "done", message
    return message


def results(proc: DaemonProcess, chat: str = "c") -> list[str]:
    group = GroupStore(proc.home).load("fam")
    path = group.sessions_dir / f"cli.chat-{chat}" / "transcript.jsonl"
    events = [json.loads(line) for line in path.read_text().splitlines()]
    return [str(e["content"]) for e in events if e.get("role") == "tool"]


def pauses(proc: DaemonProcess) -> set[str]:
    return {p["group"] for p in proc.request(op="status")["pauses"]}


def wait_for(check: Any, rounds: int = 600) -> bool:
    for _ in range(rounds):  # housekeeping looks at a group after its turns
        if check():
            return True
        time.sleep(0.2)
    return False


def shell(command: str, **extra: Any) -> ToolUse:
    return ToolUse("shell", {"command": command, **extra})


def test_the_agent_uses_sqlite_git_and_python_and_the_files_are_the_groups(
    served: DaemonProcess, provider: FakeProvider
) -> None:
    provider.script.extend(
        [
            shell(
                "sqlite3 data.db 'create table t(x); insert into t values (42);' "
                "&& sqlite3 data.db 'select x * 2 from t'"
            ),
            shell(
                "git init -q repo && cd repo && echo hi > a.txt && git add a.txt && "
                "git -c user.email=agent@example.org -c user.name=agent commit -qm first "
                "&& git log --format=%s"
            ),
            ToolUse("write_file", {"path": "files/sum.py", "content": "print(sum(range(10)))\n"}),
            shell("pwd; python3 ../sum.py"),  # still in repo/: the shell kept its folder
            Text("Done."),
        ]
    )
    message = ask(served, "do some work")
    assert message["replies"] == ["Done."]
    out = results(served)
    assert out[0] == "exit code 0\n84\n", out
    assert out[1] == "exit code 0\nfirst\n", out
    assert out[3] == "exit code 0\n/workspace/agent/files/repo\n45\n", out
    files = GroupStore(served.home).load("fam").path / "files"
    assert (files / "data.db").is_file() and (files / "repo" / ".git" / "HEAD").is_file()
    assert (files / "repo" / "a.txt").read_text() == "hi\n"
    # the shell's calls are in the transcript the CLI shows
    shown = subprocess.run(
        [
            *(".venv/bin/orchestrator", "--home", str(served.home.root), "transcript", "fam"),
            *("--chat", "c", "--last", "200"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert "  $ pwd; python3 ../sum.py" in shown.stdout, shown.stdout
    assert "    /workspace/agent/files/repo" in shown.stdout and "    45" in shown.stdout
    # /clear: a fresh shell, back in files/
    assert ask(served, "/clear")["replies"][0].startswith("Started a fresh context")
    provider.script.extend([shell("pwd"), Text("ok")])
    ask(served, "where are you?")
    assert results(served)[-1] == "exit code 0\n/workspace/agent/files\n"


def test_a_member_has_no_shell_unless_group_yaml_says_so(
    served: DaemonProcess, provider: FakeProvider
) -> None:
    provider.script.extend([shell("touch files/member-was-here"), Text("tried")])
    ask(served, "run something", sender="bob")
    assert results(served)[-1] == "ERROR: shell is not granted on this turn"
    assert "shell" not in [t["function"]["name"] for t in provider.seen[0].body["tools"]]
    files = GroupStore(served.home).load("fam").path / "files"
    assert not (files / "member-was-here").exists()


def neighbour_answers_meanwhile(proc: DaemonProcess, hostile: threading.Thread) -> None:
    """The neighbour group answers while the hostile turn still runs."""
    answer = ask(proc, "hello there", group="neighbour", chat="n")
    assert answer["replies"], answer
    assert hostile.is_alive(), "the hostile turn ended before the neighbour was asked"


def run_hostile(proc: DaemonProcess, text: str) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: out.update(ask(proc, text)), daemon=True)
    thread.start()
    return thread, out


def test_a_hostile_shell_is_held_in_its_container(
    served: DaemonProcess, provider: FakeProvider, docker_client: Any, tmp_path: Path
) -> None:
    ask(served, "warm up", group="neighbour", chat="n")  # its container is up
    provider.script.extend([Text("ready")])
    ask(served, "start")  # and the hostile group's
    before = sorted(p.name for p in tmp_path.iterdir())

    # a fork bomb, then a command that never ends: each held to the call's timeout
    for command in (":(){ :|:& };:; sleep 30", "while :; do :; done"):
        provider.script.extend([shell(command, timeout_seconds=15), Text("after")])
        thread, out = run_hostile(served, "go")
        neighbour_answers_meanwhile(served, thread)
        thread.join(120)
        assert out["replies"] == ["after"], out
        assert results(served)[-1].startswith(("TIMED OUT", "exit code")), results(served)[-1]

    # an output flood: the output kept is capped, the turn answers
    provider.script.extend([shell("yes flood | head -c 500000000"), Text("flooded")])
    assert ask(served, "flood")["replies"] == ["flooded"]
    flood = results(served)[-1]
    assert "bytes of output cut" in flood and len(flood) < 20_000

    # a disk fill through files/: the shell is killed as it passes the group's limit,
    # and the host pauses the group (not its neighbour) until the space is freed
    provider.script.extend(
        [
            shell("for i in $(seq 1 100); do head -c 1000000 /dev/zero > f$i; sleep 0.05; done"),
            Text("filled"),
        ]
    )
    ask(served, "fill")
    assert results(served)[-1].startswith("KILLED: the group's disk use passed its limit")
    files = GroupStore(served.home).load("fam").path / "files"
    used = sum(p.stat().st_size for p in files.rglob("*") if p.is_file())
    assert 20 * 1024**2 <= used < 60 * 1024**2, used  # stopped short of its 100 MB
    paused = wait_for(lambda: "fam" in pauses(served))
    assert paused and "neighbour" not in pauses(served)
    assert ask(served, "still here?", group="neighbour", chat="n")["replies"]
    for leftover in files.glob("f*"):
        leftover.unlink()
    assert wait_for(lambda: "fam" not in pauses(served))

    # the network, the engine's socket and the host's environment are not there
    probes = (
        'python3 -c "import socket; s=socket.socket(); s.settimeout(3); '
        "s.connect(('172.17.0.1', 2375))\"; echo rc=$?",
        'python3 -c "import socket; s=socket.socket(socket.AF_UNIX); '
        "s.connect('/var/run/docker.sock')\"; echo rc=$?",
        "cat /proc/1/environ | tr '\\0' '\\n'; env",
        "ip addr 2>/dev/null || cat /proc/net/dev",
    )
    provider.script.extend([*(shell(p) for p in probes), Text("probed")])
    ask(served, "probe")
    net, engine, environ, links = results(served)[-4:]
    assert "rc=1" in net and "Network is unreachable" in net, net
    assert "rc=1" in engine and "No such file" in engine, engine
    assert HOST_SECRET not in environ and KEY not in environ, environ
    assert "eth0" not in links, links

    # a process left running after the turn is killed when the turn ends
    provider.script.extend(
        [shell("(sleep 600 &); nohup sleep 601 >/dev/null 2>&1 & setsid sleep 602 &"), Text("bg")]
    )
    ask(served, "leave something running")
    container = docker_client.containers.get(f"{served.project}.fam")
    ps = container.exec_run(["ps", "-eo", "args"]).output.decode()
    assert "sleep 60" not in ps, ps

    # nothing outside the group changed
    assert sorted(p.name for p in tmp_path.iterdir()) == before
