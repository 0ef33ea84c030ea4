"""``orchestrator doctor``."""

from __future__ import annotations

import click

from orchestrator.cli import CliContext
from orchestrator.cli.output import print_json, print_table
from orchestrator.errors import EXIT_FAILED

pass_cli = click.make_pass_decorator(CliContext)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@pass_cli
def doctor(obj: CliContext, as_json: bool) -> None:
    """Check the engine, the agent image, the home and the config; exit 1 if any fail."""
    from orchestrator.doctor import FAIL, run_checks

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
