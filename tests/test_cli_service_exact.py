"""Exact text and place of the systemd unit of ``orchestrator service``
(cli/service.py): the unit's whole text for a system and a user unit, its name from the
project, its path from XDG_CONFIG_HOME or the home folder, and when systemd is taken to
run here."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli import CliContext
from orchestrator.cli import service as cli_service
from orchestrator.cli.service import _systemd_runs, render_unit, unit_name, unit_path
from orchestrator.config import load_config


def test_the_system_unit_whole(obj: CliContext) -> None:
    home = obj.home.root.resolve()
    assert render_unit(obj, user=False) == (
        "[Unit]\n"
        f"Description=orchestrator daemon for {home}\n"
        "After=docker.service network-online.target\n"
        "Wants=docker.service\n"
        "\n[Service]\n"
        "Type=simple\n"
        f"WorkingDirectory={home}\n"
        f"ExecStart={sys.executable} -m orchestrator --home {home} serve --log-format json\n"
        f"EnvironmentFile=-{home}/orchestrator.env\n"
        "Restart=on-failure\n"
        "RestartSec=5\n"
        "# the daemon drains for up to 30 s at SIGTERM\n"
        "TimeoutStopSec=45\n"
        "KillMode=mixed\n"
        "\n[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def test_the_user_unit_needs_no_engine_unit_and_is_wanted_by_default(obj: CliContext) -> None:
    home = obj.home.root.resolve()
    text = render_unit(obj, user=True)
    assert text.startswith(f"[Unit]\nDescription=orchestrator daemon for {home}\n\n[Service]\n")
    assert text.endswith("\n[Install]\nWantedBy=default.target\n")


def test_the_units_name_and_path(
    obj: CliContext, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    name = f"orchestrator-{load_config(obj.home).project}.service"
    assert unit_name(obj) == name
    assert unit_path(obj, user=False) == Path("/etc/systemd/system") / name
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert unit_path(obj, user=True) == tmp_path / "xdg/systemd/user" / name
    monkeypatch.setenv("XDG_CONFIG_HOME", "")
    monkeypatch.setenv("HOME", str(tmp_path / "me"))
    assert unit_path(obj, user=True) == tmp_path / "me/.config/systemd/user" / name
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert unit_path(obj, user=True) == tmp_path / "me/.config/systemd/user" / name


def test_systemd_runs_only_with_systemctl_and_its_run_folder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[Any] = []
    folders: dict[str, bool] = {}

    class FakePath:
        def __init__(self, path: str) -> None:
            self.path = path

        def is_dir(self) -> bool:
            asked.append(self.path)
            return folders.get(self.path, False)

    programs: dict[str, str] = {}
    monkeypatch.setattr(cli_service, "Path", FakePath)
    monkeypatch.setattr(cli_service.shutil, "which", lambda name: programs.get(name))
    assert _systemd_runs() is False
    assert asked == []
    programs["systemctl"] = "/bin/systemctl"
    assert _systemd_runs() is False
    assert asked == ["/run/systemd/system"]
    folders["/run/systemd/system"] = True
    assert _systemd_runs() is True
    del programs["systemctl"]
    assert _systemd_runs() is False
