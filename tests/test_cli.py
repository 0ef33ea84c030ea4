"""The CLI skeleton: help, version, exit codes, errors without tracebacks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from orchestrator import __version__
from orchestrator.cli import COMMANDS, cli


def test_version_names_the_release_and_the_formats_it_reads() -> None:
    from orchestrator.store.schema import LATEST
    from orchestrator.versions import (
        BACKUP_FORMAT_VERSION,
        CONFIG_FILE_VERSION,
        GROUP_FILE_VERSION,
        LAYOUT_VERSION,
        TRANSCRIPT_VERSION,
    )

    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert result.output.splitlines() == [
        f"orchestrator, version {__version__}",
        f"formats: state database schema {LATEST}, group.yaml {GROUP_FILE_VERSION}, "
        f"orchestrator.yaml {CONFIG_FILE_VERSION}, transcripts {TRANSCRIPT_VERSION}, "
        f"home layout {LAYOUT_VERSION}, backups {BACKUP_FORMAT_VERSION}",
    ]


def test_the_release_is_the_newest_of_the_changelog_and_every_release_names_a_commit() -> None:
    from orchestrator.versions import RELEASE
    from tests.changelog import releases

    found = releases()
    assert found[0].version == RELEASE
    assert found[0].commit is None  # this release's commit is named by the next one
    for older in found[1:]:
        assert older.commit is not None, older.version
        shown = subprocess.run(
            ["git", "cat-file", "-t", older.commit],
            capture_output=True, text=True, cwd=Path(__file__).parent.parent,
        )  # fmt: skip
        assert shown.stdout.strip() == "commit", (older.version, older.commit, shown.stderr)
        tree = subprocess.run(
            ["git", "show", f"{older.commit}:orchestrator/__init__.py"],
            capture_output=True, text=True, cwd=Path(__file__).parent.parent,
        )  # fmt: skip
        assert f'__version__ = "{older.version}"' in tree.stdout  # that commit is that release


def test_help_lists_every_command_group_with_one_line() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    for name, (_, _, line) in COMMANDS.items():
        assert f"{name}  " in result.output
        assert line in result.output
    assert "--home" in result.output


def test_every_command_has_help() -> None:
    for name in COMMANDS:
        result = CliRunner().invoke(cli, [name, "--help"])
        assert result.exit_code == 0, (name, result.output)
        assert "Usage:" in result.output


def test_unknown_command_is_bad_usage() -> None:
    result = CliRunner().invoke(cli, ["frobnicate"])
    assert result.exit_code == 2
    assert "No such command" in result.output


def test_help_does_not_import_the_docker_sdk() -> None:
    code = (
        "import sys\n"
        "from orchestrator.cli import main\n"
        "sys.argv = ['orchestrator', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "assert 'docker' not in sys.modules, 'docker imported'\n"
        "assert 'requests' not in sys.modules, 'requests imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_error_is_one_line_and_a_hint_without_traceback(run) -> None:  # type: ignore[no-untyped-def]
    result = run("group", "show", "nobody")
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith("error: no group named 'nobody'")
    assert lines[1].startswith("hint: ")
    assert "Traceback" not in result.output


def test_unexpected_error_is_one_line_via_main(tmp_path: Path) -> None:
    # A --home that is a file makes every path under it fail with an OS error.
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator", "--home", str(blocker / "sub"), "group", "add", "A"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("error: ")


def test_debug_shows_the_traceback(run, home: Path) -> None:  # type: ignore[no-untyped-def]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator",
            "--home",
            str(home),
            "--debug",
            "group",
            "show",
            "nobody",
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "Traceback" in result.stderr
    assert "error: no group named 'nobody'" in result.stderr


def test_doctor_reports_an_unreachable_engine_in_one_line(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    missing = home / "no-such-docker.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{missing}")
    result = CliRunner().invoke(cli, ["--home", str(home), "doctor"])
    assert result.exit_code == 1
    errors = result.stderr.strip().splitlines()
    engine_lines = [line for line in errors if line.startswith("error: engine:")]
    assert len(engine_lines) == 1
    assert f"DOCKER_HOST=unix://{missing}" in engine_lines[0]
    assert "no such socket" in engine_lines[0]
    # one line per failed check, nothing else on stderr
    assert all(line.startswith("error: ") for line in errors)


def test_doctor_json_when_engine_unreachable(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import json

    monkeypatch.setenv("DOCKER_HOST", f"unix://{home}/none.sock")
    result = CliRunner().invoke(cli, ["--home", str(home), "doctor", "--json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    status = {c["name"]: c["status"] for c in data["checks"]}
    assert status == {
        "home": "ok",
        "config": "ok",
        "queue": "ok",
        "disk (groups and state)": "ok",
        "disk limits": "ok",
        "groups": "ok",
        "engine": "fail",
        "agent image": "fail",
        "daemon": "warn",
    }


def test_image_build_with_unreachable_engine_names_the_socket(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("DOCKER_HOST", f"unix://{home}/none.sock")
    result = CliRunner().invoke(cli, ["--home", str(home), "image", "build"])
    assert result.exit_code == 1
    assert result.stderr.splitlines()[0] == (
        f"error: Docker engine unreachable at DOCKER_HOST=unix://{home}/none.sock: no such socket"
    )


def test_home_not_writable_is_one_clear_line(tmp_path: Path) -> None:
    import os

    if os.geteuid() == 0:
        # root writes anywhere; use a path under a regular file instead
        target = tmp_path / "file"
        target.write_text("")
        home = target / "home"
    else:
        home = tmp_path / "ro"
        home.mkdir(mode=0o500)
    result = CliRunner().invoke(cli, ["--home", str(home), "group", "add", "Family"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: cannot create ")
    assert "hint: pass --home DIR" in result.stderr


def test_a_wheel_built_from_a_source_only_dependency_is_recognized_by_its_name() -> None:
    """The image build builds a wheel for a dependency that publishes only its source
    (dkimpy), and checks that wheel by its file name: the name as wheels spell it."""
    from orchestrator.image.agent import _wheel_prefix

    assert _wheel_prefix("dkimpy>=1.1") == "dkimpy-"
    assert _wheel_prefix("discord.py>=2.4") == "discord_py-"
    assert _wheel_prefix("Some-Package[extra]==1") == "some_package-"
    assert _wheel_prefix("name ; python_version>'3'") == "name-"
