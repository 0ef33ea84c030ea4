"""``orchestrator group``: add, list, show and remove agent groups."""

from __future__ import annotations

from typing import Any

import click

from orchestrator.cli import CliContext
from orchestrator.cli.output import print_json, print_table, safe_line
from orchestrator.config import load_config
from orchestrator.groups import GroupStore, memory_usage
from orchestrator.groups.config import DEFAULT_MODEL, DEFAULT_PROVIDER, GroupConfig
from orchestrator.units import human_bytes, plural

pass_cli = click.make_pass_decorator(CliContext)
OPERATOR_HOLDER = "operator"  # the holder of pauses taken with `group pause`


@click.group()
def group() -> None:
    """Add, list, show, remove, restore, pause and resume agent groups, and the packages
    of a group's own image.

    A group is a folder groups/<folder>/ with a group.yaml and a memory tree; each group
    runs in its own container and shares nothing with other groups.
    """


@group.command("add")
@click.argument("name")
@click.option("--folder", help="Folder under groups/ (default: derived from NAME).")
@click.option(
    "--creator",
    "creators",
    multiple=True,
    metavar="ID",
    help="Sender id trusted to change learned behaviors (repeatable; default: operator, "
    "the sender id of `orchestrator send` and `chat`).",
)
@click.option(
    "--member",
    "members",
    multiple=True,
    metavar="ID",
    help="Sender id allowed to talk to the group (repeatable).",
)
@click.option("--provider", default=DEFAULT_PROVIDER, show_default=True, help="Model provider.")
@click.option("--model", default=DEFAULT_MODEL, show_default=True, help="Model name.")
@click.option(
    "--timezone",
    default="UTC",
    show_default=True,
    metavar="ZONE",
    help="The group's IANA time zone (Europe/Lisbon): its days for costs and its tasks.",
)
@click.option(
    "--cost-per-day",
    type=click.FloatRange(min=0),
    default=None,
    metavar="AMOUNT",
    help="A money cap a day, in orchestrator.yaml's currency (the model must be priced).",
)
@click.option(
    "--cost-per-month",
    type=click.FloatRange(min=0),
    default=None,
    metavar="AMOUNT",
    help="A money cap a month, in orchestrator.yaml's currency.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the new group as JSON.")
@pass_cli
def add(
    obj: CliContext,
    name: str,
    folder: str | None,
    creators: tuple[str, ...],
    members: tuple[str, ...],
    provider: str,
    model: str,
    timezone: str,
    cost_per_day: float | None,
    cost_per_month: float | None,
    as_json: bool,
) -> None:
    """Create a group named NAME: groups/<folder>/group.yaml plus its memory scaffold.

    \b
    Examples:
      orchestrator group add "Family chat" --creator alice
      orchestrator group add Support --provider claude --model claude-sonnet-4-5 \\
          --timezone Europe/Lisbon --cost-per-day 5
    """
    from dataclasses import replace

    from orchestrator.groups.config import ModelLimits, TaskSettings

    config = GroupConfig(
        name=name,
        provider=provider,
        model=model,
        creators=creators or ("operator",),
        members=members,
        timezone=timezone,
        tasks=replace(TaskSettings(), timezone=timezone),
        limits=replace(ModelLimits(), cost_per_day=cost_per_day, cost_per_month=cost_per_month),
    )
    created = GroupStore(obj.home).add(config, folder)
    if as_json:
        print_json(
            {
                "folder": created.folder,
                "path": str(created.path),
                "config": created.config.to_dict(),
            }
        )
        return
    click.echo(f"created group {created.config.name!r} in {created.path}")
    click.echo(f"  edit {created.config_file} to change its settings")


@group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@pass_cli
def list_(obj: CliContext, as_json: bool) -> None:
    """List groups, including folders under groups/ whose group.yaml is missing or invalid.

    With the daemon running, the list comes from it (its configurations parsed)."""
    listing = _listing_from_daemon(obj)
    if listing is None:
        listing = [item.to_dict() for item in GroupStore(obj.home).listing()]
    if as_json:
        print_json(listing)
        return
    if not listing:
        click.echo(f"no groups in {obj.home.groups_dir}; add one with: orchestrator group add NAME")
        return
    rows = []
    for item in listing:
        if item["valid"]:
            rows.append((item["folder"], item["name"], item["provider"], "ok"))
        else:
            rows.append((item["folder"], "-", "-", f"INVALID: {item['problem']}"))
    print_table(("FOLDER", "NAME", "PROVIDER", "STATUS"), rows)


LISTING_KEYS = ("folder", "path", "valid", "name", "provider", "problem")


def _listing_from_daemon(obj: CliContext) -> list[dict[str, Any]] | None:
    """``group list``'s rows from the running daemon; None when none runs or it cannot
    give them (an older release), and the command reads every group.yaml itself."""
    from orchestrator.errors import OrchestratorError
    from orchestrator.service.client import control_request, daemon_facts

    if daemon_facts(obj.home) is None:
        return None
    try:
        answer = control_request(obj.home, {"op": "listing"}, timeout=60)
    except OrchestratorError:
        return None
    found = answer.get("groups") if answer.get("ok") else None
    if not isinstance(found, list) or not all(
        isinstance(item, dict) and tuple(item) == LISTING_KEYS for item in found
    ):
        return None
    # the path as this command sees it (a daemon in a container sees its own mount)
    return [{**item, "path": str(obj.home.groups_dir / str(item["folder"]))} for item in found]


@group.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_cli
def show(obj: CliContext, name: str, as_json: bool) -> None:
    """Show a group's configuration, paths and memory size. NAME is a folder or display name."""
    from orchestrator.memory.learned import report
    from orchestrator.protocol import LEARNED_LABEL
    from orchestrator.store.chats import ChatStore
    from orchestrator.store.held import HeldRequests
    from orchestrator.store.messages import open_queue_if_any

    found = GroupStore(obj.home).find(name)
    size = memory_usage(found)
    queue = open_queue_if_any(obj.home)
    try:
        held = (
            [] if queue is None else HeldRequests(queue).waiting(found.folder, kind=LEARNED_LABEL)
        )
        store = report(found.path.parent, found.folder, found.config.creators, held)
        bindings = [] if queue is None else ChatStore(queue).bindings(group=found.folder)
    finally:
        if queue is not None:
            queue.close()
    paths = {
        "group": str(found.path),
        "config": str(found.config_file),
        "memory": str(found.memory_dir),
        "sessions": str(found.sessions_dir),
        "files": str(found.files_dir),
        "instructions": str(found.instructions_file),
        "learned_behaviors": str(found.learned_file),
    }
    if as_json:
        print_json(
            {
                "folder": found.folder,
                "config": found.config.to_dict(),
                "paths": paths,
                "memory": {"files": size.files, "bytes": size.bytes},
                "learned_behaviors": store,
                "bindings": [b.to_dict() for b in bindings],
            }
        )
        return
    config = found.config
    c = config.container
    skills = config.skills if isinstance(config.skills, str) else ", ".join(config.skills)
    rows = [
        ("provider", f"{config.provider} / {config.model}"),
        ("creators", ", ".join(config.creators) or "-"),
        ("members", ", ".join(config.members) or "-"),
        (
            "chats",
            ", ".join(f"{b.account}:{b.chat} ({b.activation}, {b.trust}s)" for b in bindings)
            or "- (orchestrator bind, or pair)",
        ),
        ("unknown senders", config.unknown_senders),
        ("session mode", config.session_mode),
        (
            "container",
            f"memory {human_bytes(c.memory_bytes)}, cpus {c.cpus:g}, pids {c.pids}, "
            f"network {c.network}, idle timeout {c.idle_timeout_seconds}s, "
            f"disk {human_bytes(c.disk_bytes)}",
        ),
        ("turn timeout", f"{config.turn_timeout_seconds}s"),
        ("mounts", ", ".join(m.name for m in config.mounts) or "-"),
        ("skills", skills),
        ("memory size", f"{plural(size.files, 'file')}, {human_bytes(size.bytes)}"),
        ("learned behaviors", _learned_line(store)),
        *((key.replace("_", " ") + " path", value) for key, value in paths.items()),
    ]
    width = max(len(label) for label, _ in rows) + 2
    click.echo(f"{config.name} ({found.folder})")
    for label, value in rows:
        click.echo(f"  {label + ':':<{width}}{value}")


def _learned_line(store: dict[str, Any]) -> str:
    from datetime import UTC, datetime

    writers = ", ".join(store["writers"]) or "nobody (no creators)"
    if store["problem"]:
        state = f"PROBLEM: {store['problem']}"
    elif not store["exists"]:
        state = "empty (no file yet)"
    else:
        when = datetime.fromtimestamp(store["modified"], UTC).strftime("%Y-%m-%d %H:%M UTC")
        state = f"{human_bytes(store['size'])}, modified {when}"
    held = len(store["pending"])
    pending = f"; {held} change(s) wait for approval" if held else ""
    return f"{state}; changed by {writers}{pending}"


@group.command("remove")
@click.argument("name")
@click.option(
    "--purge", is_flag=True, help="Delete the group folder and everything in it (memory included)."
)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation with --purge.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@pass_cli
def remove(obj: CliContext, name: str, purge: bool, yes: bool, as_json: bool) -> None:
    """Remove a group.

    The group's container is removed first. Without --purge nothing else is deleted:
    groups/<folder>/ (group.yaml, memory, sessions, files) moves to
    groups/.removed/<folder>-<UTC time>/, where it stays until you delete it; move it
    back to restore the group (its scheduled tasks pause until then). With --purge the
    folder and its scheduled tasks are deleted for good, after a confirmation unless
    --yes is given; the group's own images (for its packages) are removed too.
    """
    store = GroupStore(obj.home)
    found = store.find(name)
    if purge and not yes:
        click.confirm(
            f"Delete {found.path} with all its memory, sessions and files? This cannot be undone",
            abort=True,
        )
    _remove_container(obj, found.folder)
    archived = store.remove(found, purge=purge)
    if purge:
        _remove_tasks(obj, found.folder)
        _remove_images(load_config(obj.home).project, found.folder)
    if as_json:
        print_json({"folder": found.folder, "archived": str(archived) if archived else None})
    elif archived is None:
        click.echo(f"deleted {found.path}")
    else:
        click.echo(f"removed group {found.config.name!r}; its data is kept in {archived}")


def _remove_images(project: str, folder: str) -> None:
    """A purged group's own images go with it (when the engine answers)."""
    from orchestrator.errors import EngineUnreachable
    from orchestrator.image.group import remove_group_images
    from orchestrator.runtime.engine import connect

    try:
        client = connect(timeout=10)
    except EngineUnreachable:
        return
    try:
        for tag in remove_group_images(client, project, folder):
            click.echo(f"removed image {tag}", err=True)
    finally:
        client.close()


def _remove_tasks(obj: CliContext, folder: str) -> None:
    """A purged group's scheduled tasks go with it (an archived group's stay, and pause
    at their next due time until it is restored)."""
    from orchestrator.store.messages import open_queue_if_any
    from orchestrator.store.tasks import TaskStore

    queue = open_queue_if_any(obj.home)
    if queue is None:
        return
    try:
        removed = TaskStore(queue).remove_group(folder)
    finally:
        queue.close()
    if removed:
        click.echo(f"removed {removed} scheduled task(s) of {folder}", err=True)


def _remove_container(obj: CliContext, folder: str) -> None:
    """Remove the group's container, if the engine can be reached; else say what happens.
    Only this home's container is removed; another home's of the same name is refused."""
    from orchestrator.errors import EngineUnreachable, ImageMissing
    from orchestrator.runtime import open_backend
    from orchestrator.runtime.lifecycle import GroupRuntime
    from orchestrator.runtime.spec import container_name

    config = load_config(obj.home)
    name = container_name(config.project, folder)
    try:
        backend = open_backend(config, timeout=10, home=obj.home)
    except EngineUnreachable as exc:
        click.echo(
            f"note: {exc.message}; a container {name}, if any, is removed by the next "
            "`orchestrator reconcile`",
            err=True,
        )
        return

    def no_image() -> str:
        raise ImageMissing("not needed to remove a container")

    runtime = GroupRuntime(obj.home, config, backend, no_image, rootless=False)
    if runtime.remove(folder):
        click.echo(f"removed container {name}")


@group.command("restore")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@pass_cli
def restore(obj: CliContext, name: str, as_json: bool) -> None:
    """Bring back a group removed without --purge: NAME is its folder (its newest
    archive in groups/.removed/ is used) or an archive's name. Its folder must be free."""
    restored = GroupStore(obj.home).restore(name)
    if as_json:
        print_json({"folder": restored.folder, "path": str(restored.path)})
    else:
        click.echo(f"restored group {restored.config.name!r} in {restored.path}")


@group.command("pause")
@click.argument("name")
@click.option("--reason", default="paused by the operator", show_default=True, help="Why.")
@click.option(
    "--for",
    "duration",
    default=None,
    metavar="DURATION",
    help="Resume by itself after this long (90s, 30m, 2h); default: until resumed.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the pause as JSON.")
@pass_cli
def pause(obj: CliContext, name: str, reason: str, duration: str | None, as_json: bool) -> None:
    """Pause NAME: its messages wait in the queue (nothing is lost) until it resumes.

    Channels still accept messages for a paused group; they are delivered after
    `orchestrator group resume NAME`. Works whether or not the daemon runs.
    """
    import time

    from orchestrator.errors import BadInput
    from orchestrator.store.messages import open_queue
    from orchestrator.units import parse_duration

    found = GroupStore(obj.home).find(name)
    expires = None
    if duration is not None:
        seconds = parse_duration(duration)
        if not seconds:
            raise BadInput(
                f"--for {duration!r} is not a duration", hint="use 90s, 30m, 2h or seconds"
            )
        expires = time.time() + seconds
    queue = open_queue(obj.home)
    try:
        lease = queue.pause(found.folder, OPERATOR_HOLDER, reason, expires=expires)
    finally:
        queue.close()
    if as_json:
        print_json(lease.to_dict())
        return
    until = f" for {duration}" if duration else " until: orchestrator group resume " + found.folder
    click.echo(f"paused {found.folder}{until}; its messages wait in the queue")


@group.command("resume")
@click.argument("name")
@click.option(
    "--budget",
    is_flag=True,
    help="Drop the pause a money cap took (limits.cost_per_day/cost_per_month) and let the "
    "group spend past its cap until that period ends (the next day or month in the "
    "group's time zone).",
)
@click.option(
    "--all",
    "every",
    is_flag=True,
    help="Drop every pause: the operator's, the orchestrator's own (a disk-limit pause "
    "comes back at the next check while the group is still over its limit) and a money "
    "cap's (lifted as with --budget).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@pass_cli
def resume(obj: CliContext, name: str, budget: bool, every: bool, as_json: bool) -> None:
    """Resume NAME: its waiting messages are delivered again.

    Without options only the operator's own pause (orchestrator group pause) is
    dropped; --budget drops a money cap's pause and lifts the cap until its period
    ends; --all drops every pause. Whatever still holds the group is listed.
    """
    from orchestrator.relay.ops.model import BUDGET_HOLDER
    from orchestrator.store.messages import open_queue

    found = GroupStore(obj.home).find(name)
    queue = open_queue(obj.home)
    lifted: float | None = None
    try:
        if budget or every:
            lease = next((p for p in queue.pauses(found.folder) if p.holder == BUDGET_HOLDER), None)
            if lease is not None and lease.expires is not None:
                lifted = lease.expires
                queue.lift_budget(found.folder, lease.expires)
        holders = [BUDGET_HOLDER] if budget and not every else []
        if not budget or every:
            holders.append(OPERATOR_HOLDER)
        dropped = (
            queue.resume(found.folder, None)
            if every
            else sum(queue.resume(found.folder, h) for h in holders)
        )
        left = queue.pauses(found.folder)
    finally:
        queue.close()
    if as_json:
        print_json(
            {
                "folder": found.folder,
                "resumed": bool(dropped),
                "budget_lifted_until": lifted,
                "still_paused": [p.to_dict() for p in left],
            }
        )
        return
    if dropped:
        click.echo(f"resumed {found.folder}")
    elif budget and not every:
        click.echo(f"{found.folder} was not paused by a money cap")
    else:
        click.echo(f"{found.folder} was not paused by the operator")
    if lifted is not None:
        from orchestrator.money import local_time

        until = local_time(lifted, found.config.timezone)
        click.echo(f"its money caps are lifted until {until}")
    for lease in left:
        click.echo(f"still paused by {lease.holder}: {safe_line(lease.reason)}", err=True)


def _add_packages() -> None:
    from orchestrator.cli.packages import packages

    group.add_command(packages)


_add_packages()
