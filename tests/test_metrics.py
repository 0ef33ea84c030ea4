"""The daemon's Prometheus metrics without an engine: the values after real turns (the
fake provider through the relay, runners on real sockets), the cardinality cap, the
two ways they are served (/metrics behind the operator's token, the listener of
metrics.listen without one) and the metrics section of orchestrator.yaml."""

from __future__ import annotations

import asyncio
import os
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from orchestrator import wire
from orchestrator.config import OrchestratorConfig, load_config
from orchestrator.config.accounts import HttpToken, http_tokens
from orchestrator.config.metrics import MetricsConfig
from orchestrator.daemon.core import Daemon
from orchestrator.errors import InvalidConfig, OrchestratorError
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from orchestrator.metrics.groups import OTHER, GroupSlots
from orchestrator.runtime.fake import FakeBackend
from orchestrator.runtime.lifecycle import GroupRuntime
from orchestrator.service.web import WebServer
from orchestrator.store.messages import DONE, open_queue
from orchestrator.store.usage import Call, UsageStore
from tests.fakerunner import FakeRunner, echo, silent
from tests.relayrig import provider, say, served, setup  # noqa: F401 (fixtures)

TOKEN = "o" * 24
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(daemon: Daemon) -> Samples:
    """Every sample of one scrape: (name, sorted labels) -> value."""
    body, content_type = daemon.metrics.exposition()
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def series(samples: Samples, name: str, label: str) -> set[str]:
    """The values ``label`` takes in the series of ``name``."""
    return {dict(labels)[label] for n, labels in samples if n == name}


def test_turns_model_usage_queue_and_pauses_after_a_few_turns(served, provider) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = served["daemon"]
    for _ in range(3):
        say(served, "hi", "alice", group="fam")
    say(served, "hello", "bob", group="work")
    # the money columns as a priced model's calls have them
    daemon.queue.transaction(
        lambda db: db.execute(
            "UPDATE usage SET cost=0.25, currency='EUR', cache_read_tokens=2,"
            " cache_write_tokens=1 WHERE group_folder='fam'"
        )
    )
    daemon.queue.pause("work", "operator", "maintenance")
    waiting = daemon.submit("work", "later", chat="c", sender="alice", channel="cli")
    dead = daemon.submit("work", "never", chat="d", sender="alice", channel="cli")
    daemon.queue.transaction(
        lambda db: db.execute("UPDATE messages SET state='dead' WHERE id=?", (dead.id,))
    )

    samples = scrape(daemon)
    turns = "orchestrator_turns_total"
    assert value(samples, turns, group="fam", outcome="delivered") == 3
    assert value(samples, turns, group="work", outcome="delivered") == 1
    for outcome in ("failed", "deferred", "cancelled"):
        assert value(samples, turns, group="fam", outcome=outcome) == 0
    assert value(samples, "orchestrator_turn_duration_seconds_count", group="fam") == 3
    assert value(samples, "orchestrator_turn_duration_seconds_count", group="work") == 1
    assert value(samples, "orchestrator_turn_duration_seconds_bucket", group="fam", le="+Inf") == 3

    call = {"provider": "fake", "model": "m-1", "purpose": "turn"}
    calls = "orchestrator_model_calls_total"
    assert value(samples, calls, group="fam", outcome="ok", **call) == 3  # one call a turn
    assert value(samples, calls, group="work", outcome="ok", **call) == 1
    tokens = "orchestrator_model_tokens_total"
    fam_tokens = {
        kind: value(samples, tokens, group="fam", kind=kind, **call)
        for kind in ("input", "output", "cache_read", "cache_write")
    }
    assert fam_tokens == {"input": 33, "output": 21, "cache_read": 6, "cache_write": 3}
    assert value(samples, tokens, group="work", kind="output", **call) == 7
    cost = "orchestrator_model_cost_total"
    assert value(samples, cost, group="fam", currency="EUR", **call) == 0.75
    assert series(samples, cost, "group") == {"fam"}  # work's calls had no prices

    assert value(samples, "orchestrator_queue_messages", group="work", state="queued") == 1
    assert value(samples, "orchestrator_queue_messages", group="fam", state="queued") == 0
    assert value(samples, "orchestrator_dead_letters", group="work") == 1
    assert value(samples, "orchestrator_queue_oldest_age_seconds", group="work") >= 0
    assert value(samples, "orchestrator_queue_oldest_age_seconds", group="fam") == 0
    assert value(samples, "orchestrator_pauses", group="work", holder="operator") == 1
    assert series(samples, "orchestrator_pauses", "group") == {"work"}
    assert value(samples, "orchestrator_containers", group="fam", state="absent") == 1
    assert value(samples, "orchestrator_engine_up") == 1
    assert value(samples, "orchestrator_groups") == 2
    assert value(samples, "orchestrator_group_disk_limit_bytes", group="fam") == 1024**3
    assert value(samples, "orchestrator_group_disk_bytes", group="fam") > 0
    assert not any("chat" in dict(labels) or "sender" in dict(labels) for _, labels in samples)

    # the next scrape adds only the calls made since; the totals go on
    say(served, "again", "alice", group="fam")
    again = scrape(daemon)
    assert value(again, calls, group="fam", outcome="ok", **call) == 4
    assert value(again, tokens, group="fam", kind="input", **call) == 44
    assert value(again, cost, group="fam", currency="EUR", **call) == 0.75  # not priced
    assert value(again, turns, group="fam", outcome="delivered") == 4
    daemon.queue.resume("work")
    finished = daemon.wait(waiting.id, 60)
    assert finished is not None and finished.state == DONE


def _daemon(home: Path, folders: tuple[str, ...], **metrics: Any) -> Daemon:
    h = Home(home)
    for folder in folders:
        GroupStore(h).add(GroupConfig(name=folder, creators=("op",)))
    config = OrchestratorConfig(
        project="t",
        mount_allowlist=home / "none.yaml",
        http_token=TOKEN,
        metrics=MetricsConfig(**metrics),
    )
    runtime = GroupRuntime(h, config, FakeBackend(), lambda: "img:1", ready=lambda _: True)
    return Daemon(h, config, runtime, open_queue(h), concurrency=2)


@pytest.fixture
def four(home: Path) -> Iterator[tuple[Daemon, dict[str, FakeRunner]]]:
    """A daemon (not started) with groups a, b, c, d answered by echo runners, at most
    two with series of their own; d was active last, then c, b, a."""
    daemon = _daemon(home, ("a", "b", "c", "d"), max_groups=2)
    runners = {}
    for rank, folder in enumerate("abcd"):
        runners[folder] = FakeRunner(daemon.home.runtime_dir(folder) / "runner.sock")
        daemon.runtime.activity.touch(folder)
        os.utime(daemon.runtime.activity.root / folder, (1_000_000 + rank, 1_000_000 + rank))
    try:
        yield daemon, runners
    finally:
        daemon.drain(1)
        for runner in runners.values():
            runner.close()
        daemon.relay.usage.close()
        daemon.queue.close()


def test_at_most_max_groups_have_series_and_the_rest_are_summed_as_other(four) -> None:  # type: ignore[no-untyped-def]
    daemon, _runners = four
    first = scrape(daemon)  # the two most recently active take the places
    assert series(first, "orchestrator_turns_total", "group") == {"c", "d", OTHER}
    usage = UsageStore(daemon.queue.path)
    try:
        for folder, tokens in (("a", 1), ("b", 10), ("c", 100), ("d", 1000)):
            usage.record(
                Call(
                    message_id=f"m-{folder}",
                    group=folder,
                    provider="p",
                    model="m",
                    purpose="turn",
                    started=time.time(),
                    latency_ms=5.0,
                    input_tokens=tokens,
                    output_tokens=0,
                    outcome="ok",
                )
            )
    finally:
        usage.close()
    daemon.start()
    for folder, count in (("a", 1), ("b", 2), ("c", 1), ("d", 3)):
        for i in range(count):
            message = daemon.submit(folder, "hi", chat=f"c{i}", sender="op", channel="cli")
            done = daemon.wait(message.id, 30)
            assert done is not None and done.state == DONE, done
    samples = scrape(daemon)
    turns = "orchestrator_turns_total"
    assert series(samples, turns, "group") == {"c", "d", OTHER}  # a and b ran: still _other
    assert value(samples, turns, group="d", outcome="delivered") == 3
    assert value(samples, turns, group="c", outcome="delivered") == 1
    assert value(samples, turns, group=OTHER, outcome="delivered") == 3  # a 1 + b 2
    duration = "orchestrator_turn_duration_seconds_count"
    assert value(samples, duration, group=OTHER) == 3
    tokens = {"provider": "p", "model": "m", "purpose": "turn", "kind": "input"}
    assert value(samples, "orchestrator_model_tokens_total", group=OTHER, **tokens) == 11
    assert value(samples, "orchestrator_model_tokens_total", group="d", **tokens) == 1000
    containers = "orchestrator_containers"
    assert value(samples, containers, group=OTHER, state="absent") == 2
    assert value(samples, "orchestrator_group_disk_limit_bytes", group=OTHER) == 2 * 1024**3
    for name in ("orchestrator_queue_messages", "orchestrator_group_disk_bytes", duration):
        assert series(samples, name, "group") == {"c", "d", OTHER}, name

    # a removed group gives its place to the most recently active of the rest
    store = daemon.runtime.store
    store.remove(store.load("c"), purge=True)
    os.utime(daemon.runtime.activity.root / "a", (2_000_000, 2_000_000))
    os.utime(daemon.runtime.activity.root / "b", (1_500_000, 1_500_000))
    after = scrape(daemon)
    assert series(after, turns, "group") == {"a", "d", OTHER}
    assert value(after, turns, group="a", outcome="delivered") == 0  # counted from now on
    assert value(after, "orchestrator_model_tokens_total", group=OTHER, **tokens) == 110
    assert value(after, "orchestrator_groups") == 3


def test_group_places_are_kept_freed_by_removal_and_cut_by_a_lower_limit() -> None:
    slots = GroupSlots(2)
    assert slots.label("x") == "x"  # a turn takes a free place
    assert slots.refresh({"x": 1.0, "y": 5.0, "z": 9.0}, 2) == set()
    assert slots.named == {"x", "z"}  # x kept its place; z was the most recent of the rest
    assert slots.label("y") == OTHER
    assert slots.of("y") == OTHER and slots.of("z") == "z"
    assert slots.refresh({"y": 5.0, "z": 9.0, "w": None}, 2) == {"x"}
    assert slots.named == {"y", "z"}
    assert slots.refresh({"y": 5.0, "z": 9.0, "w": None}, 1) == {"y"}
    assert slots.named == {"z"}


def test_failed_and_cancelled_turns_are_counted_by_outcome(home: Path) -> None:
    daemon = _daemon(home, ("flaky", "stuck"))
    answers = iter(["no", "yes"])

    def flaky(conn: socket.socket, request: dict[str, Any]) -> None:
        if next(answers) == "no":
            wire.send_frame(conn, {"ok": False, "error": "not now"})
        else:
            echo(conn, request)

    runners = [
        FakeRunner(daemon.home.runtime_dir("flaky") / "runner.sock", flaky),
        FakeRunner(daemon.home.runtime_dir("stuck") / "runner.sock", silent),
    ]
    daemon.start()
    try:
        message = daemon.submit("flaky", "hi", chat="c", sender="op", channel="cli")
        done = daemon.wait(message.id, 30)
        assert done is not None and (done.state, done.replies) == (DONE, ("echo: hi",))
        daemon.submit("stuck", "hi", chat="c", sender="op", channel="cli")
        deadline = time.monotonic() + 30
        while not daemon.running.get("stuck"):
            assert time.monotonic() < deadline, "the stuck turn never started"
            time.sleep(0.02)
        assert daemon.drain(0.2) is False  # the stuck turn is cancelled
        deadline = time.monotonic() + 30
        while daemon.active:
            assert time.monotonic() < deadline, "the cancelled turn never ended"
            time.sleep(0.02)
        samples = scrape(daemon)
        turns = "orchestrator_turns_total"
        assert value(samples, turns, group="flaky", outcome="failed") == 1
        assert value(samples, turns, group="flaky", outcome="delivered") == 1
        assert value(samples, turns, group="stuck", outcome="cancelled") == 1
        assert value(samples, turns, group="stuck", outcome="delivered") == 0
    finally:
        daemon.drain(1)  # again, when the test failed before its own
        for runner in runners:
            runner.close()
        daemon.relay.usage.close()
        daemon.queue.close()


def test_metrics_off_count_nothing(home: Path) -> None:
    daemon = _daemon(home, ("a",), enabled=False)
    try:
        daemon.metrics.turn_done("a", "delivered", 0.5)
        samples = scrape(daemon)
        assert value(samples, "orchestrator_turns_total", group="a", outcome="delivered") == 0
    finally:
        daemon.relay.usage.close()
        daemon.queue.close()


def test_containers_the_daemon_makes_are_counted_by_why(home: Path) -> None:
    daemon = _daemon(home, ("a",))
    try:
        runtime, group = daemon.runtime, daemon.runtime.store.load("a")
        runtime.ensure_running(group)  # none was there
        runtime.backend.stop(runtime.container_name(group))
        runtime.ensure_running(group)  # it had stopped
        runtime.restart(group)
        samples = scrape(daemon)
        starts = "orchestrator_container_starts_total"
        assert {
            why: value(samples, starts, group="a", why=why)
            for why in ("created", "started", "restarted")
        } == {"created": 1, "started": 1, "restarted": 1}
        assert series(samples, starts, "why") == {"created", "started", "restarted"}
        assert value(samples, "orchestrator_containers", group="a", state="running") == 1
    finally:
        daemon.relay.usage.close()
        daemon.queue.close()


def _get(
    daemon: Daemon, path: str, headers: dict[str, str], *, skip: tuple[str, ...] = ()
) -> tuple[int, str, str]:
    """Status, Content-Type (the header's name as sent, checked) and body of a GET;
    ``skip``: headers the client would add that are left out."""
    server = WebServer(daemon)
    server.api.named, problems = http_tokens(daemon.config.http_tokens, None)
    assert problems == []

    async def go() -> tuple[int, str, str]:
        async with TestClient(TestServer(server.app())) as client:
            response = await client.get(path, headers=headers, skip_auto_headers=skip)
            [content_type] = [v for k, v in response.raw_headers if k == b"Content-Type"]
            return response.status, content_type.decode(), await response.text()

    return asyncio.run(go())


def test_slash_metrics_needs_the_operators_token(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    daemon = _daemon(home, ("a",))
    monkeypatch.setenv("BRIDGE_TOKEN", "b" * 24)
    daemon.config = replace(
        daemon.config,
        http_tokens={"bridge": HttpToken("bridge", "slack:", token_env="BRIDGE_TOKEN")},
    )
    try:
        daemon.metrics.turn_done("a", "delivered", 0.5)
        assert _get(daemon, "/metrics", {})[0] == 401
        assert _get(daemon, "/metrics", {"Authorization": "Bearer wrong"})[0] == 401
        status, _, body = _get(daemon, "/metrics", {"Authorization": "Bearer " + "b" * 24})
        assert (status, body) == (
            403,
            '{"error": "only the operator\'s token (http.token) may read /metrics"}',
        )
        status, content_type, body = _get(daemon, "/metrics", {"Authorization": f"Bearer {TOKEN}"})
        assert (status, content_type) == (200, "text/plain; version=0.0.4; charset=utf-8")
        assert 'orchestrator_turns_total{group="a",outcome="delivered"} 1.0' in body
        # the format the Accept header asks for; none at all is the text format
        operator = {"Authorization": f"Bearer {TOKEN}"}
        asked = {**operator, "Accept": "application/openmetrics-text; version=1.0.0"}
        status, content_type, body = _get(daemon, "/metrics", asked)
        assert status == 200 and body.endswith("# EOF\n")
        assert content_type.startswith("application/openmetrics-text; version=1.0.0")
        status, content_type, body = _get(daemon, "/metrics", operator, skip=("Accept",))
        assert (status, content_type) == (200, "text/plain; version=0.0.4; charset=utf-8")
        assert 'orchestrator_turns_total{group="a",outcome="delivered"} 1.0' in body
        daemon.metrics.enabled = False
        status, _, body = _get(daemon, "/metrics", {"Authorization": f"Bearer {TOKEN}"})
        assert (status, body) == (
            404,
            '{"error": "metrics are off (metrics.enabled: false in orchestrator.yaml)"}',
        )
    finally:
        daemon.relay.usage.close()
        daemon.queue.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_listener_of_metrics_listen_serves_without_a_token(home: Path) -> None:
    port = _free_port()
    daemon = _daemon(home, ("a",), listen=f"127.0.0.1:{port}")
    daemon.start()
    try:
        daemon.metrics.turn_done("a", "failed", 2.0)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            content_type = response.headers["Content-Type"]
            body = response.read().decode()
        assert content_type == "text/plain; version=0.0.4; charset=utf-8"
        assert 'orchestrator_turns_total{group="a",outcome="failed"} 1.0' in body
        taken = _daemon(home / "other", (), listen=f"127.0.0.1:{port}")
        try:
            with pytest.raises(OrchestratorError, match=f"metrics.listen 127.0.0.1:{port}: "):
                taken.metrics.start()
        finally:
            taken.relay.usage.close()
            taken.queue.close()
    finally:
        daemon.drain(1)
        daemon.relay.usage.close()
        daemon.queue.close()
    with pytest.raises(urllib.error.URLError):  # stopped with the daemon
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10)


def _load(home: Path, text: str, monkeypatch) -> OrchestratorConfig:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("ORCHESTRATOR_PROJECT", raising=False)
    (home / "orchestrator.yaml").write_text(text)
    return load_config(Home(home))


def test_the_metrics_section(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    assert _load(home, "project: x\n", monkeypatch).metrics == MetricsConfig(
        enabled=True, listen=None, allow_remote=False, max_groups=100
    )
    config = _load(
        home,
        "metrics:\n  listen: '0.0.0.0:9464'\n  allow_remote: true\n  max_groups: 5\n",
        monkeypatch,
    )
    assert config.metrics == MetricsConfig(True, "0.0.0.0:9464", True, 5)
    assert _load(home, "metrics:\n  enabled: false\n", monkeypatch).metrics.enabled is False


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("metrics:\n  port: 9464\n", ":2: metrics.port: unknown key; valid keys here: "
         "allow_remote, enabled, listen, max_groups"),
        ("metrics:\n  listen: '0.0.0.0:9464'\n", "metrics.listen: 0.0.0.0 is not a loopback "
         "address; the metrics listener has no TLS and no token: let only Prometheus reach "
         "it, and set metrics.allow_remote: true to listen there"),
        ("metrics:\n  listen: '9464'\n", "metrics.listen: got '9464'; expected HOST:PORT"),
        ("metrics:\n  enabled: false\n  listen: '127.0.0.1:9464'\n",
         "metrics.listen: is set while metrics.enabled is false; remove one"),
        ("metrics:\n  max_groups: 0\n", "metrics.max_groups: got 0; expected 1 to 10,000"),
        ("metrics:\n  enabled: 'yes'\n", "metrics.enabled: must be true or false"),
        ("metrics: [1]\n", "metrics must be a mapping of keys to values"),
    ],
)  # fmt: skip
def test_bad_metrics_settings_name_the_key(home: Path, monkeypatch, text: str, needle: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidConfig) as info:
        _load(home, text, monkeypatch)
    assert needle in info.value.message


def test_the_grafana_dashboard_reads_only_series_the_daemon_has(home: Path) -> None:
    import re

    dashboard = Path(__file__).resolve().parent.parent / "deploy/grafana/orchestrator.json"
    used = set(re.findall(r"orchestrator_[a-z_]+", dashboard.read_text()))
    daemon = _daemon(home, ("a",))
    try:
        body = daemon.metrics.exposition()[0].decode()
    finally:
        daemon.relay.usage.close()
        daemon.queue.close()
    # every family, with or without samples yet (a fresh home has no model calls)
    served = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", body, re.MULTILINE):
        suffixes = ("_bucket", "_count", "_sum") if kind == "histogram" else ("",)
        served |= {name + suffix for suffix in suffixes}
    assert len(used) >= 10 and used <= served, used - served


def test_the_listener_serves_a_bounded_number_of_connections(home: Path) -> None:
    from orchestrator.metrics.listener import LISTENER_MAX_CONNECTIONS

    port = _free_port()
    daemon = _daemon(home, ("a",), listen=f"127.0.0.1:{port}")
    daemon.metrics.start()
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(LISTENER_MAX_CONNECTIONS)]
    try:
        deadline = time.monotonic() + 30
        while True:  # once the idle ones hold every place, one more is closed at once
            extra = socket.create_connection(("127.0.0.1", port))
            extra.settimeout(5)
            try:
                closed = extra.recv(1) == b""
            except ConnectionResetError:
                closed = True
            except TimeoutError:
                closed = False
            finally:
                extra.close()
            if closed:
                break
            assert time.monotonic() < deadline, "a connection over the cap was served"
        for conn in idle:
            conn.close()
        idle = []
        deadline = time.monotonic() + 30
        while True:  # their places are free again
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    assert r.status == 200
                    break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline, "the listener never served again"
                time.sleep(0.05)
    finally:
        for conn in idle:
            conn.close()
        daemon.metrics.stop()
        daemon.relay.usage.close()
        daemon.queue.close()
