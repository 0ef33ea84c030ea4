"""``orchestrator service``: run the daemon as a systemd service on the host."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import click

from orchestrator.cli import CliContext
from orchestrator.cli.output import print_json
from orchestrator.config import load_config

pass_cli = click.make_pass_decorator(CliContext)
ENV_FILE = "orchestrator.env"  # in the home: secrets for the daemon (mode 0600)


@click.group()
def service() -> None:
    """Run the daemon as a systemd service, so it comes back after a reboot or a crash.

    The unit runs `orchestrator serve` for this home, after the Docker engine, restarts
    it when it fails, gives it time to drain at stop, and reads secrets (provider keys,
    the HTTP token) from orchestrator.env in the home when that file exists.

    \b
    Examples:
      orchestrator service install --print      # look first
      sudo orchestrator --home /srv/orch service install
      orchestrator service install --user       # a user unit, no root
      orchestrator service status
    """


def unit_name(obj: CliContext) -> str:
    return f"orchestrator-{load_config(obj.home).project}.service"


def unit_path(obj: CliContext, user: bool) -> Path:
    if user:
        base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
        return base / "systemd" / "user" / unit_name(obj)
    return Path("/etc/systemd/system") / unit_name(obj)


def render_unit(obj: CliContext, user: bool) -> str:
    """The unit text for this home: the interpreter and package that run now."""
    home = obj.home.root.resolve()
    after = "" if user else "After=docker.service network-online.target\nWants=docker.service\n"
    return (
        "[Unit]\n"
        f"Description=orchestrator daemon for {home}\n"
        f"{after}"
        "\n[Service]\n"
        "Type=simple\n"
        f"WorkingDirectory={home}\n"
        f"ExecStart={sys.executable} -m orchestrator --home {home} serve --log-format json\n"
        f"EnvironmentFile=-{home / ENV_FILE}\n"
        "Restart=on-failure\n"
        "RestartSec=5\n"
        "# the daemon drains for up to 30 s at SIGTERM\n"
        "TimeoutStopSec=45\n"
        "KillMode=mixed\n"
        "\n[Install]\n"
        f"WantedBy={'default.target' if user else 'multi-user.target'}\n"
    )


@service.command("install")
@click.option("--user", is_flag=True, help="A user unit (~/.config/systemd/user), no root.")
@click.option("--print", "show", is_flag=True, help="Print the unit; write nothing.")
@pass_cli
def install(obj: CliContext, user: bool, show: bool) -> None:
    """Write the unit for this home, and enable and start it when systemd runs."""
    from orchestrator.errors import BadInput
    from orchestrator.fsatomic import write_atomic

    text = render_unit(obj, user)
    if show:
        click.echo(text, nl=False)
        return
    path = unit_path(obj, user)
    if not user and os.geteuid() != 0:
        raise BadInput(
            f"writing {path} needs root", hint="run it with sudo, or install a --user unit"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text, mode=0o644)
    click.echo(f"wrote {path}")
    name = unit_name(obj)
    scope = ["--user"] if user else []
    if _systemd_runs():
        for args in (["daemon-reload"], ["enable", "--now", name]):
            done = subprocess.run(["systemctl", *scope, *args], capture_output=True, text=True)
            if done.returncode != 0:
                raise BadInput(f"systemctl {' '.join(args)} failed: {done.stderr.strip()}")
        click.echo(f"enabled and started {name}")
    else:
        click.echo(
            f"systemd is not running here; on a host with it: systemctl {' '.join(scope)} "
            f"enable --now {name}".replace("  ", " ")
        )


@service.command("uninstall")
@click.option("--user", is_flag=True, help="The user unit.")
@pass_cli
def uninstall(obj: CliContext, user: bool) -> None:
    """Stop and disable the unit, and remove its file."""
    from orchestrator.errors import BadInput

    path = unit_path(obj, user)
    if not path.exists():
        raise BadInput(f"no unit at {path}", hint="see: orchestrator service status")
    scope = ["--user"] if user else []
    if _systemd_runs():
        subprocess.run(
            ["systemctl", *scope, "disable", "--now", unit_name(obj)], capture_output=True
        )
    path.unlink()
    if _systemd_runs():
        subprocess.run(["systemctl", *scope, "daemon-reload"], capture_output=True)
    click.echo(f"removed {path}")


@service.command("status")
@click.option("--user", is_flag=True, help="The user unit.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_cli
def status(obj: CliContext, user: bool, as_json: bool) -> None:
    """Whether the unit is installed, and what systemd says of it."""
    path = unit_path(obj, user)
    state = "not installed"
    if path.exists():
        state = "installed"
        if _systemd_runs():
            scope = ["--user"] if user else []
            done = subprocess.run(
                ["systemctl", *scope, "is-active", unit_name(obj)], capture_output=True, text=True
            )
            state = done.stdout.strip() or state
        current = path.read_text() == render_unit(obj, user)
        if not current:
            state += " (differs from what install writes now: run install again)"
    if as_json:
        print_json({"unit": unit_name(obj), "path": str(path), "state": state})
    else:
        click.echo(f"{unit_name(obj)}: {state} ({path})")


def _systemd_runs() -> bool:
    return shutil.which("systemctl") is not None and Path("/run/systemd/system").is_dir()
