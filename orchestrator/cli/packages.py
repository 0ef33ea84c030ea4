"""``orchestrator group packages``: what a group asks for, what is built and running."""

from __future__ import annotations

from typing import Any

import click

from orchestrator.cli import CliContext
from orchestrator.cli.output import print_json, safe_line
from orchestrator.config import load_config
from orchestrator.errors import BadInput
from orchestrator.groups import GroupStore

pass_cli = click.make_pass_decorator(CliContext)


@click.command("packages")
@click.argument("name")
@click.option(
    "--add-debian",
    "add_debian",
    multiple=True,
    metavar="PKG",
    help="Ask for a Debian package (repeatable).",
)
@click.option(
    "--add-python",
    "add_python",
    multiple=True,
    metavar="REQ",
    help="Ask for a Python package, such as rich or rich==13.7.1 (repeatable; wheels only).",
)
@click.option(
    "--remove",
    "remove",
    multiple=True,
    metavar="PKG",
    help="Stop asking for a package (Debian name or Python name; repeatable).",
)
@click.option(
    "--build",
    is_flag=True,
    help="Resolve the Python packages (exact versions and hashes, into "
    "packages.lock) and build the group's image.",
)
@click.option("--pending", is_flag=True, help="Show the package requests waiting, whole.")
@click.option(
    "--approve",
    "approve_id",
    type=int,
    metavar="ID",
    help="Approve a package request from the chat and build the image.",
)
@click.option(
    "--deny",
    "deny_id",
    type=int,
    metavar="ID",
    help="Deny a package request from the chat (nothing changes).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the state as JSON.")
@pass_cli
def packages(
    obj: CliContext,
    name: str,
    add_debian: tuple[str, ...],
    add_python: tuple[str, ...],
    remove: tuple[str, ...],
    build: bool,
    pending: bool,
    approve_id: int | None,
    deny_id: int | None,
    as_json: bool,
) -> None:
    """Show or change the packages of group NAME's own image.

    A group runs the agent image unless its group.yaml asks for packages: then it runs
    an image of its own, built on top of the agent image with no network: Debian
    packages through a base made the way the agent image's is (mmdebstrap, cached by
    the list), Python packages as wheels only (an sdist would run its setup.py on this
    host as root), at the exact versions and sha256 hashes resolved when they were
    asked for (groups/<folder>/packages.lock), installed with --require-hashes into
    /opt/agent-python, first on the shell's PATH. The container moves to the new image
    between turns. Images do not count toward container.disk.

    With packages.from_chat: true, the agent may ask for packages from the chat
    (request_packages); the request is held and shown in the chat, with the exact
    versions, until a creator approves it there with /approve ID, or the operator does
    here with --approve ID (--deny ID refuses it; --pending shows them).

    Examples:

    \b
      orchestrator group packages family --add-debian jq --add-python rich --build
      orchestrator group packages family --remove rich --build
    """
    from orchestrator.groups.config import config_lock, set_packages
    from orchestrator.groups.packages import (
        check_names,
        read_lock,
        resolve_python,
        write_lock,
    )

    store = GroupStore(obj.home)
    group = store.find(name)
    progress = (lambda line: None) if as_json else (lambda line: click.echo(line, err=True))
    if pending and (approve_id is not None or deny_id is not None):
        given = "--approve" if approve_id is not None else "--deny"
        raise BadInput(f"give --pending or {given}, not both: --pending only lists requests")
    if pending or approve_id is not None or deny_id is not None:
        from orchestrator.cli.held import handle_requests
        from orchestrator.relay.approvals import PACKAGES

        handle_requests(
            obj,
            group.folder,
            PACKAGES,
            "package request",
            approve_id=approve_id,
            deny_id=deny_id,
            as_json=as_json,
            listing="--pending",
        )
        if pending:
            return
        group = store.load(group.folder)
    if add_debian or add_python or remove:
        check_names(add_debian, add_python)  # before anything changes
        with config_lock(group.config_file):
            group = store.load(group.folder)
            current = group.config.packages
            gone = set(remove)
            debian = tuple(
                p for p in dict.fromkeys((*current.debian, *add_debian)) if p not in gone
            )
            python = tuple(
                r
                for r in dict.fromkeys((*current.python, *add_python))
                if r not in gone and _python_name(r) not in gone
            )
            unknown = gone - {
                *current.debian,
                *(_python_name(r) for r in current.python),
                *current.python,
                *add_debian,
                *add_python,
            }
            if unknown:
                raise click.BadParameter(
                    f"{', '.join(sorted(unknown))}: not asked for by {group.folder}",
                    param_hint="--remove",
                )
            if python != current.python:
                # resolved now, before anything changes: a package with no wheel (or
                # none at that version) is refused here, and group.yaml stays as it was
                write_lock(group.path, resolve_python(python, progress))
            set_packages(group.config_file, debian, python)
        group = store.load(group.folder)
    if build:
        with config_lock(group.config_file):
            group = store.load(group.folder)
            asked = group.config.packages.python
            lock = read_lock(group.path)
            if lock is None or lock.requirements != asked:
                write_lock(group.path, resolve_python(asked, progress))
        _build(obj, group, progress)
    _show(obj, store.load(group.folder), as_json)


def _python_name(requirement: str) -> str:
    from packaging.requirements import Requirement

    return Requirement(requirement).name


def _build(obj: CliContext, group: Any, progress: Any) -> None:
    from orchestrator.errors import ImageMissing
    from orchestrator.image.agent import agent_image_ref, build_agent_image
    from orchestrator.image.group import build_group_image
    from orchestrator.runtime.engine import connect

    if group.config.packages.empty:
        progress(f"{group.folder} asks for no packages: it runs the agent image")
        return
    config = load_config(obj.home)
    client = connect()
    try:
        try:
            agent = agent_image_ref(client, config.image)
        except ImageMissing:  # the sources changed: the agent image first
            agent = build_agent_image(
                client, config.image, progress=progress, mirror=config.debian_mirror
            ).tag
        result = build_group_image(
            client, config.project, group, agent, progress=progress, mirror=config.debian_mirror
        )
        progress(f"{'built' if result.built else 'current'}: {result.tag}")
    finally:
        client.close()


def _show(obj: CliContext, group: Any, as_json: bool) -> None:
    from orchestrator.groups.packages import read_lock

    packages = group.config.packages
    lock = read_lock(group.path)
    state: dict[str, Any] = {
        "group": group.folder,
        "asked": {"debian": list(packages.debian), "python": list(packages.python)},
        "from_chat": packages.from_chat,
        "locked": [f"{w.name}=={w.version}" for w in lock.wheels] if lock else [],
        "built": None,
        "running": None,
    }
    try:
        from orchestrator.image.agent import agent_image_ref
        from orchestrator.image.group import group_image_tag
        from orchestrator.runtime.engine import connect
        from orchestrator.runtime.spec import container_name

        client = connect(timeout=10)
        config = load_config(obj.home)
        agent = agent_image_ref(client, config.image)
        state["built"] = group_image_tag(client, config.project, group, agent)
        try:
            container = client.containers.get(container_name(config.project, group.folder))
            state["running"] = container.attrs.get("Config", {}).get("Image")
        except Exception:  # no container: nothing runs
            state["running"] = None
        client.close()
    except Exception as exc:  # the engine is away: what is asked is still shown
        state["engine"] = str(exc)
    if as_json:
        print_json(state)
        return
    click.echo(f"group {group.folder}")
    click.echo(f"  debian:  {', '.join(packages.debian) or '-'}")
    click.echo(f"  python:  {', '.join(packages.python) or '-'}")
    if state["locked"]:
        click.echo(f"  locked:  {', '.join(state['locked'])}")
    click.echo(f"  from chat: {'yes' if packages.from_chat else 'no'}")
    built = state["built"] or ("-" if packages.empty else "not built (use --build)")
    click.echo(f"  built:   {safe_line(built)}")
    click.echo(f"  running: {safe_line(state['running'] or '-')}")
