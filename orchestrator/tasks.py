"""Scheduled tasks: a group asked to do something later, once or on a schedule.

Tasks live in the host's queue database (tables ``tasks`` and ``task_runs``). A due task
becomes an ordinary message in the queue, in one transaction with the record of that
run and the task's next due time: a task never runs twice for one due time, whatever
stops when. The message is sent as the task's author, whose trust is checked again at
each run and capped at member (a task can never write learned behaviors), into the chat
and thread recorded when the task was made (from the host's record of that turn or
command, never from anything a container sends). Delivery, retries, dead letters and
budgets then apply unchanged.

Schedules: ``at`` (once: an ISO 8601 time, or a delay such as ``20m``), ``every`` (an
interval, at least the group's ``tasks.min_interval``) and ``cron`` (a cron expression
in the task's time zone, computed by croniter; a time in a daylight-saving gap runs at
the first time after it, a time in a repeated hour runs in both). A task due while the
daemon was down runs once when it is back, if it is less than ``tasks.grace`` late;
otherwise that run is skipped and logged.
"""

from __future__ import annotations

import itertools
import logging
import math
import re
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from orchestrator.errors import BadInput, GroupNotFound, OrchestratorError
from orchestrator.group_config import TaskSettings, classify_sender
from orchestrator.groups import GroupStore
from orchestrator.limits import TASK_TEXT_MAX_CHARS
from orchestrator.protocol import session_key
from orchestrator.queue import Message, MessageQueue, insert_message, new_message
from orchestrator.units import parse_duration

log = logging.getLogger("orchestrator.tasks")
AT, EVERY, CRON = "at", "every", "cron"
KINDS = (AT, EVERY, CRON)
ACTIVE, PAUSED, DONE = "active", "paused", "done"
MEMBER = "member"  # what a task runs as, at most
# Notices the scheduler posts itself are messages of this sender, in a session of their own.
HOST_SENDER = "orchestrator"
LIMIT_NOTICE_SESSION = "orchestrator-notices"
# The author trust of a task the operator made with the CLI: not a group's trust level,
# so it is not checked against the group's lists (the operator runs the host).
OPERATOR = "operator"
_COLUMNS = (
    "id, group_folder, chat, thread, channel, text, kind, spec, tz, author, author_trust, "
    "state, created, next_run, last_run, last_outcome, runs"
)


class TaskRefused(BadInput):
    """A task that cannot be made or changed as asked."""


@dataclass(frozen=True)
class Task:
    id: int
    group: str
    chat: str
    thread: str | None
    channel: str
    text: str
    kind: str
    spec: str
    tz: str
    author: str
    author_trust: str
    state: str
    created: float
    next_run: float | None
    last_run: float | None
    last_outcome: str | None
    runs: int

    @property
    def schedule(self) -> str:
        if self.kind == AT:
            return f"once at {_local(self.next_run or self.last_run, self.tz)}"
        if self.kind == EVERY:
            return f"every {self.spec}"
        return f"cron '{self.spec}' ({self.tz})"

    @property
    def next_local(self) -> str:
        """The next run in the task's zone, or "-" when there is none."""
        return _local(self.next_run, self.tz) if self.state == ACTIVE else "-"

    def to_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "group": self.group,
            "chat": self.chat,
            "thread": self.thread,
            "channel": self.channel,
            "text": self.text,
            "kind": self.kind,
            "spec": self.spec,
            "timezone": self.tz,
            "schedule": self.schedule,
            "author": self.author,
            "author_trust": self.author_trust,
            "state": self.state,
            "created": self.created,
            "next_run": self.next_run,
            "last_run": self.last_run,
            "last_outcome": self.last_outcome,
            "runs": self.runs,
        }


def _task(row: tuple[object, ...]) -> Task:
    return Task(
        int(row[0]),  # type: ignore[call-overload]
        str(row[1]),
        str(row[2]),
        None if row[3] is None else str(row[3]),
        str(row[4]),
        str(row[5]),
        str(row[6]),
        str(row[7]),
        str(row[8]),
        str(row[9]),
        str(row[10]),
        str(row[11]),
        float(row[12]),  # type: ignore[arg-type]
        None if row[13] is None else float(row[13]),  # type: ignore[arg-type]
        None if row[14] is None else float(row[14]),  # type: ignore[arg-type]
        None if row[15] is None else str(row[15]),
        int(row[16]),  # type: ignore[call-overload]
    )


def _local(stamp: float | None, tz: str) -> str:
    if stamp is None:
        return "-"
    return datetime.fromtimestamp(stamp, ZoneInfo(tz)).strftime("%Y-%m-%d %H:%M %Z")


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise TaskRefused(
            f"unknown time zone {name!r}", hint="use an IANA name such as Europe/Lisbon or UTC"
        ) from None


def parse_at(value: str, tz: str, now: float) -> float:
    """When a one-off task is due: a delay (``20m``, ``2h``, ``1d``, ``90s``) from ``now``,
    or an ISO 8601 time (without an offset, in ``tz``); TaskRefused otherwise."""
    text = value.strip()
    delay = parse_duration(text) if re.fullmatch(r"\d+\s*[smhd]", text) else None
    if delay is not None:
        if delay <= 0:
            raise TaskRefused(f"--at {value!r}: a delay must be more than 0")
        return now + delay
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise TaskRefused(
            f"--at {value!r}: not a time",
            hint="give a delay such as 20m or 2h, or a time such as 2026-12-24T18:00",
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=zone(tz))
    stamp = when.timestamp()
    if stamp <= now:
        raise TaskRefused(f"--at {value!r}: that time has passed")
    return stamp


def cron_next(spec: str, tz: str, after: float) -> float:
    """The first time after ``after`` that ``spec`` names, in zone ``tz``."""
    from croniter import croniter

    start = datetime.fromtimestamp(after, zone(tz))
    nxt: datetime = croniter(spec, start).get_next(datetime)
    return nxt.timestamp()


def check_schedule(
    kind: str, spec: str, tz: str, now: float, min_interval: int
) -> tuple[str, float]:
    """(the spec as stored, the first due time); TaskRefused naming what is wrong."""
    zone(tz)
    if kind == AT:
        due = parse_at(spec, tz, now)
        if due - now < min_interval:
            raise TaskRefused(
                f"--at {spec!r}: sooner than this group allows (at least {min_interval}s from now)",
                hint="give a later time, or lower tasks.min_interval in its group.yaml",
            )
        return spec.strip(), due
    if kind == EVERY:
        seconds = parse_duration(spec)
        if seconds is None or seconds <= 0:
            raise TaskRefused(
                f"--every {spec!r}: not a duration", hint="give one such as 30m, 2h or 1d"
            )
        if seconds < min_interval:
            raise TaskRefused(
                f"--every {spec!r}: more often than this group allows "
                f"(at least {min_interval}s apart)",
                hint="raise the interval, or tasks.min_interval in its group.yaml",
            )
        return spec.strip(), now + seconds
    if kind == CRON:
        from croniter import croniter

        if not croniter.is_valid(spec):
            raise TaskRefused(
                f"--cron {spec!r}: not a cron expression",
                hint="five fields: minute hour day month weekday, such as '0 8 * * 1-5'",
            )
        first = cron_next(spec, tz, now)
        times = [first]
        for _ in range(4):
            times.append(cron_next(spec, tz, times[-1]))
        gap = min(b - a for a, b in itertools.pairwise(times))
        if gap < min_interval:
            raise TaskRefused(
                f"--cron {spec!r}: runs {gap:g}s apart, more often than this group allows "
                f"(at least {min_interval}s)",
                hint="raise tasks.min_interval in its group.yaml, or run less often",
            )
        return " ".join(spec.split()), first
    raise TaskRefused(f"unknown schedule kind {kind!r}; known: {', '.join(KINDS)}")


def next_due(task: Task, after: float) -> float | None:
    """The task's next due time strictly after ``after`` (None for a one-off)."""
    if task.kind == AT:
        return None
    if task.kind == EVERY:
        seconds = parse_duration(task.spec) or 60
        due = task.next_run if task.next_run is not None else after
        if due <= after:  # whole intervals on from the last due time (no loop: a long
            due += (math.floor((after - due) / seconds) + 1) * seconds  # downtime is cheap)
        return due
    return cron_next(task.spec, task.tz, after)


class TaskStore:
    """Tasks in the queue's database."""

    def __init__(self, queue: MessageQueue) -> None:
        self.queue = queue

    def add(
        self,
        *,
        group: str,
        chat: str,
        thread: str | None,
        channel: str,
        text: str,
        kind: str,
        spec: str,
        tz: str | None,
        author: str,
        author_trust: str,
        settings: TaskSettings,
        now: float | None = None,
    ) -> Task:
        """Make a task; TaskRefused when the author may not schedule, the text, schedule or
        zone is wrong, or the group has as many tasks as it may."""
        now = time.time() if now is None else now
        if author_trust != OPERATOR and author_trust not in settings.allowed:
            allowed = " and ".join(f"{a}s" for a in settings.allowed) or "nobody"
            raise TaskRefused(
                f"{author!r} ({author_trust}) may not schedule tasks in group {group!r}; "
                f"{allowed} may",
                hint="tasks.allowed in its group.yaml says who may",
            )
        text = text.strip()
        if not text or len(text) > TASK_TEXT_MAX_CHARS:
            raise TaskRefused(f"a task's text must be 1 to {TASK_TEXT_MAX_CHARS} characters")
        tz = tz or settings.timezone
        stored, first = check_schedule(kind, spec, tz, now, settings.min_interval_seconds)

        def work(db: sqlite3.Connection) -> int:
            count = db.execute(
                "SELECT COUNT(*) FROM tasks WHERE group_folder=? AND state<>?", (group, DONE)
            ).fetchone()[0]
            if count >= settings.max_tasks:
                raise TaskRefused(
                    f"group {group!r} has {count} tasks, as many as it may have",
                    hint="remove one (task remove ID), or raise tasks.max in its group.yaml",
                )
            cursor = db.execute(
                "INSERT INTO tasks (group_folder, chat, thread, channel, text, kind, spec, tz,"
                " author, author_trust, state, created, next_run)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (group, chat, thread, channel, text, kind, stored, tz, author, author_trust,
                 ACTIVE, now, first),
            )  # fmt: skip
            return int(cursor.lastrowid or 0)

        task_id = self.queue.transaction(work)
        task = self.get(task_id)
        assert task is not None
        log.info("task %d in %s by %r: %s", task.id, group, author, task.schedule)
        return task

    def get(self, task_id: int) -> Task | None:
        rows = self.queue.read(f"SELECT {_COLUMNS} FROM tasks WHERE id=?", (task_id,))
        return _task(rows[0]) if rows else None

    def tasks(
        self, group: str | None = None, chat: str | None = None, *, done: bool = False
    ) -> list[Task]:
        sql, args = f"SELECT {_COLUMNS} FROM tasks WHERE 1=1", []
        if group is not None:
            sql += " AND group_folder=?"
            args.append(group)
        if chat is not None:
            sql += " AND chat=?"
            args.append(chat)
        if not done:
            sql += " AND state<>?"
            args.append(DONE)
        return [_task(r) for r in self.queue.read(sql + " ORDER BY id", tuple(args))]

    def due(self, now: float) -> list[Task]:
        """Active tasks due at ``now``, the earliest first (the (state, next_run) index)."""
        rows = self.queue.read(
            f"SELECT {_COLUMNS} FROM tasks WHERE state=? AND next_run<=? ORDER BY next_run",
            (ACTIVE, now),
        )
        return [_task(r) for r in rows]

    def next_wakeup(self) -> float | None:
        rows = self.queue.read("SELECT MIN(next_run) FROM tasks WHERE state=?", (ACTIVE,))
        return None if not rows or rows[0][0] is None else float(rows[0][0])  # type: ignore[arg-type]

    def set_state(self, task_id: int, state: str, now: float | None = None) -> Task:
        """Pause, resume (next due time recomputed from now when it passed) or finish."""
        task = self.require(task_id)
        now = time.time() if now is None else now
        next_run = task.next_run
        if state == ACTIVE and task.state != ACTIVE and next_run is not None and next_run <= now:
            next_run = next_due(task, now) if task.kind != AT else now
        self.queue.transaction(
            lambda db: db.execute(
                "UPDATE tasks SET state=?, next_run=? WHERE id=?", (state, next_run, task_id)
            )
        )
        return self.require(task_id)

    def cancel(self, task_id: int, outcome: str) -> Task:
        """Finish a task now (it stays listed with ``--all`` and keeps its runs)."""
        self.require(task_id)
        self.queue.transaction(
            lambda db: db.execute(
                "UPDATE tasks SET state=?, next_run=NULL, last_outcome=? WHERE id=?",
                (DONE, outcome, task_id),
            )
        )
        return self.require(task_id)

    def remove(self, task_id: int) -> None:
        """Delete a task and the record of its runs (its messages stay in the queue)."""
        self.require(task_id)

        def work(db: sqlite3.Connection) -> None:
            db.execute("DELETE FROM task_runs WHERE task_id=?", (task_id,))
            db.execute("DELETE FROM tasks WHERE id=?", (task_id,))

        self.queue.transaction(work)

    def remove_group(self, group: str) -> int:
        """Delete every task of ``group`` and their runs; returns how many tasks."""

        def work(db: sqlite3.Connection) -> int:
            db.execute(
                "DELETE FROM task_runs WHERE task_id IN"
                " (SELECT id FROM tasks WHERE group_folder=?)",
                (group,),
            )
            return db.execute("DELETE FROM tasks WHERE group_folder=?", (group,)).rowcount

        return self.queue.transaction(work)

    def told_since(self, group: str, since: float) -> bool:
        """Whether ``group``'s chats were told of a task limit at or after ``since``."""
        rows = self.queue.read(
            "SELECT 1 FROM messages WHERE group_folder=? AND session=? AND created>=? LIMIT 1",
            (group, LIMIT_NOTICE_SESSION, since),
        )
        return bool(rows)

    def tell(self, task: Task, text: str) -> None:
        """A notice from the host in the chat of ``task`` (a message the host answered
        itself, in a session of its own: no conversation's context holds it)."""
        self.queue.record_done(
            group=task.group,
            session=LIMIT_NOTICE_SESSION,
            chat=task.chat,
            thread=task.thread,
            sender=HOST_SENDER,
            trust=HOST_SENDER,
            text=f"[task {task.id} paused]",
            channel=task.channel,
            reply=text,
        )

    def require(self, task_id: int) -> Task:
        task = self.get(task_id)
        if task is None:
            raise TaskRefused(f"no task {task_id}", hint="see the ids in: orchestrator task list")
        return task

    def chat_channel(self, group: str, chat: str, channel: str | None = None) -> str | None:
        """The channel of the latest message of ``chat`` in ``group`` (``channel`` when
        it has seen the chat there): None when the group has never seen that chat (a task
        may only be aimed at a chat of its own group)."""
        sql, args = "SELECT channel FROM messages WHERE group_folder=? AND chat=?", [group, chat]
        if channel is not None:
            sql += " AND channel=?"
            args.append(channel)
        rows = self.queue.read(sql + " ORDER BY created DESC LIMIT 1", tuple(args))
        return str(rows[0][0]) if rows else None

    def runs_in_chat(
        self, group: str, chat: str, since: float, limit: int = 50, channel: str | None = None
    ) -> list[tuple[int, str]]:
        """(task id, message id) of the runs queued into ``chat`` of ``group`` (of one
        channel's, when given) at or after ``since``, oldest first: what a chat shows as
        it arrives."""
        sql = (
            "SELECT r.task_id, r.message_id FROM task_runs r JOIN tasks t ON t.id=r.task_id"
            " WHERE t.group_folder=? AND t.chat=? AND r.at>=? AND r.message_id IS NOT NULL"
        )
        args: list[object] = [group, chat, since]
        if channel is not None:
            sql += " AND t.channel=?"
            args.append(channel)
        rows = self.queue.read(sql + " ORDER BY r.at DESC LIMIT ?", (*args, limit))
        return [(int(r[0]), str(r[1])) for r in reversed(rows)]  # type: ignore[call-overload]

    def run_of(self, message_id: str) -> int | None:
        """The task whose run ``message_id`` is, or None (a person's message)."""
        rows = self.queue.read(
            "SELECT task_id FROM task_runs WHERE message_id=? LIMIT 1", (message_id,)
        )
        return int(str(rows[0][0])) if rows else None

    def runs_since(self, group: str, since: float) -> int:
        """Runs of ``group``'s tasks queued at or after ``since``."""
        rows = self.queue.read(
            "SELECT COUNT(*) FROM task_runs r JOIN tasks t ON t.id=r.task_id"
            " WHERE t.group_folder=? AND r.at>=? AND r.message_id IS NOT NULL",
            (group, since),
        )
        return int(str(rows[0][0]))

    def runs(self, task_id: int) -> list[tuple[float, str | None, str]]:
        """(due time, message id or None, outcome) of each run, oldest first."""
        return [
            (float(r[0]), None if r[1] is None else str(r[1]), str(r[2]))  # type: ignore[arg-type]
            for r in self.queue.read(
                "SELECT due, message_id, outcome FROM task_runs WHERE task_id=? ORDER BY due",
                (task_id,),
            )
        ]


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
        self._record(task, now, now, following, message, "run by hand", keep_state=True)
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
        following = next_due(task, now)
        late = now - due
        if late > settings.grace_seconds:
            outcome = f"skipped: due {late:.0f}s ago, past the {settings.grace_seconds}s grace"
            self._record(task, due, now, following, None, outcome)
            log.warning("task %d of %s: %s", task.id, task.group, outcome)
            return RunOutcome(task.id, due, None, outcome)
        ceiling = settings.max_runs_per_hour
        if self.store.runs_since(task.group, now - 3600) >= ceiling:
            return self._over_ceiling(task, due, now, ceiling)
        message = self._message(task, session)
        outcome = "queued" if late <= 1 else f"queued {late:.0f}s late"
        ran = self._record(task, due, now, following, message, outcome)
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
        self.store.queue.transaction(
            lambda db: db.execute(
                "UPDATE tasks SET state=?, last_outcome=? WHERE id=?", (PAUSED, outcome, task.id)
            )
        )
        return RunOutcome(task.id, due, None, outcome)

    def _record(
        self,
        task: Task,
        due: float,
        now: float,
        following: float | None,
        message: Message | None,
        outcome: str,
        *,
        keep_state: bool = False,
    ) -> bool:
        """In one transaction: the run (once per due time), its message, the next due time.
        False when this due time had run already (nothing else changes then but the next
        due time)."""

        def work(db: sqlite3.Connection) -> bool:
            message_id = None if message is None else message.id
            try:
                db.execute(
                    "INSERT INTO task_runs (task_id, due, message_id, outcome, at)"
                    " VALUES (?,?,?,?,?)",
                    (task.id, due, message_id, outcome, now),
                )
            except sqlite3.IntegrityError:
                ran = False
            else:
                ran = True
                if message is not None:
                    insert_message(db, message)
            state = DONE if following is None else (task.state if keep_state else ACTIVE)
            db.execute(
                "UPDATE tasks SET state=?, next_run=?, last_run=?, last_outcome=?,"
                " runs=runs+? WHERE id=? AND state=?",
                (state, following, due, outcome, int(ran and message is not None), task.id,
                 task.state if keep_state else ACTIVE),
            )  # fmt: skip
            return ran

        return self.store.queue.transaction(work)


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
