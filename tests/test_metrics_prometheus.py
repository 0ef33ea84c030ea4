"""A real Prometheus (Debian's, unpacked by scripts/setup-prometheus) scrapes the metrics
listener of a real daemon (echo runners on real sockets: no engine) every second, and
PromQL through its HTTP API sees the turns the daemon ran.

Skipped with the reason on a machine without it; under CI=true its absence is a
failure."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import OrchestratorConfig
from orchestrator.config.metrics import MetricsConfig
from orchestrator.daemon.core import Daemon
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from orchestrator.runtime.fake import FakeBackend
from orchestrator.runtime.lifecycle import GroupRuntime
from orchestrator.store.messages import DONE, open_queue
from tests.fakerunner import FakeRunner

PROMETHEUS = Path(__file__).resolve().parent.parent / ".cache/prometheus/root/usr/bin/prometheus"


def _prometheus() -> Path:
    if not os.access(PROMETHEUS, os.X_OK):
        reason = f"no Prometheus at {PROMETHEUS}: run scripts/setup-prometheus"
        if os.environ.get("CI") == "true":
            pytest.fail(reason + "; under CI=true the Prometheus test must run")
        pytest.skip(reason)
    return PROMETHEUS


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def daemon(home: Path) -> Iterator[Daemon]:
    """A started daemon with group fam (an echo runner) and its metrics listener."""
    h = Home(home)
    GroupStore(h).add(GroupConfig(name="fam", creators=("op",)))
    config = OrchestratorConfig(
        project="t",
        mount_allowlist=home / "none.yaml",
        metrics=MetricsConfig(listen=f"127.0.0.1:{_port()}"),
    )
    runtime = GroupRuntime(h, config, FakeBackend(), lambda: "img:1", ready=lambda _: True)
    runner = FakeRunner(h.runtime_dir("fam") / "runner.sock")
    d = Daemon(h, config, runtime, open_queue(h), concurrency=2)
    d.start()
    try:
        yield d
    finally:
        d.drain(1)
        runner.close()
        d.relay.usage.close()
        d.queue.close()


@pytest.fixture
def prometheus(daemon: Daemon, tmp_path: Path) -> Iterator[str]:
    """Prometheus on a loopback port, scraping the daemon's listener every second, its
    storage in a temporary folder; its API's base URL. Killed at the end."""
    binary = _prometheus()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: orchestrator\n"
        f"    static_configs:\n      - targets: ['{daemon.config.metrics.listen}']\n"
    )
    listen = f"127.0.0.1:{_port()}"
    log = (tmp_path / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            str(binary),
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address={listen}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://{listen}"
    try:
        _until(lambda: _ready(base), "Prometheus to be ready", process, tmp_path)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        log.close()


def _ready(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/-/ready", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _until(predicate: Any, what: str, process: subprocess.Popen[bytes], logs: Path) -> None:
    deadline = time.monotonic() + 60
    while not predicate():
        if process.poll() is not None:
            pytest.fail(f"Prometheus exited: {(logs / 'prometheus.log').read_text()[-2000:]}")
        assert time.monotonic() < deadline, f"waited too long for {what}"
        time.sleep(0.2)


def query(base: str, promql: str) -> list[dict[str, Any]]:
    """The vector a PromQL query answers now."""
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=10) as response:
        answer = json.loads(response.read())
    assert answer["status"] == "success", answer
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


def scalar(base: str, promql: str) -> float | None:
    """The one value a query answers, or None when it answers none."""
    result = query(base, promql)
    assert len(result) <= 1, result
    return float(result[0]["value"][1]) if result else None


def turns(daemon: Daemon, count: int) -> None:
    for i in range(count):
        message = daemon.submit("fam", "hi", chat=f"c{i}", sender="op", channel="cli")
        done = daemon.wait(message.id, 30)
        assert done is not None and done.state == DONE, done


def test_prometheus_scrapes_the_turns_and_answers_promql(daemon: Daemon, prometheus: str) -> None:
    delivered = 'orchestrator_turns_total{group="fam",outcome="delivered"}'
    turns(daemon, 2)
    deadline = time.monotonic() + 60
    while scalar(prometheus, delivered) != 2:
        assert time.monotonic() < deadline, "Prometheus never scraped the first turns"
        time.sleep(0.2)
    turns(daemon, 3)  # after a scrape: the rate over the last minute sees them
    while scalar(prometheus, delivered) != 5:
        assert time.monotonic() < deadline, "Prometheus never scraped the later turns"
        time.sleep(0.2)
    up = query(prometheus, 'up{job="orchestrator"}')
    assert [float(r["value"][1]) for r in up] == [1.0]
    assert scalar(prometheus, 'sum(orchestrator_turns_total{outcome="failed"})') == 0
    assert scalar(prometheus, "sum(orchestrator_turn_duration_seconds_count)") == 5
    median = scalar(
        prometheus,
        "histogram_quantile(0.5, sum by (le) "
        "(rate(orchestrator_turn_duration_seconds_bucket[1m])))",
    )
    assert median is not None and math.isfinite(median) and median > 0
    assert scalar(prometheus, 'orchestrator_queue_messages{group="fam",state="queued"}') == 0
    assert scalar(prometheus, 'orchestrator_containers{group="fam",state="absent"}') == 1


DASHBOARD = Path(__file__).resolve().parent.parent / "deploy/grafana/orchestrator.json"


def dashboard_queries() -> list[str]:
    """The PromQL of every panel of the Grafana dashboard, with Grafana's variables as
    it would fill them in (every group, a one-minute rate, a five-minute range)."""
    dashboard = json.loads(DASHBOARD.read_text())
    return [
        target["expr"]
        .replace("$group", ".*")
        .replace("$__rate_interval", "1m")
        .replace("$__range", "5m")
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    ]


def test_every_query_of_the_grafana_dashboard_is_answered(daemon: Daemon, prometheus: str) -> None:
    turns(daemon, 1)
    deadline = time.monotonic() + 60
    while scalar(prometheus, 'sum(orchestrator_turns_total{outcome="delivered"})') != 1:
        assert time.monotonic() < deadline, "Prometheus never scraped the turn"
        time.sleep(0.2)
    queries = dashboard_queries()
    assert len(queries) >= 15
    for promql in queries:
        query(prometheus, promql)  # a query Prometheus refuses fails here
