"""``orchestrator image``: build the agent image."""

from __future__ import annotations

import time

import click

from orchestrator.cli import CliContext

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
@pass_cli
def build(obj: CliContext, offline: bool, base: str | None, force: bool) -> None:
    """Build the agent image from images/agent/, or do nothing when it is current.

    The image is tagged with a hash of its inputs (Dockerfile, package sources, base
    image). Python packages come from wheels downloaded on this host; the docker build
    itself runs without network.
    """
    from orchestrator.image.agent import build_agent_image
    from orchestrator.runtime.engine import connect

    config = obj.home.load_config()
    client = connect()
    started = time.monotonic()
    result = build_agent_image(
        client,
        config.image,
        base=base,
        offline=offline,
        force=force,
        progress=click.echo,
        mirror=config.debian_mirror,
    )
    elapsed = time.monotonic() - started
    if result.built:
        click.echo(
            f"built {result.tag} (also {config.image}:latest) on {result.base} in {elapsed:.1f}s"
        )
    else:
        click.echo(f"{result.tag} is up to date (base {result.base}); nothing to build")
