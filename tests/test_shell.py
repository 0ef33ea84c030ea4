"""The shell tool: one persistent bash per conversation, its limits, and who gets it."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from orchestrator.agent.hostlink import HostLink
from orchestrator.agent.tools import Toolbox, ToolError
from orchestrator.agent.tools.shell import Shell, ShellSource, strays
from orchestrator.errors import OrchestratorError
from orchestrator.groups.config import parse_group_config
from orchestrator.limits import SHELL_OUTPUT_HEAD_BYTES, SHELL_OUTPUT_TAIL_BYTES
from orchestrator.relay.grants import SHELL, granted_tools


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    root = tmp_path / "agent"
    for name in ("memory", "files", "sessions"):
        (root / name).mkdir(parents=True)
    return root


@pytest.fixture
def source(agent: Path, tmp_path: Path) -> ShellSource:
    made = ShellSource(agent, tmp_path / "shells", home=tmp_path / "home")
    (tmp_path / "home").mkdir()
    yield made
    made.close()


def box(agent: Path, key: str = "chat-a", **extra: object) -> Toolbox:
    return Toolbox(agent, sources=(), session_key=key, **extra)  # type: ignore[arg-type]


def run(source: ShellSource, agent: Path, command: str, key: str = "chat-a", **kw: object) -> str:
    return source._call(box(agent, key), command, **kw)  # type: ignore[arg-type]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


def state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0]
    except OSError:
        return "gone"


def test_the_working_folder_and_exports_carry_over_per_conversation(
    source: ShellSource, agent: Path
) -> None:
    assert run(source, agent, "pwd") == f"exit code 0\n{agent / 'files'}\n"
    run(source, agent, "mkdir -p work && cd work && export COLOR=blue")
    assert run(source, agent, 'pwd; echo "$COLOR"').endswith(f"{agent}/files/work\nblue\n")
    # another conversation has a shell of its own
    assert run(source, agent, 'pwd; echo "[$COLOR]"', key="chat-b").endswith("/files\n[]\n")
    source.reset("chat-a")  # /clear: a fresh shell
    assert run(source, agent, 'echo "[$COLOR]"') == "exit code 0\n[]\n"


def test_exit_codes_stdin_closed_and_a_clean_environment(
    source: ShellSource, agent: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SECRET_TOKEN", "sk-do-not-leak")
    assert run(source, agent, "exit 3; echo no").startswith("THE SHELL EXITED (code 3)")
    assert run(source, agent, "false").startswith("exit code 1")
    assert run(source, agent, "cat; echo read-nothing") == "exit code 0\nread-nothing\n"
    env = run(source, agent, "env")
    assert "sk-do-not-leak" not in env and "SECRET_TOKEN" not in env
    assert "HOME=" in env and "TMPDIR=" in env
    # stdout and stderr together, in order
    assert run(source, agent, "echo out; echo err >&2") == "exit code 0\nout\nerr\n"


def test_a_timeout_kills_the_whole_tree_even_what_ignores_sigterm(
    source: ShellSource, agent: Path
) -> None:
    command = (
        "bash -c 'trap \"\" TERM; sleep 300' & echo $! > pid; "
        "setsid sleep 300 & echo $! >> pid; export KEPT=1; sleep 300"
    )
    answer = run(source, agent, command, timeout_seconds=2)
    assert answer.startswith("TIMED OUT"), answer
    pids = [int(p) for p in (agent / "files" / "pid").read_text().split()]
    for _ in range(50):
        if not any(alive(p) for p in pids):
            break
        time.sleep(0.1)
    assert not any(alive(p) for p in pids), [(p, state(p)) for p in pids]
    assert run(source, agent, 'echo "[${KEPT-}]"') == "exit code 0\n[]\n"  # a fresh shell


def test_what_a_turn_left_running_ends_with_it_and_the_shell_stays(
    source: ShellSource, agent: Path
) -> None:
    run(source, agent, "export KEEP=yes; (sleep 300 &) ; sleep 300 & echo $! > bg")
    shell = source.shells["chat-a"]
    assert shell.process is not None
    left = strays(shell.process.pid)
    assert left, "the background sleeps are the shell's"
    source.end_turn(box(agent))
    for _ in range(50):
        if not any(alive(p) for p in left):
            break
        time.sleep(0.1)
    assert not any(alive(p) for p in left)
    assert run(source, agent, 'echo "$KEEP"') == "exit code 0\nyes\n"


def test_output_is_capped_head_and_tail_and_binary_is_shown_harmlessly(
    source: ShellSource, agent: Path
) -> None:
    answer = run(source, agent, "seq 1 100000")
    assert answer.startswith("exit code 0\n1\n2\n") and answer.endswith("99999\n100000\n")
    assert "bytes of output cut" in answer
    assert len(answer.encode()) < SHELL_OUTPUT_HEAD_BYTES + SHELL_OUTPUT_TAIL_BYTES + 200
    raw = run(source, agent, r"printf 'a\xff\xfeb\x1b[31mc\x00d\n'")
    assert raw == "exit code 0\na\ufffd\ufffdb\\x1b[31mc\\x00d\n"
    noise = run(source, agent, "head -c 200000 /dev/urandom")
    assert "bytes of output cut" in noise and "\x1b" not in noise and "\x00" not in noise


def test_a_file_size_limit_holds_for_what_the_shell_writes(agent: Path, tmp_path: Path) -> None:
    small = ShellSource(agent, tmp_path / "shells", file_limit=1024 * 1024)
    try:
        answer = small._call(box(agent), "head -c 5000000 /dev/zero > big; echo $?")
        assert not answer.endswith("\n0\n"), answer
        assert (agent / "files" / "big").stat().st_size <= 1024 * 1024
    finally:
        small.close()


def test_a_disk_limit_passed_while_a_command_runs_kills_it(agent: Path, tmp_path: Path) -> None:
    limited = ShellSource(agent, tmp_path / "shells", disk_limit=2 * 1024 * 1024)
    try:
        # slowly, so that the watcher sees it pass the limit
        command = "for i in $(seq 1 100); do head -c 200000 /dev/urandom > f$i; sleep 0.1; done"
        answer = limited._call(box(agent), command)
        assert answer.startswith("KILLED: the group's disk use passed its limit"), answer
        assert len(list((agent / "files").glob("f*"))) < 100
    finally:
        limited.close()


def test_a_replaced_output_file_cannot_stall_the_runner(source: ShellSource, agent: Path) -> None:
    shell = source.shell_of("chat-a")
    answer = run(source, agent, f"rm -f {shell.state_dir}/out-1; mkfifo {shell.state_dir}/out-1")
    assert answer == "exit code 0"  # a FIFO where the output was: read as nothing
    assert run(source, agent, "echo fine") == "exit code 0\nfine\n"


def test_bad_arguments_are_refused(source: ShellSource, agent: Path) -> None:
    for command, kw in (("", {}), ("  ", {}), ("echo\x00x", {}), ("true", {"timeout_seconds": 0})):
        with pytest.raises(ToolError):
            run(source, agent, command, **kw)
    past = Toolbox(agent, sources=(), session_key="k", deadline=time.monotonic() - 1)
    with pytest.raises(ToolError, match="time is up"):
        source._call(past, "true")


def test_a_call_ends_when_the_host_closes_the_turn(source: ShellSource, agent: Path) -> None:
    ours, theirs = socket.socketpair()
    link = HostLink(ours)
    assert not link.closed()
    theirs.close()  # the host cancelled the turn: it shut the connection
    assert link.closed()
    answer = source._call(Toolbox(agent, sources=(), session_key="c", host=link), "sleep 30")
    assert answer.startswith("CANCELLED")
    ours.close()


def test_the_shell_is_granted_by_trust_from_group_yaml(tmp_path: Path) -> None:
    assert SHELL in granted_tools(task_run=False, trust="creator", shell=("creator",))
    assert SHELL not in granted_tools(task_run=False, trust="member", shell=("creator",))
    assert SHELL in granted_tools(task_run=False, trust="member", shell=("creator", "member"))
    assert SHELL not in granted_tools(task_run=False, trust="creator", shell=())
    assert SHELL not in granted_tools(task_run=False, trust="guest", shell=("creator", "member"))
    path = tmp_path / "group.yaml"
    config = parse_group_config("name: fam\n", path)
    assert config.tools.shell == ("creator",)
    config = parse_group_config("name: fam\ntools:\n  shell: [creator, member]\n", path)
    assert config.tools.shell == ("creator", "member")
    assert parse_group_config("name: fam\ntools:\n  shell: []\n", path).tools.shell == ()
    for bad, key in (("[guest]", "shell"), ("[root]", "shell")):
        with pytest.raises(OrchestratorError, match=rf"tools\.{key}"):
            parse_group_config(f"name: fam\ntools:\n  shell: {bad}\n", path)
    with pytest.raises(OrchestratorError, match="tools"):
        parse_group_config("name: fam\ntools:\n  sh: [creator]\n", path)


def test_the_shell_runs_as_its_own_session(source: ShellSource, agent: Path) -> None:
    run(source, agent, "true")
    shell: Shell = source.shells["chat-a"]
    assert shell.process is not None
    assert os.getsid(shell.process.pid) == shell.process.pid != os.getsid(0)
