"""The Swarm backend: each group a replicated service of the engine's swarm, one replica
while active, none when idle (stop scales to zero, start to one), labelled and hashed as
the Docker backend's containers are, so reconcile converges the same way.

Its runner dials the daemon (``hub.py``) over the internal overlay network named in
``runtime.swarm.network``, with a credential handed over as a Swarm secret
(``credentials.py``). Every call goes through ``call_engine``, as the Docker backend's.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.config.runtime import SwarmSettings
from orchestrator.errors import EngineError, InvalidConfig
from orchestrator.limits import RUNNER_FACTS_SECONDS, RUNNER_RECHECK_SECONDS
from orchestrator.runtime.base import (
    LABEL_GROUP,
    LABEL_HOME,
    LABEL_PROJECT,
    STARTING,
    ContainerBackend,
    ContainerEvent,
    ContainerInfo,
    ContainerSpec,
)
from orchestrator.runtime.docker import DockerBackend, cgroup_memory
from orchestrator.runtime.engine import call_engine
from orchestrator.runtime.swarm import addresses
from orchestrator.runtime.swarm.credentials import Authority, Peer
from orchestrator.runtime.swarm.hub import HubEndpoint, RelayEndpoint, RunnerHub
from orchestrator.runtime.swarm.service import (
    LABEL_CREDENTIAL,
    LABEL_NAME,
    LABEL_TASK_HOME,
    adapt_spec,
    api_version,
    replicas,
    runner_addresses,
    secret_name,
    service_body,
    service_name,
    service_state,
    task_problems,
)

if TYPE_CHECKING:
    import docker

    from orchestrator.config import OrchestratorConfig
    from orchestrator.home import Home
    from orchestrator.runtime.channel import RunnerEndpoint

log = logging.getLogger(__name__)
SWARM_DIR = "swarm"  # in state/: the runner CA, and runners.sock
STOP_POLL_SECONDS = 0.1


class SwarmBackend(ContainerBackend):
    def __init__(self, client: docker.DockerClient, home: Home, config: OrchestratorConfig):
        self.client = client
        self.api: Any = client.api  # the SDK's service, task and secret calls are untyped
        self.home = home
        self.config = config
        self.settings: SwarmSettings = config.runtime.swarm
        self.authority = Authority(home.state_dir / SWARM_DIR, home.identity)
        self.local = DockerBackend(client)  # one-off containers run on this node
        self.hub: RunnerHub | None = None
        self._node: str | None = None
        self._facts: dict[str, tuple[tuple[str, frozenset[str]] | None, float]] = {}
        self._lock = threading.Lock()

    @classmethod
    def open(
        cls, client: docker.DockerClient, config: OrchestratorConfig, home: Home | None
    ) -> SwarmBackend:
        if home is None:
            raise EngineError("the swarm backend is opened for a home (its runner CA is there)")
        return cls(client, home, config)

    # the swarm itself

    def node(self) -> str:
        """The id of this engine's node (where the daemon runs); EngineError when the
        engine is not a manager of an active swarm."""
        if self._node is None:
            info = call_engine("engine info", self.client.info)
            swarm = info.get("Swarm") or {}
            if swarm.get("LocalNodeState") != "active" or not swarm.get("ControlAvailable"):
                raise EngineError(
                    "runtime.backend is swarm, but this engine is not a manager of an "
                    f"active swarm (its state: {swarm.get('LocalNodeState') or 'unknown'})",
                    hint="run `docker swarm init` (or join this node as a manager), or set "
                    "runtime.backend: docker in orchestrator.yaml",
                )
            self._node = str(swarm.get("NodeID"))
        return self._node

    def network_subnets(self) -> list[addresses.Network]:
        """The runner network's subnets; InvalidConfig when it is missing, not an
        overlay, or has a route out."""
        from docker.errors import NotFound

        name = self.settings.network
        try:
            network = call_engine(f"inspect network {name}", lambda: self.api.inspect_network(name))
        except NotFound:
            raise InvalidConfig(
                f"runtime.swarm.network: no network {name!r} on this engine",
                hint=f"create it: docker network create -d overlay --internal --attachable "
                f"{name} (stack.yaml makes it)",
            ) from None
        if network.get("Driver") != "overlay" or not network.get("Internal"):
            raise InvalidConfig(
                f"runtime.swarm.network: {name!r} is not an internal overlay network "
                f"(driver {network.get('Driver')}, internal {network.get('Internal')}): "
                "groups on it would have a route out",
                hint=f"use a network made with: docker network create -d overlay --internal "
                f"--attachable {name}",
            )
        configs = (network.get("IPAM") or {}).get("Config") or []
        return addresses.networks(c["Subnet"] for c in configs if c.get("Subnet"))

    # what ContainerBackend asks

    def adapt(self, spec: ContainerSpec) -> ContainerSpec:
        return adapt_spec(spec, self.settings, self.node())

    def _service(self, name: str) -> dict[str, Any] | None:
        from docker.errors import NotFound

        service = service_name(name)
        try:
            found: dict[str, Any] = call_engine(
                f"inspect service {service}", lambda: self.api.inspect_service(service)
            )
        except NotFound:
            return None
        return found

    def _tasks(self, services: Sequence[str]) -> list[dict[str, Any]]:
        if not services:
            return []
        tasks: list[dict[str, Any]] = call_engine(
            "list tasks", lambda: self.api.tasks(filters={"service": list(services)})
        )
        return tasks

    def _info(
        self, service: Mapping[str, Any], tasks: Sequence[Mapping[str, Any]]
    ) -> ContainerInfo:
        spec = service.get("Spec", {})
        labels = dict(spec.get("Labels") or {})
        state, started, container = service_state(service, tasks)
        mounts = spec.get("TaskTemplate", {}).get("ContainerSpec", {}).get("Mounts") or []
        return ContainerInfo(
            name=labels.get(LABEL_NAME, str(spec.get("Name", ""))),
            id=container or str(service.get("ID", "")),
            state=state,
            labels=labels,
            started_at=started,
            image=str(spec.get("TaskTemplate", {}).get("ContainerSpec", {}).get("Image", "")),
            mounts=tuple(str(m.get("Source", "")) for m in mounts if m.get("Type") == "bind"),
        )

    def inspect(self, name: str) -> ContainerInfo | None:
        service = self._service(name)
        if service is None:
            return None
        return self._info(service, self._tasks([str(service["ID"])]))

    def list(self, labels: Mapping[str, str | None]) -> list[ContainerInfo]:
        filters = {"label": [k if v is None else f"{k}={v}" for k, v in labels.items()]}
        services = call_engine("list services", lambda: self.api.services(filters=filters))
        tasks = self._tasks([str(s["ID"]) for s in services])
        by_service: dict[str, list[dict[str, Any]]] = {}
        for task in tasks:
            by_service.setdefault(str(task.get("ServiceID")), []).append(task)
        return [self._info(s, by_service.get(str(s["ID"]), [])) for s in services]

    def create(self, spec: ContainerSpec) -> ContainerInfo:
        """The service, scaled to zero, with a new credential as its secret."""
        service = service_name(spec.name)
        folder = spec.labels.get(LABEL_GROUP, spec.name)
        credential = self.authority.issue(folder)
        secret = secret_name(service, credential.fingerprint)
        labels = {
            LABEL_NAME: spec.name,
            **{
                k: v
                for k, v in spec.labels.items()
                if k in (LABEL_GROUP, LABEL_HOME, LABEL_PROJECT)
            },
        }
        created = call_engine(
            f"create secret {secret}",
            lambda: self.api.create_secret(secret, credential.bundle, labels=labels),
        )
        version = api_version(self.api.api_version)
        body = service_body(
            spec,
            secret_id=str(created["ID"]),
            secret=secret,
            credential=credential.fingerprint,
            api_version=version,
        )
        try:
            call_engine(f"create service {service}", lambda: self.api.create_service(**body))
        except BaseException:
            self._remove_secrets(spec.name)  # ours, and any a failed create left before
            raise
        self._forget(folder)
        info = self.inspect(spec.name)
        if info is None:
            raise EngineError(f"service {service} vanished once made")
        return info

    def _scale(self, name: str, count: int, *, force: bool = False) -> None:
        service = self._service(name)
        if service is None:
            raise EngineError(f"no service for {name}", hint="it is made at the next start")
        spec = dict(service["Spec"])
        task = dict(spec["TaskTemplate"])
        if force:  # the same spec, tasks made again (Swarm gave up restarting them)
            task["ForceUpdate"] = int(task.get("ForceUpdate", 0)) + 1
        call_engine(
            f"scale {spec['Name']} to {count}",
            lambda: self.api.update_service(
                service["ID"],
                service["Version"]["Index"],
                task_template=task,
                name=spec["Name"],
                labels=spec.get("Labels"),
                mode={"Replicated": {"Replicas": count}},
                endpoint_spec=spec.get("EndpointSpec"),
                update_config=spec.get("UpdateConfig"),
                rollback_config=spec.get("RollbackConfig"),
            ),
        )

    def start(self, name: str) -> None:
        """Scale to one; a service that wants one already but whose tasks all ended
        (Swarm stopped restarting it) has its task made again."""
        info = self.inspect(name)
        if info is not None and info.state in ("running", STARTING):
            return  # one is wanted already, and Swarm is on it
        self._scale(name, 1, force=info is not None and info.state == "exited")

    def stop(self, name: str, timeout: int = 10) -> None:
        """Scale to zero and wait (up to ``timeout`` seconds and its grace period) until
        its task has stopped."""
        service = self._service(name)
        if service is None:
            return
        if replicas(service) != 0:
            self._scale(name, 0)
        deadline = time.monotonic() + timeout + 5
        while time.monotonic() < deadline:
            tasks = self._tasks([str(service["ID"])])
            if not any(t.get("Status", {}).get("State") == "running" for t in tasks):
                return
            time.sleep(STOP_POLL_SECONDS)

    def remove(self, name: str) -> None:
        """Remove the service and its credentials' secrets; a missing one is not an
        error."""
        from docker.errors import NotFound

        service = self._service(name)
        if service is not None:
            with contextlib.suppress(NotFound):
                call_engine(
                    f"remove service {service['Spec']['Name']}",
                    lambda: self.api.remove_service(service["ID"]),
                )
            folder = (service["Spec"].get("Labels") or {}).get(LABEL_GROUP)
            if folder:
                self._forget(folder)
        self._remove_secrets(name)

    def _remove_secrets(self, name: str) -> None:
        from docker.errors import APIError, NotFound

        filters = {"label": [f"{LABEL_NAME}={name}", f"{LABEL_HOME}={self.home.identity}"]}
        found: list[dict[str, Any]] = call_engine(
            "list secrets", lambda: self.api.secrets(filters=filters)
        )
        for secret in found:
            ident = str(secret["ID"])
            for _ in range(50):  # a secret stays in use until the service's tasks are gone
                try:
                    call_engine(f"remove secret {ident}", lambda: self.api.remove_secret(ident))  # noqa: B023
                    break
                except NotFound:
                    break
                except (EngineError, APIError):
                    time.sleep(0.1)

    # the runners' connections

    def admit(self, peer: Peer, address: str) -> str | None:
        """Why the runner port refuses a connection whose certificate names ``peer`` and
        which comes from ``address``: the certificate is not the one the group's service
        was given (a label of it: forged, or stale), or it does not come from that
        service's own task on the runner network (a credential taken elsewhere); None
        when it is the group's runner. What the engine says is believed for
        RUNNER_FACTS_SECONDS, and asked again (at most every RUNNER_RECHECK_SECONDS) when
        a connection does not match it (a task made again has a new address)."""
        facts = self._runner_facts(peer.group, fresh=False)
        if facts is None or facts[0] != peer.fingerprint or address not in facts[1]:
            facts = self._runner_facts(peer.group, fresh=True)
        if facts is None:
            return f"group {peer.group!r} has no service here"
        wanted, where = facts
        if wanted != peer.fingerprint:
            return f"not the credential group {peer.group!r} was given (forged or stale)"
        if address not in where:
            return (
                f"group {peer.group!r}'s credential from {address}, not from its own task "
                f"({', '.join(sorted(where)) or 'none running'})"
            )
        return None

    def _runner_facts(self, group: str, *, fresh: bool) -> tuple[str, frozenset[str]] | None:
        """(the fingerprint its service was given, its tasks' addresses on the runner
        network) of ``group``, or None when it has no service of this home."""
        from orchestrator.runtime.spec import container_name

        now = time.monotonic()
        with self._lock:
            cached = self._facts.get(group)
        if cached is not None:
            age = now - cached[1]
            if age < (RUNNER_RECHECK_SECONDS if fresh else RUNNER_FACTS_SECONDS):
                return cached[0]
        service = self._service(container_name(self.config.project, group))
        facts: tuple[str, frozenset[str]] | None = None
        if service is not None:
            labels = service["Spec"].get("Labels") or {}
            if labels.get(LABEL_HOME) == self.home.identity and labels.get(LABEL_CREDENTIAL):
                tasks = self._tasks([str(service["ID"])])
                facts = (labels[LABEL_CREDENTIAL], runner_addresses(tasks, self.settings.network))
        with self._lock:
            self._facts[group] = (facts, now)
        return facts

    def _forget(self, group: str) -> None:
        with self._lock:
            self._facts.pop(group, None)

    def runner_endpoint(self, runtime_dir: Path) -> RunnerEndpoint:
        group = runtime_dir.name
        if self.hub is not None:
            return HubEndpoint(self.hub, group)
        return RelayEndpoint(self.home.state_dir / SWARM_DIR / "runners.sock", group)

    def serve(self, image: Callable[[], str]) -> None:
        """Check the deployment (a manager of an active swarm, the runner network, this
        process on it, the groups' storage seen alike on every node), then open the
        runner port on this process's addresses on the runner network."""
        from orchestrator.runtime.swarm.storage import check_storage

        self.node()
        subnets = self.network_subnets()
        mine = addresses.inside(addresses.local_addresses(), subnets)
        if not mine:
            raise InvalidConfig(
                f"the daemon is not attached to the runner network {self.settings.network!r}: "
                "its groups' runners could not reach it",
                hint="run the daemon as a service of the swarm on that network (stack.yaml), "
                "or attach its container: docker network connect NETWORK CONTAINER",
            )
        problems = check_storage(self, image())
        if problems:
            raise InvalidConfig(
                "the groups' storage is not the same on every node that may run them: "
                + "; ".join(problems),
                hint="mount the home at the same path on every node (NFS, CephFS), or pin "
                "the groups to the nodes that have it (runtime.swarm.constraints)",
            )

        hub = RunnerHub(
            self.authority,
            self.admit,
            server_name=self.settings.daemon,
            hosts=mine,
            port=self.settings.port,
            relay_dir=self.home.state_dir / SWARM_DIR,
        )
        hub.start()
        self.hub = hub

    def close(self) -> None:
        if self.hub is not None:
            self.hub.close()
            self.hub = None

    def listen_hosts(self, host: str) -> tuple[str, ...]:
        """A wildcard becomes every address of this process but those on the runner
        network; an address on it is refused."""
        subnets = self.network_subnets()
        if host in ("0.0.0.0", "::", ""):
            found = addresses.outside(addresses.local_addresses(), subnets, v6=host == "::")
            return tuple(found)
        if _is_address(host) and addresses.inside([host], subnets):
            raise InvalidConfig(
                f"{host} is on the runner network {self.settings.network!r}: the groups' "
                "containers would reach that listener",
                hint="listen on another address, or on 0.0.0.0 (every address but those)",
            )
        return (host,)

    # the rest, as the Docker backend does it where it can

    def logs(self, name: str, *, follow: bool = False, tail: int | None = None) -> Iterator[str]:
        """The service's log lines (every task's); a service with no task running also
        says why, from its tasks' states."""
        service = self._service(name)
        if service is None:
            return
        tasks = self._tasks([str(service["ID"])])
        if not any(t.get("Status", {}).get("State") == "running" for t in tasks):
            yield from task_problems(tasks)
        stream = call_engine(
            f"logs {name}",
            lambda: self.api.service_logs(
                service["ID"],
                stdout=True,
                stderr=True,
                follow=follow,
                tail=str(tail) if tail is not None else "all",
            ),
        )
        for raw in stream:
            text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
            yield from text.splitlines()

    def events(self, labels: Mapping[str, str]) -> Iterator[ContainerEvent]:
        """The events of the services' task containers on this node (by their home and
        project; ``name`` is the group's container name); after a stream ends a
        ``resync`` event asks to re-list."""
        wanted = {LABEL_TASK_HOME if k == LABEL_HOME else k: v for k, v in labels.items()}
        filters = {"type": "container", "label": [f"{k}={v}" for k, v in wanted.items()]}
        since = time.time()
        while True:
            try:
                for event in self.client.events(decode=True, filters=filters, since=int(since)):
                    stamp = event.get("timeNano", 0) / 1e9 or float(event.get("time", 0))
                    since = max(since, stamp)
                    attrs = event.get("Actor", {}).get("Attributes", {})
                    yield ContainerEvent(
                        action=str(event.get("Action", event.get("status", ""))),
                        name=attrs.get(LABEL_NAME),
                        labels={
                            LABEL_HOME if k == LABEL_TASK_HOME else k: v
                            for k, v in attrs.items()
                            if k.startswith("org.")
                        },
                        time=stamp,
                    )
            except Exception as exc:
                from orchestrator.runtime.engine import is_transient

                if not is_transient(exc):
                    raise
                time.sleep(1.0)
            yield ContainerEvent("resync", None, {}, time.time())

    def memory_usage(self, name: str) -> int | None:
        """Its running task's memory when that task is on this node; None elsewhere."""
        info = self.inspect(name)
        if info is None or not info.running:
            return None
        found = cgroup_memory(info.id)
        if found is not None:
            return found
        return self.local.memory_usage(info.id)

    def memory_usages(
        self, containers: Sequence[ContainerInfo], deadline: float
    ) -> dict[str, int | None]:
        out = {c.name: cgroup_memory(c.id) if c.running else None for c in containers}
        return out

    def run_once(self, spec: ContainerSpec, timeout: float) -> tuple[int, str]:
        """A container of its own on this node (a probe of a group's image: none of its
        mounts, no network), as the Docker backend runs it."""
        return self.local.run_once(replace(spec, placement=()), timeout)

    def engine_facts(self) -> dict[str, object]:
        facts = self.local.engine_facts()
        info = call_engine("engine info", self.client.info)
        swarm = info.get("Swarm") or {}
        facts.update(
            swarm=swarm.get("LocalNodeState"),
            node=swarm.get("NodeID"),
            managers=swarm.get("Managers"),
            nodes=swarm.get("Nodes"),
        )
        return facts


def _is_address(text: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True
