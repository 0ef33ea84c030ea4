"""``orchestrator learned``: a group's learned behaviors, from the operator's side."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from orchestrator.cli import CliContext
from orchestrator.cli.output import print_json, safe_line, safe_text
from orchestrator.protocol import LEARNED_LABEL
from orchestrator.units import human_bytes

if TYPE_CHECKING:
    from orchestrator.groups import Group
    from orchestrator.home import Home
    from orchestrator.store.held import HeldRequest

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
    change is held as a request with an id: the host shows its whole text in that chat,
    where a creator approves it with /approve ID (or /confirm when it is the only one
    waiting there), or the operator does with `learned approve NAME ID`.

    \b
    Examples:
      orchestrator learned show family
      orchestrator learned set family --file rules.md
      orchestrator learned show family --pending
      orchestrator learned approve family 12
      orchestrator learned discard family 13
    """


def _when(stamp: float | None) -> str:
    if stamp is None:
        return "-"
    return datetime.fromtimestamp(stamp, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@learned.command("show")
@click.argument("name")
@click.option("--pending", is_flag=True, help="List the changes waiting for approval instead.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (the text included).")
@pass_cli
def show(obj: CliContext, name: str, pending: bool, as_json: bool) -> None:
    """Print a group's learned behaviors, after a header with the file, its size and
    modification time, and who may change it.

    With --pending: every change waiting for a creator's approval instead, each with its
    id, size, the chat it was asked in, who asked, when it expires, and its whole text."""
    from orchestrator.errors import BadInput
    from orchestrator.groups import GroupStore
    from orchestrator.memory.learned import LearnedStore, report

    group = GroupStore(obj.home).find(name)
    held = held_learned(obj.home, group.folder)
    described = report(group.path.parent, group.folder, group.config.creators, held)
    if pending:
        if as_json:
            print_json(
                {
                    "folder": group.folder,
                    "pending": [{**r.to_dict(), "text": r.content} for r in held],
                }
            )
            return
        if not held:
            click.echo(f"{group.folder}: no change to its learned behaviors waits for approval")
            return
        for request in held:
            click.echo(
                f"# request {request.id}: {len(request.content):,} characters, asked by "
                f"{safe_line(request.sender)} in {safe_line(request.channel)}:"
                f"{safe_line(request.chat)} at {_when(request.created)}, expires "
                f"{_when(request.expires)}"
                + ("" if request.chat_approvable else " (too long for the chat: CLI only)")
            )
            click.echo(f"# apply with: orchestrator learned approve {group.folder} {request.id}")
            click.echo(safe_text(request.content.rstrip("\n")) or "(empty)")
        return
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
    info = LearnedStore(group.path.parent, group.folder).info()
    click.echo(f"# {info.path}: {human_bytes(info.size)}, modified {_when(info.modified)}")
    writers = ", ".join(group.config.creators) or "nobody (no creators in group.yaml)"
    click.echo(f"# may be changed by: {safe_line(writers)}")
    if held:
        click.echo(
            f"# {len(held)} change(s) wait for approval: "
            f"orchestrator learned show {group.folder} --pending"
        )
    click.echo(safe_text(text.rstrip("\n")) if text.strip() else "(empty)")


def held_learned(home: Home, folder: str) -> list[HeldRequest]:
    """The learned-behaviors writes of ``folder`` that wait for approval."""
    from orchestrator.store.held import HeldRequests
    from orchestrator.store.messages import open_queue_if_any

    queue = open_queue_if_any(home)
    if queue is None:
        return []
    try:
        return HeldRequests(queue).waiting(folder, kind=LEARNED_LABEL)
    finally:
        queue.close()


def _held_request(obj: CliContext, name: str, request_id: int) -> tuple[Group, HeldRequest]:
    """(the group, its held learned-behaviors request ``request_id``); BadInput naming
    the ids that wait when there is no such request."""
    from orchestrator.errors import BadInput
    from orchestrator.groups import GroupStore

    group = GroupStore(obj.home).find(name)
    held = held_learned(obj.home, group.folder)
    found = next((r for r in held if r.id == request_id), None)
    if found is None:
        waiting = ", ".join(str(r.id) for r in held)
        raise BadInput(
            f"no change to the learned behaviors of {group.folder!r} waits as request "
            f"{request_id}" + (f" (waiting: {waiting})" if waiting else ""),
            hint=f"see them with: orchestrator learned show {group.folder} --pending",
        )
    return group, found


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
    from orchestrator.memory.learned import LearnedStore

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
@click.argument("request_id", metavar="ID", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@pass_cli
def approve(obj: CliContext, name: str, request_id: int, as_json: bool) -> None:
    """Apply the change waiting for approval as request ID, exactly as it was held (its
    text is printed first). The ids are in `learned show NAME --pending`."""
    from orchestrator.errors import OrchestratorError
    from orchestrator.relay.approvals import approve as approve_request
    from orchestrator.store.messages import open_queue_if_any

    group, request = _held_request(obj, name, request_id)
    folder = group.folder
    if not as_json:
        click.echo(f"# request {request.id}, {len(request.content):,} characters:")
        click.echo(safe_text(request.content.rstrip("\n")) or "(empty)")
    queue = open_queue_if_any(obj.home)
    assert queue is not None
    try:
        applied = approve_request(queue, group.path.parent, request, "operator")
    finally:
        queue.close()
    if not applied.done:
        raise OrchestratorError(
            f"{folder}: request {request.id} was not applied: {applied.detail}",
            hint="approve it again to retry",
        )
    if as_json:
        print_json({"folder": folder, "request": request.id, "status": "PERSISTED"})
        return
    click.echo(f"{folder}: request {request.id} applied: {applied.detail}")


@learned.command("discard")
@click.argument("name")
@click.argument("request_id", metavar="ID", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@pass_cli
def discard(obj: CliContext, name: str, request_id: int, as_json: bool) -> None:
    """Drop the change waiting as request ID; the learned behaviors stay as they are."""
    from orchestrator.store.held import HeldRequests
    from orchestrator.store.messages import open_queue_if_any

    group, _ = _held_request(obj, name, request_id)
    folder = group.folder
    queue = open_queue_if_any(obj.home)
    assert queue is not None
    try:
        HeldRequests(queue).drop(request_id)
    finally:
        queue.close()
    if as_json:
        print_json({"folder": folder, "request": request_id, "dropped": True})
        return
    click.echo(f"{folder}: request {request_id} was dropped")
