"""`orchestrator service`: the systemd unit for a home, written, checked, removed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def test_the_unit_runs_this_home_after_the_engine(run, home: Path) -> None:  # type: ignore[no-untyped-def]
    text = run("service", "install", "--print").stdout
    real = home.resolve()
    assert (
        f"ExecStart={sys.executable} -m orchestrator --home {real} serve --log-format json\n"
        in text
    )
    assert "After=docker.service network-online.target\n" in text
    assert f"EnvironmentFile=-{real}/orchestrator.env\n" in text
    assert "Restart=on-failure\n" in text and "TimeoutStopSec=45\n" in text
    assert "WantedBy=multi-user.target\n" in text
    user = run("service", "install", "--print", "--user").stdout
    assert "After=docker.service" not in user and "WantedBy=default.target\n" in user


def test_systemd_accepts_the_unit(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed here")
    unit = tmp_path / "orchestrator-test.service"
    unit.write_text(run("service", "install", "--print").stdout)
    checked = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stderr


def test_a_user_unit_is_written_reported_and_removed(run, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.cli import service

    monkeypatch.setattr(service, "_systemd_runs", lambda: False)  # never the machine's own
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert json.loads(run("service", "status", "--user", "--json").stdout)["state"] == (
        "not installed"
    )
    installed = run("service", "install", "--user")
    assert installed.exit_code == 0, installed.output
    status = json.loads(run("service", "status", "--user", "--json").stdout)
    path = Path(status["path"])
    assert path.parent == tmp_path / "config/systemd/user" and path.is_file()
    assert status["state"] == "installed"
    assert run("service", "uninstall", "--user").exit_code == 0
    assert not path.exists()
    missing = run("service", "uninstall", "--user")
    assert missing.exit_code == 2 and "no unit at" in missing.output
