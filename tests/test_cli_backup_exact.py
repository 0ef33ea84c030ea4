"""Exact lines of ``orchestrator backup --verify`` (cli/backup.py): what an archive
holds described, entries left out listed up to a bound and counted past it, progress
lines made safe; the archive check is faked at its boundary."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.cli import backup as cli_backup
from orchestrator.cli.backup import SHOWN_SKIPPED, _describe, _left_out, _progress, _verify


def test_the_release_its_shape_and_counts_are_described() -> None:
    summary = {"messages": {"queued": 2, "done": 5}, "tasks": 3, "bindings": 1}
    assert _describe("1.2", {"queue": 4, "home": 2}, summary) == (
        "release 1.2 (queue 4, home 2); messages: 5 done, 2 queued; 3 tasks, 1 chat bindings"
    )
    assert _describe("1.2", {}, {}) == "release 1.2 ()"
    assert _describe("1.2", {"q": 1}, {"messages": None, "tasks": 0}) == (
        "release 1.2 (q 1); 0 tasks, None chat bindings"
    )


def test_entries_left_out_are_listed_up_to_the_bound(capsys: pytest.CaptureFixture[str]) -> None:
    _left_out([])
    assert capsys.readouterr().out == ""
    _left_out([("a\nb", "a fifo")])
    assert capsys.readouterr().out == (
        "  left out (1: not regular files or folders, never archived):\n    a\\nb (a fifo)\n"
    )
    skipped = [(f"n{i}", "socket") for i in range(SHOWN_SKIPPED + 2)]
    _left_out(skipped)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "  left out (12: not regular files or folders, never archived):"
    assert lines[1:-1] == [f"    n{i} (socket)" for i in range(SHOWN_SKIPPED)]
    assert lines[-1] == "    ... and 2 more (--json lists them all)"
    _left_out(skipped[:SHOWN_SKIPPED])
    assert len(capsys.readouterr().out.splitlines()) == SHOWN_SKIPPED + 1
    assert SHOWN_SKIPPED == 10


def test_progress_goes_to_stderr_on_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    _progress("copying\nx")
    out = capsys.readouterr()
    assert (out.out, out.err) == ("", "copying\\nx\n")


def _report(secrets: bool) -> Any:
    head = SimpleNamespace(
        created=86400 + 3600 + 120,
        source={"home": "/srv/h"},
        release="2.0",
        versions={"queue": 3},
        summary={},
        secrets=secrets,
    )
    manifest = SimpleNamespace(files=["f"] * 1234, bytes=1536, skipped=[("s", "a socket")])
    return SimpleNamespace(head=head, manifest=manifest, to_dict=lambda: {"ok": True})


def test_a_verified_archive_is_described(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import orchestrator.backup

    seen: list[Any] = []

    def verify(path: Path, progress: Any) -> Any:
        seen.append((path, progress))
        return _report(secrets=len(seen) == 1)

    monkeypatch.setattr(orchestrator.backup, "verify_backup", verify)
    archive = tmp_path / "a.tar"
    _verify(archive, as_json=False)
    assert seen == [(archive, cli_backup._progress)]
    assert capsys.readouterr().out.splitlines() == [
        f"{archive}: ok, taken 1970-01-02 01:02 UTC of /srv/h",
        "  release 2.0 (queue 3)",
        "  1,234 files, 1.5 KiB, every one matching its checksum; secrets included",
        "  left out (1: not regular files or folders, never archived):",
        "    s (a socket)",
    ]
    _verify(archive, as_json=False)
    assert "secrets not included" in capsys.readouterr().out
    _verify(archive, as_json=True)
    assert capsys.readouterr().out == '{\n  "ok": true\n}\n'


def test_a_home_not_named_is_shown_as_a_question_mark(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import orchestrator.backup

    report = _report(secrets=False)
    report.head.source = {}
    monkeypatch.setattr(orchestrator.backup, "verify_backup", lambda path, progress: report)
    _verify(tmp_path / "a.tar", as_json=False)
    assert capsys.readouterr().out.splitlines()[0].endswith("UTC of ?")
