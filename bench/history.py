"""Memory history: the per-turn check for a change, at 100, 1,000 and 10,000 memory
files, with no change and with one changed file, against a bare os.scandir walk that
stats the same tree (the least any check by status can do)."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from bench.harness import Result, Series

NAMES = {100: "history-check-100", 1000: "history-check-1k", 10_000: "history-check-10k"}


def _tree(group: Path, files: int) -> None:
    memory = group / "memory"
    for number in range(files):
        folder = memory / f"topic-{number % 50}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"fact-{number}.md").write_text(f"---\ntype: fact\n---\nfact {number}\n")


def _walk(root: Path) -> int:
    count = 0
    stack = [str(root)]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                st = entry.stat(follow_symlinks=False)
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif st.st_size >= 0:
                    count += 1
    return count


def _run(files: int, quick: bool) -> Result:
    from orchestrator.memory.history import TURN, History, Provenance

    rounds = (10 if files >= 10_000 else 30) if quick else (30 if files >= 10_000 else 100)
    with tempfile.TemporaryDirectory(prefix="bench-history-") as tmp:
        groups = Path(tmp)
        group = groups / "g"
        _tree(group, files)
        history = History(groups, "g")
        history.record(Provenance(TURN, sender="bench"))
        target = Series(f"check with no change, {files:,} files")
        changed = Series(f"check and record one changed file, {files:,} files")
        floor = Series("bare os.scandir walk with stat")
        one = group / "memory/topic-0/fact-0.md"
        for index in range(rounds + 2):
            started = time.perf_counter()
            _walk(group / "memory")
            f = time.perf_counter() - started
            started = time.perf_counter()
            assert history.record(Provenance(TURN, sender="bench")) is None
            t = time.perf_counter() - started
            one.write_text(f"---\ntype: fact\n---\nfact 0, version {index}\n")
            started = time.perf_counter()
            assert history.record(Provenance(TURN, sender="bench")) is not None
            c = time.perf_counter() - started
            if index >= 2:  # two warm-up rounds
                floor.samples.append(f)
                target.samples.append(t)
                changed.samples.append(c)
    return Result(
        NAMES[files],
        target,
        floor,
        note=f"{rounds} rounds; one changed file recorded: median "
        f"{sorted(changed.samples)[len(changed.samples) // 2] * 1e3:.2f} ms, p99 "
        f"{changed.p99 * 1e3:.2f} ms; goal: no-change check within 2x the walk",
        extra={
            "files": files,
            "one_change_median_s": changed.median,
            "one_change_p99_s": changed.p99,
        },
    )


def check_100(quick: bool) -> Result:
    return _run(100, quick)


def check_1k(quick: bool) -> Result:
    return _run(1000, quick)


def check_10k(quick: bool) -> Result:
    return _run(10_000, quick)
