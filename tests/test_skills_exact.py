"""Skills word for word: a SKILL.md's frontmatter and body as parse and read_text take
them (orchestrator/skills/manifest.py), each refusal's message naming the key and the
value, the limits at their boundaries; and the catalog (orchestrator/skills/catalog.py):
the places a group sees, the listing, the mounts, install and remove with their
messages and hints."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.home import Home
from orchestrator.skills import catalog
from orchestrator.skills import manifest as m
from orchestrator.skills.manifest import Manifest, ManifestError

RULE = (
    "1 to 64 lowercase letters, digits and hyphens, not starting or ending with a hyphen "
    "and without two hyphens in a row (e.g. pdf-tools)"
)


def doc(front: str, body: str = "") -> str:
    return f"---\n{front}---\n{body}"


def refused(text: str, folder_name: str | None = None) -> str:
    with pytest.raises(ManifestError) as caught:
        m.parse(text, folder_name)
    return str(caught.value)


# names


@pytest.mark.parametrize(
    "name",
    ["a", "0", "pdf-tools", "a-b-c", "a1-2b", "x" * 64, "a" + "-b" * 31 + "c"],
)
def test_a_valid_name(name: str) -> None:
    assert m.valid_name(name) is True


@pytest.mark.parametrize(
    "name",
    ["", "x" * 65, "-a", "a-", "a--b", "A", "a_b", "a b", "a.b", "é", "a\n", 5, None, ["a"]],
)
def test_an_invalid_name(name: object) -> None:
    assert m.valid_name(name) is False


def test_the_constants() -> None:
    assert m.MANIFEST == "SKILL.md"
    assert m.NAME_MAX_CHARS == 64
    assert m.NAME_RULE == RULE
    assert m.MANIFEST_MAX_BYTES == 65536
    assert m.DESCRIPTION_MAX_CHARS == 1024


# split


def test_split_gives_the_mapping_and_the_body_without_leading_blank_lines() -> None:
    front, body = m.split("---\nname: a\ndescription: d\n---\n\n\n# Title\n\ntext\n")
    assert front == {"name": "a", "description": "d"}
    assert body == "# Title\n\ntext\n"


def test_split_takes_crlf_lines_and_a_byte_order_mark() -> None:
    front, body = m.split("\ufeff---\r\nname: a\r\n---\r\nbody\r\n")
    assert front == {"name": "a"}
    assert body == "body\r\n"


def test_split_of_an_empty_frontmatter_is_an_empty_mapping() -> None:
    assert m.split("---\n---\nbody") == ({}, "body")
    assert m.split("---\n\n---\n") == ({}, "")
    assert m.split("---\n# only a comment\n---\nx\n---\ny") == ({}, "x\n---\ny")


def test_split_keeps_leading_spaces_of_the_body() -> None:
    assert m.split("---\na: 1\n---\n\n  indented\n") == ({"a": 1}, "  indented\n")


def test_split_stops_at_the_first_closing_line() -> None:
    assert m.split("---\na: 1\n---\nb: 2\n---\n") == ({"a": 1}, "b: 2\n---\n")


@pytest.mark.parametrize(
    "text", ["", "name: a\n", " ---\nname: a\n---\n", "--- \n---\n", "\n---\n---\n"]
)
def test_no_frontmatter_is_refused(text: str) -> None:
    with pytest.raises(ManifestError) as caught:
        m.split(text)
    assert str(caught.value) == (
        "no frontmatter: the file must begin with a line '---', then YAML with name "
        "and description, then a line '---'"
    )


@pytest.mark.parametrize("text", ["---", "---\n", "---\nname: a\n", "---\nname: a\n----\n"])
def test_an_unclosed_frontmatter_is_refused(text: str) -> None:
    with pytest.raises(ManifestError) as caught:
        m.split(text)
    assert str(caught.value) == "the frontmatter is not closed: add a line '---' after its YAML"


def test_invalid_yaml_names_its_line_and_problem() -> None:
    with pytest.raises(ManifestError) as caught:
        m.split("---\nname: a\ndescription: [1, 2\n---\n")
    assert str(caught.value) == (
        "the frontmatter is not valid YAML (frontmatter line 2): "
        "expected ',' or ']', but got '<stream end>'"
    )
    with pytest.raises(ManifestError) as caught:
        m.split("---\n\tname: a\n---\n")
    assert str(caught.value) == (
        "the frontmatter is not valid YAML (frontmatter line 1): "
        "found character '\\t' that cannot start any token"
    )


def test_a_yaml_error_without_a_mark_or_problem_still_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import yaml

    def bad(_text: str) -> object:
        raise yaml.YAMLError("boom")

    monkeypatch.setattr(yaml, "safe_load", bad)
    with pytest.raises(ManifestError) as caught:
        m.split("---\na: 1\n---\n")
    assert str(caught.value) == "the frontmatter is not valid YAML: not valid YAML"
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__ is True


def test_too_deep_yaml_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import yaml

    def deep(_text: str) -> object:
        raise RecursionError

    monkeypatch.setattr(yaml, "safe_load", deep)
    with pytest.raises(ManifestError) as caught:
        m.split("---\na: 1\n---\n")
    assert str(caught.value) == (
        "the frontmatter is not valid YAML: lists or mappings nested too deeply"
    )
    assert caught.value.__suppress_context__ is True


@pytest.mark.parametrize(
    ("front", "kind"), [("- a\n", "list"), ("just text\n", "str"), ("3\n", "int")]
)
def test_a_frontmatter_that_is_not_a_mapping_is_refused(front: str, kind: str) -> None:
    with pytest.raises(ManifestError) as caught:
        m.split(doc(front))
    assert str(caught.value) == (
        f"the frontmatter is {kind}, not a mapping; expected keys such as name: and description:"
    )


# parse


def test_parse_gives_every_field() -> None:
    text = doc("name: pdf-tools\ndescription: '  Reads\n  PDFs.  '\nhost: true\nx: 1\n", "\nBody\n")
    got = m.parse(text, "pdf-tools")
    assert got == Manifest(
        "pdf-tools",
        "Reads PDFs.",
        True,
        {"name": "pdf-tools", "description": "  Reads PDFs.  ", "host": True, "x": 1},
        "Body\n",
        text,
    )


def test_parse_defaults_host_to_false_and_needs_no_folder() -> None:
    got = m.parse(doc("name: a\ndescription: d\n"))
    assert got.host is False
    assert got.body == ""
    assert m.parse(doc("name: a\ndescription: d\nhost: false\n")).host is False


def test_the_summary_is_the_description_on_one_line() -> None:
    got = Manifest("a", "One\n  two\tthree \n four")
    assert got.summary == "One two three four"
    assert Manifest("a", "d").front == {}
    assert Manifest("a", "d").text == ""


def test_a_missing_name_is_refused() -> None:
    assert refused(doc("description: d\n")) == ("name: missing; expected the skill's name, " + RULE)
    assert refused(doc("name:\ndescription: d\n")) == (
        "name: missing; expected the skill's name, " + RULE
    )


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("Bad", "'Bad'"),
        ("a--b", "'a--b'"),
        ("5", "5"),
        ("[[[1]]]", "[[[...]]]"),
        ("[1,2,3,4,5,6,7,8,9]", "[1, 2, 3, 4, 5, 6, ...]"),
        ("{a: {b: {c: 1}}}", "{'a': {'b': {...}}}"),
        ("x" * 64 + "y", "'" + "x" * 64 + "y'"),
        (
            "x" * 300 + "Q",
            "'" + "x" * 97 + "..." + "x" * 97 + "Q'",
        ),
        ("9" * 50, "999999999999999999...9999999999999999999"),
        ("2020-01-01", "datetime.date(2020, 1, 1)"),
    ],
)
def test_a_wrong_name_is_refused_and_shown(value: str, shown: str) -> None:
    assert refused(doc(f"name: {value}\ndescription: d\n")) == f"name: got {shown}; expected {RULE}"


def test_a_name_that_differs_from_its_folder_is_refused() -> None:
    assert refused(doc("name: pdf\ndescription: d\n"), "pdf-tools") == (
        "name: 'pdf' differs from its folder's name 'pdf-tools'; they must be "
        "the same (rename the folder or the name)"
    )
    assert m.parse(doc("name: pdf\ndescription: d\n"), "pdf").name == "pdf"


def test_a_missing_description_is_refused() -> None:
    assert refused(doc("name: a\n")) == (
        "description: missing; expected a sentence saying what the skill does and when to use it"
    )


@pytest.mark.parametrize(
    ("value", "shown"), [("''", "''"), ("'   '", "'   '"), ("3", "3"), ("[a]", "['a']")]
)
def test_an_empty_or_wrong_description_is_refused(value: str, shown: str) -> None:
    assert refused(doc(f"name: a\ndescription: {value}\n")) == (
        f"description: got {shown}; expected non-empty text"
    )


def test_the_description_is_at_most_1024_characters() -> None:
    assert len(m.parse(doc(f"name: a\ndescription: {'d' * 1024}\n")).description) == 1024
    assert refused(doc(f"name: a\ndescription: {'d' * 1025}\n")) == (
        "description: 1025 characters; expected at most 1024"
    )


@pytest.mark.parametrize(
    ("value", "shown"),
    [("'yes please'", "'yes please'"), ("1", "1"), ("[1,2,[3,[4]]]", "[1, 2, [3, [...]]]")],
)
def test_host_must_be_a_boolean(value: str, shown: str) -> None:
    assert refused(doc(f"name: a\ndescription: d\nhost: {value}\n")) == (
        f"host: got {shown}; expected true or false"
    )


# read_text and load


def test_read_text_reads_utf8_up_to_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "SKILL.md"
    path.write_bytes("é".encode() * 10)
    assert m.read_text(path) == "é" * 10
    path.write_bytes(b"x" * 65536)
    assert m.read_text(path) == "x" * 65536
    path.write_bytes(b"x" * 65537)
    with pytest.raises(ManifestError) as caught:
        m.read_text(path)
    assert str(caught.value) == "is larger than 64 KiB; keep it at most that"
    path.write_bytes(b"x" * 2048)
    assert m.read_text(path, 2048) == "x" * 2048
    with pytest.raises(ManifestError) as caught:
        m.read_text(path, 2047)
    assert str(caught.value) == "is larger than 1 KiB; keep it at most that"


def test_read_text_refuses_what_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "SKILL.md"
    path.write_bytes(b"---\nab\xff\n")
    with pytest.raises(ManifestError) as caught:
        m.read_text(path)
    assert str(caught.value) == "is not UTF-8 text (byte 6); save it as UTF-8"
    assert caught.value.__suppress_context__ is True


def test_read_text_refuses_a_missing_file_a_symlink_and_a_folder(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as caught:
        m.read_text(tmp_path / "nothing.md")
    assert str(caught.value) == "missing: a skill is a folder with a SKILL.md"
    real = tmp_path / "real.md"
    real.write_text("---\n")
    link = tmp_path / "SKILL.md"
    link.symlink_to(real)
    with pytest.raises(ManifestError) as caught:
        m.read_text(link)
    assert str(caught.value) == (
        "cannot be read (Too many levels of symbolic links); expected a regular file"
    )
    with pytest.raises(ManifestError) as caught:
        m.read_text(tmp_path)
    assert str(caught.value) == "is not a regular file"


def test_read_text_does_not_block_on_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "SKILL.md"
    os.mkfifo(fifo)
    with pytest.raises(ManifestError) as caught:
        m.read_text(fifo)
    assert str(caught.value) == "is not a regular file"


def test_load_reads_the_folder_manifest_and_checks_its_name(tmp_path: Path) -> None:
    folder = tmp_path / "greet"
    folder.mkdir()
    (folder / "SKILL.md").write_text(doc("name: greet\ndescription: Greets.\n", "Hi\n"))
    got = m.load(folder)
    assert (got.name, got.description, got.body) == ("greet", "Greets.", "Hi\n")
    other = tmp_path / "other"
    folder.rename(other)
    with pytest.raises(ManifestError) as caught:
        m.load(other)
    assert "differs from its folder's name 'other'" in str(caught.value)


def test_a_skill_md_that_is_a_folder_is_refused_not_a_crash(tmp_path: Path) -> None:
    from orchestrator.skills.validate import SkillRefused, check_folder

    folder = tmp_path / "greet"
    (folder / "SKILL.md").mkdir(parents=True)
    with pytest.raises(ManifestError) as caught:
        m.read_text(folder / "SKILL.md")
    assert str(caught.value) == "is not a regular file"
    with pytest.raises(SkillRefused) as refusal:
        check_folder(folder)
    assert "SKILL.md: is not a regular file" in refusal.value.problems
    home = Home(tmp_path / "home")
    (home.root / "skills").mkdir(parents=True)
    folder.rename(home.root / "skills" / "greet")
    [listed] = catalog.skills(home, None, None)
    assert listed.description == "(unreadable: SKILL.md: is not a regular file)"
