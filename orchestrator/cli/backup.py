"""``orchestrator backup`` (and ``--verify``) and ``orchestrator restore``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from orchestrator.cli import CliContext
from orchestrator.cli.output import print_json, safe_line
from orchestrator.errors import BadInput
from orchestrator.units import human_bytes

pass_cli = click.make_pass_decorator(CliContext)
SHOWN_SKIPPED = 10  # entries left out, listed one a line; the rest counted


def _progress(line: str) -> None:
    click.echo(safe_line(line), err=True)


@click.command()
@click.option(
    "--to",
    "to",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The archive to write (.tar.gz, .tgz or .tar); default: "
    "orchestrator-backup-<project>-<UTC time>.tar.gz in the current folder. An existing "
    "file is never replaced.",
)
@click.option(
    "--include-secrets",
    is_flag=True,
    help="Also archive the secrets file (secrets_file) and orchestrator.env. Every "
    "archive is written mode 0600; keep one with secrets as you keep the secrets.",
)
@click.option(
    "--verify",
    "verify",
    type=click.Path(dir_okay=False, path_type=Path, exists=True),
    help="Check the archive FILE without restoring it: its versions, and every file "
    "against the checksums of its manifest. Exit code 1 when it fails.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@pass_cli
def backup(
    obj: CliContext, to: Path | None, include_secrets: bool, verify: Path | None, as_json: bool
) -> None:
    """Write a consistent archive of this home while its daemon runs (or not).

    \b
    It holds the state database (copied with SQLite's online backup API: every message
    accepted before the copy, its replies, the chat apps' records, bindings, pairings,
    tasks and usage), orchestrator.yaml, the installed skills, every group's folder
    (group.yaml, memory, history, sessions, files, learned behaviors, instructions;
    removed groups too) and the mount allowlist; with --include-secrets, the secrets
    file and orchestrator.env. The groups' folders are read through the confined file
    layer: a symlink, FIFO or device there is never archived, and is listed. The
    search indexes are not archived: they are rebuilt from memory.

    \b
    A manifest in the archive holds the release, the versions of what it holds and
    every file's sha256. Restore it with: orchestrator --home NEW_FOLDER restore FILE
    """
    if verify is not None:
        if to is not None or include_secrets:
            raise BadInput("--verify checks an archive; it takes no --to or --include-secrets")
        _verify(verify, as_json)
        return
    from orchestrator.backup import create_backup

    report = create_backup(obj.home, to, include_secrets=include_secrets, progress=_progress)
    if as_json:
        print_json(report.to_dict())
        return
    click.echo(f"backup written: {report.path} ({human_bytes(report.size)}, mode 0600)")
    click.echo(f"  {_describe(report.head.release, report.head.versions, report.head.summary)}")
    click.echo(
        f"  {len(report.groups)} groups ({', '.join(report.groups) or 'none'}); "
        f"{report.files:,} files, {human_bytes(report.bytes)}"
    )
    _left_out(report.skipped)
    if report.secrets_left_out:
        click.echo(
            "  secrets not included (add --include-secrets): "
            + ", ".join(safe_line(s) for s in report.secrets_left_out)
        )


def _describe(release: str, versions: dict[str, int], summary: dict[str, Any]) -> str:
    shape = ", ".join(f"{k} {v}" for k, v in versions.items())
    messages = summary.get("messages") or {}
    counted = ", ".join(f"{n} {state}" for state, n in sorted(messages.items()))
    what = f"; messages: {counted}" if counted else ""
    tasks = summary.get("tasks")
    bindings = summary.get("bindings")
    if tasks is not None:
        what += f"; {tasks} tasks, {bindings} chat bindings"
    return f"release {release} ({shape}){what}"


def _left_out(skipped: list[tuple[str, str]]) -> None:
    if not skipped:
        return
    click.echo(f"  left out ({len(skipped)}: not regular files or folders, never archived):")
    for name, why in skipped[:SHOWN_SKIPPED]:
        click.echo(f"    {safe_line(name)} ({safe_line(why)})")
    if len(skipped) > SHOWN_SKIPPED:
        click.echo(f"    ... and {len(skipped) - SHOWN_SKIPPED} more (--json lists them all)")


def _verify(path: Path, as_json: bool) -> None:
    from orchestrator.backup import verify_backup

    report = verify_backup(path, progress=_progress)
    if as_json:
        print_json(report.to_dict())
        return
    head, manifest = report.head, report.manifest
    created = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(head.created))
    click.echo(f"{path}: ok, taken {created} of {head.source.get('home', '?')}")
    click.echo(f"  {_describe(head.release, head.versions, head.summary)}")
    click.echo(
        f"  {len(manifest.files):,} files, {human_bytes(manifest.bytes)}, every one matching "
        f"its checksum; secrets {'included' if head.secrets else 'not included'}"
    )
    _left_out(manifest.skipped)


@click.command()
@click.argument("archive", type=click.Path(dir_okay=False, path_type=Path, exists=True))
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@pass_cli
def restore(obj: CliContext, archive: Path, as_json: bool) -> None:
    """Restore a backup into an empty home: orchestrator --home NEW_FOLDER restore FILE.

    \b
    The folder given with --home must be empty or not exist yet (it is made). The
    archive is checked as it is read (a backup of a newer release is refused, and every
    file must match its checksum); nothing is put in place until all of it has been.
    Only regular files and folders are made. Files the home names outside itself (the
    mount allowlist, the secrets file) go where the restored orchestrator.yaml names
    them, never over an existing file. Then build the image and start the daemon:
    containers are made again, and a home of an older release is upgraded at its start.
    (To bring back one removed group instead, see: orchestrator group restore.)
    """
    from orchestrator.backup import restore_backup

    report = restore_backup(archive, obj.home, progress=_progress)
    if as_json:
        print_json(report.to_dict())
        return
    head = report.head
    created = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(head.created))
    click.echo(f"restored {archive} (taken {created}) into {report.home}")
    click.echo(f"  {_describe(head.release, head.versions, head.summary)}")
    click.echo(
        f"  {len(report.groups)} groups ({', '.join(report.groups) or 'none'}); "
        f"{len(report.manifest.files):,} files; state in {report.state_dir}"
    )
    for what, path, how in report.outside:
        click.echo(f"  {what} {safe_line(path)}: {safe_line(how)}")
    if report.manifest.secrets_left_out:
        click.echo(
            "  this backup holds no secrets; put these back before starting: "
            + ", ".join(safe_line(s) for s in report.manifest.secrets_left_out)
        )
    _left_out(report.manifest.skipped)
    home = f"orchestrator --home {report.home}"
    click.echo(f"next: {home} image build, then {home} up")
