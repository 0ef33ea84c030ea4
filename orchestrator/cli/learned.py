"""``orchestrator learned``: a group's learned behaviors, from the operator's side."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import click

from orchestrator.cli import CliContext
from orchestrator.cli.output import human_bytes, print_json, safe_line, safe_text

pass_cli = click.make_pass_decorator(CliContext)


@click.group()
def learned() -> None:
    """A group's learned behaviors: standing rules its creators approved.

    They live in groups/<folder>/learned-behaviors.md, owned by the host and never
    mounted in the container. The runner asks the host for them at each fresh context
    (a new session, /clear, compaction), so a change shows there, not in the middle of
    a conversation. In a chat the model changes them with memory_write on the label
    'learned', granted only to a turn from one of the group's creators; when the
    conversation has had messages from anyone else since it last started fresh, the
    change waits for a creator's /confirm in the chat, or for `learned approve`.

    \b
    Examples:
      orchestrator learned show family
      orchestrator learned set family --file rules.md
      orchestrator learned show family --pending
      orchestrator learned approve family
    """


def _when(stamp: float | None) -> str:
    if stamp is None:
        return "-"
    return datetime.fromtimestamp(stamp, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@learned.command("show")
@click.argument("name")
@click.option("--pending", is_flag=True, help="Show the change waiting for confirmation.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (the text included).")
@pass_cli
def show(obj: CliContext, name: str, pending: bool, as_json: bool) -> None:
    """Print a group's learned behaviors (or, with --pending, the change that waits for
    a creator's confirmation), after a header with the file, its size and modification
    time, and who may change it."""
    from orchestrator.errors import BadInput
    from orchestrator.groups import GroupStore
    from orchestrator.learned import LearnedStore, open_queue_if_any, report

    group = GroupStore(obj.home).find(name)
    queue = open_queue_if_any(obj.home.state_dir)
    try:
        described = report(group.path.parent, group.folder, group.config.creators, queue)
        held = queue.pending_learned(group.folder) if queue is not None else None
    finally:
        if queue is not None:
            queue.close()
    if pending:
        if held is None:
            raise BadInput(f"no change to the learned behaviors of {group.folder!r} is waiting")
        text = held.content
    else:
        try:
            text = LearnedStore(group.path.parent, group.folder).read()
        except (OSError, UnicodeDecodeError) as exc:
            raise BadInput(
                f"{group.learned_file}: cannot be read ({exc})",
                hint="it must be a regular UTF-8 file; `learned set` replaces it",
            ) from None
    if as_json:
        print_json({"folder": group.folder, **described, "text": text})
        return
    if pending:
        assert held is not None
        click.echo(
            f"# waiting for confirmation: {len(held.content):,} characters, asked by "
            f"{safe_line(held.sender)} at {_when(held.created)} (message {held.message_id})"
        )
        click.echo(f"# apply with: orchestrator learned approve {group.folder}")
    else:
        size = described["size"]
        click.echo(
            f"# {described['path']}: {human_bytes(int(size))}, "  # type: ignore[call-overload]
            f"modified {_when(described['modified'])}"  # type: ignore[arg-type]
        )
        writers = ", ".join(group.config.creators) or "nobody (no creators in group.yaml)"
        click.echo(f"# may be changed by: {safe_line(writers)}")
        if held is not None:
            click.echo(f"# a change is waiting: orchestrator learned show {group.folder} --pending")
    click.echo(safe_text(text.rstrip("\n")) if text.strip() else "(empty)")


@learned.command("set")
@click.argument("name")
@click.option(
    "--file",
    "source",
    required=True,
    type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
    help="The new text, whole (UTF-8; '-' reads standard input).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@pass_cli
def set_(obj: CliContext, name: str, source: Path, as_json: bool) -> None:
    """Replace a group's learned behaviors with the text of a file, atomically.

    The limit is the group's learned_max_chars (default 16000). Running containers see
    the new text at their next fresh context."""
    from orchestrator.errors import BadInput, OrchestratorError
    from orchestrator.groups import GroupStore
    from orchestrator.learned import LearnedStore

    group = GroupStore(obj.home).find(name)
    limit = group.config.learned_max_chars
    try:
        data = sys.stdin.buffer.read(4 * limit + 1) if str(source) == "-" else source.read_bytes()
    except OSError as exc:
        raise BadInput(f"{source}: cannot be read: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{source}: not UTF-8 text (byte {exc.start})") from None
    if len(text) > limit:
        raise BadInput(
            f"{source}: {len(text):,} characters; the learned behaviors of {group.folder!r} "
            f"may hold at most {limit:,}",
            hint="shorten it, or raise learned_max_chars in its group.yaml",
        )
    outcome = LearnedStore(group.path.parent, group.folder).replace(text)
    if not outcome.persisted:
        raise OrchestratorError(f"{group.learned_file}: {outcome}")
    from orchestrator.memory.history import OPERATOR, Provenance, record_quietly

    record_quietly(
        group.path.parent, group.folder, Provenance(OPERATOR, note=f"learned set from {source}")
    )
    if as_json:
        print_json({"folder": group.folder, "status": outcome.status, "chars": len(text)})
        return
    click.echo(f"{group.folder}: {outcome}")


@learned.command("approve")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@pass_cli
def approve(obj: CliContext, name: str, as_json: bool) -> None:
    """Apply the change to a group's learned behaviors that waits for confirmation (as a
    creator's /confirm in the chat would). See it first with `learned show NAME --pending`."""
    from orchestrator.errors import BadInput, OrchestratorError
    from orchestrator.groups import GroupStore
    from orchestrator.learned import apply_pending, open_queue_if_any

    group = GroupStore(obj.home).find(name)
    queue = open_queue_if_any(obj.home.state_dir)
    try:
        outcome = (
            apply_pending(queue, group.path.parent, group.folder, confirmed_by="operator")
            if queue
            else None
        )
    finally:
        if queue is not None:
            queue.close()
    if outcome is None:
        raise BadInput(f"no change to the learned behaviors of {group.folder!r} is waiting")
    if not outcome.persisted:
        raise OrchestratorError(f"{group.learned_file}: {outcome}", hint="approve again to retry")
    if as_json:
        print_json({"folder": group.folder, "status": outcome.status})
        return
    click.echo(f"{group.folder}: {outcome}")


@learned.command("discard")
@click.argument("name")
@pass_cli
def discard(obj: CliContext, name: str) -> None:
    """Drop the change that waits for confirmation; the learned behaviors stay as they are."""
    from orchestrator.errors import BadInput
    from orchestrator.groups import GroupStore
    from orchestrator.learned import open_queue_if_any

    group = GroupStore(obj.home).find(name)
    queue = open_queue_if_any(obj.home.state_dir)
    try:
        dropped = queue.drop_learned(group.folder) if queue is not None else False
    finally:
        if queue is not None:
            queue.close()
    if not dropped:
        raise BadInput(f"no change to the learned behaviors of {group.folder!r} is waiting")
    click.echo(f"{group.folder}: the waiting change was dropped")
