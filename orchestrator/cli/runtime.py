"""Container commands: start, stop, restart, status, logs, reconcile."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import click

from orchestrator.cli import CliContext
from orchestrator.cli.output import print_json, print_table, safe_line
from orchestrator.config import load_config
from orchestrator.units import human_bytes, human_seconds
from orchestrator.versions import EARLIEST, RELEASE

if TYPE_CHECKING:
    from orchestrator.runtime.lifecycle import GroupRuntime, GroupsOverview

pass_cli = click.make_pass_decorator(CliContext)


def open_runtime(obj: CliContext) -> GroupRuntime:
    """The group runtime on the Docker engine for this home."""
    from orchestrator.image.agent import agent_image_ref
    from orchestrator.image.group import GroupImages
    from orchestrator.runtime import open_backend
    from orchestrator.runtime.engine import connect
    from orchestrator.runtime.lifecycle import GroupRuntime, default_skills_root

    config = load_config(obj.home)
    client = connect()
    return GroupRuntime(
        obj.home,
        config,
        open_backend(config, client=client, home=obj.home),
        lambda: agent_image_ref(client, config.image),
        skills_root=default_skills_root(),
        group_image=GroupImages(client, lambda: config.project),
    )


JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")


def _running(info: Any, as_json: bool) -> None:
    if as_json:
        print_json({"container": info.name, "id": info.id, "state": info.state})
    else:
        click.echo(f"{info.name} is running")


@click.command()
@click.argument("name")
@JSON_OPTION
@pass_cli
def start(obj: CliContext, name: str, as_json: bool) -> None:
    """Start NAME's container (scaffolding its memory first); a no-op when it runs.

    A container whose configuration changed since it was created is recreated.
    """
    runtime = open_runtime(obj)
    group = runtime.store.find(name)
    _running(runtime.ensure_running(group), as_json)


@click.command()
@click.argument("name")
@JSON_OPTION
@pass_cli
def stop(obj: CliContext, name: str, as_json: bool) -> None:
    """Stop NAME's container. Its files stay; the next start or message brings it back."""
    runtime = open_runtime(obj)
    group = runtime.store.find(name)
    stopped = runtime.stop(group)
    name_ = runtime.container_name(group)
    if as_json:
        print_json({"container": name_, "stopped": stopped})
    else:
        click.echo(f"stopped {name_}" if stopped else f"{name_} was not running")


@click.command()
@click.argument("name")
@JSON_OPTION
@pass_cli
def restart(obj: CliContext, name: str, as_json: bool) -> None:
    """Remove and recreate NAME's container with the current configuration."""
    runtime = open_runtime(obj)
    _running(runtime.restart(runtime.store.find(name)), as_json)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@pass_cli
def status(obj: CliContext, as_json: bool) -> None:
    """The daemon (running or not, pid, uptime, channels, queue); then per group:
    container state, uptime, memory and disk use, config drift, last activity, today's
    cost (the group's day, in orchestrator.yaml's currency; "-" when nothing priced was
    spent), pauses (a money cap's among them); then dead letters and the free disk space."""
    from orchestrator.groups.disk import free_space
    from orchestrator.memory.history import History

    daemon = _daemon_summary(obj)
    served = _groups_from_daemon(obj) if daemon is not None else None
    if served is not None:
        overview, recreated = served
    else:
        overview = open_runtime(obj).overview()
        recreated = _runner_recreations(obj) if daemon is not None else {}
    rows, invalid = overview.rows, overview.invalid
    limits, disk, zones = overview.disk_limits, overview.disk_bytes, overview.timezones
    queue = _queue_summary(obj)
    paused = {p["group"]: p for p in (queue or {}).get("pauses", [])}
    spaces = [s for s in (free_space(obj.home.groups_dir), free_space(obj.home.state_dir)) if s]
    gaps = {r.folder: History(obj.home.groups_dir, r.folder).gap() for r in rows}
    costs = _costs_today(obj, zones)
    currency = _currency(obj)
    if as_json:
        print_json(
            {
                "release": RELEASE,
                "daemon": daemon,
                "groups": [
                    {
                        **row.to_dict(),
                        "disk_bytes": disk[row.folder],
                        "disk_limit_bytes": limits.get(row.folder),
                        "paused": paused.get(row.folder),
                        "history_gap": gap.to_dict() if (gap := gaps[row.folder]) else None,
                        "runner_recreations": recreated.get(row.folder, 0),
                        "cost_today": costs.get(row.folder),
                        "currency": currency,
                    }
                    for row in rows
                ],
                "invalid_groups": [{"folder": i.folder, "problem": i.problem} for i in invalid],
                "queue": queue,
                "free_space": [s.to_dict() for s in spaces],
            }
        )
        return
    now = time.time()
    if daemon is None:
        click.echo(
            f"daemon: not running (messages are not delivered; start it: orchestrator up); "
            f"release {RELEASE}"
        )
    else:
        where = "; ".join(f"{k} {v}" for k, v in (daemon.get("channels") or {}).items())
        uptime = human_seconds(now - daemon["started"]) if daemon.get("started") else "?"
        release = daemon.get("release") or EARLIEST
        click.echo(f"daemon: running, release {release}, pid {daemon['pid']}, up {uptime}; {where}")
        if release != RELEASE:
            click.echo(
                f"  this command is release {RELEASE}: restart the daemon to run it "
                "(orchestrator down, then orchestrator up; it upgrades the home at its start)"
            )
    if queue is not None:
        counts = queue["counts"]
        click.echo(
            f"queue: {counts.get('queued', 0)} queued, {counts.get('inflight', 0)} "
            f"in flight, {counts.get('done', 0)} done, {counts.get('dead', 0)} dead\n"
        )
    if queue is not None and queue.get("channels"):
        from orchestrator.cli.channel import describe_health

        for item in queue["channels"]:
            health = item["health"] or {}
            line = f"channel {item['account']} ({item['kind']}): {describe_health(health or None)}"
            if health:
                line += f"; {health.get('messages_in', 0)} in, {health.get('messages_out', 0)} out"
            if health.get("last_error"):
                line += f"; last error: {safe_line(health['last_error'])[:120]}"
            click.echo(line)
        click.echo("")
    if not rows and not invalid:
        click.echo("no groups; add one with: orchestrator group add NAME")
        return
    from orchestrator.money import format_money

    print_table(
        (
            "GROUP",
            "CONTAINER",
            "STATE",
            "UPTIME",
            "MEMORY",
            "DISK",
            "DRIFT",
            "LAST ACTIVITY",
            "COST TODAY",
        ),
        [
            (
                r.folder,
                r.container,
                r.state + (" (paused)" if r.folder in paused else ""),
                human_seconds(r.uptime_seconds) if r.uptime_seconds is not None else "-",
                _memory(r),
                f"{human_bytes(disk[r.folder])} / {human_bytes(limits.get(r.folder, 0))}",
                {True: "yes", False: "no", None: "-"}[r.drift],
                f"{human_seconds(now - r.last_activity)} ago" if r.last_activity else "never",
                format_money(costs.get(r.folder), currency),
            )
            for r in rows
        ]
        + [(i.folder, "-", f"INVALID: {i.problem}", "-", "-", "-", "-", "-", "-") for i in invalid],
    )
    for folder, lease in paused.items():
        click.echo(f"paused {folder} ({lease['holder']}): {safe_line(lease['reason'])}")
    for folder, count in sorted(recreated.items()):
        click.echo(
            f"runner {folder}: its container was recreated {count} time(s) since the daemon "
            "started: it ran but nothing answered on its runner socket"
        )
    for folder, gap in gaps.items():
        if gap is not None:
            click.echo(
                f"history {folder}: {safe_line(gap.describe())} (changes found once it "
                "records again are unattributed)"
            )
    if queue is not None:
        for dead in queue["dead"]:
            click.echo(
                f"  dead {dead['id']} ({dead['group']}): {safe_line(dead['error'])}"
                f"  -> orchestrator retry {dead['id']}"
            )
    seen: set[str] = set()
    for space in spaces:
        line = f"{human_bytes(space.free_bytes)} free of {human_bytes(space.total_bytes)}"
        if line not in seen:
            seen.add(line)
            click.echo(f"disk: {line} ({space.path})")


def _groups_from_daemon(obj: CliContext) -> tuple[GroupsOverview, dict[str, int]] | None:
    """The groups' overview as the running daemon computes it (its engine connection
    open), and per group how often it recreated the container for a dead runner socket;
    None when it cannot answer them (an older daemon, or none), and the command computes
    them itself."""
    from orchestrator.errors import OrchestratorError
    from orchestrator.runtime.lifecycle import GroupsOverview
    from orchestrator.service.client import control_request

    try:
        answer = control_request(obj.home, {"op": "groups"}, timeout=60)
    except OrchestratorError:
        return None
    if not answer.get("ok"):
        return None
    try:
        overview = GroupsOverview.from_dict(answer)
    except (KeyError, TypeError, ValueError):
        return None  # not the answer this release gives: computed here instead
    return overview, _recreations(answer)


def _costs_today(obj: CliContext, zones: dict[str, str]) -> dict[str, float]:
    """What each group spent today (its own day), for groups that spent on priced calls."""
    path = obj.home.state_dir / "queue.db"
    if not path.exists():
        return {}
    from orchestrator.errors import OrchestratorError
    from orchestrator.money import day_start
    from orchestrator.store.usage import UsageStore

    now = time.time()
    try:
        store = UsageStore(path)
    except OrchestratorError:
        return {}  # an older or newer schema: the queue summary says so
    try:
        found = store.priced_since({f: day_start(now, z) for f, z in zones.items()})
    finally:
        store.close()
    return found


def _currency(obj: CliContext) -> str:
    from orchestrator.errors import OrchestratorError
    from orchestrator.money import DEFAULT_CURRENCY

    try:
        return load_config(obj.home).currency
    except OrchestratorError:
        return DEFAULT_CURRENCY


def _memory(row: Any) -> str:
    if row.memory_bytes is not None:
        return human_bytes(row.memory_bytes)
    return "?" if row.state == "running" else "-"  # ?: not read within the deadline


def _runner_recreations(obj: CliContext) -> dict[str, int]:
    """Per group, how often the running daemon recreated its container for a dead
    runner socket ({} when it cannot be asked)."""
    from orchestrator.errors import OrchestratorError
    from orchestrator.service.client import control_request

    try:
        answer = control_request(obj.home, {"op": "status"}, timeout=5)
    except OrchestratorError:
        return {}
    return _recreations(answer)


def _recreations(answer: dict[str, Any]) -> dict[str, int]:
    """A daemon's answer's recreations for a dead runner socket, per group."""
    found = answer.get("runner_recreations")
    if not isinstance(found, dict):
        return {}
    return {str(k): int(v) for k, v in found.items() if isinstance(v, int)}


def _daemon_summary(obj: CliContext) -> dict[str, Any] | None:
    """What the running daemon says of itself; None when none runs for this home."""
    from orchestrator.service.client import daemon_facts

    return daemon_facts(obj.home)


def _queue_summary(obj: CliContext) -> dict[str, Any] | None:
    """Queue counts and dead letters, read from state/queue.db when it exists."""
    path = obj.home.state_dir / "queue.db"
    if not path.exists():
        return None
    from orchestrator.store.messages import MessageQueue

    queue = MessageQueue(path)
    try:
        return {
            "counts": queue.counts(),
            "dead": [m.to_dict() for m in queue.dead_letters()],
            "pauses": [p.to_dict() for p in queue.pauses()],
            "channels": channel_health(obj, queue),
        }
    finally:
        queue.close()


def channel_health(obj: CliContext, queue: Any) -> list[dict[str, Any]]:
    """Each channel account of orchestrator.yaml with the health its daemon recorded."""
    from orchestrator.errors import OrchestratorError
    from orchestrator.store.chats import ChatStore

    try:
        accounts = load_config(obj.home).channel_accounts
    except OrchestratorError:
        return []
    chats = ChatStore(queue)
    return [
        {"account": name, "kind": a.kind, "health": chats.health(name)}
        for name, a in sorted(accounts.items())
    ]


@click.command()
@click.argument("name", required=False)
@click.option("--daemon", "of_daemon", is_flag=True, help="The daemon's log instead.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new lines.")
@click.option(
    "--tail", type=click.IntRange(min=0), default=None, help="Only the last N lines (default: all)."
)
@pass_cli
def logs(
    obj: CliContext, name: str | None, of_daemon: bool, follow: bool, tail: int | None
) -> None:
    """Print NAME's container logs (with --follow, re-attaching if the stream breaks), or
    with --daemon the background daemon's log (state/orchestrator.log)."""
    from orchestrator.errors import BadInput

    if of_daemon:
        if name:
            raise BadInput("give NAME or --daemon, not both")
        _daemon_log(obj, follow, tail)
        return
    if not name:
        raise BadInput("give a group NAME, or --daemon for the daemon's log")
    runtime = open_runtime(obj)
    group = runtime.store.find(name)
    container = runtime.container_name(group)
    if runtime.backend.inspect(container) is None:
        click.echo(
            f"{container} does not exist; start it with: orchestrator start {name}", err=True
        )
        raise SystemExit(1)
    for line in runtime.backend.logs(container, follow=follow, tail=tail):
        click.echo(safe_line(line))  # written by the container: shown, never interpreted


def _daemon_log(obj: CliContext, follow: bool, tail: int | None) -> None:
    from orchestrator.errors import BadInput
    from orchestrator.service import LOG_FILE

    path = obj.home.state_dir / LOG_FILE
    try:
        handle = open(path, "rb")  # noqa: SIM115 (read while following)
    except FileNotFoundError:
        raise BadInput(
            f"{path} does not exist: the daemon has not run in the background here",
            hint="a daemon started with `serve` logs to its terminal",
        ) from None
    with handle:
        lines = handle.read().decode("utf-8", "replace").splitlines()
        # the last ``tail`` lines: none for 0 (lines[-0:] would be all of them)
        for line in lines[max(len(lines) - tail, 0) :] if tail is not None else lines:
            click.echo(safe_line(line))
        while follow:
            chunk = handle.readline()
            if not chunk:
                time.sleep(0.3)
                continue
            click.echo(safe_line(chunk.decode("utf-8", "replace").rstrip("\n")))


@click.command()
@click.option("--dry-run", is_flag=True, help="Print the plan without acting.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@click.option(
    "--watch",
    "interval",
    type=click.IntRange(min=1),
    default=None,
    metavar="SECONDS",
    help="Keep reconciling every SECONDS (enforces idle timeouts) until interrupted.",
)
@pass_cli
def reconcile(obj: CliContext, dry_run: bool, as_json: bool, interval: int | None) -> None:
    """Match containers to groups: adopt current ones, recreate changed ones, remove
    exited ones and orphans, stop ones idle past their group's idle_timeout."""
    from orchestrator.runtime.reconcile import ADOPT

    runtime = open_runtime(obj)
    while True:
        actions = runtime.plan() if dry_run else runtime.reconcile()
        if as_json:
            print_json([a.__dict__ for a in actions])
        elif interval is not None:
            stamp = time.strftime("%H:%M:%S")
            for a in actions:
                if a.kind != ADOPT:
                    click.echo(f"{stamp} {a.kind} {a.container}: {a.reason}")
        elif not actions:
            click.echo("no containers to reconcile")
        else:
            print_table(
                ("ACTION", "CONTAINER", "REASON"),
                [(a.kind, a.container, a.reason) for a in actions],
            )
        if interval is None:
            return
        time.sleep(interval)
