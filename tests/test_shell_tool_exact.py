"""Exact behaviour of the shell tool's process handling (agent/tools/shell.py), with the
engine of it faked at its boundary: how a shell is started (the Popen call, its
environment, its limits, the status pipe's write end closed even when the start fails),
what a call writes to the shell and how it ends (the line sent, the files removed, the
shell closed or kept, the exit code of a shell that exited), how the shell and what it
started are killed (signals, errors of processes gone or not ours, the wait's bound),
and the runner's own line, up to PID 1, never taken for a stray."""

from __future__ import annotations

import io
import locale
import os
import signal
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.agent.tools import shell as sh


class FakeStdin(io.BytesIO):
    def __init__(self, fail: type[BaseException] | None = None) -> None:
        super().__init__()
        self.fail = fail
        self.closes = 0

    def write(self, data: Any) -> int:
        if self.fail is not None:
            raise self.fail("broken pipe")
        return super().write(data)

    def close(self) -> None:
        self.closes += 1
        if self.fail is not None:
            raise self.fail("broken pipe")


class FakeProcess:
    def __init__(
        self,
        pid: int = 4242,
        *,
        stdin: FakeStdin | None = None,
        code: int = 3,
        hang: bool = False,
    ) -> None:
        self.pid = pid
        self.stdin = stdin if stdin is not None else FakeStdin()
        self.code = code
        self.hang = hang
        self.waits: list[Any] = []

    def poll(self) -> int | None:
        return None

    def wait(self, timeout: Any = None) -> int:
        self.waits.append(timeout)
        if self.hang:
            raise subprocess.TimeoutExpired("bash", timeout)
        return self.code


# strays: the runner's own line


def _table(
    monkeypatch: pytest.MonkeyPatch, me: int, table: dict[int, tuple[int, int, int, int]]
) -> None:
    monkeypatch.setattr(sh, "_processes", lambda: table)
    monkeypatch.setattr(sh.os, "getpid", lambda: me)


def test_the_runners_ancestors_up_to_pid_1_are_never_strays(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # PID 1 and 2 are in the runner's line and in the shell's group: neither is a stray
    _table(monkeypatch, 100, {
        1: (0, 200, 200, 0),
        2: (1, 200, 200, 1),
        100: (2, 200, 200, 2),
        200: (100, 200, 200, 3),
        201: (200, 200, 200, 4),
    })  # fmt: skip
    assert sh.strays(200) == [201]


def test_the_walk_up_stops_at_pid_1(monkeypatch: pytest.MonkeyPatch) -> None:
    # a process numbered 0 in the shell's group is no ancestor: PID 1's parent is not looked up
    _table(monkeypatch, 100, {
        0: (0, 200, 200, 0),
        1: (0, 1, 1, 0),
        100: (1, 100, 100, 2),
        200: (100, 200, 200, 3),
    })  # fmt: skip
    assert sh.strays(200) == [0]


# _kill


def test_kill_sends_sigkill_and_goes_on_past_processes_gone_or_not_ours(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent: list[tuple[int, int]] = []

    def kill(pid: int, sig: int) -> None:
        sent.append((pid, sig))
        if pid == 1:
            raise ProcessLookupError(pid)
        if pid == 2:
            raise PermissionError(pid)

    monkeypatch.setattr(sh.os, "kill", kill)
    sh._kill([1, 2, 3])
    assert sent == [(1, signal.SIGKILL), (2, signal.SIGKILL), (3, signal.SIGKILL)]


def test_kill_raises_other_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    def kill(pid: int, sig: int) -> None:
        raise OSError(22, "invalid")

    monkeypatch.setattr(sh.os, "kill", kill)
    with pytest.raises(OSError, match="invalid"):
        sh._kill([5])


# close


@pytest.fixture
def closing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A Shell with a fake process and a real status pipe; the calls close makes."""
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(
        sh, "strays", lambda pid, *, orphans_since=None: calls.append(("strays", pid)) or [7]
    )
    monkeypatch.setattr(sh, "_kill", lambda pids: calls.append(("kill", list(pids))))
    shell = sh.Shell(tmp_path / "w", tmp_path / "s")
    read, write = os.pipe()
    os.close(write)
    shell.status_read = read
    yield shell, calls, read


@pytest.mark.parametrize("error", [ProcessLookupError, PermissionError])
def test_close_goes_on_when_the_group_cannot_be_killed(
    closing: Any, monkeypatch: pytest.MonkeyPatch, error: type[OSError]
) -> None:
    shell, calls, read = closing

    def killpg(pid: int, sig: int) -> None:
        calls.append(("killpg", pid, sig))
        raise error(pid)

    monkeypatch.setattr(sh.os, "killpg", killpg)
    process = FakeProcess(4242)
    shell.process = process  # type: ignore[assignment]
    shell.close()
    assert calls == [
        ("strays", 4242),
        ("killpg", 4242, signal.SIGKILL),
        ("kill", [7]),
        ("strays", 4242),
        ("kill", [7]),
    ]
    assert process.stdin.closes == 1
    assert process.waits == [5]
    assert (shell.process, shell.status_read) == (None, None)
    with pytest.raises(OSError):
        os.fstat(read)  # the status pipe is closed


def test_close_raises_other_errors_of_the_group_kill(
    closing: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    shell, _, _ = closing

    def killpg(pid: int, sig: int) -> None:
        raise OSError(22, "invalid")

    monkeypatch.setattr(sh.os, "killpg", killpg)
    shell.process = FakeProcess()  # type: ignore[assignment]
    with pytest.raises(OSError, match="invalid"):
        shell.close()


def test_close_goes_on_past_a_broken_stdin_and_a_shell_that_will_not_end(
    closing: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    shell, calls, _ = closing
    monkeypatch.setattr(sh.os, "killpg", lambda pid, sig: calls.append(("killpg", pid, sig)))
    process = FakeProcess(99, stdin=FakeStdin(BrokenPipeError), hang=True)
    shell.process = process  # type: ignore[assignment]
    shell.close()
    assert process.stdin.closes == 1
    assert process.waits == [5]
    assert (shell.process, shell.status_read) == (None, None)


def test_close_without_a_stdin_still_waits(closing: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    shell, _, _ = closing
    monkeypatch.setattr(sh.os, "killpg", lambda pid, sig: None)
    process = FakeProcess(99)
    process.stdin = None  # type: ignore[assignment]
    shell.process = process  # type: ignore[assignment]
    shell.close()
    assert process.waits == [5]
    assert shell.process is None


# _start


@pytest.fixture
def starting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Popen, prlimit and the clock faked; what they were called with."""
    seen: dict[str, Any] = {"prlimit": []}
    process = FakeProcess(321)

    def popen(args: Any, **kwargs: Any) -> Any:
        seen["args"], seen["kwargs"] = args, kwargs
        (fd,) = kwargs["pass_fds"]
        os.fstat(fd)  # still open while the shell starts
        if seen.get("fail"):
            raise OSError(2, "no bash")
        return process

    monkeypatch.setattr(sh.subprocess, "Popen", popen)
    monkeypatch.setattr(sh.resource, "prlimit", lambda *a: seen["prlimit"].append(a))
    monkeypatch.setattr(sh, "_uptime_ticks", lambda: 8888)
    return seen, process


def test_a_shell_starts_as_its_own_session_with_output_discarded(
    tmp_path: Path, starting: Any
) -> None:
    seen, process = starting
    shell = sh.Shell(tmp_path / "work", tmp_path / "state", home=tmp_path / "home",
                     file_limit=777, proxy="http://p:1")  # fmt: skip
    assert shell._start() is process
    kwargs = seen["kwargs"]
    status_write = kwargs["pass_fds"][0]
    assert seen["args"] == ["/bin/bash", "--noprofile", "--norc"]
    assert kwargs == {
        "stdin": subprocess.PIPE,
        "stdout": subprocess.DEVNULL,
        "stderr": subprocess.DEVNULL,
        "cwd": tmp_path / "work",
        "env": {
            "PATH": sh.SAFE_PATH,
            "HOME": str(tmp_path / "home"),
            "TMPDIR": str(tmp_path / "state" / "tmp"),
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "PAGER": "cat",
            "GIT_PAGER": "cat",
            "SHELL": "/bin/bash",
            "HTTP_PROXY": "http://p:1",
            "HTTPS_PROXY": "http://p:1",
            "http_proxy": "http://p:1",
            "https_proxy": "http://p:1",
        },
        "start_new_session": True,
        "pass_fds": (status_write,),
    }
    assert seen["prlimit"] == [
        (321, sh.resource.RLIMIT_FSIZE, (777, 777)),
        (321, sh.resource.RLIMIT_CORE, (0, 0)),
    ]
    assert (shell.status_fd, shell.process, shell.started_ticks) == (status_write, process, 8888)
    assert shell.status_read is not None
    assert (tmp_path / "work").is_dir() and (tmp_path / "state" / "tmp").is_dir()
    os.close(shell.status_read)


def test_the_status_pipes_write_end_is_closed_even_when_bash_cannot_start(
    tmp_path: Path, starting: Any
) -> None:
    seen, _ = starting
    seen["fail"] = True
    shell = sh.Shell(tmp_path / "work", tmp_path / "state")
    with pytest.raises(OSError, match="no bash"):
        shell._start()
    (status_write,) = seen["kwargs"]["pass_fds"]
    with pytest.raises(OSError):
        os.fstat(status_write)
    assert seen["prlimit"] == []
    assert "HTTP_PROXY" not in seen["kwargs"]["env"]


# run


@pytest.fixture
def running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A Shell with a live fake process, a fixed token and a scripted _wait."""
    shell = sh.Shell(tmp_path / "work", tmp_path / "state")
    shell.state_dir.mkdir()
    process = FakeProcess(55, code=9)
    shell.process = process  # type: ignore[assignment]
    shell.status_read = 1000
    shell.status_fd = 17
    sizes: list[int] = []

    def urandom(n: int) -> bytes:
        sizes.append(n)
        return b"\xab" * n

    monkeypatch.setattr(sh.os, "urandom", urandom)
    state: dict[str, Any] = {"closes": 0, "waits": [], "sizes": sizes}

    def close() -> None:
        state["closes"] += 1

    def wait(token: str, timeout: float, cancelled: Any, over_disk: Any) -> Any:
        state["waits"].append((token, timeout, cancelled, over_disk))
        (shell.state_dir / f"out-{shell.calls}").write_bytes(b"said\n")
        return state["ended"], state.get("code")

    monkeypatch.setattr(shell, "close", close)
    monkeypatch.setattr(shell, "_wait", wait)
    return shell, process, state


def test_a_call_sends_one_line_and_leaves_no_files(running: Any) -> None:
    shell, process, state = running
    state["ended"], state["code"] = None, 0
    cancelled, over = (lambda: False), (lambda: True)
    result = shell.run("echo é", 12.5, cancelled=cancelled, over_disk=over)
    assert result == sh.ShellResult(0, "said\n", 0, None)
    state_dir = shell.state_dir
    token = "ab" * 8
    assert state["sizes"] == [8]
    assert state["waits"] == [(token, 12.5, cancelled, over)]
    assert process.stdin.getvalue().decode() == (
        f". '{state_dir}/cmd-1' 17>&- </dev/null >'{state_dir}/out-1' 2>&1; "
        f"set -- $?; disown -a 2>/dev/null; "
        f"printf '%s %s\\n' {token} \"$1\" >&17; set --\n"
    )
    assert sorted(p.name for p in state_dir.iterdir()) == []
    assert (state["closes"], process.waits, shell.calls) == (0, [], 1)
    shell.run("true", 1)
    assert shell.calls == 2


def command_files(shell: sh.Shell, monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The bytes of the call's command file, noted as each wait for its status begins."""
    seen: list[bytes] = []
    wait = shell._wait

    def peek(*args: Any) -> Any:
        seen.append((shell.state_dir / "cmd-1").read_bytes())
        return wait(*args)

    monkeypatch.setattr(shell, "_wait", peek)
    return seen


def test_a_calls_command_file_holds_the_command(
    running: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    shell, _, state = running
    state["ended"], state["code"] = None, 0
    seen = command_files(shell, monkeypatch)
    shell.run("echo é \udcff", 1)
    assert seen == [b"echo \xc3\xa9 \xff\n"]


@pytest.mark.parametrize("ended", ["timeout", "cancelled", "disk"])
def test_a_call_stopped_closes_its_shell(running: Any, ended: str) -> None:
    shell, process, state = running
    state["ended"] = ended
    assert shell.run("sleep 9", 3) == sh.ShellResult(None, "said\n", 0, ended)
    assert (state["closes"], process.waits) == (1, [])


def test_a_shell_that_exited_gives_its_code_and_is_closed(running: Any) -> None:
    shell, process, state = running
    state["ended"] = "exited"
    assert shell.run("exit 9", 3) == sh.ShellResult(9, "said\n", 0, "exited")
    assert (state["closes"], process.waits) == (1, [5])


def test_a_shell_that_exited_and_will_not_end_has_no_code(running: Any) -> None:
    shell, process, state = running
    state["ended"] = "exited"
    process.hang = True
    assert shell.run("exit 9", 3) == sh.ShellResult(None, "said\n", 0, "exited")
    assert (state["closes"], process.waits) == (1, [5])


def test_a_command_the_shell_cannot_take_is_said(running: Any) -> None:
    shell, process, state = running
    process.stdin = FakeStdin(BrokenPipeError)
    result = shell.run("true", 3)
    assert result == sh.ShellResult(None, "the shell could not start the command", 0, "exited")
    assert result.text() == (
        "THE SHELL EXITED (code None); the next call gets a fresh shell\n"
        "the shell could not start the command"
    )
    assert (state["closes"], state["waits"]) == (1, [])


# what is left of the edges


def test_a_cut_output_is_split_at_its_first_nul() -> None:
    result = sh.ShellResult(0, "a\x00b\x00c", cut_bytes=3)
    assert result.text() == "exit code 0\na\n[... 3 bytes of output cut ...]\nb\x00c"


def test_a_new_shell_has_not_started() -> None:
    shell = sh.Shell(Path("/w"), Path("/s"))
    assert (shell.process, shell.status_read, shell.status_fd) == (None, None, -1)
    assert (shell.started_ticks, shell.calls) == (0, 0)


def test_the_status_pipe_is_read_4096_bytes_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shell = sh.Shell(tmp_path / "w", tmp_path / "s")
    read, write = os.pipe()
    shell.status_read = read
    shell.process = FakeProcess()  # type: ignore[assignment]
    sizes: list[int] = []
    real = os.read

    def spy(fd: int, n: int) -> bytes:
        sizes.append(n)
        return real(fd, n)

    monkeypatch.setattr(sh.os, "read", spy)
    os.write(write, b"beef 1\n")
    try:
        assert shell._wait("beef", 5, lambda: False, lambda: False) == (None, 1)
    finally:
        os.close(read)
        os.close(write)
    assert sizes == [4096]


def test_close_sweeps_orphans_only_when_asked(
    closing: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    shell, _, _ = closing
    since: list[int | None] = []
    monkeypatch.setattr(
        sh, "strays", lambda pid, *, orphans_since=None: since.append(orphans_since) or []
    )
    monkeypatch.setattr(sh.os, "killpg", lambda pid, sig: None)
    shell.started_ticks = 31
    shell.process = FakeProcess()  # type: ignore[assignment]
    shell.close()
    assert since == [None, None]


def _grown(monkeypatch: pytest.MonkeyPatch, told: int) -> None:
    """fstat tells a size of ``told``: the file grew after it was measured."""
    real = os.fstat

    def fstat(fd: int) -> Any:
        info = real(fd)
        return os.stat_result((info.st_mode, *info[1:6], told, *info[7:]))

    monkeypatch.setattr(sh.os, "fstat", fstat)


def test_output_that_grows_while_read_is_read_up_to_the_size_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keep = sh.SHELL_OUTPUT_HEAD_BYTES + sh.SHELL_OUTPUT_TAIL_BYTES
    out = tmp_path / "out"
    out.write_bytes(b"a" * (keep + 100))
    _grown(monkeypatch, 10)
    assert sh._read_capped(out) == ("a" * keep, 0)
    out.write_bytes(b"h" * sh.SHELL_OUTPUT_HEAD_BYTES + b"m" * 5 + b"t" * (keep + 100))
    _grown(monkeypatch, keep + 5)
    text, cut = sh._read_capped(out)
    assert (len(text), cut) == (keep + 1, 5)
    assert text == "h" * sh.SHELL_OUTPUT_HEAD_BYTES + "\x00" + "t" * sh.SHELL_OUTPUT_TAIL_BYTES


def test_a_shell_source_sweeps_no_orphans_unless_asked(tmp_path: Path) -> None:
    source = sh.ShellSource(tmp_path / "agent", tmp_path / "shells")
    assert source.sweep_orphans is False
    assert source.shell_of("k").sweep_orphans is False


def test_the_shell_tool_calls_the_sources_call(tmp_path: Path) -> None:
    source = sh.ShellSource(tmp_path / "agent", tmp_path / "shells")
    (tool,) = source.tools(None)  # type: ignore[arg-type]
    assert (tool.spec, tool.function, tool.modes) == (sh.SPEC, source._call, frozenset({"turn"}))


def test_a_turn_without_a_session_ends_the_default_shell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ended: list[sh.Shell] = []
    monkeypatch.setattr(sh.Shell, "end_turn", lambda self: ended.append(self) or [])
    source = sh.ShellSource(tmp_path / "agent", tmp_path / "shells")
    shell = source.shell_of("default")
    source.end_turn(SimpleNamespace(session_key=None))  # type: ignore[arg-type]
    source.end_turn(SimpleNamespace(session_key=""))  # type: ignore[arg-type]
    assert ended == [shell, shell]


def test_resetting_a_conversation_without_a_shell_does_nothing(tmp_path: Path) -> None:
    source = sh.ShellSource(tmp_path / "agent", tmp_path / "shells")
    source.reset("nobody")
    assert source.shells == {}


def test_a_command_is_written_in_utf8_whatever_the_locale(
    running: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    shell, _, state = running
    state["ended"], state["code"] = None, 0
    seen = command_files(shell, monkeypatch)
    before = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")  # an ASCII locale
    try:
        shell.run("echo é", 1)
    finally:
        locale.setlocale(locale.LC_CTYPE, before)
    assert seen == [b"echo \xc3\xa9\n"]


def test_a_turns_end_reads_the_shells_process_once(
    closing: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a reset closing the shell meanwhile sets its process to None
    shell, calls, _read = closing
    reads = iter([FakeProcess(4242), None])
    monkeypatch.setattr(
        sh.Shell,
        "process",
        property(lambda self: next(reads), lambda self, value: None),
        raising=False,
    )
    assert shell.end_turn() == [7]
    assert calls == [("strays", 4242), ("kill", [7])]
