"""``orchestrator skill``: add, list, show and remove skills; run a host skill."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import click

from orchestrator.cli import CliContext
from orchestrator.cli.output import print_json, print_table, safe_line, safe_text
from orchestrator.config import load_config
from orchestrator.protocol import OFFLINE

if TYPE_CHECKING:
    from orchestrator.groups import Group

T = TypeVar("T")

pass_cli = click.make_pass_decorator(CliContext)
MIGRATE = "migrate-memory"


@click.group()
def skill() -> None:
    """Skills: folders with a SKILL.md (frontmatter name and description, then
    instructions) and any scripts or reference files, mounted read-only at
    /workspace/skills/NAME in group containers.

    Built-in skills come with the orchestrator; `skill add` installs one for every group
    (<home>/skills/NAME) or, with --group, for one group
    (<home>/skills-by-group/FOLDER/NAME). group.yaml `skills: all` (the default) or
    `skills: [names]` selects among the ones a group sees. At a fresh context the model
    sees each skill's name and description; its `skill` tool loads the instructions,
    and the shell runs the scripts in the group's container, with the group's files.
    A skill is code and instructions from a third party: read it before you add it.
    Only the operator adds skills; a chat cannot. A built-in skill marked `host: true`
    runs on the host with `skill run`; an installed one never does.

    \b
    Examples:
      orchestrator skill add ./pdf-tools
      orchestrator skill add ./release-notes --group family
      orchestrator skill list --group family
      orchestrator skill show pdf-tools
      orchestrator skill remove release-notes --group family
      orchestrator skill run migrate-memory family --dry-run
    """


def _skills() -> list[dict[str, object]]:
    """The built-in skills, by name."""
    from orchestrator.skills.catalog import builtin_root, names_in

    return [{"name": name} for name in names_in(builtin_root())]


def _folder(obj: CliContext, group: str | None) -> str | None:
    """The folder of group ``group`` (a name or folder), or None."""
    if group is None:
        return None
    from orchestrator.groups import GroupStore

    return GroupStore(obj.home).find(group).folder


@skill.command("add")
@click.argument("path", type=click.Path(path_type=Path, file_okay=False))
@click.option(
    "--group",
    "group",
    metavar="NAME",
    help="Install it for this group only (default: for every group).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_cli
def add(obj: CliContext, path: Path, group: str | None, as_json: bool) -> None:
    """Check the skill folder PATH and install a copy of it.

    PATH is a folder named like the skill, holding SKILL.md: YAML frontmatter with
    `name` (lowercase letters, digits and hyphens, 1-64 characters, the folder's name)
    and `description` (at most 1024 characters: what the skill does and when to use
    it), then Markdown instructions; scripts and reference files beside it. Refused,
    with every reason, and nothing changed: a missing or wrong key, `host: true`, a
    symlink, a FIFO or device, more than 8 MiB or 512 files, or a name another skill
    the same groups see already has. Warnings name what the scripts do that you should
    look at (fetching and running code, installing packages, eval, reading credential
    files). The copy is installed whole or not at all; a group's container picks it up
    when it is next made (`orchestrator restart NAME`).

    \b
    Examples:
      orchestrator skill add ./pdf-tools
      orchestrator skill add ~/skills/release-notes --group family
    """
    from orchestrator.skills.catalog import builtin_root, install

    folder = _folder(obj, group)
    done = install(obj.home, path, folder, builtin_root())
    checked = done.checked
    if as_json:
        print_json(
            {
                "name": checked.manifest.name,
                "description": checked.manifest.summary,
                "origin": done.origin,
                "group": folder,
                "path": str(done.path),
                "files": list(checked.files),
                "scripts": list(checked.scripts),
                "warnings": list(checked.warnings),
            }
        )
        return
    click.echo(f"name: {checked.manifest.name}")
    click.echo(f"description: {safe_line(checked.manifest.summary)}")
    # the checked entries hold its folders too ("scripts/"): count the files only
    count = sum(not entry.endswith("/") for entry in checked.files)
    click.echo(f"files: {count} ({checked.total_bytes} bytes)")
    if checked.scripts:
        click.echo("scripts (run in the group's container): " + ", ".join(checked.scripts))
    for warning in checked.warnings:
        click.echo(f"warning: {safe_line(warning)}", err=True)
    where = f"group {folder}" if folder else "every group"
    click.echo(f"installed {done.path} for {where}")
    click.echo(
        "a running container sees it once it is made again: orchestrator restart "
        + (folder or "NAME")
    )


@skill.command("list")
@click.option("--group", "group", metavar="NAME", help="The skills this group sees.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_cli
def list_(obj: CliContext, group: str | None, as_json: bool) -> None:
    """List the skills: the built-in ones and those installed for every group, and
    with --group also that group's own (and whether its group.yaml selects each).

    \b
    Examples:
      orchestrator skill list
      orchestrator skill list --group family --json
    """
    from orchestrator.skills.catalog import builtin_root, skills

    folder = _folder(obj, group)
    found = [s.to_dict() for s in skills(obj.home, folder, builtin_root())]
    if folder is not None:
        from orchestrator.groups import GroupStore

        selection = GroupStore(obj.home).load(folder).config.skills
        for entry in found:
            entry["selected"] = selection == "all" or entry["name"] in selection
    if as_json:
        print_json({"skills": found})
        return
    if not found:
        click.echo("no skills")
        return
    headers = ["NAME", "RUNS ON", "FROM", "DESCRIPTION"]
    if folder is not None:
        headers.insert(3, "SELECTED")
    rows = []
    for entry in found:
        row = [entry["name"], entry["runs_on"], entry["origin"], _short(entry["description"])]
        if folder is not None:
            row.insert(3, "yes" if entry["selected"] else "no")
        rows.append(row)
    print_table(headers, rows)


def _short(text: object, limit: int = 80) -> str:
    value = str(text)
    return value if len(value) <= limit else value[: limit - 1] + "…"


@skill.command("show")
@click.argument("name")
@click.option("--group", "group", metavar="NAME", help="Look among this group's skills too.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_cli
def show(obj: CliContext, name: str, group: str | None, as_json: bool) -> None:
    """Show skill NAME: where it is from, its frontmatter, its files and its body.

    \b
    Examples:
      orchestrator skill show migrate-memory
      orchestrator skill show release-notes --group family
    """
    from orchestrator.errors import BadInput
    from orchestrator.skills.catalog import builtin_root, skills

    folder = _folder(obj, group)
    found = {s.name: s for s in skills(obj.home, folder, builtin_root())}
    item = found.get(name)
    if item is None:
        raise BadInput(
            f"no skill named {name!r}" + (f" for group {folder}" if folder else ""),
            hint="see: orchestrator skill list"
            + (f" --group {folder}" if folder else " (a group's own: add --group NAME)"),
        )
    files = sorted(p.relative_to(item.path).as_posix() for p in item.path.rglob("*") if p.is_file())
    if as_json:
        print_json(
            {
                **item.to_dict(),
                "frontmatter": item.manifest.front if item.manifest else None,
                "body": item.manifest.body if item.manifest else None,
                "files": files,
            }
        )
        return
    click.echo(f"name: {item.name}")
    click.echo(f"from: {item.origin} ({item.path})")
    click.echo(f"runs on: {item.runs_on}")
    click.echo(f"files: {', '.join(safe_line(f) for f in files)}")
    if item.manifest is None:
        click.echo(f"problem: {safe_line(item.problem)}")
        return
    import yaml

    click.echo("---")
    click.echo(
        safe_text(yaml.safe_dump(item.manifest.front, sort_keys=False, allow_unicode=True)),
        nl=False,
    )
    click.echo("---")
    click.echo(safe_text(item.manifest.body), nl=False)


@skill.command("remove")
@click.argument("name")
@click.option("--group", "group", metavar="NAME", help="Remove this group's own skill NAME.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_cli
def remove(obj: CliContext, name: str, group: str | None, as_json: bool) -> None:
    """Remove the installed skill NAME (for every group, or with --group that group's
    own). Built-in skills cannot be removed: leave them out of a group's `skills:`.

    \b
    Examples:
      orchestrator skill remove pdf-tools
      orchestrator skill remove release-notes --group family
    """
    from orchestrator.groups import GroupStore
    from orchestrator.skills.catalog import builtin_root
    from orchestrator.skills.catalog import remove as remove_skill

    folder = _folder(obj, group)
    path = remove_skill(obj.home, name, folder, builtin_root())
    asking = [
        g.folder
        for g in GroupStore(obj.home).groups()
        if (folder is None or g.folder == folder)
        and g.config.skills != "all"
        and name in g.config.skills
    ]
    if as_json:
        print_json({"removed": str(path), "still_selected_by": asking})
        return
    click.echo(f"removed {path}")
    for other in asking:
        click.echo(
            f"warning: group {other} lists {name!r} in its group.yaml skills: it will not "
            "start until that entry is removed",
            err=True,
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
