"""Group containers on the real engine: mounts, ownership, isolation, reconcile."""

from __future__ import annotations

import json
import os
import socket
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator import wire
from orchestrator.config import OrchestratorConfig
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from orchestrator.runtime.base import LABEL_PROJECT
from orchestrator.runtime.channel import SOCKET_NAME
from orchestrator.runtime.docker import DockerBackend
from orchestrator.runtime.lifecycle import GroupRuntime, default_skills_root

pytestmark = pytest.mark.docker


@pytest.fixture
def runtime(docker_client, agent_image, test_project, tmp_path: Path) -> Iterator[GroupRuntime]:  # type: ignore[no-untyped-def]
    home = Home(tmp_path / "home")
    home.ensure_writable()
    config = OrchestratorConfig(
        project=test_project, mount_allowlist=tmp_path / "no-allowlist.yaml"
    )
    backend = DockerBackend(docker_client)
    runtime = GroupRuntime(
        home, config, backend, lambda: agent_image, skills_root=default_skills_root()
    )
    try:
        yield runtime
    finally:
        for container in backend.list({LABEL_PROJECT: test_project}):
            backend.remove(container.name)


def run_in(runtime: GroupRuntime, folder: str, code: str) -> str:
    """Run Python code in the group's container as its user; return stdout."""
    container = runtime.backend.client.containers.get(  # type: ignore[attr-defined]
        runtime.container_name(runtime.store.load(folder))
    )
    result = container.exec_run(["python3", "-c", textwrap.dedent(code)])
    assert result.exit_code == 0, result.output.decode()
    return str(result.output.decode())


def expected_uid(group_dir: Path) -> int:
    owner = os.stat(group_dir).st_uid
    return 10001 if owner == 0 else owner


def test_memory_written_inside_appears_on_host_owned_by_the_group_user(runtime) -> None:  # type: ignore[no-untyped-def]
    group = runtime.store.add(GroupConfig(name="Fam"))
    runtime.ensure_running(group)
    out = run_in(
        runtime,
        "fam",
        """
        import os
        with open('/workspace/agent/memory/note.md', 'w') as f:
            f.write('---\\ntype: note\\n---\\nwritten inside\\n')
        print(os.getuid(), os.getgid())
    """,
    )
    uid = expected_uid(group.path)
    assert out.split() == [str(uid), str(uid if uid == 10001 else os.stat(group.path).st_gid)]
    host_file = group.memory_dir / "note.md"
    assert host_file.read_text().endswith("written inside\n")
    assert os.stat(host_file).st_uid == uid


def test_container_is_hardened(runtime) -> None:  # type: ignore[no-untyped-def]
    group = runtime.store.add(GroupConfig(name="Fam"))
    runtime.ensure_running(group)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        out = run_in(
            runtime,
            "fam",
            f"""
            import errno, json, os, socket
            result = {{"uid": os.getuid()}}
            def writable(path):
                try:
                    with open(path, 'a'):
                        return True
                except OSError as exc:
                    return errno.errorcode[exc.errno]
            result["rootfs"] = writable('/etc/probe')
            result["opt"] = writable('/opt/orchestrator/probe')
            ro = {{}}
            for line in open('/proc/self/mountinfo'):
                fields = line.split()
                ro[fields[4]] = 'ro' in fields[5].split(',')
            result["ro"] = {{p: ro.get(p) for p in (
                '/', '/workspace/skills',
                '/workspace/agent/memory', '/workspace/agent/sessions',
                '/workspace/agent/files', '/run/orchestrator')}}
            result["host_owned"] = [p for p in (
                '/workspace/agent/instructions.prepend.md',
                '/workspace/agent/learned-behaviors.md', '/workspace/agent/group.yaml')
                if os.path.lexists(p)]
            result["sockets"] = [os.path.join(d, f) for d, _, files in os.walk('/')
                                 if not d.startswith(('/proc', '/sys'))
                                 for f in files if f == 'docker.sock']
            result["interfaces"] = sorted(os.listdir('/sys/class/net'))
            result["routes"] = open('/proc/net/route').read().splitlines()[1:]
            s = socket.socket()
            s.settimeout(3)
            try:
                s.connect(('127.0.0.1', {port}))
                result["connect"] = "connected"
            except OSError as exc:
                result["connect"] = errno.errorcode.get(exc.errno, str(exc))
            status = dict(l.split(':\\t', 1) for l in open('/proc/self/status') if ':\\t' in l)
            result["capeff"] = status['CapEff'].strip()
            result["nnp"] = status['NoNewPrivs'].strip()
            result["tmpfs"] = {{p: os.statvfs(p).f_blocks * os.statvfs(p).f_frsize
                               for p in ('/tmp', '/home/agent')}}
            print(json.dumps(result))
        """,
        )
    finally:
        listener.close()
    result = json.loads(out)
    assert result["uid"] != 0
    assert result["rootfs"] == "EROFS" and result["opt"] == "EROFS"
    assert result["ro"] == {
        "/": True,
        "/workspace/skills": True,
        "/workspace/agent/memory": False,
        "/workspace/agent/sessions": False,
        "/workspace/agent/files": False,
        "/run/orchestrator": False,
    }
    assert result["host_owned"] == []  # never mounted, not even read-only
    assert result["sockets"] == []
    assert result["interfaces"] == ["lo"] and result["routes"] == []
    assert result["connect"] == "ECONNREFUSED"  # the host's listener is not reachable
    assert result["capeff"] == "0000000000000000" and result["nnp"] == "1"
    assert result["tmpfs"] == {"/tmp": 64 * 1024**2, "/home/agent": 64 * 1024**2}
    host = runtime.backend.client.api.inspect_container(runtime.container_name(group))
    memory = host["HostConfig"]["Memory"]
    assert memory == 512 * 1024**2 and host["HostConfig"]["MemorySwap"] == memory  # no swap


def test_one_group_cannot_see_another(runtime) -> None:  # type: ignore[no-untyped-def]
    a = runtime.store.add(GroupConfig(name="Alpha"))
    b = runtime.store.add(GroupConfig(name="Beta"))
    runtime.ensure_running(a)
    runtime.ensure_running(b)
    marker = "beta-secret-7f3a.md"
    (b.memory_dir / marker).write_text("only for beta")
    (b.sessions_dir / marker).write_text("only for beta")
    out = run_in(
        runtime,
        "alpha",
        f"""
        import os
        hits = [os.path.join(d, f) for d, dirs, files in os.walk('/')
                if not d.startswith(('/proc', '/sys'))
                for f in files + dirs if 'beta' in f]
        print(repr(hits), os.path.exists({str(b.path)!r}), os.path.exists({str(b.memory_dir)!r}))
    """,
    )
    assert out.split() == ["[]", "False", "False"]
    assert runtime.home.runtime_dir("beta").exists()
    alpha_mounts = {
        m["Source"]
        for m in runtime.backend.client.api.inspect_container(  # type: ignore[attr-defined]
            runtime.container_name(a)
        )["Mounts"]
    }
    assert not any(src.startswith(str(b.path)) for src in alpha_mounts)
    assert str(runtime.home.runtime_dir("beta")) not in alpha_mounts


def test_reconcile_recreates_removes_orphans_and_kill_recovers(runtime, docker_client) -> None:  # type: ignore[no-untyped-def]
    store: GroupStore = runtime.store
    fam = store.add(GroupConfig(name="Fam"))
    other = store.add(GroupConfig(name="Other"))
    first = runtime.ensure_running(fam)
    runtime.ensure_running(other)

    # change group.yaml -> recreate on reconcile
    fam.config_file.write_text(fam.config_file.read_text().replace("pids: 256", "pids: 200"))
    store.remove(store.load("other"), purge=True)  # -> its container is an orphan
    actions = {(a.kind, a.container) for a in runtime.reconcile()}
    assert actions == {
        ("recreate", runtime.container_name(fam)),
        ("remove-orphan", runtime.container_name(other)),
    }
    recreated = runtime.backend.inspect(runtime.container_name(fam))
    assert recreated is not None and recreated.running and recreated.id != first.id
    assert docker_client.api.inspect_container(recreated.id)["HostConfig"]["PidsLimit"] == 200
    assert runtime.backend.inspect(runtime.container_name(other)) is None

    # docker kill -> the next ensure-running brings it back
    docker_client.containers.get(recreated.id).kill()
    killed = runtime.backend.inspect(recreated.name)
    assert killed is not None and not killed.running
    back = runtime.ensure_running(store.load("fam"))
    assert back.running
    assert [a.kind for a in runtime.reconcile()] == ["adopt"]


def test_status_and_logs(runtime) -> None:  # type: ignore[no-untyped-def]
    group = runtime.store.add(GroupConfig(name="Fam"))
    runtime.ensure_running(group)
    (row,) = runtime.status()
    assert row.state == "running" and row.drift is False
    assert row.memory_bytes is not None and row.memory_bytes > 0
    lines = list(runtime.backend.logs(runtime.container_name(group), tail=10))
    assert any("runner listening on /run/orchestrator/runner.sock" in line for line in lines)


def test_cli_start_status_stop_reconcile(run, home: Path, agent_image, test_project) -> None:  # type: ignore[no-untyped-def]
    assert run("group", "add", "Fam").exit_code == 0
    try:
        started = run("start", "fam")
        assert started.exit_code == 0, started.output
        assert started.stdout.strip() == f"{test_project}.fam is running"
        rows = json.loads(run("status", "--json").stdout)["groups"]
        assert [(r["folder"], r["state"], r["drift"]) for r in rows] == [("fam", "running", False)]
        assert run("stop", "fam").stdout.strip() == f"stopped {test_project}.fam"
        plan = json.loads(run("reconcile", "--json").stdout)
        assert [(a["kind"], a["reason"]) for a in plan] == [("remove", "container is exited")]
        assert json.loads(run("status", "--json").stdout)["groups"][0]["state"] == "absent"
        assert run("restart", "fam").exit_code == 0
        removed = run("group", "remove", "fam", "--purge", "--yes")
        assert f"removed container {test_project}.fam" in removed.stdout
    finally:
        run("group", "remove", "fam", "--purge", "--yes")


def test_group_remembers_across_a_new_container_and_session(runtime) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.memory.lint import lint_memory
    from orchestrator.memory.okf import split_frontmatter

    group = runtime.store.add(GroupConfig(name="Fam"))
    runtime.ensure_running(group)
    told = runtime.runner(group).turn(
        {
            "turn_id": "t1",
            "chat": "family",
            "sender": "alice",
            "text": "remember that my timezone is Europe/Berlin",
        },
        timeout=60,
    )
    assert told["ok"] and told["fresh_context"] == "startup", told
    assert told["replies"] == [
        "Noted: my timezone is Europe/Berlin. Saved to memory/facts/my-timezone.md."
    ]

    runtime.remove(group.folder)
    assert runtime.backend.inspect(runtime.container_name(group)) is None
    runtime.ensure_running(group)  # a new container
    asked = runtime.runner(group).turn(
        {"turn_id": "t2", "chat": "another-chat", "text": "What do you know about my timezone?"},
        timeout=60,
    )
    assert asked["ok"] and asked["fresh_context"] == "startup", asked
    assert "Europe/Berlin" in asked["replies"][0]

    concept = group.memory_dir / "facts" / "my-timezone.md"
    front = split_frontmatter(concept.read_text())
    assert front.status == "ok" and (front.data or {}).get("type") == "fact"
    assert "(facts/index.md)" in (group.memory_dir / "index.md").read_text()
    assert "(my-timezone.md)" in (group.memory_dir / "facts/index.md").read_text()
    assert lint_memory(group.memory_dir).findings == []
    transcripts = sorted(p.parent.name for p in group.sessions_dir.glob("*/transcript.jsonl"))
    assert transcripts == ["cli.chat-another-chat", "cli.chat-family"]
    # the memory hook ran inside the container at each fresh context
    header, first = map(
        json.loads,
        (group.sessions_dir / "cli.chat-family/transcript.jsonl").read_text().splitlines()[:2],
    )
    assert header["t"] == "header"  # the transcript's version comes first
    assert first["t"] == "context" and "### memory/index.md" in first["system"]


def test_runner_refuses_bad_frames_and_keeps_serving(runtime) -> None:  # type: ignore[no-untyped-def]
    import struct

    group = runtime.store.add(GroupConfig(name="Fam"))
    runtime.ensure_running(group)
    client = runtime.runner(group)
    socket_path = runtime.home.runtime_dir(group.folder) / SOCKET_NAME
    assert wire.request(socket_path, {"op": "nope"}, 10) == {
        "ok": False,
        "error": "unknown op 'nope'; expected ping, turn or flush",
    }
    bad_turn = {"op": "turn", "turn": {"turn_id": "x", "chat": 5, "text": "hi"}}
    assert "turn.chat must be a string" in wire.request(socket_path, bad_turn, 10)["error"]
    raw = socket.socket(socket.AF_UNIX)
    raw.connect(str(socket_path))
    raw.sendall(struct.pack(">I", 50 * 1024 * 1024))  # oversized frame header
    raw.settimeout(5)
    assert raw.recv(10) == b""  # that connection is closed
    raw.close()
    assert client.ping()


def test_status_reads_memory_from_the_cgroup_without_the_engine(runtime) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.runtime.docker import cgroup_memory

    group = runtime.store.add(GroupConfig(name="Fam"))
    info = runtime.ensure_running(group)
    from_cgroup = cgroup_memory(info.id)
    if from_cgroup is None:  # this host cannot see the engine's cgroups
        pytest.skip("container cgroups are not visible here")
    assert 1024**2 < from_cgroup < 512 * 1024**2
    [row] = runtime.status()
    assert row.memory_bytes is not None and row.memory_bytes > 1024**2


def test_a_listing_inspects_each_container_and_leaves_out_one_removed_meanwhile(
    runtime, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """The listing's inspects run a few at a time; one whose container is gone by then
    is left out, not an error."""
    for name in ("Fam", "Work", "Club"):
        runtime.ensure_running(runtime.store.add(GroupConfig(name=name)))
    backend = runtime.backend
    listed = backend.client.api.containers
    monkeypatch.setattr(
        backend.client.api,
        "containers",
        lambda **kwargs: [*listed(**kwargs), {"Id": "0" * 64}],  # removed in between
    )
    found = backend.list(runtime.project_labels)
    assert sorted(c.name for c in found) == sorted(
        runtime.container_name(g) for g in runtime.store.groups()
    )
    assert all(c.running and c.started_at for c in found)
