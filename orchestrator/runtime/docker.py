"""The Docker backend, through the Docker SDK (never the docker CLI).

Containers are made with ``containers.create()`` + ``start()`` (``run()`` would pull a
missing image) and bind mounts whose host folders exist beforehand. Every call goes
through ``call_engine``: transient faults are retried, refusals are reported.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import TYPE_CHECKING, Any

from orchestrator.errors import EngineError
from orchestrator.runtime.base import ContainerBackend, ContainerEvent, ContainerInfo, ContainerSpec
from orchestrator.runtime.engine import call_engine, is_transient

if TYPE_CHECKING:
    import docker
    from docker.models.containers import Container

log = logging.getLogger(__name__)
RECONNECT_DELAY_SECONDS = 1.0
# inspects a listing makes at once (the SDK keeps 10 connections to the engine)
LIST_INSPECTS_AT_ONCE = 8


def _parse_time(value: str | None) -> float | None:
    if not value or value.startswith("0001-"):
        return None
    # Docker gives nanoseconds; datetime takes microseconds.
    head, _, frac = value.rstrip("Z").partition(".")
    text = head + (f".{frac[:6]}" if frac else "") + "+00:00"
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def _info(container: Container) -> ContainerInfo:
    attrs = container.attrs
    state = attrs.get("State", {})
    name = attrs.get("Name", container.name or "").lstrip("/")
    return ContainerInfo(
        name=name,
        id=container.id or "",
        state=str(state.get("Status", "unknown")),
        labels=dict(attrs.get("Config", {}).get("Labels") or {}),
        started_at=_parse_time(state.get("StartedAt")) if state.get("Running") else None,
        image=str(attrs.get("Config", {}).get("Image", "")),
        mounts=tuple(str(m.get("Source", "")) for m in attrs.get("Mounts") or []),
    )


class DockerBackend(ContainerBackend):
    def __init__(self, client: docker.DockerClient) -> None:
        self.client = client

    def _get(self, name: str) -> Container | None:
        from docker.errors import NotFound

        try:
            return call_engine(f"inspect {name}", lambda: self.client.containers.get(name))
        except NotFound:
            return None

    def create(self, spec: ContainerSpec) -> ContainerInfo:
        from docker.types import Mount

        mounts = [
            Mount(target=m.target, source=m.source, type="bind", read_only=m.read_only)
            for m in spec.mounts
        ]
        kwargs: dict[str, Any] = {
            "name": spec.name,
            "command": list(spec.command),
            "user": spec.user,
            "labels": dict(spec.labels),
            "mounts": mounts,
            "environment": dict(spec.environment),
            "tmpfs": dict(spec.tmpfs),
            "working_dir": spec.working_dir,
            "hostname": spec.hostname,
            "network_mode": spec.network_mode,
            "mem_limit": spec.memory_bytes,
            "memswap_limit": spec.memory_bytes,  # no swap beyond the memory limit
            "nano_cpus": spec.nano_cpus,
            "pids_limit": spec.pids_limit,
            "read_only": spec.read_only_rootfs,
            "init": spec.init,
            "cap_drop": list(spec.cap_drop),
            "security_opt": list(spec.security_opt),
            "ipc_mode": "private",
            "detach": True,
        }
        container = call_engine(
            f"create {spec.name}", lambda: self.client.containers.create(spec.image, **kwargs)
        )
        return _info(container)

    def start(self, name: str) -> None:
        call_engine(f"start {name}", lambda: self.client.api.start(name))

    def stop(self, name: str, timeout: int = 10) -> None:
        from docker.errors import NotFound

        with contextlib.suppress(NotFound):
            call_engine(f"stop {name}", lambda: self.client.api.stop(name, timeout=timeout))

    def remove(self, name: str) -> None:
        from docker.errors import NotFound

        with contextlib.suppress(NotFound):
            call_engine(
                f"remove {name}",
                lambda: self.client.api.remove_container(name, force=True, v=True),
            )

    def inspect(self, name: str) -> ContainerInfo | None:
        container = self._get(name)
        return _info(container) if container is not None else None

    def list(self, labels: Mapping[str, str | None]) -> list[ContainerInfo]:
        """The containers with ``labels``, each inspected (the listing alone has no start
        time): the inspects run a few at a time, and a container removed between the
        listing and its inspect is left out."""
        filters: dict[str, str | list[str] | bool] = {
            "label": [k if v is None else f"{k}={v}" for k, v in labels.items()]
        }
        listed = call_engine(
            "list containers", lambda: self.client.api.containers(all=True, filters=filters)
        )
        ids = [str(row["Id"]) for row in listed]
        if len(ids) > 1:
            with ThreadPoolExecutor(min(LIST_INSPECTS_AT_ONCE, len(ids))) as pool:
                found = list(pool.map(self._get, ids))
        else:
            found = [self._get(i) for i in ids]
        return [_info(c) for c in found if c is not None]

    def logs(self, name: str, *, follow: bool = False, tail: int | None = None) -> Iterator[str]:
        since: float | None = None
        first = True
        while True:
            container = self._get(name)
            if container is None:
                return
            kwargs: dict[str, Any] = {"stream": True, "follow": follow, "timestamps": True}
            if first:
                kwargs["tail"] = tail if tail is not None else "all"
            elif since is not None:
                kwargs["since"] = since
            try:
                for raw in container.logs(**kwargs):
                    for line in raw.decode("utf-8", "replace").splitlines():
                        stamp, _, text = line.partition(" ")
                        parsed = _parse_time(stamp)
                        if parsed is not None:
                            if since is not None and parsed <= since:
                                continue  # already shown before the stream was re-established
                            since = parsed
                        yield text
            except Exception as exc:
                if not is_transient(exc):
                    raise
                log.warning("log stream of %s broke (%s); re-establishing", name, exc)
            first = False
            if not follow:
                return
            current = self._get(name)
            if current is None or not _info(current).running:
                return
            time.sleep(RECONNECT_DELAY_SECONDS)

    def events(self, labels: Mapping[str, str]) -> Iterator[ContainerEvent]:
        filters = {"type": "container", "label": [f"{k}={v}" for k, v in labels.items()]}
        since = time.time()
        while True:
            try:
                stream = self.client.events(decode=True, filters=filters, since=int(since))
                for event in stream:
                    stamp = event.get("timeNano", 0) / 1e9 or float(event.get("time", 0))
                    since = max(since, stamp)
                    attrs = event.get("Actor", {}).get("Attributes", {})
                    yield ContainerEvent(
                        action=str(event.get("Action", event.get("status", ""))),
                        name=attrs.get("name"),
                        labels={k: v for k, v in attrs.items() if k.startswith("org.")},
                        time=stamp,
                    )
            except Exception as exc:
                if not is_transient(exc):
                    raise
                log.warning("event stream broke (%s); re-establishing", exc)
                time.sleep(RECONNECT_DELAY_SECONDS)
            # The stream ended (engine restart): tell the caller to re-list the state.
            yield ContainerEvent("resync", None, {}, time.time())

    def run_once(self, spec: ContainerSpec, timeout: float) -> tuple[int, str]:
        self.create(spec)
        try:
            self.start(spec.name)
            container = self._get(spec.name)
            if container is None:
                raise EngineError(f"{spec.name} vanished before it ended")
            try:
                status = container.wait(timeout=timeout)
            except Exception:
                raise EngineError(f"{spec.name} did not end within {timeout:.0f} s") from None
            output = call_engine(
                f"logs {spec.name}", lambda: container.logs(stdout=True, stderr=False)
            )
            text = output.decode(errors="replace") if isinstance(output, bytes) else ""
            return int(status.get("StatusCode", -1)), text
        finally:
            self.remove(spec.name)

    def memory_usage(self, name: str) -> int | None:
        from docker.errors import NotFound

        try:
            stats = call_engine(
                f"stats {name}", lambda: self.client.api.stats(name, stream=False, one_shot=True)
            )
        except NotFound:
            return None
        usage = stats.get("memory_stats", {}).get("usage")
        return int(usage) if usage is not None else None

    def memory_usages(
        self, containers: Sequence[ContainerInfo], deadline: float
    ) -> dict[str, int | None]:
        """From the containers' cgroups where this host can read them (no engine call:
        the engine's stats take about a second each), else stats calls in parallel."""
        out = {c.name: cgroup_memory(c.id) for c in containers}
        missing = [c for c in containers if out[c.name] is None]
        if missing:
            out.update(super().memory_usages(missing, deadline))
        return out

    def engine_facts(self) -> dict[str, object]:
        info = call_engine("engine info", self.client.info)
        version = call_engine("engine version", self.client.version)
        options = [str(o) for o in info.get("SecurityOptions") or []]
        components = " ".join(str(c.get("Name", "")) for c in version.get("Components") or [])
        return {
            "rootless": any("rootless" in o for o in options),
            "podman": "podman" in components.lower()
            or "podman" in str(info.get("OperatingSystem", "")).lower(),
            "version": version.get("Version"),
            "api_version": version.get("ApiVersion"),
        }


# Where Docker puts a container's memory cgroup: v1 and v2, cgroupfs and systemd drivers.
_CGROUP_DIRS = (
    ("/sys/fs/cgroup/memory/docker/{id}", "memory.usage_in_bytes", "total_inactive_file"),
    (
        "/sys/fs/cgroup/memory/system.slice/docker-{id}.scope",
        "memory.usage_in_bytes",
        "total_inactive_file",
    ),
    ("/sys/fs/cgroup/docker/{id}", "memory.current", "inactive_file"),
    ("/sys/fs/cgroup/system.slice/docker-{id}.scope", "memory.current", "inactive_file"),
)


def cgroup_memory(container_id: str) -> int | None:
    """The container's memory as `docker stats` shows it (usage less inactive page
    cache), read from its cgroup; None when this host cannot see it."""
    if not container_id:
        return None
    for folder, usage_file, inactive_key in _CGROUP_DIRS:
        base = folder.format(id=container_id)
        try:
            with open(f"{base}/{usage_file}") as handle:
                usage = int(handle.read().strip())
            inactive = 0
            with open(f"{base}/memory.stat") as handle:
                for line in handle:
                    key, _, value = line.partition(" ")
                    if key == inactive_key:
                        inactive = int(value)
                        break
        except (OSError, ValueError):
            continue
        return max(0, usage - inactive)
    return None
