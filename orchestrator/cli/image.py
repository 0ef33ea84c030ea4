"""``orchestrator image``: build the agent image."""

from __future__ import annotations

import time
from typing import Any

import click

from orchestrator.cli import CliContext
from orchestrator.cli.output import print_json
from orchestrator.config import load_config
from orchestrator.home import Home

pass_cli = click.make_pass_decorator(CliContext)


@click.group()
def image() -> None:
    """Build the agent image that every group container runs."""


@image.command("build")
@click.option(
    "--offline",
    is_flag=True,
    help="Do not try the registry: build the base from Debian packages "
    "(mmdebstrap or debootstrap) and use it.",
)
@click.option(
    "--base",
    metavar="IMAGE",
    help="Base image to build on (default: python:3.11-slim-bookworm when it can "
    "be had, else the offline Debian base).",
)
@click.option("--force", is_flag=True, help="Rebuild even when the inputs are unchanged.")
@click.option(
    "--daemon",
    is_flag=True,
    help="Also build the daemon's image (orchestrator-daemon), to run it with compose.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the outcome as JSON (progress on stderr)."
)
@pass_cli
def build(
    obj: CliContext, offline: bool, base: str | None, force: bool, daemon: bool, as_json: bool
) -> None:
    """Build the agent image from images/agent/, or do nothing when it is current
    (with --daemon, also the daemon's image from images/daemon/, for compose.yaml).

    The image is tagged with a hash of its inputs (Dockerfile, package sources, what the
    base is made of). Python packages come from wheels downloaded on this host; the
    docker build itself runs without network.
    """
    config = load_config(obj.home)
    started = time.monotonic()
    progress = (lambda line: click.echo(line, err=True)) if as_json else click.echo
    _remember_home(obj.home, config.image)
    result = _recorded_noop(config.image) if offline and not (base or force or daemon) else None
    daemon_result = None
    if result is None:
        from orchestrator.image.agent import build_agent_image
        from orchestrator.runtime.engine import connect

        client = connect()
        result = build_agent_image(
            client,
            config.image,
            base=base,
            offline=offline,
            force=force,
            progress=progress,
            mirror=config.debian_mirror,
        )
        if daemon:
            from orchestrator.image.agent import build_daemon_image

            daemon_result = build_daemon_image(
                client, base=result.base, force=force, progress=progress
            )
    elapsed = time.monotonic() - started
    if as_json:
        print_json(
            {
                "tag": result.tag,
                "image_id": result.image_id,
                "inputs_hash": result.inputs_hash,
                "base": result.base,
                "built": result.built,
                "seconds": round(elapsed, 1),
                "daemon": None
                if daemon_result is None
                else {"tag": daemon_result.tag, "built": daemon_result.built},
            }
        )
        return
    elif result.built:
        click.echo(
            f"built {result.tag} (also {config.image}:latest) on {result.base} in {elapsed:.1f}s"
        )
    else:
        click.echo(f"{result.tag} is up to date (base {result.base}); nothing to build")
    if daemon_result is not None:
        state = "built" if daemon_result.built else "is up to date"
        click.echo(f"daemon image {daemon_result.tag} {state} (also orchestrator-daemon:latest)")


def _remember_home(home: Home, repository: str) -> None:
    """Remember the image repository the home's orchestrator.yaml, read whole and valid
    just now, names: the next build with nothing to do is then answered without the CLI
    (orchestrator.image.noop)."""
    from orchestrator.image.noop import remember_home

    remember_home(str(home.root), repository)


def _recorded_noop(repository: str) -> Any:
    """The last offline build, when it is still current: known from the inputs' stats and
    one inspect straight over the engine's socket, without the engine's SDK (None: the
    full check is needed)."""
    from orchestrator.errors import OrchestratorError
    from orchestrator.image.agent import recorded_noop
    from orchestrator.runtime.engine import inspect_image_directly

    try:
        return recorded_noop(repository, inspect_image_directly)
    except OrchestratorError:
        return None
