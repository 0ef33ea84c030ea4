"""The group store and group disk use, exactly: every folder-name rule with its error
text, the names derived from display names, loading, finding, adding, removing and
restoring groups, and the disk figures and sentences of groups/disk.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.confined import Usage
from orchestrator.errors import GroupExists, GroupNotFound, InvalidConfig, InvalidFolderName
from orchestrator.groups import GroupStore, folder_from_name, memory_usage, validate_folder_name
from orchestrator.groups import store as store_module
from orchestrator.groups.config import GroupConfig
from orchestrator.groups.disk import (
    DISK_HOLDER,
    GROUP_DATA,
    FreeSpace,
    free_space,
    group_disk_usage,
    limit_mode,
    mount_options,
    over_limit_reason,
)
from orchestrator.groups.store import GroupListing
from orchestrator.home import Home
from tests.clocks import local_zone

RULE = "use 1-63 of a-z, 0-9, '-' and '_', starting with a letter or digit"
RESERVED_HINT = "reserved names: all, global, shared, skills, state, templates; pick another"


def refusal(folder: object) -> tuple[str, str | None]:
    with pytest.raises(InvalidFolderName) as info:
        validate_folder_name(folder)  # type: ignore[arg-type]
    return info.value.message, info.value.hint


@pytest.mark.parametrize(
    ("folder", "message"),
    [
        ("", "group folder '' is a path, not a folder name"),
        (".", "group folder '.' is a path, not a folder name"),
        ("..", "group folder '..' is a path, not a folder name"),
        ("a/b", "group folder 'a/b' is a path, not a folder name"),
        ("a\\b", "group folder 'a\\\\b' is a path, not a folder name"),
        ("/abs", "group folder '/abs' is a path, not a folder name"),
        ("...", "group folder '...' must start with a letter or digit"),
        (".git", "group folder '.git' must start with a letter or digit"),
        ("-x", "group folder '-x' must start with a letter or digit"),
        ("_x", "group folder '_x' must start with a letter or digit"),
        ("_X", "group folder '_X' must start with a letter or digit"),
        ("aB", "group folder 'aB' has uppercase letters"),
        ("Éa", "group folder 'Éa' has uppercase letters"),
        ("fé", "group folder 'fé' has non-ASCII characters"),
        ("a" * 64, "group folder '" + "a" * 64 + "' is 64 characters long (at most 63)"),
        ("a b", "group folder 'a b' has characters outside a-z, 0-9, '-' and '_'"),
        ("a\n", "group folder 'a\\n' has characters outside a-z, 0-9, '-' and '_'"),
        ("a.b", "group folder 'a.b' has characters outside a-z, 0-9, '-' and '_'"),
        (
            "a" * 62 + " ",
            "group folder '" + "a" * 62 + " ' has characters outside a-z, 0-9, '-' and '_'",
        ),
        ("a" * 63 + "!", "group folder '" + "a" * 63 + "!' is 64 characters long (at most 63)"),
    ],
)
def test_each_folder_name_rule_has_its_own_reason(folder: str, message: str) -> None:
    assert refusal(folder) == (message, RULE)


@pytest.mark.parametrize("folder", [None, 5, b"fam", ["fam"]])
def test_a_folder_name_that_is_not_text_is_refused(folder: object) -> None:
    assert refusal(folder) == (f"group folder {folder!r} is not text", RULE)


@pytest.mark.parametrize("folder", ["all", "global", "shared", "skills", "state", "templates"])
def test_reserved_folder_names_are_refused_with_the_whole_list(folder: str) -> None:
    assert refusal(folder) == (f"group folder {folder!r} is reserved", RESERVED_HINT)


@pytest.mark.parametrize(
    "folder", ["a", "0", "a" * 63, "a-b_c", "9lives", "states", "all-hands", "x-", "y_"]
)
def test_valid_folder_names_come_back_as_given(folder: str) -> None:
    assert validate_folder_name(folder) == folder


@pytest.mark.parametrize(
    ("name", "folder"),
    [
        ("Família Silva", "familia-silva"),
        ("  ACME -- Support!! ", "acme-support"),
        ("__a_b__", "a_b"),
        ("a__b", "a__b"),
        ("-_x_-", "x"),
        ("Ünïcödé Näme", "unicode-name"),
        ("ﬁle", "file"),  # NFKD splits the ligature
        ("a" * 70, "a" * 63),
        ("a" * 62 + " b", "a" * 62),  # cut at 63, then the trailing '-' goes
        ("a" * 61 + "_b", "a" * 61 + "_b"),
    ],
)
def test_folders_derived_from_display_names(name: str, folder: str) -> None:
    assert folder_from_name(name) == folder


@pytest.mark.parametrize("name", ["日本", "!!!", "", " - _ "])
def test_a_name_with_no_usable_letters_names_no_folder(name: str) -> None:
    with pytest.raises(InvalidFolderName) as info:
        folder_from_name(name)
    assert info.value.message == f"cannot derive a folder name from {name!r}"
    assert info.value.hint == "pass --folder with 1-63 of a-z, 0-9, '-' and '_'"


def test_a_derived_folder_that_is_reserved_is_refused() -> None:
    assert refusal("state") == ("group folder 'state' is reserved", RESERVED_HINT)
    with pytest.raises(InvalidFolderName) as info:
        folder_from_name("State")
    assert info.value.message == "group folder 'state' is reserved"


@pytest.fixture
def store(home: Path) -> GroupStore:
    return GroupStore(Home(home))


def test_a_group_knows_its_paths(store: GroupStore, home: Path) -> None:
    group = store.add(GroupConfig(name="Fam"))
    root = home / "groups" / "fam"
    assert (group.folder, group.path) == ("fam", root)
    assert group.memory_dir == root / "memory"
    assert group.sessions_dir == root / "sessions"
    assert group.files_dir == root / "files"
    assert group.instructions_file == root / "instructions.prepend.md"
    assert group.learned_file == root / "learned-behaviors.md"
    assert group.config_file == root / "group.yaml"
    assert group.instructions_file.read_bytes() == b""
    assert group.learned_file.read_bytes() == b""
    assert os.stat(root).st_mode & 0o777 == 0o755 & ~_umask()
    mask = os.umask(0)
    try:
        other = store.add(GroupConfig(name="other"))
    finally:
        os.umask(mask)
    assert os.stat(other.path).st_mode & 0o777 == 0o755
    assert store.path_of("fam") == root


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_listing_rows(store: GroupStore, home: Path) -> None:
    good = store.add(GroupConfig(name="Good Group"), folder="good")
    bad = GroupListing("bad", home / "groups/bad", None, "it is broken")
    assert bad.to_dict() == {
        "folder": "bad",
        "path": str(home / "groups/bad"),
        "valid": False,
        "name": None,
        "provider": None,
        "problem": "it is broken",
    }
    row = GroupListing("good", good.path, good, None).to_dict()
    assert row == {
        "folder": "good",
        "path": str(good.path),
        "valid": True,
        "name": "Good Group",
        "provider": "offline",
        "problem": None,
    }


def test_memory_usage_counts_the_memory_tree_only(store: GroupStore) -> None:
    group = store.add(GroupConfig(name="fam"))
    files = [p for p in group.memory_dir.rglob("*") if p.is_file()]
    used = memory_usage(group)
    assert used.files == len(files) == 3
    assert used.bytes == sum(p.stat().st_size for p in files)
    (group.files_dir).mkdir(exist_ok=True)
    (group.files_dir / "big").write_bytes(b"x" * 5000)
    assert memory_usage(group).bytes == used.bytes
    (group.memory_dir / "note.md").write_text("12345")
    assert memory_usage(group).files == 4
    assert memory_usage(group).bytes == used.bytes + 5


def test_memory_usage_of_a_group_whose_folder_is_gone_is_zero(store: GroupStore) -> None:
    group = store.add(GroupConfig(name="fam"))
    store.remove(group, purge=True)
    assert memory_usage(group) == Usage(0, 0, 0)


def test_load_refusals_name_the_path_and_the_way_out(store: GroupStore, home: Path) -> None:
    root = home / "groups"
    root.mkdir()
    with pytest.raises(GroupNotFound) as missing:
        store.load("fam")
    assert missing.value.message == f"no group with folder 'fam' in {root}"
    assert missing.value.hint == "list groups with: orchestrator group list"
    (root / "fam").mkdir()
    with pytest.raises(InvalidConfig) as empty:
        store.load("fam")
    assert empty.value.message == f"{root / 'fam'} has no group.yaml"
    assert empty.value.hint == "create one with: orchestrator group add NAME --folder fam"
    (root / "fam/group.yaml").mkdir()  # not a regular file
    with pytest.raises(InvalidConfig) as not_a_file:
        store.load("fam")
    assert not_a_file.value.message == f"{root / 'fam'} has no group.yaml"
    other = store.add(GroupConfig(name="other"))
    (root / "link").symlink_to(other.path)
    with pytest.raises(InvalidConfig) as link:
        store.load("link")
    assert link.value.message == (
        f"{root / 'link'} is a symlink; group folders must be real folders under {root}"
    )
    with pytest.raises(InvalidFolderName):
        store.load("../other")


def test_a_group_yaml_that_goes_away_is_not_served_from_memory(store: GroupStore) -> None:
    group = store.add(GroupConfig(name="fam"))
    assert store.load("fam") is store.load("fam")
    text = group.config_file.read_bytes()
    group.config_file.unlink()
    with pytest.raises(InvalidConfig):
        store.load("fam")
    group.config_file.write_bytes(text)
    assert store.load("fam") is not group


def _cached(home: Path) -> dict[str, object]:
    import json

    entries: dict[str, object] = json.loads((home / "state/cache/group-yaml.json").read_text())[
        "entries"
    ]
    return entries


def test_parsed_files_are_kept_for_other_processes_saved_once_per_listing(
    store: GroupStore, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.groups.parsed import ParsedYaml

    store.add(GroupConfig(name="a"))
    assert sorted(_cached(home)) == ["a"]  # a load outside a listing saves at once
    store.add(GroupConfig(name="b"))
    store.add(GroupConfig(name="c"))
    (home / "state/cache/group-yaml.json").unlink()
    saves: list[bool] = []
    real = ParsedYaml.save

    def counted(self: ParsedYaml) -> None:
        saves.append(True)
        real(self)

    monkeypatch.setattr(ParsedYaml, "save", counted)
    fresh = GroupStore(Home(home))
    assert [g.folder for g in fresh.groups()] == ["a", "b", "c"]
    assert len(saves) == 1 and sorted(_cached(home)) == ["a", "b", "c"]
    fresh.remove(fresh.load("b"), purge=True)
    assert sorted(_cached(home)) == ["a", "b", "c"]
    fresh.listing()  # a folder that is gone is forgotten
    assert sorted(_cached(home)) == ["a", "c"]
    config = home / "groups/c/group.yaml"
    config.write_text(config.read_text().replace('name: "c"', 'name: "sea"'))
    saves.clear()
    assert fresh.load("c").config.name == "sea"  # after a listing, a load saves again
    assert saves == [True]
    assert _cached(home)["c"][1]["name"] == "sea"  # type: ignore[index]


def test_listing_skips_hidden_entries_files_and_links_and_sorts(
    store: GroupStore, home: Path
) -> None:
    root = home / "groups"
    assert store.listing() == []  # no groups/ yet
    store.add(GroupConfig(name="b"))
    store.add(GroupConfig(name="a"))
    (root / "c-broken").mkdir()
    (root / ".hidden").mkdir()
    (root / "zfile").write_text("x")
    (root / "alink").symlink_to(root / "a")
    (root / "Upper").mkdir()
    rows = store.listing()
    assert [(r.folder, r.problem) for r in rows] == [
        ("Upper", "group folder 'Upper' has uppercase letters"),
        ("a", None),
        ("b", None),
        ("c-broken", f"{root / 'c-broken'} has no group.yaml"),
    ]
    assert [g.folder for g in store.groups()] == ["a", "b"]
    assert all(r.path == root / r.folder for r in rows)


def test_find_by_folder_then_by_display_name(store: GroupStore, home: Path) -> None:
    store.add(GroupConfig(name="Family Chat"), folder="fam")
    store.add(GroupConfig(name="fam"), folder="other")
    assert store.find("fam").folder == "fam"  # the folder wins over a display name
    assert store.find("FAMILY chat").folder == "fam"
    assert store.find("FAM").folder == "other"  # not a folder name: display name
    with pytest.raises(GroupNotFound) as none:
        store.find("nobody")
    assert none.value.message == f"no group named 'nobody' in {home / 'groups'}"
    assert none.value.hint == "list groups with: orchestrator group list"
    store.add(GroupConfig(name="Twin"), folder="twin-a")
    store.add(GroupConfig(name="twin"), folder="twin-b")
    with pytest.raises(GroupNotFound) as two:
        store.find("TWIN")
    assert two.value.message == "2 groups are named 'TWIN' (folders: twin-a, twin-b)"
    assert two.value.hint == "name the group by its folder"


def test_find_of_a_folder_name_without_a_folder_looks_up_display_names(
    store: GroupStore,
) -> None:
    store.add(GroupConfig(name="ghost"), folder="real")
    assert store.find("ghost").folder == "real"


def test_add_refuses_a_taken_folder_and_a_bad_setting(store: GroupStore, home: Path) -> None:
    store.add(GroupConfig(name="fam"))
    with pytest.raises(GroupExists) as taken:
        store.add(GroupConfig(name="Fam"))
    assert taken.value.message == f"{home / 'groups/fam'} already exists"
    assert taken.value.hint == (
        "pick another --folder, or remove it with: orchestrator group remove"
    )
    with pytest.raises(InvalidConfig) as bad:
        store.add(GroupConfig(name="x", provider="nope"), folder="x")
    assert bad.value.message.startswith("cannot add the group: provider: ")
    assert str(home) not in bad.value.message
    assert not (home / "groups/x").exists()
    assert store.add(GroupConfig(name="Whatever"), folder="chosen").folder == "chosen"


def test_a_refused_setting_keeps_its_hint_and_loses_only_the_place_with_a_line(
    store: GroupStore, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import orchestrator.groups.config as group_config

    where = ["{path}:3: ", "{path}: "]

    def refuse(text: str, path: Path, providers: object) -> None:
        raise InvalidConfig(where[0].format(path=path) + "model: no", hint="pick another")

    monkeypatch.setattr(group_config, "parse_group_config", refuse)
    with pytest.raises(InvalidConfig) as info:
        store.add(GroupConfig(name="fam"))
    assert (info.value.message, info.value.hint) == (
        "cannot add the group: model: no",
        "pick another",
    )
    where.pop(0)  # a place without a line is kept as it is
    with pytest.raises(InvalidConfig) as whole:
        store.add(GroupConfig(name="fam"))
    target = home / "groups/fam/group.yaml"
    assert whole.value.message == f"cannot add the group: {target}: model: no"


def test_a_failed_add_reports_the_error_and_leaves_nothing(
    store: GroupStore, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import orchestrator.memory.scaffold as scaffold

    def full(path: Path) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(scaffold, "scaffold_memory", full)
    from orchestrator.errors import HomeNotWritable

    with pytest.raises(HomeNotWritable) as info:
        store.add(GroupConfig(name="fam"))
    assert info.value.message == f"cannot create {home / 'groups/fam'}: No space left on device"
    assert info.value.hint == "nothing was left behind"
    assert list((home / "groups").iterdir()) == []

    def interrupted(path: Path) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(scaffold, "scaffold_memory", interrupted)
    with pytest.raises(KeyboardInterrupt):
        store.add(GroupConfig(name="fam"))
    assert list((home / "groups").iterdir()) == []


def _freeze(monkeypatch: pytest.MonkeyPatch, stamp: str) -> None:
    monkeypatch.setattr(store_module.time, "strftime", lambda fmt, t: stamp)


def test_remove_archives_with_a_stamp_and_a_suffix_when_it_is_taken(
    store: GroupStore, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = home / "groups/.removed"
    first = store.add(GroupConfig(name="fam"))
    real = store_module.time.strftime("%Y%m%dT%H%M%SZ", store_module.time.gmtime())
    stamped = store.remove(first, purge=False)
    assert stamped is not None and stamped.parent == archive
    assert len(stamped.name) == len("fam-") + len(real)
    assert stamped.name[:4] == "fam-" and stamped.name[12] == "T" and stamped.name[-1] == "Z"
    _freeze(monkeypatch, "20260101T000000Z")
    names = []
    for _ in range(3):
        names.append(store.remove(store.add(GroupConfig(name="fam")), purge=False))
    assert names == [
        archive / "fam-20260101T000000Z",
        archive / "fam-20260101T000000Z-2",
        archive / "fam-20260101T000000Z-3",
    ]
    assert store.removed() == sorted([stamped, *names])


def test_the_archive_stamp_is_in_utc_whatever_the_local_zone(store: GroupStore) -> None:
    import time

    with local_zone("Asia/Kolkata"):  # UTC+05:30: never the same clock as UTC
        before = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        archived = store.remove(store.add(GroupConfig(name="fam")), purge=False)
        after = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    assert archived is not None
    assert archived.name in (f"fam-{before}", f"fam-{after}")


def test_skills_of_a_second_removed_group_go_aside_beside_the_first(
    store: GroupStore, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    skills = home / "skills-by-group"
    _freeze(monkeypatch, "20260101T000000Z")
    for name in ("one", "two"):
        (skills / name).mkdir(parents=True)
        store.remove(store.add(GroupConfig(name=name)), purge=False)
    assert sorted(p.name for p in (skills / ".removed").iterdir()) == [
        "one-20260101T000000Z",
        "two-20260101T000000Z",
    ]


def test_remove_refuses_a_folder_that_is_a_link(store: GroupStore, home: Path) -> None:
    group = store.add(GroupConfig(name="fam"))
    moved = home / "elsewhere"
    os.rename(group.path, moved)
    group.path.symlink_to(moved)
    with pytest.raises(InvalidConfig) as info:
        store.remove(group, purge=False)
    assert info.value.message == f"{group.path} is not a real folder; refusing to remove it"
    assert (moved / "group.yaml").is_file()


def test_skills_go_aside_with_the_group_and_come_back_with_it(
    store: GroupStore, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    skills = home / "skills-by-group"
    group = store.add(GroupConfig(name="fam"))
    (skills / "fam/tool").mkdir(parents=True)
    (skills / "fam/tool/SKILL.md").write_text("x")
    _freeze(monkeypatch, "20260101T000000Z")
    archived = store.remove(group, purge=False)
    assert archived == home / "groups/.removed/fam-20260101T000000Z"
    assert not (skills / "fam").exists()
    assert (skills / ".removed/fam-20260101T000000Z/tool/SKILL.md").read_text() == "x"
    back = store.restore("fam")
    assert back.folder == "fam" and back.path == home / "groups/fam"
    assert (skills / "fam/tool/SKILL.md").read_text() == "x"
    assert list((skills / ".removed").iterdir()) == []
    assert store.removed() == []


def test_restore_leaves_a_new_groups_skills_alone(
    store: GroupStore, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    skills = home / "skills-by-group"
    (skills / "fam/old").mkdir(parents=True)
    _freeze(monkeypatch, "20260101T000000Z")
    store.remove(store.add(GroupConfig(name="fam")), purge=False)
    (skills / "fam/new").mkdir(parents=True)
    store.restore("fam")
    assert [p.name for p in (skills / "fam").iterdir()] == ["new"]
    assert (skills / ".removed/fam-20260101T000000Z/old").is_dir()


def test_purge_deletes_the_group_and_its_skills(store: GroupStore, home: Path) -> None:
    skills = home / "skills-by-group"
    (skills / "fam/tool").mkdir(parents=True)
    (skills / "other").mkdir()
    group = store.add(GroupConfig(name="fam"))
    assert store.remove(group, purge=True) is None
    assert not group.path.exists() and not (home / "groups/.removed").exists()
    assert sorted(p.name for p in skills.iterdir()) == ["other"]


def test_skills_behind_a_link_are_left_where_they_are(store: GroupStore, home: Path) -> None:
    skills = home / "skills-by-group"
    skills.mkdir()
    (home / "real-skills").mkdir()
    (skills / "fam").symlink_to(home / "real-skills")
    store.remove(store.add(GroupConfig(name="fam")), purge=True)
    assert (skills / "fam").is_symlink() and (home / "real-skills").is_dir()
    assert not (skills / ".removed").exists()


def test_restore_picks_an_archive_by_name_or_a_folders_newest(
    store: GroupStore, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = home / "groups/.removed"
    with pytest.raises(GroupNotFound) as nothing:
        store.restore("fam")
    assert nothing.value.message == f"no removed group 'fam' in {archive}"
    assert nothing.value.hint == "removed groups: none"
    for stamp in ("20260101T000000Z", "20260102T000000Z"):
        _freeze(monkeypatch, stamp)
        store.remove(store.add(GroupConfig(name="fam", creators=(stamp[:8],))), purge=False)
    store.remove(store.add(GroupConfig(name="fam", creators=("third",))), purge=False)
    store.remove(store.add(GroupConfig(name="fam-x")), purge=False)
    (archive / "stray-file").write_text("x")
    (archive / "linked-20260101T000000Z").symlink_to(home)
    assert [p.name for p in store.removed()] == [
        "fam-20260101T000000Z",
        "fam-20260102T000000Z",
        "fam-20260102T000000Z-2",
        "fam-x-20260102T000000Z",
    ]
    assert store.restore("fam").config.creators == ("third",)
    with pytest.raises(GroupExists) as busy:
        store.restore("fam-20260101T000000Z")
    assert busy.value.message == (
        f"{home / 'groups/fam'} exists; restoring fam-20260101T000000Z would replace it"
    )
    assert busy.value.hint == "remove or rename that group first"
    store.remove(store.load("fam"), purge=True)
    assert store.restore("fam-20260101T000000Z").config.creators == ("20260101",)
    with pytest.raises(GroupNotFound) as other:
        store.restore("fa")
    assert other.value.hint == ("removed groups: fam-20260102T000000Z, fam-x-20260102T000000Z")
    assert store.restore("fam-x").folder == "fam-x"


def test_the_hint_of_a_missing_archive_shows_the_ten_newest(store: GroupStore, home: Path) -> None:
    archive = home / "groups/.removed"
    archive.mkdir(parents=True)
    names = [f"g{i:02}-20260101T000000Z" for i in range(12)]
    for name in names:
        (archive / name).mkdir()
    with pytest.raises(GroupNotFound) as info:
        store.restore("nope")
    assert info.value.hint == "removed groups: " + ", ".join(names[2:])


def test_remove_runtime_dir_goes_without_following_links(store: GroupStore, home: Path) -> None:
    from orchestrator.memory.search import INDEX_DIR

    index = home / "state" / INDEX_DIR
    index.mkdir(parents=True)
    for name in ("fam.sqlite", "fam.sqlite-wal", "fam.lock", "other.sqlite"):
        (index / name).write_text("x")
    store.remove_runtime_dir("fam")  # no runtime folder: only the search index goes
    assert [p.name for p in index.iterdir()] == ["other.sqlite"]
    run = home / "state/run"
    (run / "fam").mkdir(parents=True)
    (run / "fam/escape").symlink_to(home)
    (run / "other").mkdir()
    (home / "keep").write_text("x")
    store.remove_runtime_dir("fam")
    assert [p.name for p in run.iterdir()] == ["other"]
    assert (home / "keep").read_text() == "x"


def test_providers_are_read_again_when_the_file_changes(store: GroupStore, home: Path) -> None:
    first = store.providers()
    assert first == {}
    assert store.providers() is first
    (home / "orchestrator.yaml").write_text("providers: [\n")
    assert store.providers() is None
    assert store.providers() is None
    (home / "orchestrator.yaml").unlink()
    again = store.providers()
    assert again == {} and again is not first


LOCAL = "providers:\n  local:\n    kind: openai\n    base_url: http://127.0.0.1:11434/v1\n"


def test_a_group_is_checked_against_the_providers_cached_or_parsed(home: Path) -> None:
    (home / "orchestrator.yaml").write_text(LOCAL + "    models: [llama3.1]\n")
    group = GroupStore(Home(home)).add(
        GroupConfig(name="fam", provider="local", model="llama3.1"), folder="fam"
    )
    assert group.config.provider == "local"
    assert GroupStore(Home(home)).load("fam").config.model == "llama3.1"  # from the cache
    (home / "orchestrator.yaml").write_text(LOCAL + "    models: [other]\n")
    with pytest.raises(InvalidConfig) as cached:
        GroupStore(Home(home)).load("fam")  # the cached data is checked all the same
    assert "llama3.1" in cached.value.message
    assert cached.value.message.startswith(f"{group.config_file}:")
    (home / "state/cache/group-yaml.json").unlink()
    with pytest.raises(InvalidConfig) as parsed:
        GroupStore(Home(home)).load("fam")
    assert parsed.value.message == cached.value.message


def test_group_yaml_is_written_with_its_letters_as_they_are(store: GroupStore) -> None:
    group = store.add(GroupConfig(name="Família Silva"))
    assert 'name: "Família Silva"\n' in group.config_file.read_text(encoding="utf-8")


# groups/disk.py


def test_the_disk_constants() -> None:
    assert DISK_HOLDER == "disk"
    assert GROUP_DATA == ("memory", "sessions", "files", ".history")


def test_group_disk_usage_sums_the_allocated_blocks_of_the_data_folders(tmp_path: Path) -> None:
    group = tmp_path / "fam"
    for name in ("memory", "sessions", "files", ".history", "other"):
        (group / name).mkdir(parents=True)
        (group / name / "f").write_bytes(b"x" * 10000)
    (group / "group.yaml").write_bytes(b"x" * 10000)
    per_file = os.stat(group / "memory/f").st_blocks * 512
    assert per_file >= 10000
    assert group_disk_usage(tmp_path, "fam") == 4 * per_file
    (group / "files/f").unlink()
    (group / "files").rmdir()
    (group / "files").write_bytes(b"x" * 10000)  # not a folder: counts nothing
    assert group_disk_usage(tmp_path, "fam") == 3 * per_file
    assert group_disk_usage(tmp_path, "absent") == 0
    (tmp_path / "link").symlink_to(group)
    assert group_disk_usage(tmp_path, "link") == 0


def test_a_sparse_file_counts_what_it_really_uses(tmp_path: Path) -> None:
    (tmp_path / "fam/memory").mkdir(parents=True)
    with open(tmp_path / "fam/memory/sparse", "wb") as f:
        f.truncate(50 * 1024 * 1024)
    assert group_disk_usage(tmp_path, "fam") < 1024 * 1024


def test_free_space(tmp_path: Path) -> None:
    st = os.statvfs(tmp_path)
    found = free_space(tmp_path)
    assert found is not None and found.path == str(tmp_path)
    assert found.total_bytes == st.f_blocks * st.f_frsize
    assert found.free_bytes <= st.f_bfree * st.f_frsize
    assert found.to_dict() == {
        "path": str(tmp_path),
        "free_bytes": found.free_bytes,
        "total_bytes": found.total_bytes,
    }
    assert FreeSpace("/x", 1, 2).to_dict() == {"path": "/x", "free_bytes": 1, "total_bytes": 2}
    assert free_space(tmp_path / "absent") is None


def test_free_space_is_what_unprivileged_writers_may_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    from orchestrator.groups import disk

    fake = SimpleNamespace(f_bavail=3, f_bfree=5, f_blocks=10, f_frsize=4096, f_bsize=8192)
    monkeypatch.setattr(disk.os, "statvfs", lambda path: fake)
    assert free_space(tmp_path) == FreeSpace(str(tmp_path), 3 * 4096, 10 * 4096)


MOUNTS = (
    "rootfs / rootfs rw 0 0\n"
    "/dev/sda1 / ext4 rw,relatime 0 0\n"
    "short line\n"
    "/dev/sdb1 /srv xfs rw,prjquota 0 0\n"
    "/dev/sdc1 /srv/my\\040data ext4 rw,noatime 0 0\n"
    "/dev/sdd1 /srvx ext4 ro 0 0\n"
    "/dev/sde1 /four ext4 rw\n"
    "/dev/sdf1 /mnt/X ext4 ro 0 0\n"
    "/dev/sdg1 /t\\011a\\012b\\134040c ext4 rw,sync 0 0\n"
)


@pytest.fixture
def mounts(monkeypatch: pytest.MonkeyPatch) -> None:
    real_read = Path.read_text

    def read_text(self: Path, *args: object, **kwargs: object) -> str:
        if str(self) == "/proc/self/mounts":
            return MOUNTS
        return real_read(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", read_text)
    monkeypatch.setattr(os.path, "realpath", lambda p: str(p))


@pytest.mark.usefixtures("mounts")
def test_the_mount_of_a_path_is_the_longest_that_holds_it() -> None:
    assert mount_options(Path("/")) == ("/", "ext4", {"rw", "relatime"})
    assert mount_options(Path("/home/a")) == ("/", "ext4", {"rw", "relatime"})
    assert mount_options(Path("/srv")) == ("/srv", "xfs", {"rw", "prjquota"})
    assert mount_options(Path("/srv/a/b")) == ("/srv", "xfs", {"rw", "prjquota"})
    assert mount_options(Path("/srvx/a")) == ("/srvx", "ext4", {"ro"})
    assert mount_options(Path("/srv/my data/g")) == ("/srv/my data", "ext4", {"rw", "noatime"})
    assert mount_options(Path("/srv/my")) == ("/srv", "xfs", {"rw", "prjquota"})
    assert mount_options(Path("/four/g")) == ("/four", "ext4", {"rw"})  # four fields do
    assert mount_options(Path("/mnt/X/g")) == ("/mnt/X", "ext4", {"ro"})
    assert mount_options(Path("/mnt/Y")) == ("/", "ext4", {"rw", "relatime"})
    # a tab, a newline and a backslash come escaped too; an escaped backslash before
    # "040" is a backslash, not a space
    tab = "/t\ta\nb\\040c"
    assert mount_options(Path(tab + "/g")) == (tab, "ext4", {"rw", "sync"})


@pytest.mark.usefixtures("mounts")
def test_limit_mode_says_whether_the_filesystem_has_project_quotas() -> None:
    assert limit_mode(Path("/srv/g")) == (
        "soft: measured after each turn and every minute (xfs at /srv has project quotas, "
        "which this version does not set)"
    )
    assert limit_mode(Path("/home")) == (
        "soft: measured after each turn and every minute (ext4 at / has no project quotas)"
    )


def test_limit_mode_knows_every_quota_option(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.groups import disk

    for option in ("prjquota", "pquota", "prjjquota"):
        monkeypatch.setattr(disk, "mount_options", lambda p, o=option: ("/d", "xfs", {"rw", o}))
        assert limit_mode(Path("/d")).endswith(
            "(xfs at /d has project quotas, which this version does not set)"
        )
    monkeypatch.setattr(disk, "mount_options", lambda p: ("/d", "ext4", {"usrquota"}))
    assert limit_mode(Path("/d")).endswith("(ext4 at /d has no project quotas)")
    monkeypatch.setattr(disk, "mount_options", lambda p: None)
    assert limit_mode(Path("/d")) == (
        "soft: measured after each turn and every minute (an unknown filesystem has no "
        "project quotas)"
    )


def test_mount_options_without_proc_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    def unreadable(self: Path, *args: object, **kwargs: object) -> str:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "read_text", unreadable)
    assert mount_options(Path("/")) is None


def test_the_real_mount_of_a_folder_is_found(tmp_path: Path) -> None:
    found = mount_options(tmp_path)
    assert found is not None and str(tmp_path).startswith(found[0])


def test_over_limit_reason_in_mebibytes() -> None:
    assert over_limit_reason("fam", 1024**3, 1024**3 - 1) == (
        "group 'fam' is over its disk limit (1024.0 MiB of 1024.0 MiB); it answers again "
        "once space in its memory, sessions or files is freed"
    )
    assert over_limit_reason("fam", 1024**2 * 3 // 2, 1024**2) == (
        "group 'fam' is over its disk limit (1.5 MiB of 1.0 MiB); it answers again once "
        "space in its memory, sessions or files is freed"
    )
    assert over_limit_reason("g", 0, 1024**3).startswith(
        "group 'g' is over its disk limit (0.0 MiB of 1024.0 MiB)"
    )


def test_removed_orders_a_tenth_removal_in_one_second_after_the_second(
    store: GroupStore, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _freeze(monkeypatch, "20260101T000000Z")
    for n in range(1, 12):
        store.remove(store.add(GroupConfig(name="fam", creators=(f"c{n}",))), purge=False)
    _freeze(monkeypatch, "20251231T235959Z")
    store.remove(store.add(GroupConfig(name="zed")), purge=False)
    (home / "groups/.removed/not-an-archive").mkdir()
    assert [p.name for p in store.removed()] == [
        "not-an-archive",
        "zed-20251231T235959Z",
        "fam-20260101T000000Z",
        *(f"fam-20260101T000000Z-{n}" for n in range(2, 12)),
    ]
    assert store.restore("fam").config.creators == ("c11",)
