"""The ``metrics`` section of orchestrator.yaml: Prometheus metrics of the daemon.

    metrics:
      enabled: true            # false: nothing is counted and /metrics answers 404
      listen: 127.0.0.1:9464   # a listener of its own, without a token (none by default)
      allow_remote: false      # may listen be on a non-loopback address
      max_groups: 100          # groups with series of their own; the rest are "_other"

The operator's token reads ``/metrics`` on the HTTP API whenever metrics are on; the
listener of ``listen`` serves them to anyone who reaches it, so it is on loopback unless
``allow_remote`` says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.validate import MappingReader

DEFAULT_MAX_GROUPS = 100
MAX_GROUPS_CEILING = 10_000


@dataclass(frozen=True)
class MetricsConfig:
    enabled: bool = True
    listen: str | None = None  # HOST:PORT of the listener without a token; None: none
    allow_remote: bool = False
    max_groups: int = DEFAULT_MAX_GROUPS


def parse_metrics(reader: MappingReader) -> MetricsConfig:
    """The ``metrics`` mapping; InvalidConfig naming the key when a value is wrong."""
    from orchestrator.config import listen_problem

    reader.reject_unknown(["enabled", "listen", "allow_remote", "max_groups"])
    enabled = reader.boolean("enabled", True)
    allow_remote = reader.boolean("allow_remote", False)
    max_groups = reader.whole_number(
        "max_groups", DEFAULT_MAX_GROUPS, 1, MAX_GROUPS_CEILING, f"1 to {MAX_GROUPS_CEILING:,}"
    )
    listen = None
    if "listen" in reader.data:
        listen = reader.text("listen", max_chars=100)
        if not enabled:
            raise reader.fail("listen", "is set while metrics.enabled is false; remove one")
        problem = listen_problem(listen, allow_remote, section="metrics")
        if problem:
            raise reader.fail("listen", problem)
    return MetricsConfig(
        enabled=enabled, listen=listen, allow_remote=allow_remote, max_groups=max_groups
    )
