"""The command line's shell, exactly: lazy commands, errors as one line and a hint (or
JSON), usage errors, exit codes, undecodable arguments and the console entry point."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
import pytest

import orchestrator.cli as shell
from orchestrator.cli import COMMANDS, LazyGroup, cli, main, report_error, undecodable_argument
from orchestrator.confined import UnsafePath
from orchestrator.errors import BadInput, OrchestratorError


class Refused(OrchestratorError):
    exit_code = 7


@click.command("boom")
@click.argument("kind")
def boom(kind: str) -> None:
    """Fail in the way named."""
    if kind == "orchestrator":
        raise Refused("it broke", hint="try again")
    if kind == "bare":
        raise BadInput("no hint here")
    if kind == "unsafe":
        raise UnsafePath("groups/fam/x", "a symlink")
    if kind == "click":
        raise click.ClickException("click said no")
    if kind == "abort":
        raise click.Abort()
    if kind == "code":
        raise SystemExit(5)
    click.echo("fine")


@pytest.fixture
def with_boom(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(COMMANDS, "boom", (__name__, "boom", "Fail on purpose."))


def run(home: Path, *args: str) -> Any:
    return cli.main(["--home", str(home), *args], prog_name="orchestrator", standalone_mode=False)


def test_commands_are_listed_sorted_and_loaded_by_name() -> None:
    group = LazyGroup()
    ctx = click.Context(group)
    assert group.list_commands(ctx) == sorted(COMMANDS)
    assert group.get_command(ctx, "nothing") is None
    command = group.get_command(ctx, "status")
    assert command is not None and command.name == "status"


def test_help_shows_each_command_with_its_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"], standalone_mode=False) == 0
    out = capsys.readouterr().out
    assert "\nCommands:\n" in out
    flat = " ".join(out.split())
    for name, (_, _, line) in COMMANDS.items():
        assert f" {name} {line}" in flat
    rows = out.split("Commands:\n")[1].splitlines()
    names = [row.split()[0] for row in rows if row.startswith("  ") and row[2] != " "]
    assert names == sorted(COMMANDS)


def test_an_orchestrator_error_is_one_line_and_its_hint(
    home: Path, with_boom: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(home, "boom", "orchestrator") == 7
    captured = capsys.readouterr()
    assert captured.err == "error: it broke\nhint: try again\n"
    assert captured.out == ""


def test_an_error_without_a_hint_is_one_line(
    home: Path, with_boom: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(home, "boom", "bare") == 2
    assert capsys.readouterr().err == "error: no hint here\n"


def test_debug_prints_the_traceback_first(
    home: Path, with_boom: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(home, "--debug", "boom", "orchestrator") == 7
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):")
    assert err.endswith("Refused: it broke\nerror: it broke\nhint: try again\n")


def test_without_debug_no_traceback(
    home: Path, with_boom: None, capsys: pytest.CaptureFixture[str]
) -> None:
    run(home, "boom", "orchestrator")
    assert "Traceback" not in capsys.readouterr().err


def test_an_unsafe_path_is_refused_in_one_line(
    home: Path, with_boom: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(home, "boom", "unsafe") == 1
    assert capsys.readouterr().err == (
        "error: refused: groups/fam/x: a symlink\n"
        "hint: a group's container may have changed its own folders; nothing was followed "
        "or written\n"
    )


def test_with_json_errors_are_json_on_stdout(
    home: Path, with_boom: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(home, "boom", "orchestrator", "--json") == 2  # --json is no option of boom
    assert json.loads(capsys.readouterr().out) == {
        "error": "No such option '--json'.",
        "hint": "see: orchestrator boom --help",
    }
    assert run(home, "boom", "orchestrator") == 7
    assert capsys.readouterr().out == ""  # without --json, nothing on stdout


def test_json_errors_of_the_command_itself(
    home: Path, with_boom: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    @click.command("jboom")
    @click.option("--json", "as_json", is_flag=True)
    @click.argument("kind")
    def jboom(as_json: bool, kind: str) -> None:
        boom.callback(kind)  # type: ignore[misc]

    monkeypatch.setitem(sys.modules[__name__].__dict__, "jboom", jboom)
    monkeypatch.setitem(COMMANDS, "jboom", (__name__, "jboom", "JSON errors."))
    assert run(home, "jboom", "--json", "orchestrator") == 7
    assert json.loads(capsys.readouterr().out) == {"error": "it broke", "hint": "try again"}
    assert run(home, "jboom", "--json", "unsafe") == 1
    assert json.loads(capsys.readouterr().out) == {
        "error": "refused: groups/fam/x: a symlink",
        "hint": "a group's container may have changed its own folders; nothing was "
        "followed or written",
    }
    assert run(home, "jboom", "--json", "click") == 1
    assert json.loads(capsys.readouterr().out) == {"error": "click said no", "hint": None}


def test_a_usage_error_is_one_line_and_the_help_to_see(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(home, "nosuch") == 2
    assert capsys.readouterr().err == (
        "error: No such command 'nosuch'.\nhint: see: orchestrator --help\n"
    )


def test_a_usage_error_without_a_context_names_orchestrator(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise click.UsageError("bad usage")

    monkeypatch.setattr(click.Group, "main", refuse)
    assert cli.main(["x"], standalone_mode=False) == 2
    assert capsys.readouterr().err == "error: bad usage\nhint: see: orchestrator --help\n"


def test_a_click_exception_has_no_hint_and_abort_says_aborted(
    home: Path, with_boom: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(home, "boom", "click") == 1
    assert capsys.readouterr().err == "error: click said no\n"
    assert run(home, "boom", "abort") == 1
    assert capsys.readouterr().err == "aborted\n"


def test_standalone_exits_with_the_code(
    home: Path, with_boom: None, capsys: pytest.CaptureFixture[str]
) -> None:
    for args, code in (
        (["boom", "fine"], 0),
        (["boom", "orchestrator"], 7),
        (["nosuch"], 2),
        (["boom", "click"], 1),
        (["boom", "abort"], 1),
    ):
        with pytest.raises(SystemExit) as caught:
            cli.main(["--home", str(home), *args])
        assert caught.value.code == code
    capsys.readouterr()


def test_arguments_default_to_the_command_line(
    home: Path, with_boom: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["orchestrator", "--home", str(home), "boom", "fine"])
    assert cli.main(standalone_mode=False) is None  # the command's own result
    assert capsys.readouterr().out == "fine\n"
    monkeypatch.setattr(sys, "argv", ["orchestrator", "boom", "orchestrator", "--json"])
    assert cli.main(standalone_mode=False) == 2
    assert json.loads(capsys.readouterr().out)["error"] == "No such option '--json'."


def test_a_result_that_is_not_a_code_is_returned_as_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(click.Group, "main", lambda *a, **k: "done")
    assert cli.main(["x"], standalone_mode=False) == "done"
    with pytest.raises(SystemExit) as caught:
        cli.main(["x"])
    assert caught.value.code == 0
    monkeypatch.setattr(click.Group, "main", lambda *a, **k: 3)
    with pytest.raises(SystemExit) as caught:
        cli.main(["x"])
    assert caught.value.code == 3


def test_report_error(capsys: pytest.CaptureFixture[str]) -> None:
    report_error("m", "h")
    assert capsys.readouterr() == ("", "error: m\nhint: h\n")
    report_error("m", None, as_json=True)
    assert capsys.readouterr() == ('{\n  "error": "m",\n  "hint": null\n}\n', "")


def test_version_while_resilient_parsing_prints_nothing() -> None:
    ctx = click.Context(cli, resilient_parsing=True)
    shell._print_version(ctx, click.Option(["--version"]), True)
    shell._print_version(click.Context(cli), click.Option(["--version"]), False)


def test_version_prints_and_exits(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(click.exceptions.Exit):
        shell._print_version(click.Context(cli), click.Option(["--version"]), True)
    assert capsys.readouterr().out.startswith("orchestrator, version ")


def test_the_home_defaults_to_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORCHESTRATOR_HOME", raising=False)
    with cli.make_context("orchestrator", ["--debug", "status"]) as ctx:
        assert ctx.obj is None
        cli.callback.__wrapped__(ctx, None, True)  # type: ignore[union-attr]
        assert ctx.obj.home.root == tmp_path and ctx.obj.debug is True


def test_undecodable_argument() -> None:
    assert undecodable_argument([]) is None
    assert undecodable_argument(["ok", "é"]) is None
    bad = b"ab\xffc".decode("utf-8", "surrogateescape")
    assert undecodable_argument(["ok", bad]) == (
        "argument 2 ('ab\\\\xffc') is not valid UTF-8 (bad byte at offset 3); pass UTF-8 text"
    )
    later = "é" + b"\xfe".decode("utf-8", "surrogateescape")
    assert undecodable_argument([later, bad]) == (
        "argument 1 ('é\\\\xfe') is not valid UTF-8 (bad byte at offset 3); pass UTF-8 text"
    )


class Stream:
    def __init__(self) -> None:
        self.calls: list[dict[str, str]] = []

    def reconfigure(self, **kwargs: str) -> None:
        self.calls.append(kwargs)

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


def test_main_escapes_the_output_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    out, err = Stream(), Stream()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(sys, "argv", ["orchestrator", "x"])
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(cli, "main", lambda **kwargs: seen.append(kwargs))
    main()
    assert out.calls == [{"errors": "backslashreplace"}]
    assert err.calls == [{"errors": "backslashreplace"}]
    assert seen == [{"prog_name": "orchestrator", "standalone_mode": True}]


def test_main_refuses_an_undecodable_argument(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = b"\xff".decode("utf-8", "surrogateescape")
    monkeypatch.setattr(sys, "argv", ["orchestrator", "group", bad])
    monkeypatch.setattr(cli, "main", lambda **kwargs: pytest.fail("ran"))
    with pytest.raises(SystemExit) as caught:
        main()
    assert caught.value.code == 2
    assert capsys.readouterr().err == (
        "error: argument 2 ('\\\\xff') is not valid UTF-8 (bad byte at offset 1); "
        "pass UTF-8 text\nhint: check the terminal's locale, or the bytes of the argument\n"
    )


def _raising(exc: BaseException) -> Any:
    def raise_it(**kwargs: Any) -> None:
        raise exc

    return raise_it


def test_main_passes_exits_and_turns_interrupts_and_crashes_into_codes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["orchestrator", "x"])
    monkeypatch.delenv("ORCHESTRATOR_DEBUG", raising=False)
    monkeypatch.setattr(cli, "main", _raising(SystemExit(4)))
    with pytest.raises(SystemExit) as caught:
        main()
    assert caught.value.code == 4
    monkeypatch.setattr(cli, "main", _raising(KeyboardInterrupt()))
    with pytest.raises(SystemExit) as caught:
        main()
    assert caught.value.code == 130
    assert capsys.readouterr().err == "interrupted\n"
    monkeypatch.setattr(cli, "main", _raising(ValueError("odd")))
    with pytest.raises(SystemExit) as caught:
        main()
    assert caught.value.code == 1
    assert capsys.readouterr().err == (
        "error: unexpected ValueError: odd\nhint: run again with --debug for the traceback\n"
    )


def test_main_with_debug_lets_a_crash_through(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "main", _raising(ValueError("odd")))
    monkeypatch.delenv("ORCHESTRATOR_DEBUG", raising=False)
    monkeypatch.setattr(sys, "argv", ["orchestrator", "--debug", "x"])
    with pytest.raises(ValueError, match="odd"):
        main()
    monkeypatch.setattr(sys, "argv", ["orchestrator", "x"])
    monkeypatch.setenv("ORCHESTRATOR_DEBUG", "1")
    with pytest.raises(ValueError, match="odd"):
        main()
    monkeypatch.setattr(sys, "argv", ["orchestrator", "x", "--debug"])
    monkeypatch.setenv("ORCHESTRATOR_DEBUG", "")
    with pytest.raises(ValueError, match="odd"):
        main()


def test_positional_arguments_reach_click(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"], "orch", standalone_mode=False) == 0
    assert capsys.readouterr().out.startswith("Usage: orch [OPTIONS] COMMAND [ARGS]...")


class PlainStream:
    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> int:
        self.text += text
        return len(text)

    def flush(self) -> None:
        pass


def test_main_runs_with_streams_that_cannot_be_reconfigured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "stdout", PlainStream())
    monkeypatch.setattr(sys, "stderr", PlainStream())
    monkeypatch.setattr(sys, "argv", ["orchestrator", "x"])
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(cli, "main", lambda **kwargs: seen.append(kwargs))
    main()
    assert seen == [{"prog_name": "orchestrator", "standalone_mode": True}]
