"""Groups on disk and the group CLI."""

from __future__ import annotations

import json
import string
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.errors import InvalidFolderName
from orchestrator.groups import folder_from_name, validate_folder_name
from orchestrator.limits import RESERVED_FOLDER_NAMES

VALID_FIRST = string.ascii_lowercase + string.digits
VALID_REST = VALID_FIRST + "-_"


@given(
    st.text(alphabet=VALID_FIRST, min_size=1, max_size=1), st.text(alphabet=VALID_REST, max_size=62)
)
def test_valid_folder_names_are_accepted(first: str, rest: str) -> None:
    name = first + rest
    if name in RESERVED_FOLDER_NAMES:
        return
    assert validate_folder_name(name) == name


@given(st.text(max_size=80))
def test_any_accepted_name_is_a_safe_single_path_component(name: str) -> None:
    try:
        validate_folder_name(name)
    except InvalidFolderName as exc:
        assert exc.hint
        return
    assert name.isascii() and name == name.lower()
    assert "/" not in name and not name.startswith(".") and 1 <= len(name) <= 63
    assert name not in RESERVED_FOLDER_NAMES


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ("..", "is a path"),
        ("a/b", "is a path"),
        (".hidden", "must start with"),
        ("Family", "uppercase"),
        ("famí", "non-ASCII"),
        ("a" * 64, "64 characters"),
        ("a b", "characters outside"),
        ("", "is a path"),
        ("state", "is reserved"),
        ("-x", "must start with"),
    ],
)
def test_bad_folder_names(bad: str, reason: str) -> None:
    with pytest.raises(InvalidFolderName) as info:
        validate_folder_name(bad)
    assert reason in info.value.message


@given(st.text(min_size=1, max_size=200))
def test_derived_folder_is_valid_or_refused(name: str) -> None:
    try:
        folder = folder_from_name(name)
    except InvalidFolderName:
        return
    assert validate_folder_name(folder) == folder


def test_folder_from_display_name() -> None:
    assert folder_from_name("Família Silva") == "familia-silva"
    assert folder_from_name("  ACME Support Bot! ") == "acme-support-bot"
    with pytest.raises(InvalidFolderName):
        folder_from_name("日本")


def test_add_list_show_remove(run, home: Path) -> None:  # type: ignore[no-untyped-def]
    result = run("group", "add", "Family Chat", "--creator", "alice", "--creator", "bob")
    assert result.exit_code == 0, result.output
    group_dir = home / "groups" / "family-chat"
    assert (group_dir / "group.yaml").is_file()
    assert (group_dir / "memory" / "index.md").is_file()
    assert (group_dir / "memory" / "system" / "definition.md").is_file()

    listed = json.loads(run("group", "list", "--json").stdout)
    assert listed == [
        {
            "folder": "family-chat",
            "path": str(group_dir),
            "valid": True,
            "name": "Family Chat",
            "provider": "offline",
            "problem": None,
        }
    ]

    shown = json.loads(run("group", "show", "family chat", "--json").stdout)
    assert shown["config"]["creators"] == ["alice", "bob"]
    assert shown["memory"]["files"] == 3
    assert shown["memory"]["bytes"] == sum(
        p.stat().st_size for p in (group_dir / "memory").rglob("*") if p.is_file()
    )

    again = run("group", "add", "Family Chat")
    assert again.exit_code == 2 and "already exists" in again.stderr

    removed = run("group", "remove", "family-chat")
    assert removed.exit_code == 0
    assert not group_dir.exists()
    archived = list((home / "groups" / ".removed").iterdir())
    assert len(archived) == 1 and archived[0].name.startswith("family-chat-")
    assert (archived[0] / "memory" / "index.md").is_file()
    assert json.loads(run("group", "list", "--json").stdout) == []


def test_purge_asks_unless_yes(run, home: Path) -> None:  # type: ignore[no-untyped-def]
    run("group", "add", "Work", "--folder", "work")
    declined = run("group", "remove", "work", "--purge", input="n\n")
    assert declined.exit_code == 1
    assert (home / "groups/work").is_dir()
    purged = run("group", "remove", "work", "--purge", "--yes")
    assert purged.exit_code == 0
    assert not (home / "groups/work").exists()
    assert not (home / "groups/.removed").exists()


def test_list_marks_folders_without_a_valid_group_yaml(run, home: Path) -> None:  # type: ignore[no-untyped-def]
    run("group", "add", "Good")
    (home / "groups/no-config").mkdir()
    (home / "groups/broken").mkdir()
    (home / "groups/broken/group.yaml").write_text("name: [unclosed\n")
    (home / "groups/BadName").mkdir()
    result = run("group", "list")
    assert result.exit_code == 0
    lines = {line.split()[0]: line for line in result.stdout.splitlines()[1:]}
    assert "INVALID" in lines["no-config"] and "has no group.yaml" in lines["no-config"]
    assert "malformed YAML" in lines["broken"]
    assert "uppercase" in lines["BadName"]
    assert lines["good"].endswith("ok")


def test_add_rejects_bad_input_and_changes_nothing(run, home: Path) -> None:  # type: ignore[no-untyped-def]
    for args in (
        ["X", "--folder", "../evil"],
        ["X", "--folder", "state"],
        ["X", "--provider", "Bad Provider"],
        ["!!!"],
    ):
        result = run("group", "add", *args)
        assert result.exit_code == 2, (args, result.output)
        assert result.stderr.startswith("error: ")
    groups = home / "groups"
    assert not groups.exists() or list(groups.iterdir()) == []
    assert not (home.parent / "evil").exists()


def test_purge_removes_the_runtime_folder_too(run, home: Path) -> None:  # type: ignore[no-untyped-def]
    run("group", "add", "Fam")
    run_dir = home / "state/run/fam"
    run_dir.mkdir(parents=True)
    (run_dir / "left-over").write_text("x")
    (run_dir / "escape").symlink_to(home / "groups")  # never followed
    assert run("group", "remove", "fam", "--purge", "--yes").exit_code == 0
    assert not run_dir.exists() and (home / "groups").is_dir()


def test_a_failed_add_leaves_nothing_and_a_retry_works(run, home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import orchestrator.memory.scaffold as scaffold

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(scaffold, "scaffold_memory", broken)
    result = run("group", "add", "Fam")
    assert result.exit_code == 1 and not (home / "groups/fam").exists()
    monkeypatch.undo()
    assert run("group", "add", "Fam").exit_code == 0


def test_pause_and_resume_from_the_cli(run, home: Path) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.home import Home
    from orchestrator.store.messages import open_queue

    run("group", "add", "Fam")
    assert "paused fam until" in run("group", "pause", "fam", "--reason", "backup").stdout
    queue = open_queue(Home(home))
    assert [(p.holder, p.reason) for p in queue.pauses("fam")] == [("operator", "backup")]
    queue.close()
    bad = run("group", "pause", "fam", "--for", "soon")
    assert bad.exit_code == 2 and "not a duration" in bad.stderr
    assert run("group", "resume", "fam").stdout.strip() == "resumed fam"
    assert "was not paused" in run("group", "resume", "fam").stdout


def test_a_group_is_parsed_again_only_when_its_yaml_or_the_providers_change(
    home: Path,
) -> None:
    from orchestrator.errors import InvalidConfig
    from orchestrator.groups import GroupStore
    from orchestrator.groups.config import GroupConfig
    from orchestrator.home import Home

    store = GroupStore(Home(home))
    store.add(GroupConfig(name="fam", creators=("alice",)))
    first = store.load("fam")
    assert store.load("fam") is first  # unchanged: not parsed again
    text = first.config_file.read_text()
    # an edit of the same size within the same clock tick is still seen
    first.config_file.write_text(text.replace("alice", "bobby"))
    again = store.load("fam")
    assert again is not first and again.config.creators == ("bobby",)
    (home / "orchestrator.yaml").write_text("currency: EUR\n")  # the providers may differ
    assert store.load("fam") is not again
    first.config_file.write_text("name: [\n")
    with pytest.raises(InvalidConfig):
        store.load("fam")
    first.config_file.unlink()
    with pytest.raises(InvalidConfig, match=r"has no group\.yaml"):
        store.load("fam")


def test_another_process_reads_group_yaml_data_from_the_cache_by_its_bytes(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.errors import InvalidConfig
    from orchestrator.groups import GroupStore
    from orchestrator.groups import store as store_module
    from orchestrator.groups.config import GroupConfig
    from orchestrator.home import Home

    GroupStore(Home(home)).add(GroupConfig(name="fam", creators=("alice",)))
    first = GroupStore(Home(home)).listing()  # parses, and keeps the data
    assert (home / "state/cache/group-yaml.json").exists()
    parsed: list[Path] = []
    real = store_module.parse_yaml_bytes

    def counting(raw: bytes, path: Path):  # type: ignore[no-untyped-def]
        parsed.append(path)
        return real(raw, path)

    monkeypatch.setattr(store_module, "parse_yaml_bytes", counting)
    again = GroupStore(Home(home)).listing()  # a new process, so to speak
    assert parsed == [] and again[0].group is not None and first[0].group is not None
    assert again[0].group.config == first[0].group.config
    # a changed file is parsed, never served from the cache
    config_file = again[0].path / "group.yaml"
    config_file.write_text(config_file.read_text().replace("alice", "bobby"))
    assert GroupStore(Home(home)).load("fam").config.creators == ("bobby",)
    assert len(parsed) == 1
    # an invalid file is parsed in full: its error names the line
    config_file.write_text(config_file.read_text() + "unknown_key: 1\n")
    with pytest.raises(InvalidConfig, match=r"group\.yaml:\d+"):
        GroupStore(Home(home)).load("fam")


def test_the_yaml_cache_keeps_only_what_json_gives_back_unchanged(tmp_path: Path) -> None:
    from orchestrator.groups.parsed import MISSING, ParsedYaml

    cache = ParsedYaml(tmp_path)
    cache.put("a", b"x", {"name": "a", "n": 1, "f": 1.0, "on": True, "l": [1, "2"]})
    cache.put("b", b"y", {1: "an integer key"})  # JSON would make the key text
    import datetime

    cache.put("c", b"z", {"when": datetime.date(2026, 1, 1)})  # not JSON at all
    cache.save()
    again = ParsedYaml(tmp_path)
    assert again.get("a", b"x") == {"name": "a", "n": 1, "f": 1.0, "on": True, "l": [1, "2"]}
    assert again.get("a", b"changed") is MISSING
    assert again.get("b", b"y") is MISSING and again.get("c", b"z") is MISSING
    (tmp_path / "cache/group-yaml.json").write_text("{not json")
    assert ParsedYaml(tmp_path).get("a", b"x") is MISSING  # a broken cache is not used


def test_an_edit_of_group_yaml_writes_the_value_as_given(home: Path) -> None:
    # the value was a regular expression's replacement: \g<0> became the old line
    from orchestrator.groups import GroupStore
    from orchestrator.groups.config import GroupConfig, load_group_config, set_option
    from orchestrator.home import Home

    group = GroupStore(Home(home)).add(GroupConfig(name="fam"))
    set_option(group.config_file, "name", r"fam-\g<0>")
    assert load_group_config(group.config_file).name == r"fam-\g<0>"
    set_option(group.config_file, "container.disk", r"2GiB")
    assert "name: fam-\\g<0>\n" in group.config_file.read_text()
