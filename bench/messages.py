"""The message path.

warm-turn: one message through the daemon to a running group with the offline provider
(received by the host -> reply stored: queue commit, delivery over the runner socket,
the turn, replies committed), against the floor of a raw round trip over the same
transport (a frame each way on a Unix socket) to a trivial echo peer in a container of
the same image. Interleaved. Goal: p50 <= 20 ms; the ratio with a goal is
warm-turn-durable's (<= 2).

throughput: N messages spread over 10 groups at once, until all replies are stored,
against the same number of echo round trips on as many parallel connections as the
daemon runs turns.

warm-turn-durable: the same warm turn against the least its durability needs: one synced
commit to the state database and one synced transcript append, in the same run.

warm-turn-metrics: the warm turn with the daemon's metrics on (the default: a counter
and a histogram observation at the turn's end) against the same turn with them off
(``metrics.enabled: false``), on one daemon and group, interleaved. Scrapes are not
part of it: they run on the scraper's own thread. Goal: metrics on cost at most 5%
more (ratio <= 1.05).
"""

from __future__ import annotations

import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from bench.harness import Result, Series, interleaved

WARM = "warm-turn"
THROUGHPUT = "throughput"
METRICS = "warm-turn-metrics"
DURABLE = "warm-turn-durable"
ECHO = r"""
import os, socket, struct, threading
path = '/peer/echo.sock'
s = socket.socket(socket.AF_UNIX); s.bind(path); s.listen(64)
def serve(c):
    with c:
        while True:
            head = c.recv(4, socket.MSG_WAITALL)
            if len(head) < 4:
                return
            body = c.recv(struct.unpack('>I', head)[0], socket.MSG_WAITALL)
            c.sendall(head + body)
while True:
    conn, _ = s.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""


class Echo:
    """The floor's peer: frames echoed over the same kind of socket, from a container."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def request(self, message: dict[str, object], timeout: float = 60.0) -> dict[str, object]:
        from orchestrator import wire

        return wire.request(self.path, message, timeout)


@contextmanager
def _setup(groups: int) -> Iterator[tuple[object, list[str], object]]:
    from orchestrator.config import DEFAULT_IMAGE_REPOSITORY, OrchestratorConfig
    from orchestrator.daemon.core import Daemon
    from orchestrator.groups.config import GroupConfig
    from orchestrator.home import Home
    from orchestrator.image.agent import build_agent_image
    from orchestrator.runtime.base import LABEL_PROJECT
    from orchestrator.runtime.docker import DockerBackend
    from orchestrator.runtime.engine import connect
    from orchestrator.runtime.lifecycle import GroupRuntime, default_skills_root
    from orchestrator.store.messages import MessageQueue

    client = connect()
    image = build_agent_image(client, DEFAULT_IMAGE_REPOSITORY, offline=True).tag
    project = f"bench-{uuid.uuid4().hex[:6]}"
    backend = DockerBackend(client)
    with tempfile.TemporaryDirectory(prefix="bench-messages-") as tmp:
        home = Home(Path(tmp) / "home")
        home.ensure_writable()
        config = OrchestratorConfig(project=project, mount_allowlist=Path(tmp) / "none")
        runtime = GroupRuntime(
            home, config, backend, lambda: image, skills_root=default_skills_root()
        )
        folders = []
        for i in range(groups):
            group = runtime.store.add(GroupConfig(name=f"bench {i}", creators=("b",)))
            runtime.ensure_running(group)
            folders.append(group.folder)
        peer_dir = Path(tmp) / "peer"
        peer_dir.mkdir(mode=0o777)
        peer_dir.chmod(0o777)
        peer = client.containers.create(
            image,
            ["python3", "-c", ECHO],
            user="10001:10001",
            network_mode="none",
            labels={"org.orchestrator.bench": project},
            read_only=True,
            volumes={str(peer_dir): {"bind": "/peer", "mode": "rw"}},
        )
        peer.start()
        echo = Echo(peer_dir / "echo.sock")
        deadline = time.monotonic() + 30
        while True:
            try:
                echo.request({"op": "ping"}, timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("echo peer: " + peer.logs().decode()) from None
                time.sleep(0.05)
        daemon = Daemon(home, config, runtime, MessageQueue(home.state_dir / "queue.db"))
        daemon.start()
        try:
            yield daemon, folders, echo
        finally:
            daemon.drain(5)
            peer.remove(force=True)  # not a group container: reconcile would call it an orphan
            for container in backend.list({LABEL_PROJECT: project}):
                backend.remove(container.name)
            client.close()


def warm_turn(quick: bool) -> Result:
    from orchestrator.daemon.core import Daemon

    with _setup(1) as (daemon, folders, echo):
        assert isinstance(daemon, Daemon) and isinstance(echo, Echo)
        folder = folders[0]

        def target() -> None:
            message = daemon.submit(folder, "hello", chat="bench", sender="b", channel="bench")
            done = daemon.wait(message.id, 60)
            assert done is not None and done.state == "done", done

        payload = {"op": "turn", "turn": {"turn_id": "x", "chat": "bench", "text": "hello"}}

        def floor() -> None:
            echo.request(payload)

        t, f = interleaved(
            target,
            floor,
            100 if quick else 500,
            target_label="message -> reply stored (offline provider)",
            floor_label="echo round trip, same transport",
        )
    return Result(WARM, t, f, note="goal: p50 <= 20 ms (the ratio's: warm-turn-durable's)")


def warm_turn_durable(quick: bool) -> Result:
    """The warm turn against what its durability needs at the least, in the same run: one
    synced commit of a message row to the state database (WAL, synchronous FULL, as the
    queue commits it) and one synced append of a line to a transcript in the group's
    sessions folder (what the runner writes for the turn). Goal: ratio <= 2."""
    import json
    import os
    import sqlite3

    from orchestrator.daemon.core import Daemon

    with _setup(1) as (daemon, folders, _echo):
        assert isinstance(daemon, Daemon)
        folder = folders[0]
        db = sqlite3.connect(daemon.home.state_dir / "floor.db", isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("CREATE TABLE IF NOT EXISTS m (id TEXT, body TEXT)")
        transcript = daemon.runtime.store.load(folder).sessions_dir / "floor.jsonl"
        line = json.dumps({"t": "msg", "role": "user", "content": "hello"}).encode() + b"\n"

        def target() -> None:
            message = daemon.submit(folder, "hello", chat="bench", sender="b", channel="bench")
            done = daemon.wait(message.id, 60)
            assert done is not None and done.state == "done", done

        def floor() -> None:
            db.execute("BEGIN IMMEDIATE")
            db.execute("INSERT INTO m VALUES (?, ?)", ("id", "hello"))
            db.execute("COMMIT")
            fd = os.open(transcript, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)

        t, f = interleaved(
            target,
            floor,
            100 if quick else 500,
            target_label="message -> reply stored (offline provider)",
            floor_label="a synced queue commit + a synced transcript append",
        )
        db.close()
    return Result(DURABLE, t, f, note="goal: ratio <= 2 (the turn against its durability)")


def warm_turn_metrics(quick: bool) -> Result:
    from orchestrator.daemon.core import Daemon
    from orchestrator.metrics import Metrics

    with _setup(1) as (daemon, folders, _echo):
        assert isinstance(daemon, Daemon) and daemon.metrics.enabled
        folder = folders[0]
        on, off = daemon.metrics, Metrics(daemon, daemon.relay.usage, enabled=False)

        def turn(metrics: Metrics) -> Callable[[], None]:
            def run() -> None:
                daemon.metrics = metrics  # read by the turn's delivery as it ends
                message = daemon.submit(folder, "hello", chat="bench", sender="b", channel="bench")
                done = daemon.wait(message.id, 60)
                assert done is not None and done.state == "done", done

            return run

        t, f = interleaved(
            turn(on),
            turn(off),
            100 if quick else 500,
            target_label="message -> reply stored, metrics on",
            floor_label="the same, metrics off",
        )
        counted = on.registry.get_sample_value(
            "orchestrator_turns_total", {"group": folder, "outcome": "delivered"}
        )
    return Result(
        METRICS,
        t,
        f,
        note="goal: metrics on cost at most 5% more (ratio <= 1.05)",
        extra={"turns_counted_with_metrics_on": counted},
    )


def throughput(quick: bool) -> Result:
    """A burst of messages over 10 groups: each message's time from submit to its reply
    stored (hundreds of samples, so the p99 means something), against the same number of
    echo round trips through the same kind of socket at the same concurrency. One
    unmeasured warm-up round first; the rate is messages per second of a whole burst."""
    from orchestrator.daemon.core import Daemon

    count = 100 if quick else 400
    with _setup(10) as (daemon, folders, echo):
        assert isinstance(daemon, Daemon) and isinstance(echo, Echo)
        rounds = 2 if quick else 5
        payload = {"op": "turn", "turn": {"turn_id": "x", "chat": "c", "text": "hello"}}
        target, floor = Series("submit -> reply stored"), Series("echo round trip")
        done_at: dict[str, float] = {}
        daemon.add_listener(lambda message_id: done_at.setdefault(message_id, time.perf_counter()))
        bursts: list[float] = []

        def burst(record: bool) -> None:
            sent: dict[str, float] = {}
            start = time.perf_counter()
            for i in range(count):
                message = daemon.submit(
                    folders[i % 10], "hello", chat=f"c{i % 3}", sender="b", channel="bench"
                )
                sent[message.id] = time.perf_counter()
            for message_id in sent:
                finished = daemon.wait(message_id, 120)
                assert finished is not None and finished.state == "done"
            if record:
                bursts.append(time.perf_counter() - start)
                while any(m not in done_at for m in sent):  # the last listener calls
                    time.sleep(0.001)
                target.samples.extend(done_at[m] - t for m, t in sent.items())

            def one(_: int) -> float:
                began = time.perf_counter()
                echo.request(payload)
                return time.perf_counter() - began

            with ThreadPoolExecutor(daemon.concurrency) as pool:
                latencies = list(pool.map(one, range(count)))
            if record:
                floor.samples.extend(latencies)

        burst(record=False)  # warm-up: containers, sessions, caches
        for _ in range(rounds):
            burst(record=True)
        rate = count / sorted(bursts)[len(bursts) // 2]
    return Result(
        THROUGHPUT,
        target,
        floor,
        note=(
            f"{rounds} bursts of {count} messages over 10 groups after a warm-up, "
            f"concurrency {daemon.concurrency}; a message's latency includes its wait in "
            "the queue behind the rest of its burst"
        ),
        extra={"messages_per_second": round(rate, 1), "samples": len(target.samples)},
    )
