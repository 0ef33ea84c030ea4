"""``orchestrator memory``: scaffold and lint a group's OKF memory tree."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from orchestrator.cli import CliContext
from orchestrator.cli.output import plural, print_json, print_table
from orchestrator.config import load_config
from orchestrator.errors import EXIT_FAILED
from orchestrator.groups import GroupStore

if TYPE_CHECKING:
    from orchestrator.groups import Group
    from orchestrator.memory.search import MemoryIndex

pass_cli = click.make_pass_decorator(CliContext)


@click.group()
def memory() -> None:
    """A group's memory tree (groups/<folder>/memory/): scaffold, lint, search, status,
    and its history: log, show, diff, blame, revert."""


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


def _index(obj: CliContext, name: str) -> tuple[Group, MemoryIndex]:
    from orchestrator.errors import InvalidConfig
    from orchestrator.memory.embeddings import EmbedderUnavailable
    from orchestrator.memory.search import index_for

    found = GroupStore(obj.home).find(name)
    config = load_config(obj.home)
    try:
        index = index_for(
            obj.home.state_dir,
            found.path.parent,
            found.folder,
            config.search_embedder,
            config.search_vector_weight,
        )
    except EmbedderUnavailable as exc:
        raise InvalidConfig(f"{obj.home.config_file}: {exc}") from None
    return found, index


@memory.command("search")
@click.argument("name")
@click.argument("query")
@click.option(
    "--max-results",
    type=click.IntRange(1, 50),
    default=6,
    show_default=True,
    help="Files to show (the best passage of each).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_cli
def search(obj: CliContext, name: str, query: str, max_results: int, as_json: bool) -> None:
    """Search NAME's memory for the words of QUERY, as the agent's memory_search does.

    The index (state/index/<folder>.sqlite, derived: deleting it loses nothing) is
    brought up to date first. Ranking is BM25 over every Markdown file of the memory
    tree, file paths weighted above text; English words match their other forms
    (deadline, deadlines). Each result is a file's best passage: path, lines, score.

    \b
    Example:
      orchestrator memory search family "tax deadline"
    """
    from orchestrator.cli.output import safe_text

    found, index = _index(obj, name)
    with index:
        index.update()
        hits = index.search(query, max_results)
    if as_json:
        print_json({"group": found.folder, "query": query, "results": [h.to_dict() for h in hits]})
        return
    if not hits:
        click.echo(f"no results for {query!r} in {found.folder}'s memory")
        return
    for hit in hits:
        click.echo(
            click.style(f"{hit.path}:{hit.start_line}-{hit.end_line}", bold=True)
            + f"  score {hit.score:g}"
        )
        for line in safe_text(hit.snippet).splitlines():
            click.echo(f"    {line}")


@memory.command("index")
@click.argument("name")
@click.option("--force", is_flag=True, help="Rebuild from nothing instead of updating.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_cli
def index(obj: CliContext, name: str, force: bool, as_json: bool) -> None:
    """Bring NAME's search index up to date (files are read only when their size,
    modification or change time differ from what the index recorded); --force rebuilds
    it. Searches do this by themselves: this is for a first build or a check."""
    found, memory_index = _index(obj, name)
    with memory_index:
        report = memory_index.update(force=force)
    if as_json:
        print_json({"group": found.folder, **report.to_dict()})
        return
    click.echo(
        f"{found.folder}: {report.added} added, {report.changed} changed, "
        f"{report.removed} removed, {report.unchanged} unchanged in {report.seconds:.2f}s"
        + (" (an unusable index was set aside and rebuilt)" if report.rebuilt else "")
    )
    for skipped in report.skipped:
        click.echo(f"skipped {skipped}")


@memory.command("status")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_cli
def status(obj: CliContext, name: str, as_json: bool) -> None:
    """NAME's memory at a glance: files and chunks in the search index and whether it
    is stale (files changed since its last update), and the context report: for each
    file a fresh context gets, its size on disk, what is injected and whether it is cut
    (the same numbers the memory hook and the runner produce)."""
    from datetime import UTC, datetime

    from orchestrator.memory.search import context_report

    found, memory_index = _index(obj, name)
    with memory_index:
        fresh = memory_index.freshness()
    report = context_report(found.path.parent, found.folder)
    if as_json:
        print_json(
            {
                "group": found.folder,
                "index": {
                    "path": str(memory_index.path),
                    "files": fresh.files,
                    "chunks": fresh.chunks,
                    "updated": fresh.updated,
                    "stale": fresh.stale,
                    "stale_files": fresh.stale_files,
                },
                "context": [item.to_dict() for item in report],
            }
        )
        return
    if fresh.updated is None:
        state = "never built (the first search builds it)"
    else:
        when = datetime.fromtimestamp(fresh.updated, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        state = f"updated {when}" + (
            f"; stale: {plural(fresh.stale_files, 'file')} changed since" if fresh.stale else ""
        )
    click.echo(
        f"{found.folder}: index of {plural(fresh.files, 'file')}, "
        f"{plural(fresh.chunks, 'chunk')}; {state}"
    )
    click.echo("context of a fresh conversation:")
    print_table(
        ("FILE", "ON DISK", "INJECTED", "CUT"),
        [
            (
                item.name,
                item.problem or f"{item.raw_chars:,} chars",
                f"{item.injected_chars:,} chars",
                "yes" if item.truncated else "no",
            )
            for item in report
        ],
    )


def _attach_history() -> None:
    from orchestrator.cli import history

    for command in (
        history.log,
        history.show,
        history.diff,
        history.blame,
        history.revert,
        history.prune,
    ):
        memory.add_command(command)


_attach_history()
