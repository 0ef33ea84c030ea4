"""Scheduled tasks in the state database (tables ``tasks`` and ``task_runs``): a task, its
runs (at most one per due time), and the notices the scheduler posts itself. What a
schedule means is ``orchestrator.schedules``; running them is the daemon's scheduler.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from dataclasses import dataclass

from orchestrator.groups.config import TaskSettings
from orchestrator.limits import TASK_TEXT_MAX_CHARS
from orchestrator.schedules import (
    AT,
    EVERY,
    KINDS,
    TaskRefused,
    check_schedule,
    local_time,
    next_due,
)
from orchestrator.store.db import Row
from orchestrator.store.messages import Message, MessageQueue, insert_message
from orchestrator.store.rows import opt_real, opt_text, real, text, whole

log = logging.getLogger("orchestrator.tasks")
__all__ = ["KINDS", "TaskRefused"]  # what callers of the store name with its tasks
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
            return f"once at {local_time(self.next_run or self.last_run, self.tz)}"
        if self.kind == EVERY:
            return f"every {self.spec}"
        return f"cron '{self.spec}' ({self.tz})"

    @property
    def next_local(self) -> str:
        """The next run in the task's zone, or "-" when there is none."""
        return local_time(self.next_run, self.tz) if self.state == ACTIVE else "-"

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


def _task(row: Row) -> Task:
    return Task(
        whole(row[0]),
        text(row[1]),
        text(row[2]),
        opt_text(row[3]),
        text(row[4]),
        text(row[5]),
        text(row[6]),
        text(row[7]),
        text(row[8]),
        text(row[9]),
        text(row[10]),
        text(row[11]),
        real(row[12]),
        opt_real(row[13]),
        opt_real(row[14]),
        opt_text(row[15]),
        whole(row[16]),
    )


class TaskStore:
    """Tasks in the state database."""

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
        return None if not rows else opt_real(rows[0][0])

    def set_state(self, task_id: int, state: str, now: float | None = None) -> Task:
        """Pause, resume (next due time recomputed from now when it passed) or finish."""
        task = self.require(task_id)
        now = time.time() if now is None else now
        next_run = task.next_run
        if state == ACTIVE and task.state != ACTIVE and next_run is not None and next_run <= now:
            next_run = (
                next_due(task.kind, task.spec, task.tz, task.next_run, now)
                if task.kind != AT
                else now
            )
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
        return [(whole(r[0]), text(r[1])) for r in reversed(rows)]

    def run_of(self, message_id: str) -> int | None:
        """The task whose run ``message_id`` is, or None (a person's message)."""
        rows = self.queue.read(
            "SELECT task_id FROM task_runs WHERE message_id=? LIMIT 1", (message_id,)
        )
        return whole(rows[0][0]) if rows else None

    def runs_since(self, group: str, since: float) -> int:
        """Runs of ``group``'s tasks queued at or after ``since``."""
        rows = self.queue.read(
            "SELECT COUNT(*) FROM task_runs r JOIN tasks t ON t.id=r.task_id"
            " WHERE t.group_folder=? AND r.at>=? AND r.message_id IS NOT NULL",
            (group, since),
        )
        return whole(rows[0][0])

    def runs(self, task_id: int) -> list[tuple[float, str | None, str]]:
        """(due time, message id or None, outcome) of each run, oldest first."""
        return [
            (real(r[0]), opt_text(r[1]), text(r[2]))
            for r in self.queue.read(
                "SELECT due, message_id, outcome FROM task_runs WHERE task_id=? ORDER BY due",
                (task_id,),
            )
        ]

    def pause_task(self, task_id: int, outcome: str) -> None:
        """Pause a task with the reason as its last outcome."""
        self.queue.transaction(
            lambda db: db.execute(
                "UPDATE tasks SET state=?, last_outcome=? WHERE id=?", (PAUSED, outcome, task_id)
            )
        )

    def record_run(
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
        """In one transaction: a run of ``task`` (once per due time), its message, the next
        due time.
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

        return self.queue.transaction(work)
