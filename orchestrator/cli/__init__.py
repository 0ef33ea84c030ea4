"""The ``orchestrator`` command line: a thin shell over the core.

Subcommands load lazily so ``orchestrator --help`` never imports the Docker SDK.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from orchestrator import __version__
from orchestrator.confined import UnsafePath
from orchestrator.errors import EXIT_BAD_INPUT, EXIT_FAILED, OrchestratorError
from orchestrator.home import Home

# command name -> (module, attribute, one-line help shown by --help)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "group": (
        "orchestrator.cli.group",
        "group",
        "Add, list, show, remove, restore, pause and resume agent groups.",
    ),
    "memory": (
        "orchestrator.cli.memory",
        "memory",
        "A group's memory tree: scaffold, lint, search, history.",
    ),
    "image": ("orchestrator.cli.image", "image", "Build the agent image (offline when needed)."),
    "doctor": (
        "orchestrator.cli.doctor",
        "doctor",
        "Check the engine, image, home and containers.",
    ),
    "start": ("orchestrator.cli.runtime", "start", "Start a group's container."),
    "stop": ("orchestrator.cli.runtime", "stop", "Stop a group's container."),
    "restart": ("orchestrator.cli.runtime", "restart", "Recreate a group's container."),
    "status": ("orchestrator.cli.runtime", "status", "Show every group's container state."),
    "logs": ("orchestrator.cli.runtime", "logs", "Print a group container's logs."),
    "reconcile": ("orchestrator.cli.runtime", "reconcile", "Match containers to groups."),
    "serve": ("orchestrator.cli.daemon", "serve", "Run the daemon in the foreground."),
    "up": ("orchestrator.cli.daemon", "up", "Start the daemon in the background."),
    "down": ("orchestrator.cli.daemon", "down", "Stop the background daemon."),
    "reload": (
        "orchestrator.cli.daemon",
        "reload",
        "Make the daemon read orchestrator.yaml again.",
    ),
    "send": ("orchestrator.cli.daemon", "send", "Send a message to a group; print replies."),
    "chat": ("orchestrator.cli.daemon", "chat", "Talk with a group interactively."),
    "retry": ("orchestrator.cli.daemon", "retry", "Queue a dead-lettered message again."),
    "message": ("orchestrator.cli.inspect", "message", "Show a message from the queue."),
    "transcript": (
        "orchestrator.cli.inspect",
        "transcript",
        "Show a group's conversations, readable.",
    ),
    "provider": (
        "orchestrator.cli.provider",
        "provider",
        "Model providers groups may use (keys stay on the host).",
    ),
    "usage": ("orchestrator.cli.provider", "usage", "Model use per group and day."),
    "learned": (
        "orchestrator.cli.learned",
        "learned",
        "A group's learned behaviors: show, set, approve a waiting change.",
    ),
    "task": (
        "orchestrator.cli.task",
        "task",
        "Scheduled tasks: add, list, pause, resume, remove, run now.",
    ),
    "deploy": (
        "orchestrator.cli.deploy",
        "deploy",
        "Manifests to run this home on a cluster (Kubernetes).",
    ),
    "service": (
        "orchestrator.cli.service",
        "service",
        "Run the daemon as a systemd service (install, uninstall, status).",
    ),
    "skill": (
        "orchestrator.cli.skill",
        "skill",
        "Skills: add, list, show, remove; run migrate-memory on a group.",
    ),
    "mcp": (
        "orchestrator.cli.mcp",
        "mcp",
        "A group's MCP servers: add, list, test, approve, remove.",
    ),
    "web": (
        "orchestrator.cli.web",
        "web",
        "A group's web policy: what it decides for a URL.",
    ),
    "channel": (
        "orchestrator.cli.channel",
        "channel",
        "Chat-app accounts (bots of chat apps): add, list, remove.",
    ),
    "bind": ("orchestrator.cli.channel", "bind", "Bind a chat of a channel account to a group."),
    "unbind": ("orchestrator.cli.channel", "unbind", "Unbind a chat from its group."),
    "pair": (
        "orchestrator.cli.channel",
        "pair",
        "Approve (or list, reject) the pairing code of a chat.",
    ),
    "backup": (
        "orchestrator.cli.backup",
        "backup",
        "Archive this home while it runs (--verify FILE checks an archive).",
    ),
    "restore": (
        "orchestrator.cli.backup",
        "restore",
        "Restore a backup into an empty home (--home NEW_FOLDER).",
    ),
    "hook": ("orchestrator.cli.agent", "hook", "SessionStart hooks (the memory hook)."),
    "agent": ("orchestrator.cli.agent", "agent", "The runner inside a group container."),
}


@dataclass
class CliContext:
    home: Home
    debug: bool


class LazyGroup(click.Group):
    """Loads a subcommand's module only when that subcommand runs."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, attr, _ = COMMANDS[cmd_name]
        command: click.Command = getattr(importlib.import_module(module), attr)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except OrchestratorError as exc:
            obj = ctx.find_object(CliContext)
            if obj is not None and obj.debug:
                traceback.print_exc()
            report_error(exc.message, exc.hint, as_json=self.json_output)
            ctx.exit(exc.exit_code)
        except UnsafePath as exc:  # the confined file layer refused a path
            report_error(
                f"refused: {exc}",
                "a group's container may have changed its own folders; nothing was "
                "followed or written",
                as_json=self.json_output,
            )
            ctx.exit(EXIT_FAILED)

    json_output = False  # --json was given: errors are JSON on stdout too

    def main(self, args: Any = None, *extra: Any, **kwargs: Any) -> Any:
        """Usage errors become one ``error:`` line and a hint, like every other error
        (click's own form is a usage block); with --json, errors are JSON on stdout."""
        argv = list(sys.argv[1:] if args is None else args)
        self.json_output = "--json" in argv
        standalone = kwargs.pop("standalone_mode", True)
        try:
            result = super().main(argv, *extra, standalone_mode=False, **kwargs)  # type: ignore[call-overload]
        except click.UsageError as exc:
            path = exc.ctx.command_path if exc.ctx is not None else "orchestrator"
            report_error(exc.format_message(), f"see: {path} --help", as_json=self.json_output)
            return _finish(exc.exit_code, standalone)
        except click.ClickException as exc:
            report_error(exc.format_message(), None, as_json=self.json_output)
            return _finish(exc.exit_code, standalone)
        except click.Abort:
            click.echo("aborted", err=True)
            return _finish(EXIT_FAILED, standalone)
        code = result if isinstance(result, int) else 0
        return _finish(code, standalone) if standalone else result


def _finish(code: int, standalone: bool) -> int:
    if standalone:
        sys.exit(code)
    return code


def report_error(message: str, hint: str | None, *, as_json: bool = False) -> None:
    """One error: two lines on stderr, or with --json one JSON object on stdout."""
    from orchestrator.cli.output import print_error, print_json

    if as_json:
        print_json({"error": message, "hint": hint})
    else:
        print_error(message, hint)


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``--version``: the release, then the version of each shape it keeps on disk (an
    older one is migrated, a newer one refused); CHANGELOG.md says what each changed."""
    if not value or ctx.resilient_parsing:
        return
    from orchestrator.store.schema import LATEST
    from orchestrator.versions import describe

    click.echo(f"orchestrator, version {__version__}")
    click.echo(f"formats: state database schema {LATEST}, {describe()}")
    ctx.exit()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the release and the formats it reads and writes, and exit.",
)
@click.option(
    "--home",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="ORCHESTRATOR_HOME",
    default=None,
    help="Folder holding orchestrator.yaml, groups/ and state/. "
    "Env ORCHESTRATOR_HOME; default: the current directory.",
)
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.pass_context
def cli(ctx: click.Context, home: Path | None, debug: bool) -> None:
    """Run chat agents in isolated groups, one container per group, each with a durable
    memory of plain Markdown files.

    \b
    Start here:
      orchestrator image build          build the agent image (works offline)
      orchestrator group add "Family"   create a group and its memory tree
      orchestrator up                   start the daemon in the background
      orchestrator send family "hello"  talk to the group (or: orchestrator chat family)
      orchestrator doctor               check that everything is in place
    """
    ctx.obj = CliContext(home=Home((home or Path.cwd()).absolute()), debug=debug)


def undecodable_argument(argv: list[str]) -> str | None:
    """A message for the first argument that was not valid UTF-8 (Python keeps its bad
    bytes as lone surrogates), or None."""
    for position, arg in enumerate(argv, 1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError as exc:
            raw = arg.encode("utf-8", "surrogateescape")
            shown = raw.decode("utf-8", "backslashreplace")
            offset = len(arg[: exc.start].encode("utf-8", "surrogateescape")) + 1
            return (
                f"argument {position} ({shown!r}) is not valid UTF-8 "
                f"(bad byte at offset {offset}); pass UTF-8 text"
            )
    return None


def main() -> None:
    """Console entry point; unexpected errors print one line unless --debug is given."""
    debug = "--debug" in sys.argv[1:]
    for stream in (sys.stdout, sys.stderr):
        # text that is not valid UTF-8 (a file name) is printed escaped, never a crash
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    if problem := undecodable_argument(sys.argv[1:]):
        click.echo(f"error: {problem}", err=True)
        click.echo("hint: check the terminal's locale, or the bytes of the argument", err=True)
        sys.exit(EXIT_BAD_INPUT)
    try:
        cli.main(prog_name="orchestrator", standalone_mode=True)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # the one place that turns a crash into one line
        if debug or os.environ.get("ORCHESTRATOR_DEBUG"):
            raise
        from orchestrator.cli.output import print_error

        print_error(
            f"unexpected {type(exc).__name__}: {exc}", "run again with --debug for the traceback"
        )
        sys.exit(EXIT_FAILED)
