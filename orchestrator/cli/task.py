"""``orchestrator task``: scheduled tasks, from the operator's side."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import click

from orchestrator.cli import CliContext
from orchestrator.cli.output import print_json, print_table

if TYPE_CHECKING:
    from orchestrator.store.messages import MessageQueue
    from orchestrator.store.tasks import Task, TaskStore

pass_cli = click.make_pass_decorator(CliContext)


@click.group()
def task() -> None:
    """Scheduled tasks: a turn a group runs later, once or on a schedule.

    A due task becomes an ordinary message in the queue, sent into the chat it was made
    for, as its author (capped at member trust), so it is delivered, retried and
    budgeted like any other; its replies go to that chat. The daemon runs tasks; these
    commands only change the schedule, and work whether it runs or not. Chats schedule
    tasks too ("remind me in 10 minutes to ...", or the model's schedule_task tool).

    \b
    Examples:
      orchestrator task add family --chat cli-chat --at 20m "Reminder: the oven"
      orchestrator task add family --chat cli-chat --cron "0 8 * * 1-5" \\
          --tz Europe/Lisbon "Post the day's plan"
      orchestrator task list family
      orchestrator task pause 3
      orchestrator task run 3
    """


@contextmanager
def _queue(obj: CliContext) -> Iterator[MessageQueue | None]:
    from orchestrator.store.messages import open_queue_if_any

    queue = open_queue_if_any(obj.home)
    try:
        yield queue
    finally:
        if queue is not None:
            queue.close()


def _row(task: Task) -> list[object]:
    text = task.text if len(task.text) <= 40 else task.text[:39] + "…"
    return [
        task.id,
        task.group,
        task.chat,
        task.schedule,
        task.next_local,
        task.state,
        task.last_outcome or "-",
        text,
    ]


@task.command("add")
@click.argument("name")
@click.argument("text")
@click.option(
    "--chat", required=True, help="The chat to run in and answer: one the group has seen."
)
@click.option("--thread", default=None, help="Thread id (for per-thread groups).")
@click.option(
    "--channel",
    default=None,
    help="The chat's channel (cli, http, telegram:ACCOUNT, ...) [default: the one the "
    "chat was last seen on].",
)
@click.option("--at", "at", default=None, help="Once: a delay (20m, 2h, 1d) or a time (ISO 8601).")
@click.option("--every", default=None, help="Every interval (30m, 2h, 1d).")
@click.option("--cron", default=None, help="A cron expression: minute hour day month weekday.")
@click.option("--tz", default=None, help="IANA time zone [default: the group's tasks.timezone].")
@click.option("--sender", default="operator", show_default=True, help="Who the task speaks as.")
@click.option("--json", "as_json", is_flag=True, help="Print the task as JSON.")
@pass_cli
def add(
    obj: CliContext,
    name: str,
    text: str,
    chat: str,
    thread: str | None,
    channel: str | None,
    at: str | None,
    every: str | None,
    cron: str | None,
    tz: str | None,
    sender: str,
    as_json: bool,
) -> None:
    """Schedule TEXT as a turn of group NAME in chat --chat.

    Give exactly one of --at, --every or --cron. Times without an offset, and cron
    expressions, are in --tz. The chat must be one the group has seen (a CLI or HTTP
    chat that has sent it a message), so a task cannot answer into another group's
    chats; send it a first message with `orchestrator send NAME --chat ID ...`.
    """
    from orchestrator.daemon.core import check_inbound
    from orchestrator.groups import GroupStore
    from orchestrator.schedules import TaskRefused
    from orchestrator.store.tasks import OPERATOR, TaskStore

    given = [(k, v) for k, v in (("at", at), ("every", every), ("cron", cron)) if v is not None]
    if len(given) != 1:
        raise TaskRefused(
            "give exactly one of --at, --every or --cron",
            hint='for example: --at 20m, --every 1h or --cron "0 8 * * *"',
        )
    check_inbound(text=text, chat=chat, sender=sender, thread=thread)
    group = GroupStore(obj.home).find(name)
    with _queue(obj) as queue:
        store = TaskStore(queue) if queue is not None else None
        seen = queue.channel_of_chat(group.folder, chat, channel) if queue is not None else None
        if store is None or queue is None or seen is None:
            raise TaskRefused(
                f"group {group.folder!r} has never seen chat {chat!r}"
                + (f" on channel {channel!r}" if channel else ""),
                hint=f"send it a first message: orchestrator send {group.folder} --chat "
                f'{chat} "hi"',
            )
        kind, spec = given[0]
        made = store.add(
            group=group.folder,
            chat=chat,
            thread=thread,
            channel=seen,
            text=text,
            kind=kind,
            spec=str(spec),
            tz=tz,
            author=sender,
            author_trust=OPERATOR,
            settings=group.config.tasks,
        )
    if as_json:
        print_json(made.to_dict())
    else:
        click.echo(f"task {made.id}: {made.schedule}; next run {made.next_local}")


@task.command("list")
@click.argument("name", required=False)
@click.option("--all", "show_all", is_flag=True, help="Include finished tasks.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_cli
def list_(obj: CliContext, name: str | None, show_all: bool, as_json: bool) -> None:
    """List scheduled tasks, of every group or of group NAME."""
    from orchestrator.groups import GroupStore
    from orchestrator.store.tasks import TaskStore

    folder = GroupStore(obj.home).find(name).folder if name else None
    with _queue(obj) as queue:
        tasks = [] if queue is None else TaskStore(queue).tasks(folder, done=show_all)
    if as_json:
        print_json({"tasks": [t.to_dict() for t in tasks]})
        return
    if not tasks:
        click.echo("no scheduled tasks" + (f" in {folder}" if folder else ""))
        return
    print_table(
        ["ID", "GROUP", "CHAT", "SCHEDULE", "NEXT", "STATE", "LAST OUTCOME", "TEXT"],
        [_row(t) for t in tasks],
    )


def _change(
    verb: str, help_text: str, act: Callable[[CliContext, TaskStore, int], str]
) -> click.Command:
    @click.argument("task_id", metavar="ID", type=int)
    @click.option("--json", "as_json", is_flag=True, help="Print the task as JSON.")
    @pass_cli
    def command(obj: CliContext, task_id: int, as_json: bool) -> None:
        from orchestrator.schedules import TaskRefused
        from orchestrator.store.tasks import TaskStore

        with _queue(obj) as queue:
            if queue is None:
                raise TaskRefused(f"no task {task_id}", hint="this home has no tasks yet")
            store = TaskStore(queue)
            said = act(obj, store, task_id)
            found = store.get(task_id)
        if as_json:
            print_json(found.to_dict() if found is not None else {"id": task_id, "removed": True})
        else:
            click.echo(said)

    command.__doc__ = help_text
    return task.command(verb)(command)


def _pause(obj: CliContext, store: TaskStore, task_id: int) -> str:
    from orchestrator.schedules import TaskRefused
    from orchestrator.store.tasks import DONE, PAUSED

    if store.require(task_id).state == DONE:
        raise TaskRefused(f"task {task_id} is done; there is nothing to pause")
    done = store.set_state(task_id, PAUSED)
    return f"task {done.id} paused"


def _resume(obj: CliContext, store: TaskStore, task_id: int) -> str:
    from orchestrator.schedules import TaskRefused
    from orchestrator.store.tasks import ACTIVE, DONE

    if store.require(task_id).state == DONE:
        raise TaskRefused(f"task {task_id} is done; add a new one")
    done = store.set_state(task_id, ACTIVE)
    return f"task {done.id} active; next run {done.next_local}"


def _remove(obj: CliContext, store: TaskStore, task_id: int) -> str:
    store.remove(task_id)
    return f"task {task_id} removed"


def _run(obj: CliContext, store: TaskStore, task_id: int) -> str:
    from orchestrator.daemon.scheduler import Scheduler, store_lookup
    from orchestrator.groups import GroupStore

    ran = Scheduler(store, store_lookup(GroupStore(obj.home))).run_now(task_id)
    return (
        f"task {task_id} queued as message {ran.message_id}; the daemon delivers it "
        f"(orchestrator message {ran.message_id})"
    )


_change("pause", "Pause task ID: it does not run until resumed.", _pause)
_change(
    "resume",
    "Resume task ID; a due time that passed while paused is skipped to the next one "
    "(a one-off runs at once).",
    _resume,
)
_change("remove", "Delete task ID and the record of its runs.", _remove)
_change("run", "Run task ID now, once; its schedule is unchanged.", _run)
