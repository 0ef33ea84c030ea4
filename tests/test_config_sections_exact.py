"""orchestrator.yaml's sections, exactly: each value read, each error naming file, key, value."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config import OrchestratorConfig, load_config
from orchestrator.config.metrics import MetricsConfig
from orchestrator.config.runtime import RuntimeSettings, SwarmSettings
from orchestrator.errors import InvalidConfig
from orchestrator.home import Home


def load(home: Path, text: str, monkeypatch) -> OrchestratorConfig:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("ORCHESTRATOR_PROJECT", raising=False)
    monkeypatch.delenv("ORCHESTRATOR_HTTP_TOKEN", raising=False)
    (home / "orchestrator.yaml").write_text(text)
    return load_config(Home(home))


def error(home: Path, text: str, monkeypatch) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidConfig) as caught:
        load(home, text, monkeypatch)
    return str(caught.value).replace(str(home), "HOME")


def test_runtime_defaults(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    config = load(home, "runtime: {}\n", monkeypatch)
    assert config.runtime == RuntimeSettings("docker", SwarmSettings())
    assert SwarmSettings() == SwarmSettings("orchestrator-runners", "orchestrator", 7070, ())
    assert config.runtime.swarm.address == "orchestrator:7070"


def test_runtime_swarm_all_keys(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    config = load(
        home,
        "runtime:\n  backend: swarm\n  swarm:\n    network: net_1.a\n    daemon: d.example\n"
        "    port: 65535\n    constraints: [' node.labels.zone == east ', 'engine.labels.x!=y']\n",
        monkeypatch,
    )
    assert config.runtime == RuntimeSettings(
        "swarm",
        SwarmSettings(
            "net_1.a", "d.example", 65535, ("node.labels.zone == east", "engine.labels.x!=y")
        ),
    )
    assert config.runtime.swarm.address == "d.example:65535"


def test_runtime_sixteen_constraints_pass(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    items = ", ".join(f"'node.labels.n{i} == v'" for i in range(16))
    config = load(
        home, f"runtime:\n  swarm:\n    port: 1\n    constraints: [{items}]\n", monkeypatch
    )
    assert len(config.runtime.swarm.constraints) == 16 and config.runtime.swarm.port == 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "runtime:\n  backend: podman\n",
            "HOME/orchestrator.yaml:2: runtime.backend: got 'podman'; valid values: docker, swarm",
        ),
        (
            "runtime:\n  bogus: 1\n",
            "HOME/orchestrator.yaml:2: runtime.bogus: unknown key; valid keys here: backend, swarm",
        ),
        (
            "runtime:\n  swarm:\n    extra: 1\n",
            "HOME/orchestrator.yaml:3: runtime.swarm.extra: unknown key; valid keys here: "
            "constraints, daemon, network, port",
        ),
        (
            "runtime:\n  swarm:\n    port: 0\n",
            "HOME/orchestrator.yaml:3: runtime.swarm.port: got 0; expected a port from 1 to 65535",
        ),
        (
            "runtime:\n  swarm:\n    port: 65536\n",
            "HOME/orchestrator.yaml:3: runtime.swarm.port: got 65536; "
            "expected a port from 1 to 65535",
        ),
        (
            "runtime:\n  swarm:\n    constraints: x\n",
            "HOME/orchestrator.yaml:3: runtime.swarm.constraints: must be a list of at most 16 "
            "placement constraints, such as ['node.labels.orchestrator == groups']",
        ),
        (
            "runtime:\n  swarm:\n    constraints: [1]\n",
            "HOME/orchestrator.yaml:3: runtime.swarm.constraints[0]: got 1; expected a Swarm "
            "placement constraint such as 'node.labels.orchestrator == groups' or "
            "'node.hostname != edge-1'",
        ),
    ],
)
def test_runtime_errors(home: Path, monkeypatch, text: str, expected: str) -> None:  # type: ignore[no-untyped-def]
    assert error(home, text, monkeypatch) == expected


def test_runtime_seventeen_constraints_refused(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    items = ", ".join(f"'node.labels.n{i} == v'" for i in range(17))
    message = error(home, f"runtime:\n  swarm:\n    constraints: [{items}]\n", monkeypatch)
    assert "runtime.swarm.constraints: must be a list of at most 16" in message


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("network", "-bad"),
        ("network", "a" * 64),
        ("daemon", "Upper"),
        ("daemon", "a" * 254),
        ("constraints", "['node.role = manager']"),
        ("constraints", "['other.x == y']"),
    ],
)
def test_runtime_swarm_bad_names(home: Path, monkeypatch, key: str, value: str) -> None:  # type: ignore[no-untyped-def]
    message = error(home, f"runtime:\n  swarm:\n    {key}: {value}\n", monkeypatch)
    assert f"runtime.swarm.{key}" in message and "orchestrator.yaml:3" in message


def test_metrics_defaults(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    assert load(home, "metrics: {}\n", monkeypatch).metrics == MetricsConfig(True, None, False, 100)


def test_metrics_all_keys(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    config = load(
        home,
        "metrics:\n  listen: 0.0.0.0:9464\n  allow_remote: true\n  max_groups: 10000\n",
        monkeypatch,
    )
    assert config.metrics == MetricsConfig(True, "0.0.0.0:9464", True, 10000)
    off = load(home, "metrics:\n  enabled: false\n  max_groups: 1\n", monkeypatch)
    assert off.metrics == MetricsConfig(False, None, False, 1)
    local = load(home, "metrics:\n  listen: 127.0.0.1:9464\n", monkeypatch)
    assert local.metrics == MetricsConfig(True, "127.0.0.1:9464", False, 100)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "metrics:\n  enabled: false\n  listen: 127.0.0.1:9464\n",
            "HOME/orchestrator.yaml:3: metrics.listen: is set while metrics.enabled is false; "
            "remove one",
        ),
        (
            "metrics:\n  listen: 0.0.0.0:9464\n",
            "HOME/orchestrator.yaml:2: metrics.listen: 0.0.0.0 is not a loopback address; the "
            "metrics listener has no TLS and no token: let only Prometheus reach it, and set "
            "metrics.allow_remote: true to listen there",
        ),
        (
            "metrics:\n  max_groups: 0\n",
            "HOME/orchestrator.yaml:2: metrics.max_groups: got 0; expected 1 to 10,000",
        ),
        (
            "metrics:\n  max_groups: 10001\n",
            "HOME/orchestrator.yaml:2: metrics.max_groups: got 10001; expected 1 to 10,000",
        ),
        (
            "metrics:\n  foo: 1\n",
            "HOME/orchestrator.yaml:2: metrics.foo: unknown key; valid keys here: allow_remote, "
            "enabled, listen, max_groups",
        ),
        (
            "metrics:\n  listen: '" + "1" * 101 + "'\n",
            "HOME/orchestrator.yaml:2: metrics.listen: is 101 characters; at most 100 allowed",
        ),
    ],
)
def test_metrics_errors(home: Path, monkeypatch, text: str, expected: str) -> None:  # type: ignore[no-untyped-def]
    assert error(home, text, monkeypatch) == expected
