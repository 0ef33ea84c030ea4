"""The scheduler: due tasks become ordinary messages in the queue.

A due task's message is written in one transaction with the record of that run and the
task's next due time: a task never runs twice for one due time, whatever stops when.
The message is sent as the task's author, whose trust is checked again at each run and
capped at member (a task can never write learned behaviors), into the chat and thread
recorded when the task was made (from the host's record of that turn or command, never
from anything a container sends). Delivery, retries, dead letters and budgets then apply
unchanged. A task due while the daemon was down runs once when it is back, if it is less
than ``tasks.grace`` late; otherwise that run is skipped and logged. Runs past the
group's ``tasks.max_runs_per_hour`` pause the task, and its chat is told once an hour.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.errors import GroupNotFound, OrchestratorError
from orchestrator.groups import GroupStore
from orchestrator.groups.config import TaskSettings, classify_sender
from orchestrator.protocol import session_key
from orchestrator.schedules import AT, TaskRefused, next_due
from orchestrator.store.messages import Message, new_message
from orchestrator.store.tasks import DONE, MEMBER, OPERATOR, Task, TaskStore

log = logging.getLogger("orchestrator.tasks")


@dataclass(frozen=True)
class RunOutcome:
    task_id: int
    due: float
    message_id: str | None
    outcome: str


# Given a group folder, a sender, and a (channel, chat, thread): (its config's task
# settings, the sender's trust now, the session key of that chat), or None when the group
# is gone.
GroupLookup = Callable[
    [str, str, str, str, str | None], tuple[TaskSettings, str | None, str] | None
]


class Scheduler:
    """Turns due tasks into queued messages; ``tick`` is called by the daemon every
    second (and by tests with the time they choose)."""

    def __init__(
        self, store: TaskStore, lookup: GroupLookup, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.lookup = lookup
        self.clock = clock
        self._waiting: set[int] = set()  # tasks whose group could not be read

    def tick(self, now: float | None = None) -> list[RunOutcome]:
        now = self.clock() if now is None else now
        return [self._run(task, now) for task in self.store.due(now)]

    def run_now(self, task_id: int, now: float | None = None) -> RunOutcome:
        """Queue a run of the task now, by hand; its schedule is unchanged (a one-off
        that ran by hand is done)."""
        now = self.clock() if now is None else now
        task = self.store.require(task_id)
        if task.state == DONE:
            raise TaskRefused(f"task {task_id} is done; it cannot run again")
        found = self.lookup(task.group, task.author, task.channel, task.chat, task.thread)
        if found is None:
            raise TaskRefused(f"task {task_id}: group {task.group!r} is gone")
        settings, trust, session = found
        if task.author_trust != OPERATOR and (trust is None or trust not in settings.allowed):
            raise TaskRefused(
                f"task {task_id}: its author {task.author!r} may no longer schedule tasks "
                f"in {task.group!r}",
                hint="remove it, or make the author a member again in its group.yaml",
            )
        message = self._message(task, session)
        following = None if task.kind == AT else task.next_run
        self.store.record_run(task, now, now, following, message, "run by hand", keep_state=True)
        log.info("task %d of %s: run by hand as message %s", task.id, task.group, message.id)
        return RunOutcome(task.id, now, message.id, "run by hand")

    def _message(self, task: Task, session: str) -> Message:
        return new_message(
            group=task.group,
            session=session,
            chat=task.chat,
            thread=task.thread,
            sender=task.author,
            trust=MEMBER,  # capped: a task never carries a creator's trust
            text=f"[scheduled task {task.id}] {task.text}",
            channel=task.channel,
        )

    def _run(self, task: Task, now: float) -> RunOutcome:
        due = float(task.next_run or now)
        try:
            found = self.lookup(task.group, task.author, task.channel, task.chat, task.thread)
        except OrchestratorError as exc:  # a group.yaml being edited: try again next tick
            if task.id not in self._waiting:
                log.warning("task %d of %s waits: %s", task.id, task.group, exc.message)
                self._waiting.add(task.id)
            return RunOutcome(task.id, due, None, f"waiting: {exc.message}")
        self._waiting.discard(task.id)
        if found is None:
            return self._pause(task, due, now, f"group {task.group!r} is gone; task paused")
        settings, trust, session = found
        if task.author_trust == OPERATOR:
            trust = OPERATOR
        elif trust is None or trust not in settings.allowed:
            why = (
                "is no longer allowed to talk to the group"
                if trust is None
                else (f"({trust}) may no longer schedule tasks")
            )
            return self._pause(task, due, now, f"author {task.author!r} {why}; task paused")
        following = next_due(task.kind, task.spec, task.tz, task.next_run, now)
        late = now - due
        if late > settings.grace_seconds:
            outcome = f"skipped: due {late:.0f}s ago, past the {settings.grace_seconds}s grace"
            self.store.record_run(task, due, now, following, None, outcome)
            log.warning("task %d of %s: %s", task.id, task.group, outcome)
            return RunOutcome(task.id, due, None, outcome)
        ceiling = settings.max_runs_per_hour
        if self.store.runs_since(task.group, now - 3600) >= ceiling:
            return self._over_ceiling(task, due, now, ceiling)
        message = self._message(task, session)
        outcome = "queued" if late <= 1 else f"queued {late:.0f}s late"
        ran = self.store.record_run(task, due, now, following, message, outcome)
        if not ran:
            return RunOutcome(task.id, due, None, "already run for this due time")
        log.info("task %d of %s: %s as message %s", task.id, task.group, outcome, message.id)
        return RunOutcome(task.id, due, message.id, outcome)

    def _over_ceiling(self, task: Task, due: float, now: float, ceiling: int) -> RunOutcome:
        """Pause a task due while its group is at its hourly ceiling of runs, and tell the
        task's chat once an hour (a host notice, not a turn)."""
        outcome = (
            f"paused: the group's tasks ran {ceiling} times in the last hour, as many as "
            f"tasks.max_runs_per_hour allows (orchestrator task resume {task.id})"
        )
        result = self._pause(task, due, now, outcome)
        if not self.store.told_since(task.group, now - 3600):
            self.store.tell(
                task,
                f"[orchestrator] This group's scheduled tasks ran {ceiling} times in the last "
                f"hour, the most its tasks.max_runs_per_hour allows, so task {task.id} (and "
                "any other task due before the hour is over) is paused. A creator resumes it "
                f"with the operator's `orchestrator task resume {task.id}`, or by scheduling "
                "it again.",
            )
        return result

    def _pause(self, task: Task, due: float, now: float, outcome: str) -> RunOutcome:
        log.warning("task %d of %s: %s", task.id, task.group, outcome)
        self.store.pause_task(task.id, outcome)
        return RunOutcome(task.id, due, None, outcome)


def store_lookup(
    groups: GroupStore, bound: Callable[[str, str, str], str | None] | None = None
) -> GroupLookup:
    """The lookup the scheduler needs, from the groups' own configuration; ``bound(folder,
    channel, chat)`` is the trust a chat binding gives the people of that chat (of that
    channel's account only)."""

    def lookup(
        folder: str, author: str, channel: str, chat: str, thread: str | None
    ) -> tuple[TaskSettings, str | None, str] | None:
        try:
            group = groups.load(folder)
        except GroupNotFound:
            return None
        return (
            group.config.tasks,
            classify_sender(group.config, author, bound(folder, channel, chat) if bound else None),
            session_key(group.config.session_mode, channel, chat, thread),
        )

    return lookup
