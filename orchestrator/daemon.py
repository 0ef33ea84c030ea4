"""The daemon: accepts messages from channels, keeps them durable, delivers them to the
groups' containers and stores the replies.

A channel calls ``submit`` (the message is committed before it returns) and may
``wait`` for the outcome. A dispatcher thread hands runnable messages to a bounded pool
of workers: one turn at a time per session, round-robin between groups. Delivery is
pushed over each group's runner socket; a failure is retried with backoff, then
dead-lettered. SIGTERM drains: no new messages, turns in flight finish (or are
delivered again at the next start), then the daemon exits.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from orchestrator.agent.session import session_key
from orchestrator.config import Home, OrchestratorConfig
from orchestrator.errors import BadInput, DaemonStopping, OrchestratorError, SenderRefused
from orchestrator.group_config import GroupConfig
from orchestrator.limits import (
    DRAIN_TIMEOUT_SECONDS,
    INBOUND_TEXT_MAX_CHARS,
    RECONCILE_INTERVAL_SECONDS,
    SENDER_ID_MAX_CHARS,
)
from orchestrator.queue import DEAD, DONE, Message, MessageQueue
from orchestrator.runtime.channel import RunnerUnavailable
from orchestrator.runtime.lifecycle import GroupRuntime

log = logging.getLogger("orchestrator.daemon")
CREATOR, MEMBER, GUEST = "creator", "member", "guest"


def classify_sender(config: GroupConfig, sender: str) -> str | None:
    """The trust level of ``sender`` in a group, or None when the sender is refused."""
    if sender in config.creators:
        return CREATOR
    if sender in config.members:
        return MEMBER
    return GUEST if config.unknown_senders == "allow" else None


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


class DeliveryFailed(OrchestratorError):
    pass


@dataclass
class DaemonStats:
    delivered: int = 0
    failed: int = 0


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
        self.concurrency = concurrency or max(1, os.cpu_count() or 1)
        self.cond = threading.Condition()
        self.busy: set[tuple[str, str]] = set()
        self.inflight = 0
        self.last_served: dict[str, float] = {}
        self.group_locks: dict[str, threading.Lock] = {}
        self.accepting = True
        self.stopping = threading.Event()
        self.stats = DaemonStats()
        self.pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="turn")
        self.threads: list[threading.Thread] = []

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
    ) -> Message:
        """Accept one inbound message; returns after it is committed to the queue."""
        if not self.accepting:
            raise DaemonStopping(
                "the daemon is shutting down and accepts no new messages",
                hint="send again once it is back",
            )
        if not isinstance(text, str) or not text.strip():
            raise BadInput("the message text is empty")
        if len(text) > INBOUND_TEXT_MAX_CHARS:
            raise BadInput(
                f"the message is {len(text)} characters; at most "
                f"{INBOUND_TEXT_MAX_CHARS} are accepted"
            )
        for what, value in (("chat", chat), ("sender", sender), ("thread", thread or "x")):
            if not isinstance(value, str) or not value or len(value) > SENDER_ID_MAX_CHARS:
                raise BadInput(f"{what} must be 1..{SENDER_ID_MAX_CHARS} characters")
        group = self.runtime.store.find(name)
        trust = classify_sender(group.config, sender)
        if trust is None:
            log.warning(
                "refused a message from %r to group %s via %s: unknown sender",
                sender,
                group.folder,
                channel,
            )
            raise SenderRefused(
                f"sender {sender!r} may not talk to group {group.folder!r}",
                hint="add the sender to creators or members in its group.yaml",
            )
        session = session_key(group.config.session_mode, chat, thread)
        message = self.queue.enqueue(
            group=group.folder,
            session=session,
            chat=chat,
            thread=thread,
            sender=sender,
            trust=trust,
            text=text,
            channel=channel,
        )
        with self.cond:
            self.cond.notify_all()
        return message

    def wait(self, message_id: str, timeout: float) -> Message | None:
        """The message once done or dead, or as it is when ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                message = self.queue.get(message_id)
                if message is None or message.state in (DONE, DEAD):
                    return message
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return message
                self.cond.wait(min(remaining, 1.0))

    def retry(self, message_id: str) -> bool:
        ok = self.queue.retry(message_id)
        with self.cond:
            self.cond.notify_all()
        return ok

    # running

    def start(self) -> None:
        recovered = self.queue.recover()
        if recovered:
            log.info("%d messages in flight at the last stop are queued again", recovered)
        try:
            for action in self.runtime.reconcile():
                if action.kind != "adopt":
                    log.info("reconcile: %s %s (%s)", action.kind, action.container, action.reason)
        except OrchestratorError as exc:
            log.warning("reconcile at start failed: %s", exc.message)
        for target, name in (
            (self._dispatch_loop, "dispatch"),
            (self._reconcile_loop, "reconcile"),
        ):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self.threads.append(thread)

    def drain(self, timeout: float = DRAIN_TIMEOUT_SECONDS) -> bool:
        """Stop accepting, let turns in flight finish; True when none was left over."""
        self.accepting = False
        deadline = time.monotonic() + timeout
        with self.cond:
            self.stopping.set()
            self.cond.notify_all()
            while self.inflight and time.monotonic() < deadline:
                self.cond.wait(0.2)
            left = self.inflight
        self.pool.shutdown(wait=False, cancel_futures=True)
        if left:
            log.warning(
                "%d turns still in flight at shutdown; they are delivered again at the next start",
                left,
            )
        return left == 0

    def _dispatch_loop(self) -> None:
        while not self.stopping.is_set():
            with self.cond:
                free = self.concurrency - self.inflight
                candidates = (
                    [m for m in self.queue.runnable() if (m.group, m.session) not in self.busy]
                    if free > 0
                    else []
                )
                if not candidates:
                    wake = self.queue.next_wakeup()
                    wait = 1.0 if wake is None else max(0.01, min(1.0, wake - time.time()))
                    self.cond.wait(wait)
                    continue
                chosen: list[Message] = []
                for message in fair_order(candidates, self.last_served)[:free]:
                    if self.queue.claim(message.id):
                        chosen.append(message)
                        self.busy.add((message.group, message.session))
                        self.inflight += 1
                        self.last_served[message.group] = time.monotonic()
            for message in chosen:
                self.pool.submit(self._deliver, message)

    def _deliver(self, message: Message) -> None:
        delivered = False
        try:
            answer = self._turn(message)
            if not answer.get("ok"):
                raise DeliveryFailed(str(answer.get("error", "the runner refused the turn")))
            replies = answer.get("replies")
            if not isinstance(replies, list) or not all(isinstance(r, str) for r in replies):
                raise DeliveryFailed("the runner's answer has no list of text replies")
            self.queue.complete(message.id, replies)
            delivered = True
        except Exception as exc:
            reason = (
                exc.message
                if isinstance(exc, OrchestratorError)
                else f"{type(exc).__name__}: {exc}"
            )
            state = self.queue.fail(message.id, reason)
            log.warning(
                "delivery of %s to %s failed (%s); now %s", message.id, message.group, reason, state
            )
        finally:
            with self.cond:
                self.busy.discard((message.group, message.session))
                self.inflight -= 1
                if delivered:
                    self.stats.delivered += 1
                else:
                    self.stats.failed += 1
                self.cond.notify_all()

    def _turn(self, message: Message) -> dict[str, Any]:
        group = self.runtime.store.load(message.group)
        client = self.runtime.runner(group)
        payload = {
            "turn_id": message.id,
            "chat": message.chat,
            "thread": message.thread,
            "sender": message.sender,
            "trust": message.trust,
            "text": message.text,
        }
        self.runtime.activity.touch(group.folder)
        try:
            return client.turn(payload)  # the container is usually up: push straight in
        except RunnerUnavailable as exc:
            log.info(
                "runner of %s unavailable (%s); ensuring its container", group.folder, exc.message
            )
        lock = self.group_locks.setdefault(group.folder, threading.Lock())
        with lock:
            self.runtime.ensure_running(group)
        return client.turn(payload)

    def _reconcile_loop(self) -> None:
        while not self.stopping.wait(RECONCILE_INTERVAL_SECONDS):
            try:
                for action in self.runtime.reconcile():
                    if action.kind != "adopt":
                        log.info(
                            "reconcile: %s %s (%s)", action.kind, action.container, action.reason
                        )
            except Exception as exc:
                log.warning("reconcile failed: %s", exc)
