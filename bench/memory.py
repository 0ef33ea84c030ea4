"""Memory benchmarks: scaffold of complete trees, and lint of a large tree."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from bench.harness import Result, interleaved

SCAFFOLD = "scaffold-complete"
SCAFFOLD_CREATE = "scaffold-create"
LINT = "memory-lint"


def scaffold_complete(quick: bool) -> Result:
    """Scaffold of 1,000 already-complete groups against os.stat of the same paths."""
    from orchestrator.memory.scaffold import SCAFFOLD_FILES, scaffold_memory

    with tempfile.TemporaryDirectory(prefix="bench-scaffold-") as tmp:
        groups = [Path(tmp) / f"g{i:04d}" for i in range(1000)]
        for group in groups:
            group.mkdir()
            scaffold_memory(group)
        paths = [
            group / "memory" / sub / name if sub else group / "memory" / name
            for group in groups
            for sub, name, _ in SCAFFOLD_FILES
        ]

        def target() -> None:
            for group in groups:
                scaffold_memory(group)

        def floor() -> None:
            for path in paths:
                os.stat(path)

        t, f = interleaved(
            target,
            floor,
            5 if quick else 30,
            target_label="scaffold 1,000 complete groups",
            floor_label="os.stat of their 3,000 files",
        )
    return Result(SCAFFOLD, t, f)


def scaffold_create(quick: bool) -> Result:
    """Scaffold of 200 new (empty) group folders, against making the same two folders and
    three files each with plain writes (no exclusivity, no fsync, no descriptors)."""
    from orchestrator.memory.scaffold import scaffold_memory
    from orchestrator.templates import render

    texts = [
        render("memory/index.md.j2"),
        render("memory/system/index.md.j2"),
        render("memory/system/definition.md.j2"),
    ]
    count = 200
    with tempfile.TemporaryDirectory(prefix="bench-scaffold-create-") as tmp:
        base = Path(tmp)
        rounds = iter(range(10**6))

        def fresh() -> list[Path]:
            folder = base / f"r{next(rounds)}"
            groups = [folder / f"g{i:04d}" for i in range(count)]
            for group in groups:
                group.mkdir(parents=True)
            return groups

        def target() -> None:
            for group in pending_target.pop():
                scaffold_memory(group)

        def floor() -> None:
            for group in pending_floor.pop():
                (group / "memory/system").mkdir(parents=True)
                (group / "memory/index.md").write_text(texts[0])
                (group / "memory/system/index.md").write_text(texts[1])
                (group / "memory/system/definition.md").write_text(texts[2])

        def durable() -> None:
            # the floor's writes made as durable as the scaffold's: each file fsync'd,
            # then each of the three folders that gained an entry
            for group in pending_durable.pop():
                (group / "memory/system").mkdir(parents=True)
                for name, text in zip(
                    ("index.md", "system/index.md", "system/definition.md"), texts, strict=True
                ):
                    fd = os.open(group / "memory" / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
                    try:
                        os.write(fd, text.encode())
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                for folder in (group / "memory/system", group / "memory", group):
                    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)

        n = 3 if quick else 10
        pending_target = [fresh() for _ in range(2 * n + 2)]
        pending_floor = [fresh() for _ in range(n + 1)]
        pending_durable = [fresh() for _ in range(n + 1)]
        t, f = interleaved(
            target,
            floor,
            n,
            target_label="scaffold 200 new groups",
            floor_label="mkdir and write the same files",
        )
        t2, d = interleaved(
            target,
            durable,
            n,
            target_label="scaffold 200 new groups",
            floor_label="the same, each file and folder fsync'd",
        )
    return Result(
        SCAFFOLD_CREATE,
        t,
        f,
        note="the scaffold fsyncs each file and its folder (creation is durable); the floor "
        "does not. The durable floor is the floor with the scaffold's fsyncs, in the same run",
        extra={
            "durable_floor_ms": round(d.median * 1000, 2),
            "ratio_to_durable_floor": round(t2.median / d.median, 2),
        },
    )


def _make_tree(root: Path, files: int) -> None:
    from orchestrator.memory.scaffold import scaffold_memory

    scaffold_memory(root)
    memory = root / "memory"
    per_folder = 100
    links = []
    for i in range(files):
        folder = memory / f"topic-{i // per_folder:03d}"
        if i % per_folder == 0:
            folder.mkdir()
            links.append(f"- [topic {i // per_folder}]({folder.name}/index.md)")
        body = f"---\ntype: note\ntitle: Note {i}\n---\n\n# Note {i}\n\n" + "Some text. " * 40
        (folder / f"note-{i:05d}.md").write_text(body)
    for folder in sorted(memory.glob("topic-*")):
        entries = "\n".join(f"- [{p.stem}]({p.name})" for p in sorted(folder.glob("note-*")))
        (folder / "index.md").write_text(f"# {folder.name}\n\n{entries}\n")
    with open(memory / "index.md", "a") as handle:
        handle.write("\n".join(links) + "\n")


def lint_large(quick: bool) -> Result:
    """memory lint on a 10,000-file tree against reading every file of it."""
    from orchestrator.memory.lint import lint_memory

    with tempfile.TemporaryDirectory(prefix="bench-lint-") as tmp:
        _make_tree(Path(tmp), 10_000)
        memory = Path(tmp) / "memory"
        report = lint_memory(memory)
        assert not report.findings, report.findings[:3]

        def target() -> None:
            lint_memory(memory)

        def floor() -> None:
            for path in memory.rglob("*.md"):
                path.read_bytes()

        t, f = interleaved(
            target,
            floor,
            3 if quick else 10,
            target_label="memory lint, 10,000 files",
            floor_label="read every file",
        )
    return Result(LINT, t, f, extra={"files": report.files_checked})
