"""Backups: ``orchestrator backup`` of a home of 100 groups with 1,000 memory files each
(about 1 KB a file) against ``tar -cf`` of the same folders, and ``restore`` of the archive
into a fresh folder against ``tar -xf``; both uncompressed, the gzip-compressed archive's
times in the note (against ``tar`` through ``gzip -3``, the level the backup uses).

The backup also copies the state database, reads every file through the confined layer
and hashes it; the restore checks every checksum, writes through a staging folder and
flushes the file system before anything is put in place, which untar does not do.
--quick: 10 groups of 100 files.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from bench.harness import Result, Series

BACKUP, RESTORE = "backup-100x1000", "restore-100x1000"


def _home(root: Path, groups: int, files: int) -> None:
    from orchestrator.groups import GroupStore
    from orchestrator.groups.config import GroupConfig
    from orchestrator.home import Home
    from orchestrator.store.messages import open_queue

    root.mkdir()
    (root / "orchestrator.yaml").write_text(f"mount_allowlist: {root.parent / 'none.yaml'}\n")
    store = GroupStore(Home(root))
    body = "Something the group was told, kept as a line of Markdown. " * 15
    for g in range(groups):
        group = store.add(GroupConfig(name=f"Group {g:03d}"))
        for n in range(files):
            folder = group.memory_dir / f"topic-{n % 20:02d}"
            folder.mkdir(exist_ok=True)
            (folder / f"fact-{n:04d}.md").write_text(
                f"---\ntype: fact\n---\n# Fact {n}\n\n{body}\n"
            )
    open_queue(Home(root)).close()


def _timed(command: list[str] | str) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, shell=isinstance(command, str))
    return time.perf_counter() - started


def _round(home: Path, work: Path, suffix: str) -> dict[str, float]:
    """One round: (seconds) tar, backup, untar, restore, of one archive kind."""
    from orchestrator.backup import create_backup, restore_backup
    from orchestrator.home import Home

    work.mkdir()
    ours, theirs = work / f"b{suffix}", work / f"t{suffix}"
    pack = f"tar -cf - -C {home} groups orchestrator.yaml"
    took = {
        "tar": _timed(f"{pack} > {theirs}" if suffix == ".tar" else f"{pack} | gzip -3 > {theirs}")
    }
    started = time.perf_counter()
    create_backup(Home(home), ours)
    took["backup"] = time.perf_counter() - started
    (work / "untar").mkdir()
    took["untar"] = _timed(["tar", "-xf", str(theirs), "-C", str(work / "untar")])
    started = time.perf_counter()
    restore_backup(ours, Home(work / "restored"))
    took["restore"] = time.perf_counter() - started
    shutil.rmtree(work)
    return took


def _run(quick: bool) -> tuple[Result, Result]:
    groups, files = (10, 100) if quick else (100, 1000)
    rounds = 2 if quick else 3
    with tempfile.TemporaryDirectory(prefix="bench-backup-") as tmp:
        base = Path(tmp)
        home = base / "home"
        started = time.perf_counter()
        _home(home, groups, files)
        made_in = time.perf_counter() - started
        backup = Series(f"orchestrator backup (.tar), {groups}x{files} files")
        tar = Series("tar -cf of groups/ and orchestrator.yaml")
        restore = Series("orchestrator restore into a fresh folder")
        untar = Series("tar -xf into a fresh folder")
        _round(home, base / "warm-up", ".tar")  # the first round warms the caches
        for index in range(rounds):
            took = _round(home, base / f"round-{index}", ".tar")
            tar.samples.append(took["tar"])
            backup.samples.append(took["backup"])
            untar.samples.append(took["untar"])
            restore.samples.append(took["restore"])
        gz = _round(home, base / "gzip", ".tar.gz")  # once: the compressed archive
    note = (
        f"{rounds} rounds after one warm-up, {groups * files:,} memory files (home made in "
        f"{made_in:.1f}s); gzip: backup {gz['backup']:.2f}s against tar | gzip -3 "
        f"{gz['tar']:.2f}s, restore {gz['restore']:.2f}s against tar -xf "
        f"{gz['untar']:.2f}s"
    )
    extra = {"groups": groups, "files_per_group": files} | {f"gzip_{k}_s": v for k, v in gz.items()}
    return (
        Result(BACKUP, backup, tar, note=note, extra=extra),
        Result(RESTORE, restore, untar, note=note, extra=extra),
    )


_cache: dict[bool, tuple[Result, Result]] = {}


def _both(quick: bool) -> tuple[Result, Result]:
    """One run measures both (the home is built once)."""
    if quick not in _cache:
        _cache[quick] = _run(quick)
    return _cache[quick]


def backup(quick: bool) -> Result:
    return _both(quick)[0]


def restore(quick: bool) -> Result:
    return _both(quick)[1]
