"""store-read-busy: a state store's read (``in_flight``, as a turn's reads are) while
another thread commits synced write transactions one after another, against the same
read with no writer, in rounds that alternate. A read outside a transaction runs on the
store's reader connection, which in WAL mode does not wait for the writer's lock or its
sync: the ratio is what a busy writer costs a reader. Goal: p99 ratio <= 2."""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path

from bench.harness import Result, Series

NAME = "store-read-busy"


def run(quick: bool) -> Result:
    from orchestrator.store.messages import MessageQueue

    rounds, per_round = (4, 100) if quick else (10, 300)
    target = Series("a read while another thread commits synced transactions")
    floor = Series("the same read, no writer")
    with tempfile.TemporaryDirectory(prefix="bench-store-") as tmp:
        queue = MessageQueue(Path(tmp) / "queue.db")
        message = queue.enqueue(
            group="g", session="s", chat="c", thread=None, sender="a", trust="member",
            text="hello", channel="bench",
        )  # fmt: skip
        writing, stop = threading.Event(), threading.Event()
        commits = [0]

        def update(db: object) -> None:
            db.execute(  # type: ignore[attr-defined]
                "UPDATE messages SET text=? WHERE id=?", (str(time.time()), message.id)
            )

        def writer() -> None:
            while not stop.is_set():
                if not writing.wait(0.05):
                    continue
                queue.transaction(update)
                commits[0] += 1

        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        try:
            for _ in range(rounds):
                for series, busy in ((floor, False), (target, True)):
                    if busy:
                        writing.set()
                        time.sleep(0.01)  # the writer is committing when the reads start
                    for _ in range(per_round):
                        started = time.perf_counter()
                        queue.in_flight("g")
                        series.samples.append(time.perf_counter() - started)
                        time.sleep(0.0005)
                    writing.clear()
        finally:
            stop.set()
            thread.join()
            queue.close()
    return Result(
        NAME,
        target,
        floor,
        note="goal: p99 ratio <= 2 (a read does not wait behind the writer's sync)",
        extra={
            "writer_commits": commits[0],
            "p99_ratio": round(target.p99 / floor.p99, 2) if floor.p99 else None,
        },
    )
