"""The scheduler with 10,000 active tasks: what one tick costs to find the due tasks
(``TaskStore.due``: the query through the queue's connection and lock, and the rows
made into tasks), against a bare indexed SELECT of the due ids on the same table.
The database is a file in a temporary folder."""

from __future__ import annotations

import random
import sqlite3
import tempfile
import time
from pathlib import Path

from bench.harness import Result, Series

NAME = "scheduler-10k"
TASKS = 10_000
GROUPS = 200


SPREAD_SECONDS = 10_000.0  # due times spread over this long: about one task due a tick


def _fill(db: sqlite3.Connection, start: float, rng: random.Random) -> None:
    rows = []
    for number in range(TASKS):
        due = start + rng.uniform(0, SPREAD_SECONDS)
        rows.append(
            (f"group-{number % GROUPS}", f"chat-{number % 997}", None, "cli", f"task {number}",
             "every", "1d", "UTC", "bob", "member", "active", start, due)
        )  # fmt: skip
    with db:
        db.executemany(
            "INSERT INTO tasks (group_folder, chat, thread, channel, text, kind, spec, tz,"
            " author, author_trust, state, created, next_run) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            rows,
        )


def run(quick: bool) -> Result:
    from orchestrator.store.messages import MessageQueue
    from orchestrator.store.tasks import TaskStore

    rounds = 500 if quick else 3000
    rng = random.Random(5)
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="bench-tasks-") as tmp:
        queue = MessageQueue(Path(tmp) / "queue.db")
        store = TaskStore(queue)
        raw = sqlite3.connect(queue.path)
        _fill(raw, start, rng)
        t = Series(f"TaskStore.due over {TASKS:,} active tasks")
        f = Series("bare SELECT id FROM tasks WHERE state=? AND next_run<=? (indexed)")
        found = 0
        # One tick a second, as the daemon does. After each tick the tasks it found move
        # a day on (untimed), as running them would: the table stays in steady state,
        # where a tick finds only what came due since the last one.
        for second in range(-20, rounds):  # the first 20 warm up
            tick = start + second
            started = time.perf_counter()
            ids = raw.execute(
                "SELECT id FROM tasks WHERE state=? AND next_run<=?", ("active", tick)
            ).fetchall()
            floor = time.perf_counter() - started
            started = time.perf_counter()
            due = store.due(tick)
            target = time.perf_counter() - started
            assert sorted(task.id for task in due) == sorted(i for (i,) in ids)
            if second >= 0:
                f.samples.append(floor)
                t.samples.append(target)
                found += len(due)
            with raw:
                raw.executemany(
                    "UPDATE tasks SET next_run=next_run+86400 WHERE id=?", [(t.id,) for t in due]
                )
        plan = " ".join(
            str(r[-1])
            for r in raw.execute(
                "EXPLAIN QUERY PLAN SELECT id FROM tasks WHERE state=? AND next_run<=?",
                ("active", start),
            )
        )
        raw.close()
        queue.close()
    return Result(
        NAME,
        t,
        f,
        note=f"{rounds:,} ticks a second apart; {found / rounds:.2f} tasks due a tick on "
        f"average; plan: {plan}",
        extra={"tasks": TASKS, "ticks": rounds, "plan": plan},
    )
