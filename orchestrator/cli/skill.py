"""``orchestrator skill``: the built-in skills, and the ones that run on the host."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import click

from orchestrator.cli import CliContext
from orchestrator.cli.output import print_json, print_table, safe_line
from orchestrator.config import load_config
from orchestrator.protocol import OFFLINE

if TYPE_CHECKING:
    from orchestrator.groups import Group

T = TypeVar("T")

pass_cli = click.make_pass_decorator(CliContext)
MIGRATE = "migrate-memory"


@click.group()
def skill() -> None:
    """Built-in skills: folders under skills/ with a SKILL.md, mounted read-only in
    group containers. A skill marked `host: true` runs on the host with `skill run`.

    \b
    Examples:
      orchestrator skill list
      orchestrator skill run migrate-memory family --dry-run
      orchestrator skill run migrate-memory family --from ~/old-assistant/workspace
      orchestrator skill run migrate-memory family --approve
    """


def _skills() -> list[dict[str, object]]:
    import frontmatter

    from orchestrator.runtime.lifecycle import default_skills_root

    root = default_skills_root()
    found: list[dict[str, object]] = []
    if root is None:
        return found
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()):
        manifest = folder / "SKILL.md"
        if not manifest.is_file():
            continue
        post = frontmatter.loads(manifest.read_text(encoding="utf-8"))
        found.append(
            {
                "name": str(post.get("name") or folder.name),
                "description": " ".join(str(post.get("description") or "").split()),
                "host": bool(post.get("host", False)),
                "path": str(manifest),
            }
        )
    return found


@skill.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_(as_json: bool) -> None:
    """List the built-in skills."""
    found = _skills()
    if as_json:
        print_json({"skills": found})
        return
    if not found:
        click.echo("no skills")
        return
    print_table(
        ["NAME", "RUNS ON", "DESCRIPTION"],
        [[s["name"], "host" if s["host"] else "container", s["description"]] for s in found],
    )


@skill.command("run")
@click.argument("skill_name", metavar="SKILL")
@click.argument("name")
@click.option(
    "--from",
    "froms",
    multiple=True,
    type=click.Path(path_type=Path),
    help="Memory exported from another assistant: a workspace or folder of Markdown "
    "files, or one file (repeatable). Read only, never changed.",
)
@click.option("--dry-run", is_flag=True, help="Print the plan; change nothing.")
@click.option("--approve", is_flag=True, help="Remove the staged sources of the last run.")
@click.option("--rollback", is_flag=True, help="Undo the last run exactly.")
@click.option(
    "--apply-instructions",
    is_flag=True,
    help="Append the proposed instructions (as you left them) to instructions.prepend.md.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_cli
def run(
    obj: CliContext,
    skill_name: str,
    name: str,
    froms: tuple[Path, ...],
    dry_run: bool,
    approve: bool,
    rollback: bool,
    apply_instructions: bool,
    as_json: bool,
) -> None:
    """Run SKILL on group NAME (migrate-memory is the skill that runs on the host).

    Without an option, migrates: the group is paused (its messages wait) and its
    container stopped while the run lasts; sources in the group folder are staged in
    .memory-migration/, --from sources only read; the report is printed and kept in
    .memory-migration/report.md. Then --approve, or --rollback.
    """
    from orchestrator.errors import BadInput
    from orchestrator.groups import GroupStore
    from orchestrator.memory import migrate

    if skill_name != MIGRATE:
        known = {str(s["name"]) for s in _skills()}
        raise BadInput(
            f"skill {skill_name!r} does not run on the host"
            if skill_name in known
            else f"no skill named {skill_name!r}",
            hint=f"host skills: {MIGRATE}; see: orchestrator skill list",
        )
    flags = (
        ("--dry-run", dry_run),
        ("--approve", approve),
        ("--rollback", rollback),
        ("--apply-instructions", apply_instructions),
    )
    chosen = [flag for flag, on in flags if on]
    if len(chosen) > 1:
        raise BadInput(f"give at most one of {', '.join(chosen)}")
    if froms and chosen and chosen[0] != "--dry-run":
        raise BadInput(f"--from goes with a run or --dry-run, not with {chosen[0]}")
    group = GroupStore(obj.home).find(name)
    if dry_run:
        _plan(group.path, froms, as_json)
        return
    if approve:
        removed = migrate.approve(group.path)
        _say(
            as_json,
            {"approved": True, "removed": removed},
            f"approved; removed {len(removed)} staged source(s)",
        )
        return
    if apply_instructions:
        target = migrate.apply_instructions(group.path)  # not memory: no history change
        _say(as_json, {"applied": target}, f"appended the proposed instructions to {target}")
        return
    if rollback:
        done = _paused(obj, group, lambda: migrate.rollback(group.path))
        _say(as_json, {"rolled_back": done}, "\n".join(done) + f"\nrolled back ({len(done)} steps)")
        return
    splitter = None
    if group.config.provider != OFFLINE:  # the group's model proposes the concepts
        from orchestrator.relay.splitter import migrate_splitter

        config = load_config(obj.home)
        splitter = migrate_splitter(
            config, group.config.provider, group.config.model, group.config.turn_timeout_seconds
        )
    outcome = _paused(
        obj,
        group,
        lambda: migrate.run(
            group.path,
            froms,
            step=lambda what: None if as_json else click.echo(what, err=True),
            splitter=splitter,
        ),
    )
    if as_json:
        print_json(
            {
                "created": outcome.created,
                "edited": outcome.edited,
                "moved": outcome.moved,
                "proposed_instruction_lines": outcome.proposed,
                "conflicts": outcome.conflicts,
                "notes": outcome.notes,
                "report": f"{group.path}/{migrate.MIGRATION_DIR}/{migrate.REPORT}",
            }
        )
        return
    click.echo(outcome.report, nl=False)


def _say(as_json: bool, data: dict[str, object], text: str) -> None:
    if as_json:
        print_json(data)
    else:
        click.echo(text)


def _plan(group_path: Path, froms: tuple[Path, ...], as_json: bool) -> None:
    from orchestrator.memory import migrate
    from orchestrator.units import human_bytes

    sources, stops = migrate.inventory(group_path, froms)
    if as_json:
        print_json(
            {
                "sources": [
                    {
                        "source": s.label,
                        "kind": s.kind,
                        "bytes": s.size,
                        "files": [label for label, _ in s.files],
                        "destination": s.destination,
                    }
                    for s in sources
                ],
                "stops": stops,
            }
        )
    elif not sources:
        click.echo(f"no legacy memory in {group_path}; nothing to migrate")
    else:
        print_table(
            ["SOURCE", "KIND", "SIZE", "FILES", "DESTINATION"],
            [[s.label, s.kind, human_bytes(s.size), len(s.files), s.destination] for s in sources],
        )
        for stop in stops:
            click.echo(f"stops the run: {safe_line(stop)}", err=True)
        click.echo("dry run: nothing was changed")
    if stops:
        raise SystemExit(1)


def _paused(obj: CliContext, group: Group, work: Callable[[], T]) -> T:
    """Run ``work`` with the group paused (messages wait), its turns in flight finished
    and its container stopped; the pause ends with the run, however it ends."""
    from orchestrator.limits import PAUSE_SLACK_SECONDS
    from orchestrator.memory import migrate
    from orchestrator.store.messages import open_queue

    queue = open_queue(obj.home)
    try:
        with queue.paused(
            group.folder,
            migrate.PAUSE_HOLDER,
            "memory migration in progress",
            wait=group.config.turn_timeout_seconds + PAUSE_SLACK_SECONDS,
            progress=lambda busy: click.echo(f"waiting for {busy} turn(s) in flight", err=True),
        ):
            return _stopped_run(obj, group, work)
    finally:
        queue.close()


def _stopped_run(obj: CliContext, group: Group, work: Callable[[], T]) -> T:
    """``work`` with the group's container stopped, then recorded in its history."""
    from orchestrator.cli.runtime import open_runtime
    from orchestrator.errors import EngineUnreachable
    from orchestrator.memory.history import MIGRATION, Provenance, record_quietly

    try:
        open_runtime(obj).stop(group)
    except EngineUnreachable as exc:
        click.echo(f"note: {exc.message}; the container, if any, was not stopped", err=True)
    done = work()
    record_quietly(
        group.path.parent,
        group.folder,
        Provenance(MIGRATION, sender="operator", note="migrate-memory"),
    )
    return done
