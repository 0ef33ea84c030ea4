"""What the Swarm tests share: the engine put in swarm mode for the session and left as
it was found, and a deployment of stack.yaml (the daemon as a service on its runner
network) for one home, with its own images' tags, network and stack, removed after.

Under CI=true an engine that cannot run a swarm, or a machine without the docker CLI
(``docker stack deploy``), fails the run; elsewhere those tests are skipped."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.runtime.base import LABEL_PROJECT
from tests.engineclean import labelled_containers

ROOT = Path(__file__).parent.parent
TOKEN = "swarm-test-token-0123456789"
GATEWAY_BRIDGE = "docker_gwbridge"  # made by `swarm init`, left behind by `swarm leave`


def unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and the swarm tests must run: {reason}")
    pytest.skip(reason)


def advertise_address() -> str:
    """This machine's address on its default route (no packet is sent), else loopback:
    what `swarm init` advertises when the machine has several."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.250", 9))
        return str(probe.getsockname()[0])
    except OSError:
        return "127.0.0.1"
    finally:
        probe.close()


@contextlib.contextmanager
def swarm_mode(client: Any) -> Iterator[None]:
    """The engine in swarm mode for the block: put there when it was not, and then
    taken out again (with the gateway bridge swarm made), so the engine is left as it
    was found. A swarm that was already active is used and left alone."""
    from docker.errors import APIError

    state = client.info().get("Swarm", {}).get("LocalNodeState")
    had_bridge = bool(client.networks.list(names=[GATEWAY_BRIDGE]))
    if state == "active" and not client.info()["Swarm"].get("ControlAvailable"):
        unavailable("this engine is a swarm worker, not a manager")
    made = state != "active"
    if made:
        try:
            client.swarm.init(advertise_addr=advertise_address())
        except APIError as exc:
            unavailable(f"`swarm init` failed on this engine: {exc.explanation}")
    try:
        yield
    finally:
        if made:
            client.swarm.leave(force=True)
            if not had_bridge:
                for network in client.networks.list(names=[GATEWAY_BRIDGE]):
                    with contextlib.suppress(APIError):
                        network.remove()


def docker_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    done = subprocess.run(
        ["docker", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
    )
    if done.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


class Deployment:
    """stack.yaml deployed for ``home`` as stack ``project`` (its runner network
    ``<project>-runners``), running ``agent`` and ``daemon``: ``<repository>:latest``
    tags of the test's own, which no build elsewhere on the engine moves."""

    def __init__(self, client: Any, project: str, home: Path, agent: str, daemon: str) -> None:
        self.client = client
        self.project = project
        self.home = home
        self.network = f"{project}-runners"
        self.agent_repository = agent.removesuffix(":latest")
        self.daemon_image = daemon

    def config(self, extra: str = "") -> str:
        """orchestrator.yaml of the home: the swarm backend on this deployment's network."""
        return (
            f"project: {self.project}\nimage: {self.agent_repository}\n"
            f"runtime:\n  backend: swarm\n  swarm:\n    network: {self.network}\n" + extra
        )

    def up(self, timeout: float = 180) -> None:
        """Deploy the stack and wait until the daemon answers on the home's socket."""
        from orchestrator.home import Home
        from orchestrator.service import daemon_running

        docker_cli(
            "stack",
            "deploy",
            "-c",
            str(ROOT / "stack.yaml"),
            self.project,
            env={
                "ORCHESTRATOR_HOME": str(self.home),
                "ORCHESTRATOR_HTTP_TOKEN": TOKEN,
                "ORCHESTRATOR_HTTP_PORT": str(_free_port()),
                "ORCHESTRATOR_RUNNER_NETWORK": self.network,
                "ORCHESTRATOR_DAEMON_IMAGE": self.daemon_image,
            },
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if daemon_running(Home(self.home)):
                return
            time.sleep(0.5)
        raise AssertionError("the daemon never answered: " + self.daemon_logs()[-4000:])

    def daemon_logs(self) -> str:
        """The daemon's log (it writes to stderr)."""
        done = subprocess.run(
            ["docker", "service", "logs", "--raw", f"{self.project}_orchestrator"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        return done.stdout + done.stderr

    def daemon_container(self) -> Any:
        return self.container_of(f"{self.project}_orchestrator")

    def service(self, folder: str) -> dict[str, Any]:
        (found,) = self.client.api.services(
            filters={
                "label": [f"{LABEL_PROJECT}={self.project}", f"org.orchestrator.group={folder}"]
            }
        )
        return dict(found)

    def container_of(self, service: str, timeout: float = 60) -> Any:
        """The container of ``service``'s running task (waiting for one)."""
        deadline = time.monotonic() + timeout
        while True:
            for task in self.client.api.tasks(
                filters={"service": service, "desired-state": "running"}
            ):
                status = task.get("Status", {})
                if status.get("State") == "running":
                    return self.client.containers.get(status["ContainerStatus"]["ContainerID"])
            assert time.monotonic() < deadline, f"no task of {service} runs"
            time.sleep(0.2)

    def group_container(self, folder: str) -> Any:
        return self.container_of(self.service(folder)["ID"])

    def cli_inside(self, *args: str, check: bool = True) -> str:
        """``orchestrator --home HOME ARGS`` in the daemon's container (as an operator
        runs commands on Swarm: `docker exec`); its output (its exit code checked)."""
        result = self.daemon_container().exec_run(
            ["orchestrator", "--home", str(self.home), *args],
            environment={"ORCHESTRATOR_PROJECT": self.project},
            stderr=False,
        )
        assert result.exit_code == 0 or not check, result.output.decode()
        return str(result.output.decode())

    def send(self, folder: str, text: str) -> str:
        """A message through the daemon's CLI socket (from this host), and its answer."""
        done = subprocess.run(
            [".venv/bin/orchestrator", "--home", str(self.home), "send", folder, text],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, "ORCHESTRATOR_PROJECT": self.project},
            timeout=300,
        )
        assert done.returncode == 0, done.stderr + self.daemon_logs()[-3000:]
        return done.stdout.strip()

    def down(self) -> None:
        """Remove the stack, the home's services and secrets, the network, the tags."""
        from docker.errors import APIError, NotFound

        with contextlib.suppress(AssertionError):
            docker_cli("stack", "rm", self.project)
        label = f"{LABEL_PROJECT}={self.project}"
        for service in self.client.api.services(filters={"label": label}):
            with contextlib.suppress(NotFound):
                self.client.api.remove_service(service["ID"])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if not labelled_containers(
                self.client, f"com.docker.stack.namespace={self.project}"
            ) and not labelled_containers(self.client, label):
                break
            time.sleep(0.5)
        for secret in self.client.api.secrets(filters={"label": label}):
            with contextlib.suppress(APIError):
                self.client.api.remove_secret(secret["ID"])
        for name in (self.network, f"{self.project}_public"):
            for _ in range(40):
                try:
                    self.client.api.remove_network(name)
                    break
                except NotFound:
                    break
                except APIError:
                    time.sleep(0.5)  # its endpoints go a moment after the containers


def inside(container: Any, code: str, *, user: str = "") -> Any:
    """Run Python in ``container`` (as its own user unless ``user``); the JSON it prints."""
    result = container.exec_run(["python3", "-c", textwrap.dedent(code)], user=user)
    assert result.exit_code == 0, result.output.decode()
    return json.loads(result.output.decode().strip().splitlines()[-1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def forged_credential(group: str, home_id: str, trusted_ca: bytes) -> bytes:
    """A credential naming ``group`` of ``home_id``, signed by a CA of its own, that
    trusts ``trusted_ca`` (the daemon's), so that only the daemon can tell."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    def name(cn: str) -> x509.Name:
        return x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, home_id),
                x509.NameAttribute(NameOID.COMMON_NAME, cn),
            ]
        )

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name(group))
        .issuer_name(name("forger"))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return (
        cert.public_bytes(pem)
        + key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        + trusted_ca
    )
