"""``orchestrator doctor``."""

from __future__ import annotations

import click

from orchestrator.cli import CliContext
from orchestrator.cli.output import print_json, print_table
from orchestrator.errors import EXIT_FAILED

pass_cli = click.make_pass_decorator(CliContext)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option(
    "--repair-queue",
    is_flag=True,
    help="When state/queue.db is corrupt: move it aside (kept, renamed) and start a new "
    "queue holding the pending messages that can still be read. Stop the daemon first.",
)
@pass_cli
def doctor(obj: CliContext, as_json: bool, repair_queue: bool) -> None:
    """Check the home, config, queue, disk, engine, agent image, containers and daemon;
    exit 1 if any check fails."""
    from orchestrator.service.doctor import FAIL, run_checks

    if repair_queue:
        _repair_queue(obj)

    checks = run_checks(obj.home)
    failed = [c for c in checks if c.status == FAIL]
    if as_json:
        print_json({"ok": not failed, "checks": [c.to_dict() for c in checks]})
    else:
        print_table(("CHECK", "STATUS", "DETAIL"), [(c.name, c.status, c.detail) for c in checks])
        for check in failed:
            click.echo(
                f"error: {check.name}: {check.detail}"
                + (f" (hint: {check.hint})" if check.hint else ""),
                err=True,
            )
    if failed:
        raise SystemExit(EXIT_FAILED)


def _repair_queue(obj: CliContext) -> None:
    from orchestrator.errors import OrchestratorError
    from orchestrator.home import lock_holder
    from orchestrator.store.messages import check_queue, set_aside

    problem = check_queue(obj.home)
    if problem is None:
        click.echo("the queue is healthy; nothing to repair")
        return
    holder = lock_holder(obj.home)
    if holder is not None:
        raise OrchestratorError(
            f"daemon {holder} is running", hint="stop it first: orchestrator down"
        )
    aside, copied, unreadable = set_aside(obj.home)
    click.echo(f"moved the corrupt queue to {aside}")
    click.echo(f"started a new queue with {copied} pending messages copied over")
    if unreadable:
        click.echo(f"note: the rest could not be read ({unreadable}); the old file is kept")
