"""SessionStart hooks word for word: each refusal of a hooks configuration with the
entry and field it names, the defaults an entry takes, which sources a matcher takes
(the whole source, never a part of it), what a hook's process is given and how a
failing, silent or long one is handled, and where our own console script is found."""

from __future__ import annotations

import codecs
import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.agent import hooks
from orchestrator.agent.hooks import (
    BUILTIN_MEMORY_HOOK,
    SHIPPED_HOOKS,
    CommandHook,
    HookConfigError,
    load_hooks,
    run_session_start,
)


def _config(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "hooks.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _refusal(path: Path) -> str:
    with pytest.raises(HookConfigError) as caught:
        load_hooks(path)
    return str(caught.value)


# -- the configuration ------------------------------------------------------------------


def test_the_shipped_configuration_is_read_by_default() -> None:
    assert SHIPPED_HOOKS.name == "hooks.json"
    assert SHIPPED_HOOKS.parent == Path(hooks.__file__).parent
    assert load_hooks() == [
        CommandHook("startup|clear|compact", ("orchestrator", "hook", "session-start"), 10.0)
    ]
    assert load_hooks(None) == load_hooks(SHIPPED_HOOKS)
    assert load_hooks()[0].command == BUILTIN_MEMORY_HOOK


def test_an_entry_takes_the_default_matcher_and_timeout(tmp_path: Path) -> None:
    path = _config(tmp_path, {"SessionStart": [{"command": ["true"]}]})
    [hook] = load_hooks(path)
    assert hook == CommandHook("startup|clear|compact", ("true",), 10.0)
    assert CommandHook("x", ("true",)).timeout == 10.0


def test_entries_are_read_in_order_with_their_own_fields(tmp_path: Path) -> None:
    path = _config(
        tmp_path,
        {
            "SessionStart": [
                {"matcher": "clear", "command": ["a", "-x"], "timeout": 3},
                {"matcher": "compact", "command": ["b"], "timeout": 0.25},
            ]
        },
    )
    loaded = load_hooks(path)
    assert loaded == [
        CommandHook("clear", ("a", "-x"), 3.0),
        CommandHook("compact", ("b",), 0.25),
    ]
    assert type(loaded[0].timeout) is float and type(loaded[0].command) is tuple


def test_a_configuration_without_session_start_has_no_hooks(tmp_path: Path) -> None:
    assert load_hooks(_config(tmp_path, {})) == []
    assert load_hooks(_config(tmp_path, {"SessionStart": []})) == []
    assert load_hooks(_config(tmp_path, {"Other": [{"command": ["x"]}]})) == []


def test_a_configuration_in_non_ascii_utf8_is_read(tmp_path: Path) -> None:
    path = tmp_path / "hooks.json"
    path.write_bytes('{"SessionStart": [{"command": ["écho", "café"]}]}'.encode())
    assert load_hooks(path)[0].command == ("écho", "café")


def test_a_missing_or_broken_configuration_is_refused_naming_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "none.json"
    assert _refusal(missing) == (
        f"{missing}: cannot read hooks configuration: "
        f"[Errno 2] No such file or directory: '{missing}'"
    )
    broken = tmp_path / "broken.json"
    broken.write_text("{not json", encoding="utf-8")
    assert _refusal(broken) == (
        f"{broken}: cannot read hooks configuration: "
        "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"
    )
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'{"SessionStart": ["\xe9"]}')
    assert _refusal(latin).startswith(f"{latin}: cannot read hooks configuration: 'utf-8' codec")
    with pytest.raises(HookConfigError) as caught:
        load_hooks(missing)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


@pytest.mark.parametrize("data", [[], "x", 3, None, {"SessionStart": {}}, {"SessionStart": "a"}])
def test_session_start_must_be_a_list(tmp_path: Path, data: Any) -> None:
    path = _config(tmp_path, data)
    assert _refusal(path) == f"{path}: SessionStart must be a list"


def test_an_entry_must_be_an_object(tmp_path: Path) -> None:
    path = _config(tmp_path, {"SessionStart": [{"command": ["a"]}, ["b"]]})
    assert _refusal(path) == f"{path}: SessionStart[1]: must be an object"


@pytest.mark.parametrize(
    "command", [None, "echo hi", [], ["a", 3], [3], ["a", None], {"a": 1}], ids=repr
)
def test_a_command_must_be_a_non_empty_list_of_strings(tmp_path: Path, command: Any) -> None:
    entry = {} if command is None else {"command": command}
    path = _config(tmp_path, {"SessionStart": [{"command": ["ok"]}, entry]})
    assert _refusal(path) == f"{path}: SessionStart[1].command: must be a non-empty list of strings"


@pytest.mark.parametrize("matcher", ["(", "[a-", 5, None, ["startup"]], ids=repr)
def test_a_matcher_must_be_a_regular_expression(tmp_path: Path, matcher: Any) -> None:
    path = _config(tmp_path, {"SessionStart": [{"command": ["a"], "matcher": matcher}]})
    assert _refusal(path) == f"{path}: SessionStart[0].matcher: not a regular expression"


@pytest.mark.parametrize("timeout", [0, 0.0, -1, -0.5, True, False, "10", None, [1]], ids=repr)
def test_a_timeout_must_be_a_positive_number(tmp_path: Path, timeout: Any) -> None:
    path = _config(tmp_path, {"SessionStart": [{"command": ["a"], "timeout": timeout}]})
    assert (
        _refusal(path)
        == f"{path}: SessionStart[0].timeout: must be a positive number of seconds, at most 3600"
    )


@pytest.mark.parametrize(
    "timeout", ["NaN", "Infinity", "1e999", "-Infinity", "3600.001", "3601", "1" + "0" * 400]
)
def test_a_timeout_that_is_no_finite_number_is_refused_when_read(
    tmp_path: Path, timeout: str
) -> None:
    # JSON as Python reads it takes NaN and Infinity, and a process cannot be waited on
    # for 1e999 seconds: a hook with such a timeout would fail each fresh context's turn
    # when it ran, so it is refused with the file (a turn lasts at most an hour)
    path = tmp_path / "hooks.json"
    path.write_text(
        '{"SessionStart": [{"command": ["a"], "timeout": ' + timeout + "}]}", encoding="utf-8"
    )
    assert _refusal(path) == (
        f"{path}: SessionStart[0].timeout: must be a positive number of seconds, at most 3600"
    )


def test_timeouts_from_the_smallest_to_an_hour_are_taken(tmp_path: Path) -> None:
    path = _config(
        tmp_path,
        {
            "SessionStart": [
                {"command": ["a"], "timeout": 1},
                {"command": ["b"], "timeout": 1e-9},
                {"command": ["c"], "timeout": 3600},
                {"command": ["d"], "timeout": 3599.5},
            ]
        },
    )
    assert [h.timeout for h in load_hooks(path)] == [1.0, 1e-9, 3600.0, 3599.5]


# -- when a hook runs ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("startup", True),
        ("clear", True),
        ("compact", True),
        ("resume", False),
        ("", False),
        ("startupx", False),
        ("xstartup", False),
        ("start", False),
        ("Startup", False),
        ("compaction", False),
    ],
)
def test_the_shipped_matcher_takes_exactly_a_fresh_context(source: str, expected: bool) -> None:
    (shipped,) = load_hooks()
    assert shipped.matches(source) is expected


def _recording_run(
    monkeypatch: pytest.MonkeyPatch, result: Any = None
) -> list[tuple[Any, dict[str, Any]]]:
    calls: list[tuple[Any, dict[str, Any]]] = []

    def fake_run(args: Any, **kwargs: Any) -> Any:
        calls.append((args, kwargs))
        if isinstance(result, BaseException):
            raise result
        return result or subprocess.CompletedProcess(args, 0, "said\n", "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    return calls


def test_only_the_hooks_matching_the_source_run_in_their_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outputs = iter(["first\n", "second\n", "third\n"])

    def fake_run(args: Any, **kwargs: Any) -> Any:
        return subprocess.CompletedProcess(args, 0, next(outputs), "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    found = [
        CommandHook("startup", ("/bin/a",)),
        CommandHook("resume", ("/bin/b",)),
        CommandHook("clear|startup", ("/bin/c",)),
        CommandHook("start", ("/bin/d",)),
        CommandHook(".*", ("/bin/e",)),
    ]
    out = run_session_start(found, source="startup", session_id="s", agent_dir=tmp_path)
    assert out == ["first", "second", "third"]
    assert next(outputs, None) is None
    assert run_session_start([], source="startup", session_id="s", agent_dir=tmp_path) == []


def test_a_hook_process_is_given_the_event_on_stdin_and_in_its_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _recording_run(monkeypatch)
    monkeypatch.setenv("KEPT_FROM_HOST", "yes")
    hook = CommandHook("compact", ("/bin/hook", "--flag"), 2.5)
    out = run_session_start([hook], source="compact", session_id="s-9", agent_dir=tmp_path)
    assert out == ["said"]
    [(args, kwargs)] = calls
    assert args == ["/bin/hook", "--flag"]
    env = kwargs.pop("env")
    assert kwargs == {
        "input": json.dumps({"source": "compact", "session_id": "s-9", "agent_dir": str(tmp_path)}),
        "capture_output": True,
        "text": True,
        "timeout": 2.5,
        "errors": "replace",
    }
    assert env["ORCHESTRATOR_HOOK_SOURCE"] == "compact"
    assert env["ORCHESTRATOR_SESSION_ID"] == "s-9"
    assert env["ORCHESTRATOR_AGENT_DIR"] == str(tmp_path)
    assert env["KEPT_FROM_HOST"] == "yes"


def test_a_real_hook_reads_the_event_from_stdin_and_undecodable_output_is_replaced(
    tmp_path: Path,
) -> None:
    script = (
        "import sys, json; e = json.load(sys.stdin); "
        "sys.stdout.buffer.write(e['source'].encode() + b' \\xff')"
    )
    hook = CommandHook("clear", (sys.executable, "-c", script))
    assert run_session_start([hook], source="clear", session_id="s", agent_dir=tmp_path) == [
        "clear \ufffd"
    ]


def test_a_hook_that_times_out_is_logged_and_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _recording_run(monkeypatch, subprocess.TimeoutExpired(["/bin/slow"], 7.4))
    hook = CommandHook("startup", ("/bin/slow", "x"), 7.4)
    with caplog.at_level(logging.WARNING, logger="orchestrator.agent.hooks"):
        out = run_session_start([hook], source="startup", session_id="s", agent_dir=tmp_path)
    assert out == []
    assert caplog.messages == ["SessionStart hook /bin/slow timed out after 7s; skipped"]


def test_a_hook_that_cannot_start_is_logged_and_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing = tmp_path / "no-such-hook"
    hook = CommandHook("startup", (str(missing), "arg"))
    with caplog.at_level(logging.WARNING, logger="orchestrator.agent.hooks"):
        out = run_session_start([hook], source="startup", session_id="s", agent_dir=tmp_path)
    assert out == []
    assert caplog.messages == [
        f"SessionStart hook {missing} could not start "
        f"([Errno 2] No such file or directory: '{missing}'); skipped"
    ]


def test_a_hook_that_exits_non_zero_is_logged_with_its_stderr_and_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    stderr = "  " + "e" * 199 + "fg" + "\n"
    _recording_run(monkeypatch, subprocess.CompletedProcess(["x"], 1, "printed anyway\n", stderr))
    hook = CommandHook("startup", ("/bin/failing",))
    with caplog.at_level(logging.WARNING, logger="orchestrator.agent.hooks"):
        out = run_session_start([hook], source="startup", session_id="s", agent_dir=tmp_path)
    assert out == []
    assert caplog.messages == [
        "SessionStart hook /bin/failing exited 1; skipped: " + "e" * 199 + "f"
    ]


def test_a_hook_exiting_with_a_negative_status_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _recording_run(monkeypatch, subprocess.CompletedProcess(["x"], -9, "half\n", ""))
    with caplog.at_level(logging.WARNING, logger="orchestrator.agent.hooks"):
        out = run_session_start(
            [CommandHook("startup", ("/bin/k",))],
            source="startup",
            session_id="s",
            agent_dir=tmp_path,
        )
    assert out == []
    assert caplog.messages == ["SessionStart hook /bin/k exited -9; skipped: "]


def test_a_silent_hook_adds_nothing_and_output_is_cut_then_stripped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    printed = iter([" \n\t\n", "", "  a  \n", "x" * 63_999 + " " + "tail"])

    def fake_run(args: Any, **kwargs: Any) -> Any:
        return subprocess.CompletedProcess(args, 0, next(printed), "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    found = [CommandHook("startup", (f"/bin/h{i}",)) for i in range(4)]
    out = run_session_start(found, source="startup", session_id="s", agent_dir=tmp_path)
    assert out == ["a", "x" * 63_999]


def test_the_memory_hook_is_run_in_process_with_the_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import orchestrator.memory.reading as reading

    seen: list[tuple[str, str]] = []

    def fake(source: str, agent_dir: str) -> str:
        seen.append((source, agent_dir))
        return "\n  memory for " + source + "  \n"

    monkeypatch.setattr(reading, "session_start_memory", fake)
    _recording_run(monkeypatch, AssertionError("a process was started"))
    hook = CommandHook("startup|clear|compact", BUILTIN_MEMORY_HOOK)
    out = run_session_start([hook], source="clear", session_id="s", agent_dir=tmp_path)
    assert out == ["memory for clear"]
    assert seen == [("clear", str(tmp_path))]
    assert run_session_start([hook], source="resume", session_id="s", agent_dir=tmp_path) == []
    assert seen == [("clear", str(tmp_path))]


def test_a_longer_command_naming_orchestrator_is_a_process_not_the_memory_hook(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _recording_run(monkeypatch)
    monkeypatch.setattr("shutil.which", lambda name: "/usr/bin/" + name)
    hook = CommandHook("startup", (*BUILTIN_MEMORY_HOOK, "--more"))
    assert run_session_start([hook], source="startup", session_id="s", agent_dir=tmp_path) == [
        "said"
    ]
    assert calls[0][0] == ["orchestrator", "hook", "session-start", "--more"]


# -- where our console script is found ----------------------------------------------------


def test_our_console_script_is_found_beside_python_when_not_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "orchestrator").write_text("#!/bin/sh\n")
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python3"))
    monkeypatch.setattr("shutil.which", lambda name: None)
    resolve = hooks._resolve_command
    assert resolve(("orchestrator", "hook", "x")) == [str(tmp_path / "orchestrator"), "hook", "x"]
    assert resolve(("other", "a")) == ["other", "a"]
    monkeypatch.setattr("shutil.which", lambda name: "/usr/bin/" + name)
    assert resolve(("orchestrator", "hook")) == ["orchestrator", "hook"]


def test_without_a_script_beside_python_the_command_is_left_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python3"))
    monkeypatch.setattr("shutil.which", lambda name: None)
    assert hooks._resolve_command(("orchestrator", "a")) == ["orchestrator", "a"]


def test_which_is_asked_for_orchestrator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "orchestrator").write_text("#!/bin/sh\n")
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python3"))
    asked: list[str] = []
    monkeypatch.setattr("shutil.which", lambda name: asked.append(name))
    assert hooks._resolve_command(("orchestrator",)) == [str(tmp_path / "orchestrator")]
    assert asked == ["orchestrator"]


# -- the promise, through the runner ------------------------------------------------------


def test_a_hook_runs_once_for_each_fresh_context_and_never_on_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataclasses import replace

    from orchestrator.agent.runner import Runner
    from orchestrator.agent.settings import AgentSettings
    from orchestrator.memory.scaffold import scaffold_memory
    from orchestrator.protocol import TurnRequest

    agent = tmp_path / "agent"
    agent.mkdir()
    scaffold_memory(agent)
    (agent / "sessions").mkdir()
    (agent / "files").mkdir()
    settings = AgentSettings(agent_dir=agent, runtime_dir=tmp_path / "run")
    sources: list[str] = []

    def fake_run(args: Any, **kwargs: Any) -> Any:
        sources.append(json.loads(kwargs["input"])["source"])
        return subprocess.CompletedProcess(args, 0, "HOOK-SAID\n", "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    every = [CommandHook(".*", ("/bin/every",))]
    turns = iter(range(100))

    def say(r: Runner, text: str) -> Any:
        return r.handle(TurnRequest(turn_id=f"t{next(turns)}", chat="c1", text=text, sender="a"))

    r = Runner(replace(settings, context_budget_chars=14_000), hooks=every)
    assert say(r, "hello").fresh_context == "startup"
    assert sources == ["startup"]
    assert say(r, "hello again").fresh_context is None
    assert sources == ["startup"]
    restarted = Runner(replace(settings, context_budget_chars=14_000), hooks=every)
    assert say(restarted, "after a restart").fresh_context is None
    assert sources == ["startup"]
    compacted = say(restarted, "remember that the meeting is on Friday. " + "z" * 12_500)
    assert compacted.fresh_context == "compact"
    assert sources == ["startup", "compact"]
    assert say(restarted, "/clear").fresh_context == "clear"
    assert sources == ["startup", "compact", "clear"]
    assert say(restarted, "and on").fresh_context is None
    assert sources == ["startup", "compact", "clear"]


def test_the_configuration_is_read_as_utf8_whatever_the_locale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _config(tmp_path, {"SessionStart": []})
    asked: list[Any] = []
    real = Path.read_text

    def read_text(self: Path, *args: Any, **kwargs: Any) -> str:
        asked.append((args, kwargs))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", read_text)
    assert load_hooks(path) == []
    [(args, kwargs)] = asked
    assert args == () and codecs.lookup(kwargs.pop("encoding")).name == "utf-8"
    assert kwargs == {}


def test_a_failing_hook_does_not_stop_the_hooks_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import orchestrator.memory.reading as reading

    def broken(source: str, agent_dir: str) -> str:
        raise ValueError("bad memory")

    monkeypatch.setattr(reading, "session_start_memory", broken)
    results = iter(
        [
            subprocess.TimeoutExpired(["/bin/a"], 1),
            OSError("cannot start"),
            subprocess.CompletedProcess(["/bin/c"], 2, "", "no"),
            subprocess.CompletedProcess(["/bin/d"], 0, "last\n", ""),
        ]
    )

    def fake_run(args: Any, **kwargs: Any) -> Any:
        result = next(results)
        if isinstance(result, BaseException):
            raise result
        return result

    monkeypatch.setattr(subprocess, "run", fake_run)
    found = [
        CommandHook("startup", BUILTIN_MEMORY_HOOK),
        *(CommandHook("startup", (f"/bin/{n}",)) for n in "abcd"),
    ]
    assert run_session_start(found, source="startup", session_id="s", agent_dir=tmp_path) == [
        "last"
    ]
