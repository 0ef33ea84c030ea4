"""``orchestrator memory log|show|diff|blame|revert``: a group's memory history."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from orchestrator.cli import CliContext
from orchestrator.cli.output import print_json, print_table, safe_line, safe_text
from orchestrator.config import load_config

if TYPE_CHECKING:
    from orchestrator.groups import Group
    from orchestrator.memory.history import History

pass_cli = click.make_pass_decorator(CliContext)


def _history(obj: CliContext, name: str) -> tuple[Group, History]:
    """The group and its history, with anything changed since the last record recorded
    first (as the host's or unattributed: see README, Memory history)."""
    from orchestrator.groups import GroupStore
    from orchestrator.memory.history import History

    group = GroupStore(obj.home).find(name)
    history = History(group.path.parent, group.folder, load_config(obj.home).history_max_file_bytes)
    if history.changed():
        history.record_outside(_container(obj, group))
    return group, history


def _container(obj: CliContext, group: Any) -> Any:
    """The group's container now, None when there is none, "unknown" without an engine."""
    from orchestrator.errors import OrchestratorError

    try:
        from orchestrator.runtime import open_backend
        from orchestrator.runtime.spec import container_name

        config = load_config(obj.home)
        backend = open_backend(config, timeout=5, home=obj.home)
        return backend.inspect(container_name(config.project, group.folder))
    except (OrchestratorError, OSError):
        return "unknown"


def _since(value: str | None) -> float | None:
    from orchestrator.errors import BadInput
    from orchestrator.units import parse_duration

    if value is None:
        return None
    seconds = parse_duration(value)
    if seconds is None:
        raise BadInput(f"--since {value!r} is not a duration", hint="use 90m, 2h, 7d or seconds")
    return time.time() - seconds


def _when(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _who(change: Any) -> str:
    p = change.provenance
    if p.sender:
        return f"{p.sender} ({p.trust})" if p.trust else str(p.sender)
    return str(p.kind)


@click.command("log")
@click.argument("name")
@click.argument("path", required=False)
@click.option("--sender", default=None, help="Only changes by this sender's turns.")
@click.option("--since", default=None, help="Only changes this recent (90m, 2h, 7d).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (provenance in full).")
@pass_cli
def log(
    obj: CliContext, name: str, path: str | None, sender: str | None, since: str | None,
    as_json: bool,
) -> None:  # fmt: skip
    """Changes to NAME's memory, newest first: when, what kind (turn, learned,
    migration, revert, host, unattributed, operator), who, and which files. PATH (such
    as memory/facts or learned-behaviors.md) keeps the changes that touched it."""
    _group, history = _history(obj, name)
    changes = history.log(path, sender, _since(since))
    if as_json:
        print_json({"changes": [c.to_dict() for c in changes]})
        return
    if not changes:
        click.echo("no changes recorded" + (f" for {path}" if path else ""))
        return
    rows = []
    for c in changes:
        files = ", ".join(c.paths[:3]) + (f" (+{len(c.paths) - 3})" if len(c.paths) > 3 else "")
        if c.hashed_only:
            files += f" [by hash only: {', '.join(c.hashed_only)}]"
        where = f"{c.provenance.channel}:{c.provenance.chat}" if c.provenance.chat else "-"
        rows.append(
            [c.rev[:10], _when(c.provenance.time), c.provenance.kind, _who(c), where, files]
        )
    print_table(["CHANGE", "WHEN (UTC)", "KIND", "WHO", "CHAT", "FILES"], rows)


@click.command("show")
@click.argument("name")
@click.argument("rev", metavar="REV[:PATH]")
@pass_cli
def show(obj: CliContext, name: str, rev: str) -> None:
    """A file as it was at change REV (REV:PATH), or the files of that change's tree."""
    _group, history = _history(obj, name)
    target, _, path = rev.partition(":")
    found = history.show(target, path or None)
    if isinstance(found, list):
        for entry in found:
            click.echo(safe_line(entry))
    else:
        click.echo(safe_text(found.decode("utf-8", "replace")), nl=False)


@click.command("diff")
@click.argument("name")
@click.argument("old", required=False)
@click.argument("new", required=False)
@pass_cli
def diff(obj: CliContext, name: str, old: str | None, new: str | None) -> None:
    """A unified diff: of the last change (no REV), of REV against memory now (one REV),
    or between two changes."""
    _group, history = _history(obj, name)
    text = history.diff(old, "now") if old is not None and new is None else history.diff(old, new)
    click.echo(safe_text(text), nl=False)


@click.command("blame")
@click.argument("name")
@click.argument("path")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_cli
def blame(obj: CliContext, name: str, path: str, as_json: bool) -> None:
    """Each line of PATH (as last recorded) with the change and the sender that wrote it."""
    _group, history = _history(obj, name)
    lines = history.blame(path)
    if as_json:
        print_json(
            {
                "lines": [
                    {"text": t, "rev": c.rev, "who": _who(c), "kind": c.provenance.kind}
                    for t, c in lines
                ]
            }
        )
        return
    width = max((len(_who(c)) for _, c in lines), default=0)
    for text, change in lines:
        click.echo(f"{change.rev[:10]} {_who(change).ljust(width)} | {safe_line(text)}")


@click.command("revert")
@click.argument("name")
@click.argument("rev", required=False)
@click.option("--path", default=None, help="Only this file or folder of the change.")
@click.option("--sender", default=None, help="Undo every change by this sender's turns.")
@click.option("--since", default=None, help="With --sender: only changes this recent.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_cli
def revert(
    obj: CliContext, name: str, rev: str | None, path: str | None, sender: str | None,
    since: str | None, as_json: bool,
) -> None:  # fmt: skip
    """Undo change REV (or, with --sender, every change one sender's turns made) by a
    new change that restores the earlier content; history is never rewritten. When a
    file was changed again later, nothing is written and the files are named. The
    group is paused (its messages wait) and its turns in flight finish first, so no
    turn writes memory while it does."""
    from orchestrator.errors import BadInput
    from orchestrator.limits import PAUSE_SLACK_SECONDS
    from orchestrator.memory.history import REVERT, Provenance
    from orchestrator.store.messages import open_queue

    if (rev is None) == (sender is None):
        raise BadInput("give a change (REV) or --sender, one of them")
    if since is not None and sender is None:
        raise BadInput("--since goes with --sender")
    group, history = _history(obj, name)
    if sender is not None:
        revs = [c.rev for c in history.log(path, sender, _since(since))]
        if not revs:
            raise BadInput(f"no recorded change by {sender!r}" + (f" to {path}" if path else ""))
        what = f"changes by {sender}" + (f" since {since}" if since else "")
    else:
        revs = [history.resolve(str(rev)).decode()]
        what = f"change {revs[0][:10]}"
    content, conflicts = history.revert_plan(revs, path)
    if conflicts:
        raise BadInput(
            "nothing was reverted: changed again since: " + ", ".join(conflicts),
            hint="revert the later changes first, or edit by hand",
        )
    queue = open_queue(obj.home)
    try:
        with queue.paused(
            group.folder,
            "memory-revert",
            "memory revert in progress",
            wait=group.config.turn_timeout_seconds + PAUSE_SLACK_SECONDS,
            progress=lambda busy: click.echo(f"waiting for {busy} turn(s) in flight", err=True),
        ):
            change = history.apply(
                content, Provenance(REVERT, sender="operator", note=f"reverted {what}")
            )
    finally:
        queue.close()
    if as_json:
        print_json({"reverted": revs, "change": change.to_dict() if change else None})
    elif change is None:
        click.echo("nothing to revert: memory already has that content")
    else:
        click.echo(f"reverted {what} as change {change.rev[:10]}: {', '.join(change.paths)}")


@click.command("prune")
@click.argument("name")
@click.option("--before", required=True, help="Fold changes older than this (30d, 12h).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_cli
def prune(obj: CliContext, name: str, before: str, yes: bool, as_json: bool) -> None:
    """Fold the changes older than --before into one, and free the space they took.
    The only command that rewrites history; nothing prunes it otherwise."""
    from orchestrator.errors import BadInput

    cutoff = _since(before)
    if cutoff is None:
        raise BadInput("--before is required")
    group, history = _history(obj, name)
    if not yes:
        click.confirm(
            f"Fold the history of {group.folder} before {_when(cutoff)} UTC into one change? "
            "Who made those changes will no longer be shown",
            abort=True,
        )
    folded, freed = history.prune(cutoff)
    if as_json:
        print_json({"folded": folded, "freed_bytes": freed})
    elif folded:
        click.echo(f"folded {folded} changes into one; freed {freed} bytes")
    else:
        click.echo(f"nothing to prune before {_when(cutoff)} UTC")
