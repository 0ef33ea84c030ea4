"""scale: many registered groups, some of them active, through the HTTP API.

A home with N registered groups (1,000; --quick 100), registered by the CLI 4 at a time;
the daemon as its own process (``orchestrator serve``) with the HTTP API; the first
message of each of M active groups (50; --quick 10) sent 4 at a time (each a cold
start: no container yet), then W messages (400; --quick 80) over those groups with 8 in
flight, each timed from its POST to its reply (one POST with ``?wait``, each client
thread keeping its connection); the first message of each group's chats c1 and c2
among them opens a fresh context (its session-start hook runs), so the same W messages
are sent again once every chat is open, and then once more the older way (a POST, then
a long poll, each on a new connection). The floor: the same
message path, one message at a time to a warm group, in the same run; the ratio is what
load adds to a message's median. Also printed: the registration time, the cold first
replies (p50, p99), the warm p99 and rate, the CPU time a message of the every-chat-open
load costs the load's own HTTP clients, the daemon and the containers (the engine's own
processes are not counted: they may run where this process cannot see them), the daemon's
memory, and how long ``status`` and ``group list --json`` take with N groups.

Goals: cold first reply p99 <= 1 s, warm p99 <= 50 ms, daemon RSS <= 100 MiB, status
<= 0.5 s, group list --json <= 0.3 s.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.harness import Result, Series

NAME = "scale"


def _p(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Api:
    """The load's HTTP client: each thread keeps one connection open (as a bridge's HTTP
    library does), or, with ``fresh``, opens one per request (as urllib does)."""

    def __init__(self, port: int, token: str) -> None:
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        self.token = token
        self.local = threading.local()

    def call(
        self, method: str, path: str, body: dict[str, object] | None = None, fresh: bool = False
    ) -> dict:  # type: ignore[type-arg]
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        if fresh:
            request = urllib.request.Request(
                self.base + path, data=data, method=method, headers=headers
            )
            with urllib.request.urlopen(request, timeout=120) as answer:
                return json.loads(answer.read())  # type: ignore[no-any-return]
        for attempt in (1, 2):
            kept = getattr(self.local, "connection", None)
            connection = kept or http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
            self.local.connection = connection
            try:
                connection.request(method, path, body=data, headers=headers)
                answer = connection.getresponse()
                payload = answer.read()
            except Exception as exc:
                connection.close()
                self.local.connection = None
                # the server closed a kept connection that sat idle: nothing was read
                # from it, so the request is sent once more on a new one
                closed = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)
                if kept is None or attempt == 2 or not isinstance(exc, closed):
                    raise
                continue
            if answer.status >= 400:
                raise RuntimeError(f"{method} {path}: HTTP {answer.status}: {payload[:300]!r}")
            return json.loads(payload)  # type: ignore[no-any-return]
        raise AssertionError("unreachable")

    def say(self, group: str, chat: str, two_requests: bool = False) -> float:
        """Seconds from the POST to the reply stored: one POST that waits for it, or
        (``two_requests``, each on a new connection) a POST and then a long poll."""
        started = time.perf_counter()
        body: dict[str, object] = {"text": "hello", "sender": "b", "chat": chat}
        if two_requests:
            posted = self.call("POST", f"/v1/groups/{group}/messages", body, fresh=True)
            found = posted
        else:
            found = self.call("POST", f"/v1/groups/{group}/messages?wait=60", body)
        while found["state"] not in ("done", "dead"):
            found = self.call("GET", f"/v1/messages/{found['id']}?wait=60", fresh=two_requests)
        assert found["state"] == "done", found
        return time.perf_counter() - started


def _cli(home: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", "--home", str(home), *args],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process (every thread of it), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_of(client: object, project: str, daemon_pid: int) -> dict[str, float]:
    """CPU seconds used so far by this process (the load's HTTP clients), the daemon, and
    the project's containers together (the engine's own accounting of each)."""
    api = client.api  # type: ignore[attr-defined]
    rows = api.containers(filters={"label": f"org.orchestrator.project={project}"})
    containers = sum(
        api.stats(row["Id"], stream=False, one_shot=True)["cpu_stats"]["cpu_usage"]["total_usage"]
        for row in rows
    )
    return {
        "load": time.process_time(),
        "daemon": _cpu_seconds(daemon_pid),
        "containers": containers / 1e9,
    }


def _timed(run: object) -> float:
    started = time.perf_counter()
    run()  # type: ignore[operator]
    return time.perf_counter() - started


def run(quick: bool) -> Result:
    from docker.errors import NotFound

    from orchestrator.config import DEFAULT_IMAGE_REPOSITORY
    from orchestrator.image.agent import build_agent_image
    from orchestrator.runtime.engine import connect

    registered, active, warm = (100, 10, 80) if quick else (1000, 50, 400)
    client = connect()
    build_agent_image(client, DEFAULT_IMAGE_REPOSITORY, offline=True)
    project = f"bench-{uuid.uuid4().hex[:6]}"
    token = secrets.token_hex(16)
    port = _free_port()
    env = {**os.environ, "ORCHESTRATOR_PROJECT": project, "ORCHESTRATOR_HTTP_TOKEN": token}
    extra: dict[str, object] = {}
    daemon = None
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        (home / "orchestrator.yaml").write_text(
            f"mount_allowlist: {tmp}/none.yaml\nhttp:\n  listen: 127.0.0.1:{port}\n"
        )
        names = [f"g{i:04d}" for i in range(registered)]
        try:
            with ThreadPoolExecutor(4) as pool:
                extra["register_seconds"] = round(
                    _timed(
                        lambda: list(
                            pool.map(
                                lambda n: _cli(home, env, "group", "add", n, "--creator", "b"),
                                names,
                            )
                        )
                    ),
                    1,
                )
            daemon = subprocess.Popen(
                [sys.executable, "-m", "orchestrator", "--home", str(home), "serve"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=open(home / "daemon.log", "ab"),  # noqa: SIM115 (the daemon's)
            )
            api = _Api(port, token)
            deadline = time.monotonic() + 60
            while True:
                try:
                    if api.call("GET", "/healthz").get("ok"):
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError((home / "daemon.log").read_text()[-3000:])
                time.sleep(0.1)
            chosen = names[:active]
            with ThreadPoolExecutor(4) as pool:
                cold = list(pool.map(lambda g: api.say(g, "c0"), chosen))
            floor = Series("one message at a time to a warm group (HTTP, long poll)")
            for n in range(20 if quick else 50):
                floor.samples.append(api.say(chosen[n % len(chosen)], "c0"))

            def load(series: Series, two_requests: bool = False) -> float:
                """W messages over the active groups' chats c0..c2, 8 in flight: the rate."""
                started = time.perf_counter()
                with ThreadPoolExecutor(8) as pool:
                    series.samples.extend(
                        pool.map(
                            lambda n: api.say(chosen[n % active], f"c{n % 3}", two_requests),
                            range(warm),
                        )
                    )
                return warm / (time.perf_counter() - started)

            target = Series(f"a message among {warm}, 8 in flight over {active} groups")
            rate = load(target)
            # The same load again, every chat now open: each message continues a context.
            # (Above, the first message of chats c1 and c2 in each group opened a fresh
            # context, running the session-start hook: a process each.)
            opened = Series(f"a message among {warm}, 8 in flight, every chat open")
            before = _cpu_of(client, project, daemon.pid)
            open_rate = load(opened)
            after = _cpu_of(client, project, daemon.pid)
            # where a warm message's CPU goes (ms per message), measured as CPU time, so
            # other work on the machine does not count in it
            extra |= {
                f"cpu_ms_per_message_{part}": round((after[part] - before[part]) * 1000 / warm, 2)
                for part in before
            }
            # The same again the older way: a POST, then a long poll, each on a new
            # connection (what a client without kept connections, or without ?wait on
            # the POST, sends).
            older = Series(f"a message among {warm}, every chat open, POST then long poll")
            before = _cpu_of(client, project, daemon.pid)
            older_rate = load(older, two_requests=True)
            after = _cpu_of(client, project, daemon.pid)
            extra |= {
                f"two_requests_cpu_ms_per_message_{part}": round(
                    (after[part] - before[part]) * 1000 / warm, 2
                )
                for part in before
            }
            status = statistics.median(_timed(lambda: _cli(home, env, "status")) for _ in range(3))
            listing = statistics.median(
                _timed(lambda: _cli(home, env, "group", "list", "--json")) for _ in range(3)
            )
            rss_kib = 0
            for line in Path(f"/proc/{daemon.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss_kib = int(line.split()[1])
            extra |= {
                "groups": registered,
                "active": active,
                "cold_p50_ms": round(_p(cold, 0.5) * 1000, 1),
                "cold_p99_ms": round(_p(cold, 0.99) * 1000, 1),
                "warm_p99_ms": round(target.p99 * 1000, 1),
                "messages_per_second": round(rate, 1),
                "fresh_contexts_in_warm": active * 2,
                "open_chats_p50_ms": round(opened.median * 1000, 1),
                "open_chats_p99_ms": round(opened.p99 * 1000, 1),
                "open_chats_messages_per_second": round(open_rate, 1),
                "two_requests_p50_ms": round(older.median * 1000, 1),
                "two_requests_p99_ms": round(older.p99 * 1000, 1),
                "two_requests_messages_per_second": round(older_rate, 1),
                "daemon_rss_mib": round(rss_kib / 1024, 1),
                "status_seconds": round(status, 3),
                "group_list_json_seconds": round(listing, 3),
            }
        finally:
            if daemon is not None and daemon.poll() is None:
                daemon.send_signal(signal.SIGTERM)
                try:
                    daemon.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    daemon.kill()
            for row in client.api.containers(
                all=True, filters={"label": f"org.orchestrator.project={project}"}
            ):
                with contextlib.suppress(NotFound):  # gone meanwhile
                    client.api.remove_container(row["Id"], force=True)
            client.close()
    return Result(
        NAME,
        target,
        floor,
        note=(
            "goals: cold p99 <= 1 s, warm p99 <= 50 ms, RSS <= 100 MiB, status <= 0.5 s, "
            "group list --json <= 0.3 s"
        ),
        extra=extra,
    )
