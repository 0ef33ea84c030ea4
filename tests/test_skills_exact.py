"""Skills word for word: a SKILL.md's frontmatter and body as parse and read_text take
them (orchestrator/skills/manifest.py), each refusal's message naming the key and the
value, the limits at their boundaries; and the catalog (orchestrator/skills/catalog.py):
the places a group sees, the listing, the mounts, install and remove with their
messages and hints."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from orchestrator.errors import BadInput
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
    assert m.split("---\na: 1\n---\nXylophone X\n") == ({"a": 1}, "Xylophone X\n")
    assert m.split("---\na: 1\n---\n\n  indented\n") == ({"a": 1}, "  indented\n")


def test_split_stops_at_the_first_closing_line() -> None:
    assert m.split("---\na: 1\n---\nb: 2\n---\n") == ({"a": 1}, "b: 2\n---\n")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "name: a\n",
        " ---\nname: a\n---\n",
        "--- \n---\n",
        "\n---\n---\n",
        "---X\n---\n",
        "---\t\n---\n",
    ],
)
def test_no_frontmatter_is_refused(text: str) -> None:
    with pytest.raises(ManifestError) as caught:
        m.split(text)
    assert str(caught.value) == (
        "no frontmatter: the file must begin with a line '---', then YAML with name "
        "and description, then a line '---'"
    )


@pytest.mark.parametrize(
    "text",
    [
        "---",
        "---\n",
        "---\nname: a\n",
        "---\nname: a\n----\n",
        "---\na: 1\n--- \nb\n",
        "---\na: 1\n---X\n",
        "---\na: 1\n---\t\n",
    ],
)
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


def opens_recorded(module: object, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The flags of each os.open the module makes."""
    flags: list[int] = []
    real = os.open

    def recording(path: object, how: int, *args: object) -> int:
        flags.append(how)
        return real(path, how, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(module.os, "open", recording)  # type: ignore[attr-defined]
    return flags


NEVER_BLOCKS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def test_read_text_does_not_block_on_a_fifo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fifo = tmp_path / "SKILL.md"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR)  # so that a blocking open would not hang the test
    try:
        flags = opens_recorded(m, monkeypatch)
        with pytest.raises(ManifestError) as caught:
            m.read_text(fifo)
    finally:
        os.close(writer)
    assert str(caught.value) == "is not a regular file"
    assert flags == [os.O_RDONLY | NEVER_BLOCKS]


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


# the catalog


def make(parent: Path, name: str, description: str = "Greets.", extra: str = "") -> Path:
    folder = parent / name
    (folder / "scripts").mkdir(parents=True)
    (folder / "SKILL.md").write_text(
        doc(f"name: {name}\ndescription: {description}\n{extra}", "Body\n")
    )
    script = folder / "scripts" / "run.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o755)
    (folder / "notes.txt").write_text("n" * 10)
    (folder / "notes.txt").chmod(0o600)
    return folder


@pytest.fixture
def builtin(tmp_path: Path) -> Path:
    root = tmp_path / "builtin"
    make(root, "notes", "Built in.", "host: true\n")
    return root


@pytest.fixture
def home_(tmp_path: Path) -> Home:
    return Home(tmp_path / "home")


def test_the_places_and_their_folders(home_: Home, builtin: Path) -> None:
    root = home_.root
    assert catalog.BUILT_IN, catalog.HOME == ("built-in", "home")
    assert (catalog.BUILT_IN, catalog.HOME, catalog.GROUP) == ("built-in", "home", "group")
    assert catalog.home_dir(home_) == root / "skills"
    assert catalog.group_dir(home_, "fam") == root / "skills-by-group" / "fam"
    assert catalog.places(home_, None, None) == [("home", root / "skills")]
    assert catalog.places(home_, "fam", builtin) == [
        ("built-in", builtin),
        ("home", root / "skills"),
        ("group", root / "skills-by-group" / "fam"),
    ]
    assert catalog.places(home_, None, builtin) == [
        ("built-in", builtin),
        ("home", root / "skills"),
    ]


def test_the_builtin_root_is_the_packages_skills_folder() -> None:
    import orchestrator

    expected = Path(orchestrator.__file__).resolve().parent.parent / "skills"
    assert catalog.builtin_root() == expected
    assert (expected / "migrate-memory" / "SKILL.md").is_file()


def test_the_builtin_root_is_none_without_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import orchestrator

    (tmp_path / "pkg" / "orchestrator").mkdir(parents=True)
    monkeypatch.setattr(
        orchestrator, "__file__", str(tmp_path / "pkg" / "orchestrator" / "__init__.py")
    )
    assert catalog.builtin_root() is None
    (tmp_path / "pkg" / "skills").write_text("a file, not a folder")
    assert catalog.builtin_root() is None


def test_names_in_lists_real_folders_with_a_valid_name(tmp_path: Path) -> None:
    root = tmp_path / "root"
    for name in ("b-skill", "a", ".install-a-1234", "Bad", "x--y"):
        (root / name).mkdir(parents=True)
    (root / "file").write_text("")
    (root / "link").symlink_to(root / "a")
    assert catalog.names_in(root) == ["a", "b-skill"]
    assert catalog.names_in(None) == []
    assert catalog.names_in(tmp_path / "nothing") == []
    assert catalog.names_in(root / "file") == []


def test_names_or_folders_lists_real_unhidden_folders(tmp_path: Path) -> None:
    root = tmp_path / "root"
    for name in ("zed", "Fam_1", ".hidden"):
        (root / name).mkdir(parents=True)
    (root / "file").write_text("")
    (root / "link").symlink_to(root / "zed")
    assert catalog.names_or_folders(root) == ["Fam_1", "zed"]
    assert catalog.names_or_folders(tmp_path / "nothing") == []
    assert catalog.names_or_folders(root / "file") == []


def test_visible_keeps_the_first_place_of_a_name(home_: Home, builtin: Path) -> None:
    make(home_.root / "skills", "notes")
    make(home_.root / "skills", "greet")
    make(home_.root / "skills-by-group" / "fam", "greet")
    make(home_.root / "skills-by-group" / "fam", "mine")
    make(home_.root / "skills-by-group" / "other", "theirs")
    got = catalog.visible(home_, "fam", builtin)
    assert got == {
        "notes": ("built-in", builtin / "notes"),
        "greet": ("home", home_.root / "skills" / "greet"),
        "mine": ("group", home_.root / "skills-by-group" / "fam" / "mine"),
    }
    assert list(got) == ["notes", "greet", "mine"]
    assert catalog.visible(home_, None, None) == {
        "greet": ("home", home_.root / "skills" / "greet"),
        "notes": ("home", home_.root / "skills" / "notes"),
    }


def test_skills_are_read_sorted_and_an_unreadable_one_says_why(home_: Home, builtin: Path) -> None:
    make(home_.root / "skills-by-group" / "fam", "broken")
    (home_.root / "skills-by-group" / "fam" / "broken" / "SKILL.md").write_text("no front\n")
    make(home_.root / "skills", "alpha", "Says\n  hello.")
    got = catalog.skills(home_, "fam", builtin)
    assert [s.name for s in got] == ["alpha", "broken", "notes"]
    alpha, broken, notes = got
    assert alpha.to_dict() == {
        "name": "alpha",
        "description": "Says hello.",
        "host": False,
        "runs_on": "container",
        "origin": "home",
        "path": str(home_.root / "skills" / "alpha" / "SKILL.md"),
    }
    assert broken.manifest is None
    assert broken.runs_on == "container"
    assert broken.to_dict() == {
        "name": "broken",
        "description": "(unreadable: SKILL.md: no frontmatter: the file must begin with a "
        "line '---', then YAML with name and description, then a line '---')",
        "host": False,
        "runs_on": "container",
        "origin": "group",
        "path": str(home_.root / "skills-by-group" / "fam" / "broken" / "SKILL.md"),
        "problem": "SKILL.md: no frontmatter: the file must begin with a line '---', then "
        "YAML with name and description, then a line '---'",
    }
    assert notes.runs_on == "host"
    assert notes.to_dict()["host"] is True
    assert notes.to_dict()["origin"] == "built-in"
    assert [s.name for s in catalog.skills(home_, None, builtin)] == ["alpha", "notes"]


def test_installed_in_groups_names_the_groups_with_their_own(home_: Home) -> None:
    assert catalog.installed_in_groups(home_, "greet") == []
    make(home_.root / "skills-by-group" / "zed", "greet")
    make(home_.root / "skills-by-group" / "fam", "greet")
    make(home_.root / "skills-by-group" / "other", "mine")
    (home_.root / "skills-by-group" / "plain").mkdir()
    (home_.root / "skills-by-group" / "plain" / "greet").write_text("a file")
    assert catalog.installed_in_groups(home_, "greet") == ["fam", "zed"]


def test_mounts_for_a_group(home_: Home, builtin: Path) -> None:
    assert catalog.mounts_for(home_, "fam", "all", builtin) is None
    assert catalog.mounts_for(home_, "fam", ["notes", "ghost"], builtin) is None
    make(home_.root / "skills-by-group" / "fam", "mine")
    make(home_.root / "skills", "greet")
    fam = home_.root / "skills-by-group" / "fam"
    assert catalog.mounts_for(home_, "fam", "all", builtin) == [
        ("notes", builtin / "notes"),
        ("greet", home_.root / "skills" / "greet"),
        ("mine", fam / "mine"),
    ]
    assert catalog.mounts_for(home_, "fam", ["mine", "ghost", "notes"], builtin) == [
        ("mine", fam / "mine"),
        ("ghost", builtin / "ghost"),
        ("notes", builtin / "notes"),
    ]
    assert catalog.mounts_for(home_, "fam", ["mine", "ghost"], None) == [("mine", fam / "mine")]
    assert catalog.mounts_for(home_, "fam", [], builtin) == []
    assert catalog.mounts_for(home_, "other", ("greet",), builtin) == [
        ("greet", home_.root / "skills" / "greet")
    ]


def test_clash_says_which_skill_would_share_the_name(home_: Home, builtin: Path) -> None:
    assert catalog.clash(home_, "notes", None, builtin) == "a built-in skill is named 'notes'"
    assert catalog.clash(home_, "notes", "fam", builtin) == "a built-in skill is named 'notes'"
    assert catalog.clash(home_, "notes", None, None) is None
    make(home_.root / "skills", "greet")
    assert catalog.clash(home_, "greet", "fam", builtin) == (
        "a skill named 'greet' is installed for every group"
    )
    make(home_.root / "skills-by-group" / "fam", "mine")
    make(home_.root / "skills-by-group" / "abc", "mine")
    assert catalog.clash(home_, "mine", None, builtin) == (
        "group(s) abc, fam have their own skill named 'mine'"
    )
    assert catalog.clash(home_, "mine", "fam", builtin) == (
        "group fam already has a skill named 'mine'"
    )
    assert catalog.clash(home_, "mine", "other", builtin) is None
    assert catalog.clash(home_, "new", None, builtin) is None


def test_install_home_wide_copies_every_file_with_its_mode(
    tmp_path: Path, home_: Home, builtin: Path
) -> None:
    source = make(tmp_path / "src", "greet")
    (source / "deep" / "er").mkdir(parents=True)
    (source / "deep" / "er" / "big.bin").write_bytes(bytes(range(256)) * 8193)
    done = catalog.install(home_, source, None, builtin)
    dest = home_.root / "skills" / "greet"
    assert done.path == dest
    assert done.origin == "home"
    assert done.checked.manifest.name == "greet"
    assert (dest / "deep" / "er" / "big.bin").read_bytes() == bytes(range(256)) * 8193
    assert (dest / "SKILL.md").read_text() == (source / "SKILL.md").read_text()
    modes = {
        relative: stat.S_IMODE(os.lstat(dest / relative).st_mode)
        for relative in (
            "",
            "scripts",
            "deep",
            "deep/er",
            "SKILL.md",
            "scripts/run.sh",
            "notes.txt",
        )
    }
    assert modes == {
        "": 0o755,
        "scripts": 0o755,
        "deep": 0o755,
        "deep/er": 0o755,
        "SKILL.md": 0o644,
        "scripts/run.sh": 0o755,
        "notes.txt": 0o644,
    }
    assert stat.S_IMODE(os.lstat(home_.root / "skills").st_mode) == 0o755
    assert sorted(p.name for p in (home_.root / "skills").iterdir()) == ["greet"]
    assert (home_.state_dir / "skills.lock").is_file()


def test_install_for_a_group(tmp_path: Path, home_: Home, builtin: Path) -> None:
    done = catalog.install(home_, make(tmp_path / "src", "greet"), "fam", builtin)
    assert done.path == home_.root / "skills-by-group" / "fam" / "greet"
    assert done.origin == "group"
    assert (done.path / "scripts" / "run.sh").read_text() == "#!/bin/sh\necho hi\n"


def test_a_clash_at_install_says_where_and_how_to_resolve(
    tmp_path: Path, home_: Home, builtin: Path
) -> None:
    with pytest.raises(BadInput) as caught:
        catalog.install(home_, make(tmp_path / "a", "notes"), None, builtin)
    assert caught.value.message == (
        "skill 'notes' is not installed for every group: a built-in skill is named 'notes'"
    )
    assert caught.value.hint == (
        "two skills a group sees cannot share a name; rename the skill (its folder and "
        "name:) or remove the other: orchestrator skill remove notes"
    )
    with pytest.raises(BadInput) as caught:
        catalog.install(home_, make(tmp_path / "b", "notes"), "fam", builtin)
    assert caught.value.message == (
        "skill 'notes' is not installed for group fam: a built-in skill is named 'notes'"
    )
    assert caught.value.hint is not None
    assert caught.value.hint.endswith("orchestrator skill remove notes")
    catalog.install(home_, make(tmp_path / "c", "greet"), "fam", builtin)
    with pytest.raises(BadInput) as caught:
        catalog.install(home_, make(tmp_path / "d", "greet"), "fam", builtin)
    assert caught.value.message == (
        "skill 'greet' is not installed for group fam: group fam already has a skill named 'greet'"
    )
    assert caught.value.hint is not None
    assert caught.value.hint.endswith("orchestrator skill remove greet --group fam")
    with pytest.raises(BadInput) as caught:
        catalog.install(home_, make(tmp_path / "e", "greet"), None, builtin)
    assert caught.value.hint is not None
    assert caught.value.hint.endswith("orchestrator skill remove greet")
    catalog.install(home_, make(tmp_path / "f", "hello"), None, builtin)
    with pytest.raises(BadInput) as caught:
        catalog.install(home_, make(tmp_path / "g", "hello"), "fam", builtin)
    assert caught.value.hint is not None
    assert caught.value.hint.endswith("orchestrator skill remove hello")


def test_install_refuses_a_destination_that_is_not_a_skill(
    tmp_path: Path, home_: Home, builtin: Path
) -> None:
    skills = home_.root / "skills"
    skills.mkdir(parents=True)
    (skills / "greet").write_text("a file in the way")
    with pytest.raises(BadInput) as caught:
        catalog.install(home_, make(tmp_path / "src", "greet"), None, builtin)
    assert (
        caught.value.message
        == f"{skills / 'greet'} exists but is not a skill; nothing was installed"
    )
    assert caught.value.hint == "move it away, then add the skill again"
    (skills / "greet").unlink()
    (skills / "greet").symlink_to(tmp_path / "nowhere")
    with pytest.raises(BadInput, match="exists but is not a skill"):
        catalog.install(home_, make(tmp_path / "src2", "greet"), None, builtin)
    assert sorted(p.name for p in skills.iterdir()) == ["greet"]


def test_install_refuses_a_source_changed_while_copied(
    tmp_path: Path, home_: Home, builtin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = make(tmp_path / "src", "greet")
    real_copy = catalog._copy

    def copy_and_add(src: Path, target: Path, files: object) -> None:
        real_copy(src, target, files)  # type: ignore[arg-type]
        (target / "extra.txt").write_text("added")

    monkeypatch.setattr(catalog, "_copy", copy_and_add)
    with pytest.raises(BadInput) as caught:
        catalog.install(home_, source, None, builtin)
    assert caught.value.message == f"{source} changed while it was copied; nothing was installed"
    assert caught.value.hint == "add it again once nothing writes to it"
    assert list((home_.root / "skills").iterdir()) == []


def test_install_refuses_a_source_whose_bytes_changed_while_copied(
    tmp_path: Path, home_: Home, builtin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = make(tmp_path / "src", "greet")
    real_copy = catalog._copy

    def copy_and_grow(src: Path, target: Path, files: object) -> None:
        real_copy(src, target, files)  # type: ignore[arg-type]
        with open(target / "notes.txt", "a") as handle:
            handle.write("more")

    monkeypatch.setattr(catalog, "_copy", copy_and_grow)
    with pytest.raises(BadInput, match="changed while it was copied"):
        catalog.install(home_, source, None, builtin)


def test_copy_refuses_a_file_turned_special_and_a_source_grown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "src"
    source.mkdir()
    os.mkfifo(source / "pipe")
    (tmp_path / "t1").mkdir()
    writer = os.open(source / "pipe", os.O_RDWR)  # a blocking open would not hang the test
    try:
        flags = opens_recorded(catalog, monkeypatch)
        with pytest.raises(BadInput) as caught:
            catalog._copy(source, tmp_path / "t1", ["pipe"])
    finally:
        os.close(writer)
    assert flags == [os.O_RDONLY | NEVER_BLOCKS]
    monkeypatch.undo()
    assert (
        caught.value.message == f"{source / 'pipe'} changed into a special file; nothing installed"
    )
    (source / "big").write_bytes(b"x" * 100)
    monkeypatch.setattr(catalog, "FOLDER_MAX_BYTES", 99)
    (tmp_path / "t2").mkdir()
    with pytest.raises(BadInput) as caught:
        catalog._copy(source, tmp_path / "t2", ["big"])
    assert caught.value.message == f"{source} grew while it was copied; nothing installed"
    monkeypatch.setattr(catalog, "FOLDER_MAX_BYTES", 100)
    (tmp_path / "t3").mkdir()
    catalog._copy(source, tmp_path / "t3", ["big"])
    assert (tmp_path / "t3" / "big").read_bytes() == b"x" * 100


def test_copy_reads_in_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "f").write_bytes(b"abcdefg")
    sizes: list[int] = []
    real_read = os.read

    def read(fd: int, size: int) -> bytes:
        sizes.append(size)
        return real_read(fd, size)

    monkeypatch.setattr(catalog, "COPY_CHUNK", 3)
    monkeypatch.setattr(catalog.os, "read", read)
    (tmp_path / "t").mkdir()
    catalog._copy(source, tmp_path / "t", ["f"])
    assert (tmp_path / "t" / "f").read_bytes() == b"abcdefg"
    assert sizes == [3, 3, 3, 3]
    assert catalog.COPY_CHUNK == 3
    monkeypatch.undo()
    assert catalog.COPY_CHUNK == 1024 * 1024


def test_remove_home_wide_and_for_a_group(tmp_path: Path, home_: Home, builtin: Path) -> None:
    catalog.install(home_, make(tmp_path / "a", "greet"), None, builtin)
    catalog.install(home_, make(tmp_path / "b", "mine"), "fam", builtin)
    assert catalog.remove(home_, "greet", None, builtin) == home_.root / "skills" / "greet"
    assert list((home_.root / "skills").iterdir()) == []
    fam = home_.root / "skills-by-group" / "fam"
    assert catalog.remove(home_, "mine", "fam", builtin) == fam / "mine"
    assert list(fam.iterdir()) == []


def test_remove_refusals_say_why_and_what_to_do(tmp_path: Path, home_: Home, builtin: Path) -> None:
    def refusal(
        name: str, folder: str | None, root: Path | None = builtin
    ) -> tuple[str, str | None]:
        with pytest.raises(BadInput) as caught:
            catalog.remove(home_, name, folder, root)
        return caught.value.message, caught.value.hint

    assert refusal("notes", None) == (
        "'notes' is a built-in skill; built-in skills cannot be removed",
        "leave it out of a group with skills: [names] in its group.yaml",
    )
    assert refusal("notes", "fam") == refusal("notes", None)
    assert refusal("notes", None, None) == (
        "no skill named 'notes' is installed for every group (home-wide)",
        "see: orchestrator skill list",
    )
    assert refusal("ghost", "fam") == (
        "no skill named 'ghost' is installed for group fam",
        "see: orchestrator skill list --group fam",
    )
    assert refusal("Bad--Name", None) == (
        "no skill named 'Bad--Name' is installed for every group (home-wide)",
        "see: orchestrator skill list",
    )
    catalog.install(home_, make(tmp_path / "a", "mine"), "zed", builtin)
    catalog.install(home_, make(tmp_path / "b", "mine"), "fam", builtin)
    assert refusal("mine", None) == (
        "no skill named 'mine' is installed for every group (home-wide)",
        "it is installed for group fam: add --group fam",
    )
    assert refusal("mine", "other") == (
        "no skill named 'mine' is installed for group other",
        "see: orchestrator skill list --group other",
    )


def test_copied_folders_are_0755_whatever_the_umask(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "a" / "b").mkdir(parents=True)
    (source / "a" / "b" / "f.txt").write_text("x")
    (tmp_path / "t").mkdir()
    old = os.umask(0)
    try:
        catalog._copy(source, tmp_path / "t", ["a/", "a/b/", "a/b/f.txt"])
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.lstat(tmp_path / "t" / "a").st_mode) == 0o755
    assert stat.S_IMODE(os.lstat(tmp_path / "t" / "a" / "b").st_mode) == 0o755
    assert stat.S_IMODE(os.lstat(tmp_path / "t" / "a" / "b" / "f.txt").st_mode) == 0o644


def test_two_skills_install_side_by_side(tmp_path: Path, home_: Home, builtin: Path) -> None:
    catalog.install(home_, make(tmp_path / "a", "one"), None, builtin)
    catalog.install(home_, make(tmp_path / "b", "two"), None, builtin)
    catalog.install(home_, make(tmp_path / "c", "three"), "fam", builtin)
    catalog.install(home_, make(tmp_path / "d", "four"), "fam", builtin)
    assert sorted(p.name for p in (home_.root / "skills").iterdir()) == ["one", "two"]
    fam = home_.root / "skills-by-group" / "fam"
    assert sorted(p.name for p in fam.iterdir()) == ["four", "three"]


def test_install_under_a_permissive_umask_makes_nothing_writable_by_others(
    tmp_path: Path, home_: Home, builtin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = make(tmp_path / "src", "greet")
    seen: list[int] = []
    real_copy = catalog._copy

    def copy(src: Path, target: Path, files: object) -> None:
        seen.append(stat.S_IMODE(os.lstat(target).st_mode))  # the staging folder
        real_copy(src, target, files)  # type: ignore[arg-type]

    monkeypatch.setattr(catalog, "_copy", copy)
    old = os.umask(0)
    try:
        done = catalog.install(home_, source, "fam", builtin)
    finally:
        os.umask(old)
    assert seen == [0o755]
    assert stat.S_IMODE(os.lstat(home_.root / "skills-by-group" / "fam").st_mode) == 0o755
    assert stat.S_IMODE(os.lstat(done.path).st_mode) == 0o755
    assert stat.S_IMODE(os.lstat(done.path / "scripts").st_mode) == 0o755


def test_a_failed_copy_reports_its_own_error(
    tmp_path: Path, home_: Home, builtin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def copy_fails(_src: Path, target: Path, _files: object) -> None:
        target.rmdir()  # the staging folder is gone: removing it again must not mask this
        raise BadInput("the copy failed")

    monkeypatch.setattr(catalog, "_copy", copy_fails)
    with pytest.raises(BadInput, match=r"^the copy failed$"):
        catalog.install(home_, make(tmp_path / "src", "greet"), None, builtin)
    assert list((home_.root / "skills").iterdir()) == []


@pytest.mark.parametrize(
    ("mode", "copied"),
    [
        (0o600, 0o644),
        (0o700, 0o755),
        (0o610, 0o755),
        (0o601, 0o755),
        (0o602, 0o644),
        (0o666, 0o644),
    ],
)
def test_a_copied_file_is_executable_when_any_exec_bit_is_set(
    tmp_path: Path, mode: int, copied: int
) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "f").write_text("x")
    (source / "f").chmod(mode)
    (tmp_path / "t").mkdir()
    catalog._copy(source, tmp_path / "t", ["f"])
    assert stat.S_IMODE(os.lstat(tmp_path / "t" / "f").st_mode) == copied


def test_read_text_reads_at_most_one_byte_past_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A huge SKILL.md is never read whole: one read of the limit and a byte."""
    path = tmp_path / "SKILL.md"
    path.write_bytes(b"x" * 70000)
    sizes: list[int | None] = []
    real_fdopen = os.fdopen

    class Recording:
        def __init__(self, handle: object) -> None:
            self.handle = handle

        def __enter__(self) -> Recording:
            return self

        def __exit__(self, *exc: object) -> None:
            self.handle.close()  # type: ignore[attr-defined]

        def fileno(self) -> int:
            return self.handle.fileno()  # type: ignore[attr-defined,no-any-return]

        def read(self, size: int | None = -1) -> bytes:
            sizes.append(size)
            return self.handle.read(size)  # type: ignore[attr-defined,no-any-return]

    monkeypatch.setattr(m.os, "fdopen", lambda fd, mode: Recording(real_fdopen(fd, mode)))
    with pytest.raises(ManifestError, match="is larger than 64 KiB"):
        m.read_text(path)
    assert sizes == [65537]
    sizes.clear()
    with pytest.raises(ManifestError, match="is larger than 1 KiB"):
        m.read_text(path, 1024)
    assert sizes == [1025]


def test_a_copied_file_is_created_new_with_its_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Created exclusively, never through a symlink, and with its final mode from the
    start (not only after fchmod), whatever the umask."""
    source = tmp_path / "src"
    source.mkdir()
    (source / "run.sh").write_text("x")
    (source / "run.sh").chmod(0o700)
    (source / "a.txt").write_text("y")
    (tmp_path / "t").mkdir()
    flags = opens_recorded(catalog, monkeypatch)
    monkeypatch.setattr(catalog.os, "fchmod", lambda fd, mode: None)
    old = os.umask(0)
    try:
        catalog._copy(source, tmp_path / "t", ["run.sh", "a.txt"])
    finally:
        os.umask(old)
    created = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    assert flags == [os.O_RDONLY | NEVER_BLOCKS, created, os.O_RDONLY | NEVER_BLOCKS, created]
    assert stat.S_IMODE(os.lstat(tmp_path / "t" / "run.sh").st_mode) == 0o755
    assert stat.S_IMODE(os.lstat(tmp_path / "t" / "a.txt").st_mode) == 0o644
