"""Exact behaviour of the daemon's commands' helpers (cli/daemon.py): the one-line
description of a running daemon, the group containers ``down`` finds, the request
``send`` streams and what it prints of replies, files and errors, the outcome of a
message (exit codes, notes, dead letters), the follower that prints the replies of
scheduled tasks in ``chat``, the chat loop (its commands, blank lines, bad input, end of
input) and readline's history. The daemon's socket client and the engine are fakes."""

from __future__ import annotations

import io
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli import CliContext
from orchestrator.cli import daemon as cli_daemon
from orchestrator.cli.daemon import (
    _chat_loop,
    _follow,
    _line_editing,
    _print_outcome,
    _running_containers,
    _send,
    describe_daemon,
)
from orchestrator.errors import DaemonNotRunning, EngineUnreachable
from orchestrator.home import Home
from orchestrator.service import client
from orchestrator.versions import RELEASE


@pytest.fixture
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "time", lambda: 10_000.5)


# --- describe_daemon ---------------------------------------------------------------


def test_describe_a_daemon_with_every_fact(fixed_clock: None) -> None:
    facts = {
        "release": "0.9.1",
        "pid": 123,
        "started": 9_400.0,
        "channels": {"http": "http://127.0.0.1:8787"},
    }
    assert describe_daemon(facts) == (
        "release 0.9.1, pid 123, up 10m, HTTP on http://127.0.0.1:8787"
    )


def test_describe_a_daemon_started_at_an_int_with_http_off(fixed_clock: None) -> None:
    facts = {"release": "0.9.1", "pid": 7, "started": 10_000, "channels": {"http": ""}}
    assert describe_daemon(facts) == "release 0.9.1, pid 7, up 0s, HTTP off"
    facts["channels"] = {}
    assert describe_daemon(facts) == "release 0.9.1, pid 7, up 0s, HTTP off"


def test_describe_a_daemon_without_facts_names_the_earliest_release() -> None:
    assert describe_daemon({}) == "release a release before 0.2.0, pid None"
    assert describe_daemon({"release": "", "pid": 5}) == "release a release before 0.2.0, pid 5"


def test_describe_ignores_a_start_that_is_no_number_and_channels_that_are_no_map() -> None:
    facts = {"release": "1.0.0", "pid": 9, "started": "yesterday", "channels": ["http"]}
    assert describe_daemon(facts) == "release 1.0.0, pid 9"


# --- _running_containers -----------------------------------------------------------


class Box:
    def __init__(self, name: str, running: bool) -> None:
        self.name = name
        self.running = running


class ListingBackend:
    def __init__(self, boxes: list[Box]) -> None:
        self.boxes = boxes
        self.asked: list[dict[str, str]] = []

    def list(self, labels: dict[str, str]) -> list[Box]:
        self.asked.append(labels)
        return self.boxes


def test_running_containers_are_the_homes_running_ones_sorted(
    obj: CliContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    import orchestrator.config
    import orchestrator.runtime

    config = object()
    loaded: list[Home] = []
    opened: list[tuple[Any, dict[str, Any]]] = []
    backend = ListingBackend([Box("orc-b", True), Box("orc-c", False), Box("orc-a", True)])

    def load(home: Home) -> object:
        loaded.append(home)
        return config

    def open_backend(got: object, **kwargs: Any) -> ListingBackend:
        opened.append((got, kwargs))
        return backend

    monkeypatch.setattr(orchestrator.config, "load_config", load)
    monkeypatch.setattr(orchestrator.runtime, "open_backend", open_backend)
    assert _running_containers(obj) == ["orc-a", "orc-b"]
    assert loaded == [obj.home]
    assert opened == [(config, {"timeout": 10, "home": obj.home})]
    assert backend.asked == [{"org.orchestrator.home": obj.home.identity}]


def test_running_containers_are_none_when_the_engine_is_away(
    obj: CliContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    import orchestrator.runtime

    def open_backend(*_args: Any, **_kwargs: Any) -> Any:
        raise EngineUnreachable("no engine")

    monkeypatch.setattr(orchestrator.runtime, "open_backend", open_backend)
    assert _running_containers(obj) == []


# --- the daemon --------------------------------------------------------------------


class Daemon:
    """Fakes of control_stream and control_request, each call recorded with the home it
    was for. control_stream yields ``frames`` when they are set, else answers a chat's
    line: "refused" is refused, "quiet" gets no reply, any other is echoed, then
    "later"; control_request gives ``answers`` in turn (an exception is raised)."""

    def __init__(self) -> None:
        self.frames: list[dict[str, Any]] | None = None
        self.answers: list[Any] = []
        self.sent: list[tuple[Home, dict[str, Any], dict[str, Any]]] = []
        self.asked: list[tuple[Any, ...]] = []

    def stream(self, home: Home, request: dict[str, Any], **kwargs: Any) -> Iterator[Any]:
        self.sent.append((home, dict(request), kwargs))
        if self.frames is not None:
            yield from self.frames
            return
        text = request["text"]
        if text == "refused":
            yield {"ok": False, "error": "group fam is paused", "hint": "wait", "exit": 4}
            return
        if text == "quiet":
            yield {"ok": True, "message": {"id": "q", "state": "done", "replies": []}}
            return
        yield {"reply": {"text": f"echo: {text}"}}
        replies = [f"echo: {text}", "later"]
        yield {"ok": True, "message": {"id": f"id-{text}", "state": "done", "replies": replies}}

    def request(self, home: Home, message: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        self.asked.append((home, dict(message), args, kwargs))
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


@pytest.fixture
def daemon(monkeypatch: pytest.MonkeyPatch) -> Daemon:
    fake = Daemon()
    monkeypatch.setattr(client, "control_stream", fake.stream)
    monkeypatch.setattr(client, "control_request", fake.request)
    return fake


# --- _send -------------------------------------------------------------------------


def test_send_streams_the_request_and_prints_replies_and_files(
    obj: CliContext, daemon: Daemon, capsys: pytest.CaptureFixture[str]
) -> None:
    daemon.frames = [
        {"reply": {"text": "one \x1b[31mred"}},
        {"reply": {"text": "two", "file": {"path": "out/\x1b]0;x.png"}}},
        {"reply": {"file": "not a map"}},
        {"ok": True, "message": {"id": "m1", "state": "done"}},
        {"ok": True, "message": {"id": "never"}},
    ]
    message = _send(obj, "fam", "hi", "kitchen", "alice", "t9", 12.5)
    assert message == {"id": "m1", "state": "done", "shown": 3}
    assert daemon.sent == [
        (
            obj.home,
            {
                "op": "send",
                "group": "fam",
                "text": "hi",
                "chat": "kitchen",
                "sender": "alice",
                "thread": "t9",
                "stream": True,
                "timeout": 12.5,
            },
            {"timeout": 42.5},
        )
    ]
    out = capsys.readouterr()
    assert out.out == "one \\e[31mred\ntwo\nfile: out/\\e]0;x.png\n\n"
    assert out.err == ""


def test_send_without_showing_replies_still_counts_them(
    obj: CliContext, daemon: Daemon, capsys: pytest.CaptureFixture[str]
) -> None:
    daemon.frames = [
        {"reply": {"text": "one", "file": {"path": "a.png"}}},
        {"reply": {"text": "two"}},
        {"ok": True, "message": {"id": "m2"}},
    ]
    message = _send(obj, "fam", "hi", "cli", "operator", None, 1.0, show_replies=False)
    assert message == {"id": "m2", "shown": 2}
    assert capsys.readouterr().out == ""


def test_send_reports_the_daemons_refusal_with_its_exit_code(
    obj: CliContext, daemon: Daemon, capsys: pytest.CaptureFixture[str]
) -> None:
    daemon.frames = [{"ok": False, "error": "no group named 'x'", "hint": "see groups", "exit": 2}]
    with pytest.raises(SystemExit) as stopped:
        _send(obj, "x", "hi", "cli", "operator", None, 1.0)
    assert stopped.value.code == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err == "error: no group named 'x'\nhint: see groups\n"


def test_send_reports_a_refusal_without_exit_code_as_a_failure_and_as_json(
    obj: CliContext, daemon: Daemon, capsys: pytest.CaptureFixture[str]
) -> None:
    daemon.frames = [{"reply": {"text": "partial"}}, {"ok": False, "error": "gone"}]
    with pytest.raises(SystemExit) as stopped:
        _send(obj, "fam", "hi", "cli", "operator", None, 1.0, show_replies=False, as_json=True)
    assert stopped.value.code == 1
    out = capsys.readouterr()
    assert json.loads(out.out) == {"error": "gone", "hint": None}
    assert out.err == ""


def test_send_with_a_stream_that_ends_without_an_answer_is_a_bug(
    obj: CliContext, daemon: Daemon
) -> None:
    daemon.frames = [{"reply": {"text": "one"}}]
    with pytest.raises(AssertionError, match=r"^unreachable$"):
        _send(obj, "fam", "hi", "cli", "operator", None, 1.0)


# --- _print_outcome ----------------------------------------------------------------


def test_outcome_prints_the_replies_not_shown_yet_with_their_files(
    capsys: pytest.CaptureFixture[str],
) -> None:
    message: dict[str, Any] = {
        "id": "m1",
        "state": "done",
        "replies": ["zero", "one \x1b[2J", "two"],
        "files": [{"reply": 0, "path": "a.png"}, {"reply": 2, "path": "c\x1b[1m.png"}],
        "shown": 1,
    }
    assert _print_outcome(message) == 0
    assert "shown" not in message
    out = capsys.readouterr()
    assert out.out == "one \\e[2J\ntwo\nfile: c\\e[1m.png\n"
    assert out.err == ""


def test_outcome_prints_every_reply_when_none_was_shown(
    capsys: pytest.CaptureFixture[str],
) -> None:
    message: dict[str, object] = {
        "id": "m1",
        "state": "done",
        "replies": ["zero", "one"],
        "files": [{"reply": 0, "path": "a.png"}],
    }
    assert _print_outcome(message) == 0
    assert capsys.readouterr().out == "zero\nfile: a.png\none\n"
    odd: dict[str, object] = {"id": "m1", "state": "done", "replies": ["zero"], "shown": "1"}
    assert _print_outcome(odd) == 0
    assert capsys.readouterr().out == "zero\n"


def test_outcome_of_a_done_message_without_replies(capsys: pytest.CaptureFixture[str]) -> None:
    assert _print_outcome({"id": "m1", "state": "done"}) == 0
    assert _print_outcome({"id": "m1", "state": "done", "replies": ("x",), "files": "no"}) == 0
    assert _print_outcome({"id": "m1", "state": "done", "replies": [], "shown": 0}) == 0
    out = capsys.readouterr()
    assert out.out == "(no reply)\n(no reply)\n(no reply)\n"
    assert out.err == ""


def test_outcome_of_replies_all_shown_already_prints_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _print_outcome({"id": "m1", "state": "done", "replies": ["a", "b"], "shown": 2}) == 0
    assert capsys.readouterr().out == ""


def test_outcome_of_a_dead_letter(capsys: pytest.CaptureFixture[str]) -> None:
    message: dict[str, object] = {
        "id": "m7",
        "state": "dead",
        "error": "runner\ncrashed",
        "replies": ["half"],
    }
    assert _print_outcome(message) == 1
    out = capsys.readouterr()
    assert out.out == "half\n"
    assert out.err == (
        "error: message m7 could not be delivered: runner\\ncrashed\n"
        "hint: fix the cause, then: orchestrator retry m7\n"
    )


def test_outcome_of_a_message_not_answered_yet(capsys: pytest.CaptureFixture[str]) -> None:
    assert _print_outcome({"id": "m8", "state": "running"}) == 3
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err == (
        "note: message m8 is still running; its replies will be stored when it is "
        "answered (orchestrator message m8)\n"
    )


# --- _follow -----------------------------------------------------------------------


class Polls:
    """A stop event whose waits answer from a script (no time passes): False polls
    again, True stops."""

    def __init__(self, rounds: int) -> None:
        self.answers = [False] * rounds + [True]
        self.timeouts: list[Any] = []

    def wait(self, timeout: Any = None) -> bool:
        self.timeouts.append(timeout)
        return self.answers.pop(0)


def test_follow_prints_new_replies_of_tasks_until_each_run_finishes(
    obj: CliContext, daemon: Daemon, capsys: pytest.CaptureFixture[str]
) -> None:
    answers: list[Any] = [
        DaemonNotRunning("restarting"),
        OSError("socket gone"),
        {"runs": None},
        {"runs": [{"id": 7, "task": 3, "replies": ["hi \x1b[31m"], "state": "running"}]},
        {"runs": [{"id": 7, "task": 3, "replies": ["hi \x1b[31m", 5], "state": "done"}]},
        {
            "runs": [
                {"id": 7, "task": 3, "replies": ["hi", 5, "late"], "state": "done"},
                {"id": "8", "task": 4, "replies": None, "state": "queued"},
                {"id": "9", "task": 4, "replies": ["boom"], "state": "dead"},
            ]
        },
        {
            "runs": [
                {"id": "9", "task": 4, "replies": ["boom", "more"], "state": "dead"},
                {"id": "8", "task": 4, "replies": ["eight"], "state": "running"},
            ]
        },
        {},
    ]
    daemon.answers = answers
    stop = Polls(len(answers))
    _follow(obj, "fam", "kitchen", 123.5, stop, "alice> ")  # type: ignore[arg-type]
    assert answers == []
    assert stop.timeouts == [1.0] * 9
    assert (
        daemon.asked
        == [(obj.home, {"op": "follow", "group": "fam", "chat": "kitchen", "since": 123.5}, (), {})]
        * 8
    )
    out = capsys.readouterr()
    assert out.out == (
        "\r[task 3] hi \\e[31m\nalice> "
        "\r[task 3] 5\nalice> "
        "\r[task 4] boom\nalice> "
        "\r[task 4] eight\nalice> "
    )
    assert out.err == ""


def test_follow_without_a_prompt_prints_only_the_replies(
    obj: CliContext,
    daemon: Daemon,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    daemon.answers = [
        {"runs": [{"id": "1", "task": 2, "replies": ["a", "b"], "state": "running"}]},
        {"runs": [{"id": "1", "task": 2, "replies": ["a", "b"], "state": "running"}]},
    ]
    monkeypatch.setattr(cli_daemon, "FOLLOW_INTERVAL_SECONDS", 0.25)
    stop = Polls(2)
    _follow(obj, "fam", "cli-chat", 0.0, stop, "")  # type: ignore[arg-type]
    assert stop.timeouts == [0.25, 0.25, 0.25]
    assert capsys.readouterr().out == "\r[task 2] a\n\r[task 2] b\n"


def test_follow_lets_other_errors_through(obj: CliContext, daemon: Daemon) -> None:
    daemon.answers = [ValueError("bug")]
    with pytest.raises(ValueError, match=r"^bug$"):
        _follow(obj, "fam", "cli-chat", 0.0, Polls(1), "")  # type: ignore[arg-type]


def test_follow_stops_at_once_when_asked(obj: CliContext, daemon: Daemon) -> None:
    stop = Polls(0)
    _follow(obj, "fam", "cli-chat", 0.0, stop, "")  # type: ignore[arg-type]
    assert daemon.asked == [] and stop.timeouts == [1.0]


# --- _chat_loop --------------------------------------------------------------------


def sent_request(home: Home, text: str) -> tuple[Home, dict[str, Any], dict[str, Any]]:
    return (
        home,
        {
            "op": "send",
            "group": "fam",
            "text": text,
            "chat": "kitchen",
            "sender": "alice",
            "thread": None,
            "stream": True,
            "timeout": 300.0,
        },
        {"timeout": 330.0},
    )


class Chat:
    """The chat loop of group fam, chat kitchen, sender alice, run against the fake
    daemon on input piped in (a script's) or typed (a terminal's)."""

    def __init__(self, obj: CliContext, monkeypatch: pytest.MonkeyPatch) -> None:
        self.obj = obj
        self.monkeypatch = monkeypatch
        self.stdin = io.StringIO()
        self.prompts: list[str] = []

    def piped(self, text: str) -> None:
        """Runs the loop on standard input holding ``text`` (``stdin``: what it left)."""
        self.stdin = io.StringIO(text)
        self.monkeypatch.setattr(sys, "stdin", self.stdin)
        _chat_loop(self.obj, "fam", "kitchen", "alice", False)

    def typed(self, steps: list[Any]) -> None:
        """Runs the loop at a terminal whose ``input`` answers each of ``steps`` in turn
        (an exception is raised); ``prompts``: what it was given."""

        def answer(prompt: str = "") -> str:
            self.prompts.append(prompt)
            step = steps.pop(0)
            if isinstance(step, BaseException):
                raise step
            return str(step)

        self.monkeypatch.setattr("builtins.input", answer)
        _chat_loop(self.obj, "fam", "kitchen", "alice", True)


@pytest.fixture
def chat(obj: CliContext, daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> Chat:
    return Chat(obj, monkeypatch)


def test_chat_loop_reads_lines_until_the_input_ends(
    obj: CliContext, chat: Chat, daemon: Daemon, capsys: pytest.CaptureFixture[str]
) -> None:
    daemon.answers = [
        {"counts": {"queued": 2, "done": 5, "dead": 1}, "inflight": 3},
        {"counts": None},
    ]
    chat.piped("  hello  \n\n   \n/status\nquiet\n/status\nagain\n")
    assert daemon.sent == [
        sent_request(obj.home, "hello"),
        sent_request(obj.home, "quiet"),
        sent_request(obj.home, "again"),
    ]
    assert daemon.asked == [(obj.home, {"op": "status"}, (), {})] * 2
    out = capsys.readouterr()
    assert out.out == (
        "echo: hello\nlater\n"
        "queue: 2 queued, 3 in flight, 5 done, 1 dead\n"
        "(no reply)\n"
        "queue: 0 queued, 0 in flight, 0 done, 0 dead\n"
        "echo: again\nlater\n"
    )
    assert out.err == ""


def test_chat_loop_stops_at_exit(
    chat: Chat, daemon: Daemon, capsys: pytest.CaptureFixture[str]
) -> None:
    chat.piped("hi\n/exit\nnot sent\n")
    assert [request["text"] for _, request, _ in daemon.sent] == ["hi"]
    assert chat.stdin.readline() == "not sent\n"
    assert capsys.readouterr().out == "echo: hi\nlater\n"


def test_chat_loop_interactive_prompts_and_skips_bad_and_empty_lines(
    chat: Chat, daemon: Daemon, capsys: pytest.CaptureFixture[str]
) -> None:
    script: list[Any] = [
        "",
        UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
        " hi ",
        EOFError(),
        "never read",
    ]
    chat.typed(script)
    assert chat.prompts == ["alice> "] * 4
    assert script == ["never read"]
    assert [request["text"] for _, request, _ in daemon.sent] == ["hi"]
    out = capsys.readouterr()
    assert out.out == "echo: hi\nlater\n\n"
    assert out.err == "error: that line is not valid UTF-8 text; it was not sent\n"


def test_chat_loop_interactive_stops_at_exit(
    chat: Chat, daemon: Daemon, capsys: pytest.CaptureFixture[str]
) -> None:
    script = ["/exit", "never read"]
    chat.typed(script)
    assert script == ["never read"] and daemon.sent == []
    assert capsys.readouterr().out == ""


def test_chat_loop_interactive_goes_on_after_a_refused_line(
    chat: Chat, daemon: Daemon, capsys: pytest.CaptureFixture[str]
) -> None:
    chat.typed(["refused", "hi", EOFError()])
    assert [request["text"] for _, request, _ in daemon.sent] == ["refused", "hi"]
    out = capsys.readouterr()
    assert out.out == "echo: hi\nlater\n\n"
    assert out.err == "error: group fam is paused\nhint: wait\n"


def test_chat_loop_from_a_script_ends_at_a_refused_line_with_its_exit_code(
    chat: Chat, daemon: Daemon, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as ended:
        chat.piped("refused\nnot sent\n")
    assert ended.value.code == 4
    assert [request["text"] for _, request, _ in daemon.sent] == ["refused"]
    assert chat.stdin.readline() == "not sent\n"
    assert capsys.readouterr().err == "error: group fam is paused\nhint: wait\n"


# --- _line_editing -----------------------------------------------------------------


class Readline:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.calls: list[tuple[str, Any]] = []

    def read_history_file(self, path: Any) -> None:
        self.calls.append(("read", path))
        if self.fail:
            raise FileNotFoundError(path)

    def set_history_length(self, length: int) -> None:
        self.calls.append(("length", length))

    def write_history_file(self, path: Any) -> None:
        self.calls.append(("write", path))
        if self.fail:
            raise PermissionError(path)


def line_editing(obj: CliContext, monkeypatch: pytest.MonkeyPatch, readline: Any) -> list[Any]:
    import atexit

    registered: list[Any] = []
    monkeypatch.setitem(sys.modules, "readline", readline)
    monkeypatch.setattr(atexit, "register", registered.append)
    _line_editing(obj)
    return registered


@pytest.mark.parametrize("fail", [False, True])
def test_line_editing_keeps_a_history_in_state(
    obj: CliContext, monkeypatch: pytest.MonkeyPatch, fail: bool
) -> None:
    readline = Readline(fail)
    history = obj.home.state_dir / "chat-history"
    registered = line_editing(obj, monkeypatch, readline)
    assert readline.calls == [("read", history), ("length", 1000)]
    assert len(registered) == 1
    registered[0]()
    assert readline.calls == [("read", history), ("length", 1000), ("write", history)]


def test_line_editing_without_readline_is_plain_input(
    obj: CliContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert line_editing(obj, monkeypatch, None) == []


# --- the commands ------------------------------------------------------------------


def test_up_says_it_started_the_daemon_and_what_it_upgraded(
    run: Any, monkeypatch: pytest.MonkeyPatch, fixed_clock: None
) -> None:
    import orchestrator.service as service

    asked: list[tuple[Home, bool]] = []
    facts = {
        "release": RELEASE,
        "pid": 41,
        "started": 10_000,
        "upgrade": {
            "previous": "0.8.0",
            "release": RELEASE,
            "done": [{"what": "moved\nthe queue"}, {"what": "renamed x"}],
        },
    }

    def start(home: Home, debug: bool = False) -> service.UpResult:
        asked.append((home, debug))
        return service.UpResult(pid=41, started=True, facts=facts)

    monkeypatch.setattr(service, "up", start)
    result = run("up")
    assert result.exit_code == 0
    assert result.stdout == (
        f"orchestrator daemon running (release {RELEASE}, pid 41, up 0s)\n"
        f"upgraded this home from 0.8.0 to {RELEASE}:\n"
        "  moved\\nthe queue\n"
        "  renamed x\n"
        "see CHANGELOG.md for what an operator must know about each release\n"
    )
    assert [debug for _, debug in asked] == [False]
    assert json.loads(run("up", "--json").stdout) == {"pid": 41, "started": True, "daemon": facts}


def test_up_with_a_daemon_of_another_release_running_says_to_restart_it(
    run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import orchestrator.service as service

    facts = {"pid": 9, "upgrade": {"done": [{"what": "not shown: not started now"}]}}
    monkeypatch.setattr(service, "up", lambda home, debug=False: service.UpResult(9, False, facts))
    result = run("up")
    assert result.exit_code == 0
    assert result.stdout == (
        "a daemon already runs for this home (release a release before 0.2.0, pid 9)\n"
        f"it runs release a release before 0.2.0, this command {RELEASE}: restart it to "
        "upgrade (orchestrator down, then orchestrator up)\n"
    )
    facts["release"] = RELEASE
    assert run("up").stdout == f"a daemon already runs for this home (release {RELEASE}, pid 9)\n"


def test_down_stops_the_daemon_and_names_the_containers_left(
    run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import orchestrator.service as service

    outcomes = [
        service.DownResult(pid=None),
        service.DownResult(pid=77, steps=["drained", "exited"], forced=False),
    ]
    monkeypatch.setattr(service, "down", lambda home: outcomes.pop(0))
    monkeypatch.setattr(cli_daemon, "_running_containers", lambda obj: ["orc-a", "orc-b"])
    assert run("down").stdout == (
        "no daemon was running\n"
        "left running: orc-a, orc-b (they stop when idle; to stop them now: "
        "orchestrator down --all)\n"
    )
    assert json.loads(run("down", "--json").stdout) == {
        "pid": 77,
        "steps": ["drained", "exited"],
        "forced": False,
        "stopped_containers": [],
        "left_running": ["orc-a", "orc-b"],
    }


def test_down_all_stops_the_group_containers(run: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import orchestrator.cli.runtime as cli_runtime
    import orchestrator.service as service

    stopped: list[str] = []

    class Runtime:
        class backend:
            @staticmethod
            def stop(name: str) -> None:
                stopped.append(name)

    monkeypatch.setattr(service, "down", lambda home: service.DownResult(77, ["drained"]))
    monkeypatch.setattr(cli_daemon, "_running_containers", lambda obj: ["orc-a", "orc-b"])
    monkeypatch.setattr(cli_runtime, "open_runtime", lambda obj: Runtime())
    assert run("down", "--all").stdout == (
        "stopped daemon 77 (drained)\nstopped 2 group containers: orc-a, orc-b\n"
    )
    assert stopped == ["orc-a", "orc-b"]


@pytest.mark.parametrize(("state", "code"), [("done", 0), ("dead", 1), ("queued", 3)])
def test_send_json_prints_the_message_and_exits_by_its_state(
    run: Any, daemon: Daemon, state: str, code: int
) -> None:
    message = {"id": "m1", "state": state, "replies": ["hi"]}
    daemon.frames = [{"reply": {"text": "hi"}}, {"ok": True, "message": dict(message)}]
    result = run("send", "fam", "hello", "--json")
    assert result.exit_code == code
    assert json.loads(result.stdout) == message


def test_send_prints_the_outcome_and_exits_by_it(run: Any, daemon: Daemon) -> None:
    daemon.frames = [{"ok": True, "message": {"id": "m1", "state": "running", "replies": []}}]
    result = run("send", "fam", "hello", "--thread", "t1", "--timeout", "5")
    assert result.exit_code == 3 and result.stdout == ""
    assert daemon.sent[0][1]["thread"] == "t1" and daemon.sent[0][2] == {"timeout": 35.0}


def test_retry_queues_a_dead_letter_again(run: Any, daemon: Daemon) -> None:
    daemon.answers = [
        {"ok": True},
        {"ok": True},
        {"ok": False, "error": "no dead message m9", "hint": "see status"},
    ]
    assert run("retry", "m9").stdout == "message m9 queued again\n"
    assert json.loads(run("retry", "m9", "--json").stdout) == {"id": "m9", "state": "queued"}
    result = run("retry", "m9")
    assert result.exit_code == 1
    assert result.stderr == "error: no dead message m9\nhint: see status\n"
    assert [call[1] for call in daemon.asked] == [{"op": "retry", "id": "m9"}] * 3


def test_reload_names_the_channels_started_again_and_its_notes(
    run: Any, daemon: Daemon, home: Path
) -> None:
    daemon.answers = [
        {"ok": True, "channels_restarted": ["http", "telegram"], "notes": ["a", "b"]},
        {"ok": True},
        {"ok": False, "error": "bad yaml", "hint": None},
    ]
    config = Home(home).config_file
    assert run("reload").stdout == (
        f"reloaded {config} (channels started again: http, telegram)\nnote: a\nnote: b\n"
    )
    assert run("reload").stdout == f"reloaded {config} (channels started again: none)\n"
    result = run("reload")
    assert result.exit_code == 1 and result.stderr == "error: bad yaml\n"
    assert [call[1:] for call in daemon.asked] == [({"op": "reload"}, (), {"timeout": 30})] * 3


def test_chat_pings_the_daemon_then_talks_line_by_line(
    run: Any, daemon: Daemon, monkeypatch: pytest.MonkeyPatch, home: Path
) -> None:
    from orchestrator.groups import GroupStore
    from orchestrator.groups.config import GroupConfig

    GroupStore(Home(home)).add(GroupConfig(name="Fam"))
    monkeypatch.setattr(cli_daemon, "FOLLOW_INTERVAL_SECONDS", 3600.0)  # no task polls
    daemon.answers = [{"ok": True}]
    result = run("chat", "Fam", "--chat", "kitchen", "--sender", "alice", input="hi\n")
    assert result.exit_code == 0
    assert result.stdout == (
        "chatting with fam as 'alice' (chat 'kitchen'); /exit or Ctrl-D to leave\necho: hi\nlater\n"
    )
    assert daemon.asked == [(Home(home), {"op": "ping"}, (), {"timeout": 5})]
    assert daemon.sent == [sent_request(Home(home), "hi")]
