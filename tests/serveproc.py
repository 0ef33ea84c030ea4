"""The daemon as a process of its own for the chat apps' docker tests (``orchestrator
serve`` at DEBUG, under the test's project name, its log in the home), and waiting for
what a fake chat app records."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from orchestrator.home import Home
from orchestrator.service import control_request


class Serve:
    """``orchestrator --debug serve`` for ``home``, with ``env`` (the tokens) added."""

    def __init__(self, home: Path, project: str, env: dict[str, str]) -> None:
        self.home = home
        self.project = project
        self.env = env  # the tokens the daemon reads
        self.log = home / "daemon.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "ORCHESTRATOR_PROJECT": self.project, **self.env}
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "orchestrator",
                    "--home",
                    str(self.home),
                    "--debug",
                    "serve",
                ],
                stdout=log,
                stderr=log,
                env=env,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log.read_text()
            try:
                if control_request(Home(self.home), {"op": "ping"}, timeout=2).get("ok"):
                    return
            except Exception:
                pass
            time.sleep(0.1)
        raise AssertionError("daemon did not start: " + self.log.read_text())

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=60)


def wait_for(predicate: Any, timeout: float = 120, log: Path | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(
                "condition not reached" + ("; log:\n" + log.read_text()[-4000:] if log else "")
            )
        time.sleep(0.05)


def no_secret_under(home: Path, *secrets: str) -> None:
    """No file under ``home`` (the log at DEBUG included) holds any of ``secrets``."""
    for path in home.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            for secret in secrets:
                assert secret.encode() not in data, f"a secret is in {path}"
