"""``orchestrator memory``: scaffold and lint a group's OKF memory tree."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from orchestrator.cli import CliContext
from orchestrator.cli.output import print_json, print_table
from orchestrator.config import load_config
from orchestrator.errors import EXIT_FAILED
from orchestrator.groups import GroupStore
from orchestrator.limits import CONSOLIDATE_DEFAULT_DAYS as DEFAULT_DAYS
from orchestrator.limits import CONSOLIDATE_MAX_DAYS as MAX_DAYS
from orchestrator.units import plural

if TYPE_CHECKING:
    from orchestrator.groups import Group
    from orchestrator.memory.consolidate import Report
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

    served = _search_by_daemon(obj, name, query, max_results)
    if served is not None:
        folder, results = served
    else:
        found, index = _index(obj, name)
        with index:
            index.update()
            hits = index.search(query, max_results)
        folder, results = found.folder, [h.to_dict() for h in hits]
    if as_json:
        print_json({"group": folder, "query": query, "results": results})
        return
    if not results:
        click.echo(f"no results for {query!r} in {folder}'s memory")
        return
    for hit in results:
        click.echo(
            click.style(f"{hit['path']}:{hit['start_line']}-{hit['end_line']}", bold=True)
            + f"  score {hit['score']:g}"
        )
        for line in safe_text(str(hit["snippet"])).splitlines():
            click.echo(f"    {line}")


def _search_by_daemon(
    obj: CliContext, name: str, query: str, max_results: int
) -> tuple[str, list[dict[str, Any]]] | None:
    """The daemon's answer when one runs for this home (its index is open and its
    embedder loaded); None when none does, and the command searches by itself."""
    from orchestrator.errors import EXIT_BAD_INPUT, BadInput, DaemonNotRunning, OrchestratorError
    from orchestrator.service.client import control_request

    try:
        answer = control_request(
            obj.home,
            {"op": "search", "group": name, "query": query, "max_results": max_results},
            timeout=60,
        )
    except DaemonNotRunning:
        return None
    if not answer.get("ok"):
        # the daemon says which kind of failure, as the exit code it would have locally
        refused = BadInput if answer.get("exit") == EXIT_BAD_INPUT else OrchestratorError
        raise refused(str(answer.get("error")), hint=answer.get("hint"))
    results = answer.get("results")
    if not isinstance(results, list):
        raise OrchestratorError("the daemon answered a search without results")
    return str(answer.get("group", name)), results


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
    from orchestrator.agent.notes import reported

    report = context_report(
        found.path.parent, found.folder, zone=found.config.timezone, recent=reported
    )
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


@memory.command("consolidate")
@click.argument("name")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Show what would be promoted and written; change nothing (a model is still asked).",
)
@click.option(
    "--days",
    type=click.IntRange(1, MAX_DAYS),
    default=DEFAULT_DAYS,
    show_default=True,
    help="Read the daily notes of this many days, today's included.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_cli
def consolidate(obj: CliContext, name: str, dry_run: bool, days: int, as_json: bool) -> None:
    """Promote the durable facts of NAME's recent daily notes into its core memory.

    Only lines a creator or member said, with no guest taking part, are eligible (a
    line without a source never is; nor one the history shows a guest's turn wrote).
    The group's background model proposes promotions (to index.md or a concept file,
    one line each, citing the note lines), each checked; an offline group's facts said
    on two days or more go to memory/notes/recurring.md instead. Lines are only
    appended, under "## Consolidated", each with where it came from; memory/log.md
    gets an entry, and the run is one change of the memory history (undo it with
    memory revert). The group is paused while it writes.
    """
    from orchestrator.cli.history import _history
    from orchestrator.relay.consolidation import run_consolidation
    from orchestrator.store.messages import open_queue
    from orchestrator.store.usage import UsageStore

    group = GroupStore(obj.home).find(name)
    if not dry_run:
        _history(obj, name)  # changes made since the last record: attributed first
    queue = open_queue(obj.home)
    usage = UsageStore(queue.path)
    try:
        report = run_consolidation(
            obj.home,
            group,
            dry_run=dry_run,
            days=days,
            usage=usage,
            queue=queue,
            sender="operator",
            progress=lambda busy: click.echo(f"waiting for {busy} turn(s) in flight", err=True),
        )
    finally:
        usage.close()
        queue.close()
    if as_json:
        print_json(report.to_dict())
        return
    _show_consolidation(report)


def _show_consolidation(report: Report) -> None:
    from orchestrator.cli.output import safe_line

    eligible = report.eligible
    before = sum(1 for n in eligible if n.cited)
    how = (
        f"proposals by {report.model}"
        if report.mode == "model"  # consolidate.MODEL: proposed by the model
        else "no model (offline): facts said on two days or more"
    )
    if report.usage:
        used = report.usage
        how += (
            f" ({used['calls']} call(s), {used['input_tokens']:,} tokens in, "
            f"{used['output_tokens']:,} out)"
        )
    click.echo(
        f"{report.folder}: {plural(len(report.days), 'daily note')} "
        f"({report.days[0]} to {report.days[-1]}), {plural(len(report.lines), 'line')}, "
        f"{len(eligible)} eligible" + (f" ({before} consolidated before)" if before else "")
        + f"; {how}"
    )  # fmt: skip
    sections = (
        ("promoted", [f"{p.target}: {p.line}" for p in report.promoted]),
        ("skipped", [f"{s.what}: {s.reason}" for s in report.skipped]),
        ("refused", [f"{r.what}: {r.reason}" for r in report.refused]),
        ("never promoted", [f"{r.what}: {r.reason}" for r in report.rejected]),
        ("notes", list(report.notes)),
    )
    for title, rows in sections:
        if rows:
            click.echo(f"{title} ({len(rows)}):")
            for row in rows:
                click.echo(f"  {safe_line(row)}")
    if report.dry_run:
        would = f"; it would write {', '.join(report.writes)}" if report.writes else ""
        click.echo(f"dry run: nothing was changed{would}")
    elif report.change:
        rev = report.change[:10]
        click.echo(
            f"recorded as change {rev} (undo: orchestrator memory revert {report.folder} {rev})"
        )
    else:
        click.echo("nothing to promote: memory is unchanged")


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
