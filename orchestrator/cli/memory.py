"""``orchestrator memory``: scaffold and lint a group's OKF memory tree."""

from __future__ import annotations

import click

from orchestrator.cli import CliContext
from orchestrator.cli.output import plural, print_json, print_table
from orchestrator.errors import EXIT_FAILED
from orchestrator.groups import GroupStore

pass_cli = click.make_pass_decorator(CliContext)


@click.group()
def memory() -> None:
    """Scaffold and lint a group's memory tree (groups/<folder>/memory/)."""


@memory.command("scaffold")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_cli
def scaffold(obj: CliContext, name: str, as_json: bool) -> None:
    """Create the missing parts of NAME's memory tree; never overwrites a file.

    Creates memory/, memory/system/ and, only where missing, memory/index.md,
    memory/system/index.md and memory/system/definition.md. Symlinks and other
    non-regular entries are reported and left untouched. Exits 1 if any were found.
    """
    from orchestrator.memory.scaffold import scaffold_memory

    found = GroupStore(obj.home).find(name)
    report = scaffold_memory(found.path)
    if as_json:
        print_json({"group": found.folder, "created": report.created, "problems": report.problems})
    else:
        if report.created:
            for path in report.created:
                click.echo(f"created {path}")
        else:
            click.echo("nothing to create: the memory tree is complete")
        for problem in report.problems:
            click.echo(f"problem: {problem}", err=True)
    if report.problems:
        raise SystemExit(EXIT_FAILED)


@memory.command("lint")
@click.argument("name")
@click.option(
    "--fix",
    is_flag=True,
    help="Repair metadata only: add a missing type, move unparseable frontmatter "
    "into the body. Bodies are otherwise untouched; writes are atomic.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_cli
def lint(obj: CliContext, name: str, fix: bool, as_json: bool) -> None:
    """Check NAME's memory tree against OKF v0.1 and the injection budget.

    \b
    Findings:
      frontmatter-missing   a concept file has no YAML frontmatter        (fixable)
      frontmatter-invalid   its frontmatter cannot be parsed               (fixable)
      type-missing          its frontmatter has no non-empty 'type'        (fixable)
      unreachable           no chain of links leads to it from index.md
      over-budget           index.md or system/definition.md > 16,000 characters
      symlink               a symlink inside the tree (never followed)
      not-regular           a FIFO, socket or device file inside the tree
      too-large             a Markdown file over 4 MiB (not read)
      not-utf8              a Markdown file that is not UTF-8
      unreadable            a file or folder that cannot be read
    Exits 1 while findings remain.
    """
    from orchestrator.memory.lint import lint_memory

    found = GroupStore(obj.home).find(name)
    report = lint_memory(found.memory_dir, fix=fix)
    if as_json:
        print_json(report.to_dict())
    else:
        for path in report.fixed:
            click.echo(f"fixed {path}")
        if report.findings:
            print_table(
                ("KIND", "FILE", "FINDING"), [(f.kind, f.path, f.message) for f in report.findings]
            )
        click.echo(
            f"{plural(report.files_checked, 'file')} checked, "
            f"{plural(len(report.findings), 'finding')}"
        )
    if report.findings:
        raise SystemExit(EXIT_FAILED)
