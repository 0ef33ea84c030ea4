"""The SessionStart memory hook contract."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.limits import MEMORY_FILE_BUDGET_CHARS
from orchestrator.memory.reading import cap, render_memory
from orchestrator.memory.scaffold import scaffold_memory

BUDGET = MEMORY_FILE_BUDGET_CHARS


@pytest.fixture
def agent_dir(tmp_path: Path) -> Path:
    scaffold_memory(tmp_path)
    return tmp_path


def hook(agent_dir: Path | None, stdin: str, *args: str) -> subprocess.CompletedProcess[str]:
    extra = ["--agent-dir", str(agent_dir)] if agent_dir else []
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", "hook", "session-start", *extra, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.parametrize("source", ["startup", "clear", "compact"])
def test_fresh_sources_print_both_files(agent_dir: Path, source: str) -> None:
    out = hook(agent_dir, json.dumps({"source": source, "session_id": "s"}))
    assert out.returncode == 0
    text = out.stdout
    assert text.startswith("## Memory\n")
    assert "authoritative" in text and "OKF" in text and str(agent_dir / "memory") in text
    index = text.index("### memory/index.md\n")
    definition = text.index("### memory/system/definition.md\n")
    assert index < definition
    assert "## Core Memory" in text[index:definition]
    assert "# How this memory works" in text[definition:]
    assert "system/index.md" not in text.replace("(system/index.md)", "")  # not loaded


@pytest.mark.parametrize(
    "stdin", ['{"source": "resume"}', '{"source": "other"}', "", "{bad", "[]", '{"source": 3}']
)
def test_resume_unknown_and_malformed_print_nothing(agent_dir: Path, stdin: str) -> None:
    out = hook(agent_dir, stdin)
    assert (out.returncode, out.stdout) == (0, "")


def test_agent_dir_from_the_event(agent_dir: Path) -> None:
    out = hook(None, json.dumps({"source": "startup", "agent_dir": str(agent_dir)}))
    assert "## Core Memory" in out.stdout


def test_exactly_the_budget_is_kept_with_non_ascii(agent_dir: Path) -> None:
    body = "é🙂" * (BUDGET // 2)  # exactly BUDGET characters, multi-byte in UTF-8
    (agent_dir / "memory/index.md").write_text("\n\n  " + body + "\n\n")
    text = render_memory(str(agent_dir))
    section = text.split("### memory/index.md\n\n", 1)[1].split("\n\n### memory/system", 1)[0]
    assert section == body  # stripped, not truncated: no notice
    (agent_dir / "memory/index.md").write_text(body + "Ω")
    text = render_memory(str(agent_dir))
    section = text.split("### memory/index.md\n\n", 1)[1].split("\n\n### memory/system", 1)[0]
    kept, notice = section.split("\n[truncated", 1)
    assert kept == body and len(kept) == BUDGET
    assert "memory/index.md" in notice and "Slim this file" in notice


def test_files_are_capped_independently(agent_dir: Path) -> None:
    (agent_dir / "memory/index.md").write_text("i" * (BUDGET + 10))
    (agent_dir / "memory/system/definition.md").write_text("d" * (BUDGET - 1))
    text = render_memory(str(agent_dir))
    assert "i" * BUDGET + "\n[truncated: memory/index.md" in text
    assert "d" * (BUDGET - 1) + "\n" in text
    assert text.count("[truncated") == 1


def test_cap_function() -> None:
    assert cap("  x  ", "index.md") == "x"
    assert cap("y" * (BUDGET + 1), "index.md").startswith("y" * BUDGET + "\n[truncated")


def test_missing_files_get_a_placeholder(tmp_path: Path) -> None:
    (tmp_path / "memory").mkdir()
    text = render_memory(str(tmp_path))
    assert "(memory/index.md is missing; nothing was loaded)" in text
    assert "(memory/system/definition.md is missing; nothing was loaded)" in text


def test_symlinks_are_never_read(agent_dir: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.md"
    secret.write_text("TOP SECRET")
    index = agent_dir / "memory/index.md"
    index.unlink()
    index.symlink_to(secret)
    inside = agent_dir / "memory/other.md"
    inside.write_text("inside but linked")
    definition = agent_dir / "memory/system/definition.md"
    definition.unlink()
    definition.symlink_to(inside)
    text = render_memory(str(agent_dir))
    assert "TOP SECRET" not in text and "inside but linked" not in text
    assert text.count("was refused: is a symlink, not a regular file; nothing was loaded") == 2


def test_a_fifo_is_refused_without_blocking(agent_dir: Path) -> None:
    index = agent_dir / "memory/index.md"
    index.unlink()
    os.mkfifo(index)  # nobody ever writes to it: an open without O_NONBLOCK would hang
    out = hook(agent_dir, json.dumps({"source": "startup"}))
    assert out.returncode == 0
    assert "(memory/index.md was refused: is a FIFO, not a regular file" in out.stdout
    assert "## Core Memory" not in out.stdout and "memory/system/definition.md" in out.stdout


def test_a_huge_sparse_file_is_read_only_up_to_the_budget(agent_dir: Path) -> None:
    index = agent_dir / "memory/index.md"
    with open(index, "r+b") as handle:
        handle.truncate(3 * 1024**3)  # 3 GB of holes: reading it whole would exhaust memory
    text = render_memory(str(agent_dir))
    assert "[truncated: memory/index.md is longer than 16,000 characters" in text
    assert len(text) < 40_000


def test_symlinked_system_folder_resolving_outside(agent_dir: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "definition.md").write_text("FOREIGN DOCTRINE")
    system = agent_dir / "memory/system"
    for child in system.iterdir():
        child.unlink()
    system.rmdir()
    system.symlink_to(outside)
    assert "FOREIGN DOCTRINE" not in render_memory(str(agent_dir))


def test_help_and_bad_argument(agent_dir: Path) -> None:
    assert "Usage: orchestrator hook session-start" in hook(None, "", "--help").stdout
    bad = hook(None, "", "--frobnicate")
    assert bad.returncode == 2 and "unexpected argument" in bad.stderr


def run_main(monkeypatch, capsys, stdin: str, *argv: str) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    """The hook's entry point in this process (the subprocess tests above run it whole)."""
    import io

    from orchestrator.agent import memory_hook

    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = memory_hook.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_whole_block_is_exact(tmp_path: Path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "memory/system").mkdir(parents=True)
    (tmp_path / "memory/index.md").write_text("\n  # Map\n\n- [a](a.md)\n\n")
    (tmp_path / "memory/system/definition.md").write_text("D" * (BUDGET + 1))
    event = json.dumps({"source": "compact", "agent_dir": "/ignored"})
    code, out, err = run_main(monkeypatch, capsys, event, f"--agent-dir={tmp_path}")
    assert (code, err) == (0, "")
    memory = tmp_path / "memory"
    assert out == (
        "## Memory\n\n"
        f"Your durable memory is a folder of plain Markdown files at {memory}/, an Open\n"
        "Knowledge Format (OKF) v0.1 bundle. The files on disk are authoritative: they are "
        "what\nyou know, people may edit them directly, and you may read and edit them with "
        "your file\ntools. Below are the map (index.md) and the memory doctrine "
        "(system/definition.md);\nlinks from the index lead to more detailed files, which you "
        "read when they become\nrelevant.\n\n"
        "### memory/index.md\n\n# Map\n\n- [a](a.md)\n\n"
        "### memory/system/definition.md\n\n" + "D" * BUDGET + "\n[truncated: memory/system/"
        "definition.md is longer than 16,000 characters and only its beginning was loaded. "
        "Slim this file: keep headlines and links here and move the detail into linked "
        "files.]\n"
    )


def test_the_agent_dir_comes_from_the_option_then_the_event_then_the_default(
    tmp_path: Path,
    monkeypatch,
    capsys,  # type: ignore[no-untyped-def]
) -> None:
    event = {"source": "startup", "agent_dir": str(tmp_path / "from-event")}
    _, out, _ = run_main(monkeypatch, capsys, json.dumps(event), "--agent-dir", str(tmp_path))
    assert f"files at {tmp_path / 'memory'}/," in out
    _, out, _ = run_main(monkeypatch, capsys, json.dumps(event))
    assert f"files at {tmp_path / 'from-event' / 'memory'}/," in out
    for given in ("", 5, None):
        _, out, _ = run_main(monkeypatch, capsys, json.dumps({**event, "agent_dir": given}))
        assert "files at /workspace/agent/memory/," in out
    assert out.count("(memory/index.md is missing; nothing was loaded)") == 1


def test_help_and_bad_arguments_in_process(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run_main(monkeypatch, capsys, "", "-h")
    assert code == 0 and out == (
        "Usage: orchestrator hook session-start [--agent-dir DIR]\n\n"
        "  Print the group's memory for a fresh context. Reads the SessionStart\n"
        '  event JSON on stdin: {"source": "startup|clear|compact|resume", ...}.\n'
        "  DIR defaults to the event's agent_dir, else /workspace/agent.\n"
    )
    assert run_main(monkeypatch, capsys, "", "--frobnicate") == (
        2,
        "",
        "error: unexpected argument '--frobnicate'\n",
    )
    # --agent-dir with no value is an unexpected argument, not a crash
    assert run_main(monkeypatch, capsys, "", "--agent-dir")[0] == 2
    for source in ("resume", "other"):
        event = json.dumps({"source": source})
        assert run_main(monkeypatch, capsys, event, "--agent-dir", "/x") == (0, "", "")


def test_an_unreadable_file_says_why(agent_dir: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.confined import ConfinedDir

    def fail(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(ConfinedDir, "read_bytes", fail)
    text = render_memory(str(agent_dir))
    assert "(memory/index.md is unreadable: Permission denied; nothing was loaded)" in text


def test_the_event_is_read_up_to_64_kib_and_must_be_an_object(
    tmp_path: Path,
    monkeypatch,
    capsys,  # type: ignore[no-untyped-def]
) -> None:
    (tmp_path / "memory").mkdir()
    event = '{"source": "startup"}'
    exact = event + " " * (65536 - len(event))  # the JSON ends at the limit: read whole
    assert run_main(monkeypatch, capsys, exact + "x", "--agent-dir", str(tmp_path))[1]
    longer = event + " " * 70_000 + "not json"  # what is past the limit is never read
    assert run_main(monkeypatch, capsys, longer, "--agent-dir", str(tmp_path))[1]
    for not_an_object in ("[]", '"startup"', "3"):
        assert run_main(monkeypatch, capsys, not_an_object, "--agent-dir", str(tmp_path)) == (
            0,
            "",
            "",
        )
    code, out, _ = run_main(monkeypatch, capsys, "", "--help")
    assert code == 0 and out.startswith("Usage: orchestrator hook session-start")
    odd = tmp_path / "a=b"
    (odd / "memory").mkdir(parents=True)
    _, out, _ = run_main(monkeypatch, capsys, event, f"--agent-dir={odd}")
    assert f"files at {odd / 'memory'}/," in out


def test_bytes_that_are_not_utf8_are_replaced_not_fatal(agent_dir: Path) -> None:
    (agent_dir / "memory/index.md").write_bytes(b"caf\xe9 \xff ok")
    text = render_memory(str(agent_dir))
    assert "caf\ufffd \ufffd ok" in text


def test_the_event_in_the_environment_prints_the_same_and_imports_no_parser(
    agent_dir: Path,
) -> None:
    """The runner sets the event's fields in the hook's environment: the hook then reads
    no JSON, and imports nothing heavy (json and re, dataclasses, pathlib, typing would
    be most of its start at every fresh context)."""
    import os

    by_stdin = hook(agent_dir, json.dumps({"source": "startup"})).stdout
    env = {**os.environ, "ORCHESTRATOR_HOOK_SOURCE": "startup"}
    env["ORCHESTRATOR_AGENT_DIR"] = str(agent_dir)
    probe = (
        "import sys\nfrom orchestrator.agent.memory_hook import main\nmain([])\n"
        "heavy = ('json', 're', 'dataclasses', 'pathlib', 'typing', 'inspect')\n"
        "print('IMPORTED', sorted(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", probe], input="", env=env, capture_output=True, text=True
    )
    printed, _, imported = out.stdout.rpartition("IMPORTED ")
    assert printed == by_stdin and "## Core Memory" in printed
    assert imported.strip() == "[]"
    # a source that is not fresh prints nothing, whatever stdin says
    env["ORCHESTRATOR_HOOK_SOURCE"] = "resume"
    quiet = subprocess.run(
        [sys.executable, "-m", "orchestrator", "hook", "session-start"],
        input=json.dumps({"source": "startup"}),
        env=env,
        capture_output=True,
        text=True,
    )
    assert (quiet.returncode, quiet.stdout) == (0, "")


def test_the_runner_gives_hooks_the_event_in_their_environment(tmp_path: Path) -> None:
    from orchestrator.agent.hooks import CommandHook, run_session_start

    script = "import os; print(os.environ['ORCHESTRATOR_HOOK_SOURCE'], os.environ['ORCHESTRATOR_AGENT_DIR'], os.environ['ORCHESTRATOR_SESSION_ID'])"  # noqa: E501
    hooks = [CommandHook("startup|clear", (sys.executable, "-c", script))]
    [said] = run_session_start(hooks, source="clear", session_id="s1", agent_dir=tmp_path)
    assert said == f"clear {tmp_path} s1"


def test_the_event_in_the_environment_is_read_before_stdin_in_this_process(
    agent_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same as the child-process test above, in this process: with the event's fields
    in the environment, the hook prints the memory of the environment's agent directory
    and never reads stdin (here an event that would print nothing)."""
    import io

    from orchestrator.agent.memory_hook import main, session_start_memory

    monkeypatch.setenv("ORCHESTRATOR_HOOK_SOURCE", "startup")
    monkeypatch.setenv("ORCHESTRATOR_AGENT_DIR", str(agent_dir))
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps({"source": "resume"})))
    assert main([]) == 0
    printed = capsys.readouterr().out
    assert printed == session_start_memory("startup", str(agent_dir))
    assert "## Core Memory" in printed
    assert sys.stdin.read() == '{"source": "resume"}'  # left unread
