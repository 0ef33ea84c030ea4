"""The agent's ``skill`` tool and the skills' list at a fresh context (agent/tools/skills.py)
word for word: the tool's spec, the skills it sees, what loading a skill and reading one
of its files return or refuse, the files listed (folders marked, cut in walk order), and
the prompt's block at its default cap, with what is left out logged and counted."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest

from orchestrator.agent.tools import Toolbox, ToolError
from orchestrator.agent.tools import skills as sk
from orchestrator.agent.tools.base import ToolSpec


def _skill(root: Path, name: str = "greet", description: str = "Greets a person.") -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(
        f"---\nname: {name}\ndescription: {description}\n---\nSay hello.\n"
    )
    return folder


def _head(root: Path) -> str:
    return (
        "## Skills\n\n"
        f"Skills are folders of instructions and scripts, read-only under {root}. When a "
        "request matches a skill's description, first call `skill` with its name: it "
        "returns the skill's instructions (SKILL.md) and its files; then follow them. "
        f"Run a skill's scripts with the shell (e.g. `bash {root}/NAME/script.sh`) when "
        "you have it, and read its other files with `skill` (name and file).\n\n"
    )


# the tool's spec and source


def test_the_skill_tools_spec_word_for_word() -> None:
    want = ToolSpec(
        "skill",
        "Load a skill by name: its instructions (SKILL.md) and the list of its files. With "
        "file, read one file of the skill instead (a path inside its folder, such as "
        "reference.md or scripts/run.py). Skills are read-only folders under "
        "/workspace/skills; run a skill's scripts with the shell, e.g. "
        "bash /workspace/skills/NAME/scripts/run.sh.",
        {
            "type": "object",
            "required": ["name"],
            "additionalProperties": False,
            "properties": {
                "name": {"type": "string", "description": "the skill's name"},
                "file": {"type": "string", "description": "a file of the skill to read"},
            },
        },
    )
    spec = sk.SPEC
    assert spec == want
    assert (sk.SKILLS, sk.SKILL_TOOL) == ("skills", "skill")
    assert (sk.PROMPT_MAX_CHARS, sk.LOAD_MAX_CHARS, sk.FILES_LISTED_MAX) == (8_000, 40_000, 200)


def test_a_source_made_without_a_root_looks_at_workspace_skills(tmp_path: Path) -> None:
    source = sk.SkillSource()
    assert source.root == Path("/workspace/skills")
    assert source.name == "skills"
    (tool,) = source.tools(Toolbox(tmp_path, sources=()))
    assert tool.spec is sk.SPEC
    assert tool.modes == frozenset({"turn"})


def test_no_skills_when_the_root_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "skills").write_text("not a folder")
    assert sk.SkillSource(tmp_path / "skills").names() == []


def test_a_file_with_a_valid_name_is_not_a_skill(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    _skill(root, "greet")
    (root / "notes").write_text("")
    assert sk.SkillSource(root).names() == ["greet"]
    with pytest.raises(ToolError) as refused:
        sk.SkillSource(root).folder("notes")
    assert str(refused.value) == "no skill named 'notes'; the skills here: greet"


def test_an_invalid_name_is_refused_even_when_its_folder_exists(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    _skill(root, "greet")
    (root / "a--b").mkdir()
    with pytest.raises(ToolError) as refused:
        sk.SkillSource(root).folder("a--b")
    assert str(refused.value) == "no skill named 'a--b'; the skills here: greet"


# loading a skill


def test_loading_a_skill_lists_folders_with_a_slash_and_calls_it_directly(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    folder = _skill(root)
    (folder / "scripts").mkdir()
    (folder / "scripts" / "run.sh").write_text("echo")
    (folder / "docs" / "deep").mkdir(parents=True)
    source = sk.SkillSource(root)
    box = Toolbox(tmp_path, sources=(source,))
    want = (
        f"Skill greet (folder {folder}, read-only)\n\nFiles:\n"
        "- SKILL.md\n- docs/\n- docs/deep/\n- scripts/\n- scripts/run.sh\n\n"
        "SKILL.md:\n---\nname: greet\ndescription: Greets a person.\n---\nSay hello.\n"
    )
    assert source._call(box, "greet") == want
    assert source._call(box, "greet", None) == want
    assert source._call(box, "greet", "") == want
    assert source._call(box, "greet", "SKILL.md") == want
    assert source._call(box, "greet", "./SKILL.md") == (folder / "SKILL.md").read_text()


def test_a_manifest_that_is_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    (root / "greet" / "SKILL.md").mkdir(parents=True)
    source = sk.SkillSource(root)
    with pytest.raises(ToolError) as refused:
        source._call(Toolbox(tmp_path, sources=()), "greet")
    assert str(refused.value) == "skill greet: SKILL.md is not a regular file"
    assert refused.value.__cause__ is None and refused.value.__suppress_context__


def test_a_large_manifest_is_refused_past_64_kib(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    folder = _skill(root)
    head = (folder / "SKILL.md").read_text()
    (folder / "SKILL.md").write_text(head + "x" * (64 * 1024 - len(head)))
    source = sk.SkillSource(root)
    box = Toolbox(tmp_path, sources=())
    loaded = source._call(box, "greet")
    assert loaded.endswith(
        "x" * (40_000 - len(head)) + f"\n[SKILL.md cut at 40000 of {64 * 1024} characters]"
    )
    (folder / "SKILL.md").write_text(head + "x" * (64 * 1024 - len(head) + 1))
    with pytest.raises(ToolError) as refused:
        source._call(box, "greet")
    assert str(refused.value) == "skill greet: SKILL.md is larger than 64 KiB; keep it at most that"


def test_the_manifest_cut_keeps_exactly_40000_characters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "skills"
    folder = _skill(root)
    (folder / "SKILL.md").write_text("0123456789abc")
    monkeypatch.setattr(sk, "LOAD_MAX_CHARS", 10)
    text = sk.SkillSource(root)._call(Toolbox(tmp_path, sources=()), "greet")
    assert text == (
        f"Skill greet (folder {folder}, read-only)\n\nFiles:\n- SKILL.md\n\n"
        "SKILL.md:\n0123456789\n[SKILL.md cut at 10 of 13 characters]"
    )


# reading one file


def test_reading_a_folder_of_the_skill_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    folder = _skill(root)
    (folder / "docs").mkdir()
    source = sk.SkillSource(root)
    box = Toolbox(tmp_path, sources=(source,))
    for file in ("docs", "docs/", f"{folder}/docs"):
        with pytest.raises(ToolError) as refused:
            box.call("skill", {"name": "greet", "file": file})
        assert str(refused.value) == f"{file}: is a folder; see the skill's files"


def test_a_path_climbing_out_and_back_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    folder = _skill(root)
    (folder / "ref.md").write_text("REF")
    box = Toolbox(tmp_path, sources=(sk.SkillSource(root),))
    for file in ("../greet/ref.md", "docs/../../greet/ref.md", ".."):
        with pytest.raises(ToolError) as refused:
            box.call("skill", {"name": "greet", "file": file})
        assert str(refused.value) == f"{file}: outside the skill's folder {folder}"
        assert refused.value.__cause__ is None and refused.value.__suppress_context__ is False
    assert box.call("skill", {"name": "greet", "file": "x/../ref.md"}) == "REF"


def test_an_absolute_path_elsewhere_is_refused_without_its_cause(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    folder = _skill(root)
    box = Toolbox(tmp_path, sources=(sk.SkillSource(root),))
    with pytest.raises(ToolError) as refused:
        box.call("skill", {"name": "greet", "file": "/etc/hostname"})
    assert str(refused.value) == f"/etc/hostname: not in the skill's folder {folder}"
    assert refused.value.__cause__ is None and refused.value.__suppress_context__
    with pytest.raises(ToolError) as missing:
        box.call("skill", {"name": "greet", "file": "none.md"})
    assert str(missing.value) == "none.md: no such file in the skill; see its files"
    assert missing.value.__cause__ is None and missing.value.__suppress_context__


def test_a_refused_path_is_shown_safely(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    _skill(root)
    box = Toolbox(tmp_path, sources=(sk.SkillSource(root),))
    with pytest.raises(ToolError) as refused:
        box.call("skill", {"name": "greet", "file": "a\x00b"})
    assert str(refused.value) == (
        "file 'a\\\\u{0000}b': refused: the path contains the control character U+0000"
    )


def test_a_read_file_descriptor_is_closed(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    folder = _skill(root)
    (folder / "docs").mkdir()
    (folder / "ref.md").write_text("REF")
    os.mkfifo(folder / "pipe")
    box = Toolbox(tmp_path, sources=(sk.SkillSource(root),))
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(3):
        for file in ("docs", "pipe"):
            with pytest.raises(ToolError):
                box.call("skill", {"name": "greet", "file": file})
        assert box.call("skill", {"name": "greet", "file": "ref.md"}) == "REF"
    assert len(os.listdir("/proc/self/fd")) == before


def test_a_read_file_is_cut_at_the_limit_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "skills"
    folder = _skill(root)
    box = Toolbox(tmp_path, sources=(sk.SkillSource(root),))
    monkeypatch.setattr(sk, "TOOL_READ_MAX_CHARS", 3)
    (folder / "f").write_bytes(b"abc")
    assert box.call("skill", {"name": "greet", "file": "f"}) == "abc"
    (folder / "f").write_bytes(b"abcd")
    assert box.call("skill", {"name": "greet", "file": "f"}) == "abc\n[cut at 3 characters]"
    # at most 4*3+1 bytes are read: 13 one-byte characters, still cut at 3
    (folder / "f").write_bytes(b"abcdefghijklmnopq")
    assert box.call("skill", {"name": "greet", "file": "f"}) == "abc\n[cut at 3 characters]"
    (folder / "f").write_bytes(b"\xff\xfe")
    assert box.call("skill", {"name": "greet", "file": "f"}) == "\ufffd\ufffd"


def test_a_read_asks_for_at_most_four_bytes_a_character_and_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "skills"
    folder = _skill(root)
    (folder / "f").write_bytes(b"a" * 100)
    box = Toolbox(tmp_path, sources=(sk.SkillSource(root),))
    asked: list[object] = []
    fdopen = os.fdopen

    class Handle:
        def __init__(self, handle: Any) -> None:
            self.handle = handle

        def __enter__(self) -> Handle:
            return self

        def __exit__(self, *exc: object) -> None:
            self.handle.close()

        def read(self, size: Any = -1) -> bytes:
            asked.append(size)
            return bytes(self.handle.read(size))

    monkeypatch.setattr(sk, "TOOL_READ_MAX_CHARS", 3)
    monkeypatch.setattr(os, "fdopen", lambda fd, mode: Handle(fdopen(fd, mode)))
    assert box.call("skill", {"name": "greet", "file": "f"}) == "aaa\n[cut at 3 characters]"
    assert asked == [13]


# the files listed


def test_the_files_listed_are_cut_in_walk_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "greet"
    for sub in ("b", "a", "c"):
        (folder / sub).mkdir(parents=True)
        (folder / sub / "x").write_text("")
    (folder / "top").write_text("")
    monkeypatch.setattr(sk, "FILES_LISTED_MAX", 5)
    # the folder's files first, then its folders, each folder walked in name order
    assert sk._files(folder) == "- a/\n- a/x\n- b/\n- c/\n- top\n- [2 more not listed]"
    monkeypatch.setattr(sk, "FILES_LISTED_MAX", 7)
    assert sk._files(folder) == "- a/\n- a/x\n- b/\n- b/x\n- c/\n- c/x\n- top"
    monkeypatch.setattr(sk, "FILES_LISTED_MAX", 6)
    assert sk._files(folder) == "- a/\n- a/x\n- b/\n- b/x\n- c/\n- top\n- [1 more not listed]"


def test_no_files_list_nothing(tmp_path: Path) -> None:
    assert sk._files(tmp_path) == ""


# the prompt's block


def test_the_prompt_at_its_default_cap(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    # each entry "- `s-NN`: " + 290 characters + a newline: 301 characters
    names = [f"s-{n:02d}" for n in range(40)]
    for name in names:
        _skill(root, name, "d" * 290)
    head = _head(root)
    entry = 300
    fits = (8_000 - 200 - len(head)) // (entry + 1)
    text = sk.skills_prompt(root)
    kept = "\n".join(f"- `{n}`: {'d' * 290}" for n in names[:fits])
    assert text == head + kept + (
        f"\n[{40 - fits} more skill(s) not listed here: the list is capped at 8000 "
        f"characters. Their folders are in {root}; `skill` loads any of them by name.]"
    )
    assert sk.skills_prompt(root, 8_000) == text


def test_the_prompt_keeps_a_last_entry_that_fills_the_cap_exactly(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    _skill(root, "aa")
    _skill(root, "bb", "d" * 300)
    head = _head(root)
    first, last = "- `aa`: Greets a person.", f"- `bb`: {'d' * 300}"
    whole = head + first + "\n" + last
    # the text's length counts a newline after the last entry too
    limit = len(whole) + 1
    assert sk.skills_prompt(root, limit) == whole
    assert sk.skills_prompt(root, limit - 1) == head + first + (
        f"\n[1 more skill(s) not listed here: the list is capped at {limit - 1} "
        f"characters. Their folders are in {root}; `skill` loads any of them by name.]"
    )
    # before the last, an entry keeps 200 characters free for the notice
    (root / "bb" / "SKILL.md").write_text("---\nname: bb\ndescription: Short.\n---\n")
    whole = head + first + "\n- `bb`: Short."
    room = len(head) + len(first) + 1 + 200
    assert sk.skills_prompt(root, room) == whole
    assert sk.skills_prompt(root, room - 1) == head + (
        f"\n[2 more skill(s) not listed here: the list is capped at {room - 1} "
        f"characters. Their folders are in {root}; `skill` loads any of them by name.]"
    )


def test_the_prompt_stops_at_the_first_entry_that_does_not_fit(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    _skill(root, "aa")
    _skill(root, "bb", "d" * 600)
    _skill(root, "cc")
    head = _head(root)
    first = "- `aa`: Greets a person."
    limit = len(head) + len(first) + 1 + 200 + 100
    assert sk.skills_prompt(root, limit) == head + first + (
        f"\n[2 more skill(s) not listed here: the list is capped at {limit} "
        f"characters. Their folders are in {root}; `skill` loads any of them by name.]"
    )


def test_the_prompt_shows_a_description_on_one_line(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    folder = root / "greet"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(
        "---\nname: greet\ndescription: |\n  Greets\n    a   person.\n---\n"
    )
    assert sk.skills_prompt(root) == _head(root) + "- `greet`: Greets a person."


def test_a_skill_whose_manifest_cannot_be_read_is_logged_and_left_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "skills"
    _skill(root, "greet")
    wrong = root / "wrong"
    wrong.mkdir()
    (wrong / "SKILL.md").write_text("---\nname: other\ndescription: x\n---\n")
    with caplog.at_level(logging.WARNING, logger="orchestrator.agent.tools.skills"):
        text = sk.skills_prompt(root)
    assert text == _head(root) + "- `greet`: Greets a person."
    assert [(r.levelno, r.name, r.getMessage()) for r in caplog.records] == [
        (
            logging.WARNING,
            "orchestrator.agent.tools.skills",
            "skill wrong left out of the list: SKILL.md name: 'other' differs from its "
            "folder's name 'wrong'; they must be the same (rename the folder or the name)",
        )
    ]


def test_a_skill_whose_load_fails_with_an_os_error_is_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "skills"
    _skill(root, "greet")
    _skill(root, "zz")
    real = sk.load

    def load(folder: Path):  # type: ignore[no-untyped-def]
        if folder.name == "zz":
            raise OSError(5, "Input/output error")
        return real(folder)

    monkeypatch.setattr(sk, "load", load)
    with caplog.at_level(logging.WARNING, logger="orchestrator.agent.tools.skills"):
        assert sk.skills_prompt(root) == _head(root) + "- `greet`: Greets a person."
    assert [r.getMessage() for r in caplog.records] == [
        "skill zz left out of the list: SKILL.md [Errno 5] Input/output error"
    ]


def test_a_host_skill_is_marked_in_the_prompt(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    folder = root / "move"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text("---\nname: move\ndescription: Moves.\nhost: false\n---\n")
    assert sk.skills_prompt(root) == _head(root) + "- `move`: Moves."
    (folder / "SKILL.md").write_text("---\nname: move\ndescription: Moves.\nhost: true\n---\n")
    assert sk.skills_prompt(root) == (
        _head(root) + "- `move` (runs on the host: only the operator runs it): Moves."
    )
