"""The operator's side of held requests of one kind (package requests, MCP server
requests): list those waiting for a group, approve one, or deny one."""

from __future__ import annotations

import click

from orchestrator.cli import CliContext
from orchestrator.cli.output import print_json, safe_line


def handle_requests(
    obj: CliContext,
    folder: str,
    kind: str,
    what: str,
    *,
    approve_id: int | None,
    deny_id: int | None,
    as_json: bool,
    listing: str,
) -> None:
    """List ``folder``'s waiting requests of ``kind`` (``what`` names them, such as
    "package request"), or approve or deny the one named; ``listing`` is how a person
    lists them (named when an id waits for nothing)."""
    from orchestrator.errors import BadInput
    from orchestrator.relay.approvals import approve
    from orchestrator.store.held import HeldRequests
    from orchestrator.store.messages import open_queue_if_any

    if approve_id is not None and deny_id is not None:
        raise BadInput(
            f"give --approve or --deny, not both (got --approve {approve_id} --deny {deny_id})"
        )
    queue = open_queue_if_any(obj.home)
    if queue is None:
        raise click.ClickException("no state database yet: no requests were ever made")
    try:
        held = HeldRequests(queue)
        waiting = held.waiting(folder, kind=kind)
        wanted = approve_id if approve_id is not None else deny_id
        if wanted is None:
            if as_json:
                print_json([{**r.to_dict(), "content": r.content} for r in waiting])
                return
            if not waiting:
                click.echo(f"no {what}s wait for {folder}")
            for r in waiting:
                click.echo(f"request {r.id} from {safe_line(r.sender)} in {safe_line(r.chat)}:")
                click.echo(r.content)
            return
        request = next((r for r in waiting if r.id == wanted), None)
        if request is None:
            raise click.BadParameter(
                f"no {what} {wanted} waits for {folder} (see {listing})",
                param_hint="--approve" if approve_id is not None else "--deny",
            )
        if deny_id is not None:
            held.drop(request.id)
            queue.add_host_notices(
                request.message_id,
                [f"[orchestrator] Request {request.id} was denied by the operator."],
            )
            click.echo(f"denied request {request.id}", err=True)
            return
        applied = approve(queue, obj.home.groups_dir, request, "operator", background=False)
        if not applied.done:
            raise click.ClickException(f"request {request.id} was not applied: {applied.detail}")
        click.echo(f"approved request {request.id}: {applied.detail}", err=True)
    finally:
        queue.close()
