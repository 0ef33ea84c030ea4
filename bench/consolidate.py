"""Memory consolidation: one run over a week of daily notes (7 notes of LINES lines from
a creator, a member and a guest, written by turns recorded in a memory history of
HISTORY changes), with a fake model that proposes a promotion for every tenth line it
is shown; a dry run (read, gate, the history's check of who wrote each line, the model,
the targets) against the floor of reading and gating the notes alone.

Also reported: model calls and the prompt's size per day of notes (tokens estimated at
orchestrator.money.CHARS_PER_TOKEN characters a token: the fake counts none).

``python -m bench.consolidate [--quick]``.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from bench.harness import Result, Series

NAME = "consolidate-week"
DAYS = 7
SOURCES = (
    ("alice (creator)", "alice", "creator"),
    ("bob (member)", "bob", "member"),
    ("alice (creator), bob (member)", "alice", "creator"),
    ("eve (guest)", "eve", "guest"),
    ("alice (creator), eve (guest)", "alice", "creator"),
)


def _group(root: Path, lines: int, changes: int, guests: bool) -> Any:
    from orchestrator.groups import GroupStore
    from orchestrator.groups.config import GroupConfig
    from orchestrator.home import Home
    from orchestrator.memory.history import TURN, History, Provenance

    made = GroupStore(Home(root)).add(GroupConfig(name="bench"))
    history = History(made.path.parent, made.folder)
    history.record_outside(None)
    daily = made.memory_dir / "daily"
    daily.mkdir()
    facts = made.memory_dir / "facts"
    facts.mkdir()
    per_day = max(1, changes // DAYS)
    for day in range(1, DAYS + 1):
        stamp = f"2026-12-{day:02d}"
        note = daily / f"{stamp}.md"
        note.write_text(f'---\ntype: daily-note\ndate: "{stamp}"\n---\n\n# {stamp}\n\n')
        for turn in range(per_day):
            with note.open("a") as out:
                for n in range(turn * lines // per_day, (turn + 1) * lines // per_day):
                    source, _sender, _trust = SOURCES[n % len(SOURCES)]
                    out.write(
                        f"- Fact {n} of day {day}: the plumber comes at {n % 12 + 1}pm on "
                        f"the {day}th. — {source}; chat kitchen; {stamp} 14:{n % 60:02d}\n"
                    )
            (facts / f"f{day}-{turn}.md").write_text(f"---\ntype: fact\n---\nfact {turn}\n")
            _source, sender, trust = SOURCES[3 if guests and turn == 0 else turn % 3]
            history.record(
                Provenance(TURN, sender=sender, trust=trust, message_id=f"m{day}-{turn}")
            )
    return made


class _Fake:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, system: str, messages: list[dict[str, Any]], max_tokens: int) -> str:
        self.calls += 1
        shown = [
            int(row.split(".", 1)[0])
            for row in messages[0]["content"].split("\n")
            if row[:1].isdigit() and ". [" in row
        ]
        return json.dumps(
            {
                "promotions": [
                    {"target": "facts/plumber.md", "text": f"Fact {n} holds.", "from": [n]}
                    for n in shown[::10]
                ]
            }
        )


def _dry_runs(root: Path, group: Any, rounds: int, now: float) -> tuple[Series, Any]:
    from orchestrator.home import Home
    from orchestrator.relay.consolidation import run_consolidation

    series = Series("dry run: read, gate, the history's check, the model, the targets")
    report = None
    for index in range(rounds + 1):
        started = time.perf_counter()
        report = run_consolidation(Home(root), group, dry_run=True, complete=_Fake(), now=now)
        if index:  # one warm-up round
            series.samples.append(time.perf_counter() - started)
    return series, report


def run(quick: bool) -> Result:
    from orchestrator.home import Home
    from orchestrator.memory import consolidate
    from orchestrator.money import CHARS_PER_TOKEN
    from orchestrator.relay.consolidation import FACTS, run_consolidation

    lines, changes, rounds = (40, 70, 5) if quick else (80, 210, 15)
    now = datetime(2026, 12, 7, 22, 0, tzinfo=UTC).timestamp()
    with tempfile.TemporaryDirectory(prefix="bench-consolidate-") as tmp:
        root = Path(tmp)
        group = _group(root, lines, changes, guests=False)
        floor = Series("read and gate the notes, no history, no model")
        for index in range(rounds + 1):
            started = time.perf_counter()
            consolidate.prepare(
                group.path.parent, group.folder, facts=FACTS, today=date(2026, 12, 7)
            )
            if index:
                floor.samples.append(time.perf_counter() - started)
        target, report = _dry_runs(root, group, rounds, now)
        started = time.perf_counter()
        applied = run_consolidation(Home(root), group, complete=_Fake(), now=now)
        write_s = time.perf_counter() - started
    with tempfile.TemporaryDirectory(prefix="bench-consolidate-") as tmp:
        root = Path(tmp)
        guests, _ = _dry_runs(root, _group(root, lines, changes, guests=True), rounds, now)
    per_day = report.prompt_chars / DAYS
    return Result(
        NAME,
        target,
        floor,
        note=f"{DAYS} notes of {lines} lines, a history of {changes} turns; "
        f"{report.model_calls} model call a run ({report.model_calls / DAYS:.2f} a day of "
        f"notes), prompt {per_day:,.0f} chars a day of notes (~{per_day / CHARS_PER_TOKEN:,.0f} "
        f"tokens est.), answer {report.answer_chars / DAYS:,.0f} chars a day; "
        f"{len(report.eligible)}/{len(report.lines)} lines eligible; a real run writing "
        f"{len(applied.promoted)} promotions: {write_s * 1e3:.0f} ms; with a guest's turn "
        f"writing to every note (each blamed line by line): median {guests.median * 1e3:.0f} ms",
        extra={
            "lines": len(report.lines),
            "eligible": len(report.eligible),
            "model_calls_per_day_of_notes": report.model_calls / DAYS,
            "prompt_chars_per_day_of_notes": per_day,
            "prompt_tokens_per_day_estimated": per_day / CHARS_PER_TOKEN,
            "answer_chars_per_day_of_notes": report.answer_chars / DAYS,
            "promoted": len(applied.promoted),
            "write_run_s": write_s,
            "guest_written_notes_median_s": guests.median,
        },
    )


if __name__ == "__main__":
    result = run("--quick" in sys.argv[1:])
    print(json.dumps(result.to_dict(), indent=2))
