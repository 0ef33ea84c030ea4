"""A real Matrix homeserver for tests: Synapse from its own virtual environment
(``scripts/setup-synapse`` makes ``.venv-synapse``; env ORCHESTRATOR_SYNAPSE_PYTHON names
another), on loopback, with a generated configuration and an SQLite database in a
temporary folder, never in the checkout. Users are registered with the shared secret.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
SERVER_NAME = "localhost"


def synapse_python() -> Path | None:
    """The Python of Synapse's virtual environment, or None when it is not installed."""
    configured = os.environ.get("ORCHESTRATOR_SYNAPSE_PYTHON")
    path = Path(configured) if configured else ROOT / ".venv-synapse" / "bin" / "python"
    if not path.exists():
        return None
    probe = subprocess.run([str(path), "-c", "import synapse"], capture_output=True)
    return path if probe.returncode == 0 else None


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Homeserver:
    def __init__(self, python: Path) -> None:
        self.python = python
        self.dir = Path(tempfile.mkdtemp(prefix="orchestrator-synapse-"))
        self.port = _port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.config = self.dir / "homeserver.yaml"
        subprocess.run(
            [
                str(python), "-m", "synapse.app.homeserver", "--server-name", SERVER_NAME,
                "--config-path", str(self.config), "--data-directory", str(self.dir),
                "--generate-config", "--report-stats=no",
            ],
            cwd=self.dir,
            check=True,
            capture_output=True,
            timeout=120,
        )  # fmt: skip
        data = yaml.safe_load(self.config.read_text())
        self.secret = str(data["registration_shared_secret"])
        unlimited = {"per_second": 10_000, "burst_count": 10_000}
        data.update(
            {
                "listeners": [
                    {
                        "port": self.port,
                        "bind_addresses": ["127.0.0.1"],
                        "type": "http",
                        "tls": False,
                        "x_forwarded": False,
                        "resources": [{"names": ["client"], "compress": False}],
                    }
                ],
                "trusted_key_servers": [],
                "suppress_key_server_warning": True,
                "enable_registration": False,
                "presence": {"enabled": False},
                "rc_message": unlimited,
                "rc_registration": unlimited,
                "rc_joins": {"local": unlimited, "remote": unlimited},
                "rc_invites": {"per_room": unlimited, "per_user": unlimited},
                "rc_login": {"address": unlimited, "account": unlimited},
                "rc_admin_redaction": unlimited,
                "log_config": str(self._log_config()),
            }
        )
        self.config.write_text(yaml.safe_dump(data))

    def _log_config(self) -> Path:
        path = self.dir / "log.yaml"
        path.write_text(
            yaml.safe_dump(
                {
                    "version": 1,
                    "formatters": {
                        "f": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}
                    },
                    "handlers": {
                        "file": {
                            "class": "logging.FileHandler",
                            "filename": str(self.dir / "homeserver.log"),
                            "formatter": "f",
                        }
                    },
                    "root": {"level": "WARNING", "handlers": ["file"]},
                    "disable_existing_loggers": False,
                }
            )
        )
        return path

    def start(self) -> None:
        with open(self.dir / "stdout.log", "ab") as out:
            self.process = subprocess.Popen(
                [str(self.python), "-m", "synapse.app.homeserver", "-c", str(self.config)],
                cwd=self.dir,
                stdout=out,
                stderr=out,
            )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.process.poll() is None, (self.dir / "stdout.log").read_text()[-3000:]
            try:
                self.call("GET", "/_matrix/client/versions")
                return
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.2)
        raise AssertionError("the homeserver did not start")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)

    def call(
        self, method: str, path: str, body: Any = None, token: str | None = None
    ) -> dict[str, Any]:
        request = urllib.request.Request(
            self.url + path,
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Content-Type": "application/json"}
            | ({"Authorization": f"Bearer {token}"} if token else {}),
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            answer: dict[str, Any] = json.loads(response.read() or b"{}")
            return answer

    def register(self, name: str, *, admin: bool = False) -> tuple[str, str]:
        """Register user ``name`` with the shared secret: (user id, access token)."""
        nonce = self.call("GET", "/_synapse/admin/v1/register")["nonce"]
        password = f"pw-{name}-0123456789"
        digest = hmac.new(
            self.secret.encode(),
            b"\x00".join(
                p.encode() for p in (nonce, name, password, "admin" if admin else "notadmin")
            ),
            hashlib.sha1,
        ).hexdigest()
        answer = self.call(
            "POST",
            "/_synapse/admin/v1/register",
            {"nonce": nonce, "username": name, "password": password, "admin": admin, "mac": digest},
        )
        return str(answer["user_id"]), str(answer["access_token"])


class User:
    """A person on the homeserver, driven through the client-server API."""

    def __init__(self, server: Homeserver, name: str) -> None:
        self.server = server
        self.user_id, self.token = server.register(name)
        self.txn = 0

    def call(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        return self.server.call(method, path, body, self.token)

    def create_room(
        self, *, invite: list[str] = (), encrypted: bool = False, name: str = "r"
    ) -> str:  # type: ignore[assignment]
        body: dict[str, Any] = {"name": name, "invite": list(invite), "preset": "private_chat"}
        if encrypted:
            body["initial_state"] = [
                {
                    "type": "m.room.encryption",
                    "state_key": "",
                    "content": {"algorithm": "m.megolm.v1.aes-sha2"},
                }
            ]
        return str(self.call("POST", "/_matrix/client/v3/createRoom", body)["room_id"])

    def invite(self, room: str, user_id: str) -> None:
        self.call("POST", f"/_matrix/client/v3/rooms/{q(room)}/invite", {"user_id": user_id})

    def join(self, room: str) -> None:
        self.call("POST", f"/_matrix/client/v3/join/{q(room)}", {})

    def say(self, room: str, text: str, *, thread: str | None = None, **extra: Any) -> str:
        self.txn += 1
        content: dict[str, Any] = {"msgtype": "m.text", "body": text, **extra}
        if thread:
            content["m.relates_to"] = {"rel_type": "m.thread", "event_id": thread}
        answer = self.call(
            "PUT",
            f"/_matrix/client/v3/rooms/{q(room)}/send/m.room.message/t{self.txn}-{time.time_ns()}",
            content,
        )
        return str(answer["event_id"])

    def timeline(self, room: str, limit: int = 100) -> list[dict[str, Any]]:
        """The room's events, oldest first."""
        answer = self.call(
            "GET", f"/_matrix/client/v3/rooms/{q(room)}/messages?dir=b&limit={limit}"
        )
        return list(reversed(answer.get("chunk", [])))

    def notices_from(self, room: str, sender: str) -> list[dict[str, Any]]:
        return [
            e
            for e in self.timeline(room)
            if e.get("type") == "m.room.message" and e.get("sender") == sender
        ]


def q(room: str) -> str:
    return urllib.parse.quote(room, safe="")
