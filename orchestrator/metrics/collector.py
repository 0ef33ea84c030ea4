"""The series read at a scrape, from the daemon's own state and store: nothing of them is
counted on a turn's path.

Each scrape lists the groups (and brings the places of ``groups.GroupSlots`` in line),
reads the queue's messages by group and state and the usage rows added since the last
scrape (``store.metrics``), lists the containers of this home once, measures the disk of
groups whose measure is older than a minute (within a time budget), and reads the pauses
and the health the chat-app accounts last recorded. Scrapes run one at a time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from orchestrator.config import OrchestratorConfig
from orchestrator.errors import OrchestratorError
from orchestrator.groups.disk import group_disk_usage
from orchestrator.groups.store import GroupListing
from orchestrator.metrics.groups import OTHER, GroupSlots
from orchestrator.runtime.lifecycle import GroupRuntime
from orchestrator.store.chats import ChatStore
from orchestrator.store.messages import MessageQueue
from orchestrator.store.metrics import MetricsStore
from orchestrator.store.usage import WEB

log = logging.getLogger("orchestrator.metrics")
DISK_MEASURE_EVERY_SECONDS = 60.0  # a group's disk is measured again after this long
DISK_SCRAPE_BUDGET_SECONDS = 2.0  # at most this long measuring disk in one scrape
TOKEN_KINDS = ("input", "output", "cache_read", "cache_write")
CONTAINER_STATES = ("running", "stopped", "absent")


class Watched(Protocol):
    """What the metrics read of the daemon (``orchestrator.daemon.core.Daemon``)."""

    config: OrchestratorConfig
    queue: MessageQueue
    runtime: GroupRuntime
    chats: ChatStore
    started: float
    accepting: bool


@dataclass
class _Disk:
    measured: float  # time.monotonic() of the measure
    used: int


Places = Callable[[set[str], set[str]], None]  # (groups with a place, groups that lost it)
Sums = dict[tuple[str, ...], float]


class DaemonCollector(Collector):
    """The scrape-time series of one daemon. ``on_places`` is told the groups with a
    place at each scrape, before any series is read (the turn counters start theirs)."""

    def __init__(
        self, daemon: Watched, store: MetricsStore, slots: GroupSlots, on_places: Places
    ) -> None:
        self.daemon = daemon
        self.store = store
        self.slots = slots
        self.on_places = on_places
        self.lock = threading.Lock()
        # usage totals since the database began: the last row id read, and the sums
        self.usage_id = 0
        # (group, ...the other labels) -> the sum
        self.calls: Sums = defaultdict(float)
        self.tokens: Sums = defaultdict(float)
        self.cost: Sums = defaultdict(float)
        self.web: Sums = defaultdict(float)
        self.disk: dict[str, _Disk] = {}

    def describe(self) -> Iterable[Metric]:
        """Nothing: registering must not read the store (the names are not checked)."""
        return []

    def collect(self) -> Iterator[Metric]:
        with self.lock:
            families = self._families()
        yield from families

    def _families(self) -> list[Metric]:
        daemon = self.daemon
        listing = daemon.runtime.store.listing()
        existing = {item.folder: daemon.runtime.activity.last(item.folder) for item in listing}
        dropped = self.slots.refresh(existing, daemon.config.metrics.max_groups)
        named = set(self.slots.named)
        self.on_places(named, dropped)
        labels = [*sorted(named), OTHER]
        return [
            *self._daemon(len(listing)),
            *self._queue(labels),
            *self._usage(),
            *self._containers(labels, listing),
            *self._disk(labels, listing),
            *self._pauses(),
            *self._channels(),
        ]

    def _daemon(self, groups: int) -> list[Metric]:
        start = GaugeMetricFamily(
            "orchestrator_daemon_start_time_seconds", "When the daemon started (Unix time)."
        )
        start.add_metric([], self.daemon.started)
        accepting = GaugeMetricFamily(
            "orchestrator_daemon_accepting", "1 while the daemon accepts new messages."
        )
        accepting.add_metric([], 1.0 if self.daemon.accepting else 0.0)
        count = GaugeMetricFamily("orchestrator_groups", "Group folders under groups/.")
        count.add_metric([], groups)
        return [start, accepting, count]

    def _queue(self, labels: list[str]) -> list[Metric]:
        now = time.time()
        messages = GaugeMetricFamily(
            "orchestrator_queue_messages",
            "Messages waiting (queued) or being delivered (inflight), by group.",
            labels=["group", "state"],
        )
        oldest = GaugeMetricFamily(
            "orchestrator_queue_oldest_age_seconds",
            "Age of the oldest queued message, by group (0 when none is queued).",
            labels=["group"],
        )
        dead = GaugeMetricFamily(
            "orchestrator_dead_letters", "Dead-lettered messages, by group.", labels=["group"]
        )
        queued: dict[str, int] = dict.fromkeys(labels, 0)
        inflight: dict[str, int] = dict.fromkeys(labels, 0)
        dead_by: dict[str, int] = dict.fromkeys(labels, 0)
        age: dict[str, float] = dict.fromkeys(labels, 0.0)
        for group, state in self.store.queue_by_group().items():
            label = self.slots.of(group)
            queued[label] += state.queued
            inflight[label] += state.inflight
            dead_by[label] += state.dead
            if state.oldest_queued is not None:
                age[label] = max(age[label], now - state.oldest_queued)
        for label in labels:
            messages.add_metric([label, "queued"], queued[label])
            messages.add_metric([label, "inflight"], inflight[label])
            oldest.add_metric([label], max(age[label], 0.0))
            dead.add_metric([label], dead_by[label])
        return [messages, oldest, dead]

    def _usage(self) -> list[Metric]:
        """Totals since the database began, from the rows added since the last scrape."""
        self.usage_id, totals = self.store.usage_after(self.usage_id)
        for t in totals:
            if t.purpose == WEB:  # a web fetch or search: not a model call
                self.web[(t.group, t.model, t.outcome)] += t.calls
                continue
            self.calls[(t.group, t.provider, t.model, t.purpose, t.outcome)] += t.calls
            for kind, n in zip(
                TOKEN_KINDS,
                (t.input_tokens, t.output_tokens, t.cache_read_tokens, t.cache_write_tokens),
                strict=True,
            ):
                self.tokens[(t.group, t.provider, t.model, t.purpose, kind)] += n
            if t.cost is not None and t.currency is not None:
                self.cost[(t.group, t.provider, t.model, t.purpose, t.currency)] += t.cost
        call_labels = ["group", "provider", "model", "purpose"]
        calls = CounterMetricFamily(
            "orchestrator_model_calls",
            "Model calls the relay made or refused (a budget), by outcome.",
            labels=[*call_labels, "outcome"],
        )
        tokens = CounterMetricFamily(
            "orchestrator_model_tokens",
            "Tokens of model calls, by kind: input, output, cache_read, cache_write.",
            labels=[*call_labels, "kind"],
        )
        cost = CounterMetricFamily(
            "orchestrator_model_cost",
            "Cost of model calls with prices, in the currency of the label.",
            labels=[*call_labels, "currency"],
        )
        web = CounterMetricFamily(
            "orchestrator_web_requests",
            "Web fetches and searches the host made for turns, by outcome.",
            labels=["group", "request", "outcome"],
        )
        for family, sums in (
            (calls, self.calls),
            (tokens, self.tokens),
            (cost, self.cost),
            (web, self.web),
        ):
            for key, value in sorted(self._by_label(sums).items()):
                family.add_metric(list(key), value)
        return [calls, tokens, cost, web]

    def _by_label(self, sums: Sums) -> Sums:
        """``sums`` with each key's group (its first part) replaced by its label: the
        groups without a place added up under _other."""
        out: Sums = defaultdict(float)
        for key, value in sums.items():
            out[(self.slots.of(key[0]), *key[1:])] += value
        return out

    def _containers(self, labels: list[str], listing: list[GroupListing]) -> list[Metric]:
        engine = GaugeMetricFamily(
            "orchestrator_engine_up", "1 when the container engine answered this scrape."
        )
        runtime = self.daemon.runtime
        try:
            found = {c.group: c for c in runtime.backend.list(runtime.project_labels) if c.group}
        except OrchestratorError as exc:
            log.debug("metrics: the engine did not list containers: %s", exc.message)
            engine.add_metric([], 0.0)
            return [engine]
        engine.add_metric([], 1.0)
        states = {label: dict.fromkeys(CONTAINER_STATES, 0) for label in labels}
        for item in listing:
            container = found.get(item.folder)
            state = (
                "absent" if container is None else ("running" if container.running else "stopped")
            )
            states[self.slots.of(item.folder)][state] += 1
        containers = GaugeMetricFamily(
            "orchestrator_containers",
            "Group containers by state: running, stopped (any other state), absent.",
            labels=["group", "state"],
        )
        for label in labels:
            for state, n in states[label].items():
                containers.add_metric([label, state], n)
        recreated = CounterMetricFamily(
            "orchestrator_container_recreations",
            "Containers made again because their runner stopped answering, since the "
            "daemon started.",
            labels=["group"],
        )
        counts = dict.fromkeys(labels, 0)
        for group, n in dict(runtime.dead_sockets).items():
            counts[self.slots.of(group)] += n
        for label in labels:
            recreated.add_metric([label], counts[label])
        starts = CounterMetricFamily(
            "orchestrator_container_starts",
            "Containers the daemon made or started since it began, by why: created, "
            "drifted (configuration changed), started (it had stopped), restarted, "
            "dead-runner (its runner stopped answering).",
            labels=["group", "why"],
        )
        made: dict[tuple[str, str], int] = {}
        for (group, why), n in dict(runtime.starts).items():
            key = (self.slots.of(group), why)
            made[key] = made.get(key, 0) + n
        for (label, why), n in sorted(made.items()):
            starts.add_metric([label, why], n)
        return [engine, containers, recreated, starts]

    def _disk(self, labels: list[str], listing: list[GroupListing]) -> list[Metric]:
        """Disk use against limits; a measure is at most a minute old, and a scrape
        spends at most DISK_SCRAPE_BUDGET_SECONDS measuring (the oldest measures first:
        the rest keep their last one until the next scrape)."""
        groups = {item.folder: item.group for item in listing if item.group is not None}
        root = self.daemon.runtime.store.root
        started = time.monotonic()

        def measured(folder: str) -> float:
            known = self.disk.get(folder)
            return known.measured if known is not None else float("-inf")

        stale = [f for f in groups if started - measured(f) >= DISK_MEASURE_EVERY_SECONDS]
        for folder in sorted(stale, key=measured):
            if time.monotonic() - started >= DISK_SCRAPE_BUDGET_SECONDS:
                break
            self.disk[folder] = _Disk(time.monotonic(), group_disk_usage(root, folder))
        for gone in set(self.disk) - set(groups):
            del self.disk[gone]
        used = dict.fromkeys(labels, 0)
        limit = dict.fromkeys(labels, 0)
        for folder, group in groups.items():
            if folder in self.disk:
                label = self.slots.of(folder)
                used[label] += self.disk[folder].used
                limit[label] += group.config.container.disk_bytes
        used_family = GaugeMetricFamily(
            "orchestrator_group_disk_bytes",
            "Disk the groups' memory, sessions, files and history take, by group.",
            labels=["group"],
        )
        limit_family = GaugeMetricFamily(
            "orchestrator_group_disk_limit_bytes",
            "The groups' disk limits (group.yaml container.disk), by group.",
            labels=["group"],
        )
        for label in labels:
            used_family.add_metric([label], used[label])
            limit_family.add_metric([label], limit[label])
        return [used_family, limit_family]

    def _pauses(self) -> list[Metric]:
        pauses = GaugeMetricFamily(
            "orchestrator_pauses",
            "Pauses in force, by group and holder (operator, disk, budget, ...).",
            labels=["group", "holder"],
        )
        counts: dict[tuple[str, str], int] = defaultdict(int)
        for pause in self.daemon.queue.pauses():
            counts[(self.slots.of(pause.group), pause.holder)] += 1
        for (label, holder), n in sorted(counts.items()):
            pauses.add_metric([label, holder], n)
        return [pauses]

    def _channels(self) -> list[Metric]:
        """Each chat-app account of orchestrator.yaml, from the health it last recorded
        (as ``orchestrator status`` shows it)."""
        up = GaugeMetricFamily(
            "orchestrator_channel_up",
            "1 when the chat-app account is connected.",
            labels=["account", "kind"],
        )
        messages = CounterMetricFamily(
            "orchestrator_channel_messages",
            "Messages a chat-app account received (in) and sent (out) since the daemon started.",
            labels=["account", "kind", "direction"],
        )
        for name, account in sorted(self.daemon.config.channel_accounts.items()):
            health = self.daemon.chats.health(name) or {}
            up.add_metric([name, account.kind], 1.0 if health.get("state") == "connected" else 0.0)
            for direction in ("in", "out"):
                count = health.get(f"messages_{direction}", 0)
                messages.add_metric(
                    [name, account.kind, direction], count if isinstance(count, int) else 0
                )
        return [up, messages]
