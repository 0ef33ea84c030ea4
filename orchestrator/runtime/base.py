"""The container backend interface: what the lifecycle and reconcile logic need of an engine.

Docker (``runtime/docker.py``) is the first backend, Docker Swarm (``runtime/swarm/``)
the second; a fake (``runtime/fake.py``) serves unit tests of the logic above them. A
Kubernetes backend would implement the same methods.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

LABEL_PROJECT = "org.orchestrator.project"
LABEL_GROUP = "org.orchestrator.group"
LABEL_CONFIG_HASH = "org.orchestrator.config-hash"
# the hash of the spec but its image: a container whose image alone changed (a new
# release) is made again at its group's next turn, not at once (runtime.reconcile)
LABEL_SETTINGS_HASH = "org.orchestrator.settings-hash"
LABEL_HOME = "org.orchestrator.home"  # the identity of the home whose group it runs
# States beside the engine's container states (created, running, exited, ...), for a
# backend that keeps a stopped group's container: scaled to zero (Swarm), and wanted
# running while the engine is still bringing it up.
IDLE, STARTING = "idle", "starting"


@dataclass(frozen=True)
class BindMount:
    source: str  # absolute host path; it exists before the container is created
    target: str  # path inside the container
    read_only: bool


@dataclass(frozen=True)
class ContainerSpec:
    """Everything the engine needs to create one group container. A pure value."""

    name: str
    image: str
    command: tuple[str, ...]
    user: str
    labels: Mapping[str, str]
    mounts: tuple[BindMount, ...]
    environment: Mapping[str, str]
    tmpfs: Mapping[str, str]
    working_dir: str
    hostname: str
    network_mode: str
    memory_bytes: int
    nano_cpus: int
    pids_limit: int
    read_only_rootfs: bool = True
    init: bool = True
    cap_drop: tuple[str, ...] = ("ALL",)
    security_opt: tuple[str, ...] = ("no-new-privileges",)
    # where a backend that schedules across machines may run it (Swarm constraints)
    placement: tuple[str, ...] = ()


@dataclass(frozen=True)
class ContainerInfo:
    """What the engine reports about one container."""

    name: str
    id: str
    # created | running | paused | restarting | removing | exited | dead; idle | starting
    state: str
    labels: Mapping[str, str] = field(default_factory=dict)
    started_at: float | None = None  # unix time
    image: str = ""
    mounts: tuple[str, ...] = ()  # host paths mounted into it

    @property
    def home(self) -> str | None:
        return self.labels.get(LABEL_HOME)

    @property
    def running(self) -> bool:
        return self.state == "running"

    @property
    def group(self) -> str | None:
        return self.labels.get(LABEL_GROUP)

    @property
    def config_hash(self) -> str | None:
        return self.labels.get(LABEL_CONFIG_HASH)

    @property
    def settings_hash(self) -> str | None:
        return self.labels.get(LABEL_SETTINGS_HASH)


@dataclass(frozen=True)
class ContainerEvent:
    """A container state change, or ``resync`` after a stream was re-established."""

    action: str  # start | die | stop | destroy | create | kill | oom | resync | ...
    name: str | None
    labels: Mapping[str, str]
    time: float


if TYPE_CHECKING:
    from orchestrator.runtime.channel import RunnerEndpoint


if TYPE_CHECKING:
    import docker

    from orchestrator.config import OrchestratorConfig
    from orchestrator.home import Home


class ContainerBackend(abc.ABC):
    """Create, start, stop, remove, list by labels, inspect, logs, events, memory use."""

    @classmethod
    def open(
        cls, client: docker.DockerClient, config: OrchestratorConfig, home: Home | None
    ) -> ContainerBackend:
        """The backend on the engine's ``client`` for ``home`` (open_backend calls this;
        a backend that keeps state in the home needs it)."""
        return cls(client)  # type: ignore[call-arg]

    @abc.abstractmethod
    def create(self, spec: ContainerSpec) -> ContainerInfo: ...

    @abc.abstractmethod
    def start(self, name: str) -> None: ...

    @abc.abstractmethod
    def stop(self, name: str, timeout: int = 10) -> None: ...

    @abc.abstractmethod
    def remove(self, name: str) -> None:
        """Remove the container (forcing a running one); a missing one is not an error."""

    @abc.abstractmethod
    def inspect(self, name: str) -> ContainerInfo | None: ...

    @abc.abstractmethod
    def list(self, labels: Mapping[str, str | None]) -> list[ContainerInfo]:
        """All containers (any state) carrying every one of ``labels`` (a None value:
        the label with any value)."""

    @abc.abstractmethod
    def logs(self, name: str, *, follow: bool = False, tail: int | None = None) -> Iterator[str]:
        """Log lines; with ``follow`` the stream is re-established if it ends early."""

    @abc.abstractmethod
    def events(self, labels: Mapping[str, str]) -> Iterator[ContainerEvent]:
        """Container events; after a stream ends a ``resync`` event asks to re-list."""

    @abc.abstractmethod
    def memory_usage(self, name: str) -> int | None:
        """Bytes of memory the running container uses, or None."""

    def run_once(self, spec: ContainerSpec, timeout: float) -> tuple[int, str]:
        """Run ``spec`` (its command) in a container of its own to its end, and remove
        it; (exit code, stdout). Backends that cannot say so."""
        from orchestrator.errors import EngineError

        raise EngineError(f"this container backend cannot run {spec.name} to its end")

    def memory_usages(
        self, containers: Sequence[ContainerInfo], deadline: float
    ) -> dict[str, int | None]:
        """Memory of many containers at once, by name; what is not known when
        ``deadline`` (time.monotonic()) comes is None. Backends that can read it more
        cheaply than one call per container override this."""
        from concurrent.futures import ThreadPoolExecutor, wait

        out: dict[str, int | None] = {c.name: None for c in containers}
        if not containers:
            return out
        pool = ThreadPoolExecutor(max_workers=min(16, len(containers)))
        futures = {pool.submit(self.memory_usage, c.name): c.name for c in containers}
        done, _ = wait(futures, timeout=max(0.0, deadline - time.monotonic()))
        pool.shutdown(wait=False, cancel_futures=True)
        for future in done:
            if future.exception() is None:
                out[futures[future]] = future.result()
        return out

    def engine_facts(self) -> dict[str, object]:
        """Facts that change how containers must run (rootless, podman)."""
        return {}

    def runner_endpoint(self, runtime_dir: Path) -> RunnerEndpoint:
        """How the host reaches the runner of the group whose runtime folder is
        ``runtime_dir``: here, the Unix socket the runner makes there."""
        from orchestrator.runtime.channel import SOCKET_NAME, UnixSocketEndpoint

        return UnixSocketEndpoint(runtime_dir / SOCKET_NAME)

    def adapt(self, spec: ContainerSpec) -> ContainerSpec:
        """``spec`` as this backend runs it, before its hash is taken: unchanged here; a
        backend whose runners dial in drops the runner's socket folder and says where
        to dial."""
        return spec

    def serve(self, image: Callable[[], str]) -> None:
        """Start what the daemon serves for this backend while it runs (a dial-in
        backend's runner port); nothing for Docker. Refuses (an OrchestratorError) when
        the deployment cannot work, before any group is started; ``image()`` (the agent
        image) is what a check on the engine's machines may run."""
        return None

    def close(self) -> None:
        """Stop what ``serve`` started."""
        return None

    def listen_hosts(self, host: str) -> tuple[str, ...]:
        """The addresses a listener of the daemon given ``host`` (the HTTP API's, the
        metrics') binds: ``host`` itself here; a backend whose groups share a network
        with the daemon keeps a wildcard off that network."""
        return (host,)

    def prepare_storage(self, spec: ContainerSpec) -> None:
        """Make the storage ``spec`` mounts ready where its container will run. The
        group's folders on this host are made (through the confined file layer) before
        this is called, which is all the Docker backend needs; a backend that runs
        containers on other machines checks here that they see the same files."""
        return None
