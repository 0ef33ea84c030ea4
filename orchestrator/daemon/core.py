"""The daemon: accepts messages from channels, keeps them durable, delivers them to the
groups' containers and stores the replies.

A channel calls ``submit`` (the message is committed before it returns) and may wait for
the outcome (``wait`` from a thread, or a listener for event loops). A dispatcher thread
hands runnable messages to a bounded pool of workers: one turn at a time per session,
round-robin between groups, and at most a share of the workers per group, so one group
can never hold them all. Each turn has one deadline for the whole delivery; a failure is
retried with backoff, then dead-lettered. A housekeeping thread queues again messages
left in flight by a failed commit, keeps the disk reserve, and measures groups' disk use
against their limits. SIGTERM drains: no new messages, turns in flight finish (or are
cancelled and delivered again at the next start).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from orchestrator.commands import APPROVE, CONFIRM, parse_command
from orchestrator.config import OrchestratorConfig
from orchestrator.config.accounts import account_of_channel
from orchestrator.config.providers import resolve_key
from orchestrator.daemon.scheduler import Scheduler, store_lookup
from orchestrator.daemon.upgrade import UpgradeReport, upgrade_home
from orchestrator.errors import (
    BadInput,
    DaemonStopping,
    EngineUnreachable,
    GroupPaused,
    OrchestratorError,
    SenderRefused,
)
from orchestrator.groups import Group
from orchestrator.groups.config import classify_sender
from orchestrator.groups.disk import DISK_HOLDER, group_disk_usage, over_limit_reason
from orchestrator.home import Home
from orchestrator.limits import (
    CONSOLIDATE_LOCAL_HOUR,
    DISK_CHECK_INTERVAL_SECONDS,
    DRAIN_TIMEOUT_SECONDS,
    ENGINE_AWAY_RETRY_SECONDS,
    HOUSEKEEPING_INTERVAL_SECONDS,
    INBOUND_TEXT_MAX_CHARS,
    OUTBOX_KEEP_SECONDS,
    RECONCILE_INTERVAL_SECONDS,
    SCHEDULER_TICK_SECONDS,
    SENDER_ID_MAX_CHARS,
    default_concurrency,
)
from orchestrator.mcp.tools import source_name
from orchestrator.media.inbox import StoredFile
from orchestrator.media.prepare import compose, needs_work, quick_lines
from orchestrator.memory.history import FLUSH, TURN, History, Provenance
from orchestrator.metrics import Metrics
from orchestrator.protocol import (
    CREATOR,
    FLUSH_OP,
    GUEST,
    MEMBER,
    SESSION_KEY_PATTERN,
    BadFrame,
    TurnRequest,
    TurnResult,
    session_key,
)
from orchestrator.relay.approvals import chat_reply
from orchestrator.relay.grants import granted_tools
from orchestrator.relay.turn import RelayContext, TurnRelay
from orchestrator.runtime.channel import Cancel, RunnerClient, RunnerUnavailable
from orchestrator.runtime.lifecycle import GroupRuntime
from orchestrator.runtime.reconcile import (
    ADOPT,
    KEEP_IDLE,
    OLDER_IMAGE,
    RECREATE,
    STOP_IDLE,
    Action,
    apply_plan,
)
from orchestrator.store.chats import ChatStore
from orchestrator.store.held import HeldRequests
from orchestrator.store.messages import (
    DEAD,
    DONE,
    Claim,
    Message,
    MessageQueue,
    Pause,
    new_message,
)
from orchestrator.store.tasks import TaskStore
from orchestrator.store.usage import UsageStore
from orchestrator.validate import text_problem
from orchestrator.web.gate import Gate

log = logging.getLogger("orchestrator.daemon")
CONSOLIDATED_FILE = "consolidated.json"  # in the state folder: each group's last night
Listener = Callable[[str], None]


def fair_order(candidates: list[Message], last_served: dict[str, float]) -> list[Message]:
    """Round-robin between groups, the group served longest ago first; oldest first
    within a group."""
    by_group: dict[str, list[Message]] = {}
    for message in sorted(candidates, key=lambda m: m.created):
        by_group.setdefault(message.group, []).append(message)
    groups = sorted(by_group, key=lambda g: last_served.get(g, 0.0))
    ordered: list[Message] = []
    while any(by_group.values()):
        for group in groups:
            if by_group[group]:
                ordered.append(by_group[group].pop(0))
    return ordered


def choose(
    candidates: list[Message],
    *,
    free: int,
    per_group: int,
    running: dict[str, int],
    last_served: dict[str, float],
) -> list[Message]:
    """The messages to start now: fair order, at most ``free`` in all, and no group past
    ``per_group`` turns at once (counting those ``running``)."""
    chosen: list[Message] = []
    counts = dict(running)
    for message in fair_order(candidates, last_served):
        if len(chosen) >= free:
            break
        if counts.get(message.group, 0) >= per_group:
            continue
        counts[message.group] = counts.get(message.group, 0) + 1
        chosen.append(message)
    return chosen


def group_share(concurrency: int, configured: int | None = None) -> int:
    """Turns one group may run at once: configured, else half the workers (at least 1)."""
    return max(1, min(configured or concurrency // 2, concurrency))


@dataclass(frozen=True)
class Inbound:
    """One message as a channel hands it to the daemon: the group named as the channel
    names it (a folder or display name), and the trust the chat's binding gives its
    people (``bound``, from a chat app's binding) when there is one. The daemon decides
    the rest: the sender's trust, the session."""

    group: str
    text: str
    chat: str
    sender: str
    channel: str
    thread: str | None = None
    bound: str | None = None
    # what the person said, when ``text`` is not all of it (a chat app took the bot's
    # mention off the front): kept with the message and in the transcript
    said: str | None = None
    # the files it came with, stored in the group's files/inbox by the channel: their
    # lines are added to the text (after work, such as a transcription, when they need it)
    media: tuple[StoredFile, ...] = ()


class DeliveryFailed(OrchestratorError):
    pass


@dataclass
class DaemonStats:
    delivered: int = 0
    failed: int = 0


@dataclass
class Delivery:
    """A turn in flight."""

    message: Message
    cancel: Cancel
    relay: TurnRelay | None = None  # the turn's answers to its requests, once it has one
    answered: bool = False  # its replies are stored; what is left is the memory record


class Daemon:
    def __init__(
        self,
        home: Home,
        config: OrchestratorConfig,
        runtime: GroupRuntime,
        queue: MessageQueue,
        concurrency: int | None = None,
    ) -> None:
        self.home = home
        self.config = config
        self.runtime = runtime
        self.queue = queue
        self.concurrency = concurrency or default_concurrency(os.cpu_count())
        self.per_group = group_share(self.concurrency, config.per_group_concurrency)
        self.cond = threading.Condition()
        # counts what the dispatcher is told of (see _notify): a pass that read the queue
        # without the condition held knows whether something changed meanwhile
        self.changes = 0
        self.busy: set[tuple[str, str]] = set()
        # groups whose container reconcile makes again or stops (their turns wait)
        self.reconciling: set[str] = set()
        # groups with a finished turn whose memory change is being recorded (by count):
        # no later turn of the group starts before it is in the history
        self.recording: dict[str, int] = {}
        # groups whose container runs an older image (an upgrade), as reconcile last found:
        # each is made again at its group's next turn, before the turn
        self.outdated: set[str] = set()
        self.gate: Gate | None = None  # the shells' egress gate, once a group has the web
        self.gate_lock = threading.Lock()
        self.active: dict[str, Delivery] = {}
        self.running: dict[str, int] = {}  # group -> turns in flight
        self.last_served: dict[str, float] = {}
        self.group_locks: dict[str, threading.Lock] = {}
        self.accepting = True
        self.stopping = threading.Event()
        self.stats = DaemonStats()
        self.pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="turn")
        self.threads: list[threading.Thread] = []
        self.listeners: list[Listener] = []
        # message id -> the events of its watchers; a lock of their own, so that telling
        # them of a change never waits for a dispatch pass (which holds the condition)
        self.watchers: dict[str, set[threading.Event]] = {}
        self.watch_lock = threading.Lock()
        self.disk_dirty: set[str] = set()
        self.consolidating: set[str] = set()  # groups whose nightly consolidation runs
        self.consolidated_lock = threading.Lock()
        self.started = time.time()
        self.relay = RelayContext(
            config,
            queue,
            UsageStore(queue.path),
            notify=self._changed,
            state_dir=home.state_dir,
        )
        self.histories: dict[str, History] = {}  # memory history per group, opened lazily
        self.histories_lock = threading.Lock()
        self.tasks = TaskStore(queue)
        self.chats = ChatStore(queue)
        self.scheduler = Scheduler(
            self.tasks,
            store_lookup(
                runtime.store,
                lambda folder, channel, chat: (
                    self.chats.bound_trust(folder, account, chat)
                    if (account := account_of_channel(channel)) is not None
                    else None
                ),
            ),
        )
        # turns counted as they end; everything else read at a scrape (orchestrator.metrics)
        self.metrics = Metrics(self, self.relay.usage)
        # set by the service that runs the daemon: reloads orchestrator.yaml
        self.on_reload: Callable[[], dict[str, Any]] | None = None
        from orchestrator.daemon.media import MediaQueue

        self.media = MediaQueue(self)  # files prepared before their turns
        # what the start found and did to the home (an older release's, migrated)
        self.upgrade: UpgradeReport | None = None

    @property
    def inflight(self) -> int:
        """Messages whose turn runs (one answered, its memory change being recorded, is
        not counted: it is done)."""
        return sum(1 for d in self.active.values() if not d.answered)

    # channels call these

    def submit(
        self,
        name: str,
        text: str,
        *,
        chat: str,
        sender: str,
        channel: str,
        thread: str | None = None,
        bound: str | None = None,
        claim: Claim | None = None,
    ) -> Message:
        """``accept`` of the Inbound these fields make."""
        return self.accept(Inbound(name, text, chat, sender, channel, thread, bound), claim)

    def accept(self, inbound: Inbound, claim: Claim | None = None) -> Message:
        """Accept one inbound message; returns after it is committed to the queue.

        ``claim``: recorded in the same transaction (MessageQueue.put): an update a chat
        app delivers twice is queued once."""
        if not self.accepting:
            raise DaemonStopping(
                "the daemon is shutting down and accepts no new messages",
                hint="send again once it is back",
            )
        check_inbound(
            text=inbound.text,
            chat=inbound.chat,
            sender=inbound.sender,
            thread=inbound.thread,
            files=bool(inbound.media),
        )
        group = self.runtime.store.find(inbound.group)
        trust = classify_sender(group.config, inbound.sender, inbound.bound)
        if trust is None:
            log.warning(
                "refused a message from %r to group %s via %s: unknown sender",
                inbound.sender,
                group.folder,
                inbound.channel,
            )
            raise SenderRefused(
                f"sender {inbound.sender!r} may not talk to group {group.folder!r}",
                hint="add the sender to creators or members in its group.yaml",
            )
        pause = self.pause_of(group.folder)
        if pause is not None and pause.refuse_new:
            raise GroupPaused(pause.reason, hint=_resume_hint(group.folder, pause))
        text, said = inbound.text, inbound.said
        preparing = bool(inbound.media) and needs_work(inbound.media, group.config.media.transcribe)
        if inbound.media and not preparing:
            text, said = compose(text, said, quick_lines(inbound.media))
        message = new_message(
            group=group.folder,
            session=session_key(
                group.config.session_mode, inbound.channel, inbound.chat, inbound.thread
            ),
            chat=inbound.chat,
            thread=inbound.thread,
            sender=inbound.sender,
            trust=trust,
            text=text,
            channel=inbound.channel,
            said=said,
            media=inbound.media,
            preparing=preparing,
        )
        command = None if inbound.media else parse_command(inbound.text)
        if command is not None and command.name in (CONFIRM, APPROVE):
            # Answered by the host, never by the model: a creator's own word, about a
            # request made in this very chat (the host's record of it, not the frame's).
            reply = chat_reply(
                self.queue,
                self.runtime.store.root,
                group.folder,
                command,
                channel=inbound.channel,
                chat=inbound.chat,
                trust=trust,
                sender=inbound.sender,
                creators=group.config.creators,
            )
            log.info("group %s: /%s from %r: %s", group.folder, command.name, inbound.sender, reply)
            return self.queue.put_answered(message, reply)
        stored = self.queue.put(message, claim)
        if preparing:
            self.media.wake()
        self.wake()
        return stored

    def wake(self) -> None:
        """Look for runnable messages now (one was queued or became runnable)."""
        with self.cond:
            self._notify()

    def pause_of(self, folder: str) -> Pause | None:
        """The pause in force for a group, refusing ones first."""
        leases = self.queue.pauses(folder)
        return next((p for p in leases if p.refuse_new), leases[0] if leases else None)

    def wait(self, message_id: str, timeout: float) -> Message | None:
        """The message once done or dead, or as it is when ``timeout`` passes."""
        last = None
        for snapshot in self.watch(message_id, timeout):
            last = snapshot
        return last

    def watch(self, message_id: str, timeout: float) -> Iterator[Message]:
        """The message now, then again each time its replies or state change, until it
        is done or dead or ``timeout`` passes. Ends at once for an unknown id."""
        deadline = time.monotonic() + timeout
        changed = threading.Event()
        with self.watch_lock:
            self.watchers.setdefault(message_id, set()).add(changed)
        try:
            while True:
                changed.clear()
                message = self.queue.get(message_id)
                if message is None:
                    return
                yield message
                remaining = deadline - time.monotonic()
                if message.state in (DONE, DEAD) or remaining <= 0:
                    return
                changed.wait(remaining)
        finally:
            with self.watch_lock:
                waiting = self.watchers.get(message_id)
                if waiting is not None:
                    waiting.discard(changed)
                    if not waiting:
                        del self.watchers[message_id]

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(message_id)`` (from a worker thread) whenever a message's state
        or replies change: event loops wait on this instead of holding a thread."""
        self.listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        with contextlib.suppress(ValueError):
            self.listeners.remove(listener)

    def _changed(self, message_id: str) -> None:
        with self.watch_lock:
            for event in self.watchers.get(message_id, ()):
                event.set()
        for listener in list(self.listeners):
            try:
                listener(message_id)
            except Exception:
                log.exception("a message listener failed")

    def retry(self, message_id: str) -> bool:
        ok = self.queue.retry(message_id)
        with self.cond:
            self._notify()
        self._changed(message_id)
        return ok

    # running

    def start(self) -> None:
        self.check_credentials()
        self.upgrade = upgrade_home(self.queue, self.runtime.store)
        recovered = self.queue.recover()
        if recovered:
            log.info("%d messages in flight at the last stop are queued again", recovered)
        try:
            older = [a for a in self._reconcile() if a.reason == OLDER_IMAGE]
            if older:
                log.info(
                    "%d containers run an older image; each is made again at its group's "
                    "next turn: %s",
                    len(older),
                    ", ".join(a.container for a in older),
                )
        except OrchestratorError as exc:
            log.warning("reconcile at start failed: %s", exc.message)
        self.metrics.start()  # the listener of metrics.listen, when it is set
        self.media.start()
        for target, name in (
            (self._dispatch_loop, "dispatch"),
            (self._reconcile_loop, "reconcile"),
            (self._housekeeping_loop, "housekeeping"),
            (self._scheduler_loop, "scheduler"),
        ):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self.threads.append(thread)

    def apply_config(self, config: OrchestratorConfig) -> None:
        """Run with a reloaded configuration from now on (concurrency excepted: the
        worker pool keeps its size until the next start)."""
        self.config = config
        self.relay.config = config
        self.relay.forget_indexes()  # opened again with the new search settings
        self.runtime.config = config
        self.media.apply_config()
        self.per_group = group_share(self.concurrency, config.per_group_concurrency)
        self.check_credentials()
        with self.cond:
            self._notify()

    def check_credentials(self) -> list[str]:
        """Log (and return) a line for each provider a group uses whose key cannot be
        found: its turns would fail until it is set."""
        from orchestrator.config.providers import resolve_key

        used = {g.config.provider for g in self.runtime.store.groups()}
        problems = []
        for name in sorted(used & set(self.config.providers)):
            try:
                resolve_key(self.config.providers[name], self.config.secrets_file)
            except OrchestratorError as exc:
                problems.append(exc.message)
                log.warning("%s; turns of groups using it will fail", exc.message)
        return problems

    def drain(
        self, timeout: float = DRAIN_TIMEOUT_SECONDS, stop_now: threading.Event | None = None
    ) -> bool:
        """Stop accepting and let turns in flight finish within ``timeout`` (or until
        ``stop_now`` is set); the rest are cancelled and stay queued for the next start.
        True when none was left over."""
        self.accepting = False
        deadline = time.monotonic() + timeout
        with self.cond:
            self.stopping.set()
            self._notify()
            while self.active and time.monotonic() < deadline:
                if stop_now is not None and stop_now.is_set():
                    break
                self.cond.wait(0.1)
            left = list(self.active.values())
        for delivery in left:
            delivery.cancel.cancel()
        self.media.stop()  # a preparation cut short is made again at the next start
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.metrics.stop()
        with self.gate_lock:
            if self.gate is not None:
                self.gate.close()
                self.gate = None
        if left:
            log.warning(
                "%d turns still in flight at shutdown were cancelled; they are delivered "
                "again at the next start",
                len(left),
            )
        return not left

    def _dispatch_loop(self) -> None:
        while not self.stopping.is_set():
            try:
                self._dispatch_once()
            except Exception:
                log.exception("dispatch failed; trying again")
                self.stopping.wait(1.0)

    def _notify(self) -> None:
        """Wake the dispatcher and every waiter: something it reads changed (called with
        the condition held)."""
        self.changes += 1
        self.cond.notify_all()

    def _dispatch_once(self) -> None:
        """One pass: read the queue, take what may start in the slots that are free, and
        start it. The queue is read and claimed without the condition held (the state
        database's reads and commits never hold up a finishing turn); a change told
        meanwhile (``changes``) makes the next pass start at once instead of waiting."""
        with self.cond:
            seen = self.changes
            free = self.concurrency - len(self.active)
        runnable = self.queue.runnable() if free > 0 else []
        with self.cond:
            free = self.concurrency - len(self.active)
            candidates = (
                [
                    m
                    for m in runnable
                    if (m.group, m.session) not in self.busy
                    and m.group not in self.reconciling
                    and m.group not in self.recording
                ]
                if free > 0
                else []
            )
            chosen = choose(
                candidates,
                free=free,
                per_group=self.per_group,
                running=self.running,
                last_served=self.last_served,
            )
            for message in chosen:  # held for it while it is claimed
                self.busy.add((message.group, message.session))
                self.active[message.id] = Delivery(message, Cancel())
                self.running[message.group] = self.running.get(message.group, 0) + 1
                self.last_served[message.group] = time.monotonic()
        if not chosen:
            wake = self.queue.next_wakeup()
            with self.cond:
                if self.changes == seen:  # nothing told since the read: wait for news
                    wait = 1.0 if wake is None else max(0.01, min(1.0, wake - time.time()))
                    self.cond.wait(wait)
            return
        # Claimed one by one: a message claimed elsewhere meanwhile, or whose group was
        # paused since the read, is not claimed (the claim checks both) and its slot is
        # given back; a claim that cannot commit gives back its slot and the rest.
        for n, message in enumerate(chosen):
            try:
                claimed = self.queue.claim(message.id)
            except BaseException:
                for left in chosen[n:]:
                    self._release(left)
                raise
            if not claimed:
                self._release(message)
                continue
            self.pool.submit(self._deliver, message)
            self._changed(message.id)  # in flight now: a chat app shows it is typing

    def _release(self, message: Message) -> None:
        """Give back the slot held for ``message``, which was not claimed."""
        with self.cond:
            self.busy.discard((message.group, message.session))
            self.active.pop(message.id, None)
            self.running[message.group] -= 1
            self._notify()

    def _deliver(self, message: Message) -> None:
        started = time.monotonic()
        delivery = self.active[message.id]
        outcome = "failed"
        recorded = marked = False
        group: Group | None = None  # loaded once: the turn and its record use it
        try:
            group = self.runtime.store.load(message.group)
            answer = self._turn(message, group, delivery.cancel)
            if not answer.get("ok"):
                raise DeliveryFailed(str(answer.get("error", "the runner refused the turn")))
            try:
                result = TurnResult.from_wire(answer)
            except BadFrame as exc:
                raise DeliveryFailed(str(exc)) from None
            # The replies go out before the turn's memory change is recorded (off the
            # reply path), with the history held from here to the record: no history
            # command and no other record sees the change first, and the group's next
            # turn records what is outside only after it (it waits for the hold).
            with self.cond:  # the group's next turn waits for this record
                self.recording[message.group] = self.recording.get(message.group, 0) + 1
                marked = True
            with self._holding_history(message.group):
                self._complete(message, result, delivery.relay)
                outcome = "delivered"
                delivery.answered = True
                # counted as it is answered: its latency is the reply's, not the record's
                self.metrics.turn_done(message.group, outcome, time.monotonic() - started)
                self._changed(message.id)
                self._record_turn(message, group)
                recorded = True
        except Exception as exc:
            if delivery.cancel.cancelled and self.stopping.is_set():
                outcome = "cancelled"  # left in flight: queued again at the next start
            elif isinstance(exc, EngineUnreachable):
                outcome = "deferred"  # not the message's fault: try again, uncounted
                self._defer(message, exc)
            elif delivery.relay is not None and delivery.relay.wait_reason is not None:
                outcome = "deferred"  # its group is paused (a money cap): it waits, uncounted
                self._wait(message, delivery.relay.wait_reason)
            else:
                final = delivery.relay.final_error if delivery.relay is not None else None
                self._record_failure(message, exc, final=final)
        finally:
            if not delivery.answered:
                self.metrics.turn_done(message.group, outcome, time.monotonic() - started)
            if not recorded:
                self._record_turn(message, group)
            with self.cond:
                if marked:
                    self._recorded(message.group)
                self.busy.discard((message.group, message.session))
                self.active.pop(message.id, None)
                self.running[message.group] -= 1
                if outcome == "delivered":
                    self.stats.delivered += 1
                elif outcome == "failed":
                    self.stats.failed += 1
                self.disk_dirty.add(message.group)
                self._notify()
            self._changed(message.id)

    def history(self, folder: str) -> History:
        with self.histories_lock:
            found = self.histories.get(folder)
            if found is None:
                found = self.histories[folder] = History(
                    self.runtime.store.root, folder, self.config.history_max_file_bytes
                )
            return found

    def _recorded(self, folder: str) -> None:
        """A turn of ``folder`` recorded its change: its next turn may start (called
        with the condition held)."""
        left = self.recording.get(folder, 0) - 1
        if left > 0:
            self.recording[folder] = left
        else:
            self.recording.pop(folder, None)

    @contextlib.contextmanager
    def _holding_history(self, folder: str) -> Iterator[None]:
        """Hold ``folder``'s history for what runs inside (History.hold); when it cannot
        be held (its folder unusable), what runs inside runs anyway and the record notes
        the gap."""
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(self.history(folder).hold())
            except Exception as exc:
                log.warning("memory history of %s not held after a turn: %s", folder, exc)
            yield

    def _record_turn(self, message: Message, group: Group | None) -> None:
        """Record what the turn changed in memory, attributed to its message (and to the
        other turns of the group in flight at that moment: turns of one group may
        overlap, and a change is never attributed to fewer turns than could have made
        it). ``group``: as the turn loaded it (None when it could not: loaded here)."""
        try:
            with self.cond:
                also = tuple(
                    d.message.id
                    for d in self.active.values()
                    if d.message.group == message.group and d.message.id != message.id
                )
            if group is None:
                group = self.runtime.store.load(message.group)
            self.history(message.group).record(
                Provenance.of_turn(TURN, message, group.config, also=also)
            )
        except Exception as exc:  # the history must never fail a delivery
            log.warning(
                "memory history of %s not recorded after a turn (%s): %s",
                message.group,
                self._gap_of(message.group),
                exc,
            )

    def _gap_of(self, folder: str) -> str:
        """Since when ``folder``'s history has not recorded, for the log (never raises)."""
        try:
            gap = self.history(folder).gap()
        except Exception:
            return "not recording"
        return gap.describe() if gap is not None else "not recording"

    def _record_outside(self, group_folder: str, container_name: str) -> None:
        """Before a turn: record a change made since the last one (outside any turn).
        Not while another turn of the group is in flight: what changed may be its doing,
        and its own record names this turn among those that overlapped it."""
        with self.cond:
            others = sum(1 for d in self.active.values() if d.message.group == group_folder)
        if others > 1:  # this turn's own delivery is one of them
            return
        try:
            history = self.history(group_folder)
            if history.changed():
                history.record_outside(self.runtime.backend.inspect(container_name))
        except Exception as exc:
            log.warning("memory history of %s not checked before a turn: %s", group_folder, exc)

    def _defer(self, message: Message, exc: EngineUnreachable) -> None:
        try:
            self.queue.defer(message.id, ENGINE_AWAY_RETRY_SECONDS, exc.message)
        except Exception as commit_error:  # housekeeping queues it again later
            log.error("could not defer %s: %s", message.id, commit_error)
            return
        log.warning(
            "the engine is away (%s); message %s to %s waits %gs, its attempts not counted",
            exc.message,
            message.id,
            message.group,
            ENGINE_AWAY_RETRY_SECONDS,
        )

    def _wait(self, message: Message, reason: str) -> None:
        """Queue ``message`` again behind its group's pause, its attempt not counted."""
        try:
            self.queue.defer(message.id, 0.0, reason)
        except Exception as commit_error:  # housekeeping queues it again later
            log.error("could not queue %s again: %s", message.id, commit_error)

    def _complete(self, message: Message, result: TurnResult, relay: TurnRelay | None) -> None:
        """Store the replies the turn did not show while it ran, after those it did (and
        an earlier attempt's), and mark the message done. A turn the runner had finished
        already (its answer repeated) adds what is not stored yet."""
        replies = result.replies
        if result.duplicate or relay is None:
            stored = [seq for seq, _ in self.queue.replies_of(message.id) if seq >= 0]
            first = self.queue.next_reply_seq(message.id)
            self.queue.complete(message.id, replies[len(stored) :], first_seq=first)
            return
        shown = min(result.shown, relay.next_seq)
        self.queue.complete(message.id, replies[shown:], first_seq=relay.next_seq)

    def _record_failure(
        self, message: Message, exc: Exception, *, final: str | None = None
    ) -> None:
        reason = (
            exc.message if isinstance(exc, OrchestratorError) else f"{type(exc).__name__}: {exc}"
        )
        if final is not None and final not in reason:
            reason = f"{reason} ({final})"
        try:
            state = self.queue.fail(message.id, reason, final=final is not None)
        except Exception as commit_error:
            # Left in flight in the database; housekeeping queues it again once the
            # queue can commit (a full disk, say).
            log.error("could not record the failure of %s: %s", message.id, commit_error)
            return
        log.warning(
            "delivery of %s to %s failed (%s); now %s", message.id, message.group, reason, state
        )

    def _turn(self, message: Message, group: Group, cancel: Cancel) -> dict[str, Any]:
        timeout = float(group.config.turn_timeout_seconds)
        deadline = time.monotonic() + timeout
        client = self.runtime.runner(group)
        window, answer_tokens = self._window(group)
        task_run = self.tasks.run_of(message.id) is not None  # the grant's and the relay's
        payload = TurnRequest(
            turn_id=message.id,
            chat=message.chat,
            text=message.text,
            sender=message.sender,
            trust=message.trust,
            thread=message.thread,
            channel=message.channel,
            session=message.session,
            said=message.said,
            tools=granted_tools(
                task_run=task_run,
                trust=message.trust,
                shell=group.config.tools.shell,
                packages_from_chat=group.config.packages.from_chat,
                mcp=tuple(source_name(s.name) for s in group.config.mcp.for_trust(message.trust)),
                web=group.config.web.open_to(message.trust),
            ),
            window_tokens=window,
            answer_tokens=answer_tokens,
            deadline_seconds=timeout,
            timezone=group.config.timezone,
            images=message.images,
        ).to_wire()
        self.runtime.activity.touch(group.folder)
        self._record_outside(group.folder, self.runtime.container_name(group))
        end_web = self._web_turn(group, message.trust)
        try:
            return self._turn_of(
                message, group, client, payload, cancel, deadline, window, task_run
            )
        finally:
            end_web()

    def _web_turn(self, group: Group, trust: str | None) -> Callable[[], None]:
        """The egress gate opens ``group``'s connections while this turn runs, when its
        web policy is open to ``trust``; the function returned ends the turn there."""
        if not group.config.web.enabled:
            return lambda: None
        gate = self._gate()
        gate.serve(group.folder, group.config.web.rules(gate=True))
        return gate.turn_started(group.folder, group.config.web.open_to(trust))

    def _gate(self) -> Gate:
        with self.gate_lock:
            if self.gate is None:
                self.gate = Gate(
                    self.runtime.home.state_dir / "egress",
                    resolver=self.relay.web.resolver,
                    connector=self.relay.web.connector,
                )
            return self.gate

    def _sync_gate(self) -> None:
        """Serve the gate of every group with the web enabled, and of no other."""
        wanted = {
            g.folder: g.config.web.rules(gate=True)
            for g in self.runtime.store.groups()
            if g.config.web.enabled
        }
        if not wanted and self.gate is None:
            return
        gate = self._gate()
        for folder, rules in wanted.items():
            gate.serve(folder, rules)
        for folder in set(gate.served()) - set(wanted):
            gate.stop(folder)

    def _turn_of(
        self,
        message: Message,
        group: Group,
        client: RunnerClient,
        payload: dict[str, Any],
        cancel: Cancel,
        deadline: float,
        window: int | None,
        task_run: bool,
    ) -> dict[str, Any]:
        timeout = float(group.config.turn_timeout_seconds)
        relay = TurnRelay(self.relay, message, group, deadline, window, task_run=task_run)
        delivery = self.active.get(message.id)
        if delivery is not None:
            delivery.relay = relay

        def deliver(seconds: float) -> dict[str, Any]:
            return client.turn(
                payload,
                timeout=seconds,
                cancel=cancel,
                handle=relay.handle,
                request_limit=relay.frame_limit,
            )

        def from_now() -> None:
            # The turn's time runs from its delivery: making its container (and flushing
            # the one that container replaces) before it is not the turn's.
            relay.deadline = time.monotonic() + timeout

        if group.folder in self.outdated:
            self._replace_outdated(group)
            from_now()
        try:
            return deliver(timeout)
        except RunnerUnavailable as exc:  # nothing listens: the container needs starting
            log.info(
                "runner of %s unavailable (%s); ensuring its container", group.folder, exc.message
            )
        lock = self.group_locks.setdefault(group.folder, threading.Lock())
        with lock:
            self.runtime.ensure_running(group)
        from_now()
        return deliver(timeout)

    def _replace_outdated(self, group: Group) -> None:
        """Make ``group``'s container of an older image again, on the current one, before
        this turn: when it is the group's only turn in flight (another turn's container
        is not taken from under it; a later turn makes it again then). The group takes
        no other turn meanwhile."""
        with self.cond:
            if self.running.get(group.folder, 0) > 1 or group.folder in self.reconciling:
                return
            self.reconciling.add(group.folder)
        try:
            with self.group_locks.setdefault(group.folder, threading.Lock()):
                self.runtime.ensure_running(group)  # another config hash: made again
            self.outdated.discard(group.folder)
            log.info("group %s: its container of an older image made again", group.folder)
        finally:
            with self.cond:
                self.reconciling.discard(group.folder)
                self._notify()

    def _window(self, group: Group) -> tuple[int | None, int | None]:
        """The context window of the group's model and its answer's room, in tokens
        (None for the offline provider, whose runner uses its defaults)."""
        config = group.config
        definition = self.config.providers.get(config.provider)
        if definition is None:
            return None, None
        answer = min(config.limits.max_tokens, definition.max_tokens)
        try:
            key = resolve_key(definition, self.config.secrets_file)
        except OrchestratorError:
            key = None
        window = self.relay.windows.of(definition, config.model, key)
        return window.tokens, answer

    def _reconcile(self) -> list[Action]:
        """Bring the containers in line with the groups, logging each change (adopting
        a running container that is already right is not one); the plan. A container
        to be made again (a changed group.yaml) waits while its group has a turn in
        flight: it is made again between turns, at a later round. One whose image alone
        is older (an upgrade) is made again at its group's next turn instead."""
        try:
            self._sync_gate()
        except OSError as exc:
            log.warning("the egress gate could not be brought in line: %s", exc)
        planned = self.runtime.plan()
        self.outdated = {a.folder for a in planned if a.reason == OLDER_IMAGE and a.folder}
        actions = []
        held: set[str] = set()  # the groups this round holds
        with self.cond:  # a group made again or stopped takes no turn meanwhile
            busy = {group for group, _ in self.busy}
            for action in planned:
                if action.kind in (RECREATE, STOP_IDLE) and action.folder in busy:
                    log.info("reconcile: %s waits for its turns to end", action.container)
                    continue
                if action.kind in (RECREATE, STOP_IDLE) and action.folder is not None:
                    self.reconciling.add(action.folder)
                    held.add(action.folder)
                actions.append(action)
        try:
            for action in actions:
                if action.kind == STOP_IDLE and action.folder is not None:
                    self.flush_idle(action.folder)  # what its sessions hold is saved first
            apply_plan(actions, self.runtime)
        finally:
            with self.cond:
                self.reconciling.difference_update(held)
                self._notify()
        for action in actions:
            if action.kind not in (ADOPT, KEEP_IDLE):  # nothing changed for these
                log.info("reconcile: %s %s (%s)", action.kind, action.container, action.reason)
        return planned

    def flush_idle(self, folder: str) -> list[str]:
        """Before ``folder``'s idle container stops: a memory flush of the sessions its
        runner served, as a housekeeping turn the host opens (model calls for a flush
        only, on the group's flush model, its usage recorded under a record of its own),
        recorded in the memory history as a ``flush`` change with the sessions it came
        from and the lowest trust of their senders. The sessions flushed; never raises
        (the container stops whether or not the flush could run)."""
        try:
            group = self.runtime.store.load(folder)
            self._record_outside(folder, self.runtime.container_name(group))
            timeout = float(group.config.turn_timeout_seconds)
            window, answer_tokens = self._window(group)
            record = new_message(
                group=folder,
                session="",
                chat="-",
                thread=None,
                sender="host",
                trust=CREATOR,
                text=FLUSH_TEXT,
                channel="host",
            )
            payload = TurnRequest(
                turn_id=f"flush-{record.id}",
                chat="-",
                text=FLUSH_TEXT,
                sender="host",
                trust=CREATOR,
                channel="host",
                tools=(),
                window_tokens=window,
                answer_tokens=answer_tokens,
                deadline_seconds=timeout,
                timezone=group.config.timezone,
            ).to_wire()
            deadline = time.monotonic() + timeout
            relay = TurnRelay(self.relay, record, group, deadline, window, housekeeping=True)
            answer = self.runtime.runner(group).turn(
                payload,
                timeout=timeout,
                handle=relay.handle,
                request_limit=relay.frame_limit,
                op=FLUSH_OP,
            )
        except RunnerUnavailable:
            return []  # no runner: nothing it holds is unsaved
        except Exception as exc:
            log.warning("memory flush of %s before its idle stop failed: %s", folder, exc)
            return []
        flushed = flushed_sessions(answer)
        if not flushed:
            return []
        sessions = sorted(flushed)
        trust = lowest_trust(self.queue.trusts_in_sessions(folder, sessions))
        chars = sum(flushed.values())
        choice = group.config.model_for("flush")
        try:
            self.history(folder).record(
                Provenance(
                    FLUSH,
                    sender="host",
                    trust=trust,
                    message_id=record.id,
                    channel="host",
                    session=",".join(sessions)[:HISTORY_SESSIONS_MAX_CHARS],
                    provider=choice.provider,
                    model=choice.model,
                    note=f"{len(sessions)} sessions before the idle container stopped, "
                    f"{chars} characters appended",
                )
            )
        except Exception as exc:
            log.warning("memory history of %s not recorded after an idle flush: %s", folder, exc)
        log.info("memory flush of %s before its idle stop: %s", folder, ", ".join(sessions))
        return sessions

    def _reconcile_loop(self) -> None:
        while not self.stopping.wait(RECONCILE_INTERVAL_SECONDS):
            try:
                self._reconcile()
            except Exception as exc:
                log.warning("reconcile failed: %s", exc)

    def _scheduler_loop(self) -> None:
        while not self.stopping.wait(SCHEDULER_TICK_SECONDS):
            try:
                self.run_due_tasks()
            except Exception as exc:
                log.warning("the scheduler failed; trying again: %s", exc)

    def run_due_tasks(self, now: float | None = None) -> int:
        """Queue the messages of tasks due at ``now``; returns how many were queued.
        Not while draining: a task due then runs at the next start (within its grace)."""
        if not self.accepting:
            return 0
        queued = [r for r in self.scheduler.tick(now) if r.message_id is not None]
        if queued:
            with self.cond:
                self._notify()
        return len(queued)

    def _housekeeping_loop(self) -> None:
        last_full: float | None = None  # the first round is full, however soon after boot
        while not self.stopping.wait(HOUSEKEEPING_INTERVAL_SECONDS):
            try:
                full = (
                    last_full is None or time.monotonic() - last_full >= DISK_CHECK_INTERVAL_SECONDS
                )
                if full:
                    last_full = time.monotonic()
                self.housekeeping(all_groups=full)
            except Exception as exc:
                log.warning("housekeeping failed: %s", exc)

    def housekeeping(self, *, all_groups: bool = False) -> None:
        """One round: queue again what a failed commit left in flight, keep the disk
        reserve, and check disk use of groups that ran a turn (or of all groups)."""
        with self.cond:
            held = set(self.active)
            dirty, self.disk_dirty = self.disk_dirty, set()
        released = self.queue.release_stale(held)
        if released:
            log.warning("%d messages left in flight by a failed commit are queued again", released)
            with self.cond:
                self._notify()
        if self.queue.reserve is not None:
            self.queue.reserve.ensure()
        folders = {g.folder for g in self.runtime.store.groups()} if all_groups else dirty
        # a group paused for its disk is looked at every round: it resumes soon after
        # space is freed
        disk_paused = self._disk_paused()
        for folder in sorted(folders | disk_paused):
            self.check_disk(folder, disk_paused)
        if all_groups:
            self.consolidate_due()
            expired = HeldRequests(self.queue).prune()
            if expired:
                log.info("%d held requests expired without approval", expired)
            pruned = self.chats.prune()
            if pruned:
                log.debug(
                    "forgot %d old chat-app records (update ids, sent replies, codes)", pruned
                )
            from orchestrator.media.outbox import prune_outbox

            old = self.queue.outbox_files_before(time.time() - OUTBOX_KEEP_SECONDS)
            removed = prune_outbox(self.home.state_dir, old)
            if removed:
                log.info("removed %d files sent more than a week ago from the outbox", removed)

    def consolidate_due(self, now: float | None = None) -> list[str]:
        """Start the nightly consolidation of each group with ``memory.consolidate:
        daily`` whose night it is (past CONSOLIDATE_LOCAL_HOUR in its zone) and which
        has not had one on this local day; each runs in a thread of its own (it waits
        for the model and for the group's turns). The folders started."""
        from datetime import datetime
        from zoneinfo import ZoneInfo

        now = time.time() if now is None else now
        done = self._consolidated()
        started = []
        for group in self.runtime.store.groups():
            if group.config.memory.consolidate != "daily":
                continue
            local = datetime.fromtimestamp(now, ZoneInfo(group.config.timezone))
            day = local.strftime("%Y-%m-%d")
            if local.hour < CONSOLIDATE_LOCAL_HOUR or done.get(group.folder) == day:
                continue
            with self.cond:
                if group.folder in self.consolidating:
                    continue
                self.consolidating.add(group.folder)
            thread = threading.Thread(
                target=self._consolidate,
                args=(group, day),
                name=f"consolidate-{group.folder}",
                daemon=True,
            )
            thread.start()
            started.append(group.folder)
        return started

    def _consolidate(self, group: Group, day: str) -> None:
        from orchestrator.memory.consolidate import ConsolidationError, NoNotes
        from orchestrator.relay.consolidation import run_consolidation

        try:
            report = run_consolidation(
                self.home,
                group,
                usage=self.relay.usage,
                queue=self.queue,
                config=self.config,
                adapters=self.relay.adapter,
            )
            log.info(
                "consolidated the memory of %s: %d promoted, %d refused, %d lines not "
                "eligible (change %s)",
                group.folder,
                len(report.promoted),
                len(report.refused),
                len(report.rejected),
                report.change or "none",
            )
        except NoNotes:
            log.info("no daily notes of %s to consolidate tonight", group.folder)
        except (ConsolidationError, OrchestratorError) as exc:
            log.warning("consolidation of %s failed (tried again tomorrow): %s",
                        group.folder, exc.message)  # fmt: skip
        except Exception:
            log.exception("consolidation of %s failed (tried again tomorrow)", group.folder)
        finally:
            try:
                self._mark_consolidated(group.folder, day)
            finally:
                with self.cond:
                    self.consolidating.discard(group.folder)

    def _consolidated(self) -> dict[str, str]:
        """folder -> the local day of its last nightly consolidation."""
        try:
            data = json.loads((self.home.state_dir / CONSOLIDATED_FILE).read_text())
        except (OSError, ValueError):
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def _mark_consolidated(self, folder: str, day: str) -> None:
        from orchestrator.fsatomic import write_atomic

        with self.consolidated_lock:
            done = self._consolidated()
            done[folder] = day
            write_atomic(self.home.state_dir / CONSOLIDATED_FILE, json.dumps(done, indent=1))

    def _disk_paused(self) -> set[str]:
        """The groups holding a pause for their disk."""
        return {p.group for p in self.queue.pauses() if p.holder == DISK_HOLDER}

    def check_disk(self, folder: str, disk_paused: set[str] | None = None) -> bool:
        """Pause ``folder`` (refusing new messages) while it is over its disk limit, and
        resume it once it is under; True when it is over. ``disk_paused``: the groups
        holding a disk pause, when the caller has read them (a round of housekeeping
        reads them once for all its groups)."""
        try:
            group = self.runtime.store.load(folder)
        except OrchestratorError:
            return False
        used = group_disk_usage(self.runtime.store.root, folder)
        limit = group.config.container.disk_bytes
        paused = folder in (self._disk_paused() if disk_paused is None else disk_paused)
        if used > limit and not paused:
            reason = over_limit_reason(folder, used, limit)
            self.queue.pause(folder, DISK_HOLDER, reason, refuse_new=True)
            log.warning("paused %s: %s", folder, reason)
        elif used <= limit and paused:
            self.queue.resume(folder, DISK_HOLDER)
            log.info("resumed %s: its disk use is under its limit again", folder)
            with self.cond:
                self._notify()
        return used > limit


def check_inbound(*, text: Any, chat: Any, sender: Any, thread: Any, files: bool = False) -> None:
    """BadInput naming the field when an inbound message is not acceptable (its text may
    be empty when it came with ``files``)."""
    if not isinstance(text, str) or (not text.strip() and not files):
        raise BadInput("the message text is empty")
    if len(text) > INBOUND_TEXT_MAX_CHARS:
        raise BadInput(
            f"the message is {len(text)} characters; at most {INBOUND_TEXT_MAX_CHARS} are accepted"
        )
    if problem := text_problem(text, multiline=True):
        raise BadInput(f"the message text {problem}")
    for what, value, required in (
        ("sender", sender, True),
        ("chat", chat, True),
        ("thread", thread, False),
    ):
        if value is None and not required:
            continue
        if not isinstance(value, str) or not value or len(value) > SENDER_ID_MAX_CHARS:
            shown = f"{len(value)} characters" if isinstance(value, str) else repr(value)
            raise BadInput(f"{what} must be 1..{SENDER_ID_MAX_CHARS} characters (got {shown})")
        if problem := text_problem(value):
            raise BadInput(f"{what} {problem}")


FLUSH_TEXT = "[memory flush before the idle container stops]"
FLUSHED_SESSIONS_MAX = 256  # sessions one idle flush's answer may name
HISTORY_SESSIONS_MAX_CHARS = 2_000


def flushed_sessions(answer: dict[str, Any]) -> dict[str, int]:
    """The sessions an idle flush's answer says it flushed, with the characters each
    appended: what is not a session key or a count is left out (the runner is not
    trusted; this names its change in the history, nothing more)."""
    found: dict[str, int] = {}
    items = answer.get("flushed") if answer.get("ok") else None
    if not isinstance(items, list):
        return found
    for item in items[:FLUSHED_SESSIONS_MAX]:
        if not isinstance(item, dict):
            continue
        key, chars = item.get("session"), item.get("appended_chars")
        if not isinstance(key, str) or not re.fullmatch(SESSION_KEY_PATTERN, key):
            continue
        if isinstance(chars, bool) or not isinstance(chars, int) or chars < 0:
            chars = 0
        found[key] = chars
    return found


def lowest_trust(trusts: set[str]) -> str:
    """The least trusted of ``trusts`` (anything but creator and member is guest)."""
    if trusts - {CREATOR, MEMBER}:
        return GUEST
    return MEMBER if MEMBER in trusts else CREATOR


def _resume_hint(folder: str, pause: Pause) -> str:
    if pause.holder == DISK_HOLDER:
        return f"free space in groups/{folder}/ (see: orchestrator status)"
    return f"resume it with: orchestrator group resume {folder}"
