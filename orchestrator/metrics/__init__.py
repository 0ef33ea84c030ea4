"""Prometheus metrics of one daemon, on a registry of its own (never the library's
global one), with the official client library.

Two series are counted on a turn's path, by one call when the turn ends
(``Metrics.turn_done``): the turns by group and outcome, and their duration. Everything
else is read at a scrape from the daemon's own state and store (``collector``), so it
costs the turns nothing. No series is labelled with a chat or a sender, and at most
``metrics.max_groups`` groups have series of their own (``groups``: the rest are summed
under ``group="_other"``).

Served as ``/metrics`` on the HTTP API (the operator's token) and, with
``metrics.listen``, by a listener of its own without a token (``listener``). With
``metrics.enabled: false`` nothing is counted or served.
"""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import choose_encoder

from orchestrator.metrics.collector import DaemonCollector, Watched
from orchestrator.metrics.groups import OTHER, GroupSlots
from orchestrator.metrics.listener import Listener
from orchestrator.store.db import StateDB
from orchestrator.store.metrics import MetricsStore

log = logging.getLogger("orchestrator.metrics")
# the outcomes of a turn (Daemon._deliver): its replies stored; it failed (retried, or
# dead-lettered); the engine was away (tried again, not counted); drained at shutdown
OUTCOMES = ("delivered", "failed", "deferred", "cancelled")
# a chat turn's duration: from a rule-based answer to a long tool-using turn
TURN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0)

__all__ = ["OTHER", "OUTCOMES", "Metrics"]


class Metrics:
    """The metrics of ``daemon``; ``usage``: the connection the scrapes read the store
    on. ``enabled`` (default: ``metrics.enabled``) false makes every call a no-op."""

    def __init__(self, daemon: Watched, usage: StateDB, *, enabled: bool | None = None) -> None:
        settings = daemon.config.metrics
        self.daemon = daemon
        self.enabled = settings.enabled if enabled is None else enabled
        self.registry = CollectorRegistry(auto_describe=False)
        self.slots = GroupSlots(settings.max_groups)
        # registered first, so each scrape has brought the places in line before the
        # turn counters below are read
        self.registry.register(
            DaemonCollector(daemon, MetricsStore(usage), self.slots, self._places)
        )
        self.turns = Counter(
            "orchestrator_turns",
            "Turns that ended, by group and outcome (delivered, failed, deferred, cancelled).",
            ["group", "outcome"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "orchestrator_turn_duration_seconds",
            "Seconds from a turn's start to its end, by group.",
            ["group"],
            buckets=TURN_BUCKETS,
            registry=self.registry,
        )
        self.listeners: list[Listener] = []

    def turn_done(self, group: str, outcome: str, seconds: float) -> None:
        """A turn of ``group`` ended with ``outcome`` after ``seconds``. On the turn's
        path: a counter and a histogram observation; it never raises (the delivery's
        bookkeeping follows it)."""
        if not self.enabled:
            return
        try:
            label = self.slots.label(group)
            self.turns.labels(label, outcome).inc()
            self.duration.labels(label).observe(seconds)
        except Exception:
            log.exception("a turn of %s was not counted", group)

    def _places(self, named: set[str], dropped: set[str]) -> None:
        """At a scrape: every outcome of each group with a place (and _other) shows,
        at 0 until it happens; the series of groups that lost their place go."""
        for group in dropped:
            for outcome in OUTCOMES:
                self.turns.remove(group, outcome)
            self.duration.remove(group)
        for group in (*named, OTHER):
            for outcome in OUTCOMES:
                self.turns.labels(group, outcome)
            self.duration.labels(group)

    def exposition(self, accept: str = "") -> tuple[bytes, str]:
        """The series in the format an ``Accept`` header asks for (Prometheus's text
        format unless it asks for OpenMetrics), and its content type."""
        encoder, content_type = choose_encoder(accept)
        return encoder(self.registry), content_type

    def start(self) -> None:
        """Start the listener of ``metrics.listen``, when metrics are on and it is set."""
        listen = self.daemon.config.metrics.listen
        if self.enabled and listen is not None and not self.listeners:
            host, _, port = listen.rpartition(":")
            # on Swarm, a wildcard is every address of the daemon's but the runner network's
            for where in self.daemon.runtime.backend.listen_hosts(host.strip("[]")):
                shown = f"[{where}]:{port}" if ":" in where else f"{where}:{port}"
                self.listeners.append(Listener(self.registry, shown))
            log.info("metrics listening on http://%s/metrics (no token)", listen)

    def stop(self) -> None:
        for listener in self.listeners:
            listener.close()
        self.listeners = []
