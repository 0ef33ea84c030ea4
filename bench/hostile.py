"""Another group's turn latency while one group attacks the daemon, against the same
figure with no attack, in one run.

The attacking group replaces its runner with one that answers pings and drips each
turn's answer a byte a second, and keeps messages queued in several chats, so it holds
every worker it is allowed to. The measured group sends one message at a time.
"""

from __future__ import annotations

import time

from bench.harness import Result, Series

NAME = "hostile-neighbour"
DRIP = r"""
import json, os, socket, struct, threading, time
path = "/run/orchestrator/runner.sock"
os.unlink(path)
s = socket.socket(socket.AF_UNIX); s.bind(path); s.listen(64)
def serve(c):
    with c:
        while True:
            head = c.recv(4, socket.MSG_WAITALL)
            if len(head) < 4:
                return
            body = json.loads(c.recv(struct.unpack(">I", head)[0], socket.MSG_WAITALL))
            if body.get("op") == "ping":
                out = json.dumps({"ok": True}).encode()
                c.sendall(struct.pack(">I", len(out)) + out)
                continue
            c.sendall(struct.pack(">I", 100000))
            try:
                while True:
                    time.sleep(1)
                    c.sendall(b" ")
            except OSError:
                return
while True:
    conn, _ = s.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""


def run(quick: bool) -> Result:
    from bench.messages import _setup
    from orchestrator.daemon.core import Daemon
    from orchestrator.groups.config import set_option

    rounds = 40 if quick else 200
    with _setup(2) as (daemon, folders, _echo):
        assert isinstance(daemon, Daemon)
        evil, good = folders
        group = daemon.runtime.store.load(evil)
        set_option(group.config_file, "turn_timeout", "3s")

        def turn() -> None:
            message = daemon.submit(good, "hello", chat="bench", sender="b", channel="bench")
            done = daemon.wait(message.id, 60)
            assert done is not None and done.state == "done", done

        for _ in range(5):
            turn()  # warm-up
        floor = Series("no attack")
        for _ in range(rounds):
            start = time.perf_counter()
            turn()
            floor.samples.append(time.perf_counter() - start)

        client = daemon.runtime.backend.client  # type: ignore[attr-defined]
        container = client.containers.get(daemon.runtime.container_name(group))
        container.exec_run(["python3", "-c", DRIP], detach=True)
        sock = daemon.runtime.home.runtime_dir(evil) / "runner.sock"
        before = sock.stat().st_ino
        while sock.stat().st_ino == before:
            time.sleep(0.05)

        def keep_attacking() -> None:
            queued = daemon.queue.counts().get("queued", 0)
            for n in range(max(0, 4 - queued)):
                daemon.submit(evil, "x", chat=f"evil{n}", sender="b", channel="bench")

        keep_attacking()
        while daemon.running.get(evil, 0) < daemon.per_group:
            time.sleep(0.05)
        target = Series("one group attacking")
        for _ in range(rounds):
            keep_attacking()
            start = time.perf_counter()
            turn()
            target.samples.append(time.perf_counter() - start)
        held = daemon.running.get(evil, 0)
    return Result(
        NAME,
        target,
        floor,
        note=(
            f"workers {daemon.concurrency}, the attacking group held {held} "
            f"(its share); {rounds} turns each, measured one after the other"
        ),
    )


__all__ = ["NAME", "run"]
