"""In-container commands: the SessionStart memory hook and the runner."""

from __future__ import annotations

import json
import logging
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from orchestrator.agent.settings import AgentSettings


@click.group()
def hook() -> None:
    """Hooks the runner calls inside the container (also usable on the host)."""


@hook.command(
    "session-start",
    context_settings={"ignore_unknown_options": True, "help_option_names": []},
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def session_start(args: tuple[str, ...]) -> None:
    """Print the group's memory for a fresh context (event JSON on stdin).

    orchestrator hook session-start [--agent-dir DIR]: for source startup, clear or
    compact, prints memory/index.md and memory/system/definition.md, each capped at
    16,000 characters; for resume or bad input prints nothing.
    """
    from orchestrator.agent.memory_hook import main

    sys.exit(main(list(args)))


@click.group()
def agent() -> None:
    """The runner inside a group's container."""


def _settings(agent_dir: Path | None, runtime_dir: Path | None) -> AgentSettings:
    from dataclasses import replace

    from orchestrator.agent.settings import AgentSettings

    settings = AgentSettings.from_env()
    if agent_dir is not None:
        settings = replace(settings, agent_dir=agent_dir)
    if runtime_dir is not None:
        settings = replace(settings, runtime_dir=runtime_dir)
    return settings


@agent.command("serve")
@click.option(
    "--agent-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Default: $ORCHESTRATOR_AGENT_DIR or /workspace/agent.",
)
@click.option(
    "--runtime-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where runner.sock is made. Default: /run/orchestrator.",
)
def serve(agent_dir: Path | None, runtime_dir: Path | None) -> None:
    """Serve turns on runner.sock until SIGTERM (the container's main process)."""
    from orchestrator.agent.serve import serve as run_server

    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    run_server(_settings(agent_dir, runtime_dir))


@agent.command("turn")
@click.argument("text")
@click.option("--chat", default="local", show_default=True, help="Chat id.")
@click.option("--thread", default=None, help="Thread id (per-thread sessions).")
@click.option("--sender", default="local", show_default=True, help="Sender id.")
@click.option(
    "--agent-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Default: $ORCHESTRATOR_AGENT_DIR or /workspace/agent.",
)
def turn(text: str, chat: str, thread: str | None, sender: str, agent_dir: Path | None) -> None:
    """Run one turn in-process against an agent folder and print the result as JSON.

    A local entry point for inspection and tests; the host normally sends turns over
    the runner's socket.
    """
    from orchestrator.agent.runner import Runner
    from orchestrator.errors import BadInput
    from orchestrator.protocol import TurnRequest

    settings = _settings(agent_dir, None)
    if not settings.memory_dir.is_dir():
        raise BadInput(
            f"{settings.agent_dir} is not an agent folder (no memory/ in it)",
            hint="pass --agent-dir DIR, e.g. groups/<folder> of a home",
        )
    runner = Runner(settings)
    result = runner.handle(
        TurnRequest(turn_id=uuid.uuid4().hex, chat=chat, thread=thread, sender=sender, text=text)
    )
    click.echo(json.dumps(result.__dict__, ensure_ascii=False, indent=2))
