"""The idempotent memory scaffold: never overwrites, exclusive creation, no symlinks."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest

from orchestrator.memory.okf import split_frontmatter
from orchestrator.memory.scaffold import scaffold_memory

FILES = ("memory/index.md", "memory/system/index.md", "memory/system/definition.md")


@pytest.fixture
def group_dir(tmp_path: Path) -> Path:
    path = tmp_path / "groups" / "family"
    path.mkdir(parents=True)
    return path


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_fresh_scaffold_creates_the_tree(group_dir: Path) -> None:
    report = scaffold_memory(group_dir)
    assert report.created == ["memory/", "memory/system/", *FILES]
    assert report.problems == []
    assert sorted(snapshot(group_dir)) == sorted(FILES)
    assert not [p for p in group_dir.rglob(".*")], "no temporary files left behind"


def test_templates_follow_the_format(group_dir: Path) -> None:
    scaffold_memory(group_dir)
    index = (group_dir / "memory/index.md").read_text()
    front = split_frontmatter(index)
    assert front.status == "ok" and front.data == {
        "okf_version": "0.1",
        "title": "Memory",
        "description": "Top-level map of this group's memory.",
    }
    assert "## Core Memory" in index
    assert "(system/definition.md)" in index
    assert "(definition.md)" in (group_dir / "memory/system/index.md").read_text()
    definition = (group_dir / "memory/system/definition.md").read_text()
    front = split_frontmatter(definition)
    assert next(iter(front.data or {})) == "type" and front.data["type"] == "system"
    for phrase in (
        "16,000 characters",
        "instructions.prepend.md",
        "log.md",
        "authoritative",
        "first key is `type`",
        "Never drop frontmatter fields",
    ):
        assert phrase in definition


def test_rescaffold_changes_nothing(group_dir: Path) -> None:
    scaffold_memory(group_dir)
    (group_dir / "memory/index.md").write_text("my own index")
    (group_dir / "memory/system/definition.md").write_bytes(b"")
    (group_dir / "memory/system/index.md").write_text("edited\n")
    before = snapshot(group_dir)
    for _ in range(5):
        report = scaffold_memory(group_dir)
        assert report.created == [] and report.problems == []
    assert snapshot(group_dir) == before


def test_deleted_file_alone_comes_back(group_dir: Path) -> None:
    scaffold_memory(group_dir)
    (group_dir / "memory/index.md").write_text("kept")
    (group_dir / "memory/system/definition.md").unlink()
    report = scaffold_memory(group_dir)
    assert report.created == ["memory/system/definition.md"]
    assert (group_dir / "memory/index.md").read_text() == "kept"


def _scaffold_in_child(args: tuple[str, multiprocessing.synchronize.Barrier]) -> list[str]:
    path, barrier = args
    barrier.wait()
    report = scaffold_memory(Path(path))
    assert report.problems == []
    return report.created


def test_concurrent_scaffolds_create_each_file_once(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    for round_ in range(5):
        group_dir = tmp_path / f"g{round_}"
        group_dir.mkdir()
        workers = 6
        with ctx.Manager() as manager:
            barrier = manager.Barrier(workers)
            with ctx.Pool(workers) as pool:
                results = pool.map(_scaffold_in_child, [(str(group_dir), barrier)] * workers)
        created = [path for result in results for path in result]
        for name in ("memory/", "memory/system/", *FILES):
            assert created.count(name) == 1, (name, results)
        assert sorted(snapshot(group_dir)) == sorted(FILES)


def test_symlinked_memory_folder_is_never_followed(group_dir: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (group_dir / "memory").symlink_to(outside)
    report = scaffold_memory(group_dir)
    assert report.created == []
    assert report.problems == ["memory is a symlink, not a folder; left untouched"]
    assert list(outside.iterdir()) == []


def test_symlinked_system_folder_and_file(group_dir: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (group_dir / "memory").mkdir()
    (group_dir / "memory/system").symlink_to(outside)
    (group_dir / "memory/index.md").symlink_to(outside / "stolen.md")  # dangling
    report = scaffold_memory(group_dir)
    assert report.created == []
    assert sorted(report.problems) == [
        "memory/index.md is a symlink, not a regular file; left untouched",
        "memory/system is a symlink, not a folder; left untouched",
    ]
    assert list(outside.iterdir()) == []
    assert os.path.islink(group_dir / "memory/index.md")


def test_non_regular_entries_are_reported_and_the_rest_is_created(group_dir: Path) -> None:
    (group_dir / "memory/system").mkdir(parents=True)
    (group_dir / "memory/index.md").mkdir()
    report = scaffold_memory(group_dir)
    assert report.problems == ["memory/index.md is a folder, not a regular file; left untouched"]
    assert report.created == ["memory/system/index.md", "memory/system/definition.md"]


def test_memory_as_a_file(group_dir: Path) -> None:
    (group_dir / "memory").write_text("not a folder")
    report = scaffold_memory(group_dir)
    assert report.problems == ["memory is a regular file, not a folder; left untouched"]
    assert (group_dir / "memory").read_text() == "not a folder"


def test_cli_scaffold_reports_created_and_nothing(run, home: Path) -> None:  # type: ignore[no-untyped-def]
    run("group", "add", "Fam")
    assert run("memory", "scaffold", "fam").stdout.strip() == (
        "nothing to create: the memory tree is complete"
    )
    (home / "groups/fam/memory/system/index.md").unlink()
    result = run("memory", "scaffold", "fam")
    assert result.stdout.strip() == "created memory/system/index.md"
    (home / "groups/fam/memory/index.md").unlink()
    (home / "groups/fam/memory/index.md").symlink_to("/etc/passwd")
    result = run("memory", "scaffold", "fam")
    assert result.exit_code == 1
    assert "memory/index.md is a symlink" in result.stderr


def test_a_group_folder_that_cannot_be_opened_is_a_problem(tmp_path: Path) -> None:
    missing = scaffold_memory(tmp_path / "gone")
    assert missing.problems == [
        f"{tmp_path / 'gone'}: cannot open the group folder (No such file or directory)"
    ]
    assert (missing.created, missing.complete) == ([], False)
    (tmp_path / "real").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    linked = scaffold_memory(tmp_path / "linked")
    assert linked.problems == [
        f"{tmp_path / 'linked'}: cannot open the group folder (is a symlink, not a folder)"
    ]
    assert list((tmp_path / "real").iterdir()) == []


def test_a_complete_tree_is_recognised_without_making_anything(
    group_dir: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.confined import ConfinedDir

    first = scaffold_memory(group_dir)
    assert first.complete and len(first.created) == 5

    def refuse(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("the fast path should have answered")

    monkeypatch.setattr(ConfinedDir, "make_dir", refuse)
    monkeypatch.setattr(ConfinedDir, "create_exclusive", refuse)
    again = scaffold_memory(group_dir)
    assert (again.created, again.problems, again.complete) == ([], [], True)
    for name in ("memory/index.md", "memory/system/index.md", "memory/system/definition.md"):
        target = group_dir / name
        text = target.read_text()
        target.unlink()
        target.mkdir()  # not a regular file: the fast path must not take the tree as complete
        with pytest.raises(AssertionError, match="the fast path should have answered"):
            scaffold_memory(group_dir)
        target.rmdir()
        target.write_text(text)


@pytest.mark.parametrize(
    ("planted", "kind"), [("fifo", "a FIFO"), ("folder", "a folder"), ("nothing", "missing")]
)
def test_an_entry_that_appears_while_creating_is_reported(
    group_dir: Path, monkeypatch, planted: str, kind: str
) -> None:  # type: ignore[no-untyped-def]
    """A container can race the scaffold: between the look and the create, something
    else takes the name. It is reported, never written through."""
    from orchestrator.confined import ConfinedDir

    real = ConfinedDir.create_exclusive

    def racing(self, relative, data, **kwargs):  # type: ignore[no-untyped-def]
        if relative == "index.md" and self.shown.endswith("/memory"):
            target = Path(f"/proc/self/fd/{self.fd}") / relative
            if planted == "fifo":
                os.mkfifo(target)
            elif planted == "folder":
                target.mkdir()
            return False
        return real(self, relative, data, **kwargs)

    monkeypatch.setattr(ConfinedDir, "create_exclusive", racing)
    report = scaffold_memory(group_dir)
    assert report.problems == [f"memory/index.md appeared as {kind}; left untouched"]
    assert sorted(report.created) == sorted(
        ["memory/", "memory/system/", "memory/system/index.md", "memory/system/definition.md"]
    )


def test_new_files_and_folders_get_the_owner_asked_for(group_dir: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("giving files to another user needs root")
    report = scaffold_memory(group_dir, owner=(4242, 4343))
    assert report.complete
    for path in ("memory", "memory/system", "memory/index.md", "memory/system/definition.md"):
        st = os.stat(group_dir / path)
        assert (st.st_uid, st.st_gid) == (4242, 4343), path


def test_a_refused_system_folder_still_lets_the_index_be_made(
    group_dir: Path, tmp_path: Path
) -> None:
    (group_dir / "memory").mkdir()
    (group_dir / "memory/system").write_text("a file where a folder should be")
    report = scaffold_memory(group_dir)
    assert report.created == ["memory/index.md"]
    assert report.problems == ["memory/system is a regular file, not a folder; left untouched"]


@pytest.mark.parametrize("name", ["memory/index.md", "memory/system/definition.md"])
def test_a_symlink_to_a_real_file_is_not_taken_as_complete(
    group_dir: Path, tmp_path: Path, name: str
) -> None:
    scaffold_memory(group_dir)
    outside = tmp_path / "outside.md"
    outside.write_text("someone else's file")
    (group_dir / name).unlink()
    (group_dir / name).symlink_to(outside)
    report = scaffold_memory(group_dir)
    assert report.problems == [f"{name} is a symlink, not a regular file; left untouched"]
    assert outside.read_text() == "someone else's file"


def test_files_made_in_existing_folders_get_the_owner_asked_for(group_dir: Path) -> None:
    """The owner asked for applies to each file made, not only through the folders
    made with it: folders that exist already (the operator's) keep theirs."""
    if os.geteuid() != 0:
        pytest.skip("giving files to another user needs root")
    (group_dir / "memory" / "system").mkdir(parents=True)
    report = scaffold_memory(group_dir, owner=(4242, 4343))
    assert sorted(report.created) == [
        "memory/index.md",
        "memory/system/definition.md",
        "memory/system/index.md",
    ]
    for path in ("memory/index.md", "memory/system/index.md", "memory/system/definition.md"):
        st = os.stat(group_dir / path)
        assert (st.st_uid, st.st_gid) == (4242, 4343), path
    assert os.stat(group_dir / "memory").st_uid == os.geteuid()


def test_a_folder_that_cannot_be_opened_is_reported_with_the_reason(
    group_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from orchestrator.confined import ConfinedDir

    real = ConfinedDir.open_dir

    def failing(self: ConfinedDir, relative: str, **kw: object) -> ConfinedDir:
        if relative == "memory":
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(self, relative, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(ConfinedDir, "open_dir", failing)
    report = scaffold_memory(group_dir)
    assert report.problems == ["memory: cannot open (Input/output error)"]
    assert not report.complete


def test_each_file_is_written_without_a_folder_sync_and_each_folder_synced_once_after(
    group_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Durability at the least cost: the files' own writes are synced, their folders once
    for all they gained (system, memory, then the group), not once per file."""
    from orchestrator.confined import ConfinedDir

    calls: list[tuple[str, ...]] = []
    create, sync = ConfinedDir.create_exclusive, ConfinedDir.sync

    def creating(self, relative, data, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(("create", relative, repr(kwargs.get("sync_folder", "default"))))
        return create(self, relative, data, **kwargs)

    def syncing(self) -> None:  # type: ignore[no-untyped-def]
        calls.append(("sync", self.shown.rsplit("/", 1)[-1]))
        sync(self)

    monkeypatch.setattr(ConfinedDir, "create_exclusive", creating)
    monkeypatch.setattr(ConfinedDir, "sync", syncing)
    scaffold_memory(group_dir)
    assert calls == [
        ("create", "index.md", "False"),
        ("create", "index.md", "False"),
        ("create", "definition.md", "False"),
        ("sync", "system"),
        ("sync", "memory"),
        ("sync", group_dir.name),
    ]
